# dev/test/cli_dp_nccl_emu.sh -- the GPU build's data-parallel code path without a GPU: train_gpt_emu_mpi is
# train_gpt.cu compiled as for the GPU (CUDA kernels, FP32) on the CPU execution layer, with NCCL's API emulated
# over MPI (the stand-in dev/emu/nccl/nccl.h), so the collectives take llmc/comm_nccl.h: the communication
# stream and events, grouped ncclReduce/ncclBroadcast per owned chunk, ncclAllReduce buckets, ZeRO-2's
# layer slots with fences, the all-gather of the parameters, the NCCL byte counters. Tolerances: dp_lib.sh.
# For 2 ranks x 2 micro-steps and 3 ranks x 1 micro-step, ZeRO-0/1/2, 2 steps of d2 (B=2, T=32: none of
# the properties below depends on the batch size, and the emulator's time grows with it):
#   - every run exits 0 after 2 steps;
#   - losses equal the CPU build under mpirun with the same flags within 1e-5 relative (another implementation
#     of every op: the emulated CUDA kernels and the CPU backend agree to ~1e-6 in fp32, and test_gpt.cu's fp32
#     fixture tolerance, argued there, is 1e-5);
#   - ZeRO-1/2 against ZeRO-0 of the same build: on 2 ranks ZeRO-1 trains bit-identically (a sum of two
#     partial gradients is the same in either order, and every stage computes the same norm); ZeRO-0's
#     ncclAllReduce and ZeRO-1/2's per-chunk reductions may sum 3 ranks in other orders, and ZeRO-2 sums over
#     ranks before micro-steps: those runs agree within T(2);
#   - bytes per rank per step equal the ring theory of cli_dp_zero.sh (nominal NCCL counters) within 256 bytes
#     per collective pass.
# One process (one GPU), ZeRO-0/1/2, 2 micro-steps: ZeRO-0 does not start NCCL, ZeRO-1/2 do; ZeRO-1 trains
# bit-identically to ZeRO-0, ZeRO-2 (shard accumulated over the micro-steps) within T(2).
# BF16 build (train_gpt_emu_mpi_bf16: bf16 gradients through NCCL, fp32 master weights, stochastic rounding
# keyed by the global element index), 2 ranks x 1 micro-step, ZeRO-0/1/2, 2 steps:
#   - losses equal the fp32 CPU build within 5e-3 relative (test_gpt.cu's BF16 step-loss tolerance);
#   - ZeRO-1/2 train bit-identically to ZeRO-0, with clipping: the same bf16 sums of two ranks, the same
#     per-shard gradient norm, the same rounding stream for every element whatever shard updates it.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
EMU=./train_gpt_emu_mpi
EMU16=./train_gpt_emu_mpi_bf16
dp_require_programs "$EMU" "$EMU16"
F=(-e d2 -b 2 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 2 --comm-stats 1)
P=6868480
for setup in "2 2" "3 1"; do
    set -- $setup
    N=$1; A=$2; D=$((64 * N * A))
    for z in 0 1 2; do
        E="$TMP/emu_n${N}z$z"; C="$TMP/cpu_n${N}z$z"
        MPIRUN $N $EMU "${F[@]}" -z $z -d $D -o "$E" > "$E.log" 2>&1
        rc=$?
        test $rc -eq 0 && test "$(grep -c '^step' "$E.log")" -eq 2
        check $? "NCCL path (emulated), N=$N x $A micro-steps, ZeRO-$z: 2 steps under mpirun (exit $rc)"
        MPIRUN $N $TRAIN "${F[@]}" -z $z -d $D -o "$C" > "$C.log" 2>&1
        out=$(dp_compare_logs "$C/log.jsonl" "$E/log.jsonl" train loss 1e-5 2)
        check $? "NCCL path, N=$N x $A, ZeRO-$z: losses vs the CPU build: $out"
        python3 - "$E.log" $N $z $A $P <<'PY'
import re, sys
log, N, z, A, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"comm: rank (\d+) step 2 sent (\d+) recv (\d+)", open(log).read())]
times = A + 1 if z == 2 else 2
theory = times * (N - 1) / N * 4 * P
ok = len(rows) == N and all(abs(s - theory) <= 256 * times and abs(r - theory) <= 256 * times for _, s, r in rows)
print("theory %.0f; measured %s" % (theory, sorted(rows)))
sys.exit(0 if ok else 1)
PY
        check $? "NCCL path, N=$N x $A, ZeRO-$z: bytes per rank per step = $([ $z = 2 ] && echo "$A reduce-scatters + 1 all-gather" || echo "one reduction per step") x (N-1)/N x 4P"
        if [ $z -eq 1 ] && [ $N -eq 2 ]; then
            out=$(dp_same_training "$TMP/emu_n${N}z0" "$E" 2)
            check $? "NCCL path, N=$N x $A: ZeRO-$z vs ZeRO-0 (bit for bit): $out"
        elif [ $z -gt 0 ]; then
            T2=$(dp_order_tol 2)
            out=$(dp_compare_logs "$TMP/emu_n${N}z0/log.jsonl" "$E/log.jsonl" train loss $T2 2) && \
                out="$out; $(dp_compare_models_rms "$TMP/emu_n${N}z0/model_00000002.bin" "$E/model_00000002.bin" $T2)"
            check $? "NCCL path, N=$N x $A: ZeRO-$z vs ZeRO-0 (T(2) = $T2): $out"
        fi
    done
done

MPIRUN 2 $TRAIN "${F[@]}" -z 0 -d 128 -o "$TMP/cpu16ref" > "$TMP/cpu16ref.log" 2>&1
for z in 0 1 2; do
    E="$TMP/bf16_z$z"
    MPIRUN 2 $EMU16 "${F[@]}" -z $z -d 128 -o "$E" > "$E.log" 2>&1
    rc=$?
    test $rc -eq 0 && test "$(grep -c '^step' "$E.log")" -eq 2
    check $? "NCCL path (emulated), BF16, N=2, ZeRO-$z: 2 steps under mpirun (exit $rc)"
    out=$(dp_compare_logs "$TMP/cpu16ref/log.jsonl" "$E/log.jsonl" train loss 5e-3 2)
    check $? "NCCL path, BF16, N=2, ZeRO-$z: losses vs the fp32 CPU build: $out"
    if [ $z -gt 0 ]; then
        out=$(dp_same_training "$TMP/bf16_z0" "$E" 2)
        check $? "NCCL path, BF16, N=2: ZeRO-$z vs ZeRO-0 (bit for bit, clipping on): $out"
    fi
done

# ZeRO-3 through the NCCL path (per-layer parameter gathers as grouped ncclBroadcast per owned chunk on the
# communication stream, prefetch of the next layer, comm fences 3-5), 2 ranks x 2 micro-steps of a small model
# (L2:C64:NH2, B=1, T=16; P = 3,385,088) to keep it quick: 2 steps, losses equal the CPU build's ZeRO-3 within 1e-5
# (as above), bytes per rank per step = 2 x (2 all-gathers + 1 reduce-scatter) x (N-1)/N x 4P.
Z=(-e L2:C64:NH2 -b 1 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 2 --comm-stats 1 -z 3 -d 64)
MPIRUN 2 $EMU "${Z[@]}" -o "$TMP/emu_z3" > "$TMP/emu_z3.log" 2>&1
rc=$?
test $rc -eq 0 && test "$(grep -c '^step' "$TMP/emu_z3.log")" -eq 2 && grep -q "^memory ledger .* -> equal$" "$TMP/emu_z3.log"
check $? "NCCL path (emulated), N=2 x 2 micro-steps, ZeRO-3: 2 steps, memory ledger equal (exit $rc)"
MPIRUN 2 $TRAIN "${Z[@]}" -o "$TMP/cpu_z3" > "$TMP/cpu_z3.log" 2>&1
out=$(dp_compare_logs "$TMP/cpu_z3/log.jsonl" "$TMP/emu_z3/log.jsonl" train loss 1e-5 2)
check $? "NCCL path, N=2 x 2, ZeRO-3: losses vs the CPU build: $out"
python3 - "$TMP/emu_z3.log" <<'PY'
import re, sys
P, N = 3385088, 2
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"comm: rank (\d+) step 2 sent (\d+) recv (\d+)", open(sys.argv[1]).read())]
theory = 6 * (N - 1) / N * 4 * P
ok = len(rows) == N and all(abs(s - theory) <= 256 * 6 and abs(r - theory) <= 256 * 6 for _, s, r in rows)
print("theory %.0f; measured %s" % (theory, sorted(rows)))
sys.exit(0 if ok else 1)
PY
check $? "NCCL path, N=2 x 2, ZeRO-3: bytes per rank per step = 2 x (2 parameter all-gathers + 1 reduce-scatter) x (N-1)/N x 4P"

# One process, as on one GPU, 2 micro-steps: ZeRO-0 never starts NCCL (nothing to reduce), ZeRO-1/2 run every
# collective through NCCL in a world of one (gpu_check.sh's ZeRO rows); the losses and weights agree as above.
for z in 0 1 2; do
    O="$TMP/one_z$z"
    MPIRUN 1 $EMU "${F[@]}" -z $z -d 128 -o "$O" > "$O.log" 2>&1
    rc=$?
    # the header names the collective backend: nccl once NCCL is started, else the bootstrap's (mpi here)
    got=$(grep -o "processes / ZeRO .*| 1 / stage $z (collectives: [a-z]*)" "$O.log" | grep -o '[a-z]*)$' | tr -d ')')
    want=$([ $z = 0 ] && echo "not nccl" || echo nccl)
    if [ $z = 0 ]; then backend_ok() { [ -n "$got" ] && [ "$got" != nccl ]; }; else backend_ok() { [ "$got" = nccl ]; }; fi
    test $rc -eq 0 && test "$(grep -c '^step' "$O.log")" -eq 2 && backend_ok
    check $? "one process, ZeRO-$z, 2 micro-steps: 2 steps, collectives: $want (exit $rc; got $got)"
    if [ $z -eq 1 ]; then
        out=$(dp_same_training "$TMP/one_z0" "$O" 2)
        check $? "one process: ZeRO-1 through NCCL vs ZeRO-0 without it (bit for bit): $out"
    elif [ $z -eq 2 ]; then
        T2=$(dp_order_tol 2)
        out=$(dp_compare_logs "$TMP/one_z0/log.jsonl" "$O/log.jsonl" train loss $T2 2) && \
            out="$out; $(dp_compare_models_rms "$TMP/one_z0/model_00000002.bin" "$O/model_00000002.bin" $T2)"
        check $? "one process: ZeRO-2 through NCCL vs ZeRO-0 without it (T(2) = $T2): $out"
    fi
done
