# dev/test/check_sass.sh -- reads the sm_90 machine code of the CUDA trainer without a GPU: compiles train_gpt.cu's
# device code for sm_90 with the Makefile's flags (BF16) and -Xptxas -v, disassembles it with cuobjdump, and runs
# dev/cuda/sass_report.py --check (no spills or local memory in any kernel; the flash-attention kernels on the
# tensor cores with cp.async tile loads; the packed kernels in 128-bit global accesses; the attention row-dot
# pass without 16-bit global accesses). Run by
# dev/test/run_tests.sh. cuobjdump (and the nvdisasm it calls) come from the CUDA toolkit or from the PyPI
# wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm, which scripts/install_deps.sh installs.
set -u
cd "$(dirname "$0")/../.." || exit 2
# every bin/ folder of the nvidia.cu13 namespace package (each CUDA 13 wheel adds a location)
TOOLS=$(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.cu13') if u.find_spec('nvidia') else None; print(':'.join(p + '/bin' for p in (s.submodule_search_locations if s else [])))" 2>/dev/null)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export PATH="$PATH:$(dirname "$NVCC")${TOOLS:+:$TOOLS}"
if ! command -v cuobjdump > /dev/null || ! command -v nvdisasm > /dev/null; then
    echo "not ok - cuobjdump/nvdisasm not found (CUDA toolkit, or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
    exit 1
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FLAGS=$(make -s print-nvcc-flags | sed -E 's/-gencode arch=compute_[0-9]+,code=sm_[0-9]+//g')
# shellcheck disable=SC2086
if "$NVCC" $FLAGS -arch=sm_90 -cubin -Xptxas -v train_gpt.cu -o "$TMP/train_gpt.cubin" > "$TMP/ptxas.txt" 2>&1; then
    echo "ok - train_gpt.cu device code compiles for sm_90 with -Xptxas -v"
else
    echo "not ok - nvcc -cubin for sm_90 failed:"; tail -n 20 "$TMP/ptxas.txt"
    exit 1
fi
cuobjdump -sass "$TMP/train_gpt.cubin" > "$TMP/sass.txt" 2>&1 || { echo "not ok - cuobjdump -sass failed: $(head -n 3 "$TMP/sass.txt")"; exit 1; }
python3 dev/cuda/sass_report.py "$TMP/ptxas.txt" "$TMP/sass.txt" --check
