# dev/test/check_cuda_build.sh -- every CUDA target compiles and links warning-free (warnings are errors
# in NVCC_FLAGS) on a machine without a GPU, and ./train_gpt without a GPU exits with one line that
# points to ./train_gpt_cpu. Run by dev/test/run_tests.sh.
set -u
cd "$(dirname "$0")/../.." || exit 2
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
    echo "not ok - nvcc not found (looked for nvcc on PATH and /usr/local/cuda/bin/nvcc)"
    exit 1
fi
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
build() {
    local desc="$1"; shift
    if "$@" > "$LOG" 2>&1; then
        echo "ok - $desc"
    else
        echo "not ok - $desc"; tail -n 30 "$LOG"
    fi
}
build "nvcc builds train_gpt (BF16, sm_80 + sm_90) warning-free" make -s train_gpt
build "nvcc builds test_gpt (BF16, sm_80 + sm_90) warning-free" make -s test_gpt
build "nvcc builds train_gpt in FP32 (sm_90)" make -s -B train_gpt PRECISION=FP32 GPU_ARCH=90
build "nvcc builds train_gpt in FP16 (sm_90)" make -s -B train_gpt PRECISION=FP16 GPU_ARCH=90
build "nvcc builds train_gpt with cuDNN attention (sm_90)" make -s -B train_gpt USE_CUDNN=1 GPU_ARCH=90
build "nvcc builds train_gpt again (BF16 default)" make -s -B train_gpt
build "make -C dev/cuda builds every kernel benchmark/check program" make -s -C dev/cuda
if ! nvidia-smi > /dev/null 2>&1 && [ -x ./train_gpt ]; then
    ./train_gpt > /dev/null 2> "$LOG"
    rc=$?
    if [ $rc -ne 0 ] && [ "$(grep -c '' "$LOG")" -eq 1 ] && grep -q "train_gpt_cpu" "$LOG"; then
        echo "ok - ./train_gpt without a GPU exits $rc with one line pointing to ./train_gpt_cpu: $(cat "$LOG")"
    else
        echo "not ok - ./train_gpt without a GPU: exit $rc, stderr: $(head -c 300 "$LOG")"
    fi
fi
