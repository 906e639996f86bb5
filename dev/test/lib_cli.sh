# dev/test/lib_cli.sh -- helpers for the CLI test scripts (sourced, not run).
# check COND_EXIT_STATUS "description"  prints ok/not ok like dev/test/testing.h.
# expect_error "substring" "description" -- cmd...  runs cmd, expects a non-zero exit below 128 (no crash),
#   exactly one line on stderr, starting with "error:" and containing substring.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
TRAIN_BIN=${LLMC_TRAIN_BIN:-./train_gpt_cpu} # another build, e.g. the sanitizer one (dev/test/run_sanitize.sh)
# the trainer as the tests run it (unquoted, so it splits into words): fp32 matmuls on every machine, the reference the
# tests' numbers and tolerances are argued for. The default --cpu-matmul auto may pick bf16 on AVX512_BF16 CPUs (where
# it times faster), so the same test would check other arithmetic on another CI machine; dev/test/cli_options.sh tests
# auto itself.
TRAIN="$TRAIN_BIN --cpu-matmul fp32"
TMP=$(mktemp -d /tmp/llmc_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

check() {
    local status=$1; shift
    if [ "$status" -eq 0 ]; then echo "ok - $*"; else echo "not ok - $*"; fi
}

expect_error() {
    local needle="$1" desc="$2"; shift 3
    "$@" > "$TMP/out.txt" 2> "$TMP/err.txt"
    local rc=$?
    local lines
    lines=$(grep -c '' "$TMP/err.txt")
    local first
    first=$(head -n 1 "$TMP/err.txt")
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$lines" -eq 1 ] && [[ "$first" == error:* ]] && grep -qF -- "$needle" "$TMP/err.txt"; then
        echo "ok - $desc: exit $rc, '$first'"
    else
        echo "not ok - $desc: exit $rc, $lines stderr lines, expected one 'error:' line containing '$needle'; got: $(head -c 400 "$TMP/err.txt")"
    fi
}

# a tiny fast training configuration for CLI tests
FAST=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3)
