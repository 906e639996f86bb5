#!/usr/bin/env bash
# dev/bench/cpu_step.sh -- CPU training-step benchmark (a benchmark, not a test): ms/step and tokens/s of
# ./train_gpt_cpu (OpenBLAS fp32 matmuls, blocked attention), of ./train_gpt_cpu --cpu-matmul bf16 (AVX512_BF16
# matmuls; skipped on CPUs without it) and of ./train_gpt_cpu_naive (the same trainer with matmul and attention
# as plain OpenMP loops, like llm.c's train_gpt2.c), for GPT-2 124M (d12, B=4, T=64) and the small model d4 (B=8,
# T=64: the default until 2026-12-01). The three runs of a config are interleaved: ROUNDS rounds of (fp32, bf16,
# naive), one after the other, so each ratio compares runs of the same minutes on a machine whose load may drift. Per run the
# median ms/step over the steps after the first two; per config the median over the rounds, and each round's
# naive/ours ratios.
# Usage: bash dev/bench/cpu_step.sh [steps] [rounds] [configs]   (defaults 8, 1, "d12:4:64 d4:8:64";
#        env OMP_NUM_THREADS pins the thread count)
set -eu
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
ROUNDS=${2:-1}
CONFIGS=${3:-"d12:4:64 d4:8:64"}
make -s train_gpt_cpu train_gpt_cpu_naive
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
BF16=1
./train_gpt_cpu --cpu-matmul bf16 --dry-run 1 -j '' -g 0 > /dev/null 2>&1 || BF16=0
median_ms() { python3 -c "
import json,sys,statistics
v=[json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"kind\":\"train\"' in l][2:]
print('%.1f' % statistics.median(v))" "$1"; }
printf '%-18s | %-7s | %-5s | %12s | %12s | %12s | %10s | %10s\n' "config" "threads" "round" "fp32 ms/step" \
    "bf16 ms/step" "naive ms/step" "naive/fp32" "naive/bf16"
for cfg in $CONFIGS; do
    IFS=: read -r model B T <<< "$cfg"
    : > "$TMP/rows"
    for r in $(seq 1 "$ROUNDS"); do
        row="$r"
        for variant in fp32 bf16 naive; do
            bin=./train_gpt_cpu; extra="--cpu-matmul fp32" # explicit: the default (auto) may pick bf16
            [ "$variant" = bf16 ] && extra="--cpu-matmul bf16"
            [ "$variant" = naive ] && bin=./train_gpt_cpu_naive
            if [ "$variant" = bf16 ] && [ "$BF16" = 0 ]; then row="$row nan"; continue; fi
            out="$TMP/$variant.$model.$r"
            $bin -e "$model" -b "$B" -t "$T" -x "$STEPS" -j '' -g 0 -o "$out" $extra > "$out.txt" 2>&1
            row="$row $(median_ms "$out/log.jsonl")"
        done
        echo "$row" >> "$TMP/rows"
    done
    python3 - "$model" "$B" "$T" "${OMP_NUM_THREADS:-$(nproc)}" "$TMP/rows" <<'PY'
import sys, statistics, math
model, B, T, threads, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
runs = [[float(x) for x in l.split()] for l in open(rows) if l.strip()]
name = '%s B=%d T=%d' % (model, B, T)
def line(label, f, b, n):
    rb = '%9.2fx' % (n / b) if not math.isnan(b) else '%10s' % '-'
    print('%-18s | %-7s | %-5s | %12.1f | %12s | %12.1f | %9.2fx | %s' % (name, threads, label, f,
          '%.1f' % b if not math.isnan(b) else '-', n, n / f, rb))
for r in runs: line(str(int(r[0])), r[1], r[2], r[3])
if len(runs) > 1:
    med = lambda i: statistics.median(r[i] for r in runs)
    line('med', med(1), med(2), med(3))
PY
done
