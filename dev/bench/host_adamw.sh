#!/usr/bin/env bash
# dev/bench/host_adamw.sh -- the optimizer offload's host AdamW (llmc/cpu/adamw_range.h) in the CUDA build, before and
# after adamw_range chose the AVX body at run time (llmc/README.md, "Optimizer offload"):
#   1. compiles dev/bench/host_adamw_bench.c with nvcc as CUDA C++ (-x cu) with the Makefile's host flags (-O3,
#      -Xcompiler -fopenmp, no -march: what train_gpt's host code gets), and with the CPU build's gcc flags (-std=c11
#      -O3 -march=native -fopenmp) for reference;
#   2. counts the vector instructions (ymm/zmm operands; FMA separately) in the nvcc binary's adamw_range_scalar
#      ("before": the loop nvcc's host compiler built before) and adamw_range_avx ("after"), with objdump;
#      with ARGS ./train_gpt given (a built CUDA trainer), the same count over the trainer's whole host code;
#   3. runs both binaries: ms per 100M parameters and GB/s (28 bytes per parameter) of scalar vs dispatched on 1 and
#      2 threads, and checks that both paths give the same bits.
# Usage: bash dev/bench/host_adamw.sh [N elements = 16777216] [reps = 5] [path to train_gpt]. Wall times on a loaded
# machine are noisy: read the rows of one run side by side (they are measured in the same minute).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-16777216}; REPS=${2:-5}; TRAINER=${3:-}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
"$NVCC" -I. -O3 -std=c++17 -x cu -Xcompiler -Wall,-Wextra,-Werror,-fopenmp dev/bench/host_adamw_bench.c -lgomp \
    -o "$OUT/nvcc_bench"
gcc -I. -std=c11 -O3 -march=native -fopenmp -Wall -Wextra -Werror dev/bench/host_adamw_bench.c -lm -o "$OUT/gcc_bench"
# vector instructions of one function (symbol, possibly with a clone suffix) of binary $1: "ymm N zmm N fma N"
count() {
    objdump -d -C --no-show-raw-insn "$1" | awk -v f="$2" '
        /^[0-9a-f]+ <.*>:$/ { inside = index($0, "<" f ">:") || index($0, "<" f ".") || index($0, "<" f "(") }
        inside && /\t/ { if (/ymm/) y++; if (/zmm/) z++; if (/vfn?m(add|sub)/) fma++ }
        END { printf "ymm %d zmm %d fma %d", y, z, fma }'
}
echo "objdump, nvcc host build (instructions with ymm / zmm operands, FMA):"
echo "  before: adamw_range_scalar  $(count "$OUT/nvcc_bench" adamw_range_scalar)"
echo "  after:  adamw_range_avx     $(count "$OUT/nvcc_bench" adamw_range_avx)"
if [ -n "$TRAINER" ]; then
    echo "  $TRAINER (whole binary, host code): $(objdump -d --no-show-raw-insn "$TRAINER" | awk '/\t/ { if (/ymm/) y++; if (/vfn?m(add|sub)/) f++ } END { printf "ymm %d fma %d", y, f }'), adamw_range_avx: $(count "$TRAINER" adamw_range_avx)"
fi
echo
echo "| build (host compiler) | path | threads | ms per 100M params | GB/s |"
echo "|---|---|---|---|---|"
bits=""
for b in nvcc gcc; do
    res=$("$OUT/${b}_bench" "$N" "$REPS")
    label=$([ $b = nvcc ] && echo "CUDA build (nvcc -O3 -fopenmp)" || echo "CPU build (gcc -O3 -march=native)")
    echo "$res" | awk -v l="$label" '/^path/ { p = $2 == "scalar" ? "scalar (before)" : "dispatched (after)";
        if (l ~ /CPU/) p = $2 == "scalar" ? "scalar" : "AVX (compiled for it)"; printf "| %s | %s | %s | %s | %s |\n", l, p, $4, $6, $8 }'
    bits="$bits  $b: $(echo "$res" | grep '^bits')
"
done
echo; printf '%s' "$bits"
