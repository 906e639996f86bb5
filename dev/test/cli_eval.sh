# dev/test/cli_eval.sh -- -h 1, the multiple-choice evaluation (llmc/train_eval.h), through the CLI on the committed
# 16-example fixture dev/test/fixtures/eval_handmade.bin and a d2 model file written by a 1-step run:
#   - evaluation only (-x 0 -h 1 -e MODEL.bin): the counts equal dev/test/eval_reference.py's, an independent numpy
#     GPT-2 forward and llm.c-style scoring sharing no code with the trainer (catches a mask off by one position, the
#     wrong rows scored, mean and sum swapped, a wrong label or chance); progress lines with an ETA; log rows;
#   - the same accuracy counts (identical log rows) on 1 process, dp 2, tp 2, pp 2, ZeRO-3 dp 2 and tp 2 x pp 2 x dp 2 with
#     --eval-max-examples 10 (catches counts not summed over dp or pp, examples lost or counted twice in the split);
#     their --eval-dump files (per-example scores) byte-identical on dp 2, pp 2 and ZeRO-3, within fp32 rounding on tp 2;
#   - in the loop (-x 2 -v 1): eval rows at steps 0, 1, 2, one "eval S (step N) ... | T s" line each;
#   - -h and --help still print the help; missing, unknown or damaged task files: one error line, exit 1.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/dp_lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
FIX=dev/test/fixtures/eval_handmade.bin
$TRAIN -e d2 -b 4 -t 64 -j '' -g 0 -x 1 -o "$TMP/m" > "$TMP/m.log" 2>&1
check $? "a 1-step d2 run writes a model file"
M="$TMP/m/model_00000001.bin"
EV=(-e "$M" -b 4 -t 64 -j '' -g 0 -x 0 -h 1 --eval-tasks "$FIX")

# evaluation only, all 16 examples, against the reference
$TRAIN "${EV[@]}" -o "$TMP/e1" > "$TMP/e1.log" 2>&1
check $? "-x 0 -h 1 -e MODEL.bin evaluates without training"
! grep -q "^warning: flag -u" "$TMP/e1.log"
check $? "evaluation only prints no warning about the warmup of a schedule it does not run"
python3 dev/test/eval_reference.py "$M" "$FIX" 64 0 > "$TMP/ref.json"
python3 - "$TMP/e1/log.jsonl" "$TMP/ref.json" "$TMP/e1.log" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"eval"' in l]
ref = json.load(open(sys.argv[2]))
text = open(sys.argv[3]).read()
task = [r for r in rows if r["task"] == "eval_handmade"]
suite = [r for r in rows if r["task"] == "suite"]
ok = len(rows) == 2 and len(task) == 1 and len(suite) == 1
t = task[0] if task else {}
chance = ref["chance_sum"] / ref["n"]
centered = (ref["correct_mean"] / ref["n"] - chance) / (1 - chance)
ok = ok and t["step"] == 0 and t["n"] == ref["n"] == 16 and ref["margin"] > 1e-4
ok = ok and t["acc"] == ref["correct_mean"] / 16 and t["acc_sum_logprob"] == ref["correct_sum"] / 16
ok = ok and abs(t["centered"] - centered) < 1e-6 and abs(suite[0]["centered"] - centered) < 1e-6 and suite[0]["n"] == 16
ok = ok and re.search(r"^eval %.4f \(step 0\) \| eval_handmade acc %.4f \(sum logprob %.4f, n 16\) \| [0-9.]+ s$"
                      % (centered, t["acc"], t["acc_sum_logprob"]), text, re.M) is not None
ok = ok and re.search(r"^eval eval_handmade: batch \d+/\d+ \(100%\) \| \S+ elapsed \| eta \S+$", text, re.M) is not None
ok = ok and "step " not in "".join(l for l in text.splitlines() if l.startswith("step "))
print(f"# trainer {t}; reference {ref}")
sys.exit(0 if ok else 1)
PY
check $? "16 examples: acc and acc_sum_logprob equal the numpy reference's counts, centered accuracy, the eval line with its time, a progress line with an ETA, the task and suite log rows"

# the same counts on every layout
dp_require_mpi
$TRAIN "${EV[@]}" --eval-max-examples 10 --eval-dump "$TMP/l1.dump" -o "$TMP/l1" > "$TMP/l1.log" 2>&1
check $? "1 process, --eval-max-examples 10"
python3 dev/test/eval_reference.py "$M" "$FIX" 64 10 > "$TMP/ref10.json"
for lay in "dp2:2:" "tp2:2:--tp 2" "pp2:2:--pp 2 -d 512" "z3:2:-z 3" "tp2z3:4:--tp 2 -z 3" "pp2z3:4:--pp 2 -z 3 -d 1024" "3d:8:--tp 2 --pp 2 -z 1 -d 1024"; do
    IFS=: read -r name np flags <<< "$lay"
    # shellcheck disable=SC2086
    MPIRUN "$np" $TRAIN "${EV[@]}" --eval-max-examples 10 --eval-dump "$TMP/$name.dump" $flags -o "$TMP/$name" > "$TMP/$name.log" 2>&1
    check $? "$name: -x 0 -h 1 runs"
    cmp -s <(grep '"kind":"eval"' "$TMP/l1/log.jsonl") <(grep '"kind":"eval"' "$TMP/$name/log.jsonl")
    check $? "$name: the eval rows are identical to one process's ($(grep -o '"acc.*' "$TMP/$name/log.jsonl" | head -1))"
done
# --eval-dump: every example written once, by process 0, whatever rank scored it. dp, pp and ZeRO-3 run the same
# arithmetic per row as one process (byte-identical dumps); tp splits the matmuls' sums over ranks, so its losses
# differ by fp32 rounding: sums of K <= 4C = 512 products reordered, of order sqrt(K) u ~ 1.4e-6 relative (u = 2^-24),
# a few such steps per layer: within 1e-5 relative, with the same choices (catches an example missed or counted on
# two ranks, the wrong rank's zeros written, a dp or pp sum of the scores left out)
for name in dp2 pp2 z3; do
    cmp -s "$TMP/l1.dump" "$TMP/$name.dump"
    check $? "--eval-dump under $name: byte-identical to one process's ($(grep -c '' "$TMP/$name.dump") lines)"
done
python3 - "$TMP/l1.dump" "$TMP/tp2.dump" "$M" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
ok = len(a) == len(b) == 10 and [r["index"] for r in a] == list(range(10))
worst = 0.0
for x, y in zip(a, b):
    ok = ok and (x["step"], x["task"], x["index"], x["label"], x["pred"], x["pred_sum_logprob"]) == \
        (y["step"], y["task"], y["index"], y["label"], y["pred"], y["pred_sum_logprob"])
    for key in ("mean_loss", "sum_loss"):
        ok = ok and len(x[key]) == len(y[key])
        worst = max([worst] + [abs(u - v) / abs(u) for u, v in zip(x[key], y[key])])
print(f"# tp2 dump against one process: worst relative loss difference {worst:.2e}")
sys.exit(0 if ok and worst <= 1e-5 else 1)
PY
check $? "--eval-dump under tp2: 10 examples, the same choices, every ending's mean and summed loss within 1e-5 relative"
expect_error "add -h 1" "--eval-dump without -h 1" -- $TRAIN -e "$M" -b 4 -t 64 -j '' -g 0 -x 1 --eval-dump "$TMP/d.jsonl" -o "$TMP/nd"
expect_error "cannot create '$TMP/none/d.jsonl.tmp'" "--eval-dump into a missing folder is refused before evaluating" -- \
    $TRAIN "${EV[@]}" --eval-dump "$TMP/none/d.jsonl"
python3 - "$TMP/l1/log.jsonl" "$TMP/ref10.json" <<'PY'
import json, sys
t = [json.loads(l) for l in open(sys.argv[1]) if '"task":"eval_handmade"' in l][0]
ref = json.load(open(sys.argv[2]))
sys.exit(0 if t["n"] == 10 and t["acc"] == ref["correct_mean"] / 10 and t["acc_sum_logprob"] == ref["correct_sum"] / 10 else 1)
PY
check $? "--eval-max-examples 10: n 10 and the reference's counts over the first 10 examples"

# in the loop
$TRAIN -e d2 -b 4 -t 64 -j '' -g 0 -x 2 -v 1 -h 1 --eval-tasks "$FIX" --eval-max-examples 4 -o "$TMP/loop" > "$TMP/loop.log" 2>&1
check $? "-x 2 -v 1 -h 1 trains"
test "$(grep -c '"kind":"eval","step":[012],"task":"suite"' "$TMP/loop/log.jsonl")" -eq 3 &&
    test "$(grep -cE '^eval -?[0-9.]+ \(step [012]\) \| eval_handmade acc .* \| [0-9.]+ s$' "$TMP/loop.log")" -eq 3 &&
    ! grep -q '^eval eval_handmade: batch' "$TMP/loop.log"
check $? "an evaluation at steps 0, 1 and 2 (every -v and the end): one line and suite row each, no progress lines"

# help and bad input
$TRAIN_BIN -h > "$TMP/h.txt" 2>&1 && grep -q -- '--eval-tasks' "$TMP/h.txt" && grep -q -- '--help, -h' "$TMP/h.txt" &&
    $TRAIN_BIN --help > "$TMP/h2.txt" 2>&1 && cmp -s "$TMP/h.txt" "$TMP/h2.txt" &&
    $TRAIN_BIN -b 4 -h > "$TMP/h3.txt" 2>&1 && grep -q -- '--eval-tasks' "$TMP/h3.txt"
check $? "a bare -h (alone or last) and --help print the help and exit 0"
expect_error "python3 dev/data/eval_suite.py --tasks piqa --out-dir $TMP/none" "a task whose file is missing names the command that makes it" -- \
    $TRAIN "${EV[@]}" --eval-tasks piqa --eval-dir "$TMP/none"
expect_error "unknown task 'hellaswog'" "an unknown task name" -- $TRAIN "${EV[@]}" --eval-tasks hellaswog
expect_error "does not exist" "a missing eval file path" -- $TRAIN "${EV[@]}" --eval-tasks "$TMP/nothing.bin"
head -c 2000 "$FIX" > "$TMP/cut.bin"
expect_error "eval file '$TMP/cut.bin'" "a truncated eval file" -- $TRAIN "${EV[@]}" --eval-tasks "$TMP/cut.bin"
expect_error "pass -b 4 or more" "-b below an example's endings" -- $TRAIN "${EV[@]}" -b 2
dp_refused 2 "unknown task 'x'" "under mpirun: one error line" "${EV[@]}" --eval-tasks x
# matplotlib for the python3 on PATH comes from scripts/install_deps.sh
python3 scripts/plot_log.py "$TMP/loop/log.jsonl" -o "$TMP/loop.png" > "$TMP/plot.txt" 2>&1 &&
    grep -q ", 2 eval curves" "$TMP/plot.txt" && test -s "$TMP/loop.png"
check $? "scripts/plot_log.py draws the task and suite curves beside the losses: $(cat "$TMP/plot.txt")"
