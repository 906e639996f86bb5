#!/usr/bin/env python3
"""
scripts/import_hf.py -- a local Hugging Face GPT-2, Llama or Mistral directory -> our model file, to fine-tune it
with `./train_gpt_cpu -e MODEL.bin` (or ./train_gpt).

Usage: python3 scripts/import_hf.py HF_DIR MODEL.bin [--dtype auto|fp32|bf16]

Input: HF_DIR with config.json (model_type gpt2, llama or mistral) and the weights as model.safetensors, a sharded
model.safetensors.index.json, or pytorch_model.bin (that one needs torch). Names with or without the
"transformer." prefix (GPT2LMHeadModel or GPT2Model). Output: MODEL.bin (must not exist), written as
MODEL.bin.tmp and renamed: version 3 (fp32) or 5 (bf16), the vocabulary padded to Vp = V rounded up to 128 with
zero rows, Conv1D weights transposed back to our (out, in).
--dtype: auto (default) writes bf16 when every tensor is bf16, fp32 otherwise (fp16 -> fp32 is exact);
fp32 -> bf16 rounds to nearest even.
Refused with one line: another architecture (model_type not gpt2, llama or mistral), or a GPT-2 variant our model
does not compute (activation other than tanh GELU, layer_norm_epsilon not 1e-5, n_inner not 4*n_embd, attention
scaled by layer, an untied LM head), missing or misshapen tensors, an existing MODEL.bin.

Llama and Mistral (model_type llama or mistral: LlamaForCausalLM, MistralForCausalLM, or a bare LlamaModel with a
tied head; names with or without "model."): written as a decoder-family file, version 9 (fp32) or 10 (bf16), with
norm=rms, pos=rope, theta = rope_theta (stored as fp32: exact for every integer up to 2^24, e.g. 10000, 500000,
1000000), mlp=swiglu with F = intermediate_size, KV = num_key_value_heads, bias=0, tied = tie_word_embeddings
(Llama's default: false), maxT = max_position_embeddings; q/k/v_proj stacked into qkvw's rows, gate/up_proj into
fcw's, the vocabulary padded to Vp with zero rows in embed_tokens and lm_head (scripts/llama_hf.py has the table).
Refused with one line naming the field: rms_norm_eps other than 1e-5 (the trainer's RMSNorm epsilon is a constant),
rope_scaling other than none/default (the model file has no field for Llama-3 "llama3", linear or dynamic scaling),
a sliding_window below max_position_embeddings, head_dim other than hidden_size / num_attention_heads, an odd head
size, hidden_act other than silu, attention_bias or mlp_bias (or any tensor the model does not have: biases,
QK-norm), sizes beyond the trainer's limits (Vp <= 2^24, maxT <= 2^20, L <= 4096, C <= 2^17). A vocabulary above
65536 imports (the header allows Vp up to 2^24), but token shards hold uint16 ids, so ids >= 65536 never appear
in training data: a note says so.
Needs numpy and safetensors (requirements/interop.txt).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_hf as g  # noqa: E402
import llama_hf as lh  # noqa: E402

TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")


def read_config(d):
    path = os.path.join(d, "config.json")
    if not os.path.isfile(path):
        g.die(f"{path}: no such file (expected a Hugging Face model directory with config.json)")
    try:
        with open(path, encoding="utf-8") as f:
            c = json.load(f)
    except (OSError, ValueError) as e:
        g.die(f"{path}: not valid JSON ({e})")
    mt = c.get("model_type")
    if mt in lh.LLAMA_TYPES:
        return lh.import_config(path, c)
    if mt != "gpt2":
        arch = ",".join(c.get("architectures") or []) or "no architectures"
        g.die(f"{path}: model_type '{mt}' ({arch}) is not GPT-2, Llama or Mistral; import_hf.py converts those only "
              f"(model_type gpt2, llama or mistral)")
    try:
        cfg = dict(L=int(c["n_layer"]), NH=int(c["n_head"]), C=int(c["n_embd"]), V=int(c["vocab_size"]),
                   maxT=int(c.get("n_positions", c.get("n_ctx"))))
    except (KeyError, TypeError, ValueError) as e:
        g.die(f"{path}: missing or bad GPT-2 field {e} (expected n_layer, n_head, n_embd, vocab_size, n_positions)")
    cfg["Vp"] = g.padded_vocab(cfg["V"])
    checks = [
        (c.get("activation_function", "gelu_new") in TANH_GELUS,
         f"activation_function '{c.get('activation_function')}' (this model computes the tanh GELU: gelu_new)"),
        (abs(float(c.get("layer_norm_epsilon", 1e-5)) - 1e-5) < 1e-12,
         f"layer_norm_epsilon {c.get('layer_norm_epsilon')} (this model uses 1e-5)"),
        (c.get("n_inner") in (None, 4 * cfg["C"]), f"n_inner {c.get('n_inner')} (this model uses 4*n_embd)"),
        (c.get("scale_attn_weights", True) and not c.get("scale_attn_by_inverse_layer_idx", False),
         "attention scaling other than 1/sqrt(head size)"),
        (c.get("tie_word_embeddings", True), "an untied LM head (tie_word_embeddings false)"),
        (cfg["C"] % cfg["NH"] == 0 and min(cfg.values()) > 0, f"sizes {cfg} (n_embd divisible by n_head expected)"),
    ]
    for ok, what in checks:
        if not ok:
            g.die(f"{path}: {what} is not supported; import_hf.py converts standard GPT-2 models only")
    return cfg, None


def read_weights(d):
    """-> {name without 'transformer.': (dtype string, array)} from safetensors (single or sharded) or torch"""
    st = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "model.safetensors.index.json")
    pt = os.path.join(d, "pytorch_model.bin")
    if os.path.isfile(st):
        raw = g.read_safetensors(st)
    elif os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        raw = {}
        for s in shards:
            raw.update(g.read_safetensors(os.path.join(d, s)))
    elif os.path.isfile(pt):
        try:
            import torch
        except ImportError:
            g.die(f"{pt}: reading pytorch_model.bin needs torch (pip install -r requirements/reference.txt), "
                  f"or save the model with safe_serialization=True")
        try:
            sd = torch.load(pt, map_location="cpu", weights_only=True)
        except TypeError:  # torch < 1.13 has no weights_only
            sd = torch.load(pt, map_location="cpu")
        raw = {}
        for k, t in sd.items():
            if t.dtype == torch.bfloat16:
                raw[k] = ("BF16", t.contiguous().view(torch.int16).numpy().view(np.uint16))
            else:
                raw[k] = ("F32", t.float().numpy())
    else:
        g.die(f"{d}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")
    return {(k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in raw.items()}


def import_llama(a, cfg, arch, w, out_bf16):
    """writes the Llama/Mistral weights w as a version 9 (fp32) or 10 (bf16) family file, 11/12 with Llama-3 rope
    scaling (scripts/llama_hf.py)"""
    params = lh.import_params(a.hf_dir, cfg, arch, w, out_bf16)
    version = lh.family_version(arch, out_bf16)
    lh.write_family_model_file(a.model, cfg, arch, version, params)
    note = f"; note: V={cfg['V']} > 65536, token shards (uint16) cannot hold ids >= 65536" if cfg["V"] > 65536 else ""
    print(f"imported {a.hf_dir} as the Llama-style family (L={cfg['L']} NH={cfg['NH']} KV={arch['KV']} C={cfg['C']} "
          f"F={arch['F']} maxT={cfg['maxT']} V={cfg['V']} padded to Vp={cfg['Vp']}, theta={arch['theta']:g}"
          f"{lh.scaling_word(arch)}, "
          f"{'tied' if arch['tied'] else 'untied'} head) to {a.model} as version {version} "
          f"({'bf16' if out_bf16 else 'fp32'}){note}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Hugging Face GPT-2 / Llama / Mistral directory -> our model file")
    ap.add_argument("hf_dir", help="local directory with config.json and model.safetensors (or pytorch_model.bin)")
    ap.add_argument("model", help="output model .bin (must not exist)")
    ap.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default="auto",
                    help="model file version: fp32 (3; 9 for Llama/Mistral) or bf16 (5; 10); auto: bf16 when the "
                         "weights are all bf16")
    a = ap.parse_args(argv)
    if os.path.exists(a.model):
        g.die(f"{a.model} exists; import_hf.py overwrites nothing (give a new output path)")
    cfg, arch = read_config(a.hf_dir)
    w = read_weights(a.hf_dir)
    out_bf16 = all(dt == "BF16" for dt, _ in w.values()) if a.dtype == "auto" else a.dtype == "bf16"
    if arch is not None:
        import_llama(a, cfg, arch, w, out_bf16)
        return

    def get(name, shape):
        return g.take_tensor(w, name, shape, a.hf_dir, "a GPT-2 state dict", out_bf16)

    L, C, V, Vp = cfg["L"], cfg["C"], cfg["V"], cfg["Vp"]
    if "lm_head.weight" in w:  # stored by some savers although tied: it must be the embedding
        wte = w.get("wte.weight", (None, None))[1]
        if wte is None or w["lm_head.weight"][1].shape != wte.shape or \
                not np.array_equal(w["lm_head.weight"][1], wte):
            g.die(f"{a.hf_dir}: lm_head.weight differs from wte.weight; an untied LM head is not supported")
    shapes = dict(g.param_shapes(L, C, V, cfg["maxT"]))
    params = {}
    wte = get("wte.weight", (V, C))
    params["wte"] = np.zeros((Vp, C), dtype=wte.dtype)  # padded rows are zero, as the trainer initialises them
    params["wte"][:V] = wte
    for ours, hf in g.GLOBAL_MAP:
        params[ours] = get(hf, shapes[ours])
    for ours, hf, transpose in g.LAYER_MAP:
        s = shapes[ours][1:]
        per = [get(f"h.{l}.{hf}", s[::-1] if transpose else s) for l in range(L)]
        params[ours] = np.stack([p.T if transpose else p for p in per])
    write_version = g.VERSION_BF16 if out_bf16 else g.VERSION_FP32
    g.write_model_file(a.model, cfg, write_version, params)
    print(f"imported {a.hf_dir} (L={L} NH={cfg['NH']} C={C} maxT={cfg['maxT']} V={V}, padded to Vp={Vp}) to "
          f"{a.model} as version {write_version} ({'bf16' if out_bf16 else 'fp32'})")


if __name__ == "__main__":
    main()
