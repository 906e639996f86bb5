# dev/test/cli_resume.sh -- resume through the real CLI is bit-identical:
# 20 steps straight == 10 steps, stop (checkpoint), resume with -y 1, 10 more steps:
# identical loss values for steps 11..20 and identical final weights.
source "$(dirname "$0")/lib_cli.sh"
A="$TMP/straight"; B="$TMP/resumed"
$TRAIN "${FAST[@]}" -x 20 -o "$A" > "$TMP/a.log" 2>&1
check $? "straight run of 20 steps"
$TRAIN "${FAST[@]}" -x 20 -o "$B" --exit-after-steps 10 > "$TMP/b1.log" 2>&1
check $? "first half: 10 steps then exit with a checkpoint"
test -f "$B/DONE_00000010" && test -f "$B/model_00000010.bin" && test -f "$B/state_00000010_00000.bin"
check $? "checkpoint of step 10 is complete (model, state, DONE marker)"
$TRAIN "${FAST[@]}" -x 20 -o "$B" -y 1 > "$TMP/b2.log" 2>&1
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
