# dev/test/cli_moe_ep_nccl_emu.sh -- expert parallelism on the GPU build's code path without a GPU:
# train_gpt_emu_mpi (the CUDA kernels on dev/emu, NCCL emulated over MPI) with --ep 2 on 2 processes, so the MoE
# layers' all-to-all takes llmc/comm_nccl.h's grouped ncclSend/ncclRecv (comm_p2p_batch) on the communication
# stream and the compute stream waits for it. d2 with 4 experts top-2, B=1 T=32, 2 steps (the emulator runs about
# 10 s per step): the run exits 0; losses, norms and final weights equal the CPU build's --ep 2 within 1e-5
# (dp_emu_vs_cpu, the argument of dev/test/cli_tp_nccl_emu.sh: the emulated kernels and the CPU backend agree to
# ~1e-6 in fp32); the all-to-all part of the step lines (rows sent, bytes counted) is the CPU build's exactly,
# since both route the same tokens.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs ./train_gpt_emu_mpi
F=(-e d2 -b 1 -t 32 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 2 --moe-experts 4 --moe-top-k 2 --moe-capacity-factor 1.0
   --moe-z-coef 0.001 --ep 2)
dp_emu_vs_cpu 2 ep2 "MoE --ep 2 (all-to-all by ncclSend/ncclRecv)" "${F[@]}"
a2a() { grep -oE '^step +[0-9]+/2 .*[|] a2a sent [^|]*' "$1" | sed -E 's/[|].*[|] a2a/a2a/'; }
test "$(a2a "$TMP/emu_ep2.log" | wc -l)" -eq 2 && test "$(a2a "$TMP/emu_ep2.log")" = "$(a2a "$TMP/cpu_ep2.log")"
check $? "NCCL path, --ep 2: all-to-all rows and bytes per step as on the CPU build: $(a2a "$TMP/emu_ep2.log" | head -n 1)"
