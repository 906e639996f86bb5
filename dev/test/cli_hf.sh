# dev/test/cli_hf.sh -- scripts/export_hf.py and scripts/import_hf.py without torch: a trained d2 exported to a
# Hugging Face GPT-2 directory is checked through safetensors' numpy API (names, shapes, Conv1D transposes, values,
# padded vocabulary rows dropped), config and tokenizer files; export + import round trips are bit-identical for
# fp32 (v3) and bf16 (v5) model files; bare GPT2Model names import alike; the trainer loads an imported file; bad
# input is refused with one line. Needs python3 with numpy and safetensors (scripts/install_deps.sh installs them);
# without them it prints one "# SKIP" line. The transformers comparison is dev/test/hf_check.sh (optional tier).
source "$(dirname "$0")/lib_cli.sh"
if ! python3 -c "import numpy, safetensors" 2> /dev/null; then
    echo "ok - interop round trip # SKIP python3 has no numpy or safetensors module (bash scripts/install_deps.sh)"
    exit 0
fi
export PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
$TRAIN "${FAST[@]}" -x 3 -o "$TMP/run" > "$TMP/train.txt" 2>&1
M="$TMP/run/model_00000003.bin"
test -f "$M"
check $? "train_gpt_cpu -e d2 -x 3 -o wrote $M"

python3 scripts/export_hf.py "$M" "$TMP/hf" > "$TMP/export.txt" 2>&1
check $? "export_hf.py d2 (fp32) -> HF directory: $(tail -n 1 "$TMP/export.txt" | cut -c1-120)"
python3 - "$M" "$TMP/hf" <<'PY'
import json, os, sys, filecmp
import numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open
import gpt2_hf as g
cfg, version, p = g.read_model_file(sys.argv[1])
d = sys.argv[2]
t = load_file(os.path.join(d, "model.safetensors"))
L, C, V = cfg["L"], cfg["C"], cfg["V"]
fails = []
def check(ok, what):
    print(("ok - " if ok else "not ok - ") + what)
    if not ok: fails.append(what)
names = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"}
names |= {f"transformer.h.{l}.{n}" for l in range(L) for _, n, _ in g.LAYER_MAP}
check(set(t) == names, f"safetensors holds exactly the {len(names)} GPT2LMHeadModel names (no lm_head: tied)")
shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (cfg["maxT"], C),
          "transformer.h.0.attn.c_attn.weight": (C, 3 * C), "transformer.h.0.attn.c_proj.weight": (C, C),
          "transformer.h.0.mlp.c_fc.weight": (C, 4 * C), "transformer.h.0.mlp.c_proj.weight": (4 * C, C),
          "transformer.h.1.attn.c_attn.bias": (3 * C,), "transformer.ln_f.weight": (C,)}
bad = {k: t[k].shape for k, s in shapes.items() if t[k].shape != s}
check(not bad and all(a.dtype == np.float32 for a in t.values()),
      f"shapes are HF's (wte V={V} rows, Conv1D weights (in, out)) and dtype float32; wrong: {bad}")
check(np.array_equal(t["transformer.wte.weight"], p["wte"][:V]) and not p["wte"][V:].any(),
      f"wte equals our first V rows; the {cfg['Vp'] - V} padded rows (zero) are dropped")
tr = all(np.array_equal(t[f"transformer.h.{l}.{n}"], p[o][l].T if tp else p[o][l])
         for l in range(L) for o, n, tp in g.LAYER_MAP)
check(tr and np.array_equal(t["transformer.h.1.mlp.c_fc.weight"], p["fcw"][1].T),
      "every layer tensor equals ours bit for bit, linear weights transposed (c_attn = qkvw^T, c_fc = fcw^T, ...)")
with safe_open(os.path.join(d, "model.safetensors"), "numpy") as f:
    meta = f.metadata()
c = json.load(open(os.path.join(d, "config.json")))
want = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=V, n_positions=cfg["maxT"],
            n_layer=L, n_head=cfg["NH"], n_embd=C, activation_function="gelu_new", tie_word_embeddings=True,
            layer_norm_epsilon=1e-5)
diff = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
check(not diff and meta == {"format": "pt"}, f"config.json says GPT-2 with our sizes and V={V}, metadata format=pt; differs: {diff}")
gen = json.load(open(os.path.join(d, "generation_config.json")))
same = filecmp.cmp(os.path.join(d, "vocab.json"), "dev/data/gpt2/encoder.json", shallow=False) and \
    filecmp.cmp(os.path.join(d, "merges.txt"), "dev/data/gpt2/vocab.bpe", shallow=False)
check(same and gen.get("eos_token_id") == 50256, "vocab.json and merges.txt are the bundled GPT-2 BPE; eos 50256")
sys.exit(1 if fails else 0)
PY

python3 scripts/import_hf.py "$TMP/hf" "$TMP/back.bin" > "$TMP/import.txt" 2>&1 && cmp "$M" "$TMP/back.bin"
check $? "fp32: export + import gives back the model file bit for bit (vocabulary padded to Vp again)"

# bf16 (version 5): the file a BF16 build writes, made here from the fp32 one with the same rounding
python3 -c "
import sys, gpt2_hf as g
cfg, v, p = g.read_model_file(sys.argv[1])
g.write_model_file(sys.argv[2], cfg, g.VERSION_BF16, {k: g.f32_to_bf16(a) for k, a in p.items()})" "$M" "$TMP/m5.bin"
python3 scripts/export_hf.py "$TMP/m5.bin" "$TMP/hf5" > /dev/null 2>&1 &&
    python3 -c "
import sys; from safetensors import safe_open
f = safe_open(sys.argv[1], 'numpy'); sys.exit(0 if {f.get_slice(k).get_dtype() for k in f.keys()} == {'BF16'} else 1)" "$TMP/hf5/model.safetensors" &&
    grep -q '"torch_dtype": "bfloat16"' "$TMP/hf5/config.json" &&
    python3 scripts/import_hf.py "$TMP/hf5" "$TMP/back5.bin" > /dev/null 2>&1 && cmp "$TMP/m5.bin" "$TMP/back5.bin"
check $? "bf16: a v5 file exports as BF16 tensors and imports back to the same v5 file bit for bit"
python3 scripts/export_hf.py --dtype fp32 "$TMP/m5.bin" "$TMP/hf5f" > /dev/null 2>&1 &&
    grep -q '"torch_dtype": "float32"' "$TMP/hf5f/config.json" &&
    python3 scripts/import_hf.py --dtype bf16 "$TMP/hf5f" "$TMP/back5f.bin" > /dev/null 2>&1 && cmp "$TMP/m5.bin" "$TMP/back5f.bin"
check $? "bf16: --dtype fp32 export (exact) and --dtype bf16 import give back the same v5 file"
$TRAIN -e "$TMP/back5.bin" -b 4 -t 32 -j '' -g 0 -u 2 -x 1 > "$TMP/t5.txt" 2>&1 && grep -q '^step *1/1 | loss' "$TMP/t5.txt"
check $? "train_gpt_cpu -e IMPORTED.bin trains from an imported bf16 file: $(grep '^step' "$TMP/t5.txt" | cut -c1-40)"

# a GPT2Model directory (bare names, no "transformer." prefix) imports the same
python3 -c "
import sys, os, gpt2_hf as g
t = g.read_safetensors(os.path.join(sys.argv[1], 'model.safetensors'))
os.makedirs(sys.argv[2])
g.write_safetensors(os.path.join(sys.argv[2], 'model.safetensors'),
                    {k[len('transformer.'):]: ('float32', a) for k, (dt, a) in t.items()}, {'format': 'pt'})" "$TMP/hf" "$TMP/bare"
cp "$TMP/hf/config.json" "$TMP/bare/"
python3 scripts/import_hf.py "$TMP/bare" "$TMP/bare.bin" > /dev/null 2>&1 && cmp "$M" "$TMP/bare.bin"
check $? "bare GPT2Model names (wte.weight, h.0.attn.c_attn.weight, ...) import to the same file"

# refusals: one error line, nothing written
mkdir -p "$TMP/llama" && cp "$TMP/hf/model.safetensors" "$TMP/llama/" &&
    sed 's/"model_type": "gpt2"/"model_type": "llama"/; s/GPT2LMHeadModel/LlamaForCausalLM/' "$TMP/hf/config.json" > "$TMP/llama/config.json"
expect_error "is not GPT-2" "import_hf.py refuses a non-GPT-2 architecture" -- python3 scripts/import_hf.py "$TMP/llama" "$TMP/llama.bin"
test ! -e "$TMP/llama.bin"; check $? "the refused import wrote no file"
mkdir -p "$TMP/gelu" && cp "$TMP/hf/model.safetensors" "$TMP/gelu/" &&
    sed 's/"gelu_new"/"gelu"/' "$TMP/hf/config.json" > "$TMP/gelu/config.json"
expect_error "activation_function 'gelu'" "import_hf.py refuses a GPT-2 with the exact (erf) GELU" -- python3 scripts/import_hf.py "$TMP/gelu" "$TMP/gelu.bin"
expect_error "exists" "import_hf.py does not overwrite an existing model file" -- python3 scripts/import_hf.py "$TMP/hf" "$TMP/back.bin"
expect_error "not empty" "export_hf.py does not write into a directory that is not empty" -- python3 scripts/export_hf.py "$M" "$TMP/hf"
expect_error "not a model file" "export_hf.py refuses a file that is not a model file" -- python3 scripts/export_hf.py dev/data/gpt2_tokenizer.bin "$TMP/x"
