# dev/test/cli_dp_zero.sh -- ZeRO-1, ZeRO-2 and ZeRO-3 against ZeRO-0 on 2, 3 and 5 ranks, 4 steps each (d2 has
# 6,868,480 parameters: 3 ranks pad the flat buffer by 2 values; under ZeRO-2/3 the per-layer buckets split
# unevenly over the shards, some chunks empty, for every N). Tolerances: the argument in dp_lib.sh.
#   - ZeRO-1, 2 and 3 train exactly as ZeRO-0: identical loss, norm and lr at every step and a bit-identical
#     final model (the same ring sums, the same per-shard gradient norm, elementwise AdamW; ZeRO-3's gathered
#     parameters are the owners' values bit for bit), and the ZeRO-1/2/3 optimizer shards of all ranks, put end
#     to end, are ZeRO-0's m and v bit for bit;
#   - grad norm at step 1 equals the single-process norm over the same global batch within T(0) (the same
#     weights; the per-window gradients summed in another order);
#   - bytes sent and received by EVERY rank in a step vs theory (P fp32 gradients of 4 bytes):
#     ZeRO-0 ring all-reduce 2(N-1)/N*4P; ZeRO-1/2 reduce-scatter + all-gather (N-1)/N*4P each; ZeRO-3 the
#     parameters all-gathered in the forward and again in the backward + the reduce-scatter: 3(N-1)/N*4P,
#     within 256 bytes per collective (padding of at most N-1 values and the N+2 fp64 step statistics: loss, overflow flag,
#     one norm partial per shard);
#   - optimizer state per rank: the state file of every rank holds 2*ceil(P/N) fp32 values (m, v) for
#     ZeRO-1/2/3, 2P for ZeRO-0, i.e. 1/N of the unsharded amount plus padding.
# With 2 micro-steps of gradient accumulation (N = 3, -d 768):
#   - ZeRO-0/1 reduce once per optimizer step (the buckets of the last micro-step only): bytes per step equal
#     the accumulation-free theory above, not twice it;
#   - ZeRO-2 reduce-scatters every micro-step's buckets (the full gradient is never kept, so they cannot wait)
#     and all-gathers once: (2 + 1)(N-1)/N*4P per rank;
#   - ZeRO-3 gathers the parameters in every micro-step's forward and backward and reduce-scatters as ZeRO-2:
#     (2 x 3)(N-1)/N*4P per rank;
#   - ZeRO-1 vs ZeRO-0: identical (both accumulate locally, then reduce the same way). ZeRO-2 vs ZeRO-0: ZeRO-2
#     sums over ranks first and over micro-steps second, ZeRO-0 the other way round: losses, norms and RMS
#     weights within T(4); ZeRO-3 vs ZeRO-2: identical (the same gradient store and sums);
#   - the ZeRO-2 memory ledger accounts for every gradient value held: 2 layer slots + wte/wpe/lnf + own shard,
#     its gradient MiB equal those values x 4 bytes, and it says when that is no saving over the full buffer
#     (d2 is mostly its tied embedding, so here it is none).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
F=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 4 --comm-stats 1)
P=6868480
for N in 2 3 5; do
    $TRAIN "${F[@]}" -x 1 -d $((128 * N)) -o "$TMP/single$N" > "$TMP/single$N.log" 2>&1
    single=$(python3 -c "import json,sys; print([o['grad_norm'] for o in map(json.loads, open(sys.argv[1])) if o['kind']=='train'][0])" "$TMP/single$N/log.jsonl")
    for z in 0 1 2 3; do
        D="$TMP/n${N}z$z"
        MPIRUN $N $TRAIN "${F[@]}" -z $z -o "$D" > "$D.log" 2>&1
        check $? "N=$N ZeRO-$z: 4 steps under mpirun"
        norm1=$(python3 -c "import json,sys; print([o['grad_norm'] for o in map(json.loads, open(sys.argv[1])) if o['kind']=='train'][0])" "$D/log.jsonl")
        python3 -c "import sys; a,b=float('$norm1'),float('$single'); sys.exit(0 if abs(a-b) <= $(dp_order_tol 0)*b else 1)" 2> /dev/null
        check $? "N=$N ZeRO-$z: step-1 grad norm $norm1 equals the single-process norm $single (T(0) = $(dp_order_tol 0))"
        python3 - "$D.log" $N $z $P <<'PY'
import re, sys
log, N, z, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"comm: rank (\d+) step 2 sent (\d+) recv (\d+)", open(log).read())]
times = 3 if z == 3 else 2  # all-reduce, or reduce-scatter + all-gather; ZeRO-3: 2 all-gathers + reduce-scatter
theory = times * (N - 1) / N * 4 * P
ok = len(rows) == N and all(abs(s - theory) <= 256 * times and abs(r - theory) <= 256 * times for _, s, r in rows)
print("theory %.0f bytes per rank; measured (rank, sent, recv): %s" % (theory, sorted(rows)))
sys.exit(0 if ok else 1)
PY
        check $? "N=$N ZeRO-$z: bytes per rank per step match the ring theory within 256 bytes"
        S=$(( (P + N - 1) / N )); want=$(( z == 0 ? 1024 + 8 * P : 1024 + 8 * S )); ok=0
        for ((r = 0; r < N; r++)); do
            f=$(printf "%s/state_00000004_%05d.bin" "$D" $r)
            test "$(stat -c %s "$f" 2> /dev/null)" = "$want" || ok=1
        done
        check $ok "N=$N ZeRO-$z: every rank's optimizer state file is $want bytes (m+v of $([ $z = 0 ] && echo "all $P" || echo "ceil(P/N) = $S") values)"
        if [ $z -gt 0 ]; then
            out=$(dp_same_training "$TMP/n${N}z0" "$D" 4)
            check $? "N=$N ZeRO-$z vs ZeRO-0: $out"
            python3 - "$TMP/n${N}z0/state_00000004_00000.bin" "$D" $N $P <<'PY'
import sys
z0, d, N, P = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
S = -(-P // N)
full = open(z0, "rb").read()[1024:]
m0, v0 = full[:4 * P], full[4 * P:8 * P]
m, v = b"", b""
for r in range(N):
    body = open("%s/state_00000004_%05d.bin" % (d, r), "rb").read()[1024:]
    m += body[:4 * S]; v += body[4 * S:8 * S]
ok = m[:4 * P] == m0 and v[:4 * P] == v0 and m[4 * P:] == bytes(len(m) - 4 * P)
print("m, v of %d shards of %d values end to end: %s (padding %d values)" % (N, S, "identical" if ok else "DIFFER", N * S - P))
sys.exit(0 if ok else 1)
PY
            check $? "N=$N ZeRO-$z: the optimizer shards of all ranks, end to end, are ZeRO-0's m and v bit for bit"
        fi
    done
done

N=3
for z in 0 1 2 3; do
    D="$TMP/acc$z"
    MPIRUN $N $TRAIN "${F[@]}" -z $z -d $((256 * N)) -o "$D" > "$D.log" 2>&1
    check $? "N=$N ZeRO-$z with 2 accumulation micro-steps: 4 steps under mpirun"
    python3 - "$D.log" $N $z $P <<'PY'
import re, sys
log, N, z, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"comm: rank (\d+) step 2 sent (\d+) recv (\d+)", open(log).read())]
# ZeRO-2: reduce-scatter per micro-step (2) + all-gather; ZeRO-3: per micro-step 2 all-gathers + reduce-scatter (6);
# else once per step
times = {2: 3, 3: 6}.get(z, 2)
theory = times * (N - 1) / N * 4 * P
ok = len(rows) == N and all(abs(s - theory) <= 256 * times and abs(r - theory) <= 256 * times for _, s, r in rows)
print("theory %d x (N-1)/N x 4P = %.0f bytes per rank; measured (rank, sent, recv): %s" % (times, theory, sorted(rows)))
sys.exit(0 if ok else 1)
PY
    check $? "N=$N ZeRO-$z, 2 micro-steps: bytes per rank per step = $(case $z in 2) echo "2 reduce-scatters + 1 all-gather";; 3) echo "2 x (2 parameter all-gathers + 1 reduce-scatter)";; *) echo "one reduction per optimizer step";; esac)"
done
out=$(dp_same_training "$TMP/acc0" "$TMP/acc1" 4)
check $? "N=$N, 2 micro-steps, ZeRO-1 vs ZeRO-0: $out"
T4=$(dp_order_tol 4)
out=$(dp_compare_logs "$TMP/acc0/log.jsonl" "$TMP/acc2/log.jsonl" train loss $T4 4) && \
    out="$out; $(dp_compare_logs "$TMP/acc0/log.jsonl" "$TMP/acc2/log.jsonl" train grad_norm $T4 4)" && \
    out="$out; $(dp_compare_models_rms "$TMP/acc0/model_00000004.bin" "$TMP/acc2/model_00000004.bin" $T4)"
check $? "N=$N, 2 micro-steps, ZeRO-2 vs ZeRO-0 (T(4) = $T4): $out"
out=$(dp_same_training "$TMP/acc2" "$TMP/acc3" 4)
check $? "N=$N, 2 micro-steps, ZeRO-3 vs ZeRO-2 (the same gradient store and sums): $out"
python3 - "$TMP/acc2.log" $N $P <<'PY'
import re, sys
log, N, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = open(log).read()
m = re.search(r"ZeRO-2 gradients: 2 layer slots of (\d+) \+ wte/wpe/lnf (\d+) \(kept whole[^)]*\) \+ own shard (\d+) = (\d+) values, against (\d+)", t)
g = re.search(r"memory per process \(MiB\): parameters [\d.]+ \| gradients ([\d.]+)", t)
L, C = 2, 128  # d2
slot = 12 * C * C + 13 * C  # one layer's 12 tensors
glob = P - L * slot  # wte, wpe, lnfw, lnfb
S = -(-P // N)
ok = bool(m and g) and tuple(map(int, m.groups())) == (slot, glob, S, 2 * slot + glob + S, S * N) \
    and abs(float(g.group(1)) - (2 * slot + glob + S) * 4 / 2**20) < 0.05 \
    and ("ZeRO-2 note: for this model" in t) == (2 * slot + glob + S >= S * N)
print("ledger: %s; gradients %s MiB; expected slot %d, globals %d, shard %d" % (m.groups() if m else None, g.group(1) if g else None, slot, glob, S))
sys.exit(0 if ok else 1)
PY
check $? "ZeRO-2 memory ledger: gradient storage = 2 layer slots + wte/wpe/lnf + own shard (values and MiB)"
# one process: ZeRO-2's sharded gradient layout (layer slots + shard accumulator, no collectives) gives the
# same weights as the full gradient buffer bit for bit (one micro-step: the accumulator adds to zero, exact)
$TRAIN "${F[@]}" -z 0 -d 128 -o "$TMP/one_z0" > "$TMP/one_z0.log" 2>&1 && \
    $TRAIN "${F[@]}" -z 2 -d 128 -o "$TMP/one_z2" > "$TMP/one_z2.log" 2>&1 && \
    cmp -s "$TMP/one_z0/model_00000004.bin" "$TMP/one_z2/model_00000004.bin"
check $? "one process: ZeRO-2's sharded gradient layout gives weights identical to ZeRO-0 after 4 steps"
