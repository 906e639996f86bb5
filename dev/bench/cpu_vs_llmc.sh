#!/usr/bin/env bash
# dev/bench/cpu_vs_llmc.sh -- our CPU trainer against llm.c's own CPU trainer, side by side (a benchmark, not a
# test): GPT-2 124M (d12), B=4, T=64 -- the configuration llm.c's train_gpt2.c hard-codes -- on the same model
# file (ours, written in llm.c's format as gpt2_124M.bin) and the same Tiny Shakespeare tokens. ROUNDS rounds of
# (llm.c, ours fp32, ours --cpu-matmul bf16 when the CPU has AVX512_BF16), one after the other, so each ratio
# compares runs of the same minutes. Per run the median ms/step of steps 2..STEPS-1 (llm.c's "took X ms" lines;
# our log.jsonl), per round the ratios llm.c/ours, and the median over the rounds.
# Needs a checkout of llm.c (https://github.com/karpathy/llm.c) with its CPU trainer built by its own Makefile
# (`make train_gpt2`); nothing is downloaded here. Our binaries are built if needed.
# Usage: bash dev/bench/cpu_vs_llmc.sh LLMC_DIR [steps] [rounds]   (defaults 8, 2; env OMP_NUM_THREADS pins the
#        thread count of both trainers)
set -eu
cd "$(dirname "$0")/../.."
LLMC=${1:?usage: dev/bench/cpu_vs_llmc.sh LLMC_DIR [steps] [rounds]: LLMC_DIR is an llm.c checkout with train_gpt2 built}
STEPS=${2:-8}
ROUNDS=${3:-2}
[ -x "$LLMC/train_gpt2" ] || { echo "error: $LLMC/train_gpt2 not found or not executable; expected llm.c's CPU trainer (make train_gpt2 in that checkout)" >&2; exit 1; }
LLMC=$(cd "$LLMC" && pwd)
make -s train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# the shared model file: our d12 after its random init, in llm.c's fp32 format (version 3), one step written
./train_gpt_cpu -e d12 -b 4 -t 64 -x 1 -n 1 -j '' -g 0 -o "$TMP/init" > "$TMP/init.txt" 2>&1
mkdir -p "$TMP/llmc/dev/data/tinyshakespeare"
ln -s "$TMP/init/model_00000001.bin" "$TMP/llmc/gpt2_124M.bin"
for s in train val; do
    ln -s "$PWD/dev/data/tinyshakespeare/tiny_shakespeare_$s.bin" "$TMP/llmc/dev/data/tinyshakespeare/"
done
BF16=1
./train_gpt_cpu --cpu-matmul bf16 --dry-run 1 -j '' -g 0 > /dev/null 2>&1 || BF16=0
median() { python3 -c "import sys,statistics; print('%.1f' % statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
ours_ms() { # ours_ms OUTDIR [flags]: median ms of steps 3..STEPS of our trainer, resuming from the shared model
    local out=$1; shift
    ./train_gpt_cpu -e "$TMP/init/model_00000001.bin" -b 4 -t 64 -x "$STEPS" -j '' -g 0 -o "$out" "$@" > "$out.txt" 2>&1
    python3 -c "
import json,sys,statistics
v=[json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"kind\":\"train\"' in l][2:]
print('%.1f' % statistics.median(v))" "$out/log.jsonl"
}
llmc_ms() { # median ms of llm.c's steps 2..STEPS-1 (its step 0 and 1 warm up, as ours); stopped after STEPS lines
    (cd "$TMP/llmc" && stdbuf -oL "$LLMC/train_gpt2" 2>/dev/null | grep --line-buffered 'took' | head -n "$STEPS" \
        > "$TMP/llmc.txt") || true
    median $(sed -n "3,${STEPS}p" "$TMP/llmc.txt" | sed -E 's/.*took ([0-9.]+) ms.*/\1/')
}
printf '%-5s | %-7s | %14s | %12s | %12s | %11s | %11s\n' round threads "llm.c ms/step" "fp32 ms/step" \
    "bf16 ms/step" "llm.c/fp32" "llm.c/bf16"
: > "$TMP/rows"
for r in $(seq 1 "$ROUNDS"); do
    l=$(llmc_ms); f=$(ours_ms "$TMP/fp32.$r" --cpu-matmul fp32); b=nan
    [ "$BF16" = 1 ] && b=$(ours_ms "$TMP/bf16.$r" --cpu-matmul bf16)
    echo "$r $l $f $b" >> "$TMP/rows"
done
python3 - "${OMP_NUM_THREADS:-$(nproc)}" "$TMP/rows" <<'PY'
import sys, statistics, math
threads, rows = sys.argv[1], [[float(x) for x in l.split()] for l in open(sys.argv[2]) if l.strip()]
def line(label, l, f, b):
    print('%-5s | %-7s | %14.1f | %12.1f | %12s | %10.2fx | %11s' % (label, threads, l, f,
          '-' if math.isnan(b) else '%.1f' % b, l / f, '-' if math.isnan(b) else '%.2fx' % (l / b)))
for r in rows: line(str(int(r[0])), r[1], r[2], r[3])
if len(rows) > 1:
    med = lambda i: statistics.median(r[i] for r in rows)
    line('med', med(1), med(2), med(3))
PY
