#!/usr/bin/env bash
# scripts/tp_gpu_check.sh -- tensor-parallel speed on one node of 8 GPUs (H100/H200), for the first run on such a
# machine (nothing here has run on GPUs yet; llmc/README.md, "Tensor parallelism"). Under 10 minutes:
#   1. builds train_gpt (BF16, sm_90) with MPI bootstrap (make CUDA_MPI=1) if mpicc exists, else the default build
#      started by mpirun through the environment (OMPI_COMM_WORLD_RANK/SIZE);
#   2. for d24 (350M) and d36 (774M), T = 1024, 8 processes: tp = 1, 2, 4, 8 (the rest data parallel, ZeRO-1), a few
#      steps each after a warm-up: the median tokens/s, MFU (llmc/mfu.h: (6N + 6LCT) FLOPs per token against the
#      device's dense BF16 peak), and the parallel efficiency against tp = 1 (tokens/s at tp = k over tokens/s at
#      tp = 1: the whole cost of splitting the blocks: the tp collectives that the compute does not hide, and the
#      smaller GEMMs), plus the tensor-parallel bytes each process moves per step (--comm-stats 1, the ring model)
#      and the fraction of the step's wall time spent in tensor-parallel collectives (--comm-stats 1 times each
#      one alone: the GPU drains before it and the host waits for it, so these runs give up the overlap of
#      queued work with the collectives, and their tokens/s is a slight underestimate of a run without the flag);
#   3. pipeline rows: d24, 8 processes, pp = 2 and 4 (1f1b, tp 1, the rest data parallel with ZeRO-1), m = PP_M
#      micro-batches of B = BASE_B per step: tokens/s, MFU, and the measured bubble (the step line's: every step is
#      timed, with a device synchronisation per action) next to the theory (p-1)/(m+p-1);
#   4. prints the tables (also to $OUT/tp_gpu_check.txt when OUT is set).
# The micro-batch per process keeps the tokens per data-parallel rank the same for every tp (B = BASE_B * tp, so
# each tp group processes the same B*T as one GPU at tp = 1 and the optimizer step stays the same size).
# Usage: bash scripts/tp_gpu_check.sh   (env: NGPU=8 STEPS=12 BASE_B=4 MODELS="d24 d36" TPS="1 2 4 8" PPS="2 4" PP_M=8
#        BUDGET=540)
set -u
cd "$(dirname "$0")/.." || exit 2
NGPU=${NGPU:-$(nvidia-smi -L 2> /dev/null | wc -l)}
STEPS=${STEPS:-12}
BASE_B=${BASE_B:-4}
MODELS=${MODELS:-"d24 d36"}
TPS=${TPS:-"1 2 4 8"}
PPS=${PPS:-"2 4"}
PP_M=${PP_M:-8}
BUDGET=${BUDGET:-540}
OUTF=${OUT:-.}/tp_gpu_check.txt
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
t0=$SECONDS
if [ "$NGPU" -lt 2 ]; then
    echo "error: tp_gpu_check needs a node with several GPUs (nvidia-smi lists $NGPU)" >&2
    exit 1
fi
if command -v mpicc > /dev/null 2>&1; then BUILD=(make -j8 train_gpt GPU_ARCH=90 CUDA_MPI=1); else BUILD=(make -j8 train_gpt GPU_ARCH=90); fi
echo "[tp_gpu_check] building: ${BUILD[*]}"
"${BUILD[@]}" > "$WORK/build.log" 2>&1 || { echo "error: build failed: $(grep -m1 ' error' "$WORK/build.log")" >&2; exit 1; }
printf '%-6s %-4s %-6s %-4s %12s %8s %10s %18s %12s\n' model tp dp B "tok/s" MFU efficiency "tp bytes/step" "tp coll %" | tee "$OUTF"
for model in $MODELS; do
    base=""
    for tp in $TPS; do
        [ $((NGPU % tp)) -eq 0 ] || continue
        left=$((BUDGET - (SECONDS - t0)))
        if [ "$left" -lt 60 ]; then echo "[tp_gpu_check] budget spent, skipping $model tp $tp" | tee -a "$OUTF"; continue; fi
        B=$((BASE_B * tp))
        log="$WORK/$model.tp$tp.log"
        timeout -k 5 $((left - 20)) mpirun --allow-run-as-root --bind-to none -np "$NGPU" ./train_gpt -e "$model" -b "$B" \
            -t 1024 -x "$STEPS" -u 2 -j '' -g 0 -v 0 --tp "$tp" -z 1 --comm-stats 1 > "$log" 2>&1
        rc=$?
        read -r toks mfu <<< "$(python3 - "$log" <<'PY'
import re, statistics, sys
t = open(sys.argv[1]).read()
rows = [(float(a), b) for a, b in re.findall(r"\| ([0-9.]+) tok/s(?: \| MFU ([0-9.]+)%)?", t)][2:]  # after warm-up
if not rows: print("nan nan"); sys.exit()
print("%.0f %s" % (statistics.median(r[0] for r in rows), statistics.median(float(r[1]) for r in rows) if rows[0][1] else "nan"))
PY
)"
        tpbytes=$(grep -o "tp rank 0 sent [0-9]*" "$log" | tail -1 | awk '{print $5}')
        tpfrac=$(python3 - "$log" <<'PY'
import re, statistics, sys
t = open(sys.argv[1]).read()
coll = [float(x) for x in re.findall(r"^comm: rank 0 step \d+ .*\| tp rank 0 .* calls, ([0-9.]+) ms", t, re.M)]
step = [float(x) for x in re.findall(r"^step .*\| ([0-9.]+) ms \|", t, re.M)]
pairs = [c / s for c, s in zip(coll, step) if s > 0][2:]  # after warm-up
print("%.1f" % (100 * statistics.median(pairs)) if pairs else "-")
PY
)
        [ "$tp" = 1 ] && base=$toks
        eff=$(python3 -c "import sys; a,b=sys.argv[1],sys.argv[2]; print('%.2f' % (float(a)/float(b)) if b not in ('','nan') and a != 'nan' else '-')" "$toks" "${base:-}")
        [ $rc -ne 0 ] && toks="exit $rc"
        printf '%-6s %-4s %-6s %-4s %12s %7s%% %10s %18s %12s\n' "$model" "$tp" $((NGPU / tp)) "$B" "$toks" "$mfu" "$eff" "${tpbytes:--}" "$tpfrac" | tee -a "$OUTF"
    done
done
printf '\n%-6s %-4s %-4s %-4s %-4s %12s %8s %14s %14s\n' model pp tp dp m "tok/s" MFU "bubble meas." "bubble theory" | tee -a "$OUTF"
for pp in $PPS; do
    [ $((NGPU % pp)) -eq 0 ] || continue
    left=$((BUDGET - (SECONDS - t0)))
    if [ "$left" -lt 60 ]; then echo "[tp_gpu_check] budget spent, skipping d24 pp $pp" | tee -a "$OUTF"; continue; fi
    dp=$((NGPU / pp))
    log="$WORK/d24.pp$pp.log"
    timeout -k 5 $((left - 20)) mpirun --allow-run-as-root --bind-to none -np "$NGPU" ./train_gpt -e d24 -b "$BASE_B" \
        -t 1024 -d $((BASE_B * 1024 * dp * PP_M)) -x "$STEPS" -u 2 -j '' -g 0 -v 0 --pp "$pp" -z 1 > "$log" 2>&1
    rc=$?
    read -r toks mfu bub <<< "$(python3 - "$log" <<'PY'
import re, statistics, sys
t = open(sys.argv[1]).read()
rows = [(float(a), b, float(c)) for a, b, c in re.findall(r"\| ([0-9.]+) tok/s(?: \| MFU ([0-9.]+)%)? \| bubble ([0-9.]+)%", t)][2:]
if not rows: print("nan nan nan"); sys.exit()
med = lambda k: statistics.median(r[k] for r in rows)
print("%.0f %s %.1f%%" % (med(0), "%.1f" % statistics.median(float(r[1]) for r in rows) if rows[0][1] else "nan", med(2)))
PY
)"
    theory=$(python3 -c "import sys; p, m = int(sys.argv[1]), int(sys.argv[2]); print('%.1f%%' % (100 * (p - 1) / (m + p - 1)))" "$pp" "$PP_M")
    [ $rc -ne 0 ] && toks="exit $rc"
    printf '%-6s %-4s %-4s %-4s %-4s %12s %7s%% %14s %14s\n' d24 "$pp" 1 "$dp" "$PP_M" "$toks" "$mfu" "$bub" "$theory" | tee -a "$OUTF"
done
echo "[tp_gpu_check] done in $((SECONDS - t0)) s; efficiency = tokens/s at tp over tokens/s at tp 1 (same tokens per step)"
