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
