# dev/test/cli_pp_nccl_emu.sh -- pipeline parallelism on the GPU build's code path without a GPU: train_gpt_emu_mpi
# (the CUDA kernels on the CPU execution layer, FP32) and train_gpt_emu_mpi_bf16 (BF16), with NCCL's API emulated
# over MPI, so the boundary activations and gradients go through comm_p2p_batch's ncclGroupStart / ncclSend /
# ncclRecv / ncclGroupEnd on the communication stream (llmc/comm_nccl.h), as on GPUs, matched by posting order.
# d8 (B=2, T=16), 2 steps. Tolerances: those of cli_tp_nccl_emu.sh.
#   - FP32, tp 2 x pp 2 with ZeRO-1 (4 processes, 1f1b, m = 4) and
#     pp 2 x dp 2 with ZeRO-2, interleaved over chunks of one layer (v = 4, m = 2: every pass's buckets reduce-scattered
#     on the communication stream, folded after their fences, odd chunks in the other slot), and pp 2 x dp 2 with
#     ZeRO-3 (1f1b, m = 2: each stage's layers gathered on the communication stream in every pass):
#     every run exits 0 after 2 steps; losses and gradient norms equal the CPU build's under mpirun with the same
#     flags within 1e-5 relative, the final weights' RMS difference within 1e-5 of their RMS; the boundary bytes
#     each rank moves per step equal the CPU build's exactly (the same transfers);
#   - BF16, pp 2 1f1b (2 processes, m = 4): exits 0 after 2 steps; losses equal the fp32 CPU build on one process
#     within 5e-3 relative.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs ./train_gpt_emu_mpi ./train_gpt_emu_mpi_bf16
F=(-e d8 -b 2 -t 16 -j '' -g 0 -x 2 -l 1e-3 -d 128 --comm-stats 1)

# (the interleaved schedule's NCCL transfers run in the pp 2 x dp 2 ZeRO-2 row, v = 4; its pp 2 v 2 row without dp
# was dropped to keep make test's time: the same transfers, fewer chunks. The FP32 pp 2 row alone (2 processes, 1f1b,
# m = 4) was dropped too: tp 2 x pp 2 runs the same schedule, m and boundary transfers (65,536 bytes each way per
# stage, equal to the CPU build's) with a tp group beside them, the two pp 2 x dp 2 rows run the pipeline without tp,
# and pp 2 on 2 processes alone is the BF16 row below; the CPU build's pp 2 against one process is cli_pp.sh)
for setup in "4 --tp 2 --pp 2 -z 1" "4 --pp 2 -z 2 --pp-schedule interleaved --pp-virtual 4" "4 --pp 2 -z 3"; do
    set -- $setup
    N=$1; shift
    name="n$N$(echo "$@" | tr -d ' -')"
    E="$TMP/emu_$name"; C="$TMP/cpu_$name"
    dp_emu_vs_cpu $N "$name" "$*" "${F[@]}" "$@"
    be=$(dp_step2_bytes "$E.log" pp "boundary "); bc=$(dp_step2_bytes "$C.log" pp "boundary ")
    test -n "$bc" && test "$be" = "$bc"
    check $? "NCCL path, FP32, $N processes, $*: boundary bytes per rank equal the CPU build's (dp.pp:sent:recv $be vs $bc)"
done

$TRAIN "${F[@]}" -o "$TMP/cpu_ref" > "$TMP/cpu_ref.log" 2>&1
E="$TMP/bf16_pp2"
MPIRUN 2 ./train_gpt_emu_mpi_bf16 "${F[@]}" --pp 2 -o "$E" > "$E.log" 2>&1
rc=$?
test $rc -eq 0 && test "$(grep -c '^step' "$E.log")" -eq 2
check $? "NCCL path (emulated), BF16, pp 2: 2 steps under mpirun (exit $rc)"
out=$(dp_compare_logs "$TMP/cpu_ref/log.jsonl" "$E/log.jsonl" train loss 5e-3 2)
check $? "NCCL path, BF16, pp 2: losses vs the fp32 CPU build on one process: $out"
