# dev/test/cli_dp_fail.sh -- failure behaviour under mpirun and the multi-process build alone:
#   - rank 1 of 3 killed with SIGKILL mid-run: the job (mpirun) exits non-zero within 60 s, the survivors do
#     not hang in their next collective;
#   - the MPI build runs without mpirun as a world of one (MPI singleton);
#   - collective tests of llmc/comm.h on 1, 2, 3 and 5 ranks, on the MPI transport (build/mpi_comm) and on the
#     NCCL transport with NCCL emulated over MPI (build/mpi_comm_nccl_emu);
#   - --cuda-graphs 1 with 2 processes is refused with one clear line per rank.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
F=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 100000)
export LLMC_TEST_TAG="$TMP"   # marks this job's ranks (found through /proc/PID/environ)
( exec mpirun --oversubscribe --bind-to none -np 3 -x OMP_NUM_THREADS -x LLMC_TEST_TAG $TRAIN "${F[@]}" ) > "$TMP/kill.log" 2>&1 &
mpirun_pid=$!
job_ranks() {   # pids of this job's ranks, optionally only rank $1
    local p
    for p in $(pgrep -f "$TRAIN_BIN"); do
        tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx "LLMC_TEST_TAG=$TMP" || continue
        if [ -z "${1:-}" ] || tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo $p; fi
    done
}
victim=""
for _ in $(seq 1 600); do   # up to 60 s for step 2 to appear
    if grep -qE '^step +2/' "$TMP/kill.log"; then
        victim=$(job_ranks 1)
        break
    fi
    sleep 0.1
done
test -n "$victim"
check $? "found rank 1 (pid ${victim:-none}) of a running 3-rank job after step 2"
start=$SECONDS
if [ -n "$victim" ]; then kill -9 "$victim"; fi
waited=0
while kill -0 $mpirun_pid 2> /dev/null && [ $((SECONDS - start)) -lt 90 ]; do sleep 0.2; done
if kill -0 $mpirun_pid 2> /dev/null; then kill -9 $mpirun_pid; waited=1; fi
wait $mpirun_pid
rc=$?
elapsed=$((SECONDS - start))
test $waited -eq 0 && test $rc -ne 0 && test $elapsed -le 60
check $? "killing rank 1 ends the job with exit status $rc after ${elapsed} s (limit 60 s)"
sleep 1
left=$(job_ranks | wc -l)
test "$left" -eq 0
check $? "no rank of the killed job is left running ($left)"
$TRAIN -e d2 -b 4 -t 32 -j '' -g 0 -x 2 > "$TMP/single.log" 2>&1
check $? "the MPI build runs without mpirun (world of one)"
grep -q "processes / ZeRO      | 1 / stage 0" "$TMP/single.log"
check $? "... and reports 1 process"
for prog in mpi_comm mpi_comm_nccl_emu; do
    if [ ! -x build/$prog ]; then
        if [ $prog = mpi_comm_nccl_emu ] && [ -n "${TESTS_NO_CUDA_HEADERS:-}" ]; then
            echo "# build/$prog left out: the CUDA toolkit's headers were not found (make test needs them)"
        else
            echo "not ok - build/$prog missing (make build/$prog)"
        fi
        continue
    fi
    for n in 1 2 3 5; do
        MPIRUN $n build/$prog > "$TMP/comm$n.log" 2>&1
        rc=$?
        p=$(grep -c '^ok - ' "$TMP/comm$n.log"); f=$(grep -c '^not ok - ' "$TMP/comm$n.log")
        grep '^not ok' "$TMP/comm$n.log"
        test $rc -eq 0 && test "$f" -eq 0 && test "$p" -ge 30
        check $? "llmc/comm.h collective tests ($prog) on $n ranks: $p passed, $f failed"
    done
done
# --cuda-graphs 1 with several processes: refused before any work (checked before the CPU-build refusal)
MPIRUN 2 $TRAIN -e d2 -b 4 -t 32 -j '' -g 0 -x 1 --cuda-graphs 1 > "$TMP/graphs.log" 2>&1
rc=$?
test $rc -ne 0 && grep -q "error: flag --cuda-graphs 1 works with one process only (this run has 2)" "$TMP/graphs.log"
check $? "--cuda-graphs 1 with 2 processes is refused (exit $rc): $(grep -m1 'error:' "$TMP/graphs.log")"
