# dev/test/cli_target.sh -- --target-val-loss X (llmc/train_target.h) through the real CLI, d2 with 2 micro-steps per
# optimizer step (-d 256 = 2 x B 4 x T 32), about 30 s:
#   - a reference run without a target (-x 40, -v 5) gives the validation losses; the target is set halfway between
#     one of them, S, and the lowest before it, so the first validation at or below it is step S (and no earlier one);
#   - the run with that target: stops at step S (the log's val rows: the stop step's <= X, every earlier one > X, the
#     same losses as the reference; no train row after S), writes the checkpoint of step S and none of -x, and its
#     printed and logged tokens are S x B x T x accumulation (x processes); the printed seconds are the final line's
#     seconds of training;
#   - an unreachable target (0.001) runs to -x and logs reached false with the best validation loss;
#   - without validation (-v 0, or -j '') the flag is refused with one error line;
#   - --target-eval-score Y with -h 1 on the 16-example fixture: the same stop rule for the suite score (>= Y; the
#     target halfway between a reference run's first new best score above 0 and the best before it), one target
#     record of metric eval_score; refused without -h 1;
#   - under mpirun -np 2 (-d 256 = B 4 x T 32 x 2 processes): both processes stop after the same step S (each writes
#     its state file of step S, none runs on: the run exits 0 within a timeout) and the logged tokens count both.
source "$(dirname "$0")/dp_lib.sh"
F=(-e d2 -b 4 -t 32 -d 256 -g 0 -u 2 -l 1e-3 -v 5 -m 2)
$TRAIN "${F[@]}" -x 40 -o "$TMP/ref" > "$TMP/ref.txt" 2>&1
check $? "reference run: -x 40 with validation every 5 steps"
read -r TARGET STOP <<< "$(python3 - "$TMP/ref/log.jsonl" <<'PY'
import json, sys
vals = [(r["step"], r["val_loss"]) for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "val"]
# the latest validation step at or before 25 whose loss is below every earlier one: the target halfway below them
for i in range(len(vals) - 1, 0, -1):
    step, v = vals[i]
    best_before = min(x for _, x in vals[:i])
    if step <= 25 and v < best_before:
        print("%.6f %d" % ((v + best_before) / 2, step))
        break
PY
)"
test -n "${STOP:-}" && [ "$STOP" -gt 0 ] && [ "$STOP" -lt 40 ]
check $? "reference: a validation step S below every earlier loss (S $STOP, target $TARGET)"
STOP=${STOP:-0}

$TRAIN "${F[@]}" -x 40 --target-val-loss "$TARGET" -o "$TMP/hit" > "$TMP/hit.txt" 2>&1
check $? "--target-val-loss $TARGET: the run exits 0"
python3 - "$TMP/hit/log.jsonl" "$TMP/ref/log.jsonl" "$TMP/hit.txt" "$TARGET" "$STOP" $((4 * 32 * 2)) <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
text, target, stop, per_step = open(sys.argv[3]).read(), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
vals = [(r["step"], r["val_loss"]) for r in rows if r["kind"] == "val"]
ref_vals = [(r["step"], r["val_loss"]) for r in ref if r["kind"] == "val" and r["step"] <= stop]
trains = [r["step"] for r in rows if r["kind"] == "train"]
tgt = [r for r in rows if r["kind"] == "target"]
fails = []
if not vals or vals[-1][0] != stop or vals[-1][1] > target:
    fails.append("last val row %s, expected step %d with a loss <= %g" % (vals[-1:] or None, stop, target))
if any(v <= target for _, v in vals[:-1]):
    fails.append("an earlier val row is already <= the target: %s" % vals)
if vals != ref_vals:
    fails.append("val rows %s differ from the reference's %s" % (vals, ref_vals))
if not trains or max(trains) != stop:
    fails.append("train rows end at step %s, expected %d" % (max(trains) if trains else None, stop))
if len(tgt) != 1:
    fails.append("%d target rows, expected 1" % len(tgt))
else:
    t = tgt[0]
    want = {"step": stop, "tokens": stop * per_step, "reached": True}
    if any(t.get(k) != v for k, v in want.items()) or t.get("val_loss") != vals[-1][1] or \
            abs(t.get("target", 0) - target) > 1e-6 or not t.get("time_s", -1) > 0:
        fails.append("target row %s, expected %s, val_loss %r, target %g, time_s > 0" % (t, want, vals[-1][1], target))
m = re.search(r"^target val loss ([0-9.]+) reached at step (\d+): ([0-9,]+) tokens, ([0-9.]+) s of training$", text, re.M)
done = re.search(r"^done: \d+ steps in this run \(now at step (\d+)\), ([0-9.]+) s of training", text, re.M)
if not m or int(m.group(2)) != stop or int(m.group(3).replace(",", "")) != stop * per_step:
    fails.append("printed line %r, expected step %d and %d tokens" % (m and m.group(0), stop, stop * per_step))
elif not done or int(done.group(1)) != stop or m.group(4) != done.group(2):
    fails.append("final line %r: expected step %d and the target line's seconds %s" % (done and done.group(0), stop,
                                                                                      m.group(4)))
print("# " + (m.group(0) if m else "no target line"))
for f in fails:
    print("# " + f)
sys.exit(1 if fails else 0)
PY
check $? "stops at step $STOP, the first validation <= $TARGET (earlier ones above, no train row after it); tokens = S x B x T x 2 micro-steps, printed and logged"
test -f "$TMP/hit/DONE_$(printf %08d "$STOP")" && test -f "$TMP/hit/model_$(printf %08d "$STOP").bin" &&
    ! ls "$TMP/hit"/model_00000040.bin > /dev/null 2>&1
check $? "the checkpoint of step $STOP is written (model and DONE marker), none of -x 40"

$TRAIN "${F[@]}" -x 10 --target-val-loss 0.001 -o "$TMP/miss" > "$TMP/miss.txt" 2>&1
check $? "--target-val-loss 0.001 (unreachable): the run exits 0"
python3 - "$TMP/miss/log.jsonl" "$TMP/miss.txt" $((4 * 32 * 2)) <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
text, per_step = open(sys.argv[2]).read(), int(sys.argv[3])
vals = [(r["val_loss"], r["step"]) for r in rows if r["kind"] == "val"]
tgt = [r for r in rows if r["kind"] == "target"]
best = min(vals)
ok = (max(r["step"] for r in rows if r["kind"] == "train") == 10 and len(tgt) == 1 and tgt[0]["reached"] is False and
      tgt[0]["step"] == 10 and tgt[0]["tokens"] == 10 * per_step and (tgt[0]["val_loss"], tgt[0]["best_step"]) == best)
m = re.search(r"^target val loss 0\.0010 not reached in 10 steps: best val loss ([0-9.]+) \(step (\d+)\)$", text, re.M)
ok = ok and m is not None and abs(float(m.group(1)) - best[0]) < 1e-4 and int(m.group(2)) == best[1]
print("# %s | %s" % (m.group(0) if m else "no 'not reached' line", tgt))
sys.exit(0 if ok else 1)
PY
check $? "an unreachable target: 10 steps to -x, one line and a target row with reached false and the best val loss"

expect_error "--target-val-loss 4 is checked at every validation, but validation is off (-v 0" \
    "--target-val-loss with -v 0 is refused" -- $TRAIN "${F[@]}" -x 10 -v 0 --target-val-loss 4
expect_error "but validation is off (-v 5, -j '')" "--target-val-loss with -j '' is refused" -- \
    $TRAIN "${F[@]}" -x 10 -j '' --target-val-loss 4

# --target-eval-score: the -h 1 evaluation on the committed 16-example fixture, a reference run's suite scores
EVF=(-e d2 -b 4 -t 64 -d 256 -g 0 -u 2 -l 3e-3 -v 3 -m 1 -h 1 --eval-tasks dev/test/fixtures/eval_handmade.bin)
$TRAIN "${EVF[@]}" -x 30 -o "$TMP/eref" > "$TMP/eref.txt" 2>&1
check $? "eval reference run: -x 30 with -h 1 every 3 steps"
read -r ETARGET ESTOP <<< "$(python3 - "$TMP/eref/log.jsonl" <<'PY'
import json, sys
sc = [(r["step"], r["centered"]) for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "eval" and r["task"] == "suite"]
# the first evaluation after step 0 whose score is above every earlier one (and above 0): the target halfway up to it
for i in range(1, len(sc)):
    step, v = sc[i]
    best_before = max(x for _, x in sc[:i])
    if v > best_before and v > 0:
        print("%.6f %d" % ((v + max(best_before, 0.0)) / 2, step))
        break
PY
)"
test -n "${ESTOP:-}"
check $? "eval reference: an evaluation step S scoring above every earlier one (S ${ESTOP:-none}, target ${ETARGET:-none})"
ESTOP=${ESTOP:-0}
$TRAIN "${EVF[@]}" -x 30 --target-eval-score "${ETARGET:-0.5}" -o "$TMP/ehit" > "$TMP/ehit.txt" 2>&1
check $? "--target-eval-score ${ETARGET:-}: the run exits 0"
python3 - "$TMP/ehit/log.jsonl" "$TMP/eref/log.jsonl" "$TMP/ehit.txt" "${ETARGET:-0.5}" "$ESTOP" 256 <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
text, target, stop, per_step = open(sys.argv[3]).read(), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
sc = [(r["step"], r["centered"]) for r in rows if r["kind"] == "eval" and r["task"] == "suite"]
ref_sc = [(r["step"], r["centered"]) for r in ref if r["kind"] == "eval" and r["task"] == "suite" and r["step"] <= stop]
tgt = [r for r in rows if r["kind"] == "target"]
trains = [r["step"] for r in rows if r["kind"] == "train"]
ok = sc == ref_sc and sc[-1][0] == stop and sc[-1][1] >= target and all(v < target for _, v in sc[:-1])
ok = ok and max(trains) == stop and len(tgt) == 1 and tgt[0]["metric"] == "eval_score" and tgt[0]["step"] == stop
# the record holds the float the loop compared (the eval rows the double): equal within float32 rounding, 6e-8 in [0, 1]
ok = ok and abs(tgt[0]["eval_score"] - sc[-1][1]) <= 1e-7 and tgt[0]["tokens"] == stop * per_step and tgt[0]["reached"] is True
m = re.search(r"^target eval score [0-9.]+ reached at step (\d+): ([0-9,]+) tokens", text, re.M)
ok = ok and m is not None and int(m.group(1)) == stop and int(m.group(2).replace(",", "")) == stop * per_step
print("# %s | %s" % (m.group(0) if m else "no target line", tgt))
sys.exit(0 if ok else 1)
PY
check $? "--target-eval-score stops at step $ESTOP, the first evaluation scoring >= the target (earlier ones below, the reference's scores), one record of metric eval_score"
expect_error "--target-eval-score 0.5 is checked at every -h 1 evaluation, but that is off (-h 0" \
    "--target-eval-score without -h 1 is refused" -- $TRAIN "${F[@]}" -x 10 --target-eval-score 0.5

dp_require_mpi
timeout 60 mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
    $TRAIN "${F[@]}" -x 40 --target-val-loss "$TARGET" -o "$TMP/dp" > "$TMP/dp.txt" 2>&1
rc=$?
check $rc "dp 2 with --target-val-loss $TARGET exits 0 within 60 s (exit $rc; 124 = a process kept waiting)"
S=$(printf %08d "$STOP")
test -f "$TMP/dp/state_${S}_00000.bin" && test -f "$TMP/dp/state_${S}_00001.bin" &&
    grep -qx "{\"kind\":\"target\",\"step\":$STOP,\"tokens\":$((STOP * 4 * 32 * 2)),.*\"reached\":true}" "$TMP/dp/log.jsonl" &&
    grep -q "^target val loss .* reached at step $STOP: " "$TMP/dp.txt" && ! grep -q "^step *$((STOP + 1))/" "$TMP/dp.txt"
check $? "dp 2: both processes stop after step $STOP (each writes its state file of it), tokens = S x B x T x 2 processes: $(grep '^target' "$TMP/dp.txt")"
