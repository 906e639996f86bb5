# dev/test/cli_step_stats.sh -- the step statistics (llmc/step_stats.h: the global loss, gradient norm and FP16 overflow
# flag) under mpirun -np 8 (build/mpi_step_stats, dev/test/mpi_step_stats.c): over tp 2 x dp 2 x pp 2 with ZeRO-0 and
# ZeRO-1 and over dp 8 with ep 2 (ZeRO-1) and ep 4 (ZeRO-2), the norm equals the full model's sum of squares exactly
# (each element counted once), the loss the mean over the data-parallel ranks, and a NaN or an FP16 overflow planted on
# one rank of each group (tp, dp, pp, ep) reaches every rank. About 3 s; the job is limited to 120 s.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs build/mpi_step_stats
MPIRUN 8 timeout 120 build/mpi_step_stats > "$TMP/stats.log" 2>&1
rc=$?
grep -E '^(ok|not ok) - ' "$TMP/stats.log"
test $rc -eq 0 && test "$(grep -c '^ok - ' "$TMP/stats.log")" -eq 22 && ! grep -q '^not ok' "$TMP/stats.log"
check $? "mpi_step_stats on 8 processes: 22 checks passed on every rank, exit $rc"
