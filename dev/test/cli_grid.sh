# dev/test/cli_grid.sh -- llmc/process_grid.h under mpirun with 8 processes (build/mpi_grid, dev/test/mpi_grid.c):
#   - layouts tp2.dp2.pp2, tp4.pp2, tp2.dp4.ep2, dp8.ep4, tp8, pp8 and dp8 in one job: 13 checks per layout
#     (coordinates; membership and all-reduce of the tp, dp, pp, ep and expert-dp groups; pipeline
#     neighbours; which communicators were split: none for dp8), printed by rank 0, plus one line for the
#     job's exit status and check count; the one-process grid (mpirun -np 1);
#   - bad layouts: tp3 in a world of 8, ep3 with dp 8, and ranks started with different layouts each stop
#     the job (non-zero exit) with exactly one "error:" line naming the problem.
# Every mpirun is limited to 60 s (a hang is a failure, not a stuck suite).
source "$(dirname "$0")/dp_lib.sh"
if ! command -v mpirun > /dev/null 2>&1; then
    echo "not ok - mpirun not found: install OpenMPI (scripts/install_deps.sh) to run the process-grid tests"
    exit 1
fi
if [ ! -x build/mpi_grid ] || ! ldd build/mpi_grid 2> /dev/null | grep -q libmpi; then
    echo "not ok - build/mpi_grid missing or not an MPI build (make build/mpi_grid needs mpicc)"
    exit 1
fi
export -f MPIRUN
mpirun_limited() { timeout 60 bash -c 'MPIRUN "$@"' _ "$@"; }

# run_grid N LAYOUT...: the layouts on N ranks; rank 0's lines are passed on, then one line for the job
run_grid() {
    local n="$1"; shift
    local log="$TMP/grid_$n.log"
    mpirun_limited "$n" build/mpi_grid "$@" > "$log" 2>&1
    local rc=$?
    grep -E '^(ok|not ok) - ' "$log"
    local p f want=$((13 * $#))
    p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^not ok - ' "$log")
    if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ] || [ "$p" -ne "$want" ]; then grep -v -E '^(ok|not ok) - ' "$log" | head -n 20; fi
    test "$rc" -eq 0 && test "$f" -eq 0 && test "$p" -eq "$want"
    check $? "mpi_grid on $n ranks, $# layouts ($*): exit $rc, $p checks passed, $f failed (expected $want passed)"
}

# expect_grid_error DESC NEEDLE mpirun-args...: non-zero exit, exactly one "error:" line, containing NEEDLE
expect_grid_error() {
    local desc="$1" needle="$2"; shift 2
    mpirun_limited "$@" > "$TMP/bad.log" 2>&1
    local rc=$?
    local n first
    n=$(grep -c '^error:' "$TMP/bad.log")
    first=$(grep -m1 '^error:' "$TMP/bad.log")
    test "$rc" -ne 0 && test "$rc" -ne 124 && test "$n" -eq 1 && grep -q '^error: process grid: ' "$TMP/bad.log" &&
        grep -qF -- "$needle" "$TMP/bad.log" && ! grep -q '^ok - ' "$TMP/bad.log"
    check $? "$desc: exit $rc, $n error line(s): ${first:-$(head -c 300 "$TMP/bad.log")}"
}

run_grid 8 tp2.dp2.pp2 tp4.pp2 tp2.dp4.ep2 dp8.ep4 tp8 pp8 dp8
run_grid 1 dp1
expect_grid_error "tp 3 in a world of 8 is refused" "--tp 3 x --pp 1 = 3 does not divide the world size 8" 8 build/mpi_grid tp3
expect_grid_error "ep 3 with dp 8 is refused" "--ep 3 does not divide the data-parallel size dp = 8" 8 build/mpi_grid dp8.ep3
expect_grid_error "ranks with different layouts (tp2 on 4, tp4 on 4) are refused" "layout differs between processes" \
    4 build/mpi_grid tp2 : -np 4 build/mpi_grid tp4
