#!/usr/bin/env python3
"""
train_gpt.py -- the PyTorch reference GPT-2 for this project.

Two jobs:
  (a) `--write-fixture`: write the test fixture that test_gpt.cu checks the C/CUDA
      trainer against (dev/test/fixtures/gpt2_fixture_model.bin, _state.bin).
  (b) train on our token shards for side-by-side comparison with the C trainer,
      printing loss, ms and tokens/s per step and a final
      `RESULT tokens_per_s=<median>` line.

The model is a compact nanoGPT-style GPT-2 that matches the C trainer exactly:
  params (fp32), file order, L layers stacked per tensor:
    wte (Vp,C)  wpe (maxT,C)  ln1w ln1b (L,C)  qkvw (L,3C,C)  qkvb (L,3C)
    attprojw (L,C,C)  attprojb (L,C)  ln2w ln2b (L,C)  fcw (L,4C,C)  fcb (L,4C)
    fcprojw (L,C,4C)  fcprojb (L,C)  lnfw lnfb (C)
  Linear weights are (out,in); qkv rows are [q|k|v]; LayerNorm eps 1e-5; GELU
  tanh approximation; causal attention with scale 1/sqrt(hs); LM head tied to
  wte: logits = lnf @ wte^T over Vp columns, loss over the first V columns only.
  Vp = V rounded up to a multiple of 128; padded rows of wte are zero.

Init (identical to llmc/rand.h in C): torch.manual_seed(seed); then for each
tensor in file order and for each layer (or once for non-layer tensors), on a
contiguous float32 tensor of exactly that slice's shape:
  wte: normal_(0, 0.02) on the first V rows only; wpe, qkvw, fcw: normal_(0, 0.02);
  attprojw, fcprojw: normal_(0, 0.02/sqrt(2L)); biases 0; LayerNorm weights 1.

File formats (little-endian, int32 header[256]):
  model     [0]=20240326 [1]=3 (fp32) [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp; params fp32
  state     [0]=20240327 [1]=2 [2]=B [3]=T [4]=n_steps [5..10]=fp32 bits of lr, beta1,
            beta2, eps, weight_decay, grad_clip; body: inputs int32 (B*T), targets int32
            (B*T), logits fp32 (B,T,V), loss fp32, grads fp32 (all params, file layout),
            step_losses fp32 (n_steps)
  shard     [0]=20240520 [1]=1 (uint16 tokens) or 2 (uint32 tokens) [2]=ntok; ntok tokens

Fixture optimizer semantics (what the C trainer must reproduce): global grad
norm over all params, torch.nn.utils.clip_grad_norm_ scales every grad by
min(1, grad_clip / (norm + 1e-6)); torch.optim.AdamW with two groups (weight
decay on wte, wpe, qkvw, attprojw, fcw, fcprojw; 0 on biases/LayerNorm), decoupled
decay p *= 1 - lr*wd before the Adam step, bias-corrected moments, t from 1.
The fixture's clip (0.5) is active on all 10 steps (norms 1.76 .. 1.04).

Runs with torch 1.13 (CPU) and torch 2.x (CUDA; --compile uses torch.compile).
Errors (bad files, bad flags) exit non-zero with one clear message.
"""
import argparse
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3
STATE_MAGIC, STATE_VERSION = 20240327, 2
SHARD_MAGIC = 20240520
SHARD_WIDTH = {1: 2, 2: 4}  # shard version -> bytes per token id (llmc/dataloader.h)
HEADER_INTS = 256

PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "qnormw", "knormw", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lmheadw"]  # lmheadw: tied=0 only;
# qnormw, knormw: qknorm=1 only
MOE_NAMES = ["routerw", "efcw", "efcb", "efcprojw", "efcprojb"]  # after the dense ones (llmc/model_file.h)
MLP_NAMES = {"fcw", "fcb", "fcprojw", "fcprojb"}
DECAY_NAMES = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw", "routerw", "efcw", "efcprojw", "lmheadw"}
MODEL_VERSION_MOE_FP32 = 7
MODEL_VERSION_ARCH_FP32 = 9  # the decoder family: header[12..20] = the architecture knobs (llmc/model_file.h)
NORM_BIAS_NAMES = {"ln1b", "ln2b", "lnfb"}  # absent with RMSNorm or bias=0 (llmc/gpt2.h, WHEN_NORM_BIAS)
LINEAR_BIAS_NAMES = {"qkvb", "attprojb", "fcb", "fcprojb", "efcb", "efcprojb"}  # absent with bias=0 (WHEN_BIAS)
# the decoder family's knobs built so far (llmc/gpt2.h GPT2Arch; model file header[12..20]); GPT-2's values
ARCH_GPT2 = dict(norm="layernorm", bias=1, tied=1, mlp="gelu", ff=0, pos="learned", theta=10000.0,
                 kv=0, qknorm=0)  # ff 0: mlp_width; kv 0: NH key/value heads (multi-head attention)


def mlp_width(C, arch):
    """F: arch["ff"], else 4C, or for SwiGLU 8C/3 rounded up to a multiple of 64 (llmc/gpt2.h, gpt2_default_ffn)"""
    if arch["ff"]:
        return arch["ff"]
    return (((8 * C + 2) // 3 + 63) // 64) * 64 if arch["mlp"] == "swiglu" else 4 * C

MODEL_CONFIGS = {  # name: (L, C, NH, maxT)
    "d2": (2, 128, 4, 256), "d4": (4, 256, 4, 256), "d6": (6, 384, 6, 256),
    "d12": (12, 768, 12, 1024), "d24": (24, 1024, 16, 1024),
    "d36": (36, 1280, 20, 1024), "d48": (48, 1600, 25, 1024),
}


def die(msg):
    print(f"train_gpt.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def padded_vocab(V):
    return ((V + 127) // 128) * 128


# ----------------------------------------------------------------------------- model

def moe_layers(L, moe):
    """The MoE blocks (every n-th: n-1, 2n-1, ...) of a model with L blocks; [] for a dense model."""
    return [l for l in range(L) if moe and (l + 1) % moe["every"] == 0]


def param_shapes(L, C, V, maxT, moe=None, arch=ARCH_GPT2, NH=1):
    """Shapes of the parameter tensors in file order (layer tensors stacked on dim 0). A mixture-of-experts model
    (moe: dict E, k, every, H) stacks the dense MLP tensors over its Ld blocks without experts and appends the
    expert tensors stacked over its Lm MoE blocks. With arch norm="rms" (RMSNorm) the norms have no bias tensors,
    with bias=0 no tensor has; with tied=0 the LM head is its own tensor lmheadw (Vp, C); with arch kv > 0 (grouped-query
    attention) qkv has C + 2 kv C/NH rows: [q | k | v] of NH, kv and kv heads."""
    Vp = padded_vocab(V)
    F = mlp_width(C, arch)
    FC = 2 * F if arch["mlp"] == "swiglu" else F  # the fc rows: SwiGLU's gate and up
    Lm = len(moe_layers(L, moe))
    Ld = L - Lm
    QKV = C + 2 * arch["kv"] * (C // NH) if arch.get("kv") else 3 * C
    shapes = {
        "wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, QKV, C), "qkvb": (L, QKV), "qnormw": (L, C // NH), "knormw": (L, C // NH), "attprojw": (L, C, C), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C), "fcw": (Ld, FC, C), "fcb": (Ld, FC),
        "fcprojw": (Ld, C, F), "fcprojb": (Ld, C), "lnfw": (C,), "lnfb": (C,),
    }
    if not arch.get("qknorm"):
        del shapes["qnormw"], shapes["knormw"]  # QK-norm's weights (hs) per layer: qknorm=1 only
    if not arch["tied"]:
        shapes["lmheadw"] = (Vp, C)  # the untied head, after lnfb (llmc/gpt2.h's table order)
    if arch["pos"] == "rope":
        del shapes["wpe"]  # rotary positions: no position table
    if moe:
        E, H = moe["E"], moe["H"]
        EFC = 2 * H if arch["mlp"] == "swiglu" else H  # the experts' fc rows: SwiGLU's gate and up (Mixtral's w1, w3)
        shapes.update({"routerw": (Lm, E, C), "efcw": (Lm, E, EFC, C), "efcb": (Lm, E, EFC),
                       "efcprojw": (Lm, E, C, H), "efcprojb": (Lm, E, C)})
    if arch["norm"] == "rms" or not arch["bias"]:
        shapes = {n: s for n, s in shapes.items() if n not in NORM_BIAS_NAMES}
    if not arch["bias"]:
        shapes = {n: s for n, s in shapes.items() if n not in LINEAR_BIAS_NAMES}
    return shapes


class GPT(nn.Module):
    """GPT-2 with the parameters stored as the 16 stacked tensors of the file format."""

    def __init__(self, L, C, NH, V, maxT, moe=None, arch=ARCH_GPT2):
        """moe: None (dense) or dict E, k, every, H (the model file's fields) and cap (capacity factor, 0 = none),
        aux (load-balancing coefficient), z (z-loss coefficient) -- the mixture of experts of llmc/moe.h.
        arch: the decoder family's knobs (llmc/gpt2.h, GPT2Arch) built so far: norm "layernorm" (GPT-2) or "rms"
        (RMSNorm, Zhang & Sennrich 2019: x / sqrt(mean(x^2) + 1e-5) * w, no bias); bias 1 or 0 (no bias anywhere);
        tied 1 (logits = x @ wte^T) or 0 (an untied head lmheadw (Vp, C), initialised like wte); mlp "gelu",
        "swiglu" (Shazeer 2020: silu(gate) * up, fc rows [gate (F) | up (F)]) or "relu2" (So et al. 2021); ff the MLP
        width F (0: mlp_width's default); pos "learned" (wpe) or "rope" (Su et al. 2021, rotate_half pairing (i,
        i + hs/2) as Hugging Face Llama, inv_freq theta^(-2i/hs), the table computed in float64 and rounded to fp32
        as llmc/rope_table.h does); kv the key/value heads (0: NH; grouped-query attention, Ainslie et al. 2023: query
        head h attends with key/value head h // (NH / kv), Hugging Face's repeat_kv order); qknorm 1: RMSNorm (eps
        1e-5) of every q and k head before the rotation, weights qnormw and knormw (L, hs), as Qwen3's q_norm, k_norm."""
        super().__init__()
        if C % NH != 0:
            die(f"channels {C} not divisible by heads {NH}")
        self.L, self.C, self.NH, self.V, self.maxT = L, C, NH, V, maxT
        self.Vp = padded_vocab(V)
        self.moe = moe
        arch = dict(ARCH_GPT2, **arch)
        if arch["norm"] not in ("layernorm", "rms") or arch["bias"] not in (0, 1) or arch["tied"] not in (0, 1) or \
                arch["mlp"] not in ("gelu", "swiglu", "relu2") or arch["ff"] < 0 or \
                arch["pos"] not in ("learned", "rope") or not arch["theta"] > 1 or arch["kv"] < 0 or \
                arch["qknorm"] not in (0, 1) or \
                (arch["kv"] and NH % arch["kv"] != 0):
            die(f"arch {arch}: expected norm layernorm|rms, bias 0|1, tied 0|1, mlp gelu|swiglu|relu2, ff >= 0, "
                f"kv 0 or a divisor of NH, qknorm 0|1")
        if arch["norm"] == "layernorm" and not arch["bias"]:
            die("bias=0 with LayerNorm is not built (the C trainer refuses it): use norm=rms")
        self.arch = dict(arch)
        shapes = param_shapes(L, C, V, maxT, moe, arch, NH)
        self.names = [n for n in PARAM_NAMES + (MOE_NAMES if moe else []) if n in shapes]
        self.p = nn.ParameterDict({n: nn.Parameter(torch.zeros(s)) for n, s in shapes.items()})
        self.moe_blocks = moe_layers(L, moe)
        self.aux_loss = torch.zeros(())  # load-balancing + z-loss of the last forward (MoE)

    def init_weights(self, seed):
        """The shared C/PyTorch init (see module docstring); reproduced by llmc/rand.h."""
        torch.manual_seed(seed)
        std_proj = 0.02 / math.sqrt(2 * self.L)
        with torch.no_grad():
            for name in self.names:
                t = self.p[name]
                slices = [t] if name in ("wte", "wpe", "lnfw", "lnfb", "lmheadw") else [t[l] for l in range(t.shape[0])]
                for s in slices:
                    buf = torch.empty(s.shape, dtype=torch.float32)  # contiguous CPU fp32: same RNG path as C
                    if name in ("wte", "lmheadw"):
                        buf.zero_()
                        buf[: self.V].normal_(0.0, 0.02)
                    elif name in ("wpe", "qkvw", "fcw", "routerw", "efcw"):
                        buf.normal_(0.0, 0.02)
                    elif name in ("attprojw", "fcprojw", "efcprojw"):
                        buf.normal_(0.0, std_proj)
                    elif name in ("ln1w", "ln2w", "lnfw", "qnormw", "knormw"):
                        buf.fill_(1.0)
                    else:
                        buf.zero_()
                    s.copy_(buf)

    def forward(self, idx, targets=None):
        """idx (B,T) int64 -> logits (B,T,V) [unpadded view], loss (scalar) or None."""
        B, T = idx.shape
        if T > self.maxT:
            die(f"sequence length {T} > model max {self.maxT}")
        p, C, NH = self.p, self.C, self.NH
        hs = C // NH
        self.moe_counts = []  # per MoE block: (routed count per expert, kept choices)
        self.router_margins = []  # per MoE block: (smallest gap among the k + 1 largest router logits, max |logit|)
        x = p["wte"][idx] + p["wpe"][:T] if "wpe" in p else p["wte"][idx]
        aux_total = torch.zeros((), device=x.device)
        for l in range(self.L):
            h = self.norm(x, "ln1", l)
            qkv = F.linear(h, p["qkvw"][l], self.bias("qkvb", l))
            KV = self.arch["kv"] or NH
            q, k, v = qkv.split([C, KV * hs, KV * hs], dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, KV, hs).transpose(1, 2)
            if self.arch["qknorm"]:  # QK-norm: each head's hs values, before the rotation
                q = q * torch.rsqrt(q.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * p["qnormw"][l]
                k = k * torch.rsqrt(k.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * p["knormw"][l]
            if self.arch["pos"] == "rope":
                q, k = self.rope(q, T), self.rope(k, T)
            v = v.view(B, T, KV, hs).transpose(1, 2)
            if KV != NH:  # grouped-query attention: each key/value head serves NH/KV consecutive query heads
                k, v = k.repeat_interleave(NH // KV, dim=1), v.repeat_interleave(NH // KV, dim=1)
            if hasattr(F, "scaled_dot_product_attention") and x.is_cuda:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + F.linear(y, p["attprojw"][l], self.bias("attprojb", l))
            h = self.norm(x, "ln2", l)
            if l in self.moe_blocks:
                y, aux = self.moe_mlp(h.reshape(B * T, C), self.moe_blocks.index(l))
                x = x + y.view(B, T, C)
                aux_total = aux_total + aux
                continue
            d = l - sum(1 for m in self.moe_blocks if m < l)  # its slice among the dense blocks
            h = self.mlp_act(F.linear(h, p["fcw"][d], self.bias("fcb", d)))
            x = x + F.linear(h, p["fcprojw"][d], self.bias("fcprojb", d))
        x = self.norm(x, "lnf", None)
        logits = F.linear(x, p["wte"] if self.arch["tied"] else p["lmheadw"])[:, :, : self.V]  # padded columns excluded
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, self.V).float(), targets.reshape(-1), ignore_index=-1)
        self.aux_loss = aux_total
        return logits, loss

    def rope(self, x, T):
        """rotary position embedding of x (B, NH, T, hs): x cos + rotate_half(x) sin, rotate_half(x) = [-x2 | x1]"""
        hs = x.shape[-1]
        inv = self.arch["theta"] ** (-2.0 * torch.arange(hs // 2, dtype=torch.float64) / hs)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = ang.cos().float().to(x.device), ang.sin().float().to(x.device)  # (T, hs/2), as the C table
        x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def mlp_act(self, h):
        """the MLP's activation of the fc output h (..., FC) by arch mlp"""
        if self.arch["mlp"] == "swiglu":
            gate, up = h.split(h.shape[-1] // 2, dim=-1)
            return F.silu(gate) * up
        if self.arch["mlp"] == "relu2":
            return F.relu(h).square()
        return F.gelu(h, approximate="tanh")

    def bias(self, name, *index):
        """slice `index` of bias tensor `name`, or None with bias=0 (F.linear without bias)"""
        return self.p[name][index] if name in self.p else None

    def norm(self, x, name, l):
        """The normalisation `name` (ln1, ln2: of layer l; lnf: l None) of x (..., C): LayerNorm or RMSNorm, eps 1e-5."""
        w = self.p[name + "w"] if l is None else self.p[name + "w"][l]
        if self.arch["norm"] == "rms":
            return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * w
        b = self.p[name + "b"] if l is None else self.p[name + "b"][l]
        return F.layer_norm(x, (self.C,), w, b, eps=1e-5)

    def moe_mlp(self, x, j):
        """MoE block j (of the MoE blocks) on x (N,C) -> (y (N,C), load-balancing + z-loss). Written independently
        of the C kernels from the definitions (llmc/moe.h): fp32 router logits, softmax, top-k (ties: lower index),
        gates renormalised over the k chosen (k = 1: the probability), capacity ceil(cap*k*N/E) served first
        choices first, then in token order; f_i over the choices before capacity."""
        p, moe = self.p, self.moe
        N, E, k = x.shape[0], moe["E"], moe["k"]
        logits = x.float() @ p["routerw"][j].float().t()
        s = torch.sort(logits.detach(), dim=-1, descending=True).values[:, : min(k + 1, E)]
        # the smallest gap between consecutive logits among a token's k + 1 largest: below the rounding of the logits,
        # a choice or its rank (which orders the capacity) can differ between precisions (test_gpt.cu reads it)
        self.router_margins.append((float((s[:, :-1] - s[:, 1:]).min()), float(logits.abs().max())))
        probs = logits.softmax(dim=-1)
        lse = torch.logsumexp(logits, dim=-1)
        order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :k]  # (N,k)
        chosen = probs.gather(1, order)
        gates = chosen if k == 1 else chosen / chosen.sum(dim=-1, keepdim=True)
        cap = N if moe["cap"] <= 0 else min(N, math.ceil(moe["cap"] * k * N / E))
        keep = torch.zeros(N, k, dtype=torch.bool)
        count = [0] * E
        for r in range(k):
            for n in range(N):
                e = int(order[n, r])
                keep[n, r] = count[e] < cap
                count[e] += 1
        f = torch.tensor(count, dtype=torch.float32) / (N * k)
        aux = moe["aux"] * E * (f * probs.mean(dim=0)).sum() + moe["z"] * (lse ** 2).mean()
        y = torch.zeros_like(x)
        for e in range(E):
            n_idx, r_idx = torch.nonzero((order == e) & keep, as_tuple=True)
            if n_idx.numel() == 0:
                continue
            h = self.mlp_act(F.linear(x[n_idx], p["efcw"][j, e], self.bias("efcb", j, e)))  # the model's MLP kind
            out = F.linear(h, p["efcprojw"][j, e], self.bias("efcprojb", j, e))
            y = y.index_add(0, n_idx, out * gates[n_idx, r_idx].unsqueeze(1))
        self.moe_counts.append((count, int(keep.sum())))
        return y, aux

    def optimizer(self, lr, weight_decay, betas=(0.9, 0.95), eps=1e-8, fused=False):
        decay = [self.p[n] for n in self.names if n in DECAY_NAMES]
        no_decay = [self.p[n] for n in self.names if n not in DECAY_NAMES]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        extra = {"fused": True} if fused else {}
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **extra)

    def num_params(self):
        return sum(t.numel() for t in self.p.values())


# ----------------------------------------------------------------------------- file I/O

def write_atomic(path, chunks):
    """Writes the byte chunks to path.tmp and renames it to path."""
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def header_bytes(ints):
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[: len(ints)] = ints
    return h.tobytes()


def f32_bits(x):
    return struct.unpack("<i", struct.pack("<f", x))[0]


def flat_params(model, grads=False):
    ts = [(model.p[n].grad if grads else model.p[n]).detach().cpu().float().reshape(-1) for n in model.names]
    return torch.cat(ts).numpy().astype("<f4")


def arch_knobs(model):
    """header[12..20] of a decoder-family model file (llmc/model_file.h): norm, pos, theta bits, mlp, MLP width, kv
    heads, bias, tied, qknorm."""
    a = model.arch
    mlp = {"gelu": 0, "swiglu": 1, "relu2": 2}[a["mlp"]]
    return [1 if a["norm"] == "rms" else 0, 1 if a["pos"] == "rope" else 0, f32_bits(a["theta"]), mlp,
            mlp_width(model.C, a), a["kv"] or model.NH, a["bias"], a["tied"], a["qknorm"]]


def write_model(model, path):
    fields = [model.maxT, model.V, model.L, model.NH, model.C, model.Vp]
    if model.arch != ARCH_GPT2:  # a decoder-family file: version 9, MoE fields (0 dense), the knobs
        m = model.moe
        moe_fields = [m["E"], m["k"], m["every"], m["H"]] if m else [0, 0, 0, 0]
        hdr = header_bytes([MODEL_MAGIC, MODEL_VERSION_ARCH_FP32] + fields + moe_fields + arch_knobs(model))
    elif model.moe:
        m = model.moe
        hdr = header_bytes([MODEL_MAGIC, MODEL_VERSION_MOE_FP32] + fields + [m["E"], m["k"], m["every"], m["H"]])
    else:
        hdr = header_bytes([MODEL_MAGIC, MODEL_VERSION_FP32] + fields)
    write_atomic(path, [hdr, flat_params(model).tobytes()])


def read_shard(path):
    """Returns the token ids of a token shard (version 1: uint16, version 2: uint32) as a numpy array; dies with a
    clear message on a bad file."""
    if not os.path.isfile(path):
        die(f"{path}: no such file (build the default data with: python3 dev/data/tinyshakespeare.py)")
    size = os.path.getsize(path)
    if size < HEADER_INTS * 4:
        die(f"{path}: {size} bytes, too small for the 1024-byte shard header")
    h = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if h[0] != SHARD_MAGIC or int(h[1]) not in SHARD_WIDTH:
        die(f"{path}: header magic/version {h[0]}/{h[1]}, expected {SHARD_MAGIC}/1 or 2 (a token shard from dev/data/prepare.py)")
    ntok, width = int(h[2]), SHARD_WIDTH[int(h[1])]
    if size != HEADER_INTS * 4 + width * ntok:
        die(f"{path}: {size} bytes, but header says {ntok} tokens of {width} bytes ({HEADER_INTS * 4 + width * ntok} bytes expected)")
    return np.fromfile(path, dtype="<u2" if width == 2 else "<u4", offset=HEADER_INTS * 4)


# ----------------------------------------------------------------------------- fixture

FIXTURE = dict(L=2, C=64, NH=4, maxT=64, V=100, B=4, T=32, seed=1337, data_seed=42, n_steps=10,
               lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=0.5)


def fixture_model_and_batch(cfg, outdir, name, moe=None, arch=ARCH_GPT2):
    """The model of a fixture config (initialised from cfg["seed"], written to OUTDIR/NAME_model.bin) and its one batch
    of B x (T+1) uniform token ids < V from cfg["data_seed"]: returns (model, model_path, state_path, x, y), x and y
    (B, T) int64 (inputs and next-token targets)."""
    model = GPT(cfg["L"], cfg["C"], cfg["NH"], cfg["V"], cfg["maxT"], moe, arch)
    model.init_weights(cfg["seed"])
    model_path = os.path.join(outdir, name + "_model.bin")
    state_path = os.path.join(outdir, name + "_state.bin")
    write_model(model, model_path)
    B, T, V = cfg["B"], cfg["T"], cfg["V"]
    g = torch.Generator().manual_seed(cfg["data_seed"])
    tokens = torch.randint(0, V, (B, T + 1), generator=g)
    return model, model_path, state_path, tokens[:, :T].contiguous(), tokens[:, 1:].contiguous()


# the decoder family's fixture (test_gpt.cu, test_family_fixture): the dense fixture's sizes and batch with the knobs
# built so far (RMSNorm, no biases, untied head, SwiGLU, rotary positions, grouped-query attention with 2 key/value heads
# for 4 query heads, QK-norm); each knob that lands joins it (llmc/README.md, "The model's architecture as data")
FAMILY_FIXTURE = dict(FIXTURE, arch=dict(ARCH_GPT2, norm="rms", bias=0, tied=0, mlp="swiglu", pos="rope", theta=500000.0,
                                         kv=2, qknorm=1))


def write_fixture(outdir, cfg=FIXTURE, name="gpt2_fixture"):
    """The dense fixture (cfg FIXTURE, files gpt2_fixture_*) or the decoder family's (FAMILY_FIXTURE, family_fixture_*):
    model file, then the state file with the batch, logits, loss, gradients and n_steps AdamW losses."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, model_path, state_path, x, y = fixture_model_and_batch(cfg, outdir, name, None, cfg.get("arch", ARCH_GPT2))
    B, T, V = cfg["B"], cfg["T"], cfg["V"]

    logits, loss = model(x, y)
    loss.backward()
    grads = flat_params(model, grads=True)
    logits0 = logits.detach().numpy().astype("<f4")
    loss0 = float(loss.item())

    opt = model.optimizer(cfg["lr"], cfg["weight_decay"], (cfg["beta1"], cfg["beta2"]), cfg["eps"])
    step_losses, norms = [], []
    model.zero_grad(set_to_none=True)
    for step in range(cfg["n_steps"]):
        _, l = model(x, y)
        l.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"]))
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_losses.append(float(l.item()))
        norms.append(norm)
    assert step_losses[0] == loss0, "step 0 loss must equal the forward loss"

    hdr = header_bytes([STATE_MAGIC, STATE_VERSION, B, T, cfg["n_steps"]] +
                       [f32_bits(cfg[k]) for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")])
    write_atomic(state_path, [hdr, x.numpy().astype("<i4").tobytes(), y.numpy().astype("<i4").tobytes(),
                              logits0.tobytes(), np.array([loss0], dtype="<f4").tobytes(), grads.tobytes(),
                              np.array(step_losses, dtype="<f4").tobytes()])

    print(f"torch {torch.__version__}; fixture config: " + ", ".join(f"{k}={v}" for k, v in cfg.items()))
    print(f"params: {model.num_params():,} (Vp={model.Vp}); initial loss {loss0:.6f} (ln V = {math.log(V):.6f})")
    for i, (l, n) in enumerate(zip(step_losses, norms)):
        print(f"step {i}: loss {l:.6f}  grad norm {n:.4f}{'  (clipped)' if n > cfg['grad_clip'] else ''}")
    n_clipped = sum(n > cfg["grad_clip"] for n in norms)
    print(f"clipping active on {n_clipped}/{len(norms)} steps (clip {cfg['grad_clip']})")
    verify_fixture(cfg, model_path, state_path, model, logits0, loss0, grads, step_losses, x, y)


def verify_fixture(cfg, model_path, state_path, model, logits, loss, grads, step_losses, x, y):
    """Re-reads both files and checks every field against what was written."""
    arch = cfg.get("arch", ARCH_GPT2)
    h = np.fromfile(model_path, dtype="<i4", count=HEADER_INTS)
    version = MODEL_VERSION_FP32 if arch == ARCH_GPT2 else MODEL_VERSION_ARCH_FP32
    assert list(h[:8]) == [MODEL_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], padded_vocab(cfg["V"])]
    if version == MODEL_VERSION_ARCH_FP32:
        assert list(h[8:21]) == [0, 0, 0, 0] + arch_knobs(model), list(h[8:21])
    params = np.fromfile(model_path, dtype="<f4", offset=HEADER_INTS * 4)
    fresh = GPT(cfg["L"], cfg["C"], cfg["NH"], cfg["V"], cfg["maxT"], None, arch)
    fresh.init_weights(cfg["seed"])
    assert np.array_equal(params, flat_params(fresh)), "model file differs from a fresh init"
    wte = params[: model.Vp * model.C].reshape(model.Vp, model.C)
    assert not wte[model.V:].any(), "padded wte rows must be zero"

    B, T, V, n = cfg["B"], cfg["T"], cfg["V"], cfg["n_steps"]
    h = np.fromfile(state_path, dtype="<i4", count=HEADER_INTS)
    assert list(h[:5]) == [STATE_MAGIC, STATE_VERSION, B, T, n]
    hf = h[5:11].astype("<i4").view("<f4")
    assert np.array_equal(hf, np.array([cfg[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")], dtype="<f4"))
    off = HEADER_INTS * 4
    inp = np.fromfile(state_path, dtype="<i4", count=B * T, offset=off); off += 4 * B * T
    tgt = np.fromfile(state_path, dtype="<i4", count=B * T, offset=off); off += 4 * B * T
    lg = np.fromfile(state_path, dtype="<f4", count=B * T * V, offset=off); off += 4 * B * T * V
    ls = np.fromfile(state_path, dtype="<f4", count=1, offset=off); off += 4
    gr = np.fromfile(state_path, dtype="<f4", count=grads.size, offset=off); off += 4 * grads.size
    sl = np.fromfile(state_path, dtype="<f4", count=n, offset=off); off += 4 * n
    assert off == os.path.getsize(state_path), "state file has trailing bytes"
    assert np.array_equal(inp, x.numpy().reshape(-1)) and np.array_equal(tgt, y.numpy().reshape(-1))
    assert inp.min() >= 0 and inp.max() < V
    assert np.array_equal(lg, logits.reshape(-1)) and ls[0] == np.float32(loss)
    assert np.array_equal(gr, grads) and np.array_equal(sl, np.array(step_losses, dtype="<f4"))
    g_wte = gr[: model.Vp * model.C].reshape(model.Vp, model.C)
    assert not g_wte[model.V:].any(), "padded wte rows of the gradient must be zero"
    # independent recomputation of the loss from the stored logits (float64 log-softmax)
    l64 = lg.reshape(B * T, V).astype(np.float64)
    l64 = l64 - l64.max(axis=1, keepdims=True)
    lsm = l64 - np.log(np.exp(l64).sum(axis=1, keepdims=True))
    ref = -lsm[np.arange(B * T), tgt].mean()
    assert abs(ref - loss) < 1e-5, f"loss from stored logits {ref} != {loss}"
    total = os.path.getsize(model_path) + os.path.getsize(state_path)
    assert total < 2 * 1024 * 1024, f"fixture too large: {total} bytes"
    print(f"re-read and verified {model_path} ({os.path.getsize(model_path):,} bytes) and "
          f"{state_path} ({os.path.getsize(state_path):,} bytes); total {total:,} bytes")


MOE_FIXTURE = dict(L=4, C=32, NH=4, maxT=32, V=100, B=4, T=32, seed=1337, data_seed=42, n_steps=3,
                   lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0,
                   E=3, k=2, every=2, H=48, cap=0.75, aux=0.05, z=0.01)


# the decoder family's mixture-of-experts fixture: the MoE fixture's sizes, routing and batch with the family's knobs
# (SwiGLU experts of fc rows [gate (H) | up (H)] as Mixtral's, RMSNorm, rotary positions, GQA, QK-norm, untied head)
FAMILY_MOE_FIXTURE = dict(MOE_FIXTURE, arch=dict(FAMILY_FIXTURE["arch"]))


def write_moe_fixture(outdir, cfg=MOE_FIXTURE, name="gpt2_moe_fixture"):
    """The mixture-of-experts fixture (test_gpt.cu, test_moe_fixture): L=4 blocks, experts in blocks 1 and 3 (every
    2nd), E=3 (not a power of two) top-2 with H=48 (not 4C), capacity factor 0.75 (64 rows per expert for 256 choices: at
    least a quarter of the choices are dropped), load-balancing 0.05 and z-loss 0.01 so that their gradients are
    visible. Files: gpt2_moe_fixture_model.bin (model v7) and gpt2_moe_fixture_state.bin (state v2 as the dense
    fixture; header[11] = fp32 bits of the MoE loss (load-balancing + z) at the initial weights, header[12..14] = fp32
    bits of the capacity factor, aux and z coefficients, header[15..16] = fp32 bits of the smallest gap between
    consecutive logits among any token's k + 1 largest router logits (at the initial weights, all MoE blocks) and of the
    largest |logit|; the loss field and step losses are the language loss only, the gradients those of language + MoE
    loss). cfg FAMILY_MOE_FIXTURE, name family_moe_fixture: the same with the
    decoder family's knobs (model v9)."""
    moe = {k: cfg[k] for k in ("E", "k", "every", "H", "cap", "aux", "z")}
    model, model_path, state_path, x, y = fixture_model_and_batch(cfg, outdir, name, moe, cfg.get("arch", ARCH_GPT2))
    B, T, V = cfg["B"], cfg["T"], cfg["V"]
    logits, loss = model(x, y)
    (loss + model.aux_loss).backward()
    grads = flat_params(model, grads=True)
    logits0 = logits.detach().numpy().astype("<f4")
    loss0, aux0 = float(loss.item()), float(model.aux_loss.item())
    counts = model.moe_counts
    gap = min(g for g, _ in model.router_margins)
    scale = max(m for _, m in model.router_margins)
    opt = model.optimizer(cfg["lr"], cfg["weight_decay"], (cfg["beta1"], cfg["beta2"]), cfg["eps"])
    model.zero_grad(set_to_none=True)
    step_losses = []
    for _ in range(cfg["n_steps"]):
        _, l = model(x, y)
        (l + model.aux_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_losses.append(float(l.item()))
    hdr = header_bytes([STATE_MAGIC, STATE_VERSION, B, T, cfg["n_steps"]] +
                       [f32_bits(cfg[k]) for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")] +
                       [f32_bits(aux0)] + [f32_bits(cfg[k]) for k in ("cap", "aux", "z")] +
                       [f32_bits(gap), f32_bits(scale)])
    write_atomic(state_path, [hdr, x.numpy().astype("<i4").tobytes(), y.numpy().astype("<i4").tobytes(),
                              logits0.tobytes(), np.array([loss0], dtype="<f4").tobytes(), grads.tobytes(),
                              np.array(step_losses, dtype="<f4").tobytes()])
    N = B * T
    for j, (count, kept) in enumerate(counts):
        print(f"MoE block {model.moe_blocks[j]}: routed per expert {count}, kept {kept} of {N * cfg['k']} choices "
              f"({100 * (1 - kept / (N * cfg['k'])):.1f}% dropped)")
        assert kept < N * cfg["k"], "the fixture must drop some choices"
    print(f"router: smallest gap among a token's k + 1 largest logits {gap:.3e}, max |logit| {scale:.3e}")
    print(f"MoE fixture: params {model.num_params():,}; language loss {loss0:.6f}, MoE loss {aux0:.6f}; "
          f"step losses {', '.join(f'{v:.6f}' for v in step_losses)}")
    total = os.path.getsize(model_path) + os.path.getsize(state_path)
    assert total < 2 * 1024 * 1024, f"fixture too large: {total} bytes"
    print(f"wrote {model_path} and {state_path}; total {total:,} bytes")


# ----------------------------------------------------------------------------- training

class ShardLoader:
    """Sequential (B, T+1) windows over one token shard, wrapping at the end."""

    def __init__(self, path, B, T):
        self.tokens = read_shard(path)
        self.B, self.T, self.pos = B, T, 0
        if len(self.tokens) < B * T + 1:
            die(f"{path}: {len(self.tokens)} tokens, need at least B*T+1 = {B * T + 1}")

    def next_batch(self):
        B, T = self.B, self.T
        if self.pos + B * T + 1 > len(self.tokens):
            self.pos = 0
        buf = torch.from_numpy(self.tokens[self.pos: self.pos + B * T + 1].astype(np.int64))
        self.pos += B * T
        return buf[:-1].view(B, T), buf[1:].view(B, T)


def train(args):
    if args.model not in MODEL_CONFIGS:
        die(f"--model {args.model}: expected one of {', '.join(MODEL_CONFIGS)}")
    L, C, NH, maxT = MODEL_CONFIGS[args.model]
    B, T = args.batch_size, args.sequence_length
    if T > maxT:
        die(f"--sequence-length {T} exceeds the model's max {maxT}")
    tokens_per_fwdbwd = B * T
    total = args.total_batch_size if args.total_batch_size > 0 else tokens_per_fwdbwd
    if total % tokens_per_fwdbwd != 0:
        die(f"--total-batch-size {total} is not a multiple of B*T = {tokens_per_fwdbwd}")
    accum = total // tokens_per_fwdbwd

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        die("--device cuda requested but CUDA is not available")
    torch.manual_seed(args.seed)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    autocast = (torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=dtype)
                if dtype != torch.float32 else None)

    train_loader = ShardLoader(args.input_bin, B, T)
    val_loader = ShardLoader(args.input_val_bin, B, T) if args.input_val_bin else None

    model = GPT(L, C, NH, 50257 if args.vocab_size <= 0 else args.vocab_size, maxT)
    model.init_weights(args.seed)
    model.to(device)
    if train_loader.tokens.max() >= model.V:
        die(f"{args.input_bin}: token id {int(train_loader.tokens.max())} >= vocab size {model.V}")
    print(f"model {args.model}: L={L} C={C} NH={NH} maxT={maxT} V={model.V} Vp={model.Vp} "
          f"params={model.num_params():,}; B={B} T={T} accum={accum} device={device} dtype={args.dtype} "
          f"torch {torch.__version__}")
    fused = device.startswith("cuda") and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames
    opt = model.optimizer(args.learning_rate, args.weight_decay, fused=fused)
    fwd = model
    if args.compile:
        if not hasattr(torch, "compile"):
            die("--compile needs torch >= 2.0")
        fwd = torch.compile(model)

    def lr_at(step):
        if step < args.warmup_iters:
            return args.learning_rate * (step + 1) / args.warmup_iters
        return args.learning_rate

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    rates = []
    for step in range(args.num_iterations + 1):
        last = step == args.num_iterations
        if val_loader is not None and args.val_loss_every > 0 and (step % args.val_loss_every == 0 or last):
            model.eval()
            val_loader.pos = 0
            with torch.no_grad():
                vl = 0.0
                for _ in range(args.val_max_steps):
                    vx, vy = val_loader.next_batch()
                    with (autocast if autocast else _null()):
                        _, l = fwd(vx.to(device), vy.to(device))
                    vl += l.item()
            print(f"step {step:4d} | val loss {vl / args.val_max_steps:.6f}")
            model.train()
        if last:
            break
        t0 = time.time()
        loss_acc = 0.0
        for _ in range(accum):
            bx, by = train_loader.next_batch()
            with (autocast if autocast else _null()):
                _, loss = fwd(bx.to(device), by.to(device))
            loss = loss / accum
            loss_acc += loss.detach()
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip) if args.grad_clip > 0 else torch.tensor(0.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        dt = time.time() - t0
        tps = accum * tokens_per_fwdbwd / dt
        if step > 0 or args.num_iterations == 1:
            rates.append(tps)  # step 0 includes warm-up/compilation
        print(f"step {step + 1:4d}/{args.num_iterations} | loss {float(loss_acc):.6f} | norm {float(norm):.4f} | "
              f"lr {lr_at(step):.2e} | {dt * 1000:.2f} ms | {tps:.0f} tok/s")
    if rates:
        print(f"RESULT tokens_per_s={float(np.median(rates)):.1f}")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch reference GPT-2: writes test fixtures and trains on token shards.")
    ap.add_argument("--write-fixture", action="store_true", help="write dev/test/fixtures/gpt2_fixture_{model,state}.bin and exit")
    ap.add_argument("--write-moe-fixture", action="store_true",
                    help="write dev/test/fixtures/gpt2_moe_fixture_{model,state}.bin (mixture of experts) and exit")
    ap.add_argument("--write-family-fixture", action="store_true",
                    help="write dev/test/fixtures/family_fixture_{model,state}.bin (the decoder family: RMSNorm, no biases, untied head, SwiGLU, rotary positions, GQA, QK-norm) and exit")
    ap.add_argument("--write-family-moe-fixture", action="store_true",
                    help="write dev/test/fixtures/family_moe_fixture_{model,state}.bin (the family with SwiGLU experts) and exit")
    ap.add_argument("--fixture-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "dev", "test", "fixtures"))
    ap.add_argument("--input-bin", "-i", default="dev/data/tinyshakespeare/tiny_shakespeare_train.bin")
    ap.add_argument("--input-val-bin", "-j", default="dev/data/tinyshakespeare/tiny_shakespeare_val.bin")
    ap.add_argument("--model", default="d2", help="d2|d4|d6|d12|d24|d36|d48")
    ap.add_argument("--vocab-size", type=int, default=50257)
    ap.add_argument("--batch-size", "-b", type=int, default=4)
    ap.add_argument("--sequence-length", "-t", type=int, default=64)
    ap.add_argument("--total-batch-size", "-d", type=int, default=-1, help="tokens per step (default B*T); must be a multiple of B*T")
    ap.add_argument("--num-iterations", "-x", type=int, default=10)
    ap.add_argument("--learning-rate", "-l", type=float, default=3e-4)
    ap.add_argument("--warmup-iters", "-u", type=int, default=0)
    ap.add_argument("--weight-decay", "-c", type=float, default=0.0)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--val-loss-every", "-v", type=int, default=0)
    ap.add_argument("--val-max-steps", "-m", type=int, default=20)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--compile", type=int, default=0, help="1: torch.compile the model (torch >= 2.0)")
    ap.add_argument("--device", default="", help="cpu|cuda (default: cuda if available)")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args(argv)
    for name in ("batch_size", "sequence_length", "num_iterations"):
        if getattr(args, name) <= 0:
            die(f"--{name.replace('_', '-')} must be positive")
    if args.write_moe_fixture:
        write_moe_fixture(args.fixture_dir)
    elif args.write_family_moe_fixture:
        write_moe_fixture(args.fixture_dir, FAMILY_MOE_FIXTURE, "family_moe_fixture")
    elif args.write_fixture:
        write_fixture(args.fixture_dir)
    elif args.write_family_fixture:
        write_fixture(args.fixture_dir, FAMILY_FIXTURE, "family_fixture")
    else:
        train(args)


if __name__ == "__main__":
    main()
