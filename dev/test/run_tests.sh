#!/usr/bin/env bash
# dev/test/run_tests.sh -- runs the whole CPU test suite (what `make test` and CI run).
#
# Runs, in order: every build/test_* unit-test program, every build/emu_test_* program (CUDA kernels
# on the CPU execution layer), ./test_gpt_cpu (model vs the PyTorch fixture), ./test_gpt_emu if built,
# and every dev/test/cli_*.sh script (the real CLI: resume, bad input, multi-process runs).
# Each prints "ok - ..." / "not ok - ..." lines; this script counts them. A program that exits
# non-zero without a "not ok" line, or prints no check at all, counts as one failure.
# Ends with the line "N passed, M failed" and exits non-zero if anything failed.
# Set TESTS_FILTER=regex to run only matching programs, TESTS_SKIP=regex to leave matching ones out,
# LLMC_TRAIN_BIN=PATH to run the CLI tests on another build of train_gpt_cpu (dev/test/lib_cli.sh).
set -u
cd "$(dirname "$0")/../.." || exit 2
passed=0
failed=0
failed_names=()

run_one() {
    local name="$1"; shift
    if [ -n "${TESTS_FILTER:-}" ] && ! [[ "$name" =~ ${TESTS_FILTER} ]]; then return; fi
    if [ -n "${TESTS_SKIP:-}" ] && [[ "$name" =~ ${TESTS_SKIP} ]]; then return; fi
    echo "=== $name"
    local log
    log=$(mktemp)
    local start=$SECONDS
    "$@" > "$log" 2>&1
    local rc=$?
    cat "$log"
    local p f
    p=$(grep -c '^ok - ' "$log")
    f=$(grep -c '^not ok - ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $name exited with status $rc without reporting a failed check"
        f=1
    fi
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $name ran no checks"
        f=1
    fi
    echo "--- $name: $p passed, $f failed ($((SECONDS - start)) s)"
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$f" -gt 0 ]; then failed_names+=("$name"); fi
    rm -f "$log"
}

# TESTS_BUILD_DIR: where the unit-test programs are (build/asan for the sanitizer tier, dev/test/run_sanitize.sh)
for t in "${TESTS_BUILD_DIR:-build}"/test_*; do
    [ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
for t in build/emu_test_*; do
    [ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
run_one test_gpt_cpu ./test_gpt_cpu
for t in test_gpt_emu test_gpt_emu_bf16; do
    if [ -x "./$t" ]; then run_one "$t" "./$t"; fi
done
for t in dev/test/cli_*.sh dev/test/check_*.sh; do
    [ -f "$t" ] && run_one "$(basename "$t")" bash "$t"
done

echo
if [ "${#failed_names[@]}" -gt 0 ]; then echo "failing: ${failed_names[*]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
