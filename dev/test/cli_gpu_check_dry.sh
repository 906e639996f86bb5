# dev/test/cli_gpu_check_dry.sh -- scripts/gpu_check.sh without a GPU:
#   - GPU_CHECK_DRY_RUN=1 prints the plan (the issue's 12 stages in their order, each with its limit, and a total within
#     one 9-minute command), runs the preflight (one row each: device, nvcc, make, cuBLAS, NCCL, OpenSSL, cuDNN) and
#     reports every other stage skipped in the closing table, exit 0 within a minute; logs under $OUT;
#   - a test-only stage (GPU_CHECK_FAKE_STAGE) with STAGES= and no GPU: it runs, is stopped at its limit and reported
#     TIMEOUT with its first line, a selected GPU stage is skipped for the missing GPU, the others as not in STAGES;
#   - killed (SIGKILL to its process group) in the middle of that stage: the stage's output so far is in all.log, the
#     preflight's row was written before the stage began, and the stage's row says it never ended;
#   - SIGTERM in the middle of it: the running command is stopped, the closing table is printed with the stage
#     interrupted, exit 143, and all.log still holds the stage's output.
source "$(dirname "$0")/lib_cli.sh"
# the stage order of issue 29 ("What to build", item 2)
WANT_ORDER="preflight build fixture bench devcuda zero graphs cudnn torch offload moe sanitizer"
start=$SECONDS
OUT="$TMP/dry" GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh > "$TMP/dry.txt" 2>&1
rc=$?
took=$((SECONDS - start))
test $rc -eq 0 -a $took -lt 60
check $? "GPU_CHECK_DRY_RUN=1 exits 0 in under a minute (exit $rc, $took s)"
order=$(sed -n 's/^\[gpu_check\]   [0-9]\{1,2\} \+\([a-z]\+\) \+[0-9]\+ s .*/\1/p' "$TMP/dry.txt" | tr '\n' ' ')
test "${order% }" = "$WANT_ORDER"
check $? "the plan lists the 12 stages in the issue's order, each with its limit: $order"
most=$(sed -n 's/^\[gpu_check\] total: .* at most \([0-9]\+\) s with the closing table.*/\1/p' "$TMP/dry.txt")
test -n "$most" && test "$most" -le 540
check $? "the plan's total fits one 9-minute command: at most ${most:-?} s <= 540 s"
test "$(grep -c '' "$TMP/dry/stages.txt")" -eq 12 && grep -q '^1  preflight  | ran' "$TMP/dry/stages.txt" &&
    test "$(grep -c '| skipped ([0-9]* s): dry run (GPU_CHECK_DRY_RUN=1)' "$TMP/dry/stages.txt")" -eq 11 &&
    grep -q '^================ gpu_check closing table' "$TMP/dry.txt"
check $? "closing table: 12 rows, the preflight ran and the 11 others are skipped for the dry run"
n_pre=0
for r in "device" "nvcc" "make, host compiler, cores" "cuBLAS" "NCCL" "OpenSSL" "cuDNN + cudnn-frontend"; do
    n_pre=$((n_pre + $(grep -c "^$r  *| [^ ]" "$TMP/dry/summary.txt")))
done
test "$n_pre" -eq 7
check $? "the preflight wrote one row each for the device, nvcc, make, cuBLAS, NCCL, OpenSSL and cuDNN ($n_pre of 7)"
grep -qE '^OpenSSL +\| (found|skip: --nccl-init tcp:)' "$TMP/dry/summary.txt" &&
    grep -qE '^cuDNN \+ cudnn-frontend +\| (found|not found)' "$TMP/dry/summary.txt"
check $? "the OpenSSL and cuDNN rows say whether they were found: $(grep -m 1 '^OpenSSL' "$TMP/dry/summary.txt" | cut -c1-90)"

# a fake stage with a 6-second limit running 30 s: stopped, reported; STAGES leaves the others out; no GPU here
# (PYTHON=false: the preflight does not look for pip's packages, which this part does not need)
export PYTHON=false
FAKE='echo fake-partial-output; echo $$ > "$PIDFILE"; exec sleep 30'
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then NOGPU=0; else NOGPU=1; fi
PIDFILE="$TMP/fake1.pid" OUT="$TMP/fake" STAGES="fake bench" GPU_CHECK_FAKE_STAGE="$FAKE" GPU_CHECK_FAKE_LIMIT=6 \
    bash scripts/gpu_check.sh > "$TMP/fake.txt" 2>&1
rc=$?
grep -q '^2  fake       | failed ([0-9]* s): TIMEOUT: ' "$TMP/fake/stages.txt" &&
    grep -q '^fake-partial-output$' "$TMP/fake/all.log" && ! kill -0 "$(cat "$TMP/fake1.pid")" 2> /dev/null
check $? "the fake stage is stopped at its 6 s limit, reported TIMEOUT, its output kept (exit $rc): $(sed -n 2p "$TMP/fake/stages.txt" | cut -c1-80)"
test "$(grep -c 'skipped ([0-9]* s): not in STAGES=fake bench' "$TMP/fake/stages.txt")" -eq 10 &&
    { [ $NOGPU = 0 ] || grep -q '^5  bench      | skipped ([0-9]* s): no GPU' "$TMP/fake/stages.txt"; }
check $? "STAGES='fake bench': 10 stages skipped as not selected, bench for the missing GPU: $(sed -n 5p "$TMP/fake/stages.txt")"

# wait_for FILE PATTERN: up to 30 s for PATTERN to appear in FILE
wait_for() { for _ in $(seq 150); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.2; done; return 1; }

# SIGKILL to the whole process group in the middle of the fake stage (as a runner that kills at its limit)
PIDFILE="$TMP/fake2.pid" OUT="$TMP/kill" STAGES=fake GPU_CHECK_FAKE_STAGE="$FAKE" setsid bash scripts/gpu_check.sh \
    > "$TMP/kill.txt" 2>&1 &
pid=$!
wait_for "$TMP/kill/all.log" '^fake-partial-output$'
sleep 0.5
pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
{ [ -n "$pgid" ] && kill -KILL -- "-$pgid"; wait "$pid"; } 2> /dev/null # (bash's "Killed" notice too)
[ -s "$TMP/fake2.pid" ] && kill -KILL "$(cat "$TMP/fake2.pid")" 2> /dev/null # the stage's command (own group)
grep -q '^fake-partial-output$' "$TMP/kill/all.log" && grep -q '^===== fake (stage fake' "$TMP/kill/all.log" &&
    ! grep -q '^===== fake: exit' "$TMP/kill/all.log"
check $? "killed inside the fake stage: its partial output is in all.log (no end line)"
test "$(grep -c '' "$TMP/kill/stages.txt")" -eq 2 && grep -q '^1  preflight  | ran' "$TMP/kill/stages.txt" &&
    grep -q '^2  fake       | started at [0-9]* s; no result (the run ended inside this stage)' "$TMP/kill/stages.txt" &&
    test "$(grep -c '^device ' "$TMP/kill/summary.txt")" -eq 1
check $? "killed: the preflight's row and results were written before the fake stage began, whose row says it never ended"

# SIGTERM in the middle of the fake stage: the trap stops the command, prints the table, exits 143
PIDFILE="$TMP/fake3.pid" OUT="$TMP/term" STAGES=fake GPU_CHECK_FAKE_STAGE="$FAKE" bash scripts/gpu_check.sh \
    > "$TMP/term.txt" 2>&1 &
pid=$!
wait_for "$TMP/term/all.log" '^fake-partial-output$'
sleep 0.5
kill -TERM "$pid"
wait "$pid"
rc=$?
sleep 1
fake_alive=0
kill -0 "$(cat "$TMP/fake3.pid" 2> /dev/null)" 2> /dev/null && fake_alive=1
test $rc -eq 143 -a $fake_alive -eq 0 && grep -q '^2  fake       | failed ([0-9]* s): interrupted by a signal' "$TMP/term.txt" &&
    grep -q '^================ gpu_check closing table' "$TMP/term.txt" && grep -q '^fake-partial-output$' "$TMP/term/all.log"
check $? "SIGTERM inside the fake stage: its command stopped (alive: $fake_alive), table printed with it interrupted, output kept (exit $rc)"
[ $fake_alive = 1 ] && kill -KILL "$(cat "$TMP/fake3.pid")" 2> /dev/null
exit 0
