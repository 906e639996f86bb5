# dev/test/cli_hf.sh -- scripts/export_hf.py and scripts/import_hf.py without torch: a trained d2 exported to a
# Hugging Face GPT-2 directory is checked through safetensors' numpy API (names, shapes, Conv1D transposes, values,
# padded vocabulary rows dropped), config and tokenizer files; export + import round trips are bit-identical for
# fp32 (v3) and bf16 (v5) model files; bare GPT2Model names import alike; the trainer loads an imported file; bad
# input is refused with one line. The decoder family's Llama member (second half): two trained models (KV 2 untied,
# KV 1 tied with FF320) export to LlamaForCausalLM directories checked through safetensors (literal HF names and
# shapes, q/k/v/o and gate/up/down against the qkvw/fcw rows read by offsets, config fields), round trip bit for bit
# in fp32 (v9) and bf16 (v10), with Llama-3 rope scaling (v11, v12) too, the trainer's first loss on the imported files equals the original's, Mistral, sharded
# and bare-name directories import alike; dev/test/llama_reference.py's numpy Llama forward of the exported directory
# matches the trainer's loss (1e-5 relative) and greedy tokens, also with llama3 rope scaling; family knobs Llama lacks and Llama configurations the
# trainer cannot compute are refused with one line. Needs python3 with numpy and safetensors (scripts/install_deps.sh installs them);
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
mkdir -p "$TMP/neox" && cp "$TMP/hf/model.safetensors" "$TMP/neox/" &&
    sed 's/"model_type": "gpt2"/"model_type": "gpt_neox"/; s/GPT2LMHeadModel/GPTNeoXForCausalLM/' "$TMP/hf/config.json" > "$TMP/neox/config.json"
expect_error "is not GPT-2, Llama or Mistral" "import_hf.py refuses another architecture (GPT-NeoX)" -- python3 scripts/import_hf.py "$TMP/neox" "$TMP/neox.bin"
test ! -e "$TMP/neox.bin"; check $? "the refused import wrote no file"
mkdir -p "$TMP/gelu" && cp "$TMP/hf/model.safetensors" "$TMP/gelu/" &&
    sed 's/"gelu_new"/"gelu"/' "$TMP/hf/config.json" > "$TMP/gelu/config.json"
expect_error "activation_function 'gelu'" "import_hf.py refuses a GPT-2 with the exact (erf) GELU" -- python3 scripts/import_hf.py "$TMP/gelu" "$TMP/gelu.bin"
expect_error "exists" "import_hf.py does not overwrite an existing model file" -- python3 scripts/import_hf.py "$TMP/hf" "$TMP/back.bin"
expect_error "not empty" "export_hf.py does not write into a directory that is not empty" -- python3 scripts/export_hf.py "$M" "$TMP/hf"
expect_error "not a model file" "export_hf.py refuses a file that is not a model file" -- python3 scripts/export_hf.py dev/data/gpt2_tokenizer.bin "$TMP/x"

# ---------------------------------------------------------------------------------------------------------------
# The decoder family's Llama member <-> LlamaForCausalLM. Two trained models: A untied with grouped-query attention
# (NH 4, KV 2, SwiGLU width 384 by default), B tied with one kv head (multi-query) and an MLP width of 320 (FF320), so
# that tie_word_embeddings, num_key_value_heads and intermediate_size each take two values.
FAM="norm=rms:pos=rope:theta=500000:mlp=swiglu:bias=0"
$TRAIN "${FAST[@]/d2/L2:C128:NH4:KV2:T256:$FAM:tied=0}" -x 3 -o "$TMP/famA" > "$TMP/famA.txt" 2>&1 &&
    $TRAIN "${FAST[@]/d2/L2:C128:NH4:KV1:T256:$FAM:tied=1:FF320}" -x 3 -o "$TMP/famB" > "$TMP/famB.txt" 2>&1
check $? "train_gpt_cpu trains the family models A (KV2, untied) and B (KV1, tied, FF320) 3 steps"
A="$TMP/famA/model_00000003.bin" B="$TMP/famB/model_00000003.bin"
python3 scripts/export_hf.py "$A" "$TMP/hfA" > "$TMP/exportA.txt" 2>&1 &&
    python3 scripts/export_hf.py "$B" "$TMP/hfB" > "$TMP/exportB.txt" 2>&1
check $? "export_hf.py A and B (version 9) -> LlamaForCausalLM: $(cut -c1-150 "$TMP/exportA.txt")"
# names, shapes, dtypes and values through safetensors' own numpy reader, against the trainer's file read by offsets
# computed here from the header (not by scripts/llama_hf.py's table): the HF names are written out literally
python3 - "$A" "$TMP/hfA" "$B" "$TMP/hfB" <<'PY'
import json, os, sys
import numpy as np
from safetensors.numpy import load_file
fails = []
def check(ok, what):
    print(("ok - " if ok else "not ok - ") + what)
    if not ok: fails.append(what)
for path, d in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
    h = np.fromfile(path, dtype="<i4", count=256)
    assert h[1] == 9, h[1]
    maxT, V, L, NH, C, Vp = map(int, h[2:8])
    theta = float(h[14:15].view("<f4")[0])
    F, KV, tied = int(h[16]), int(h[17]), int(h[19])
    hs = C // NH
    Q = (NH + 2 * KV) * hs
    # the file's tensors for these knobs (RMSNorm, rope, SwiGLU, no bias): wte ln1w qkvw attprojw ln2w fcw fcprojw lnfw [lmheadw]
    order = [("wte", (Vp, C)), ("ln1w", (L, C)), ("qkvw", (L, Q, C)), ("attprojw", (L, C, C)), ("ln2w", (L, C)),
             ("fcw", (L, 2 * F, C)), ("fcprojw", (L, C, F)), ("lnfw", (C,))] + ([] if tied else [("lmheadw", (Vp, C))])
    flat = np.fromfile(path, dtype="<f4", offset=1024)
    p, off = {}, 0
    for n, s in order:
        p[n] = flat[off:off + int(np.prod(s))].reshape(s); off += int(np.prod(s))
    check(off == flat.size, f"{os.path.basename(os.path.dirname(path))}: the file holds exactly the Llama member's tensors")
    t = load_file(os.path.join(d, "model.safetensors"))
    want = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for l in range(L):
        pre = f"model.layers.{l}."
        want.update({pre + "input_layernorm.weight": (C,), pre + "post_attention_layernorm.weight": (C,),
                     pre + "self_attn.q_proj.weight": (NH * hs, C), pre + "self_attn.k_proj.weight": (KV * hs, C),
                     pre + "self_attn.v_proj.weight": (KV * hs, C), pre + "self_attn.o_proj.weight": (C, C),
                     pre + "mlp.gate_proj.weight": (F, C), pre + "mlp.up_proj.weight": (F, C),
                     pre + "mlp.down_proj.weight": (C, F)})
    if not tied:
        want["lm_head.weight"] = (V, C)
    got = {k: tuple(a.shape) for k, a in t.items()}
    check(got == want and all(a.dtype == np.float32 for a in t.values()),
          f"KV={KV} tied={tied}: the {len(want)} tensors have LlamaForCausalLM's names and shapes (q NH*hs={NH * hs}, "
          f"k/v KV*hs={KV * hs}, gate/up F={F} rows), float32{'' if tied else ', lm_head.weight present'}; "
          f"differs: {set(got.items()) ^ set(want.items())}")
    q0, k0 = NH * hs, NH * hs + KV * hs
    split = all(np.array_equal(t[f"model.layers.{l}.self_attn.q_proj.weight"], p["qkvw"][l, :q0]) and
                np.array_equal(t[f"model.layers.{l}.self_attn.k_proj.weight"], p["qkvw"][l, q0:k0]) and
                np.array_equal(t[f"model.layers.{l}.self_attn.v_proj.weight"], p["qkvw"][l, k0:]) and
                np.array_equal(t[f"model.layers.{l}.self_attn.o_proj.weight"], p["attprojw"][l]) and
                np.array_equal(t[f"model.layers.{l}.mlp.gate_proj.weight"], p["fcw"][l, :F]) and
                np.array_equal(t[f"model.layers.{l}.mlp.up_proj.weight"], p["fcw"][l, F:]) and
                np.array_equal(t[f"model.layers.{l}.mlp.down_proj.weight"], p["fcprojw"][l]) and
                np.array_equal(t[f"model.layers.{l}.input_layernorm.weight"], p["ln1w"][l]) and
                np.array_equal(t[f"model.layers.{l}.post_attention_layernorm.weight"], p["ln2w"][l]) for l in range(L))
    check(split, f"KV={KV}: q/k/v_proj are qkvw's rows [0,{q0}) [{q0},{k0}) [{k0},{Q}), o_proj attprojw, gate/up fcw's "
                 f"rows [0,{F}) [{F},{2 * F}), down_proj fcprojw, the norms ln1w/ln2w, bit for bit, in every layer")
    heads = np.array_equal(t["model.embed_tokens.weight"], p["wte"][:V]) and not p["wte"][V:].any() and \
        np.array_equal(t["model.norm.weight"], p["lnfw"]) and \
        (tied or (np.array_equal(t["lm_head.weight"], p["lmheadw"][:V]) and not p["lmheadw"][V:].any()))
    check(heads, f"tied={tied}: embed_tokens = wte[:V]{'' if tied else ', lm_head = lmheadw[:V]'}, norm = lnfw; the "
                 f"{Vp - V} padded rows (zero) dropped")
    c = json.load(open(os.path.join(d, "config.json")))
    cw = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=C, intermediate_size=F,
              num_attention_heads=NH, num_key_value_heads=KV, num_hidden_layers=L, rms_norm_eps=1e-5,
              rope_theta=theta, max_position_embeddings=maxT, vocab_size=V, tie_word_embeddings=bool(tied),
              hidden_act="silu", attention_bias=False, mlp_bias=False, torch_dtype="float32", rope_scaling=None)
    diff = {k: c.get(k) for k, v in cw.items() if c.get(k) != v or type(c.get(k)) != type(v)}
    check(not diff and os.path.isfile(os.path.join(d, "vocab.json")),
          f"KV={KV} tied={tied}: config.json is Llama's with our sizes (theta {theta:g}, eps 1e-5, V {V}); tokenizer "
          f"files present; differs: {diff}")
sys.exit(1 if fails else 0)
PY
python3 scripts/import_hf.py "$TMP/hfA" "$TMP/backA.bin" > "$TMP/importA.txt" 2>&1 && cmp "$A" "$TMP/backA.bin" &&
    python3 scripts/import_hf.py "$TMP/hfB" "$TMP/backB.bin" > /dev/null 2>&1 && cmp "$B" "$TMP/backB.bin"
check $? "fp32: A and B export + import give back the version 9 files bit for bit: $(cut -c1-150 "$TMP/importA.txt")"

# bf16 (version 10): made from the fp32 files with a BF16 build's rounding
for m in A B; do
    python3 -c "
import sys, gpt2_hf as g, llama_hf as lh
cfg, v, arch, p = lh.read_family_model_file(sys.argv[1])
lh.write_family_model_file(sys.argv[2], cfg, arch, lh.VERSION_ARCH_BF16, {k: g.f32_to_bf16(a) for k, a in p.items()})" \
        "$TMP/fam$m/model_00000003.bin" "$TMP/${m}10.bin"
done
python3 scripts/export_hf.py "$TMP/A10.bin" "$TMP/hfA10" > /dev/null 2>&1 &&
    python3 -c "
import sys; from safetensors import safe_open
f = safe_open(sys.argv[1], 'numpy'); sys.exit(0 if {f.get_slice(k).get_dtype() for k in f.keys()} == {'BF16'} else 1)" "$TMP/hfA10/model.safetensors" &&
    grep -q '"torch_dtype": "bfloat16"' "$TMP/hfA10/config.json" &&
    python3 scripts/import_hf.py "$TMP/hfA10" "$TMP/backA10.bin" > /dev/null 2>&1 && cmp "$TMP/A10.bin" "$TMP/backA10.bin" &&
    python3 scripts/export_hf.py "$TMP/B10.bin" "$TMP/hfB10" > /dev/null 2>&1 &&
    python3 scripts/import_hf.py "$TMP/hfB10" "$TMP/backB10.bin" > /dev/null 2>&1 && cmp "$TMP/B10.bin" "$TMP/backB10.bin"
check $? "bf16: A and B as version 10 export as BF16 tensors and import back bit for bit"
python3 scripts/export_hf.py --dtype fp32 "$TMP/A10.bin" "$TMP/hfA10f" > /dev/null 2>&1 &&
    grep -q '"torch_dtype": "float32"' "$TMP/hfA10f/config.json" &&
    python3 scripts/import_hf.py --dtype bf16 "$TMP/hfA10f" "$TMP/backA10f.bin" > /dev/null 2>&1 && cmp "$TMP/A10.bin" "$TMP/backA10f.bin"
check $? "bf16: --dtype fp32 export (exact) and --dtype bf16 import give back the same version 10 file"

# the trainer loads the imported files: its first loss equals the original's (log.jsonl holds 9 digits)
first_loss() { grep -o '"kind":"train","step":1,"loss":[^,]*' "$1/log.jsonl"; }
for pair in "$A:$TMP/backA.bin" "$TMP/B10.bin:$TMP/backB10.bin"; do
    $TRAIN -e "${pair%%:*}" -b 4 -t 32 -j '' -g 0 -u 2 -x 1 -o "$TMP/l1" > /dev/null 2>&1 &&
        $TRAIN -e "${pair#*:}" -b 4 -t 32 -j '' -g 0 -u 2 -x 1 -o "$TMP/l2" > /dev/null 2>&1
    l1=$(first_loss "$TMP/l1") l2=$(first_loss "$TMP/l2")
    test -n "$l1" && test "$l1" = "$l2"
    check $? "train_gpt_cpu -e $(basename "${pair#*:}") (imported) trains; its first loss equals the original's: ${l2##*:} vs ${l1##*:}"
    rm -rf "$TMP/l1" "$TMP/l2"
done

# a Mistral directory (same names; sliding_window null), a sharded index and bare LlamaModel names import alike
mkdir -p "$TMP/mistral" && cp "$TMP/hfA/model.safetensors" "$TMP/mistral/" &&
    python3 -c "
import json, sys; c = json.load(open(sys.argv[1])); c.update(model_type='mistral', architectures=['MistralForCausalLM'], sliding_window=None)
json.dump(c, open(sys.argv[2], 'w'))" "$TMP/hfA/config.json" "$TMP/mistral/config.json" &&
    python3 scripts/import_hf.py "$TMP/mistral" "$TMP/mistral.bin" > /dev/null 2>&1 && cmp "$A" "$TMP/mistral.bin"
check $? "a MistralForCausalLM directory (sliding_window null) imports to the same file"
python3 -c "
import json, os, sys, gpt2_hf as g
t = g.read_safetensors(os.path.join(sys.argv[1], 'model.safetensors'))
os.makedirs(sys.argv[2]); os.makedirs(sys.argv[3])
names = sorted(t)
shards = {'model-00001-of-00002.safetensors': names[::2], 'model-00002-of-00002.safetensors': names[1::2]}
for f, ns in shards.items():
    g.write_safetensors(os.path.join(sys.argv[2], f), {k: ('float32', t[k][1]) for k in ns}, {'format': 'pt'})
g.write_json(os.path.join(sys.argv[2], 'model.safetensors.index.json'), {'weight_map': {k: f for f, ns in shards.items() for k in ns}})
g.write_safetensors(os.path.join(sys.argv[3], 'model.safetensors'),
                    {k[len('model.'):] if k.startswith('model.') else k: ('float32', a) for k, (dt, a) in t.items()}, {'format': 'pt'})" \
    "$TMP/hfB" "$TMP/shardB" "$TMP/bareB"
cp "$TMP/hfB/config.json" "$TMP/shardB/" && cp "$TMP/hfB/config.json" "$TMP/bareB/" &&
    python3 scripts/import_hf.py "$TMP/shardB" "$TMP/shardB.bin" > /dev/null 2>&1 && cmp "$B" "$TMP/shardB.bin" &&
    python3 scripts/import_hf.py "$TMP/bareB" "$TMP/bareB.bin" > /dev/null 2>&1 && cmp "$B" "$TMP/bareB.bin"
check $? "B from two shards with model.safetensors.index.json, and with bare LlamaModel names, imports to the same file"

# An independent check of the math: dev/test/llama_reference.py, a numpy float64 forward of the exported HF directory
# (Llama's RMSNorm, rotate_half rotary, repeat_kv, SwiGLU, read from config.json and model.safetensors only), against
# the trainer's loss on one 4 x 32 window (the val record at step 0, 9 digits) and its 8 greedy tokens.
# Tolerance 1e-5 relative, as dev/test/hf_check.sh argues for GPT-2: the trainer computes in fp32 (OpenBLAS, our
# attention and RMSNorm), each dot product of K <= max(C, F, T) = 384 terms carrying rounding of order sqrt(K) u
# ~ 1.2e-6 relative (u = 2^-24; Higham & Mary 2019), the rotary table rounded once to fp32 (3e-8), two layers and the
# log-softmax adding a few such terms; the float64 reference adds nothing comparable. Observed: ~3e-8.
# Sensitivity: the trained models are 3 steps from their initialisation (std 0.02), where attention is nearly uniform
# and the norms' weights are ~1, so a rotary or norm bug would move the loss by little; a third model "S" with A's
# shape and random larger weights (norm weights 1 +- 0.3) is checked too, and there the reference's --mutants shows
# that each plausible conversion bug moves the loss by more than 100x the tolerance.
python3 - "$A" "$TMP/S.bin" <<'PY'
import sys, numpy as np, llama_hf as lh
cfg, v, arch, p = lh.read_family_model_file(sys.argv[1])
rng = np.random.default_rng(7)
scale = dict(wte=1.0, qkvw=0.15, attprojw=0.1, fcw=0.15, fcprojw=0.1, lmheadw=0.1)
q = {}
for n, a in p.items():
    if n in ("ln1w", "ln2w", "lnfw"):
        q[n] = (1 + 0.3 * rng.standard_normal(a.shape)).astype(np.float32)
    else:
        q[n] = (scale[n] * rng.standard_normal(a.shape)).astype(np.float32)
        if n in ("wte", "lmheadw"):
            q[n][cfg["V"]:] = 0  # the padded vocabulary rows stay zero, as the trainer keeps them
lh.write_family_model_file(sys.argv[2], cfg, arch, v, q)
PY
python3 scripts/export_hf.py "$TMP/S.bin" "$TMP/hfS" > /dev/null 2>&1
check $? "export_hf.py of S (A's shape, random weights of std 0.1-1, written by scripts/llama_hf.py)"
# R: S with Llama-3 rope frequency scaling 8/1/8/64 (version 11). Head size 32, theta 500000: pair 0 (wavelength 6.3
# < 64/8) kept, pairs 1 and 2 (14.3, 32.5, up to 64/1) blended, pairs 3..15 divided by 8, so the 32-token window
# exercises all three bands; the trainer's table (llmc/rope_table.h) against llama_reference.py's numpy rule.
python3 - "$TMP/S.bin" "$TMP/R.bin" <<'PY'
import sys, llama_hf as lh
cfg, v, arch, p = lh.read_family_model_file(sys.argv[1])
arch["rope_scaling"] = dict(factor=8.0, low=1.0, high=8.0, original_max_pos=64)
lh.write_family_model_file(sys.argv[2], cfg, arch, lh.family_version(arch, False), p)
PY
python3 scripts/export_hf.py "$TMP/R.bin" "$TMP/hfR" > /dev/null 2>&1 &&
    python3 -c "
import json, sys; c = json.load(open(sys.argv[1]))
want = dict(rope_type='llama3', factor=8.0, low_freq_factor=1.0, high_freq_factor=8.0, original_max_position_embeddings=64)
sys.exit(0 if c['rope_scaling'] == want and type(c['rope_scaling']['original_max_position_embeddings']) is int else 1)" "$TMP/hfR/config.json" &&
    python3 scripts/import_hf.py "$TMP/hfR" "$TMP/backR.bin" > /dev/null 2>&1 && cmp "$TMP/R.bin" "$TMP/backR.bin"
check $? "R (version 11, rope_scaling 8/1/8/64) exports config.json rope_scaling {rope_type llama3, factor 8, low 1, high 8, original 64} and imports back bit for bit"
python3 -c "
import sys, gpt2_hf as g, llama_hf as lh
cfg, v, arch, p = lh.read_family_model_file(sys.argv[1])
lh.write_family_model_file(sys.argv[2], cfg, arch, lh.family_version(arch, True), {k: g.f32_to_bf16(a) for k, a in p.items()})" \
    "$TMP/R.bin" "$TMP/R12.bin" &&
    python3 scripts/export_hf.py "$TMP/R12.bin" "$TMP/hfR12" > /dev/null 2>&1 &&
    python3 scripts/import_hf.py "$TMP/hfR12" "$TMP/backR12.bin" > /dev/null 2>&1 && cmp "$TMP/R12.bin" "$TMP/backR12.bin" &&
    python3 -c "
import sys, numpy as np; h = np.fromfile(sys.argv[1], dtype='<i4', count=256)
sys.exit(0 if h[1] == 12 and list(h[21:24].view('<f4')) == [8, 1, 8] and h[24] == 64 else 1)" "$TMP/backR12.bin"
check $? "R as bf16 is version 12 with header[21..24] = 8 1 8 64 and round trips bit for bit"
python3 - "$TMP/win.bin" 129 <<'PY'
import sys, numpy as np
n = int(sys.argv[2])
toks = np.fromfile("dev/data/tinyshakespeare/tiny_shakespeare_val.bin", dtype="<u2", offset=1024)[:n]
h = np.zeros(256, dtype="<i4"); h[:3] = [20240520, 1, n]
open(sys.argv[1], "wb").write(h.tobytes() + toks.tobytes())
PY
for m in A B S R; do
    case $m in A) f=$A ;; B) f=$B ;; S) f=$TMP/S.bin ;; R) f=$TMP/R.bin ;; esac
    $TRAIN -e "$f" -i "$TMP/win.bin" -j "$TMP/win.bin" -b 4 -t 32 -x 1 -l 0 -v 1 -m 1 -g 8 --temperature 0 \
        --tokenizer '' -o "$TMP/ref$m" > "$TMP/ref$m.txt" 2>&1
    python3 dev/test/llama_reference.py "$TMP/hf$m" "$TMP/win.bin" 4 32 "$TMP/ref$m/log.jsonl" "$TMP/ref$m.txt" 8 \
        "model $m exported, numpy Llama vs train_gpt_cpu" $([ $m = S ] || [ $m = R ] && echo --mutants)
done

# refusals, one line each: family knobs Llama does not have (small files written by scripts/llama_hf.py)
python3 - "$A" "$TMP" <<'PY'
import os, sys, numpy as np, llama_hf as lh
_, v, arch, _ = lh.read_family_model_file(sys.argv[1])
cfg = dict(maxT=16, V=100, L=1, NH=4, C=64, Vp=128)
for name, change in (("relu2", dict(mlp="relu2")), ("ln", dict(norm="layernorm", bias=1)), ("bias", dict(bias=1)),
                     ("learned", dict(pos="learned"))):
    a = dict(arch, **change)
    z = {n: np.zeros(s, dtype=np.float32) for n, s in lh.family_shapes(cfg, a)}
    lh.write_family_model_file(os.path.join(sys.argv[2], f"var_{name}.bin"), cfg, a, v, z)
h = np.fromfile(sys.argv[1], dtype="<i4", count=256)
h[8:12] = [4, 2, 1, 64]  # a mixture-of-experts header
open(os.path.join(sys.argv[2], "var_moe.bin"), "wb").write(h.tobytes())
PY
expect_error "mlp=relu2" "export_hf.py refuses a family model with mlp=relu2" -- python3 scripts/export_hf.py "$TMP/var_relu2.bin" "$TMP/x"
expect_error "norm=layernorm" "export_hf.py refuses a family model with LayerNorm" -- python3 scripts/export_hf.py "$TMP/var_ln.bin" "$TMP/x"
expect_error "bias=1" "export_hf.py refuses a family model with biases" -- python3 scripts/export_hf.py "$TMP/var_bias.bin" "$TMP/x"
expect_error "pos=learned" "export_hf.py refuses a family model with learned positions" -- python3 scripts/export_hf.py "$TMP/var_learned.bin" "$TMP/x"
expect_error "mixture-of-experts" "export_hf.py refuses a family model with experts" -- python3 scripts/export_hf.py "$TMP/var_moe.bin" "$TMP/x"
test ! -e "$TMP/x"; check $? "the refused exports wrote no directory"
# import refusals: config.json of A's directory with one field changed (the weights stay)
refuse_cfg() {  # refuse_cfg NAME 'PYTHON DICT UPDATE' NEEDLE DESCRIPTION
    mkdir -p "$TMP/r_$1" && ln -sf "$TMP/hfA/model.safetensors" "$TMP/r_$1/model.safetensors" &&
        python3 -c "
import json, sys; c = json.load(open(sys.argv[1])); c.update($2); json.dump(c, open(sys.argv[2], 'w'))" \
            "$TMP/hfA/config.json" "$TMP/r_$1/config.json"
    expect_error "$3" "import_hf.py refuses $4" -- python3 scripts/import_hf.py "$TMP/r_$1" "$TMP/r_$1.bin"
}
refuse_cfg eps "rms_norm_eps=1e-6" "rms_norm_eps 1e-06" "rms_norm_eps 1e-6 (the trainer's is 1e-5)"
refuse_cfg rs "rope_scaling=dict(rope_type='yarn', factor=4.0, original_max_position_embeddings=64)" \
    "rope_scaling 'yarn'" "a rope scaling other than llama3 (yarn)"
refuse_cfg rsl "rope_scaling=dict(rope_type='llama3', factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0, original_max_position_embeddings=64)" \
    "high_freq_factor" "llama3 rope scaling with high_freq_factor below low_freq_factor"
refuse_cfg rso "rope_scaling=dict(rope_type='llama3', factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)" \
    "original_max_position_embeddings" "llama3 rope scaling without original_max_position_embeddings"
refuse_cfg sw "model_type='mistral', sliding_window=64" "sliding_window 64" "a Mistral sliding window below maxT"
refuse_cfg hd "head_dim=16" "head_dim 16" "head_dim other than hidden_size / num_attention_heads"
refuse_cfg ab "attention_bias=True" "biases" "attention_bias"
refuse_cfg act "hidden_act='gelu'" "hidden_act 'gelu'" "an MLP activation other than silu"
refuse_cfg kv "num_key_value_heads=3" "num_key_value_heads dividing" "key/value heads not dividing the heads"
mkdir -p "$TMP/r_extra" && cp "$TMP/hfA/config.json" "$TMP/r_extra/" && python3 -c "
import os, sys, numpy as np, gpt2_hf as g
t = {k: ('float32', a) for k, (dt, a) in g.read_safetensors(os.path.join(sys.argv[1], 'model.safetensors')).items()}
t['model.layers.0.self_attn.q_proj.bias'] = ('float32', np.zeros(128, dtype=np.float32))
g.write_safetensors(os.path.join(sys.argv[2], 'model.safetensors'), t, {'format': 'pt'})" "$TMP/hfA" "$TMP/r_extra"
expect_error "q_proj.bias" "import_hf.py refuses a tensor the model does not have (a q_proj bias)" -- python3 scripts/import_hf.py "$TMP/r_extra" "$TMP/r_extra.bin"
ls "$TMP"/r_*.bin > /dev/null 2>&1; test $? -ne 0; check $? "the refused imports wrote no file"
