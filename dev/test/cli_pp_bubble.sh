# dev/test/cli_pp_bubble.sh -- the pipeline bubble measured through the real executor (build/mpi_pipe_bubble: llmc/pipeline.h
# with stages that sleep a known time, 4 processes; what it checks: the head of dev/test/mpi_pipe_bubble.c). It measures
# wall-clock time, so dev/test/run_tests.sh runs it with no other test beside it (its ALONE list).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
MPIRUN 4 build/mpi_pipe_bubble > "$TMP/bubble.log" 2>&1
rc=$?
grep -E '^(ok|not ok) - |^# ' "$TMP/bubble.log" | grep -v '^# [0-9]* passed'
test $rc -eq 0 && test "$(grep -c '^ok - ' "$TMP/bubble.log")" -eq 9
check $? "measured bubble through the executor on 4 processes (gpipe, 1f1b, interleaved, zb-h1, dualpipev, dualpipe; the overlap): 9 checks on rank 0, exit $rc"
