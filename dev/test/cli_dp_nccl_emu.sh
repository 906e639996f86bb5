# dev/test/cli_dp_nccl_emu.sh -- the GPU build's data-parallel code path without a GPU: train_gpt_emu_mpi is
# train_gpt.cu compiled as for the GPU (CUDA kernels, FP32) on the CPU emulator (dev/emu/emu.h), with NCCL's
# API emulated over MPI (dev/emu/emu_nccl.h), so llmc/comm.h takes its NCCL branch: the communication
# stream and events, grouped ncclReduce/ncclBroadcast per owned chunk, ncclAllReduce buckets, ZeRO-2's
# layer slots with fences, the all-gather of the parameters, the NCCL byte counters.
# For 2 ranks x 2 micro-steps and 3 ranks x 1 micro-step, ZeRO-0/1/2, 2 steps of d2 (B=4, T=32):
#   - every run exits 0 after 2 steps;
#   - losses equal the CPU build under mpirun with the same flags within 1e-5 relative (the emulated CUDA
#     kernels and the CPU backend agree to ~1e-6 in fp32, the fixture tolerance of test_gpt.cu is 1e-5);
#   - ZeRO-1/2 against ZeRO-0 of the same build: losses 1e-6, final weights 1e-5 of max|w| (other summation
#     orders of the same per-rank gradients; the argument of cli_dp_equiv.sh);
#   - bytes per rank per step equal the ring theory of cli_dp_zero.sh (nominal NCCL counters) within 256 bytes
#     per collective pass.
# One process (one GPU), ZeRO-0/1/2, 2 micro-steps: ZeRO-0 does not start NCCL, ZeRO-1/2 do; same losses/weights.
# BF16 build (train_gpt_emu_mpi_bf16: bf16 gradients through NCCL, fp32 master weights, stochastic rounding
# keyed by the global element index), 2 ranks x 1 micro-step, ZeRO-0/1/2, 2 steps:
#   - losses equal the fp32 CPU build within 5e-3 relative (test_gpt.cu's BF16 step-loss tolerance);
#   - ZeRO-1/2 vs ZeRO-0: losses 1e-6; the bf16 weights are the same except at most 1e-4 of the values. The
#     bf16 gradient sums are the same (two ranks: a+b either way) and so is the rounding stream, but the clip
#     factor comes from a norm summed in another order (one fp32 pass over P vs an fp64 sum of shard norms),
#     so the fp32 update differs in its last bits. That moves a value by at most one bf16 ulp where stochastic
#     rounding lands on the other neighbour, or by up to ~lr per step where Adam's update is sensitive (gradient
#     near eps, e.g. biases near 0): each difference must be <= max(1 ulp, 2 x the summed lr = 3e-3).
#     Measured: 297 of 6.9M values, at most 3.8e-4. With clipping off (--grad-clip 0) that cause is gone and
#     the weights must be bit-identical, which checks the sharded update and its rounding stream exactly.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
EMU=./train_gpt_emu_mpi
if [ ! -x "$EMU" ]; then
    echo "not ok - $EMU missing (make train_gpt_emu_mpi)"
    exit 1
fi
F=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 2 --comm-stats 1)
P=6868480
for setup in "2 2" "3 1"; do
    set -- $setup
    N=$1; A=$2; D=$((128 * N * A))
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
        if [ $z -gt 0 ]; then
            out=$(dp_compare_logs "$TMP/emu_n${N}z0/log.jsonl" "$E/log.jsonl" train loss 1e-6 2) && \
                out="$out; $(dp_compare_models "$TMP/emu_n${N}z0/model_00000002.bin" "$E/model_00000002.bin" 1e-5)"
            check $? "NCCL path, N=$N x $A: ZeRO-$z vs ZeRO-0: $out"
        fi
    done
done

EMU16=./train_gpt_emu_mpi_bf16
if [ ! -x "$EMU16" ]; then
    echo "not ok - $EMU16 missing (make train_gpt_emu_mpi_bf16)"
    exit 1
fi
MPIRUN 2 $TRAIN "${F[@]}" -z 0 -d 256 -o "$TMP/cpu16ref" > "$TMP/cpu16ref.log" 2>&1
for z in 0 1 2; do
    E="$TMP/bf16_z$z"
    MPIRUN 2 $EMU16 "${F[@]}" -z $z -d 256 -o "$E" > "$E.log" 2>&1
    rc=$?
    test $rc -eq 0 && test "$(grep -c '^step' "$E.log")" -eq 2
    check $? "NCCL path (emulated), BF16, N=2, ZeRO-$z: 2 steps under mpirun (exit $rc)"
    out=$(dp_compare_logs "$TMP/cpu16ref/log.jsonl" "$E/log.jsonl" train loss 5e-3 2)
    check $? "NCCL path, BF16, N=2, ZeRO-$z: losses vs the fp32 CPU build: $out"
    if [ $z -gt 0 ]; then
        out=$(dp_compare_logs "$TMP/bf16_z0/log.jsonl" "$E/log.jsonl" train loss 1e-6 2) && out="$out; $(python3 - "$TMP/bf16_z0/model_00000002.bin" "$E/model_00000002.bin" <<'PY'
import array, sys
def load(p):
    a = array.array('H'); a.frombytes(open(p, 'rb').read()[1024:])
    return array.array('f', array.array('I', [x << 16 for x in a]).tobytes())
def ulp(x):  # bf16: 8 significant bits
    import math
    return 2.0 ** (math.frexp(abs(x))[1] - 8) if x else 2.0 ** -133
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [(abs(x - y), x, y) for x, y in zip(a, b) if x != y]
worse = [t for t in bad if t[0] > max(ulp(max(abs(t[1]), abs(t[2]))), 3e-3)]
ok = len(a) == len(b) and len(bad) <= 1e-4 * len(a) and not worse
print("%d of %d bf16 weights differ, largest by %.2g; %d beyond max(1 ulp, 3e-3)" % (len(bad), len(a), max(t[0] for t in bad) if bad else 0.0, len(worse)))
sys.exit(0 if ok else 1)
PY
)"
        check $? "NCCL path, BF16, N=2: ZeRO-$z vs ZeRO-0: $out"
    fi
done
for z in 0 1 2; do
    MPIRUN 2 $EMU16 "${F[@]}" -z $z -d 256 --grad-clip 0 -o "$TMP/bf16nc_z$z" > "$TMP/bf16nc_z$z.log" 2>&1 || echo "(ZeRO-$z run without clipping failed)"
done
cmp -s "$TMP/bf16nc_z0/model_00000002.bin" "$TMP/bf16nc_z1/model_00000002.bin" && \
    cmp -s "$TMP/bf16nc_z0/model_00000002.bin" "$TMP/bf16nc_z2/model_00000002.bin"
check $? "NCCL path, BF16, N=2, --grad-clip 0: ZeRO-1 and ZeRO-2 weights bit-identical to ZeRO-0 (sharded update, same rounding stream)"

# One process, as on one GPU, 2 micro-steps: ZeRO-0 never starts NCCL (nothing to reduce), ZeRO-1/2 run every
# collective through NCCL in a world of one (gpu_check.sh's ZeRO rows); the losses and weights agree as above.
for z in 0 1 2; do
    O="$TMP/one_z$z"
    MPIRUN 1 $EMU "${F[@]}" -z $z -d 256 -o "$O" > "$O.log" 2>&1
    rc=$?
    # the header names the collective backend: nccl once NCCL is started, else the bootstrap's (mpi here)
    got=$(grep -o "processes / ZeRO .*| 1 / stage $z (collectives: [a-z]*)" "$O.log" | grep -o '[a-z]*)$' | tr -d ')')
    want=$([ $z = 0 ] && echo "not nccl" || echo nccl)
    if [ $z = 0 ]; then backend_ok() { [ -n "$got" ] && [ "$got" != nccl ]; }; else backend_ok() { [ "$got" = nccl ]; }; fi
    test $rc -eq 0 && test "$(grep -c '^step' "$O.log")" -eq 2 && backend_ok
    check $? "one process, ZeRO-$z, 2 micro-steps: 2 steps, collectives: $want (exit $rc; got $got)"
    if [ $z -gt 0 ]; then
        out=$(dp_compare_logs "$TMP/one_z0/log.jsonl" "$O/log.jsonl" train loss 1e-6 2) && \
            out="$out; $(dp_compare_models "$TMP/one_z0/model_00000002.bin" "$O/model_00000002.bin" 1e-5)"
        check $? "one process: ZeRO-$z through NCCL vs ZeRO-0 without it: $out"
    fi
done
