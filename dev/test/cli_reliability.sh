# dev/test/cli_reliability.sh -- the faults of a run that goes wrong, each with its right value: non-finite
# steps are never applied (--max-bad-steps), damaged model and tokenizer files are refused, the log stays strict
# JSON and UTF-8, samples stay inside the model's vocabulary and never drive the terminal, an earlier log is
# kept, a warmup longer than the run is said, validation covers a fixed token budget (--val-tokens), resume
# refuses every flag that is not on its list, and the data loader keeps only a few shards mapped.
source "$(dirname "$0")/dp_lib.sh"   # lib_cli.sh and MPIRUN
TRAIN_ABS="$(realpath "$TRAIN_BIN") --cpu-matmul fp32" # unquoted where used, as $TRAIN (lib_cli.sh)
# check_true VALUE "description": ok when VALUE (an arithmetic result) is non-zero
check_true() { check $(( $1 ? 0 : 1 )) "${@:2}"; }

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

# ---------------------------------------------------------------- small test assets: a model of 1,000 tokens
# model (maxT 64, V 1000, Vp 1024, L 2, NH 4, C 64), a shard of ids < 1000, and tokenizers: ctl.bin (tokens
# 0-255 the single bytes, 256-998 terminal control sequences, 999 <|endoftext|>), ctl_badeot.bin like it but
# with a header EOT that is a control token, and a corrupt one (bad magic)
python3 - "$TMP" <<'EOF'
import random, struct, sys
from array import array
tmp = sys.argv[1]
random.seed(5)
maxT, V, L, NH, C, Vp = 64, 1000, 2, 4, 64, 1024
sizes = [Vp*C, maxT*C, L*C, L*C, L*3*C*C, L*3*C, L*C*C, L*C, L*C, L*C, L*4*C*C, L*4*C, L*C*4*C, L*C, C, C]
ones = {2, 8, 14}  # ln1w, ln2w, lnfw
w = array("f")
for i, n in enumerate(sizes):
    w.extend([1.0] * n if i in ones else [random.gauss(0, 0.02) for _ in range(n)])
h = [0] * 256; h[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
open(tmp + "/v1000.bin", "wb").write(struct.pack("<256i", *h) + w.tobytes())
toks = array("H", [random.randrange(V) for _ in range(4096)])
h = [0] * 256; h[:3] = [20240520, 1, len(toks)]
open(tmp + "/v1000_shard.bin", "wb").write(struct.pack("<256i", *h) + toks.tobytes())
def tokenizer(path, magic, eot):
    tk = [bytes([i]) for i in range(256)] + [b"\x1b[2J\x07\r\x08\x1b]0;owned\x07" + str(i).encode() for i in range(256, 999)] + [b"<|endoftext|>"]
    h = [0] * 256; h[:4] = [magic, 2, len(tk), eot]
    open(path, "wb").write(struct.pack("<256i", *h) + b"".join(bytes([len(t)]) + t for t in tk))
tokenizer(tmp + "/ctl.bin", 20240328, 999)
tokenizer(tmp + "/bad_magic_tok.bin", 20240329, 999)
EOF
V1000=(-e "$TMP/v1000.bin" -i "$TMP/v1000_shard.bin" -j '' -b 2 -t 32 -u 0 -x 1 -l 1e-3)

# ---------------------------------------------------------------- 1. non-finite steps are never applied
D="$TMP/nan"
$TRAIN "${V1000[@]}" -g 0 -x 8 -l 1e30 -n 1 --max-bad-steps 3 -o "$D" > "$TMP/out.txt" 2> "$TMP/err.txt"
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
# ... also the numbers nested in a mixture-of-experts step's per-block statistics (aux and z of a NaN router)
$TRAIN -e d2 -b 2 -t 16 -j '' -g 0 -u 0 -l 1e30 -x 3 --max-bad-steps 10 --moe-experts 2 --moe-top-k 1 \
    -o "$TMP/nan_moe" > /dev/null 2>&1
strict_json "$TMP/nan_moe/log.jsonl" 2> "$TMP/json_err.txt" && python3 -c "
import json,sys
t=[x for x in map(json.loads, open('$TMP/nan_moe/log.jsonl')) if x['kind']=='train']
sys.exit(0 if t[-1].get('skipped') and all(b['aux'] is None and b['z'] is None for b in t[-1]['moe'])
         and all(b['aux'] > 0 for b in t[0]['moe']) else 1)"
check $? "a diverged MoE run's log is strict JSON: a skipped step's per-block aux and z are null $(tail -c 200 "$TMP/json_err.txt")"
# a run that ends inside a streak of bad steps fails too (no silent exit 0, no final checkpoint)
$TRAIN "${V1000[@]}" -g 0 -x 3 -l 1e30 -o "$TMP/nan2" > /dev/null 2> "$TMP/err.txt"
rc=$?
check_true $(( rc == 1 )) "a run whose last steps were skipped exits 1 (exit $rc)"
grep -q "^error: the last 2 steps (to step 3) had a non-finite loss" "$TMP/err.txt"
check $? "and says so in one line: $(head -c 160 "$TMP/err.txt")"
check_true $(( $(ls "$TMP/nan2" | grep -c '^model_') == 0 )) "no final checkpoint of NaN weights"
$TRAIN "${V1000[@]}" -g 0 -x 6 -l 1e30 --exit-after-steps 3 -o "$TMP/nan3" > /dev/null 2> "$TMP/err.txt"
check_true $(( $? == 1 && $(grep -c '^error: the last 2 steps (to step 3)' "$TMP/err.txt") == 1 && $(ls "$TMP/nan3" | grep -c '^model_') == 0 )) "--exit-after-steps inside a run of skipped steps: the same error, no checkpoint"
# a healthy run has no skipped step
$TRAIN "${V1000[@]}" -g 0 -x 3 -o "$TMP/ok" > "$TMP/out.txt" 2>&1
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
    $TRAIN "${V1000[@]}" -g 0 -x 5 -y 1 -o "$TMP/ok"

# ... and so are optimizer states with a NaN or inf (fp32 AdamW m, v of a checkpoint)
D="$TMP/badstate"
$TRAIN "${V1000[@]}" -g 0 -x 2 -o "$D" > /dev/null 2>&1
python3 - "$D/state_00000002_00000.bin" <<'EOF'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
h = struct.unpack("<256i", d[:1024])
n = (len(d) - 1024) // 4 // (3 if h[15] else 2)
d[1024 + 4 * (n + 7):1024 + 4 * (n + 8)] = struct.pack("<f", float("inf"))   # v[7]
open(sys.argv[1], "wb").write(d)
EOF
expect_error "state_00000002_00000.bin' holds a non-finite value (inf) in its AdamW v at parameter 7" "a state file with an inf in AdamW v is refused on resume" -- \
    $TRAIN "${V1000[@]}" -g 0 -x 4 -o "$D" -y 1

# ---------------------------------------------------------------- 2. hostile strings in flags, prompt and samples
HOSTILE=$'q"b\\s \x01\x1b[2J\x07\r\x08 \xff\xfe \xc3\x28 \xed\xa0\x80 caf\xc3\xa9 \xf0\x9f\xa4\x97 end'
HDIR="$TMP/hostile"$'\x01\xff\"'
$TRAIN "${V1000[@]}" -g 8 --prompt "$HOSTILE" --tokenizer "$TMP/ctl.bin" -o "$HDIR" > /dev/null 2>&1
check $? "a run with a hostile --prompt and -o path, sampling control sequences, completes"
strict_json "$HDIR/log.jsonl" 2> "$TMP/json_err.txt"
check $? "its log is strict JSON and UTF-8 $(tail -c 200 "$TMP/json_err.txt")"
python3 - "$HDIR/log.jsonl" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
cfg, samples = lines[0], [x for x in lines if x["kind"] == "sample"]
want = 'q"b\\s \x01\x1b[2J\x07\r\x08 \ufffd\ufffd \ufffd( \ufffd\ufffd\ufffd caf\u00e9 \U0001F917 end'
ok = cfg["prompt"] == want and cfg["output-dir"].endswith('hostile\x01\ufffd"') and samples and "\x1b[2J" in samples[0]["text"]
sys.exit(0 if ok else 1)
EOF
check $? "the config line keeps every valid character and replaces each invalid byte by U+FFFD"

# ---------------------------------------------------------------- 3./4. sampling a model of 1,000 tokens
$TRAIN "${V1000[@]}" -g 16 --tokenizer "$TMP/ctl.bin" --prompt " hello world" -o "$TMP/v1000" > "$TMP/out.txt" 2> "$TMP/err.txt"
rc=$?
check_true $(( rc == 0 && $(grep -c '' "$TMP/err.txt") == 0 )) "V=1000 model with its tokenizer samples from a prompt (exit $rc, $(head -c 200 "$TMP/err.txt"))"
LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$TMP/out.txt"
check_true $(( $? != 0 )) "4: no control byte (ESC, BEL, CR, BS) reaches the terminal"
grep -qF '\x1b[2J\x07\x0d\x08' "$TMP/out.txt"
check $? "4: control bytes of a sample are printed escaped (\\x1b[2J\\x07\\x0d\\x08)"
python3 - "$TMP/v1000/log.jsonl" <<'EOF'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if '"sample"' in l]
sys.exit(0 if s and "\x1b[2J\x07\r\x08" in s[-1]["text"] else 1)
EOF
check $? "4: the log keeps the sample's exact text (control bytes escaped as JSON)"
$TRAIN "${V1000[@]}" -g 4 -o "$TMP/v1000d" > "$TMP/out.txt" 2> "$TMP/err.txt"
rc=$?
check_true $(( rc == 0 && $(grep -c '' "$TMP/err.txt") == 1 )) "3: the default GPT-2 tokenizer with a V=1000 model: exit 0, one stderr line (exit $rc)"
grep -q "^warning: the default tokenizer '/.*/dev/data/gpt2_tokenizer.bin' has 50257 tokens but the model has a vocabulary of 1000; samples are off" "$TMP/err.txt"
check $? "3: ... a warning that samples are off: $(head -c 200 "$TMP/err.txt")"
check_true $(( $(grep -c '"sample"' "$TMP/v1000d/log.jsonl") == 0 && $(grep -c '^sample' "$TMP/out.txt") == 0 )) "3: ... and no sample is drawn"
cp dev/data/gpt2_tokenizer.bin "$TMP/gpt2_tok.bin"
expect_error "gpt2_tok.bin' (--tokenizer) has 50257 tokens but the model has a vocabulary of 1000" "3: --tokenizer of another vocabulary is refused" -- \
    $TRAIN "${V1000[@]}" -g 4 --tokenizer "$TMP/gpt2_tok.bin"
$TRAIN "${V1000[@]}" -g 4 --tokenizer "$TMP/none.bin" > /dev/null 2> "$TMP/err.txt"
check_true $(( $? == 0 && $(grep -c 'samples are off' "$TMP/err.txt") == 1 )) "3: no tokenizer for a V=1000 model: samples off with a warning"
python3 -c "
import struct
d=bytearray(open('$TMP/ctl.bin','rb').read()); d[12:16]=struct.pack('<i',65)  # EOT = 'A'
open('$TMP/ctl_eotA.bin','wb').write(d)"
$TRAIN "${V1000[@]}" -g 2 --temperature 0 --tokenizer "$TMP/ctl_eotA.bin" -o "$TMP/eot" > "$TMP/out.txt" 2>&1
$TRAIN "${V1000[@]}" -g 2 --temperature 0 --tokenizer "$TMP/ctl_eotA.bin" --prompt A -o "$TMP/eotA" > "$TMP/out2.txt" 2>&1
python3 - "$TMP/eot/log.jsonl" "$TMP/eotA/log.jsonl" <<'EOF'
import json, sys
a, b = ([json.loads(l)["text"] for l in open(p, encoding="utf-8") if '"sample"' in l] for p in sys.argv[1:3])
sys.exit(0 if a and a == b else 1)
EOF
check $? "3: the start token is the tokenizer's EOT (greedy sample from EOT 65 = greedy sample after the prompt 'A')"

# ---------------------------------------------------------------- 8. tokenizer missing or corrupt
mkdir -p "$TMP/elsewhere"
(cd "$TMP/elsewhere" && $TRAIN_ABS "${V1000[@]}" -g 4 > /dev/null 2> "$TMP/err.txt")
check $? "8: run from another directory without a tokenizer still trains"
grep -q "^warning: tokenizer '$TMP/elsewhere/dev/data/gpt2_tokenizer.bin' cannot be opened.*python3 dev/data/write_tokenizer.py" "$TMP/err.txt"
check $? "8: the warning names the absolute path tried and the script that writes it: $(head -c 240 "$TMP/err.txt")"
expect_error "bad_magic_tok.bin' has magic 20240329, expected 20240328" "8: a tokenizer with a bad magic is an error" -- \
    $TRAIN "${V1000[@]}" -g 4 --tokenizer "$TMP/bad_magic_tok.bin"
head -c 3000 "$TMP/ctl.bin" > "$TMP/trunc_tok.bin"
expect_error "trunc_tok.bin' is truncated" "8: a truncated tokenizer is an error" -- $TRAIN "${V1000[@]}" -g 0 -x 1 --tokenizer "$TMP/trunc_tok.bin"

# ---------------------------------------------------------------- 5. an earlier log without a checkpoint is kept
D="$TMP/rot"
$TRAIN "${V1000[@]}" -g 0 -x 3 -o "$D" > /dev/null 2>&1
rm -f "$D"/model_* "$D"/state_* "$D"/DONE_*
cp "$D/log.jsonl" "$TMP/first_log.jsonl"
$TRAIN "${V1000[@]}" -g 0 -x 2 -o "$D" > "$TMP/out.txt" 2>&1
cmp -s "$D/log.1.jsonl" "$TMP/first_log.jsonl"
check $? "5: a new run in a directory with a log but no checkpoint keeps the old log as log.1.jsonl, unchanged"
check_true $(( $(grep -c "^log: an earlier log without a checkpoint to resume was kept as $D/log.1.jsonl" "$TMP/out.txt") == 1 &&
               $(grep -c '"kind":"train"' "$D/log.jsonl") == 2 )) "5: ... named in one line, and the new log has this run's 2 steps"
rm -f "$D"/model_* "$D"/state_* "$D"/DONE_*
$TRAIN "${V1000[@]}" -g 0 -x 2 -y 1 -o "$D" > "$TMP/out.txt" 2>&1
check_true $(( $(grep -c "kept as $D/log.2.jsonl" "$TMP/out.txt") == 1 && $(ls "$D" | grep -c '^log') == 3 )) "5: -y 1 with no checkpoint to resume keeps it too (log.2.jsonl)"
D="$TMP/drop"
$TRAIN "${V1000[@]}" -g 0 -x 4 -n 2 -o "$D" > /dev/null 2>&1
rm -f "$D"/DONE_00000004 "$D"/model_00000004.bin "$D"/state_00000004_*   # as if killed after step 4's log line
$TRAIN "${V1000[@]}" -g 0 -x 4 -o "$D" -y 1 > "$TMP/out.txt" 2>&1
check_true $(( $(grep -c "^resume: 2 lines of $D/log.jsonl logged after checkpoint step 2 were dropped" "$TMP/out.txt") == 1 &&
               $(grep -c '"kind":"train"' "$D/log.jsonl") == 4 )) "5: lines logged after the resumed checkpoint are dropped with one line saying so (and logged again)"

# ---------------------------------------------------------------- 7. a warmup as long as the run
$TRAIN "${V1000[@]}" -g 0 -x 5 -u 20 > /dev/null 2> "$TMP/err.txt"
grep -q "^warning: flag -u (--warmup-steps) is 20 but the run has 5 steps: .* reaches 0.00025, 25% of the peak -l 0.001" "$TMP/err.txt"
check $? "7: -u 20 -x 5 warns that the rate reaches 25% of its peak: $(head -c 200 "$TMP/err.txt")"
$TRAIN "${V1000[@]}" -g 0 -x 5 -u 5 > /dev/null 2> "$TMP/err.txt"
check_true $(( $(grep -c "reaches 0.001, 100% of the peak" "$TMP/err.txt") == 1 )) "7: -u 5 -x 5 warns too (the schedule never decays)"
$TRAIN "${V1000[@]}" -g 0 -x 5 -u 4 > /dev/null 2> "$TMP/err.txt"
check_true $(( $(grep -c '' "$TMP/err.txt") == 0 )) "7: -u 4 -x 5 does not warn"

# ---------------------------------------------------------------- 10. resume refuses every flag not on its list
D="$TMP/r10"
$TRAIN "${V1000[@]}" -g 0 -x 2 -o "$D" > /dev/null 2>&1
check_true $(( $(grep -c $'^learning-rate\t' "$D/DONE_00000002") == 1 )) "10: the checkpoint records its flags"
expect_error "was trained with --learning-rate 0.00100000005 but this run has 0.00200000009" "10: resume with another -l is refused, naming the flag" -- \
    $TRAIN "${V1000[@]}" -g 0 -x 4 -o "$D" -y 1 -l 2e-3
expect_error "was trained with --shuffle 1 but this run has 0" "10: resume with another --shuffle (data order) is refused" -- \
    $TRAIN "${V1000[@]}" -g 0 -x 4 -o "$D" -y 1 --shuffle 0
expect_error "was trained with --lr-schedule \"cosine\" but this run has \"wsd\"" "10: resume with another --lr-schedule is refused" -- \
    $TRAIN "${V1000[@]}" -g 0 -x 4 -o "$D" -y 1 -k wsd
expect_error "was trained with --grad-clip 1 but this run has 0.5" "10: resume with another --grad-clip is refused" -- \
    $TRAIN "${V1000[@]}" -g 0 -x 4 -o "$D" -y 1 --grad-clip 0.5
# (--cpu-matmul auto: bf16 on an AVX512_BF16 CPU where it times faster, a change from the fp32 the checkpoint was
# written with)
$TRAIN "${V1000[@]}" -g 2 -x 4 -o "$D" -y 1 -v 1 -n 3 --log-every 2 --max-bad-steps 4 --tokenizer "$TMP/ctl.bin" \
    --cpu-matmul auto > "$TMP/out.txt" 2>&1
check_true $(( $? == 0 && $(grep -c '^resume: continuing from step 2' "$TMP/out.txt") == 1 )) "10: flags on the list (-x, -v, -n, -g, --log-every, --max-bad-steps, --tokenizer, --cpu-matmul) may change"
# a checkpoint written before flags were recorded: resumed on the state's checks, said in one line
printf 'done\n' > "$D/DONE_00000004"
$TRAIN "${V1000[@]}" -g 0 -x 5 -o "$D" -y 1 -l 2e-3 > "$TMP/out.txt" 2>&1
check_true $(( $? == 0 && $(grep -c '^resume: checkpoint step 4 has no record of its flags' "$TMP/out.txt") == 1 )) "10: a checkpoint without a flag record resumes, said in one line"

# ---------------------------------------------------------------- 9. validation by a token budget
VT=(-e "$TMP/v1000.bin" -i "$TMP/v1000_shard.bin" -j "$TMP/v1000_shard.bin" -t 32 -x 1 -g 0 -u 0 -l 1e-3 --val-tokens 2048)
val_at_step0() { python3 -c "
import json,sys
print([json.loads(l)['val_loss'] for l in open('$1/log.jsonl') if '\"val\"' in l][0])"; }
for b in 1 3 8; do $TRAIN "${VT[@]}" -b $b -o "$TMP/vt$b" > /dev/null 2>&1; done
$TRAIN "${VT[@]}" -b 8 --val-tokens 0 -m 8 -o "$TMP/vm8" > /dev/null 2>&1
$TRAIN "${VT[@]}" -b 4 --val-tokens 0 -m 8 -o "$TMP/vm4" > /dev/null 2>&1
v1=$(val_at_step0 "$TMP/vt1"); v3=$(val_at_step0 "$TMP/vt3"); v8=$(val_at_step0 "$TMP/vt8")
m8=$(val_at_step0 "$TMP/vm8"); m4=$(val_at_step0 "$TMP/vm4")
check_true $(( $(python3 -c "print(int('$v1' == '$v3' == '$v8'))") )) "9: --val-tokens 2048 gives the same loss for -b 1, 3 (a padded last batch) and 8: $v1 $v3 $v8"
check_true $(( $(python3 -c "print(int('$v8' == '$m8' and '$m8' != '$m4'))") )) "9: ... the loss of the same 2048 tokens as -m 8 -b 8 ($m8), where -m 8 -b 4 evaluates other tokens ($m4)"
expect_error "--val-tokens is 2000, which is not a multiple of the sequence length -t 32; use --val-tokens 1984 or 2016" "9: a budget that is not a multiple of -t is refused" -- \
    $TRAIN "${VT[@]}" -b 2 --val-tokens 2000
expect_error "holds only 127 such sequences" "9: a budget beyond the validation data is refused" -- $TRAIN "${VT[@]}" -b 2 --val-tokens 8192
# the sanitizer tier (dev/test/run_sanitize.sh) runs this file on a single-process build: the MPI part is left out
if [ -n "${LLMC_SANITIZE_SINGLE:-}" ]; then echo "# SKIP 9 under 2 and 3 processes: $TRAIN_BIN is a single-process build"; exit 0; fi
dp_require_mpi
for np in 2 3; do MPIRUN $np $TRAIN "${VT[@]}" -b 3 -o "$TMP/vtn$np" > "$TMP/vtn$np.txt" 2>&1; done
n2=$(val_at_step0 "$TMP/vtn2"); n3=$(val_at_step0 "$TMP/vtn3")
check_true $(( $(python3 -c "print(int('$v1' == '$n2' == '$n3'))") )) "9: ... and the same under 2 and 3 processes: $n2 $n3"
