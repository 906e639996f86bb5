# dev/test/dp_lib.sh -- helpers for the multi-process CLI tests dev/test/cli_dp_*.sh (sourced, not run;
# not named cli_* so the runner does not run it on its own).
#   MPIRUN N args...        mpirun --oversubscribe -np N with one OpenMP thread per rank (2 CPU cores in CI)
#   dp_compare_models A B TOL   max|wA - wB| / max|wA| <= TOL over two fp32 model files (prints the numbers)
#   dp_compare_logs A B KIND FIELD RTOL [STEPS]  the FIELD values of KIND records in two log.jsonl files agree
#                           within relative RTOL at every step (and there are STEPS of them when given)
#   dp_require_mpi          prints "not ok" and exits 1 when mpirun or an MPI build of train_gpt_cpu is missing
source "$(dirname "${BASH_SOURCE[0]}")/lib_cli.sh"
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers without CMA (ptrace) permissions

MPIRUN() {
    local n="$1"; shift
    mpirun --oversubscribe --bind-to none -np "$n" -x OMP_NUM_THREADS "$@"
}

dp_require_mpi() {
    if ! command -v mpirun > /dev/null 2>&1; then
        echo "not ok - mpirun not found: install OpenMPI (scripts/install_deps.sh) to run the multi-process tests"
        exit 1
    fi
    if ! ldd "$TRAIN" 2> /dev/null | grep -q libmpi; then
        echo "not ok - $TRAIN is not an MPI build (make train_gpt_cpu needs mpicc)"
        exit 1
    fi
}

dp_compare_models() {
    python3 - "$@" <<'PY'
import array, sys
def load(p):
    b = open(p, 'rb').read()
    a = array.array('f'); a.frombytes(b[1024:]); return a
a, b = load(sys.argv[1]), load(sys.argv[2]); tol = float(sys.argv[3])
if len(a) != len(b): print("sizes differ", len(a), len(b)); sys.exit(1)
mx = max(abs(x) for x in a)
d = max(abs(x - y) for x, y in zip(a, b))
n = sum(1 for x, y in zip(a, b) if x != y)
print("max|dw| %.3g, max|w| %.3g, relative %.3g (tolerance %g), %d of %d values differ" % (d, mx, d / mx, tol, n, len(a)))
sys.exit(0 if d <= tol * mx else 1)
PY
}

dp_compare_logs() {
    python3 - "$@" <<'PY'
import json, sys
fa, fb, kind, field, rtol = sys.argv[1:6]; rtol = float(rtol)
want = int(sys.argv[6]) if len(sys.argv) > 6 else None
def load(p):
    return {o["step"]: o[field] for o in map(json.loads, open(p)) if o["kind"] == kind}
a, b = load(fa), load(fb)
worst = 0.0
for s in a:
    if s not in b: print("step", s, "missing"); sys.exit(1)
    worst = max(worst, abs(a[s] - b[s]) / max(abs(a[s]), 1e-30))
ok = sorted(a) == sorted(b) and worst <= rtol and (want is None or len(a) == want)
print("%d %s records, worst relative difference of %s %.3g (tolerance %g)" % (len(a), kind, field, worst, rtol))
sys.exit(0 if ok else 1)
PY
}
