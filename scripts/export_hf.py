#!/usr/bin/env python3
"""
scripts/export_hf.py -- our model file -> a Hugging Face GPT2LMHeadModel or LlamaForCausalLM directory.

Usage: python3 scripts/export_hf.py MODEL.bin OUTDIR [--dtype auto|fp32|bf16]

Input: a model file of this project (e.g. OUT/model_00001200.bin from `./train_gpt_cpu -o OUT`): GPT-2 (fp32
version 3 or bf16 version 5) or the decoder family's Llama member (version 9 or 10 with norm=rms, pos=rope,
mlp=swiglu, bias=0; tied or untied head; any key/value heads KV dividing NH). Output: OUTDIR (must not exist, or be
an empty directory), written as OUTDIR.tmp and renamed when complete. For GPT-2, with
  config.json              GPT2LMHeadModel: n_layer, n_head, n_embd, n_positions = n_ctx = maxT, vocab_size = V
                           (the real vocabulary, not Vp), activation gelu_new (tanh GELU), layer_norm_epsilon 1e-5,
                           tied LM head, no dropout (as trained here)
  model.safetensors        HF names (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...), linear
                           weights transposed to Conv1D's (in, out); wte without the padded rows V..Vp-1;
                           metadata format=pt (what transformers expects)
  generation_config.json   bos/eos = <|endoftext|> (50256)
  vocab.json, merges.txt   GPT-2's BPE, copied from the bundled dev/data/gpt2/encoder.json and vocab.bpe
  tokenizer_config.json    (tokenizer files only when V = 50257, GPT-2's vocabulary; otherwise a note is printed)
For the Llama member (scripts/llama_hf.py has the tensor table), with
  config.json              LlamaForCausalLM: hidden_size C, intermediate_size F, num_attention_heads NH,
                           num_key_value_heads KV, head_dim C/NH, num_hidden_layers L, max_position_embeddings maxT,
                           vocab_size V (the real vocabulary), rms_norm_eps 1e-5, rope_theta (the file's fp32
                           theta), rope_scaling null, hidden_act silu, attention_bias and mlp_bias false,
                           tie_word_embeddings as the file's head
  model.safetensors        model.embed_tokens.weight, model.layers.{l}.{input_layernorm, self_attn.{q,k,v,o}_proj,
                           post_attention_layernorm, mlp.{gate,up,down}_proj}.weight, model.norm.weight and, when
                           untied, lm_head.weight: nn.Linear's (out, in) as in our file (no transpose); q/k/v are
                           the qkvw rows [q NH hs | k KV hs | v KV hs], gate/up the fcw rows [gate F | up F]
  generation_config.json, vocab.json, merges.txt, tokenizer_config.json   as for GPT-2 (when V = 50257)
Refused with one line naming the knob: a family file whose knobs Llama does not have (norm=layernorm, pos=learned,
mlp=gelu or relu2, bias=1, qknorm=1) and mixture-of-experts files (versions 7, 8, and 9/10 with experts).
--dtype: auto (default) keeps the file's precision (v3, v9 -> float32; v5, v10 -> bfloat16); bf16 or fp32 chooses.
bf16 -> fp32 is exact; fp32 -> bf16 rounds to nearest even.
Loading it: transformers.GPT2LMHeadModel (or LlamaForCausalLM, or AutoModelForCausalLM).from_pretrained(OUTDIR),
AutoTokenizer.from_pretrained(OUTDIR).
Errors (missing or damaged model file, OUTDIR not empty, safetensors missing) print one line and exit 1.
Needs numpy and safetensors (requirements/interop.txt); not torch.
"""
import argparse
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_hf as g  # noqa: E402
import llama_hf as lh  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2_BPE_DIR = os.path.join(REPO, "dev", "data", "gpt2")


def hf_tensors(cfg, params, out_bf16, src_bf16):
    """{HF name: (safetensors dtype, array)} from our params; transposes for Conv1D, drops wte's padding"""
    def conv(a):
        if out_bf16:
            return ("bfloat16", a if src_bf16 else g.f32_to_bf16(a))
        return ("float32", g.bf16_to_f32(a) if src_bf16 else a.astype(np.float32, copy=False))

    out = {"transformer.wte.weight": conv(np.ascontiguousarray(params["wte"][: cfg["V"]]))}
    for ours, hf in g.GLOBAL_MAP:
        out["transformer." + hf] = conv(params[ours])
    for l in range(cfg["L"]):
        for ours, hf, transpose in g.LAYER_MAP:
            a = params[ours][l]
            out[f"transformer.h.{l}.{hf}"] = conv(np.ascontiguousarray(a.T if transpose else a))
    return out


def hf_config(cfg, out_bf16):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg["V"],
        "n_positions": cfg["maxT"],
        "n_ctx": cfg["maxT"],
        "n_embd": cfg["C"],
        "n_layer": cfg["L"],
        "n_head": cfg["NH"],
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": g.GPT2_EOT,
        "eos_token_id": g.GPT2_EOT,
        "torch_dtype": "bfloat16" if out_bf16 else "float32",
    }


def peek_version(path):
    """header[1] of the file at path (0 when it has fewer than 8 bytes or is missing: the readers then say why)"""
    try:
        h = np.fromfile(path, dtype="<i4", count=2)
    except OSError:
        return 0
    return int(h[1]) if len(h) == 2 and h[0] == g.MODEL_MAGIC else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="our model file -> Hugging Face GPT2LMHeadModel (GPT-2 files) or "
                                             "LlamaForCausalLM (the decoder family's Llama member) directory")
    ap.add_argument("model", help="model .bin (GPT-2: fp32 v3 or bf16 v5; Llama-style family: fp32 v9 or bf16 v10, "
                                  "with Llama-3 rope scaling v11 or v12)")
    ap.add_argument("outdir", help="output directory (must not exist, or be empty)")
    ap.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default="auto",
                    help="weights in model.safetensors (auto: as in the model file)")
    a = ap.parse_args(argv)

    out = a.outdir.rstrip("/") or a.outdir
    if os.path.exists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        die_msg = "is a file" if not os.path.isdir(out) else "is a directory that is not empty"
        g.die(f"{out} {die_msg}; export_hf.py writes a new directory and overwrites nothing (give a new OUTDIR)")
    g.import_safetensors()
    if peek_version(a.model) in lh.FAMILY_VERSIONS:
        cfg, version, arch, params = lh.read_family_model_file(a.model)
        why = lh.refusal(arch)
        if why:
            g.die(f"{a.model}: a decoder-family model with {why}: Hugging Face Llama has no such knob; only the "
                  f"Llama member (norm=rms, pos=rope, mlp=swiglu, bias=0) is exported")
        src_bf16 = lh.version_is_bf16(version)
    else:
        cfg, version, params = g.read_model_file(a.model)
        arch = None
        src_bf16 = version == g.VERSION_BF16
    out_bf16 = src_bf16 if a.dtype == "auto" else a.dtype == "bf16"

    tmp = out + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    if arch is None:
        g.write_safetensors(os.path.join(tmp, "model.safetensors"), hf_tensors(cfg, params, out_bf16, src_bf16),
                            {"format": "pt"})
        g.write_json(os.path.join(tmp, "config.json"), hf_config(cfg, out_bf16))
    else:
        g.write_safetensors(os.path.join(tmp, "model.safetensors"),
                            lh.export_tensors(cfg, arch, params, out_bf16, src_bf16), {"format": "pt"})
        g.write_json(os.path.join(tmp, "config.json"),
                     lh.export_config(cfg, arch, out_bf16, g.GPT2_EOT if cfg["V"] == g.GPT2_VOCAB else None))
    g.write_json(os.path.join(tmp, "generation_config.json"),
                 {"bos_token_id": g.GPT2_EOT, "eos_token_id": g.GPT2_EOT})
    if cfg["V"] == g.GPT2_VOCAB:
        # HF's vocab.json and merges.txt are GPT-2's encoder.json and vocab.bpe, byte for byte
        shutil.copyfile(os.path.join(GPT2_BPE_DIR, "encoder.json"), os.path.join(tmp, "vocab.json"))
        shutil.copyfile(os.path.join(GPT2_BPE_DIR, "vocab.bpe"), os.path.join(tmp, "merges.txt"))
        g.write_json(os.path.join(tmp, "tokenizer_config.json"), {
            "tokenizer_class": "GPT2Tokenizer", "model_max_length": cfg["maxT"], "add_prefix_space": False,
            "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})
        tok = "vocab.json, merges.txt (GPT-2 BPE)"
    else:
        tok = f"no tokenizer files (vocabulary {cfg['V']} is not GPT-2's {g.GPT2_VOCAB})"
    if os.path.isdir(out):
        os.rmdir(out)  # empty, checked above
    os.replace(tmp, out)
    heads = 1 if arch is None or arch["tied"] else 2  # wte, and lmheadw when untied, drop their padded rows
    n = sum(int(np.prod(p.shape)) for p in params.values()) - heads * (cfg["Vp"] - cfg["V"]) * cfg["C"]
    if arch is None:
        print(f"exported {a.model} (L={cfg['L']} NH={cfg['NH']} C={cfg['C']} maxT={cfg['maxT']} V={cfg['V']}, "
              f"{n:,} parameters without the {cfg['Vp'] - cfg['V']} padded vocabulary rows) to {out}/ as "
              f"{'bfloat16' if out_bf16 else 'float32'}; {tok}")
    else:
        print(f"exported {a.model} as LlamaForCausalLM (L={cfg['L']} NH={cfg['NH']} KV={arch['KV']} C={cfg['C']} "
              f"F={arch['F']} maxT={cfg['maxT']} V={cfg['V']} theta={arch['theta']:g} "
              f"{'tied' if arch['tied'] else 'untied'} head, {n:,} parameters without the padded vocabulary rows) "
              f"to {out}/ as {'bfloat16' if out_bf16 else 'float32'}; {tok}")


if __name__ == "__main__":
    main()
