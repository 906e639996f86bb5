#!/usr/bin/env bash
# scripts/gpu_check.sh -- the one prepared GPU check (DESIGN.md section 6). On one GPU (H100/H200, sm_90):
#   1. builds train_gpt, test_gpt (BF16) and test_gpt_fp32 for sm_90, and dev/cuda;
#   2. make test-gpu: the model against the PyTorch fixture in BF16 and FP32;
#   3. dev/cuda checks (every kernel vs a CPU reference, then timed);
#   4. GPT-2 124M (d12) benchmark: BF16, T=1024, B=$BENCH_B, $BENCH_STEPS steps; median tokens/s after warm-up,
#      MFU = tokens/s * (6N + 6*L*C*T) / peak (llm.c's convention; H100/H200 SXM dense BF16 peak 989 TFLOP/s);
#   5. 1-process ZeRO-0/1/2 runs through the NCCL path (per-layer buckets on the communication stream; ZeRO-2
#      with 2 accumulation micro-steps: layer slots, fences, shard accumulator), last losses side by side;
#   6. train_gpt.py with torch.compile on the same config (PyTorch must be installed there);
#   then prints one closing table. Must finish in under 8 minutes. Full logs go to $OUT (or ./gpu_check_logs).
# Usage: bash scripts/gpu_check.sh        (env: BENCH_B=64 BENCH_STEPS=40 SKIP_TORCH=0)
set -u
cd "$(dirname "$0")/.." || exit 2
LOGS=${OUT:-./gpu_check_logs}
mkdir -p "$LOGS"
BENCH_B=${BENCH_B:-64}
BENCH_STEPS=${BENCH_STEPS:-40}
JOBS=$(nproc)
declare -a ROWS
row() { ROWS+=("$(printf '%-44s | %s' "$1" "$2")"); echo "[gpu_check] $1: $2"; }
t0=$SECONDS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$LOGS/device.txt" 2>&1
row "device" "$(head -n 1 "$LOGS/device.txt")"

# 1. build
if make -j "$JOBS" train_gpt test_gpt test_gpt_fp32 GPU_ARCH=90 > "$LOGS/build.txt" 2>&1 &&
   make -j "$JOBS" -C dev/cuda GPU_ARCH=90 >> "$LOGS/build.txt" 2>&1; then
    row "build (sm_90)" "ok ($((SECONDS - t0)) s)"
else
    row "build (sm_90)" "FAILED (see build.txt)"; tail -n 40 "$LOGS/build.txt"
fi

# 2. model tests against the fixture
for t in test_gpt test_gpt_fp32; do
    if [ -x "./$t" ]; then
        timeout 120 "./$t" > "$LOGS/$t.txt" 2>&1
        rc=$?
        row "$t (fixture)" "$(tail -n 1 "$LOGS/$t.txt") (exit $rc)"
    fi
done

# 3. kernel checks
if [ -d dev/cuda/bin ]; then
    timeout 150 make -C dev/cuda check GPU_ARCH=90 > "$LOGS/dev_cuda.txt" 2>&1
    rc=$?
    row "dev/cuda kernel checks" "exit $rc ($(grep -ci 'fail' "$LOGS/dev_cuda.txt") lines mention FAIL)"
fi

# 4. GPT-2 124M benchmark
DATA=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
median_tok_s() { python3 -c "
import json,sys,statistics
v=[json.loads(l) for l in open(sys.argv[1]) if '\"kind\":\"train\"' in l]
v=[x for x in v if x['step']>5]
print('%.0f %.4f' % (statistics.median(x['tokens_per_s'] for x in v), statistics.median(x.get('mfu',-1) for x in v)) if v else 'n/a n/a')" "$1"; }
rm -rf "$LOGS/bench_ours"
timeout 150 ./train_gpt -e d12 -b "$BENCH_B" -t 1024 -x "$BENCH_STEPS" -i "$DATA" -j '' -g 0 -v 0 -l 6e-4 -u 10 \
    -o "$LOGS/bench_ours" -nk 1 > "$LOGS/bench_ours.txt" 2>&1
rc=$?
read -r OURS OURS_MFU <<< "$(median_tok_s "$LOGS/bench_ours/log.jsonl" 2>/dev/null || echo 'n/a n/a')"
row "ours d12 BF16 B=$BENCH_B T=1024 tokens/s" "${OURS:-n/a} (MFU ${OURS_MFU:-n/a}; exit $rc)"
rm -rf "$LOGS/bench_ours"/*.bin

# 5. one-process ZeRO-0/1/2 through the NCCL path (a world of one still runs every collective on NCCL)
for z in 0 1 2; do
    timeout 60 ./train_gpt -e d12 -b 8 -t 1024 -d 16384 -x 3 -z $z -i "$DATA" -j '' -g 0 > "$LOGS/zero$z.txt" 2>&1
    rc=$?
    row "ZeRO-$z, 1 process, 2 micro-steps (NCCL path)" \
        "exit $rc ($(grep -c '^step' "$LOGS/zero$z.txt") steps; last: $(grep '^step' "$LOGS/zero$z.txt" | tail -n 1 | cut -c1-60))"
done

# 6. PyTorch reference with torch.compile
TORCH="n/a"
if [ "${SKIP_TORCH:-0}" != 1 ] && python3 -c "import torch" > /dev/null 2>&1; then
    timeout 240 python3 train_gpt.py --model d12 --batch-size "$BENCH_B" --sequence-length 1024 \
        --num-iterations "$BENCH_STEPS" --dtype bfloat16 --compile 1 --input-bin "$DATA" --device cuda \
        > "$LOGS/bench_torch.txt" 2>&1
    TORCH=$(grep -o 'RESULT tokens_per_s=[0-9.]*' "$LOGS/bench_torch.txt" | tail -n 1 | cut -d= -f2)
    row "PyTorch torch.compile d12 BF16 tokens/s" "${TORCH:-failed (see bench_torch.txt)}"
fi
if [[ "${OURS:-}" =~ ^[0-9]+$ ]] && [[ "${TORCH:-}" =~ ^[0-9.]+$ ]]; then
    row "speed ratio ours / PyTorch" "$(python3 -c "print('%.2fx' % ($OURS / $TORCH))")"
fi

echo
echo "================ gpu_check summary ($(date -u +%Y-%m-%d), $((SECONDS - t0)) s) ================"
printf '%s\n' "${ROWS[@]}" | tee "$LOGS/summary.txt"
