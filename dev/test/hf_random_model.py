"""dev/test/hf_random_model.py -- a small random Hugging Face model made and saved by transformers itself, for the
optional transformers tiers (dev/test/hf_check.sh, dev/eval/check_reference.sh) to import with scripts/import_hf.py.

  python dev/test/hf_random_model.py gpt2 OUT_DIR [--positions P] [--seed S]
      GPT2LMHeadModel: 2 layers, 4 heads, C 64, V 50257, gelu_new, no dropout, initializer_range 0.2 (spread-out
      weights, so losses and choices are far from uniform).
  python dev/test/hf_random_model.py llama OUT_DIR [--positions P] [--seed S] [--llama3-scaling F,LOW,HIGH,ORIG]
      LlamaForCausalLM: 2 layers, 4 query heads and 2 key/value heads (grouped-query), C 64, SwiGLU of 160, untied
      head, rms_norm_eps 1e-5 (the trainer's), rope_theta 10000, V 50257; with --llama3-scaling, rope_scaling of
      rope_type "llama3" (factor, low and high frequency factors, original context).

The weights come from torch.manual_seed(S) (default 0) and transformers' initialisation; the directory is written
by save_pretrained (safetensors). Needs torch and transformers (requirements/interop-check.txt).
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["gpt2", "llama"])
    ap.add_argument("out")
    ap.add_argument("--positions", type=int, default=64, help="context length (n_positions / max_position_embeddings)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--llama3-scaling", default="", help="F,LOW,HIGH,ORIG: llama3 rope_scaling (llama only)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    if a.kind == "gpt2":
        if a.llama3_scaling:
            ap.error("--llama3-scaling is for llama models")
        cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=a.positions, vocab_size=50257,
                         activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         initializer_range=0.2)
        model = GPT2LMHeadModel(cfg)
    else:
        extra = {}
        if a.llama3_scaling:
            f, low, high, orig = a.llama3_scaling.split(",")
            extra["rope_scaling"] = dict(rope_type="llama3", factor=float(f), low_freq_factor=float(low),
                                         high_freq_factor=float(high), original_max_position_embeddings=int(orig))
        cfg = LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=a.positions, vocab_size=50257,
                          rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.2,
                          bos_token_id=50256, eos_token_id=50256, **extra)
        model = LlamaForCausalLM(cfg)
    model.eval().save_pretrained(a.out, safe_serialization=True)


if __name__ == "__main__":
    main()
