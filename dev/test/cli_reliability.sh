# dev/test/cli_reliability.sh -- the faults of a run that goes wrong, each with its right value: non-finite
# steps are never applied (--max-bad-steps), damaged model and tokenizer files are refused, the log stays strict
# JSON and UTF-8, samples stay inside the model's vocabulary and never drive the terminal, an earlier log is
# kept, a warmup longer than the run is said, validation covers a fixed token budget (--val-tokens), resume
# refuses every flag that is not on its list, and the data loader keeps only a few shards mapped.
source "$(dirname "$0")/lib_cli.sh"
TRAIN_ABS=$(pwd)/train_gpt_cpu
# check_true VALUE "description": ok when VALUE (an arithmetic result) is non-zero
check_true() { check $(( $1 ? 0 : 1 )) "${@:2}"; }
SHARD=dev/data/tinyshakespeare/tiny_shakespeare_val.bin

# strict_json FILE: every line is UTF-8 and RFC 8259 JSON (no NaN/Infinity, no raw control characters)
strict_json() {
    python3 - "$1" <<'EOF'
import json, sys
def refuse(name):
    raise ValueError("non-standard JSON constant " + name)
with open(sys.argv[1], "rb") as f:
    for i, raw in enumerate(f, 1):
        line = raw.decode("utf-8", errors="strict")
        obj = json.loads(line, parse_constant=refuse)
        if not isinstance(obj, dict):
            raise ValueError("line %d is not an object" % i)
EOF
}

# finite_model FILE: every parameter of an fp32 model file is finite
finite_model() {
    python3 - "$1" <<'EOF'
import math, struct, sys
from array import array
d = open(sys.argv[1], "rb").read()
a = array("f"); a.frombytes(d[1024:])
sys.exit(0 if all(math.isfinite(x) for x in a) else 1)
EOF
}

# ---------------------------------------------------------------- 1. non-finite steps are never applied
D="$TMP/nan"
$TRAIN "${FAST[@]}" -x 8 -u 0 -l 1e30 -n 1 --max-bad-steps 3 -o "$D" > "$TMP/out.txt" 2> "$TMP/err.txt"
rc=$?
check_true $(( rc == 1 && $(grep -c '' "$TMP/err.txt") == 1 )) "a diverged run stops with exit 1 and one stderr line (exit $rc)"
grep -q '^error: steps 2 to 4 all had a non-finite loss or gradient norm and were skipped (--max-bad-steps 3)' "$TMP/err.txt"
check $? "the error names the skipped steps 2 to 4 and --max-bad-steps 3: $(head -c 200 "$TMP/err.txt")"
check_true $(( $(grep -c '^warning: step 2 not applied: loss NaN, gradient norm NaN' "$TMP/out.txt") == 1 &&
          $(grep -c '^warning: step' "$TMP/out.txt") == 1 )) "the first bad step (2) is reported once, with what was not finite"
check_true $(( $(grep -c '"skipped":true' "$D/log.jsonl") == 3 && $(grep -c '"kind":"train"' "$D/log.jsonl") == 4 ))   "the log has the 4 train lines, steps 2-4 marked skipped"
ls "$D"/model_*.bin > "$TMP/models.txt" 2>/dev/null
check_true $(( $(grep -c '' "$TMP/models.txt") == 1 )) "only step 1 was checkpointed: no checkpoint of a skipped step ($(tr '\n' ' ' < "$TMP/models.txt"))"
finite_model "$D/model_00000001.bin"
check $? "the checkpoint written holds only finite values"
grep -q "checkpoint: not written at step 2" "$TMP/out.txt"
check $? "the skipped checkpoint is said"
# 2. ... and that log (NaN loss and norm) is still strict JSON
strict_json "$D/log.jsonl" 2> "$TMP/json_err.txt"
check $? "log of a diverged run is strict JSON and UTF-8 (non-finite numbers as null) $(tail -c 200 "$TMP/json_err.txt")"
python3 -c "
import json,sys
r=[json.loads(l) for l in open('$D/log.jsonl')]
t=[x for x in r if x['kind']=='train']
sys.exit(0 if t[1]['loss'] is None and t[1]['grad_norm'] is None and t[0]['loss'] > 0 else 1)"
check $? "the skipped step's loss and grad_norm are null, the first step's a number"
# a run that ends inside a streak of bad steps fails too (no silent exit 0, no final checkpoint)
$TRAIN "${FAST[@]}" -x 3 -u 0 -l 1e30 -o "$TMP/nan2" > /dev/null 2> "$TMP/err.txt"
rc=$?
check_true $(( rc == 1 )) "a run whose last steps were skipped exits 1 (exit $rc)"
grep -q "^error: the last 2 steps (to step 3) had a non-finite loss" "$TMP/err.txt"
check $? "and says so in one line: $(head -c 160 "$TMP/err.txt")"
check_true $(( $(ls "$TMP/nan2" | grep -c '^model_') == 0 )) "no final checkpoint of NaN weights"
# a healthy run has no skipped step
$TRAIN "${FAST[@]}" -x 3 -o "$TMP/ok" > "$TMP/out.txt" 2>&1
check_true $(( $? == 0 && $(grep -c 'skipped' "$TMP/ok/log.jsonl") == 0 && $(grep -c 'warning' "$TMP/out.txt") == 0 )) "a healthy run skips nothing and warns nothing"

# model files with a non-finite parameter are refused at load, naming tensor, index and layer
python3 - dev/test/fixtures/gpt2_fixture_model.bin "$TMP" <<'EOF'
import struct, sys
src, tmp = sys.argv[1], sys.argv[2]
d = bytearray(open(src, "rb").read())
h = struct.unpack("<256i", d[:1024]); maxT, V, L, NH, C, Vp = h[2:8]
names = ["wte","wpe","ln1w","ln1b","qkvw","qkvb","attprojw","attprojb","ln2w","ln2b","fcw","fcb","fcprojw","fcprojb","lnfw","lnfb"]
sizes = [Vp*C, maxT*C, L*C, L*C, L*3*C*C, L*3*C, L*C*C, L*C, L*C, L*C, L*4*C*C, L*4*C, L*C*4*C, L*C, C, C]
start = dict(zip(names, [sum(sizes[:i]) for i in range(16)]))
def poke(name, index, value, out):
    b = bytearray(d)
    o = 1024 + 4 * (start[name] + index)
    b[o:o+4] = struct.pack("<f", value)
    open(out, "wb").write(b)
poke("fcw", 4*C*C + 7, float("inf"), tmp + "/inf_fcw.bin")      # layer 1 of fcw, index 4*C*C+7
poke("wte", 0, float("nan"), tmp + "/nan_wte.bin")
poke("lnfb", C - 1, float("-inf"), tmp + "/ninf_lnfb.bin")    # the very last parameter
# a bf16 (version 5) file with a NaN in qkvb
def bf16(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16
from array import array
a = array("f"); a.frombytes(bytes(d[1024:]))
raw = array("H", [bf16(x) for x in a])
raw[start["qkvb"] + 5] = 0x7fc0
h5 = list(h); h5[1] = 5
open(tmp + "/nan_qkvb_v5.bin", "wb").write(struct.pack("<256i", *h5) + raw.tobytes())
EOF
C2=64
expect_error "tensor fcw at index $((4 * C2 * C2 + 7)) of $((2 * 4 * C2 * C2)), layer 1" "inf in fcw refused with tensor, index and layer" -- \
    $TRAIN "${FAST[@]}" -x 1 -e "$TMP/inf_fcw.bin"
expect_error "(NaN) in tensor wte at index 0" "NaN in wte refused" -- $TRAIN "${FAST[@]}" -x 1 -e "$TMP/nan_wte.bin"
expect_error "(-inf) in tensor lnfb at index 63 of 64" "-inf as the file's last parameter refused" -- \
    $TRAIN "${FAST[@]}" -x 1 -e "$TMP/ninf_lnfb.bin"
expect_error "(NaN) in tensor qkvb at index 5" "NaN in a bf16 (version 5) model file refused" -- \
    $TRAIN "${FAST[@]}" -x 1 -e "$TMP/nan_qkvb_v5.bin"
python3 -c "
import struct
d=bytearray(open('$TMP/ok/model_00000003.bin','rb').read())
d[1024+4*77:1024+4*78]=struct.pack('<f',float('inf'))
open('$TMP/ok/model_00000003.bin','wb').write(d)"
expect_error "model_00000003.bin' holds a non-finite parameter (+inf) in tensor wte at index 77" "resuming a checkpoint with an inf weight is refused" -- \
    $TRAIN "${FAST[@]}" -x 5 -y 1 -o "$TMP/ok"
