"""
scripts/llama_hf.py -- shared by scripts/export_hf.py and scripts/import_hf.py: our decoder-family model files
(versions 9 and 10; 11 and 12 with Llama-3 rope scaling) and the Hugging Face Llama layout (LlamaForCausalLM; MistralForCausalLM has the same names), with
numpy and safetensors only. The GPT-2 side is scripts/gpt2_hf.py, whose helpers (bf16 bits, safetensors, die) are
used here.

Our family file (llmc/model_file.h; llmc/README.md "File formats", "The model's architecture as data"): int32
header[256], header[0] = 20240326, header[1] = 9 (fp32) or 10 (raw bf16), header[2..7] = maxT, V, L, NH, C, Vp,
header[8..11] = MoE E, k, n, H (0 for a dense model), header[12..20] = norm (0 LayerNorm, 1 RMSNorm), pos (0 learned,
1 rotary), rope theta (fp32 bits), mlp (0 GELU, 1 SwiGLU, 2 ReLU^2), MLP width F, key/value heads KV, bias, tied,
qknorm (0/1 each); versions 11 (fp32) / 12 (bf16) add Llama-3 rope frequency scaling in header[21..24] = factor,
low_freq_factor, high_freq_factor (fp32 bits each), original_max_position_embeddings (int) (config.json's
rope_scaling with rope_type "llama3"; the trainer's -e word rope_scaling=F/LOW/HIGH/ORIGT); then the tensors of
llmc/gpt2.h's table that exist for those knobs, in table order
(train_gpt.py param_shapes): wte (Vp,C), [wpe (maxT,C)], ln1w (L,C), [ln1b], qkvw (L, (NH+2KV) hs, C), [qkvb],
attprojw (L,C,C), [attprojb], ln2w (L,C), [ln2b], fcw (L, FC, C), [fcb], fcprojw (L,C,F), [fcprojb], lnfw (C,), [lnfb],
[lmheadw (Vp,C) when untied]; FC = 2F for SwiGLU (rows [gate | up]), F otherwise; hs = C/NH.

The Llama member (norm=rms, pos=rope, mlp=swiglu, bias=0, qknorm=0, no experts; tied or not, any KV dividing NH)
maps one to one onto LlamaForCausalLM, every linear weight kept as (out, in) (nn.Linear's layout, no transpose):
  wte[:V]                 model.embed_tokens.weight (V, C)         padded rows V..Vp-1 dropped / zero on import
  ln1w[l]                 model.layers.{l}.input_layernorm.weight (C,)
  qkvw[l] rows 0..NH hs   model.layers.{l}.self_attn.q_proj.weight (NH hs, C)
          next KV hs      model.layers.{l}.self_attn.k_proj.weight (KV hs, C)
          last KV hs      model.layers.{l}.self_attn.v_proj.weight (KV hs, C)
  attprojw[l]             model.layers.{l}.self_attn.o_proj.weight (C, C)
  ln2w[l]                 model.layers.{l}.post_attention_layernorm.weight (C,)
  fcw[l] rows 0..F        model.layers.{l}.mlp.gate_proj.weight (F, C)
          rows F..2F      model.layers.{l}.mlp.up_proj.weight (F, C)
  fcprojw[l]              model.layers.{l}.mlp.down_proj.weight (C, F)
  lnfw                    model.norm.weight (C,)
  lmheadw[:V]             lm_head.weight (V, C)                    only when untied (tie_word_embeddings false)
No permutation of q/k rows is needed: the trainer's rotary positions pair (i, i + hs/2) exactly as Hugging Face's
rotate_half, and query head h reads kv head h // (NH/KV) as repeat_kv; RMSNorm is x / sqrt(mean(x^2) + 1e-5) * w on
both sides (the trainer's RMSNORM_EPS), SwiGLU is down(silu(gate(x)) * up(x)).

Errors: `refusal` returns one sentence naming the knob a family file has that Llama lacks; the readers and
`llama_config` call g.die (one line "error: ...", exit status 1) on a damaged file or a configuration the trainer
cannot represent.
"""
import os
import struct

import numpy as np

import gpt2_hf as g

VERSION_ARCH_FP32, VERSION_ARCH_BF16 = 9, 10
VERSION_SCALED_FP32, VERSION_SCALED_BF16 = 11, 12  # the family with Llama-3 rope scaling: + header[21..24]
FAMILY_VERSIONS = (VERSION_ARCH_FP32, VERSION_ARCH_BF16, VERSION_SCALED_FP32, VERSION_SCALED_BF16)
RMSNORM_EPS = 1e-5  # llmc's RMSNORM_EPS; Llama 2/3 and Mistral use it too
NORMS, POSS, MLPS = ("layernorm", "rms"), ("learned", "rope"), ("gelu", "swiglu", "relu2")
# the trainer's header bounds (llmc/model_file.h gpt2_read_model_header, model_file_get_arch)
MAX_T, MAX_VP, MAX_L, MAX_C, MAX_F = 1 << 20, 1 << 24, 4096, 1 << 17, 1 << 20


def f32_bits(x):
    """the int32 bits of x rounded to float32 (how header[14] stores theta)"""
    return struct.unpack("<i", struct.pack("<f", x))[0]


def bits_f32(i):
    """the float32 whose bits are the int32 i (header[14] -> theta)"""
    return struct.unpack("<f", struct.pack("<i", int(i)))[0]


def version_is_bf16(version):
    return version in (VERSION_ARCH_BF16, VERSION_SCALED_BF16)


def family_version(arch, bf16):
    """the version a family file of these knobs is written as: 9/10, or 11/12 with rope scaling (llmc/model_file.h)"""
    if arch.get("rope_scaling"):
        return VERSION_SCALED_BF16 if bf16 else VERSION_SCALED_FP32
    return VERSION_ARCH_BF16 if bf16 else VERSION_ARCH_FP32


def scaling_invalid(s):
    """None when the Llama-3 scaling s (factor, low, high, original_max_pos) is valid, else the first bad field
    (llmc/rope_table.h rope_scaling_invalid's rules, factor > 0)"""
    fin = lambda x: np.isfinite(x)  # noqa: E731
    if not (s["factor"] > 0 and fin(s["factor"])):
        return "factor (expected a finite number > 0)"
    if not (s["low"] > 0 and fin(s["low"])):
        return "low_freq_factor (expected a finite number > 0)"
    if not (s["high"] > s["low"] and fin(s["high"])):
        return "high_freq_factor (expected a finite number > low_freq_factor)"
    if not (int(s["original_max_pos"]) == s["original_max_pos"] and s["original_max_pos"] >= 1):
        return "original_max_position_embeddings (expected an integer >= 1)"
    return None


def scaling_word(arch):
    """', rope_scaling=F/LOW/HIGH/ORIGT' (the trainer's -e word) or '' without scaling"""
    s = arch.get("rope_scaling")
    return f", rope_scaling={s['factor']:g}/{s['low']:g}/{s['high']:g}/{s['original_max_pos']}" if s else ""


def family_shapes(cfg, arch):
    """[(name, shape)] of a dense family model in file order (llmc/gpt2.h GPT2_PARAMS; train_gpt.py param_shapes).
    cfg: maxT V L NH C Vp; arch: norm pos theta mlp F KV bias tied qknorm (strings for the enums)"""
    L, C, NH, Vp, maxT, F, KV = cfg["L"], cfg["C"], cfg["NH"], cfg["Vp"], cfg["maxT"], arch["F"], arch["KV"]
    QKV = (NH + 2 * KV) * (C // NH)
    FC = 2 * F if arch["mlp"] == "swiglu" else F
    bias, norm_bias = arch["bias"], arch["bias"] and arch["norm"] == "layernorm"
    rows = [("wte", (Vp, C), True), ("wpe", (maxT, C), arch["pos"] == "learned"), ("ln1w", (L, C), True),
            ("ln1b", (L, C), norm_bias), ("qkvw", (L, QKV, C), True), ("qkvb", (L, QKV), bias),
            ("attprojw", (L, C, C), True), ("attprojb", (L, C), bias), ("ln2w", (L, C), True),
            ("ln2b", (L, C), norm_bias), ("fcw", (L, FC, C), True), ("fcb", (L, FC), bias),
            ("fcprojw", (L, C, F), True), ("fcprojb", (L, C), bias), ("lnfw", (C,), True),
            ("lnfb", (C,), norm_bias), ("lmheadw", (Vp, C), not arch["tied"])]
    return [(n, s) for n, s, present in rows if present]


def read_family_model_file(path):
    """-> (cfg, version, arch, {name: array}) of a version 9/10/11/12 file; arrays float32 (9, 11) or uint16 bf16
    bits (10, 12); arch["rope_scaling"] None (9/10) or {factor, low, high, original_max_pos} (11/12),
    shaped as family_shapes. Checks magic, version, the header's ranges (as the trainer does) and the file size;
    a mixture-of-experts family file (header[8] > 0) is refused (Llama has no experts)."""
    if not os.path.isfile(path):
        g.die(f"{path}: no such model file (expected a model .bin written by train_gpt -o DIR)")
    size = os.path.getsize(path)
    if size < g.HEADER_INTS * 4:
        g.die(f"{path}: {size} bytes, too short for a model file header ({g.HEADER_INTS * 4} bytes)")
    h = np.fromfile(path, dtype="<i4", count=g.HEADER_INTS)
    if h[0] != g.MODEL_MAGIC or h[1] not in FAMILY_VERSIONS:
        g.die(f"{path}: header magic/version {h[0]}/{h[1]}, expected {g.MODEL_MAGIC}/{VERSION_ARCH_FP32} or "
              f"{VERSION_ARCH_BF16} (a decoder-family model file), {VERSION_SCALED_FP32} or {VERSION_SCALED_BF16} "
              f"(with Llama-3 rope scaling)")
    cfg = dict(maxT=int(h[2]), V=int(h[3]), L=int(h[4]), NH=int(h[5]), C=int(h[6]), Vp=int(h[7]))
    if min(cfg.values()) <= 0 or cfg["C"] % cfg["NH"] or cfg["Vp"] < cfg["V"]:
        g.die(f"{path}: invalid header {cfg} (expected positive sizes, C divisible by NH, Vp >= V)")
    if h[8] != 0:
        g.die(f"{path}: a mixture-of-experts model file (E={h[8]} experts): Hugging Face Llama has no experts; "
              f"only dense models are exported")
    theta = bits_f32(h[14])
    ok = (0 <= h[12] < len(NORMS) and 0 <= h[13] < len(POSS) and 0 < theta < 1e12 and 0 <= h[15] < len(MLPS)
          and 1 <= h[16] <= MAX_F and 1 <= h[17] and cfg["NH"] % h[17] == 0 and not (h[18] | h[19] | h[20]) & ~1)
    if not ok:
        g.die(f"{path}: invalid architecture header[12..20] = {list(h[12:21])} (see llmc/model_file.h)")
    arch = dict(norm=NORMS[h[12]], pos=POSS[h[13]], theta=theta, mlp=MLPS[h[15]], F=int(h[16]), KV=int(h[17]),
                bias=int(h[18]), tied=int(h[19]), qknorm=int(h[20]), rope_scaling=None)
    if h[1] in (VERSION_SCALED_FP32, VERSION_SCALED_BF16):
        s = dict(factor=bits_f32(h[21]), low=bits_f32(h[22]), high=bits_f32(h[23]), original_max_pos=int(h[24]))
        bad = scaling_invalid(s) or (None if arch["pos"] == "rope" else "pos (learned positions have no rotary "
                                                                           "frequencies to scale)")
        if bad:
            g.die(f"{path}: invalid rope scaling header[21..24] = {s}: {bad} (see llmc/model_file.h)")
        arch["rope_scaling"] = s
    shapes = family_shapes(cfg, arch)
    dtype = np.dtype("<u2") if version_is_bf16(int(h[1])) else np.dtype("<f4")
    want = g.HEADER_INTS * 4 + sum(int(np.prod(s)) for _, s in shapes) * dtype.itemsize
    if size != want:
        g.die(f"{path}: {size} bytes, expected {want} for {cfg} {arch} (truncated or damaged)")
    flat = np.fromfile(path, dtype=dtype, offset=g.HEADER_INTS * 4)
    params, off = {}, 0
    for name, s in shapes:
        k = int(np.prod(s))
        params[name] = flat[off:off + k].reshape(s)
        off += k
    return cfg, int(h[1]), arch, params


def write_family_model_file(path, cfg, arch, version, params):
    """writes a dense version 9/11 (float32 params) or 10/12 (uint16 bf16 bits) file atomically (path.tmp, then
    rename); version must be family_version(arch, bf16); params as read_family_model_file returns them"""
    if version != family_version(arch, version_is_bf16(version)):
        raise AssertionError(f"internal: version {version} for rope_scaling {arch.get('rope_scaling')}")
    h = np.zeros(g.HEADER_INTS, dtype="<i4")
    h[:8] = [g.MODEL_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    h[12:21] = [NORMS.index(arch["norm"]), POSS.index(arch["pos"]), f32_bits(arch["theta"]), MLPS.index(arch["mlp"]),
                arch["F"], arch["KV"], arch["bias"], arch["tied"], arch["qknorm"]]
    s = arch.get("rope_scaling")
    if s:
        h[21:25] = [f32_bits(s["factor"]), f32_bits(s["low"]), f32_bits(s["high"]), s["original_max_pos"]]
    dtype = np.dtype("<u2") if version_is_bf16(version) else np.dtype("<f4")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(h.tobytes())
        for name, s in family_shapes(cfg, arch):
            a = params[name]
            if a.shape != s or a.dtype != dtype:
                raise AssertionError(f"internal: {name} is {a.shape} {a.dtype}, expected {s} {dtype}")
            f.write(np.ascontiguousarray(a).tobytes())
    os.replace(tmp, path)


def refusal(arch):
    """None when the knobs are Llama's; otherwise one sentence naming the first knob Llama does not have"""
    if arch["norm"] != "rms":
        return "norm=layernorm (Llama normalises with RMSNorm: norm=rms)"
    if arch["pos"] != "rope":
        return "pos=learned (Llama has rotary positions, no position table: pos=rope)"
    if arch["mlp"] != "swiglu":
        return f"mlp={arch['mlp']} (Llama's MLP is SwiGLU: mlp=swiglu)"
    if arch["bias"]:
        return "bias=1 (Llama's linear layers have no biases here: bias=0)"
    if arch["qknorm"]:
        return "qknorm=1 (Llama has no QK-norm)"
    return None


# ----------------------------------------------------------------------------- export

def export_tensors(cfg, arch, params, out_bf16, src_bf16):
    """{HF name: (safetensors dtype, array)} of LlamaForCausalLM from our params (the table in the module comment)"""
    def conv(a):
        a = np.ascontiguousarray(a)
        if out_bf16:
            return ("bfloat16", a if src_bf16 else g.f32_to_bf16(a))
        return ("float32", g.bf16_to_f32(a) if src_bf16 else a.astype(np.float32, copy=False))

    V, C, NH, KV, F = cfg["V"], cfg["C"], cfg["NH"], arch["KV"], arch["F"]
    hs = C // NH
    q, k = NH * hs, KV * hs
    out = {"model.embed_tokens.weight": conv(params["wte"][:V])}
    for l in range(cfg["L"]):
        p = f"model.layers.{l}."
        qkv, fc = params["qkvw"][l], params["fcw"][l]
        out[p + "input_layernorm.weight"] = conv(params["ln1w"][l])
        out[p + "self_attn.q_proj.weight"] = conv(qkv[:q])
        out[p + "self_attn.k_proj.weight"] = conv(qkv[q:q + k])
        out[p + "self_attn.v_proj.weight"] = conv(qkv[q + k:])
        out[p + "self_attn.o_proj.weight"] = conv(params["attprojw"][l])
        out[p + "post_attention_layernorm.weight"] = conv(params["ln2w"][l])
        out[p + "mlp.gate_proj.weight"] = conv(fc[:F])
        out[p + "mlp.up_proj.weight"] = conv(fc[F:])
        out[p + "mlp.down_proj.weight"] = conv(params["fcprojw"][l])
    out["model.norm.weight"] = conv(params["lnfw"])
    if not arch["tied"]:
        out["lm_head.weight"] = conv(params["lmheadw"][:V])
    return out


def export_config(cfg, arch, out_bf16, eot):
    """config.json of LlamaForCausalLM; eot: the bos/eos token id (GPT-2's <|endoftext|>) or None"""
    c = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg["V"],
        "hidden_size": cfg["C"],
        "intermediate_size": arch["F"],
        "num_hidden_layers": cfg["L"],
        "num_attention_heads": cfg["NH"],
        "num_key_value_heads": arch["KV"],
        "head_dim": cfg["C"] // cfg["NH"],
        "hidden_act": "silu",
        "max_position_embeddings": cfg["maxT"],
        "initializer_range": 0.02,
        "rms_norm_eps": RMSNORM_EPS,
        "rope_theta": float(np.float32(arch["theta"])),
        "rope_scaling": None if not arch.get("rope_scaling") else {
            "rope_type": "llama3",
            "factor": float(np.float32(arch["rope_scaling"]["factor"])),
            "low_freq_factor": float(np.float32(arch["rope_scaling"]["low"])),
            "high_freq_factor": float(np.float32(arch["rope_scaling"]["high"])),
            "original_max_position_embeddings": int(arch["rope_scaling"]["original_max_pos"]),
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": bool(arch["tied"]),
        "use_cache": True,
        "torch_dtype": "bfloat16" if out_bf16 else "float32",
    }
    if eot is not None:
        c["bos_token_id"] = c["eos_token_id"] = eot
    return c


# ----------------------------------------------------------------------------- import

LLAMA_TYPES = ("llama", "mistral")


def import_config(path, c):
    """config.json dict c of a LlamaForCausalLM / MistralForCausalLM -> (cfg, arch) for a version 9/10 file (11/12
    with rope_scaling of rope_type "llama3").
    Dies with one line on what the trainer cannot compute or represent (named in the message)."""
    try:
        C, NH, L = int(c["hidden_size"]), int(c["num_attention_heads"]), int(c["num_hidden_layers"])
        V, F, maxT = int(c["vocab_size"]), int(c["intermediate_size"]), int(c["max_position_embeddings"])
        KV = int(c.get("num_key_value_heads") or NH)
        theta = float(c.get("rope_theta", 10000.0))
        eps = float(c.get("rms_norm_eps", 1e-6))  # LlamaConfig's default
    except (KeyError, TypeError, ValueError) as e:
        g.die(f"{path}: missing or bad Llama field {e} (expected hidden_size, num_attention_heads, num_hidden_layers, "
              f"vocab_size, intermediate_size, max_position_embeddings)")
    tied = c.get("tie_word_embeddings", False)  # LlamaConfig's and MistralConfig's default: untied
    scaling = c.get("rope_scaling")
    stype = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default")) if isinstance(scaling, dict) \
        else scaling
    window = c.get("sliding_window") if c.get("use_sliding_window", True) else None
    head_dim = c.get("head_dim")
    why = None
    if min(C, NH, L, V, F, maxT, KV) <= 0 or C % NH or NH % KV:
        why = f"sizes C={C} NH={NH} KV={KV} L={L} V={V} F={F} maxT={maxT} (positive, NH dividing hidden_size and " \
              f"num_key_value_heads dividing NH expected)"
    elif head_dim is not None and int(head_dim) != C // NH:
        why = f"head_dim {head_dim} other than hidden_size / num_attention_heads = {C // NH}"
    elif (C // NH) % 2:
        why = f"an odd head size {C // NH} (rotary positions rotate pairs)"
    elif c.get("hidden_act", "silu") not in ("silu", "swish"):
        why = f"hidden_act '{c.get('hidden_act')}' (this model's SwiGLU uses silu)"
    elif abs(eps - RMSNORM_EPS) > 1e-12:
        why = f"rms_norm_eps {eps} (the trainer's RMSNorm uses 1e-5, a compile-time constant)"
    elif stype not in (None, "default", "llama3"):
        why = f"rope_scaling '{stype}' (only rope_type 'llama3', Llama-3's frequency scaling, is built)"
    elif stype == "llama3" and llama3_scaling(scaling)[1]:
        why = f"rope_scaling {scaling}: {llama3_scaling(scaling)[1]}"
    elif not (1.0 < theta < 1e12):
        why = f"rope_theta {theta} (expected a number between 1 and 1e12)"
    elif c.get("attention_bias", False) or c.get("mlp_bias", False):
        why = "biases (attention_bias or mlp_bias true; this model's RMSNorm family is built without biases)"
    elif window is not None and int(window) < maxT:
        why = f"sliding_window {window} below max_position_embeddings {maxT} (attention here is over the whole " \
              f"context)"
    elif int(c.get("pretraining_tp", 1) or 1) < 1:
        why = f"pretraining_tp {c.get('pretraining_tp')}"
    elif g.padded_vocab(V) > MAX_VP or maxT > MAX_T or L > MAX_L or C > MAX_C or F > MAX_F:
        why = f"sizes beyond the trainer's limits (Vp <= 2^24, maxT <= 2^20, L <= 4096, C <= 2^17, " \
              f"intermediate_size <= 2^20): V={V} maxT={maxT} L={L} C={C} F={F}"
    if why:
        g.die(f"{path}: {why} is not supported; import_hf.py converts Llama/Mistral models this trainer computes")
    cfg = dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=g.padded_vocab(V))
    arch = dict(norm="rms", pos="rope", theta=float(np.float32(theta)), mlp="swiglu", F=F, KV=KV, bias=0,
                tied=1 if tied else 0, qknorm=0, rope_scaling=llama3_scaling(scaling)[0] if stype == "llama3" else None)
    return cfg, arch


def llama3_scaling(sc):
    """config.json's rope_scaling dict of rope_type "llama3" -> ({factor, low, high, original_max_pos} as float32
    values and an int, None) or (None, why) for a missing or invalid field"""
    try:
        s = dict(factor=float(np.float32(sc["factor"])), low=float(np.float32(sc["low_freq_factor"])),
                 high=float(np.float32(sc["high_freq_factor"])), original_max_pos=sc["original_max_position_embeddings"])
    except (KeyError, TypeError, ValueError) as e:
        return None, f"missing or bad field {e} (llama3 needs factor, low_freq_factor, high_freq_factor, " \
                     f"original_max_position_embeddings)"
    if not isinstance(s["original_max_pos"], int) or isinstance(s["original_max_pos"], bool) \
            or not 1 <= s["original_max_pos"] < 2 ** 31:
        return None, "original_max_position_embeddings (expected an integer >= 1)"
    bad = scaling_invalid(s)
    return (None, bad) if bad else (s, None)


def import_params(hf_dir, cfg, arch, w, out_bf16):
    """{our name: array} of the family file from w = {HF name: (safetensors dtype, array)} (the "model." prefix
    optional); every tensor must be consumed (rotary_emb.inv_freq buffers excepted), so a bias, a QK-norm or any
    other tensor this model does not have is refused with one line naming it"""
    w = {(k[len("model."):] if k.startswith("model.") else k): v for k, v in w.items()}
    used = set()

    def get(name, shape):
        t = g.take_tensor(w, name, shape, hf_dir, "a LlamaForCausalLM state dict", out_bf16)
        used.add(name)
        return t

    L, C, NH, V, Vp, KV, F = cfg["L"], cfg["C"], cfg["NH"], cfg["V"], cfg["Vp"], arch["KV"], arch["F"]
    hs = C // NH

    def padded(a):  # the vocabulary rows V..Vp-1 are zero, as the trainer initialises them
        out = np.zeros((Vp, C), dtype=a.dtype)
        out[:V] = a
        return out

    params = {"wte": padded(get("embed_tokens.weight", (V, C)))}
    per = {n: [] for n in ("ln1w", "qkvw", "attprojw", "ln2w", "fcw", "fcprojw")}
    for l in range(L):
        p = f"layers.{l}."
        per["ln1w"].append(get(p + "input_layernorm.weight", (C,)))
        per["qkvw"].append(np.concatenate([get(p + "self_attn.q_proj.weight", (NH * hs, C)),
                                           get(p + "self_attn.k_proj.weight", (KV * hs, C)),
                                           get(p + "self_attn.v_proj.weight", (KV * hs, C))]))
        per["attprojw"].append(get(p + "self_attn.o_proj.weight", (C, C)))
        per["ln2w"].append(get(p + "post_attention_layernorm.weight", (C,)))
        per["fcw"].append(np.concatenate([get(p + "mlp.gate_proj.weight", (F, C)), get(p + "mlp.up_proj.weight", (F, C))]))
        per["fcprojw"].append(get(p + "mlp.down_proj.weight", (C, F)))
    params.update({n: np.stack(a) for n, a in per.items()})
    params["lnfw"] = get("norm.weight", (C,))
    if "lm_head.weight" in w:
        head = get("lm_head.weight", (V, C))
        if arch["tied"]:  # stored by some savers although tied: it must be the embedding
            if not np.array_equal(head, params["wte"][:V]):
                g.die(f"{hf_dir}: lm_head.weight differs from embed_tokens.weight although tie_word_embeddings is "
                      f"true")
        else:
            params["lmheadw"] = padded(head)
    elif not arch["tied"]:
        g.die(f"{hf_dir}: tensor lm_head.weight missing and tie_word_embeddings is false (an untied head needs it)")
    extra = sorted(k for k in w if k not in used and not k.endswith("rotary_emb.inv_freq"))
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        g.die(f"{hf_dir}: tensor {extra[0]}{more} has no place in this model (biases, QK-norm and other extras are "
              f"not supported)")
    return params
