#!/usr/bin/env bash
# dev/bench/cpu_matmul_auto.sh -- does --cpu-matmul auto pick the faster path on this machine? (a benchmark, not a test)
# Runs the default model (d4, B=16, T=64, or the given ones) with --cpu-matmul auto, fp32 and bf16 (bf16 only on CPUs
# with AVX512_BF16; elsewhere it is refused) one after the other, ROUNDS times, and prints auto's pick and its two
# probe times (llmc/cpu/matmul_auto.h: one GEMM of the MLP's shape per path) beside the median ms/step of the fp32 and
# bf16 runs (steps after the first two); the last column says whether the pick is the path with the fewer ms/step.
# Usage: bash dev/bench/cpu_matmul_auto.sh [steps] [rounds] [model B T]   (defaults 6, 1, d4 16 64; env OMP_NUM_THREADS
#        pins the thread count)
set -eu
cd "$(dirname "$0")/../.."
STEPS=${1:-6}
ROUNDS=${2:-1}
MODEL=${3:-d4}
B=${4:-16}
T=${5:-64}
make -s train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median_ms() { python3 -c "
import json,sys,statistics
v=[json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"kind\":\"train\"' in l][2:]
print('%.1f' % statistics.median(v) if v else 'nan')" "$1"; }
printf '%-5s | %-4s | %13s | %13s | %22s | %13s | %13s | %13s | %s\n' round "auto" "probe fp32 ms" "probe bf16 ms" \
    "probe shape" "auto ms/step" "fp32 ms/step" "bf16 ms/step" "pick is faster per step"
for r in $(seq 1 "$ROUNDS"); do
    for m in auto fp32 bf16; do
        out="$TMP/$m.$r"
        if ./train_gpt_cpu -e "$MODEL" -b "$B" -t "$T" -x "$STEPS" -j '' -g 0 --cpu-matmul "$m" -o "$out" > "$out.txt" 2>&1; then
            echo "$(median_ms "$out/log.jsonl")" > "$out.ms"
        else
            echo "refused" > "$out.ms" # bf16 on a CPU without AVX512_BF16 (the error line is in $out.txt)
        fi
    done
    head=$(grep '^| precision ' "$TMP/auto.$r.txt")
    read -r pick tf tb shape <<< "$(echo "$head" | sed -n -E \
        's/.*auto picked (fp32|bf16): fp32 ([0-9.]+) ms, bf16 ([0-9.]+|n\/a).* for a (\([0-9x]+\)x\([0-9x]+\)) GEMM.*/\1 \2 \3 \4/p')"
    f=$(cat "$TMP/fp32.$r.ms"); b=$(cat "$TMP/bf16.$r.ms")
    verdict=$(python3 -c "
import sys
p, f, b = sys.argv[1], sys.argv[2], sys.argv[3]
try: bf = float(b)
except ValueError: print('yes (bf16 cannot run here)' if p == 'fp32' else 'NO: bf16 picked but it does not run'); sys.exit()
fast = 'bf16' if bf < float(f) else 'fp32'
print('yes' if p == fast else 'no (%s is faster per step)' % fast)" "$pick" "$f" "$b")
    printf '%-5s | %-4s | %13s | %13s | %22s | %13s | %13s | %13s | %s\n' "$r" "$pick" "$tf" "$tb" "$shape" \
        "$(cat "$TMP/auto.$r.ms")" "$f" "$b" "$verdict"
done
echo "model $MODEL B=$B T=$T, $STEPS steps per run, ${OMP_NUM_THREADS:-$(nproc)} threads; $(grep -m1 'model name' /proc/cpuinfo | \
    sed 's/.*: //'), AVX512_BF16: $(grep -q -w avx512_bf16 /proc/cpuinfo && echo yes || echo no)"
