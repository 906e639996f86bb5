# dev/test/cli_offload.sh -- optimizer offload (--offload-optimizer cpu | nvme:DIR, llmc/offload.h) through the real CLI.
# CPU build (train_gpt_cpu): the offloaded update runs the CPU backend's own AdamW element function on the same fp32
# values, chunk by chunk (elementwise: the chunking cannot change a bit), so it must train bit-identically:
# Model L1:C32:NH2 (GPT-2's vocabulary, 1.66M parameters, 2 chunks of the offload), B=2, T=16:
#   - 1 process, ZeRO-0: none vs cpu vs nvme: the same step lines (loss, norm, lr), model and state files;
#   - 2 processes, 2 micro-steps per step (-d 128): ZeRO-1 none vs ZeRO-1 cpu, ZeRO-2 none vs ZeRO-2 nvme: the same
#     step lines and model, and ZeRO-1 cpu's state files equal ZeRO-1 none's; every gradient came down during the
#     last micro-step's backward (the step line's "100% of the gradients down in backward": ZeRO-1 streams each
#     bucket after its reduce-scatter, ZeRO-2 after it is folded into the shard accumulator);
#   - 2 processes, ZeRO-1 with --grad-compress topk:0.01 (buckets decoded after backward, so nothing streams: "0%";
#     the update downloads the gradients chunk by chunk): bit-identical to the same run without offload;
#   - the memory ledger and the offload ledger say "equal" (host state, host buffers, NVMe file size as allocated),
#     and the PCIe bytes counted per step equal the theory (gradients down, parameters up: floatX x real range);
#   - an nvme run killed (SIGKILL, LLMC_OFFLOAD_KILL_AT_STEP) in the middle of step 3's update, after its first chunk
#     was written back, then resumed with -y 1 from its checkpoint of step 2 ends with the same step line 3,
#     model and state as the uninterrupted run (the scratch file is never read by a resume);
#   - bad input is one error line: an unwritable and a missing DIR, too little free space (LLMC_OFFLOAD_FREE_BYTES,
#     the documented test hook for statvfs's figure), a bad value, --offload-params without -z 3 or with a bad value.
# ZeRO-3 with parameter offload (--offload-params cpu, llmc/zero_params.h) and with optimizer offload, d2 (P = 6.87M:
# 3 shards of 2289494 with 2 values of padding), B=1, T=16, 2 steps; the same AdamW on the same values, so bit for bit:
#   - 2 and 3 processes: -z 3 --offload-params cpu, with and without --offload-optimizer cpu, vs -z 3 alone: the same
#     step lines, final model and every rank's state file (with the optimizer offload every gradient streamed down in
#     backward); 3 processes also -z 3 --offload-optimizer cpu (the shard
#     on the device, AdamW on the CPU), 2 processes -z 3 --offload-params cpu --offload-optimizer nvme:DIR;
#   - the memory ledger (device) and the offload ledger (host state, host buffers, NVMe file, host parameter shard)
#     say "equal", and the PCIe bytes counted per step (the gathers' host -> device copies, the update's) equal the
#     ledger's theory on every rank to the byte (--comm-stats lines; rank 0's shard lies inside wte, the last rank's
#     reaches into the layers, so per-layer gathers are counted too);
#   - a checkpoint of step 1 written with --offload-optimizer cpu (the shard on the device) resumed with
#     --offload-params cpu added (offload may change on resume: the weights are read into the host shard, which in
#     this fp32 build is the offload's fp32 weights) continues bit-identically to the straight -z 3 run.
# Emulated GPU build (train_gpt_emu_mpi_bf16, the CUDA kernels on dev/emu; only if built): bf16 gradients down,
# AdamW on the host over the fp32 master weights, stochastic rounding keyed as the CUDA kernel's: losses within
# 5e-3 relative of the same build without offload (test_gpt.cu's BF16 step-loss tolerance), and the final weights
# within one bf16 rounding step (2^-8 relative RMS): the host and the kernel may round fp32 AdamW differently in the
# last bit (pow in double vs powf), which the stochastic bf16 rounding can turn into one bf16 step.
# The same bounds for -z 3 --offload-params cpu --offload-optimizer cpu (NCCL emulated, one process) against ZeRO-1
# without offload: the bf16 shard in host memory, gathered per layer, written in place by the host AdamW (ZeRO-3 on 1
# process does ZeRO-1's arithmetic; the multi-process gathers are checked bit for bit on the CPU build above).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
M=(-e L1:C32:NH2)    # the smallest model of GPT-2's vocabulary: P = 1655264 parameters (1.6M of them wte)
F=("${M[@]}" -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 3 -n 2 -nk 0)
NV="$TMP/nvme"; mkdir -p "$NV"
steps() { grep -E '^step ' "$1" | cut -d'|' -f1-4; }
# every step line's counted PCIe bytes equal the theory printed beside them (and there are $2 such lines)
pcie_ok() { test "$(grep -cE 'offload PCIe ([0-9.]+)\+([0-9.]+) MB \(theory \1\+\2\)' "$1")" -eq "$2"; }
# and every step line says the gradients came down during backward: all of them (or, with $3, that share)
streamed_ok() { test "$(grep -c "update [0-9.]* ms, ${3:-100}% of the gradients down in backward" "$1")" -eq "$2"; }

for off in none cpu "nvme:$NV"; do
    tag=${off%%:*}
    OMP_NUM_THREADS=2 $TRAIN "${F[@]}" -o "$TMP/one_$tag" --offload-optimizer "$off" > "$TMP/one_$tag.log" 2>&1
    check $? "1 process, --offload-optimizer $tag: 3 steps"
done
for tag in cpu nvme; do
    test "$(steps "$TMP/one_none.log")" = "$(steps "$TMP/one_$tag.log")" && \
        cmp -s "$TMP/one_none/model_00000003.bin" "$TMP/one_$tag/model_00000003.bin" && \
        cmp -s "$TMP/one_none/state_00000003_00000.bin" "$TMP/one_$tag/state_00000003_00000.bin"
    check $? "1 process: offload $tag trains bit-identically to no offload (step lines, model, state file)"
    grep -q 'memory ledger.*-> equal' "$TMP/one_$tag.log" && grep -q 'offload ledger.*-> equal' "$TMP/one_$tag.log"
    check $? "1 process, offload $tag: the ledger equals the allocations ($(grep -o 'host state.*-> [a-zA-Z]*' "$TMP/one_$tag.log"))"
    pcie_ok "$TMP/one_$tag.log" 3 && streamed_ok "$TMP/one_$tag.log" 3
    check $? "1 process, offload $tag: PCIe bytes counted = theory on every step, all gradients down in backward ($(grep -o 'offload PCIe[^|]*' "$TMP/one_$tag.log" | head -1))"
done
grep -q 'nvme [0-9.]* MB [0-9.]* GB/s' "$TMP/one_nvme.log" && grep -q '"nvme_gbs":' "$TMP/one_nvme/log.jsonl" && \
    grep -Eq 'optimizer offload: nvme: .*(O_DIRECT|buffered pread/pwrite)' "$TMP/one_nvme.log"
check $? "nvme: the step line and log.jsonl give the throughput; the header says which I/O mode ($(grep -o 'O_DIRECT\|buffered pread/pwrite' "$TMP/one_nvme.log" | head -1))"
test -z "$(ls -A "$NV")"
check $? "nvme: the scratch file is removed when the run ends"

F2=("${M[@]}" -b 2 -t 16 -d 128 -j '' -g 0 -u 2 -l 1e-3 -x 2)
for z in 1 2; do
    MPIRUN 2 $TRAIN "${F2[@]}" -z $z -o "$TMP/two_ref$z" > "$TMP/two_ref$z.log" 2>&1
    check $? "2 processes, 2 micro-steps, ZeRO-$z without offload"
done
for run in "1 cpu" "2 nvme:$NV"; do
    set -- $run
    tag="z$1_${2%%:*}"
    MPIRUN 2 $TRAIN "${F2[@]}" -z $1 --offload-optimizer "$2" -o "$TMP/two_$tag" > "$TMP/two_$tag.log" 2>&1
    rc=$?
    test $rc -eq 0 && test "$(steps "$TMP/two_ref$1.log")" = "$(steps "$TMP/two_$tag.log")" && \
        cmp -s "$TMP/two_ref$1/model_00000002.bin" "$TMP/two_$tag/model_00000002.bin" && \
        grep -q 'offload ledger.*-> equal' "$TMP/two_$tag.log" && pcie_ok "$TMP/two_$tag.log" 2 && \
        streamed_ok "$TMP/two_$tag.log" 2
    check $? "2 processes, 2 micro-steps, ZeRO-$1 --offload-optimizer ${2%%:*}: bit-identical step lines and model, ledger equal, PCIe = theory, all gradients down in the last backward (exit $rc)"
done
cmp -s "$TMP/two_ref1/state_00000002_00000.bin" "$TMP/two_z1_cpu/state_00000002_00000.bin" && \
    cmp -s "$TMP/two_ref1/state_00000002_00001.bin" "$TMP/two_z1_cpu/state_00000002_00001.bin"
check $? "2 processes, ZeRO-1: the offloaded state files equal the device ones"
FC=("${M[@]}" -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 2 -z 1 --grad-compress topk:0.01)
for off in none cpu; do
    MPIRUN 2 $TRAIN "${FC[@]}" --offload-optimizer $off -o "$TMP/topk_$off" > "$TMP/topk_$off.log" 2>&1
    check $? "2 processes, ZeRO-1 --grad-compress topk:0.01 --offload-optimizer $off"
done
test "$(steps "$TMP/topk_none.log")" = "$(steps "$TMP/topk_cpu.log")" && \
    cmp -s "$TMP/topk_none/model_00000002.bin" "$TMP/topk_cpu/model_00000002.bin" && \
    pcie_ok "$TMP/topk_cpu.log" 2 && streamed_ok "$TMP/topk_cpu.log" 2 0
check $? "2 processes, ZeRO-1 top-k: with offload (nothing streams: the update downloads the decoded gradients) bit-identical to without, PCIe = theory"

K="$TMP/killed"
# (in a subshell whose stderr takes the shell's own "Killed" notice)
(LLMC_OFFLOAD_KILL_AT_STEP=3 OMP_NUM_THREADS=2 $TRAIN "${F[@]}" -o "$K" --offload-optimizer "nvme:$NV" > "$TMP/k1.log" 2>&1
 exit $?) 2> /dev/null
rc=$?
test $rc -eq 137 && test -f "$K/DONE_00000002" && ! test -e "$K/DONE_00000003" && test -f "$NV/offload_optimizer_rank00000.bin"
check $? "nvme run killed (SIGKILL) inside step 3's update: exit $rc, checkpoint 2 complete, the scratch file left half-updated"
OMP_NUM_THREADS=2 $TRAIN "${F[@]}" -o "$K" --offload-optimizer "nvme:$NV" -y 1 > "$TMP/k2.log" 2>&1
check $? "the killed run resumes with -y 1"
grep -q 'resume: continuing from step 2' "$TMP/k2.log" && \
    test "$(steps "$TMP/one_none.log" | tail -1)" = "$(steps "$TMP/k2.log")" && \
    cmp -s "$TMP/one_none/model_00000003.bin" "$K/model_00000003.bin" && \
    cmp -s "$TMP/one_none/state_00000003_00000.bin" "$K/state_00000003_00000.bin"
check $? "killed + resumed = uninterrupted: step line 3, model and state file bit-identical"

E=("${M[@]}" -b 2 -t 16 -j '' -g 0 -x 1)
if [ "$(id -u)" -eq 0 ]; then RO=/sys; else RO="$TMP/ro"; mkdir -p "$RO"; chmod 500 "$RO"; fi
expect_error "is not writable" "--offload-optimizer nvme: an unwritable directory" -- $TRAIN "${E[@]}" --offload-optimizer "nvme:$RO"
expect_error "does not exist" "--offload-optimizer nvme: a missing directory" -- $TRAIN "${E[@]}" --offload-optimizer "nvme:$TMP/none/x"
expect_error "needs 25165824 bytes" "--offload-optimizer nvme: too little free space for the ledger's bytes" -- \
    env LLMC_OFFLOAD_FREE_BYTES=1000000 $TRAIN "${E[@]}" --offload-optimizer "nvme:$NV"
expect_error "expected none, cpu or nvme:DIR" "--offload-optimizer with a bad value" -- $TRAIN "${E[@]}" --offload-optimizer disk
expect_error "it needs -z 3" "--offload-params cpu with -z 2" -- $TRAIN "${E[@]}" -z 2 --offload-params cpu
expect_error "expected none or cpu" "--offload-params with a bad value" -- $TRAIN "${E[@]}" -z 3 --offload-params gpu

# ZeRO-3 with parameter and optimizer offload (see the header)
Z=(-e d2 -b 1 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 2 -z 3 --comm-stats 1)
# every rank's --comm-stats lines: its own PCIe bytes counted = theory, exactly (N ranks x 2 steps)
rank_pcie_ok() { test "$(grep -cE '\| offload PCIe ([0-9]+)\+([0-9]+) bytes \(theory \1\+\2\)' "$1")" -eq $((2 * $2)); }
same_run() { # REF RUN N: the same step lines, final model and every rank's state file
    test "$(steps "$1.log")" = "$(steps "$2.log")" && cmp -s "$1/model_00000002.bin" "$2/model_00000002.bin" || return 1
    for ((q = 0; q < $3; q++)); do cmp -s "$1/state_00000002_0000$q.bin" "$2/state_00000002_0000$q.bin" || return 1; done
}
for N in 2 3; do
    MPIRUN $N $TRAIN "${Z[@]}" -o "$TMP/z3_${N}_ref" > "$TMP/z3_${N}_ref.log" 2>&1
    check $? "$N processes, -z 3 without offload (d2, 2 steps)"
    extra="o:--offload-optimizer cpu"; [ $N -eq 2 ] && extra="pn:--offload-params cpu --offload-optimizer nvme:$NV"
    for run in "p:--offload-params cpu" "po:--offload-params cpu --offload-optimizer cpu" "$extra"; do
        tag=${run%%:*}; args=${run#*:}
        MPIRUN $N $TRAIN "${Z[@]}" $args -o "$TMP/z3_${N}_$tag" > "$TMP/z3_${N}_$tag.log" 2>&1
        rc=$?
        test $rc -eq 0 && same_run "$TMP/z3_${N}_ref" "$TMP/z3_${N}_$tag" $N
        check $? "$N processes, -z 3 $args: step lines, model and $N state files bit-identical to -z 3 alone (exit $rc)"
        grep -q '^memory ledger.*-> equal' "$TMP/z3_${N}_$tag.log" && grep -q '^offload ledger.*-> equal' "$TMP/z3_${N}_$tag.log" && \
            pcie_ok "$TMP/z3_${N}_$tag.log" 2 && rank_pcie_ok "$TMP/z3_${N}_$tag.log" $N && \
            { [ $tag = p ] || streamed_ok "$TMP/z3_${N}_$tag.log" 2; }
        check $? "$N processes, -z 3 $args: ledgers equal, gradients streamed in backward (optimizer offload) ($(grep -o 'host parameters [0-9]*' "$TMP/z3_${N}_$tag.log" | head -1)), PCIe counted = theory on every rank, to the byte ($(grep -o 'rank [0-9] step 2 .*offload PCIe.*' "$TMP/z3_${N}_$tag.log" | sed -E 's/ sent.*offload PCIe/:/' | tr '\n' ' '))"
    done
done
python3 - "$TMP/z3_2_ref.log" "$TMP/z3_2_p.log" "$TMP/z3_2_po.log" <<'PY'
import re, sys
P, N, pb = 6868480, 2, 4
S = -(-P // N)
dev = [int(re.search(r"^memory ledger .*?: parameters (\d+)", open(f).read(), re.M).group(1)) for f in sys.argv[1:]]
host = [int(x) for x in (re.search(r"host parameters (\d+)", open(f).read()).group(1) for f in sys.argv[2:])]
pcie = [re.search(r"offload PCIe ([0-9.]+)\+([0-9.]+) MB", open(f).read()).groups() for f in sys.argv[2:]]
# 2 passes x own part up, the update's writes down (+ its reads up without master weights); with the CPU AdamW the
# gradients down and nothing up; the fp32 shard of --offload-optimizer cpu is its fp32 weights (no extra host bytes)
want_pcie = [("%.2f" % (S * pb / 1e6), "%.2f" % (3 * S * pb / 1e6)), ("%.2f" % (S * pb / 1e6), "%.2f" % (2 * S * pb / 1e6))]
ok = dev[0] - dev[1] == S * pb and dev[1] == dev[2] and host == [S * pb, 0] and [tuple(x) for x in pcie] == want_pcie
print("device parameter bytes %s (the shard S = %d leaves the device), host parameter bytes %s, PCIe MB %s (want %s)"
      % (dev, S, host, pcie, want_pcie))
sys.exit(0 if ok else 1)
PY
check $? "2 processes: what --offload-params cpu moves off the device and over PCIe, against S = ceil(P/N)"
R="$TMP/z3_resume"
MPIRUN 2 $TRAIN "${Z[@]}" --offload-optimizer cpu --exit-after-steps 1 -o "$R" > "$R.a.log" 2>&1 && \
    MPIRUN 2 $TRAIN "${Z[@]}" --offload-params cpu --offload-optimizer cpu -y 1 -o "$R" > "$R.log" 2>&1 && \
    grep -q 'resume: continuing from step 1' "$R.log" && test "$(steps "$TMP/z3_2_ref.log" | tail -1)" = "$(steps "$R.log")" && \
    cmp -s "$TMP/z3_2_ref/model_00000002.bin" "$R/model_00000002.bin" && \
    cmp -s "$TMP/z3_2_ref/state_00000002_00000.bin" "$R/state_00000002_00000.bin" && \
    cmp -s "$TMP/z3_2_ref/state_00000002_00001.bin" "$R/state_00000002_00001.bin"
check $? "2 processes: a -z 3 --offload-optimizer cpu checkpoint of step 1 resumed with --offload-params cpu added = the straight -z 3 run (step line, model, state files)"

out=$($TRAIN -e d12 --plan 1 --gpus 8 -z 1 --offload-optimizer cpu 2>&1)
echo "$out" | grep -q 'plan offload (cpu): optimizer state' && ! echo "$out" | grep -q 'theory: not implemented'
check $? "--plan with --offload-optimizer cpu: the offload row, not marked as theory ($(echo "$out" | grep -o 'plan offload.*' | cut -c1-120))"
a=$($TRAIN -e d12 --plan 1 --gpus 8 -z 3 2>&1 | grep -oE '^plan stage 0 bytes per GPU: parameters [0-9]+' | grep -oE '[0-9]+$')
out=$($TRAIN -e d12 --plan 1 --gpus 8 -z 3 --offload-params cpu 2>&1)
b=$(echo "$out" | grep -oE '^plan stage 0 bytes per GPU: parameters [0-9]+' | grep -oE '[0-9]+$')
# d12: P = 124475904 parameters, S = P/8 of them per GPU, 2 bytes each (the plan's bf16)
test -n "$a" && test -n "$b" && test $((a - b)) -eq $((124475904 / 8 * 2)) && \
    echo "$out" | grep -q '^plan parameter offload (cpu)' && ! echo "$out" | grep -q 'theory: not implemented'
check $? "--plan -z 3 --offload-params cpu: the shard (S = P/8 x 2 bytes) leaves the device's parameters ($a -> $b bytes), its row, no theory mark"
expect_error "it needs -z 3" "--plan with --offload-params cpu and -z 1" -- $TRAIN -e d12 --plan 1 --gpus 8 -z 1 --offload-params cpu

EMU16=./train_gpt_emu_mpi_bf16
# bf16 model files A B: RMS(wA - wB) / RMS(wA) within one bf16 rounding step, 2^-8 (prints the numbers)
bf16_weights_close() {
    python3 - "$1" "$2" <<'PY'
import sys, numpy as np
a, b = (np.fromfile(p, dtype=np.uint16)[512:].astype(np.uint32) << 16 for p in sys.argv[1:3])
a, b = a.view(np.float32), b.view(np.float32)
rel = np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(a ** 2))
print("RMS(dw)/RMS(w) = %.3g (bound 2^-8 = %.3g), %.4f%% of the weights differ" % (rel, 2.0 ** -8, 100 * np.mean(a != b)))
sys.exit(0 if rel <= 2.0 ** -8 else 1)
PY
}
if [ -x "$EMU16" ]; then
    FE=("${M[@]}" -b 1 -t 8 -j '' -g 0 -u 2 -l 1e-3 -x 2 -z 1)
    MPIRUN 1 $EMU16 "${FE[@]}" -o "$TMP/emu_ref" > "$TMP/emu_ref.log" 2>&1
    check $? "emulated GPU build (bf16), ZeRO-1 without offload"
    MPIRUN 1 $EMU16 "${FE[@]}" --offload-optimizer cpu -o "$TMP/emu_off" > "$TMP/emu_off.log" 2>&1
    rc=$?
    test $rc -eq 0 && grep -q 'offload ledger.*-> equal' "$TMP/emu_off.log" && \
        pcie_ok "$TMP/emu_off.log" 2 && streamed_ok "$TMP/emu_off.log" 2
    check $? "emulated GPU build (bf16), --offload-optimizer cpu: runs (exit $rc), ledger equal, PCIe bytes = theory, gradients streamed in backward ($(grep -o 'offload PCIe[^|]*' "$TMP/emu_off.log" | head -1))"
    out=$(dp_compare_logs "$TMP/emu_ref/log.jsonl" "$TMP/emu_off/log.jsonl" train loss 5e-3 2)
    check $? "emulated GPU build (bf16): offload losses vs the device update: $out"
    out=$(bf16_weights_close "$TMP/emu_ref/model_00000002.bin" "$TMP/emu_off/model_00000002.bin")
    check $? "emulated GPU build (bf16): offload weights vs the device update: $out"
    # ZeRO-3 (one process: NCCL emulated, every gather copies the whole unit host -> device) with the bf16 shard in
    # host memory and the CPU AdamW over the fp32 master weights writing it in place, vs ZeRO-1 on the device above
    MPIRUN 1 $EMU16 "${FE[@]}" -z 3 --offload-params cpu --offload-optimizer cpu -o "$TMP/emu_z3p" > "$TMP/emu_z3p.log" 2>&1
    rc=$?
    test $rc -eq 0 && grep -q '^memory ledger.*-> equal' "$TMP/emu_z3p.log" && grep -q 'offload ledger.*-> equal' "$TMP/emu_z3p.log" && \
        pcie_ok "$TMP/emu_z3p.log" 2 && streamed_ok "$TMP/emu_z3p.log" 2
    check $? "emulated GPU build (bf16), -z 3 --offload-params cpu --offload-optimizer cpu: runs (exit $rc), ledgers equal, PCIe bytes = theory ($(grep -o 'offload PCIe[^|]*' "$TMP/emu_z3p.log" | head -1))"
    out=$(dp_compare_logs "$TMP/emu_ref/log.jsonl" "$TMP/emu_z3p/log.jsonl" train loss 5e-3 2)
    check $? "emulated GPU build (bf16), -z 3 with parameter + optimizer offload: losses vs ZeRO-1 on the device: $out"
    out=$(bf16_weights_close "$TMP/emu_ref/model_00000002.bin" "$TMP/emu_z3p/model_00000002.bin")
    check $? "emulated GPU build (bf16), -z 3 with parameter + optimizer offload: weights vs ZeRO-1 on the device: $out"
else
    echo "# $EMU16 not built (make train_gpt_emu_mpi_bf16): the emulated GPU check is left out"
fi
