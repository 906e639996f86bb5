#!/usr/bin/env python3
"""
dev/test/eval_reference.py -- an independent reference for the trainer's -h 1 scores (dev/test/cli_eval.sh).

Written from the formats' descriptions (llmc/README.md, "File formats"), sharing no code with llmc/eval.h or the
trainer: reads a GPT-2 model file (version 3, fp32, the layout of train_gpt.py's param_shapes: wte, wpe, ln1w, ln1b,
qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb) and an eval file (version 1
uint16 or 2 uint32), runs GPT-2's forward in float64 numpy (LayerNorm eps 1e-5, tanh GELU, causal attention, the
tied head over the first V logits) on every (context ++ ending) sequence, and scores each example as llm.c's
HellaSwag evaluation: the losses of the ending tokens given everything before them (the target at position t is
token t+1, so the first ending token is predicted at the context's last position), the lowest mean loss ("acc")
and the lowest sum ("acc_sum_logprob") win, ties to the lowest ending. A sequence longer than T+1 tokens keeps its
last T+1 (as the trainer does). Prints one JSON line: {"n", "correct_mean", "correct_sum", "chance_sum",
"margin"}; margin is the smallest gap between the best and the second-best mean loss (a gap near float32
round-off would make a comparison with the fp32 trainer meaningless).

Usage: python3 dev/test/eval_reference.py MODEL.bin EVAL.bin T MAX_EXAMPLES
"""
import json
import struct
import sys

import numpy as np


def read_model(path):
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    if h[0] != 20240326 or h[1] != 3:
        sys.exit(f"{path}: magic/version {h[0]}/{h[1]}, expected 20240326/3 (fp32 GPT-2)")
    maxT, V, L, NH, C, Vp = h[2:8]
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, 3 * C, C)),
              ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)),
              ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)),
              ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    flat = np.frombuffer(raw, dtype="<f4", offset=1024).astype(np.float64)
    p, o = {}, 0
    for name, s in shapes:
        n = int(np.prod(s))
        p[name] = flat[o:o + n].reshape(s)
        o += n
    if o != flat.size:
        sys.exit(f"{path}: {flat.size} parameters, the GPT-2 layout has {o}")
    return p, dict(V=V, L=L, NH=NH, C=C)


def read_eval(path):
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    dt = "<u2" if h[1] == 1 else "<u4"
    w = np.frombuffer(raw, dtype=dt, offset=1024).astype(np.int64)
    out, i = [], 0
    for _ in range(h[2]):
        label, K, lc = int(w[i + 3]), int(w[i + 4]), int(w[i + 5])
        ctx = list(w[i + 6:i + 6 + lc])
        j = i + 6 + lc
        ends = []
        for _ in range(K):
            le = int(w[j])
            ends.append(list(w[j + 1:j + 1 + le]))
            j += 1 + le
        out.append((ctx, ends, label))
        i = j
    return out


def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


def token_losses(p, d, toks):
    """per-position cross entropy of toks[1:] given toks[:-1] (nats)"""
    x_in, y = np.array(toks[:-1]), np.array(toks[1:])
    T, C, NH = len(x_in), d["C"], d["NH"]
    x = p["wte"][x_in] + p["wpe"][:T]
    hs = C // NH
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(d["L"]):
        a = layernorm(x, p["ln1w"][l], p["ln1b"][l]) @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = (a[:, i * C:(i + 1) * C].reshape(T, NH, hs).transpose(1, 0, 2) for i in range(3))
        att = q @ k.transpose(0, 2, 1) / np.sqrt(hs) + causal
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y_att = (att @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y_att @ p["attprojw"][l].T + p["attprojb"][l]
        hdn = layernorm(x, p["ln2w"][l], p["ln2b"][l]) @ p["fcw"][l].T + p["fcb"][l]
        hdn = 0.5 * hdn * (1 + np.tanh(np.sqrt(2 / np.pi) * (hdn + 0.044715 * hdn ** 3)))
        x = x + hdn @ p["fcprojw"][l].T + p["fcprojb"][l]
    logits = layernorm(x, p["lnfw"], p["lnfb"]) @ p["wte"][:d["V"]].T
    m = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(-1)) + m[:, 0]
    return lse - logits[np.arange(T), y]


def main():
    model, evalf, T, nmax = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    p, d = read_model(model)
    ex = read_eval(evalf)
    ex = ex[:nmax] if nmax > 0 else ex
    r = dict(n=0, correct_mean=0, correct_sum=0, chance_sum=0.0, margin=float("inf"))
    for ctx, ends, label in ex:
        means, sums = [], []
        for e in ends:
            toks = (ctx + e)[-(T + 1):]
            le = min(len(e), len(toks) - 1)
            s = token_losses(p, d, toks)[-le:].sum()  # the last le targets are the ending's tokens
            sums.append(s)
            means.append(s / le)
        order = sorted(means)
        r["margin"] = min(r["margin"], order[1] - order[0])
        r["n"] += 1
        r["correct_mean"] += int(np.argmin(means)) == label
        r["correct_sum"] += int(np.argmin(sums)) == label
        r["chance_sum"] += 1.0 / len(ends)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
