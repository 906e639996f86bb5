# dev/test/cli_muon_nccl_emu.sh -- --optimizer muon (llmc/muon.h) on the GPU build's code path without a GPU:
# train_gpt_emu_mpi (the CUDA kernels on the CPU execution layer, FP32; NCCL's API emulated over MPI), so the matrices
# a ZeRO shard boundary cuts are gathered through the grouped ncclBroadcast of comm_all_gather_segments, Newton-Schulz
# runs through llmc/cuda/muon.cuh's cuBLASLt GEMMs, and tensor parallelism all-reduces the Gram matrices and norms
# through ncclAllReduce on the communication stream (llmc/README.md, "The Muon optimizer").
# L2:C128:NH4:V512 (its dp 2 shard boundary cuts layer 0's attprojw), B=4, T=32, 2 steps:
#   - dp 2 ZeRO-2 and tp 2: each exits 0; losses, gradient norms and final weights equal the CPU build's under mpirun
#     with the same flags within 1e-5 relative (dp_lib.sh's dp_emu_vs_cpu; measured 5e-8 in the weights: the same
#     fp32 arithmetic, sums in another order). What this catches is a fault of the GPU path alone: the gather read
#     before its stream finished, an uneven gather mapped wrongly onto NCCL, a transposed cuBLASLt operand in the
#     iteration; a fault shared by both builds (the scheme itself) is cli_muon.sh's, against one process.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs ./train_gpt_emu_mpi
dp_random_shard "$TMP/v512.bin" 512 16384
F=(-e L2:C128:NH4:V512 -i "$TMP/v512.bin" -b 4 -t 32 -j '' -g 0 -x 2 -l 1e-3 -d 256 --optimizer muon)
dp_emu_vs_cpu 2 muon_z2 "muon, dp 2 ZeRO-2" "${F[@]}" -z 2
dp_emu_vs_cpu 2 muon_tp2 "muon, tp 2" "${F[@]}" --tp 2
