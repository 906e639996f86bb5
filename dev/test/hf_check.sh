# dev/test/hf_check.sh -- the optional transformers tier of scripts/import_hf.py and export_hf.py (not part of
# `make test`: it needs PyTorch and transformers; run it with `make test-hf` or `bash dev/test/hf_check.sh`,
# PYTHON=/path/to/python3 to choose the interpreter that has them). Without them it prints one "# SKIP" line.
#   1. a random GPT2Config model made and saved by transformers (save_pretrained, safetensors) -> import_hf.py ->
#      train_gpt_cpu: its loss on one window of 4 x 32 tokens equals transformers' and its greedy tokens are
#      transformers' greedy tokens;
#   2. a d2 trained here -> export_hf.py -> GPT2LMHeadModel.from_pretrained: the same two comparisons, also for
#      the model as a bf16 (version 5) file exported as bfloat16, and pipeline("text-generation") with the exported
#      tokenizer runs;
#   3. the decoder family's Llama member: a random LlamaConfig model (grouped-query attention, untied head) saved by
#      transformers -> import_hf.py -> train_gpt_cpu, and a family model trained here (KV 2 of 4 heads, untied) ->
#      export_hf.py -> LlamaForCausalLM.from_pretrained, also as bf16 (version 10): the same two comparisons;
#   4. the same both ways with Llama-3 rope frequency scaling (rope_scaling llama3; version 11 files), the window
#      reaching past original_max_position_embeddings / high_freq_factor.
# Tolerance of the losses: 1e-5 relative. Both sides compute in fp32 with different kernels (OpenBLAS and our
# attention/LayerNorm against PyTorch's CPU kernels), so each dot product of K <= 4C = 512 terms differs by rounding
# of order sqrt(K) u ~ 3e-6 relative at most in practice (u = 2^-24 ~ 6e-8; Higham & Mary 2019, probabilistic
# rounding error analysis; for Llama K <= max(C, F, T), F the MLP width); two layers, the LayerNorms (RMSNorms) and
# the log-softmax add a few such terms, well inside 1e-5,
# while any wrong name, transpose or qkv order changes the loss in the first decimals. The printed loss has 6
# decimals (5e-7 absolute, 5e-8 relative at a loss of ~10). Greedy tokens must be equal; each step's margin between
# transformers' best and second-best logit is printed, so a near tie (below 1e-4) would be visible as the cause.
source "$(dirname "$0")/lib_cli.sh"
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch, transformers, numpy, safetensors" 2> /dev/null; then
    echo "ok - transformers tier # SKIP $PY has no torch, transformers, numpy or safetensors (pip install -r requirements/interop-check.txt)"
    exit 0
fi
echo "# $("$PY" -c "import torch, transformers, safetensors, numpy; print(f'torch {torch.__version__}, transformers {transformers.__version__}, safetensors {safetensors.__version__}, numpy {numpy.__version__}')")"
export PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
B=4 T=32 G=8
# the window: the first B*T+1 tokens of the Tiny Shakespeare validation shard, as one shard
"$PY" - "$TMP/win.bin" $((B * T + 1)) <<'PY'
import sys, numpy as np
n = int(sys.argv[2])
toks = np.fromfile("dev/data/tinyshakespeare/tiny_shakespeare_val.bin", dtype="<u2", offset=1024)[:n]
h = np.zeros(256, dtype="<i4"); h[:3] = [20240520, 1, n]
open(sys.argv[1], "wb").write(h.tobytes() + toks.tobytes())
PY
# ours: the validation loss at step 0 (before the one step, which has lr 0) and G greedy tokens from <|endoftext|>
ours() {
    $TRAIN -e "$1" -i "$TMP/win.bin" -j "$TMP/win.bin" -b $B -t $T -x 1 -l 0 -v 1 -m 1 -g $G --temperature 0 \
        --tokenizer '' > "$2" 2>&1
}
# compares a train_gpt_cpu output with transformers on the HF directory: loss on the window, greedy tokens
compare() {
    "$PY" - "$1" "$2" "$TMP/win.bin" $B $T $G "$3" <<'PY'
import re, sys
import numpy as np, torch, torch.nn.functional as F
from transformers import AutoModelForCausalLM
out, hf_dir, win, B, T, G, label = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]), sys.argv[7]
text = open(out).read()
m = re.search(r"^val loss ([0-9.]+) \(step 0\)$", text, re.M)
s = re.search(r"^sample \(from <\|endoftext\|>\): ([0-9 ]+)$", text, re.M)
if not m or not s:
    print(f"not ok - {label}: train_gpt_cpu printed no val loss or sample: {text[-300:]!r}")
    sys.exit(1)
ours_loss, ours_ids = float(m.group(1)), [int(x) for x in s.group(1).split()]  # the generated tokens only
model = AutoModelForCausalLM.from_pretrained(hf_dir).eval()  # GPT2LMHeadModel or LlamaForCausalLM by config.json
toks = torch.from_numpy(np.fromfile(win, dtype="<u2", offset=1024).astype(np.int64))
x, y = toks[:B * T].view(B, T), toks[1:B * T + 1].view(B, T)
with torch.no_grad():
    logits = model(x).logits
    hf_loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item()
    ids, margins = [50256], []
    for _ in range(G):
        last = model(torch.tensor([ids])).logits[0, -1]
        top = torch.topk(last, 2).values
        margins.append((top[0] - top[1]).item())
        ids.append(int(last.argmax()))
rel = abs(ours_loss - hf_loss) / abs(hf_loss)
ok = rel <= 1e-5
print(f"{'ok' if ok else 'not ok'} - {label}: loss on {B}x{T} tokens: ours {ours_loss:.6f}, transformers "
      f"{hf_loss:.6f} (relative difference {rel:.1e} <= 1e-5)")
same = ours_ids == ids[1:]
print(f"{'ok' if same else 'not ok'} - {label}: {G} greedy tokens equal: ours {ours_ids}, transformers {ids[1:]} "
      f"(smallest top-2 logit margin {min(margins):.2e})")
sys.exit(0 if ok and same else 1)
PY
}

# 1. transformers -> ours
"$PY" dev/test/hf_random_model.py gpt2 "$TMP/rand" --positions 64
"$PY" scripts/import_hf.py "$TMP/rand" "$TMP/rand.bin" > "$TMP/import.txt" 2>&1
check $? "import_hf.py reads a model saved by transformers' save_pretrained: $(cut -c1-100 "$TMP/import.txt")"
ours "$TMP/rand.bin" "$TMP/rand_ours.txt"
compare "$TMP/rand_ours.txt" "$TMP/rand" "random GPT2Config model imported"

# 2. ours -> transformers
$TRAIN "${FAST[@]}" -x 20 -o "$TMP/run" > "$TMP/train.txt" 2>&1
"$PY" scripts/export_hf.py "$TMP/run/model_00000020.bin" "$TMP/hf" > "$TMP/export.txt" 2>&1
check $? "export_hf.py of a d2 trained 20 steps: $(cut -c1-100 "$TMP/export.txt")"
ours "$TMP/run/model_00000020.bin" "$TMP/d2_ours.txt"
compare "$TMP/d2_ours.txt" "$TMP/hf" "trained d2 exported"
# bf16: the trained d2 as a version-5 file (rounded as a BF16 build writes it) exports as bfloat16 tensors, which
# transformers reads (upcast to fp32 by from_pretrained); ours reads the v5 file exactly alike
"$PY" -c "
import sys, gpt2_hf as g
cfg, v, p = g.read_model_file(sys.argv[1])
g.write_model_file(sys.argv[2], cfg, g.VERSION_BF16, {k: g.f32_to_bf16(a) for k, a in p.items()})" \
    "$TMP/run/model_00000020.bin" "$TMP/m5.bin"
"$PY" scripts/export_hf.py "$TMP/m5.bin" "$TMP/hf5" > /dev/null 2>&1 && grep -q '"torch_dtype": "bfloat16"' "$TMP/hf5/config.json"
check $? "export_hf.py of the bf16 (v5) file writes bfloat16 weights"
ours "$TMP/m5.bin" "$TMP/d2bf16_ours.txt"
compare "$TMP/d2bf16_ours.txt" "$TMP/hf5" "trained d2 as bf16 exported"
"$PY" - "$TMP/hf" <<'PY'
import sys
from transformers import pipeline
gen = pipeline("text-generation", model=sys.argv[1], tokenizer=sys.argv[1])
r = gen("First Citizen:", max_new_tokens=8, do_sample=False)[0]["generated_text"]
ok = r.startswith("First Citizen:") and len(r) > len("First Citizen:")
print(f"{'ok' if ok else 'not ok'} - pipeline('text-generation') on the exported directory and its tokenizer: {r!r}")
sys.exit(0 if ok else 1)
PY

# 3. the Llama member. transformers -> ours: a random LlamaConfig model (rms_norm_eps 1e-5, the trainer's; GQA 4/2)
"$PY" dev/test/hf_random_model.py llama "$TMP/lrand" --positions 64
"$PY" scripts/import_hf.py "$TMP/lrand" "$TMP/lrand.bin" > "$TMP/limport.txt" 2>&1
check $? "import_hf.py reads a LlamaForCausalLM saved by transformers: $(cut -c1-120 "$TMP/limport.txt")"
ours "$TMP/lrand.bin" "$TMP/lrand_ours.txt"
compare "$TMP/lrand_ours.txt" "$TMP/lrand" "random LlamaConfig model (KV 2 of 4 heads, untied) imported"
# ours -> transformers: a family model trained 20 steps, exported, as fp32 and as bf16 (version 10)
$TRAIN "${FAST[@]/d2/L2:C128:NH4:KV2:T256:norm=rms:pos=rope:theta=500000:mlp=swiglu:bias=0:tied=0}" -x 20 \
    -o "$TMP/lrun" > "$TMP/ltrain.txt" 2>&1
"$PY" scripts/export_hf.py "$TMP/lrun/model_00000020.bin" "$TMP/lhf" > "$TMP/lexport.txt" 2>&1
check $? "export_hf.py of a Llama-style family model trained 20 steps: $(cut -c1-120 "$TMP/lexport.txt")"
ours "$TMP/lrun/model_00000020.bin" "$TMP/l_ours.txt"
compare "$TMP/l_ours.txt" "$TMP/lhf" "trained family model (KV 2, untied) exported as LlamaForCausalLM"
"$PY" -c "
import sys, gpt2_hf as g, llama_hf as lh
cfg, v, arch, p = lh.read_family_model_file(sys.argv[1])
lh.write_family_model_file(sys.argv[2], cfg, arch, lh.VERSION_ARCH_BF16, {k: g.f32_to_bf16(a) for k, a in p.items()})" \
    "$TMP/lrun/model_00000020.bin" "$TMP/l10.bin"
"$PY" scripts/export_hf.py "$TMP/l10.bin" "$TMP/lhf10" > /dev/null 2>&1 && grep -q '"torch_dtype": "bfloat16"' "$TMP/lhf10/config.json"
check $? "export_hf.py of the family model as bf16 (version 10) writes bfloat16 weights"
ours "$TMP/l10.bin" "$TMP/l10_ours.txt"
compare "$TMP/l10_ours.txt" "$TMP/lhf10" "trained family model as bf16 exported as LlamaForCausalLM"

# 4. Llama-3 rope frequency scaling (rope_scaling of rope_type "llama3"; our version 11/12 files). The model's
# original_max_position_embeddings is small (32) so that the 4 x 32 window runs past L / high_freq_factor = 8 and,
# with head size 16 and theta 10000, its 8 frequencies fall in all three bands: pair 0 (wavelength 6.3 < 8) kept,
# pair 1 (19.9, between 8 and 32) blended, pairs 2..7 (> 32) divided by the factor. transformers -> ours: a random
# LlamaConfig model with that scaling; ours -> transformers: a scaled family model trained here, exported.
"$PY" dev/test/hf_random_model.py llama "$TMP/lscaled" --positions 64 --seed 1 --llama3-scaling 8,1,4,32
"$PY" scripts/import_hf.py "$TMP/lscaled" "$TMP/lscaled.bin" > "$TMP/lsimport.txt" 2>&1 &&
    "$PY" -c "
import sys, numpy as np; h = np.fromfile(sys.argv[1], dtype='<i4', count=256)
sys.exit(0 if h[1] == 11 and list(h[21:24].view('<f4')) == [8, 1, 4] and h[24] == 32 else 1)" "$TMP/lscaled.bin"
check $? "import_hf.py reads a LlamaForCausalLM with llama3 rope scaling as version 11, header[21..24] = 8 1 4 32: $(cut -c1-150 "$TMP/lsimport.txt")"
ours "$TMP/lscaled.bin" "$TMP/lscaled_ours.txt"
compare "$TMP/lscaled_ours.txt" "$TMP/lscaled" "random LlamaConfig model with llama3 rope scaling 8/1/4/32 imported"
$TRAIN "${FAST[@]/d2/L2:C64:NH4:KV2:T64:norm=rms:pos=rope:mlp=swiglu:bias=0:tied=0:rope_scaling=8/1/4/32}" -x 20 \
    -o "$TMP/lsrun" > "$TMP/lstrain.txt" 2>&1
"$PY" scripts/export_hf.py "$TMP/lsrun/model_00000020.bin" "$TMP/lshf" > "$TMP/lsexport.txt" 2>&1 &&
    grep -q '"rope_type": "llama3"' "$TMP/lshf/config.json"
check $? "export_hf.py of a scaled family model trained 20 steps writes rope_scaling llama3: $(cut -c1-120 "$TMP/lsexport.txt")"
ours "$TMP/lsrun/model_00000020.bin" "$TMP/ls_ours.txt"
compare "$TMP/ls_ours.txt" "$TMP/lshf" "trained family model with rope_scaling=8/1/4/32 exported as LlamaForCausalLM"
