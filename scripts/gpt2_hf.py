"""
scripts/gpt2_hf.py -- shared by scripts/export_hf.py and scripts/import_hf.py: our GPT-2 model files and the
Hugging Face GPT-2 layout (GPT2LMHeadModel), with numpy and safetensors only.

Our model file (llmc/model_file.h; README "File formats"): little-endian int32 header[256] with
header[0] = 20240326, header[1] = 3 (fp32 parameters) or 5 (raw bf16 parameters), header[2..7] = maxT, V, L, NH,
C, Vp (V padded to a multiple of 128); then the 16 tensors in the order of PARAM_SHAPES, each layer tensor
stacked over L, linear weights as (out, in), qkv rows [q|k|v]; wte rows V..Vp-1 are padding.

Hugging Face GPT-2: Conv1D layers keep their weight as (in, out) (y = x @ W + b), so every linear weight is our
matrix transposed; one tensor per layer ("transformer.h.{l}.attn.c_attn.weight", ...); the LM head is tied to
transformer.wte.weight (V rows, no padding) and not stored. Names are written with the "transformer." prefix that
GPT2LMHeadModel.save_pretrained uses; both prefixed and bare (GPT2Model) names are read.

bf16 values are kept as their raw uint16 bits (numpy has no bfloat16): files of either side in bf16 pass through
unchanged, fp32 -> bf16 rounds to nearest even exactly as llmc/checkpoint.h's float_to_bf16_bits.
Errors: `die` prints one line "error: ..." and exits with status 1.
"""
import json
import os
import sys

import numpy as np

MODEL_MAGIC = 20240326
VERSION_FP32, VERSION_BF16 = 3, 5
HEADER_INTS = 256
GPT2_EOT = 50256
GPT2_VOCAB = 50257


def die(msg):
    """one error line on stderr, status 1 (the project's convention for bad input)"""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def padded_vocab(V):
    """Vp: V rounded up to a multiple of 128 (llmc/gpt2.h)"""
    return (V + 127) // 128 * 128


def param_shapes(L, C, V, maxT):
    """the 16 tensors of our model file, in file order, with their shapes (layer tensors stacked on dim 0)"""
    Vp = padded_vocab(V)
    return [
        ("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
        ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
        ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
        ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,)),
    ]


# per-layer tensors: our name -> (HF name under transformer.h.{l}., transposed for Conv1D)
LAYER_MAP = [
    ("ln1w", "ln_1.weight", False), ("ln1b", "ln_1.bias", False),
    ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", False),
    ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", False),
    ("ln2w", "ln_2.weight", False), ("ln2b", "ln_2.bias", False),
    ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", False),
    ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", False),
]
GLOBAL_MAP = [("wpe", "wpe.weight"), ("lnfw", "ln_f.weight"), ("lnfb", "ln_f.bias")]  # wte: rows 0..V-1


# ----------------------------------------------------------------------------- bf16 as raw bits

def bf16_to_f32(bits):
    """uint16 bf16 bits -> float32 array, exact"""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 array -> uint16 bf16 bits, round to nearest even; NaN stays NaN (llmc/checkpoint.h)"""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def take_tensor(w, name, shape, where, expected, out_bf16):
    """tensor `name` of w = {HF name: (safetensors dtype, array)} as our file stores it: bf16 bits (out_bf16) or
    float32; a missing tensor or another shape exits with one line naming `where` (the directory) and `expected`"""
    if name not in w:
        die(f"{where}: tensor {name} missing (expected {expected})")
    dt, arr = w[name]
    if tuple(arr.shape) != tuple(shape):
        die(f"{where}: tensor {name} has shape {tuple(arr.shape)}, expected {tuple(shape)} from config.json")
    if out_bf16:
        return arr if dt == "BF16" else f32_to_bf16(arr.astype(np.float32))
    return bf16_to_f32(arr) if dt == "BF16" else arr.astype(np.float32)


# ----------------------------------------------------------------------------- our model file

def read_model_file(path):
    """-> (cfg dict maxT V L NH C Vp, version, {name: array}); arrays are float32 (v3) or uint16 bf16 bits (v5),
    shaped as in param_shapes. Checks magic, version, header fields and the file size."""
    if not os.path.isfile(path):
        die(f"{path}: no such model file (expected a model .bin written by train_gpt -o DIR)")
    size = os.path.getsize(path)
    if size < HEADER_INTS * 4:
        die(f"{path}: {size} bytes, too short for a model file header ({HEADER_INTS * 4} bytes)")
    h = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if h[0] == MODEL_MAGIC and h[1] in (7, 8):
        die(f"{path}: a mixture-of-experts model file (version {h[1]}, E={h[8]} experts): Hugging Face GPT-2 has no "
            f"experts; only dense models (version 3 or 5) are converted")
    if h[0] == MODEL_MAGIC and h[1] in (9, 10, 11, 12):
        die(f"{path}: a decoder-family model file (version {h[1]}: architecture knobs other than GPT-2's, e.g. "
            f"RMSNorm), not GPT-2's version 3 or 5 (scripts/llama_hf.py reads it)")
    if h[0] != MODEL_MAGIC or h[1] not in (VERSION_FP32, VERSION_BF16):
        die(f"{path}: header magic/version {h[0]}/{h[1]}, expected {MODEL_MAGIC}/{VERSION_FP32} (fp32) or "
            f"{VERSION_BF16} (bf16): not a model file of this project")
    cfg = dict(maxT=int(h[2]), V=int(h[3]), L=int(h[4]), NH=int(h[5]), C=int(h[6]), Vp=int(h[7]))
    if min(cfg.values()) <= 0 or cfg["C"] % cfg["NH"] or cfg["Vp"] != padded_vocab(cfg["V"]):
        die(f"{path}: invalid header {cfg} (expected positive sizes, C divisible by NH, Vp = V rounded up to 128)")
    shapes = param_shapes(cfg["L"], cfg["C"], cfg["V"], cfg["maxT"])
    dtype = np.dtype("<f4") if h[1] == VERSION_FP32 else np.dtype("<u2")
    n = sum(int(np.prod(s)) for _, s in shapes)
    want = HEADER_INTS * 4 + n * dtype.itemsize
    if size != want:
        die(f"{path}: {size} bytes, expected {want} for {cfg} (truncated or damaged)")
    flat = np.fromfile(path, dtype=dtype, offset=HEADER_INTS * 4)
    params, off = {}, 0
    for name, s in shapes:
        k = int(np.prod(s))
        params[name] = flat[off:off + k].reshape(s)
        off += k
    return cfg, int(h[1]), params


def write_model_file(path, cfg, version, params):
    """writes our model file atomically (path.tmp, then rename); params as read_model_file returns them, float32
    for version 3 and uint16 bf16 bits for version 5"""
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[:8] = [MODEL_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    dtype = np.dtype("<f4") if version == VERSION_FP32 else np.dtype("<u2")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(h.tobytes())
        for name, s in param_shapes(cfg["L"], cfg["C"], cfg["V"], cfg["maxT"]):
            a = params[name]
            if a.shape != s or a.dtype != dtype:
                raise AssertionError(f"internal: {name} is {a.shape} {a.dtype}, expected {s} {dtype}")
            f.write(np.ascontiguousarray(a).tobytes())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- safetensors

ST_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F64": np.dtype("<f8")}


def import_safetensors():
    try:
        import safetensors
    except ImportError:
        die("the Python package safetensors is not installed (pip install -r requirements/interop.txt)")
    return safetensors


def read_safetensors(path):
    """-> {name: (dtype string 'F32'/'F16'/'BF16'/..., numpy array)}; BF16 as uint16 bits (numpy has no bf16)"""
    st = import_safetensors()
    with open(path, "rb") as f:
        raw = f.read()
    try:
        items = st.deserialize(raw)
    except Exception as e:  # the library's own error, on one line
        die(f"{path}: not a readable safetensors file ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    out = {}
    for name, t in items:
        dt = ST_DTYPES.get(t["dtype"])
        if dt is None:
            die(f"{path}: tensor {name} has dtype {t['dtype']}, expected F32, F16 or BF16")
        out[name] = (t["dtype"], np.frombuffer(bytes(t["data"]), dtype=dt).reshape(t["shape"]))
    return out


def write_safetensors(path, tensors, metadata):
    """tensors: {name: (dtype string 'float32' or 'bfloat16', contiguous numpy array: float32, or uint16 bits)}.
    Written to path.tmp and renamed. Uses safetensors' raw serializer, the one API that takes bfloat16 without
    torch (TensorSpec objects from safetensors 0.6 on, plain dicts before)."""
    st = import_safetensors()
    arrays = {k: np.ascontiguousarray(a) for k, (_, a) in tensors.items()}
    if hasattr(st, "TensorSpec"):
        specs = {k: st.TensorSpec(dtype=dt, shape=list(arrays[k].shape), data_ptr=arrays[k].ctypes.data,
                                  data_len=arrays[k].nbytes) for k, (dt, _) in tensors.items()}
    else:
        specs = {k: {"dtype": dt, "shape": list(arrays[k].shape), "data": arrays[k].tobytes()}
                 for k, (dt, _) in tensors.items()}
    data = bytes(st.serialize(specs, metadata=metadata))
    del arrays  # kept alive until serialize returned (TensorSpec holds raw pointers)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
