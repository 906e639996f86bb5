# dev/test/dp_lib.sh -- helpers for the multi-process CLI tests dev/test/cli_dp_*.sh (sourced, not run;
# not named cli_* so the runner does not run it on its own).
#   MPIRUN N args...        mpirun --oversubscribe -np N with one OpenMP thread per rank (2 CPU cores in CI)
#   dp_same_training A B [STEPS]   the train records of two log.jsonl files are identical (loss, grad_norm, lr at
#                           every step; STEPS of them when given) and the two final model files are identical
#   dp_same_checkpoint A B STEP N   dp_same_training A B STEP, and the state files of step STEP of ranks 0..N-1 in
#                           both directories identical byte for byte (prints the summary)
#   dp_run NAME N args...   a run of $TRAIN args under MPIRUN N into $TMP/NAME (log $TMP/NAME.log), checked to exit 0
#   dp_against ONE NAME     losses and gradient norms (log.jsonl) and the final weights (model_00000010.bin) of the
#                           10-step run $TMP/NAME against $TMP/ONE within T(10), one check line
#   dp_order_tol STEPS      the tolerance T(STEPS) of an order-dependent comparison (the argument below)
#   dp_compare_models_rms A B TOL  RMS(wA - wB) / RMS(wA) <= TOL over two fp32 model files (prints the numbers)
#   dp_compare_logs A B KIND FIELD RTOL [STEPS]  the FIELD values of KIND records in two log.jsonl files agree:
#                           |a - b| <= RTOL |a| at every step (and there are STEPS of them when given); log.jsonl
#                           holds fp32 values to 9 significant digits (%.9g: exact), so no slack for printed digits
#   dp_random_shard FILE V [N]   writes a token shard of N (default 4096) uniformly random ids < V (Python's random,
#                           seed 3: the same file every time), for models whose vocabulary is not GPT-2's
#   dp_step_lines LOG       the "step ..." lines of a trainer log without their timings (for cmp between runs)
#   dp_require_mpi          prints "not ok" and exits 1 when mpirun or an MPI build of train_gpt_cpu is missing
#   dp_require_programs P...  prints "not ok - P missing (make P)" and exits 1 for the first program P that is not built
#   dp_refused N "needle" "description" args...   train_gpt_cpu under mpirun -np N is refused: a non-zero exit,
#                           exactly one "error:" line on stderr containing needle, and no step line
#   dp_step2_bytes LOG GROUP [WORD]   the bytes of step 2 on the --comm-stats lines of LOG for group GROUP (tp, pp;
#                           WORD: "boundary " for the pipeline's boundary bytes), as sorted "dprank.grouprank:sent:recv"
#   dp_emu_vs_cpu N NAME LABEL args...   the same training (args) with train_gpt_emu_mpi (the CUDA kernels on dev/emu, NCCL
#                           emulated) and train_gpt_cpu under mpirun -np N into $TMP/emu_NAME and $TMP/cpu_NAME: the
#                           emulated run exits 0 after 2 steps (step lines ending "| mem USED/TOTAL GiB", as on a GPU), and losses, grad norms (1e-5 relative) and the final
#                           weights' RMS (1e-5) agree (two check lines naming LABEL; the argument:
#                           dev/test/cli_tp_nccl_emu.sh)
#
# Two kinds of comparison between schedules.
# - Same arithmetic in the same order: compared bit for bit (dp_same_training, cmp). ZeRO-0, 1 and 2 on the same
#   ranks without gradient accumulation, ZeRO-0 and ZeRO-1 with it: the MPI ring sums chunk c in the same rank
#   order for an all-reduce, a reduce-scatter and any bucketing (llmc/comm.h), the gradient norm is the same
#   per-shard sum for every stage (llmc/zero.h), and AdamW is elementwise. This holds on any BLAS: the BLAS
#   computes each rank's terms, identically in both runs.
# - The same fp32 gradient contributions added in another order: N ranks vs 1 rank with N micro-steps, ZeRO-2's
#   sum over ranks before micro-steps, a resume re-sharded to another process count. Each reduced gradient
#   element is then a reordered sum of at most n = 256 fp32 terms here (the B*T rows of a matmul, the windows of
#   a step); their rounding differs by at most (n-1)u sum|terms| (u = 2^-24; Higham 2002, "Accuracy and
#   Stability of Numerical Algorithms", section 4.2) and, with roundings as independent errors, by about
#   sqrt(n) u sum|terms| = 16u relative where the terms do not cancel (Higham & Mary 2019, "A New Approach to
#   Probabilistic Rounding Error Analysis"). Which conforming BLAS kernel computes the terms does not enter:
#   only our summation order differs. AdamW normalises each update to at most lr (Kingma & Ba 2015, section 2.1:
#   1-beta1 <= sqrt(1-beta2) here) and passes a relative gradient difference through to the update at most 1:1
#   where |g| >> eps (damped by |g|/eps below it); an update is smaller than the weights it changes (lr = 1e-3 <
#   RMS(w) = 0.02), so the RMS weight difference relative to the RMS weight grows by at most 16u per step. The
#   largest single |dw| has no bound below 2 lr per step (an element whose gradient cancels to rounding noise
#   follows the noise), so no test bounds it. The loss and the gradient norm are smooth functions of the weights
#   and the gradient: their relative difference is that of the weights plus the norm's own reordering (4 x 16u,
#   allowing a cancellation factor of 4). Hence, after STEPS optimizer steps, T(STEPS) = (STEPS + 4) * 16u,
#   applied to losses, norms and RMS weights alike. It is far above what the rounding produces (measured
#   30-100x below on three OpenBLAS kernels: Cooperlake, Haswell, SkylakeX) and far below what a schedule bug
#   produces (another window, a lost bucket, a missing average: 1e-3 and more).
source "$(dirname "${BASH_SOURCE[0]}")/lib_cli.sh"
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers without CMA (ptrace) permissions

dp_random_shard() {
    python3 - "$1" "$2" "${3:-4096}" <<'PYEOF'
import random, struct, sys
from array import array
random.seed(3)
toks = array("H", [random.randrange(int(sys.argv[2])) for _ in range(int(sys.argv[3]))])
h = [0] * 256; h[:3] = [20240520, 1, len(toks)]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + toks.tobytes())
PYEOF
}
dp_step_lines() { grep -E '^step' "$1" | sed -E 's/[|] [0-9.]+ ms.*//'; }

MPIRUN() {
    local n="$1"; shift
    mpirun --oversubscribe --bind-to none -np "$n" -x OMP_NUM_THREADS "$@"
}

dp_require_mpi() {
    if ! command -v mpirun > /dev/null 2>&1; then
        echo "not ok - mpirun not found: install OpenMPI (scripts/install_deps.sh) to run the multi-process tests"
        exit 1
    fi
    if ! ldd "$TRAIN_BIN" 2> /dev/null | grep -q libmpi; then
        echo "not ok - $TRAIN_BIN is not an MPI build (make train_gpt_cpu needs mpicc)"
        exit 1
    fi
}

dp_require_programs() {
    local prog
    for prog in "$@"; do
        if [ ! -x "$prog" ]; then
            echo "not ok - $prog missing (make ${prog#./})"
            exit 1
        fi
    done
}

dp_refused() {
    local n=$1 needle=$2 desc=$3; shift 3
    MPIRUN $n $TRAIN "$@" > "$TMP/refused.log" 2> "$TMP/refused.err"
    local rc=$?
    test $rc -ne 0 && test "$(grep -c '^error:' "$TMP/refused.err")" -eq 1 && grep -q -- "$needle" "$TMP/refused.err" && \
        ! grep -q '^step' "$TMP/refused.log"
    check $? "$desc: refused with one line (exit $rc): $(grep '^error:' "$TMP/refused.err" | head -c 220)"
}

dp_step2_bytes() {
    local g=$2 w=${3:-}
    grep -o "comm: rank [0-9]* step 2 .* | $g rank [0-9]* ${w}sent [0-9]* recv [0-9]*" "$1" |
        sed -E "s/^comm: rank ([0-9]*) .* $g rank ([0-9]*) ${w}sent ([0-9]*) recv ([0-9]*)\$/\1.\2:\3:\4/" | sort | tr '\n' ' '
}

dp_emu_vs_cpu() {
    local n=$1 name=$2 label=$3; shift 3
    local e="$TMP/emu_$name" c="$TMP/cpu_$name" rc out
    MPIRUN $n ./train_gpt_emu_mpi "$@" -o "$e" > "$e.log" 2>&1
    rc=$?
    test $rc -eq 0 && test "$(grep -c '^step' "$e.log")" -eq 2 &&
        test "$(grep -cE '^step .* \| eta [^|]+ \| mem [0-9.]+/[0-9.]+ GiB$' "$e.log")" -eq 2
    check $? "NCCL path (emulated), FP32, $n processes, $label: 2 steps under mpirun, each step line ending with the device memory (exit $rc)"
    MPIRUN $n $TRAIN "$@" -o "$c" > "$c.log" 2>&1
    out=$(dp_compare_logs "$c/log.jsonl" "$e/log.jsonl" train loss 1e-5 2) && \
        out="$out; $(dp_compare_logs "$c/log.jsonl" "$e/log.jsonl" train grad_norm 1e-5 2)" && \
        out="$out; $(dp_compare_models_rms "$c/model_00000002.bin" "$e/model_00000002.bin" 1e-5)"
    check $? "NCCL path, FP32, $n processes, $label: losses, norms, final weights vs the CPU build: $out"
}

dp_same_training() {
    python3 - "$@" <<'PY'
import json, sys
def rec(p):
    return [(o["step"], o["loss"], o["grad_norm"], o["lr"]) for o in map(json.loads, open(p)) if o["kind"] == "train"]
a, b = rec(sys.argv[1] + "/log.jsonl"), rec(sys.argv[2] + "/log.jsonl")
want = int(sys.argv[3]) if len(sys.argv) > 3 else None
same = a == b and (want is None or len(a) == want)
last = max(s for s, *_ in a) if a else 0
ma = open("%s/model_%08d.bin" % (sys.argv[1], last), "rb").read()
mb = open("%s/model_%08d.bin" % (sys.argv[2], last), "rb").read()
# (equal files, the usual case, compared in one step; the differing bytes counted only when they differ)
nd = 0 if ma == mb else sum(1 for x, y in zip(ma, mb) if x != y) + abs(len(ma) - len(mb))
print("%d train records %s; model_%08d.bin: %s" % (len(a), "identical" if a == b else "DIFFER", last,
      "identical" if nd == 0 else "%d bytes differ" % nd))
sys.exit(0 if same and nd == 0 else 1)
PY
}

dp_same_checkpoint() {
    local a=$1 b=$2 step=$3 n=$4 out ok=1 r f
    out=$(dp_same_training "$a" "$b" "$step") || ok=0
    for ((r = 0; r < n; r++)); do
        f=$(printf 'state_%08d_%05d.bin' "$step" "$r")
        cmp -s "$a/$f" "$b/$f" || ok=0
    done
    echo "$out; the $n state files $( [ $ok = 1 ] && echo identical || echo DIFFER)"
    test $ok = 1
}

dp_run() {
    local name=$1 n=$2; shift 2
    MPIRUN "$n" timeout 300 $TRAIN "$@" -o "$TMP/$name" > "$TMP/$name.log" 2>&1
    check $? "$name: $n processes, ${*: -6}: runs under mpirun (exit 0)"
}

dp_against() {
    local out t
    t=$(dp_order_tol 10)
    out=$(dp_compare_logs "$TMP/$1/log.jsonl" "$TMP/$2/log.jsonl" train loss "$t" 10) && \
        out="$out; $(dp_compare_logs "$TMP/$1/log.jsonl" "$TMP/$2/log.jsonl" train grad_norm "$t" 10)" && \
        out="$out; $(dp_compare_models_rms "$TMP/$1/model_00000010.bin" "$TMP/$2/model_00000010.bin" "$t")"
    check $? "$2 vs $1 (T(10) = $t): $out"
}

dp_order_tol() {
    python3 -c "import sys; print('%.3g' % ((int(sys.argv[1]) + 4) * 16 * 2.0 ** -24))" "$1"
}

dp_compare_models_rms() {
    python3 - "$@" <<'PY'
import array, math, sys
# numpy (a test dependency: scripts/install_deps.sh) when present: the same sums in float64 (fp32 squares and
# differences are exact in float64; fsum there, numpy's pairwise sum here, both within ~1e-15 relative of the exact
# sum) in ~0.1 s instead of ~2.5 s per d2 model pair; the pure-Python loops otherwise
try:
    import numpy as np
except ImportError:
    np = None
def load(p):
    b = open(p, 'rb').read()
    if np is not None: return np.frombuffer(b, dtype='<f4', offset=1024).astype(np.float64)
    a = array.array('f'); a.frombytes(b[1024:]); return a
a, b = load(sys.argv[1]), load(sys.argv[2]); tol = float(sys.argv[3])
if len(a) != len(b): print("sizes differ", len(a), len(b)); sys.exit(1)
if np is not None:
    d = a - b
    rms_w = math.sqrt(float(np.sum(a * a)) / len(a))
    rms_d = math.sqrt(float(np.sum(d * d)) / len(a))
    n = int(np.count_nonzero(d))
    maxd = float(np.max(np.abs(d))) if len(a) else 0.0
else:
    rms_w = math.sqrt(math.fsum(x * x for x in a) / len(a))
    rms_d = math.sqrt(math.fsum((x - y) ** 2 for x, y in zip(a, b)) / len(a))
    n = sum(1 for x, y in zip(a, b) if x != y)
    maxd = max(abs(x - y) for x, y in zip(a, b))
print("RMS(dw) %.3g, RMS(w) %.3g, relative %.3g (tolerance %.3g); max|dw| %.3g; %d of %d values differ" %
      (rms_d, rms_w, rms_d / rms_w, tol, maxd, n, len(a)))
sys.exit(0 if rms_d <= tol * rms_w else 1)
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
worst, ok = 0.0, True
for s in a:
    if s not in b: print("step", s, "missing"); sys.exit(1)
    worst = max(worst, abs(a[s] - b[s]) / max(abs(a[s]), 1e-30))
    ok = ok and abs(a[s] - b[s]) <= rtol * abs(a[s])
ok = ok and sorted(a) == sorted(b) and (want is None or len(a) == want)
print("%d %s records, worst relative difference of %s %.3g (tolerance %g)" % (len(a), kind, field, worst, rtol))
sys.exit(0 if ok else 1)
PY
}
