# dev/test/cli_tp.sh -- tensor parallelism and sequence parallelism (Megatron-LM) through the real CLI under mpirun,
# with the CPU build (fp32, MPI). Tolerances: the argument of dp_lib.sh.
#   - the fixture model split over 2 and 4 tensor-parallel ranks (build/mpi_test_gpt_tp: test_gpt.cu under mpirun),
#     with and without sequence parallelism: logits, loss and every gradient equal the PyTorch fixture (1e-5, the
#     single-process tolerance), and after 3 AdamW steps (non-zero biases) a single-process model's;
#   - d2 for 10 steps of 4 x 128 tokens against one process: tp 2, tp 2 with sequence parallelism and ZeRO-1, tp 4
#     with sequence parallelism, tp 2 x dp 2 with ZeRO-1, tp 2 x dp 2 with sequence parallelism: losses, grad norms
#     and the RMS of the final weights within T(10) (tensor parallelism splits fp32 sums differently: the K dimension
#     of the row-parallel GEMMs over the ranks, the softmax sums over the vocabulary shards; the norm sums the shards'
#     squares over the ranks);
#   - bytes every rank moves in its tensor-parallel group per step equal the theory, per micro-step with N = B*T
#     rows of C channels (fp32, 4 bytes), p ranks, L layers, ring costs (p-1)/p of the buffer for a reduce-scatter or
#     an all-gather, twice that for an all-reduce:
#       without SP  (4L + 2) all-reduces of N*C (the embedding, 2 per layer forward, 2 per layer backward, the head)
#                   + the vocabulary-parallel loss: all-reduces of p*N and 2*N fp32 (row maxima, exp sums) -- O(N),
#                   never O(N*Vp);
#       with SP     forward 4L + 2 all-gathers/reduce-scatters of N*C (the same bytes as the forward all-reduces),
#                   backward 6L + 3 (LayerNorm outputs are gathered again instead of kept: Nl rows stored per rank),
#                   + 2L + 1 all-reduces of 2C (the LayerNorm weight/bias gradients of each rank's rows) + the loss;
#     plus the step's fp64 statistics (at most 64 bytes); the time in those collectives (--comm-stats 1) is
#     printed per step, above 0 and at most the step's time;
#   - a tp 2 x dp 2 ZeRO-1 checkpoint resumes on the same layout bit for bit, and re-shards to 1 process and to tp 4
#     (through the full model's flat order): the next losses and the final weights within T(8);
#   - per-process memory of d12 (dry setup, --dry-run 1) at tp 1, 2, 4, with and without sequence parallelism: the
#     parameters each process holds equal (12C^2 + 7C) L / tp block weights + Vp C / tp vocabulary rows + (maxT + 6L
#     + 2) C replicated, and the activation bytes the model allocated equal the per-rank shapes below (LayerNorm and
#     residual regions N/tp rows under sequence parallelism), each tensor rounded up to 256 bytes;
#   - impossible layouts are refused with one error line: --tp not dividing the processes, heads not divisible by
#     --tp, --sequence-parallel without --tp, a sequence length not divisible by --tp under sequence parallelism.
# With TESTS_QUICK=1 (a quicker run by hand: TESTS_QUICK=1 bash dev/test/cli_tp.sh) the d2 training runs are cut to tp 2 with SP and ZeRO-1, tp 4 with SP and
# tp 2 x dp 2 with ZeRO-1 (make test runs all five).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs build/mpi_test_gpt_tp
for n in 2 4; do
    MPIRUN $n build/mpi_test_gpt_tp > "$TMP/fixture$n.log" 2>&1
    rc=$?
    grep -E '^(ok|not ok) - ' "$TMP/fixture$n.log"
    test $rc -eq 0 && test "$(grep -c '^ok - ' "$TMP/fixture$n.log")" -eq 8
    check $? "fixture model over $n tensor-parallel ranks: 8 checks on rank 0, exit $rc"
done

F=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 10 -d 512 --comm-stats 1)
$TRAIN "${F[@]}" -o "$TMP/one" > "$TMP/one.log" 2>&1
check $? "reference: one process, 4 micro-steps, 10 steps"
T10=$(dp_order_tol 10)
RUNS=("2 2 0 0" "2 2 1 1" "4 4 1 0" "4 2 0 1" "4 2 1 0")
[ "${TESTS_QUICK:-0}" = 1 ] && RUNS=("2 2 1 1" "4 4 1 0" "4 2 0 1") # TESTS_QUICK=1: one run per kind of layout
for run in "${RUNS[@]}"; do
    set -- $run
    N=$1; TP=$2; SP=$3; Z=$4
    D="$TMP/n${N}tp${TP}sp${SP}z$Z"
    name="tp $TP x dp $((N / TP))$([ $SP = 1 ] && echo ' sequence parallel') ZeRO-$Z"
    MPIRUN $N $TRAIN "${F[@]}" --tp $TP --sequence-parallel $SP -z $Z -o "$D" > "$D.log" 2>&1
    check $? "$name: 10 steps under mpirun"
    out=$(dp_compare_logs "$TMP/one/log.jsonl" "$D/log.jsonl" train loss $T10 10) && \
        out="$out; $(dp_compare_logs "$TMP/one/log.jsonl" "$D/log.jsonl" train grad_norm $T10 10)" && \
        out="$out; $(dp_compare_models_rms "$TMP/one/model_00000010.bin" "$D/model_00000010.bin" $T10)"
    check $? "$name vs one process (T(10) = $T10): $out"
    python3 - "$D.log" $TP $SP $((4 / (N / TP))) <<'PY'
import re, sys
log, p, sp, accum = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
Nr, C, L, es = 4 * 32, 128, 2, 4  # rows per micro-step, channels, layers of d2, fp32
ring = lambda count: (p - 1) / p * count * es  # bytes each way of a reduce-scatter or all-gather of count elements
if sp:
    per_micro = (4 * L + 2) * ring(Nr * C) + (6 * L + 3) * ring(Nr * C) + (2 * L + 1) * 2 * ring(2 * C)
else:
    per_micro = (4 * L + 2) * 2 * ring(Nr * C)
per_micro += 2 * ring(p * Nr) + 2 * ring(2 * Nr)  # vocabulary-parallel loss statistics (fp32)
theory = accum * per_micro
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"step 2 sent \d+ recv \d+ bytes .*\| tp rank (\d+) sent (\d+) recv (\d+)", open(log).read())]
ok = len(rows) > 0 and all(abs(s - theory) <= 64 and abs(r - theory) <= 64 for _, s, r in rows)
print("theory %.0f bytes per rank (%d micro-steps); measured (tp rank, sent, recv): %s" % (theory, accum, sorted(rows)))
sys.exit(0 if ok else 1)
PY
    check $? "$name: bytes each rank moves in its tensor-parallel group per step equal the theory (within 64 bytes)"
    python3 - "$D.log" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
coll = [float(x) for x in re.findall(r"^comm: rank 0 step \d+ .*\| tp rank 0 .* calls, ([0-9.]+) ms", t, re.M)]
step = [float(x) for x in re.findall(r"^step .*\| ([0-9.]+) ms \|", t, re.M)]
print("process 0: tp collectives %s ms in steps of %s ms" % (coll[:3], step[:3]))
sys.exit(0 if len(coll) == len(step) == 10 and all(0 < c <= s for c, s in zip(coll, step)) else 1)
PY
    check $? "$name: the time in tp collectives is printed per step, above 0 and within the step's time"
done

G=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 8 -d 512)
MPIRUN 4 $TRAIN "${G[@]}" --tp 2 -z 1 -o "$TMP/straight" > "$TMP/straight.log" 2>&1
check $? "tp 2 x dp 2 ZeRO-1: 8 steps straight"
MPIRUN 4 $TRAIN "${G[@]}" --tp 2 -z 1 -o "$TMP/cut" --exit-after-steps 4 > "$TMP/cut.log" 2>&1
check $? "tp 2 x dp 2 ZeRO-1: 4 steps, then exit with a checkpoint"
cp -r "$TMP/cut" "$TMP/to1"; cp -r "$TMP/cut" "$TMP/to4"
MPIRUN 4 $TRAIN "${G[@]}" --tp 2 -z 1 -o "$TMP/cut" -y 1 > "$TMP/cut2.log" 2>&1
ok=$?
for f in model_00000008.bin state_00000008_0000{0,1,2,3}.bin; do cmp -s "$TMP/straight/$f" "$TMP/cut/$f" || ok=1; done
check $ok "resumed on the same layout: final model and every rank's optimizer state bit-identical"
T8=$(dp_order_tol 8)
$TRAIN "${G[@]}" -o "$TMP/to1" -y 1 > "$TMP/to1.log" 2>&1
grep -q "(tensor-parallel size 2 -> 1)" "$TMP/to1.log"
check $? "resumed on one process: the re-sharding is announced"
MPIRUN 4 $TRAIN "${G[@]}" --tp 4 -o "$TMP/to4" -y 1 > "$TMP/to4.log" 2>&1
for d in to1 to4; do
    out=$(dp_compare_logs "$TMP/straight/log.jsonl" "$TMP/$d/log.jsonl" train loss $T8 8) && \
        out="$out; $(dp_compare_models_rms "$TMP/straight/model_00000008.bin" "$TMP/$d/model_00000008.bin" $T8)"
    check $? "tp 2 x dp 2 checkpoint resumed $([ $d = to1 ] && echo 'on one process' || echo 'at tp 4'): losses and final weights within T(8): $out"
done

for run in "1 0" "2 0" "2 1" "4 1"; do
    set -- $run
    MPIRUN $1 $TRAIN -e d12 -b 2 -t 64 -j '' -g 0 --tp $1 --sequence-parallel $2 --dry-run 1 > "$TMP/dry.log" 2>&1
    python3 - "$TMP/dry.log" $1 $2 <<'PY'
import re, sys
log, p, sp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
L, C, NH, Vp, maxT, B, T = 12, 768, 12, 50304, 1024, 2, 64  # d12 at -b 2 -t 64, CPU build (fp32)
N = B * T; Nl = N // p if sp else N; Cl, NHl, Vs = C // p, NH // p, Vp // p
params = (12 * C * C + 7 * C) * L // p + Vp * C // p + (maxT + 6 * L + 2) * C
elems = [Nl * C, L * Nl * C, L * Nl, L * Nl, L * N * 3 * Cl, L * N * Cl, L * B * NHl * T * T,  # CPU attention keeps probabilities
         L * Nl * C, L * Nl * C, L * Nl, L * Nl, L * N * 4 * Cl, L * N * 4 * Cl, L * Nl * C, Nl * C, Nl, Nl, N, N * Vs,
         N * C, Nl * C, N * C, N * 4 * Cl, max(B * NHl * min(T, 64) * T, 1),
         (p + 2) * N if p > 1 else 0, 2 * C if p > 1 and sp else 0, Vp if p > 1 else 0]
acts = sum((4 * e + 255) // 256 * 256 for e in elems)
m = re.search(r"each process holds (\d+) of the model's \d+ parameters.*activations (\d+) bytes", open(log).read())
got = tuple(map(int, m.groups())) if m else None
print("tp %d sp %d: parameters %s, activation bytes %s; formula %d, %d" % (p, sp, got and got[0], got and got[1], params, acts))
sys.exit(0 if got == (params, acts) else 1)
PY
    check $? "d12 per process at tp $1$([ $2 = 1 ] && echo ', sequence parallel'): parameters and activation bytes equal the formula"
done

# sampling under tensor parallelism, with and without sequence parallelism, against one process: the same weights (-l 0:
# the one step changes nothing), a prompt and 16 tokens drawn with the same random state; the tp ranks must feed the
# token process 0 drew (llmc/generate.h). The logits differ by fp32 rounding only (about 1e-7 relative), far from
# moving a draw across a boundary of the sampling distribution, so the texts are equal.
S=(-e L2:C32:NH2 -b 2 -t 16 -j '' -g 16 -l 0 -x 1 --prompt "ROMEO:")
$TRAIN "${S[@]}" -o "$TMP/sample1" > "$TMP/sample1.log" 2>&1
check $? "sampling reference: one process, a prompt and 16 tokens"
for sp in 0 1; do
    MPIRUN 2 $TRAIN "${S[@]}" --tp 2 --sequence-parallel $sp -o "$TMP/sample_sp$sp" > "$TMP/sample_sp$sp.log" 2>&1
    python3 - "$TMP/sample1/log.jsonl" "$TMP/sample_sp$sp/log.jsonl" <<'PY'
import json, sys
t = [[o["text"] for o in map(json.loads, open(p)) if o["kind"] == "sample"] for p in sys.argv[1:3]]
print("# one process %r; tp 2 %r" % (t[0], t[1]))
sys.exit(0 if len(t[0]) == 1 and t[0] == t[1] and len(t[0][0]) > 0 else 1)
PY
    check $? "sampling at tp 2$([ $sp = 1 ] && echo ' with sequence parallelism') prints the text one process prints"
done

# a long run: 160 steps (160 loss evaluations) of tp 2 with sequence parallelism against one process, L1:C32:NH2:V512
# on random ids at B=2, T=16 (a vocabulary of 512, so a step costs little): a difference that grows slowly (replicas
# of a tensor drifting apart, a bias lost every few hundred updates) shows here when 10 steps are too few. Tolerance
# T(160) = 164 x 16 x 2^-24 = 1.6e-4 (dp_lib.sh's argument, which grows linearly with the steps) on every step's loss
# and on the final weights' RMS (measured: 1e-7).
dp_random_shard "$TMP/v512.bin" 512
LONG=(-e L1:C32:NH2:V512 -i "$TMP/v512.bin" -b 2 -t 16 -j '' -g 0 -u 10 -l 1e-3 -x 160 -nk 1)
T160=$(dp_order_tol 160)
$TRAIN "${LONG[@]}" -o "$TMP/long1" > "$TMP/long1.log" 2>&1 && \
    MPIRUN 2 $TRAIN "${LONG[@]}" --tp 2 --sequence-parallel 1 -o "$TMP/long2" > "$TMP/long2.log" 2>&1
check $? "160 steps on one process and at tp 2 with sequence parallelism"
out=$(dp_compare_logs "$TMP/long1/log.jsonl" "$TMP/long2/log.jsonl" train loss $T160 160) && \
    out="$out; $(dp_compare_models_rms "$TMP/long1/model_00000160.bin" "$TMP/long2/model_00000160.bin" $T160)"
check $? "tp 2 with sequence parallelism vs one process over 160 steps (T(160) = $T160): $out"

dp_refused 4 "--tp" "--tp 3 on 4 processes" -e d2 -b 4 -t 32 -j '' -g 0 -x 1 --tp 3
dp_refused 8 "--tp" "--tp 8 with 4 heads" -e d2 -b 4 -t 32 -j '' -g 0 -x 1 --tp 8
dp_refused 1 "--sequence-parallel" "--sequence-parallel 1 without --tp" -e d2 -b 4 -t 32 -j '' -g 0 -x 1 --sequence-parallel 1
dp_refused 4 "divisible by --tp" "--sequence-parallel 1 with T = 30 and --tp 4" -e d2 -b 4 -t 30 -j '' -g 0 -x 1 --tp 4 --sequence-parallel 1
