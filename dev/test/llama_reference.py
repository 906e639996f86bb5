#!/usr/bin/env python3
"""
dev/test/llama_reference.py -- an independent numpy forward of a Hugging Face LlamaForCausalLM directory (what
scripts/export_hf.py writes for the decoder family), used by dev/test/cli_hf.sh to check the trainer's loss and greedy
tokens without torch or transformers.

Usage: python3 dev/test/llama_reference.py HF_DIR WINDOW.bin B T LOG.jsonl SAMPLE.txt G LABEL [--mutants]

Reads only HF_DIR (config.json and model.safetensors, float32 or bfloat16) and implements transformers'
modeling_llama.py math in float64:
  RMSNorm        w * x / sqrt(mean(x^2) + rms_norm_eps)                                       (LlamaRMSNorm)
  rotary         inv_freq[i] = rope_theta^(-2i/hs), i < hs/2; cos/sin of t * inv_freq duplicated to hs;
                 q' = q cos + rotate_half(q) sin, rotate_half(x) = [-x[hs/2:], x[:hs/2]]     (apply_rotary_pos_emb)
                 with config.json's rope_scaling of rope_type "llama3" (transformers' documented Llama-3 rule,
                 written here from the formula: L = original_max_position_embeddings, wavelength 2 pi / inv_freq):
                 wavelength < L / high_freq_factor keeps inv_freq, > L / low_freq_factor divides it by factor,
                 between them (ends included) (1 - s) inv_freq / factor + s inv_freq with
                 s = (L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
  attention      causal softmax(q k^T / sqrt(hs)) v; query head h reads kv head h // (NH/KV)   (repeat_kv)
  MLP            down(silu(gate(x)) * up(x))                                                  (LlamaMLP)
  head           lm_head.weight, or embed_tokens.weight when tie_word_embeddings
WINDOW.bin: a token shard of B*T+1 tokens; the loss is the mean cross-entropy of tokens[1:] given tokens[:-1] as
B rows of T. LOG.jsonl: the trainer's log of `-x 1 -l 0 -v 1 -m 1` on that window, whose {"kind":"val","step":0}
record holds our loss with 9 significant digits (an fp32 printed exactly). SAMPLE.txt: the trainer's output with
`-g G --temperature 0`, whose "sample (from <|endoftext|>): ..." line holds G greedy tokens.
Prints TAP lines: the loss within 1e-5 relative (the derivation is in dev/test/cli_hf.sh), the G greedy tokens equal
(with the smallest top-2 logit margin along the way, so a near tie would show as the cause). --mutants also computes
the loss with plausible conversion bugs (q/k rotated with the interleaved pairing (2i, 2i+1), kv heads tiled instead
of repeat_kv's order, gate and up swapped, RMSNorm weights ignored, rope_theta 10000; with Llama-3 rope scaling
also the scaling ignored and its middle band's blend reversed, s <-> 1 - s) and checks each moves the
loss by more than 100 times the tolerance, so the comparison can tell them apart.
Exit status 1 when a check fails; errors in the inputs print one line and exit 1.
"""
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import gpt2_hf as g  # noqa: E402

TOL = 1e-5


def load(hf_dir):
    """-> (config dict, {name without 'model.': float64 array})"""
    with open(os.path.join(hf_dir, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    c["_dir"] = hf_dir
    w = {}
    for k, (dt, a) in g.read_safetensors(os.path.join(hf_dir, "model.safetensors")).items():
        a = g.bf16_to_f32(a) if dt == "BF16" else a
        w[k[len("model."):] if k.startswith("model.") else k] = a.astype(np.float64)
    return c, w


def hf_dir_of(c):
    return c.get("_dir", "config.json")


def llama3_inv_freq(inv, sc, blend="s"):
    """inv_freq (float64) under the rope_scaling dict sc of rope_type "llama3" (module comment); blend "1-s" is the
    mutant that swaps the middle band's weights"""
    L, factor = float(sc["original_max_position_embeddings"]), float(sc["factor"])
    lo, hi = float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
    wavelength = 2.0 * np.pi / inv
    s = (L / wavelength - lo) / (hi - lo)
    if blend != "s":
        s = 1.0 - s
    high_band, low_band = wavelength < L / hi, wavelength > L / lo
    return np.select([high_band, low_band], [inv, inv / factor], (1.0 - s) * inv / factor + s * inv)


def forward(c, w, tokens, rope="half", kv="repeat", swap_gate_up=False, norm_weights=True, theta=None,
            scaling="llama3"):
    """logits (B, T, V) float64 of tokens (B, T) int; the keyword arguments select the mutants (module comment)"""
    C, NH, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    KV = c.get("num_key_value_heads") or NH
    hs, eps = C // NH, c["rms_norm_eps"]
    theta = c["rope_theta"] if theta is None else theta
    B, T = tokens.shape

    def rms(x, wt):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
        return y * wt if norm_weights else y

    inv = 1.0 / theta ** (np.arange(0, hs, 2, dtype=np.float64) / hs)
    sc = c.get("rope_scaling")
    if sc and scaling != "ignored":
        if sc.get("rope_type", sc.get("type")) != "llama3":
            g.die(f"{hf_dir_of(c)}: rope_scaling {sc} is not llama3 (the only one this reference implements)")
        inv = llama3_inv_freq(inv, sc, "1-s" if scaling == "reversed" else "s")
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # (T, hs/2)
    cos, sin = np.cos(ang), np.sin(ang)

    def rotate(x):  # x (B, H, T, hs)
        if rope == "half":
            x1, x2 = x[..., :hs // 2], x[..., hs // 2:]
            return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # the interleaved (GPT-J) pairing: a wrong permutation
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        return out

    x = w["embed_tokens.weight"][tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = f"layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(B, T, KV, hs).transpose(0, 2, 1, 3)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(B, T, KV, hs).transpose(0, 2, 1, 3)
        q, k = rotate(q), rotate(k)
        if kv == "repeat":  # repeat_kv: kv head j serves query heads j*g .. j*g+g-1
            k, v = np.repeat(k, NH // KV, axis=1), np.repeat(v, NH // KV, axis=1)
        else:  # tiled: query head h reads kv head h % KV
            k, v = np.tile(k, (1, NH // KV, 1, 1)), np.tile(v, (1, NH // KV, 1, 1))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        a = (s / s.sum(axis=-1, keepdims=True)) @ v  # (B, NH, T, hs)
        x = x + a.transpose(0, 2, 1, 3).reshape(B, T, C) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        if swap_gate_up:
            gate, up = up, gate
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w["embed_tokens.weight"] if c.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return rms(x, w["norm.weight"]) @ head.T


def loss(c, w, x, y, **kw):
    lg = forward(c, w, x, **kw)
    m = lg.max(axis=-1, keepdims=True)
    lse = (m + np.log(np.exp(lg - m).sum(axis=-1, keepdims=True)))[..., 0]
    return float(np.mean(lse - np.take_along_axis(lg, y[..., None], axis=-1)[..., 0]))


def main():
    hf_dir, win, B, T, log, sample, G, label = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5]), sys.argv[5], \
        sys.argv[6], int(sys.argv[7]), sys.argv[8]
    c, w = load(hf_dir)
    toks = np.fromfile(win, dtype="<u2", offset=1024).astype(np.int64)
    if toks.size < B * T + 1:
        g.die(f"{win}: {toks.size} tokens, need B*T+1 = {B * T + 1}")
    x, y = toks[:B * T].reshape(B, T), toks[1:B * T + 1].reshape(B, T)
    ours = None
    for line in open(log, encoding="utf-8"):
        r = json.loads(line)
        if r.get("kind") == "val" and r.get("step") == 0:
            ours = float(r["val_loss"])
    m = re.search(r"^sample \(from <\|endoftext\|>\): ([0-9 ]+)$", open(sample, encoding="utf-8").read(), re.M)
    if ours is None or not m:
        print(f"not ok - {label}: no step-0 val record in {log} or no sample line in {sample}")
        sys.exit(1)
    ref = loss(c, w, x, y)
    rel = abs(ours - ref) / abs(ref)
    ok = rel <= TOL
    print(f"{'ok' if ok else 'not ok'} - {label}: loss on {B}x{T} tokens: trainer {ours:.9g}, numpy Llama "
          f"{ref:.9g} (relative difference {rel:.1e} <= {TOL:g})")
    ids, margins = [g.GPT2_EOT], []
    for _ in range(G):
        last = forward(c, w, np.array([ids]))[0, -1]
        top = np.sort(last)[-2:]
        margins.append(top[1] - top[0])
        ids.append(int(np.argmax(last)))
    ours_ids = [int(t) for t in m.group(1).split()]
    same = ours_ids == ids[1:]
    print(f"{'ok' if same else 'not ok'} - {label}: {G} greedy tokens equal: trainer {ours_ids}, numpy {ids[1:]} "
          f"(smallest top-2 logit margin {min(margins):.2e})")
    good = ok and same
    if "--mutants" in sys.argv:
        mutants = {"interleaved rotary pairing": dict(rope="interleaved"), "kv heads tiled": dict(kv="tile"),
                   "gate and up swapped": dict(swap_gate_up=True), "RMSNorm weights ignored": dict(norm_weights=False),
                   "rope_theta 10000": dict(theta=10000.0)}
        if c.get("rope_scaling"):
            mutants.update({"rope scaling ignored": dict(scaling="ignored"),
                            "llama3 middle band blended 1-s": dict(scaling="reversed")})
        if (c.get("num_key_value_heads") or c["num_attention_heads"]) in (1, c["num_attention_heads"]):
            del mutants["kv heads tiled"]  # the same model with one kv head or none shared
        far = {n: abs(loss(c, w, x, y, **kw) - ref) / abs(ref) for n, kw in mutants.items()}
        apart = all(d > 100 * TOL for d in far.values())
        print(f"{'ok' if apart else 'not ok'} - {label}: each plausible conversion bug moves the numpy loss by more "
              f"than 100x the tolerance: " + ", ".join(f"{n} {d:.1e}" for n, d in far.items()))
        good = good and apart
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
