# dev/test/cli_resume.sh -- resume through the real CLI is bit-identical:
# 20 steps straight == 10 steps, stop (checkpoint), resume with -y 1, 10 more steps:
# identical loss values for steps 11..20 and identical final weights; a sample every 5 steps, so one is drawn before
# the checkpoint (step 5): the samples of steps 10, 15 and 20 after the resume are the straight run's only if the
# sampler's random state was saved and restored, and the validation losses equal to the last digit of log.jsonl.
source "$(dirname "$0")/lib_cli.sh"
A="$TMP/straight"; B="$TMP/resumed"
EVAL=(-j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -v 10 -m 2 -s 5 -g 4)
$TRAIN "${FAST[@]}" "${EVAL[@]}" -x 20 -o "$A" > "$TMP/a.log" 2>&1
check $? "straight run of 20 steps"
$TRAIN "${FAST[@]}" "${EVAL[@]}" -x 20 -o "$B" --exit-after-steps 10 > "$TMP/b1.log" 2>&1
check $? "first half: 10 steps then exit with a checkpoint"
test -f "$B/DONE_00000010" && test -f "$B/model_00000010.bin" && test -f "$B/state_00000010_00000.bin"
check $? "checkpoint of step 10 is complete (model, state, DONE marker)"
$TRAIN "${FAST[@]}" "${EVAL[@]}" -x 20 -o "$B" -y 1 > "$TMP/b2.log" 2>&1
check $? "second half: resume with -y 1"
grep -q "resume: continuing from step 10" "$TMP/b2.log"
check $? "resumed run says it continues from step 10"
grep -E '^step +(1[1-9]|20)/20' "$TMP/a.log" | sed -E 's/[|] [0-9.]+ ms.*//' > "$TMP/a.steps"
grep -E '^step +(1[1-9]|20)/20' "$TMP/b2.log" | sed -E 's/[|] [0-9.]+ ms.*//' > "$TMP/b.steps"
test "$(wc -l < "$TMP/a.steps")" -eq 10 && cmp -s "$TMP/a.steps" "$TMP/b.steps"
check $? "steps 11..20: identical loss, norm and lr lines ($(wc -l < "$TMP/b.steps") lines compared)"
cmp -s "$A/model_00000020.bin" "$B/model_00000020.bin"
check $? "final weights (model_00000020.bin) are bit-identical"
cmp -s "$A/state_00000020_00000.bin" "$B/state_00000020_00000.bin"
check $? "final optimizer state (state_00000020_00000.bin) is bit-identical"
python3 - "$A/log.jsonl" "$B/log.jsonl" <<'PY'
import json, sys
def recs(p, kind, field):
    return [(o["step"], o[field]) for o in map(json.loads, open(p)) if o["kind"] == kind]
a, b = (recs(p, "sample", "text") for p in sys.argv[1:3])
va, vb = (recs(p, "val", "val_loss") for p in sys.argv[1:3])
print("# samples (step, text): straight", a, "resumed", b)
sys.exit(0 if [s for s, _ in a] == [5, 10, 15, 20] and a == b and len(va) == 3 and va == vb else 1)
PY
check $? "samples of steps 5, 10, 15, 20 (one before the checkpoint) and validation losses of steps 0, 10, 20 equal the straight run's (the sampler's state resumed)"
n=$(grep -c '"kind":"train"' "$B/log.jsonl")
test "$n" -eq 20
check $? "resumed log.jsonl has exactly 20 train lines, no duplicates ($n)"
ls "$B"/DONE_* | wc -l | grep -qx 2
check $? "-nk 2 keeps the last two checkpoints ($(ls "$B" | tr '\n' ' '))"
python3 - "$A/log.jsonl" <<'PY'
import json, sys
kinds = set()
for line in open(sys.argv[1]):
    o = json.loads(line); kinds.add(o["kind"])
    if o["kind"] == "train":
        for k in ("step", "loss", "grad_norm", "lr", "ms", "tokens_per_s"): assert k in o, k
sys.exit(0 if {"config", "train"} <= kinds else 1)
PY
check $? "log.jsonl is valid JSON lines with config and train records and the documented fields"
python3 - "$B/log.jsonl" <<'PY'
import json, sys, collections
c = collections.Counter((o["kind"], o["step"]) for o in map(json.loads, open(sys.argv[1])) if o["kind"] != "config")
dups = [k for k, v in c.items() if v > 1]
print("# duplicate (kind, step) records:", dups)
sys.exit(1 if dups else 0)
PY
check $? "resumed log.jsonl has no duplicate train, val or sample record"
# an interrupted checkpoint write leaves a .tmp file; the next run removes it
touch "$B/model_00000030.bin.tmp"
$TRAIN "${FAST[@]}" -x 22 -o "$B" -y 1 > "$TMP/b3.log" 2>&1
test ! -e "$B/model_00000030.bin.tmp" && grep -q "removed the leftover temp file" "$TMP/b3.log"
check $? "a leftover .tmp file of an interrupted checkpoint write is removed (and said) on the next run"
# resuming from an older checkpoint than the log's last lines: no duplicate records afterwards
C="$TMP/older"
$TRAIN "${FAST[@]}" -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -m 2 -x 8 -n 4 -v 4 -s 4 -g 2 -nk 0 -o "$C" > /dev/null 2>&1
rm -f "$C/DONE_00000008"
$TRAIN "${FAST[@]}" -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -m 2 -x 8 -n 4 -v 4 -s 4 -g 2 -nk 0 -o "$C" -y 1 > "$TMP/c.log" 2>&1
grep -q "resume: continuing from step 4" "$TMP/c.log"
check $? "with the newest DONE marker gone, -y 1 resumes from the previous checkpoint (step 4)"
python3 - "$C/log.jsonl" <<'PY'
import json, sys, collections
recs = [o for o in map(json.loads, open(sys.argv[1])) if o["kind"] != "config"]
c = collections.Counter((o["kind"], o["step"]) for o in recs)
dups = [k for k, v in c.items() if v > 1]
want = {("val", 4), ("val", 8), ("sample", 4), ("sample", 8)} | {("train", s) for s in range(1, 9)}
print("# duplicates:", dups, "missing:", sorted(want - set(c)))
sys.exit(1 if dups or (want - set(c)) else 0)
PY
check $? "after resuming from step 4 the log holds each train/val/sample record of steps 1..8 exactly once"
