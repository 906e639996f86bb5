# dev/test/cli_pp_split_nccl_emu.sh -- the split-backward schedules on the GPU build's code path without a GPU:
# train_gpt_emu_mpi (the CUDA kernels on the CPU execution layer, FP32, NCCL's API emulated over MPI), so B and W
# run the CUDA matmul wrappers (matmul_backward without its weight GEMM, then matmul_backward_weight), W's operands
# are copied with device copies, and dualpipev's turn on rank p-1 hands its boundary rows over by a device copy
# while the other transfers go through ncclSend / ncclRecv on the communication stream; dualpipe's copies sum their
# gradients pairwise (ncclSend / ncclRecv, then the residual kernel) before the held-back buckets.
# L4:C64:NH4:T48, B 2, T 32, 2 steps, m 4. Tolerances: those of cli_pp_nccl_emu.sh (the same kernels on the same
# inputs as the CPU build but for summation orders inside the emulated kernels: 1e-5 relative).
#   - pp 2 x dp 2 x ep 2 dualpipev with experts (4 processes): its overlapped F&B pairs post each MoE all-to-all
#     (ncclSend / ncclRecv on the communication stream) and let the other pass's kernels queue before the compute
#     stream waits for it (comm_p2p_wait), so a missing wait reads unfinished rows;
#   - pp 2 zb-h1, pp 2 dualpipev and pp 2 dualpipe: exit 0 after 2 steps; losses, norms and final weights equal the CPU build's
#     under mpirun with the same flags within 1e-5.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs ./train_gpt_emu_mpi
F=(-e L4:C64:NH4:T48 -b 2 -t 32 -j '' -g 0 -x 2 -l 1e-3 -d 256)
dp_emu_vs_cpu 2 zbh1 "pp 2 zb-h1" "${F[@]}" --pp 2 --pp-schedule zb-h1
dp_emu_vs_cpu 2 dualpipev "pp 2 dualpipev" "${F[@]}" --pp 2 --pp-schedule dualpipev
dp_emu_vs_cpu 2 dualpipe "pp 2 dualpipe" "${F[@]}" --pp 2 --pp-schedule dualpipe
dp_emu_vs_cpu 4 pairs "pp 2 x dp 2 x ep 2 dualpipev with experts, overlapped F&B pairs (deferred all-to-alls)" \
    "${F[@]}" -e L4:C64:NH4:T48:E4:K2 -d 512 --pp 2 --ep 2 -z 1 --pp-schedule dualpipev
