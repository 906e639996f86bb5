#!/usr/bin/env bash
# dev/bench/kv_cache_sampling.sh -- generation speed of the CPU trainer's sampler with and without the KV cache
# (llmc/kv_cache.h): a randomly initialised model (default GPT-2 124M, d12), greedy, GEN tokens from <|endoftext|>,
# one training step first (the sample is drawn at the end of the run); prints a table of tokens/s from the
# trainer's own "(sampled N tokens in X s ...)" line, and whether both runs drew the same text (their log.jsonl sample records).
# Usage: bash dev/bench/kv_cache_sampling.sh        (env: MODEL=d12 GEN=256 T=512 THREADS=2)
set -u
cd "$(dirname "$0")/../.." || exit 2
MODEL=${MODEL:-d12} GEN=${GEN:-256} T=${T:-512}
export OMP_NUM_THREADS=${THREADS:-2}
[ -x ./train_gpt_cpu ] || make -s train_gpt_cpu || exit 1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for kv in 0 1; do
    ./train_gpt_cpu -e "$MODEL" -b 1 -t "$T" -x 1 -j '' -g "$GEN" -s 1 --temperature 0 --kv-cache $kv --cpu-matmul fp32 \
        -i dev/data/tinyshakespeare/tiny_shakespeare_train.bin -o "$TMP/out$kv" > "$TMP/kv$kv.txt" 2>&1 || { tail -n 3 "$TMP/kv$kv.txt"; exit 1; }
done
rate() { sed -n 's/^(sampled \([0-9]*\) tokens in \([0-9.]*\) s: \([0-9.]*\) tokens\/s.*/\2 \3/p' "$1" | tail -n 1; }
read -r s0 r0 <<< "$(rate "$TMP/kv0.txt")"
read -r s1 r1 <<< "$(rate "$TMP/kv1.txt")"
same=$(cmp -s <(grep '"sample"' "$TMP/out0/log.jsonl") <(grep '"sample"' "$TMP/out1/log.jsonl") && echo yes || echo NO)
echo "| sampler ($MODEL, $GEN tokens, T=$T, $OMP_NUM_THREADS threads) | seconds | tokens/s |"
echo "|---|---:|---:|"
echo "| window recomputed per token (--kv-cache 0) | $s0 | $r0 |"
echo "| KV cache (--kv-cache 1) | $s1 | $r1 |"
echo "speed-up: $(python3 -c "print('%.1fx' % ($r1 / $r0))" 2>/dev/null); same greedy tokens: $same"
