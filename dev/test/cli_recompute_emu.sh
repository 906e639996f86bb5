#!/usr/bin/env bash
# dev/test/cli_recompute_emu.sh -- activation checkpointing (-r 3 --recompute-every k) on the GPU build's code path
# without a GPU: train_gpt_emu_mpi (the CUDA kernels on the CPU execution layer, FP32) and train_gpt_emu_mpi_bf16
# (BF16), one process, the 4-layer model of dev/test/cli_recompute.sh (L4:C64:NH4:V512, a shard of random ids < 512):
#   - FP32, k = 1 and BF16, k = 3 (segments of 3 and 1 layers): 2 steps whose losses and gradient norms are
#     bit-identical to -r 0 of the same binary (the recompute launches the same kernels on the same inputs), and the
#     memory ledger equals the allocation; the same for FP32, k = 1 with experts in blocks 1 and 3 (capacity 1.0:
#     tokens dropped), whose MoE kernels run again in the recompute.
# About 20 s on 2 cores (the emulator runs each kernel launch on host threads).
source "$(dirname "$0")/dp_lib.sh"
dp_require_programs ./train_gpt_emu_mpi ./train_gpt_emu_mpi_bf16

dp_random_shard "$TMP/v512.bin" 512
R=(-e L4:C64:NH4:V512 -i "$TMP/v512.bin" -j '' -g 0 -b 2 -t 32 -u 1 -l 1e-3 -x 2)

MOE=(-e L4:C64:NH4:V512:E4:K2 --moe-every 2 --moe-capacity-factor 1.0)
for run in "./train_gpt_emu_mpi 1" "./train_gpt_emu_mpi_bf16 3" "./train_gpt_emu_mpi 1 moe"; do
    set -- $run
    bin=$1; k=$2; name=$(basename "$bin")${3:+_$3}
    X=(); [ -n "${3:-}" ] && X=("${MOE[@]}")
    "$bin" "${R[@]}" "${X[@]}" -r 0 > "$TMP/${name}_r0.txt" 2>&1
    "$bin" "${R[@]}" "${X[@]}" -r 3 --recompute-every "$k" > "$TMP/${name}_k.txt" 2>&1
    rc=$?
    test $rc -eq 0 && test "$(dp_step_lines "$TMP/${name}_r0.txt" | grep -c '')" -eq 2 && \
        dp_step_lines "$TMP/${name}_k.txt" | cmp -s - <(dp_step_lines "$TMP/${name}_r0.txt")
    check $? "$name (emulated GPU build): -r 3 --recompute-every $k bit-identical to -r 0 over 2 steps (exit $rc; $(dp_step_lines "$TMP/${name}_k.txt" | tail -n 1 | tr -s ' '))"
    grep -qE '^memory ledger .* -> equal$' "$TMP/${name}_k.txt"
    check $? "$name -r 3 --recompute-every $k: the memory ledger equals the allocation ($(grep -o 'activations [0-9]*;' "$TMP/${name}_k.txt"))"
done
