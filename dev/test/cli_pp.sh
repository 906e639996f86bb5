# dev/test/cli_pp.sh -- pipeline parallelism (GPipe, 1F1B, interleaved 1F1B) and 3D layouts (tp x dp x pp) through
# the real CLI under mpirun, with the CPU build (fp32, MPI). Model d8 (8 layers of C = 128) at B = 2, T = 16.
# Tolerances: the argument of dp_lib.sh, T(STEPS). A pipeline computes every layer of every micro-batch with the same
# kernels on the same inputs as one process (the boundary activations and gradients travel as they are), so the first
# step's loss is bit-identical; what differs is the order of two fp32 sums: the tied wte's gradient (the embedding's
# micro-batches are summed on stage 0, the head's on the last stage, then the two added, where one process
# interleaves them micro-batch by micro-batch) and the gradient norm (per-stage partial sums, then added). Those are
# reordered sums of the kind dp_lib.sh bounds, so losses, norms and the RMS of the final weights agree within T(10).
#   - pp 2 and 4 x gpipe, 1f1b, interleaved (v = 2) at m = 4 and 8 micro-batches, and 1f1b at m = p = 4, against one
#     process with the same total batch: losses, grad norms, final weights and validation losses within T(10);
#     each rank's boundary bytes per step equal (2v - [first stage] - [last stage]) m B T C values of 4 bytes (an
#     activation forward and its gradient backward per stage boundary); the header has a memory line per stage and
#     the expected bubble, the step line the measured one;
#   - --pp-layers 3,5 (uneven stages) against one process within T(10); its checkpoint resumed with the interleaved
#     schedule (other stages: re-sharded) continues within T(10);
#   - DIR/trace.json (Chrome trace format) parses with Python's json: one named track per rank; per track 2 m v F
#     and B slices and 2 optimizer slices (the 2 recorded steps) and transfers;
#   - 3D: tp 2 x dp 2 x pp 2 with ZeRO-1 on 8 processes against one process within T(10); interrupted after 5 steps
#     and resumed on the same layout: final model and every rank's state bit-identical to the straight run; resumed
#     on one process (re-sharded over tp, pp and dp): losses and final weights within T(10);
#   - sampling through the pipeline (weights untouched at -l 0) prints the same text as one process;
#   - impossible layouts are refused with one error line.
# The measured bubble through the real executor (stages that sleep) is dev/test/cli_pp_bubble.sh, run with no test beside it.
# With TESTS_QUICK=1 (a quicker run by hand: TESTS_QUICK=1 bash dev/test/cli_pp.sh) the schedule matrix is cut to pp 2 1f1b and pp 4 interleaved, and the resumes
# (3D, onto other stages) and the sampling check are left out (make test runs everything).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
F=(-e d8 -b 2 -t 16 -j "$VAL" -m 2 -v 5 -g 0 -u 2 -l 1e-3 -x 10 --comm-stats 1)
T10=$(dp_order_tol 10)
for m in 4 8; do
    $TRAIN "${F[@]}" -d $((32 * m)) -o "$TMP/one$m" > "$TMP/one$m.log" 2>&1
    check $? "reference: one process, $m micro-steps of B*T = 32 tokens, 10 steps"
done

RUNS=("2 gpipe 1 4" "2 1f1b 1 4" "2 interleaved 2 4" "4 gpipe 1 8" "4 1f1b 1 8" "4 interleaved 2 8" "4 1f1b 1 4")
QUICK=${TESTS_QUICK:-0}
[ "$QUICK" = 1 ] && RUNS=("2 1f1b 1 4" "4 interleaved 2 8")
for run in "${RUNS[@]}"; do
    set -- $run
    P=$1; S=$2; V=$3; M=$4
    D="$TMP/pp$P$S$M"
    name="pp $P $S$([ $V -gt 1 ] && echo " (v = $V)"), m = $M"
    MPIRUN $P $TRAIN "${F[@]}" -d $((32 * M)) --pp $P --pp-schedule $S --pp-virtual $V -o "$D" > "$D.log" 2>&1
    check $? "$name: 10 steps under mpirun"
    out=$(dp_compare_logs "$TMP/one$M/log.jsonl" "$D/log.jsonl" train loss $T10 10) && \
        out="$out; $(dp_compare_logs "$TMP/one$M/log.jsonl" "$D/log.jsonl" train grad_norm $T10 10)" && \
        out="$out; $(dp_compare_logs "$TMP/one$M/log.jsonl" "$D/log.jsonl" val val_loss $T10 3)" && \
        out="$out; $(dp_compare_models_rms "$TMP/one$M/model_00000010.bin" "$D/model_00000010.bin" $T10)"
    check $? "$name vs one process (T(10) = $T10): $out"
    python3 - "$D.log" $P $V $M <<'PY'
import re, sys
log, p, v, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
B, T, C, es = 2, 16, 128, 4
t = open(log).read()
rows = {int(r): (int(a), int(b)) for r, a, b in re.findall(r"^comm: .*step 2 .*\| pp rank (\d+) boundary sent (\d+) recv (\d+)", t, re.M)}
want = {s: (2 * v - (s == 0) - (s == p - 1)) * m * B * T * C * es for s in range(p)}
print("boundary bytes per rank (sent, recv) %s; expected %s" % ([rows.get(s) for s in range(p)], [want[s] for s in range(p)]))
sys.exit(0 if sorted(rows) == list(range(p)) and all(rows[s] == (want[s], want[s]) for s in range(p)) else 1)
PY
    check $? "$name: every rank's boundary bytes per step equal (2v - ends) m B T C values"
    stages=$(grep -c '^pipeline stage [0-9]*: layers .* activations [0-9.]* MiB' "$D.log")
    grep -q '^memory per process .*activations [1-9]' "$D.log"
    check $? "$name: the memory ledger counts this process's activation slots ($(grep -o 'activations [0-9.]*$' "$D.log" | head -1))"
    grep -q "^pipeline bubble expected" "$D.log" && test "$stages" -eq "$P" && \
        test "$(grep -c '^step .*| bubble [0-9.]*% |' "$D.log")" -eq 10
    check $? "$name: a memory line per stage ($stages), the expected bubble, the measured one on every step line"
done

# one step, bit for bit: without clipping (--grad-clip 0, so the norm's other sum order cannot scale the update) every
# tensor but the tied wte gets the same gradient as on one process -- each stage runs its micro-batches' backwards in
# micro-batch order, so every layer's gradient is accumulated in the order one process accumulates it -- and so the
# same AdamW update: the model file after step 1 equals one process's byte for byte outside wte; the step's loss too.
# wte's gradient is the same 2m = 8 fp32 terms (embedding and head, per micro-batch) summed in another order: the
# weights' RMS within T(1) of dp_lib.sh. L4:C32:NH2:V512 on random ids, 4 micro-batches (3 or more: with 2, a + b =
# b + a and a reordered accumulation would not show).
dp_random_shard "$TMP/v512.bin" 512
E=(-e L4:C32:NH2:V512 -i "$TMP/v512.bin" -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 1 -d 128 --grad-clip 0)
$TRAIN "${E[@]}" -o "$TMP/exact1" > "$TMP/exact1.log" 2>&1
check $? "one process, 4 micro-batches, 1 step without clipping"
for run in "gpipe 1" "1f1b 1" "interleaved 2"; do
    set -- $run
    MPIRUN 2 $TRAIN "${E[@]}" --pp 2 --pp-schedule $1 --pp-virtual $2 -o "$TMP/exact_$1" > "$TMP/exact_$1.log" 2>&1
    python3 - "$TMP/exact1" "$TMP/exact_$1" "$(dp_order_tol 1)" <<'PY'
import array, json, math, sys
def model(d):
    b = open(d + "/model_00000001.bin", "rb").read()
    h = array.array("i"); h.frombytes(b[:1024])
    w = array.array("f"); w.frombytes(b[1024:])
    return h[7] * h[6], b[1024:], w  # Vp * C values of wte first
def loss(d):
    return [o["loss"] for o in map(json.loads, open(d + "/log.jsonl")) if o["kind"] == "train"]
n, ba, wa = model(sys.argv[1])
_, bb, wb = model(sys.argv[2])
rest = len(ba) == len(bb) and ba[4 * n:] == bb[4 * n:]
rms = math.sqrt(math.fsum(x * x for x in wa[:n]) / n)
d = math.sqrt(math.fsum((x - y) ** 2 for x, y in zip(wa[:n], wb[:n])) / n) / rms
la, lb = loss(sys.argv[1]), loss(sys.argv[2])
print("# every tensor after wte %s; wte relative RMS difference %.3g (tolerance %s); step-1 loss %r vs %r"
      % ("identical" if rest else "DIFFERS", d, sys.argv[3], la, lb))
sys.exit(0 if rest and d <= float(sys.argv[3]) and la == lb and len(la) == 1 else 1)
PY
    check $? "pp 2 $1$([ $2 -gt 1 ] && echo " (v = 2)"), 4 micro-batches, 1 step without clipping: the model file equals one process's byte for byte outside wte (wte within T(1)), the loss bit for bit"
done

python3 - "$TMP/pp4interleaved8/trace.json" 4 8 2 <<'PY'
import json, sys, collections
path, p, m, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ev = json.load(open(path))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M"}
count = collections.Counter((e["tid"], e["cat"]) for e in ev if e.get("ph") == "X")
ok = sorted(names) == list(range(p)) and all(e["dur"] >= 0 for e in ev if e.get("ph") == "X")
for r in range(p):
    ok &= count[(r, "forward")] == 2 * m * v and count[(r, "backward")] == 2 * m * v and count[(r, "optimizer")] == 2
    ok &= sum(n for (t, c), n in count.items() if t == r and c not in ("forward", "backward", "optimizer")) > 0
print("tracks %s; rank 0: %s" % (sorted(names.values()), dict((c, n) for (t, c), n in count.items() if t == 0)))
sys.exit(0 if ok else 1)
PY
check $? "trace.json (pp 4 interleaved, m 8, v 2): one track per rank, 2 m v F and B slices, 2 optimizer slices and transfers each"

MPIRUN 2 $TRAIN "${F[@]}" -d 128 --pp 2 --pp-layers 3,5 -o "$TMP/layers" > "$TMP/layers.log" 2>&1
check $? "pp 2 with --pp-layers 3,5: 10 steps"
out=$(dp_compare_logs "$TMP/one4/log.jsonl" "$TMP/layers/log.jsonl" train loss $T10 10) && \
    out="$out; $(dp_compare_models_rms "$TMP/one4/model_00000010.bin" "$TMP/layers/model_00000010.bin" $T10)" && \
    grep -q "^pipeline stage 0: layers 0-2 + embedding" "$TMP/layers.log" && \
    grep -q "^pipeline stage 1: layers 3-7 + lnf, head" "$TMP/layers.log"
check $? "--pp-layers 3,5: stages of 3 and 5 layers, vs one process within T(10): $out"

[ "$QUICK" = 1 ] || {
MPIRUN 2 $TRAIN "${F[@]}" -d 128 --pp 2 --pp-layers 3,5 -o "$TMP/relayout" --exit-after-steps 5 > "$TMP/relayout.log" 2>&1 && \
    MPIRUN 2 $TRAIN "${F[@]}" -d 128 --pp 2 --pp-schedule interleaved --pp-virtual 2 -o "$TMP/relayout" -y 1 \
        > "$TMP/relayout2.log" 2>&1 && grep -q "^resume: checkpoint step 5 .* re-sharding" "$TMP/relayout2.log"
check $? "a --pp-layers 3,5 checkpoint resumed with the interleaved schedule (v = 2): the stages changed, re-sharded"
out=$(dp_compare_logs "$TMP/one4/log.jsonl" "$TMP/relayout/log.jsonl" train loss $T10 10) && \
    out="$out; $(dp_compare_models_rms "$TMP/one4/model_00000010.bin" "$TMP/relayout/model_00000010.bin" $T10)"
check $? "...losses and final weights within T(10) of one process: $out"
}

G=(-e d8 -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 10 -d 256)
$TRAIN "${G[@]}" -o "$TMP/one3d" > "$TMP/one3d.log" 2>&1
check $? "reference: one process, 8 micro-steps, 10 steps"
MPIRUN 8 $TRAIN "${G[@]}" --tp 2 --pp 2 -z 1 -o "$TMP/3d" > "$TMP/3d.log" 2>&1
check $? "tp 2 x dp 2 x pp 2 ZeRO-1 on 8 processes: 10 steps"
out=$(dp_compare_logs "$TMP/one3d/log.jsonl" "$TMP/3d/log.jsonl" train loss $T10 10) && \
    out="$out; $(dp_compare_logs "$TMP/one3d/log.jsonl" "$TMP/3d/log.jsonl" train grad_norm $T10 10)" && \
    out="$out; $(dp_compare_models_rms "$TMP/one3d/model_00000010.bin" "$TMP/3d/model_00000010.bin" $T10)"
check $? "tp 2 x dp 2 x pp 2 vs one process within T(10): $out"
[ "$QUICK" = 1 ] || {
MPIRUN 8 $TRAIN "${G[@]}" --tp 2 --pp 2 -z 1 -o "$TMP/cut" --exit-after-steps 5 > "$TMP/cut.log" 2>&1
check $? "tp 2 x dp 2 x pp 2: 5 steps, then exit with a checkpoint"
cp -r "$TMP/cut" "$TMP/to1"
MPIRUN 8 $TRAIN "${G[@]}" --tp 2 --pp 2 -z 1 -o "$TMP/cut" -y 1 > "$TMP/cut2.log" 2>&1
ok=$?
for f in model_00000010.bin state_00000010_0000{0,1,2,3,4,5,6,7}.bin; do cmp -s "$TMP/3d/$f" "$TMP/cut/$f" || ok=1; done
check $ok "tp 2 x dp 2 x pp 2 resumed on the same layout: final model and every rank's state bit-identical"
$TRAIN "${G[@]}" -o "$TMP/to1" -y 1 > "$TMP/to1.log" 2>&1
grep -q "(pipeline size 2 -> 1)" "$TMP/to1.log"
check $? "resumed on one process: the re-sharding is announced ($(grep -m1 '^resume: checkpoint' "$TMP/to1.log" | head -c 200))"
out=$(dp_compare_logs "$TMP/one3d/log.jsonl" "$TMP/to1/log.jsonl" train loss $T10 10) && \
    out="$out; $(dp_compare_models_rms "$TMP/one3d/model_00000010.bin" "$TMP/to1/model_00000010.bin" $T10)"
check $? "tp 2 x dp 2 x pp 2 checkpoint resumed on one process: losses and final weights within T(10): $out"
}

[ "$QUICK" = 1 ] || {
S=(-e d8 -b 2 -t 16 -j '' -g 12 -l 0 -x 1 -d 128 --prompt "ROMEO:")
$TRAIN "${S[@]}" -o "$TMP/s1" > "$TMP/s1.log" 2>&1 && \
    MPIRUN 4 $TRAIN "${S[@]}" --pp 4 -o "$TMP/s4" > "$TMP/s4.log" 2>&1
check $? "a sample from one process and from pp 4"
python3 - "$TMP/s1/log.jsonl" "$TMP/s4/log.jsonl" <<'PY'
import json, sys
t = [[o["text"] for o in map(json.loads, open(p)) if o["kind"] == "sample"] for p in sys.argv[1:3]]
print("one process %r; pp 4 %r" % (t[0], t[1]))
sys.exit(0 if len(t[0]) == 1 and t[0] == t[1] and len(t[0][0]) > 0 else 1)
PY
check $? "sampling through 4 pipeline stages prints the text one process prints"
}

B=(-b 2 -t 16 -j '' -g 0 -x 1)
dp_refused 4 "--pp 4" "--pp 4 for a model of 2 layers" -e d2 "${B[@]}" --pp 4 -d 128
dp_refused 4 "--pp 3" "--pp 3 on 4 processes" -e d8 "${B[@]}" --pp 3
dp_refused 4 "needs at least 4 micro-batches" "1f1b with 2 micro-batches on 4 stages" -e d8 "${B[@]}" --pp 4 -d 64
dp_refused 2 "groups of --pp 2" "interleaved with 3 micro-batches on 2 stages" -e d8 "${B[@]}" --pp 2 --pp-schedule interleaved --pp-virtual 2 -d 96
dp_refused 2 "--pp-virtual" "--pp-virtual 2 with 1f1b" -e d8 "${B[@]}" --pp 2 --pp-virtual 2 -d 64
dp_refused 2 "divisible by --pp x --pp-virtual" "interleaved over 2 x 3 chunks of 8 layers" -e d8 "${B[@]}" --pp 2 --pp-schedule interleaved --pp-virtual 3 -d 64
dp_refused 2 "--pp-layers" "--pp-layers summing to 7 of 8 layers" -e d8 "${B[@]}" --pp 2 --pp-layers 3,4 -d 64
dp_refused 2 "--pp-layers" "--pp-layers with a trailing comma" -e d8 "${B[@]}" --pp 2 --pp-layers 4,4, -d 64
dp_refused 2 "--pp-layers" "--pp-layers with a space and a sign" -e d8 "${B[@]}" --pp 2 --pp-layers " 4,+4" -d 64
dp_refused 2 "pass -d 64" "--pp 2 with the default -d (one micro-batch): the -d to pass is named" -e d8 "${B[@]}" --pp 2
dp_refused 2 "--pp-schedule" "an unknown schedule" -e d8 "${B[@]}" --pp 2 --pp-schedule zigzag -d 64
