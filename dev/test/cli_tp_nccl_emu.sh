# dev/test/cli_tp_nccl_emu.sh -- tensor and sequence parallelism on the GPU build's code path without a GPU:
# train_gpt_emu_mpi (the CUDA kernels on the CPU execution layer, FP32) and train_gpt_emu_mpi_bf16 (BF16), with
# NCCL's API emulated over MPI, so the f/g operators (llmc/tensor_parallel.h), the vocabulary-sharded encoder,
# the vocabulary-parallel cross-entropy kernels and sequence parallelism's all-gathers / reduce-scatters run
# through llmc/comm_nccl.h on its communication stream, as on GPUs. d2 (B=2, T=32: none of the properties
# below depends on the batch size, and the emulator's time grows with it), 2 steps. Tolerances: dp_lib.sh and
# cli_dp_nccl_emu.sh.
#   - FP32, tp 2, tp 2 with sequence parallelism (2 processes) and tp 2 x dp 2 with sequence parallelism and
#     ZeRO-1, and tp 2 x dp 2 with ZeRO-3 (each tp rank's part gathered layer by layer over dp through the
#     NCCL path's all-gathers; 4 processes): every run exits 0 after 2 steps; losses and gradient norms equal the CPU build's
#     under mpirun with the same flags within 1e-5 relative (another implementation of every op, each agreeing
#     to ~1e-6 in fp32; test_gpt.cu's fp32 fixture tolerance), the final weights' RMS difference within 1e-5 of
#     their RMS; the bytes each tensor-parallel group moves per step equal the CPU build's (both count the ring
#     model of every collective, so the NCCL path issues the same collectives on the same sizes), per rank within
#     64 bytes (the NCCL counters model a host fp64 all-reduce as twice its reduce-scatter, which for a count not
#     divisible by tp puts a few values' bytes on another rank than the MPI ring does: the same group total);
#     Also experts (4, top-2, every second block, capacity 1.25) at tp 2 with sequence parallelism (expert tensor
#     parallelism: the gate gradients' fp32 all-reduce runs through the NCCL path too);
#   - BF16, tp 2, tp 2 with sequence parallelism, experts at tp 2, and tp 2 x dp 2 with ZeRO-3: losses equal the fp32 CPU build on one process within 5e-3
#     relative (test_gpt.cu's BF16 step-loss tolerance: bf16 activations and gradients, fp32 master weights).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
dp_require_programs ./train_gpt_emu_mpi ./train_gpt_emu_mpi_bf16
F=(-e d2 -b 2 -t 32 -j '' -g 0 -x 2 -l 1e-3 --comm-stats 1)

MOE=(--moe-experts 4 --moe-top-k 2 --moe-every 2 --moe-capacity-factor 1.25)
for setup in "2 --tp 2" "2 --tp 2 --sequence-parallel 1" "4 --tp 2 --sequence-parallel 1 -z 1" "4 --tp 2 -z 3" \
             "2 --tp 2 --sequence-parallel 1 ${MOE[*]}"; do
    set -- $setup
    N=$1; shift
    name="n$N$(echo "$@" | tr -d ' -')"
    E="$TMP/emu_$name"; C="$TMP/cpu_$name"
    dp_emu_vs_cpu $N "$name" "$*" "${F[@]}" "$@" -d $((64 * N / 2))
    be=$(dp_step2_bytes "$E.log" tp); bc=$(dp_step2_bytes "$C.log" tp)
    python3 - "$be" "$bc" <<'PY'
import sys
parse = lambda s: {k: (int(a), int(b)) for k, a, b in (w.split(":") for w in s.split())}
e, c = parse(sys.argv[1]), parse(sys.argv[2])
groups = {k.split(".")[0] for k in c}
total = lambda d, g: sum(a + b for k, (a, b) in d.items() if k.split(".")[0] == g)
ok = len(e) == len(c) > 0 and e.keys() == c.keys() and all(total(e, g) == total(c, g) for g in groups)
ok = ok and all(abs(e[k][0] - c[k][0]) <= 64 and abs(e[k][1] - c[k][1]) <= 64 for k in c)
sys.exit(0 if ok else 1)
PY
    check $? "NCCL path, FP32, $N processes, $*: tp bytes per step equal the CPU build's per group, per rank within 64 (dp.tp:sent:recv $be vs $bc)"
done

$TRAIN "${F[@]}" -d 64 -o "$TMP/cpu_ref" > "$TMP/cpu_ref.log" 2>&1
for sp in 0 1; do
    E="$TMP/bf16_sp$sp"
    MPIRUN 2 ./train_gpt_emu_mpi_bf16 "${F[@]}" --tp 2 --sequence-parallel $sp -d 64 -o "$E" > "$E.log" 2>&1
    rc=$?
    test $rc -eq 0 && test "$(grep -c '^step' "$E.log")" -eq 2
    check $? "NCCL path (emulated), BF16, tp 2, sequence parallel $sp: 2 steps under mpirun (exit $rc)"
    out=$(dp_compare_logs "$TMP/cpu_ref/log.jsonl" "$E/log.jsonl" train loss 5e-3 2)
    check $? "NCCL path, BF16, tp 2, sequence parallel $sp: losses vs the fp32 CPU build on one process: $out"
done

E="$TMP/bf16_moe"
$TRAIN "${F[@]}" "${MOE[@]}" -d 64 -o "$TMP/cpu_moe" > "$TMP/cpu_moe.log" 2>&1
MPIRUN 2 ./train_gpt_emu_mpi_bf16 "${F[@]}" "${MOE[@]}" --tp 2 -d 64 -o "$E" > "$E.log" 2>&1
rc=$?
test $rc -eq 0 && test "$(grep -c '^step' "$E.log")" -eq 2
check $? "NCCL path (emulated), BF16, experts at tp 2: 2 steps under mpirun (exit $rc)"
out=$(dp_compare_logs "$TMP/cpu_moe/log.jsonl" "$E/log.jsonl" train loss 5e-3 2)
check $? "NCCL path, BF16, experts at tp 2: losses vs the fp32 CPU build on one process: $out"

E="$TMP/bf16_z3"
$TRAIN "${F[@]}" -d 128 -o "$TMP/cpu_ref128" > "$TMP/cpu_ref128.log" 2>&1
MPIRUN 4 ./train_gpt_emu_mpi_bf16 "${F[@]}" --tp 2 -z 3 -d 128 -o "$E" > "$E.log" 2>&1
rc=$?
test $rc -eq 0 && test "$(grep -c '^step' "$E.log")" -eq 2
check $? "NCCL path (emulated), BF16, tp 2 x dp 2 -z 3: 2 steps under mpirun (exit $rc)"
out=$(dp_compare_logs "$TMP/cpu_ref128/log.jsonl" "$E/log.jsonl" train loss 5e-3 2)
check $? "NCCL path, BF16, tp 2 x dp 2 -z 3: losses vs the fp32 CPU build on one process: $out"
