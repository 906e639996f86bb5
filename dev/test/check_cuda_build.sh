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
trap 'rm -f "$LOG" "${DEFAULT_BIN:-}"' EXIT
build() {
    local desc="$1"; shift
    if "$@" > "$LOG" 2>&1; then
        echo "ok - $desc"
    else
        echo "not ok - $desc"; tail -n 30 "$LOG"
    fi
}
build "nvcc builds train_gpt (BF16, sm_80 + sm_90) warning-free" make -s train_gpt
# the default build is kept aside and put back at the end (the missing-NCCL check below runs make -B train_gpt),
# newer than its sources so that make sees it up to date
DEFAULT_BIN=$(mktemp)
cp -p train_gpt "$DEFAULT_BIN" 2> /dev/null
# The builds below run in two lanes at once (a single-architecture nvcc is one process, so one lane alone leaves the
# second core idle; the cuDNN builds are lane 1's, the others and dev/cuda's programs lane 2's): lane 2 in a folder of
# its own whose sources are links to these (its ./train_gpt, ./test_gpt and dev/cuda/bin are its own), lane 1 here.
# Lane 2's lines are printed after lane 1's, in a fixed order.
LANE=$(mktemp -d)
trap 'rm -f "$LOG" "${DEFAULT_BIN:-}"; rm -rf "$LANE"' EXIT
for f in Makefile train_gpt.cu test_gpt.cu llmc build; do ln -s "$PWD/$f" "$LANE/$f"; done
mkdir -p "$LANE/dev/cuda"
for f in dev/*; do [ "$f" = dev/cuda ] || ln -s "$PWD/$f" "$LANE/$f"; done
for f in dev/cuda/*; do [ "$f" = dev/cuda/bin ] || ln -s "$PWD/$f" "$LANE/$f"; done
(
    LOG=$LANE/lane.log
    # test_gpt for sm_90 only: test_gpt.cu has no device code of its own (it includes train_gpt.cu with -DTESTING and
    # adds host code), so its sm_80 device code is the default train_gpt's above, same headers and flags; its host
    # code and its sm_90 pass are compiled here
    build "nvcc builds test_gpt (BF16, sm_90) warning-free" make -s -C "$LANE" test_gpt GPU_ARCH=90
    build "nvcc builds train_gpt in FP32 (sm_90)" make -s -B -C "$LANE" train_gpt PRECISION=FP32 GPU_ARCH=90
    # Every dev/cuda program includes the whole CUDA backend (dev/cuda/common.h -> llmc/backend.h) and no device code
    # of its own (no __global__, no __CUDA_ARCH__ in dev/cuda/*.cu), so each one's device code is the same kernel set.
    # One program is built as `make -C dev/cuda` builds it (sm_80 + sm_90: every kernel's sm_80 pass under dev/cuda's
    # flags once), the others for sm_90 only: their own host code and the Makefile's rule are what they add
    build "make -C dev/cuda builds a kernel program for the default architectures (sm_80 + sm_90)" \
        make -s -C "$LANE/dev/cuda" bin/global_norm
    build "make -C dev/cuda builds every kernel benchmark/check program (the others for sm_90)" \
        make -s -C "$LANE/dev/cuda" GPU_ARCH=90
    # dev/cuda's attention program with cuDNN's SDPA (USE_CUDNN=1), over its plain build in this lane's bin: after
    # lane 1 has built the shared object (build/attention_cudnn.o; -W: only attention.cu counts as changed)
    while [ ! -e "$LANE/cudnn_object_built" ] && kill -0 $$ 2> /dev/null; do sleep 2; done
    build "make -C dev/cuda USE_CUDNN=1 builds the attention program with cuDNN's SDPA (sm_90)" \
        make -s -C "$LANE/dev/cuda" USE_CUDNN=1 GPU_ARCH=90 -W attention.cu bin/attention
    n_src=$(ls dev/cuda/*.cu | wc -l)
    n_bin=$(ls "$LANE/dev/cuda/bin" 2>/dev/null | wc -l)
    if [ "$n_bin" -eq "$n_src" ] && [ "$n_src" -ge 8 ]; then
        echo "ok - dev/cuda/bin holds one program per dev/cuda/*.cu ($n_bin)"
    else
        echo "not ok - dev/cuda/bin holds $n_bin programs for $n_src sources"
    fi
) > "$LANE/lane.out" 2>&1 &
LANE_PID=$!
# cuDNN's attention: llmc/cuda/attention_cudnn.cpp by the host C++ compiler (-Werror), linked into the trainer and
# the model test (scripts/gpu_check.sh runs it against the fixtures); lane 2 links it into dev/cuda's attention
build "g++ builds the cuDNN attention object and nvcc train_gpt_cudnn, test_gpt_cudnn (sm_90) warning-free" \
    make -s -B train_gpt_cudnn test_gpt_cudnn GPU_ARCH=90
rm -f train_gpt_cudnn test_gpt_cudnn
touch "$LANE/cudnn_object_built"
# FP16 and USE_NCCL=0 in one build: the NCCL code does not depend on the precision (in this lane, which is shorter:
# the default ./train_gpt it overwrites is put back at the end)
build "nvcc builds train_gpt in FP16 without NCCL (PRECISION=FP16 USE_NCCL=0, sm_90)" \
    make -s -B train_gpt PRECISION=FP16 GPU_ARCH=90 USE_NCCL=0
if readelf -d train_gpt 2>/dev/null | grep -q 'NEEDED.*libnccl'; then
    echo "not ok - the USE_NCCL=0 build still needs libnccl"
else
    echo "ok - the USE_NCCL=0 build does not need libnccl"
fi
wait "$LANE_PID"
cat "$LANE/lane.out"

# library discovery (llmc/cuda/libs.mk)
make -s print-cuda-libs > "$LOG" 2>&1
if grep -q '^cuBLAS home: /' "$LOG" && grep -q '^NCCL home:   /' "$LOG" && grep -q -- '-lcublasLt' "$LOG"; then
    echo "ok - make print-cuda-libs finds cuBLAS and NCCL: $(grep -o 'NCCL home: *[^ ]*' "$LOG")"
else
    echo "not ok - make print-cuda-libs: $(cat "$LOG")"
fi
# a library folder as pip's wheels lay it out (nvidia-nccl-cu13: include/nccl.h, lib/libnccl.so.2 and no
# unversioned libnccl.so) links by version, with an rpath to that folder
NCCL_SO=$(sed -n 's/^link: .*-L\([^ ]*\) -lnccl .*/\1/p' "$LOG")/libnccl.so.2
NCCL_H=$(sed -n 's/^NCCL home: *\([^ ]*\).*/\1/p' "$LOG")/include/nccl.h
WHEEL=$(mktemp -d)
mkdir -p "$WHEEL/include" "$WHEEL/lib"
ln -s "$NCCL_H" "$WHEEL/include/nccl.h"
ln -s "$(readlink -f "$NCCL_SO")" "$WHEEL/lib/libnccl.so.2"
# (a small program with the flags llmc/cuda/libs.mk gives train_gpt for that folder: the link is what is tested, and
# compiling the whole trainer once more for it would cost a minute)
make -s print-cuda-libs NCCL_HOME="$WHEEL" > "$WHEEL/flags.txt" 2>&1
printf '#include <nccl.h>\n#include <stdio.h>\nint main(void) { int v = 0; ncclGetVersion(&v); printf("%%d\\n", v); return 0; }\n' \
    > "$WHEEL/probe.cu"
# shellcheck disable=SC2046
build "nvcc links a program against a wheel-style NCCL folder (lib/libnccl.so.2 only) with libs.mk's flags" \
    "$NVCC" $(sed -n 's/^compile: *//p' "$WHEEL/flags.txt") "$WHEEL/probe.cu" $(sed -n 's/^link: *//p' "$WHEEL/flags.txt") \
    -o "$WHEEL/probe"
if readelf -d "$WHEEL/probe" 2>/dev/null | grep -q "RUNPATH.*$WHEEL/lib" && readelf -d "$WHEEL/probe" | grep -q 'NEEDED.*libnccl.so.2'; then
    echo "ok - that program needs libnccl.so.2 and has $WHEEL/lib on its runpath"
else
    echo "not ok - wheel-style NCCL link: $(readelf -d "$WHEEL/probe" 2>&1 | grep -E 'NEEDED|RUNPATH' | tr '\n' ' ')"
fi
rm -rf "$WHEEL"
make -B train_gpt NCCL_HOME=/nonexistent > "$LOG" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q 'libnccl.so not found under /nonexistent.*set NCCL_HOME' "$LOG"; then
    echo "ok - a missing NCCL stops make with one line naming NCCL_HOME: $(grep 'not found' "$LOG" | head -n 1)"
else
    echo "not ok - a missing NCCL: exit $rc, $(tail -n 2 "$LOG")"
fi
# (no default build to put back: the FP16 one goes too, so that no check below runs it as the default)
if [ -s "$DEFAULT_BIN" ]; then mv -f "$DEFAULT_BIN" train_gpt && chmod +x train_gpt && touch train_gpt; else rm -f train_gpt; fi
build "train_gpt is the default BF16 build again (up to date for make)" make -s -q train_gpt
if ! nvidia-smi > /dev/null 2>&1 && [ -x ./train_gpt ]; then
    ./train_gpt > /dev/null 2> "$LOG"
    rc=$?
    if [ $rc -ne 0 ] && [ "$(grep -c '' "$LOG")" -eq 1 ] && grep -q "train_gpt_cpu" "$LOG"; then
        echo "ok - ./train_gpt without a GPU exits $rc with one line pointing to ./train_gpt_cpu: $(cat "$LOG")"
    else
        echo "not ok - ./train_gpt without a GPU: exit $rc, stderr: $(head -c 300 "$LOG")"
    fi
fi
