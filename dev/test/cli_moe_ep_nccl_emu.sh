# dev/test/cli_moe_ep_nccl_emu.sh -- expert parallelism on the GPU build's code path without a GPU:
# train_gpt_emu_mpi (the CUDA kernels on dev/emu, NCCL emulated over MPI) with --ep 2 on 2 processes, so the MoE
# layers' all-to-all takes llmc/comm_nccl.h's grouped ncclSend/ncclRecv (comm_p2p_batch) on the communication
# stream and the compute stream waits for it. d2 with 4 experts top-2, B=1 T=32, 2 steps (the emulator runs about
# 10 s per step): the run exits 0; losses, norms and final weights equal the CPU build's --ep 2 within 1e-5
# (dp_emu_vs_cpu, the argument of dev/test/cli_tp_nccl_emu.sh: the emulated kernels and the CPU backend agree to
# ~1e-6 in fp32); the all-to-all part of the step lines (rows sent, bytes counted) is the CPU build's exactly,
# since both route the same tokens. BF16 build (train_gpt_emu_mpi_bf16: bf16 rows through ncclSend/ncclRecv), the
# same 2 steps: losses equal the fp32 CPU build's within 5e-3 relative (test_gpt.cu's BF16 step-loss tolerance, as
# in dev/test/cli_dp_nccl_emu.sh) and the counted bytes are the rows sent x C x 2 bytes + the count exchanges.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs ./train_gpt_emu_mpi ./train_gpt_emu_mpi_bf16
F=(-e d2 -b 1 -t 16 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 2 --moe-experts 4 --moe-top-k 2 --moe-capacity-factor 1.0
   --moe-z-coef 0.001 --ep 2)
dp_emu_vs_cpu 2 ep2 "MoE --ep 2 (all-to-all by ncclSend/ncclRecv)" "${F[@]}"
a2a() { grep -oE '^step +[0-9]+/2 .*[|] a2a sent [^|]*' "$1" | sed -E 's/[|].*[|] a2a/a2a/'; }
test "$(a2a "$TMP/emu_ep2.log" | wc -l)" -eq 2 && test "$(a2a "$TMP/emu_ep2.log")" = "$(a2a "$TMP/cpu_ep2.log")"
check $? "NCCL path, --ep 2: all-to-all rows and bytes per step as on the CPU build: $(a2a "$TMP/emu_ep2.log" | head -n 1)"
MPIRUN 2 ./train_gpt_emu_mpi_bf16 "${F[@]}" -o "$TMP/emu16" > "$TMP/emu16.log" 2>&1
rc=$?
test $rc -eq 0 && test "$(grep -c '^step' "$TMP/emu16.log")" -eq 2
check $? "NCCL path (emulated), BF16, --ep 2: 2 steps under mpirun (exit $rc)"
out=$(dp_compare_logs "$TMP/cpu_ep2/log.jsonl" "$TMP/emu16/log.jsonl" train loss 5e-3 2)
check $? "NCCL path, BF16, --ep 2: losses vs the fp32 CPU build: $out"
python3 - "$TMP/emu16.log" <<'PY'
import re, sys
lines = re.findall(r"^step +\d+/2 .*\| a2a sent (\d+) B = rows (\d+) x C 128 x 2 B \+ counts (\d+) B", open(sys.argv[1]).read(), re.M)
sys.exit(0 if len(lines) == 2 and all(int(s) == int(r) * 128 * 2 + int(c) for s, r, c in lines) else 1)
PY
check $? "NCCL path, BF16, --ep 2: all-to-all bytes = rows sent x C x 2 B + counts"
