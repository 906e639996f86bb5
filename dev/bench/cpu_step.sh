#!/usr/bin/env bash
# dev/bench/cpu_step.sh -- CPU training-step benchmark (a benchmark, not a test): ms/step and tokens/s of
# ./train_gpt_cpu (OpenBLAS matmuls, blocked attention) against ./train_gpt_cpu_naive (the same trainer with
# matmul and attention as plain OpenMP loops, like llm.c's train_gpt2.c), for GPT-2 124M (d12, B=4, T=64)
# and the default small model (d4, B=8, T=64). Medians over the steps after the first two, both binaries
# run one after the other in this script on the same machine; prints a table with the speed ratio.
# Usage: bash dev/bench/cpu_step.sh [steps]     (env OMP_NUM_THREADS to pin the thread count)
set -eu
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
make -s train_gpt_cpu train_gpt_cpu_naive
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median_ms() { python3 -c "
import json,sys,statistics
v=[json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"kind\":\"train\"' in l][2:]
print('%.1f' % statistics.median(v))" "$1"; }
printf '%-26s | %-8s | %12s | %12s | %12s | %12s | %7s\n' "config" "threads" "ours ms/step" "ours tok/s" "naive ms/step" "naive tok/s" "speedup"
for cfg in "d12 4 64" "d4 8 64"; do
    set -- $cfg
    model=$1; B=$2; T=$3
    for bin in train_gpt_cpu train_gpt_cpu_naive; do
        ./$bin -e "$model" -b "$B" -t "$T" -x "$STEPS" -j '' -g 0 -o "$TMP/$bin.$model" > "$TMP/$bin.$model.txt" 2>&1
    done
    ours=$(median_ms "$TMP/train_gpt_cpu.$model/log.jsonl")
    naive=$(median_ms "$TMP/train_gpt_cpu_naive.$model/log.jsonl")
    python3 - "$model" "$B" "$T" "$ours" "$naive" "${OMP_NUM_THREADS:-$(nproc)}" <<'PY'
import sys
model, B, T, ours, naive, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
tok = B * T
print('%-26s | %-8s | %12.1f | %12.0f | %12.1f | %12.0f | %6.2fx' % ('%s B=%d T=%d' % (model, B, T), threads, ours, tok / ours * 1e3, naive, tok / naive * 1e3, naive / ours))
PY
done
