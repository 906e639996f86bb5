#!/usr/bin/env bash
# dev/test/run_tests.sh -- runs the whole CPU test suite (what `make test` and CI run).
#
# Runs every build/test_* unit-test program, every build/emu_test_* program (CUDA kernels on the CPU execution
# layer), ./test_gpt_cpu (model vs the PyTorch fixture), ./test_gpt_emu if built, and every dev/test/cli_*.sh and
# check_*.sh script (the real CLI: resume, bad input, multi-process runs).
# Each prints "ok - ..." / "not ok - ..." lines; this script counts them. A program that exits
# non-zero without a "not ok" line, or prints no check at all, counts as one failure.
# Ends with the line "N passed, M failed" and exits non-zero if anything failed.
#
# TEST_JOBS=N (make test passes its TEST_JOBS, default 2; default 1 here) runs N tests at once: the suite is mostly
# single-threaded emulation and mpirun jobs that wait on each other, which leave about a quarter of 2 cores idle when
# run one at a time. Each test's output is kept in its own file and printed as one block when it ends (blocks appear
# in the order the tests end). The longest tests start first (LONGEST below, measured) so that the last one to end
# is a short one. Tests that measure wall-clock time against a limit (ALONE below) run first, with nothing beside
# them. No two tests share a file or a port: each CLI script works in its own mktemp folder (dev/test/lib_cli.sh),
# and check_cuda_build.sh, the only one that builds in the repository, builds targets no other test runs.
#
# Set TESTS_FILTER=regex to run only matching programs, TESTS_SKIP=regex to leave matching ones out,
# LLMC_TRAIN_BIN=PATH to run the CLI tests on another build of train_gpt_cpu (dev/test/lib_cli.sh),
# TESTS_BUILD_DIR=DIR for the unit-test programs of another build (build/asan: dev/test/run_sanitize.sh).
set -u
cd "$(dirname "$0")/../.." || exit 2
JOBS=${TEST_JOBS:-1}
if ! [[ "$JOBS" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: TEST_JOBS='$JOBS': expected a number of tests to run at once, 1 or more" >&2
    exit 2
fi
# wall-clock checks: the bootstrap's deadlines (test_comm_bootstrap) and the measured pipeline bubble
ALONE=" test_comm_bootstrap cli_pp_bubble.sh "
# the longest tests first, longest to shortest (their times in make test on 2 cores, fresh-clone CI of 2026-12-07:
# check_cuda_build.sh 632 s before its cuDNN benchmark build left it, cli_grad_compress.sh 325 s beside other tests,
# down to cli_grad_compress_3d.sh and cli_dp_resume.sh, 81-88 s)
LONGEST="check_cuda_build.sh cli_grad_compress.sh cli_pp_nccl_emu.sh cli_moe_zero3.sh cli_tp_nccl_emu.sh
    cli_dp_nccl_emu.sh cli_pp.sh cli_pp_split.sh cli_tp.sh cli_moe_ep.sh test_gpt_emu test_gpt_emu_bf16 cli_pp_zero.sh
    cli_pp_split_nccl_emu.sh cli_moe_pp.sh cli_dp_zero.sh cli_grad_compress_3d.sh cli_dp_resume.sh"
DIR=$(mktemp -d /tmp/llmc_tests.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

names=()   # every selected test, in the order found
cmds=()    # its command line, quoted for eval
add() {
    local name="$1"; shift
    if [ -n "${TESTS_FILTER:-}" ] && ! [[ "$name" =~ ${TESTS_FILTER} ]]; then return; fi
    if [ -n "${TESTS_SKIP:-}" ] && [[ "$name" =~ ${TESTS_SKIP} ]]; then return; fi
    names+=("$name")
    cmds+=("$(printf '%q ' "$@")")
}
for t in "${TESTS_BUILD_DIR:-build}"/test_*; do
    [ -x "$t" ] && add "$(basename "$t")" "$t"
done
for t in build/emu_test_*; do
    [ -x "$t" ] && add "$(basename "$t")" "$t"
done
add test_gpt_cpu ./test_gpt_cpu
for t in test_gpt_emu test_gpt_emu_bf16; do
    if [ -x "./$t" ]; then add "$t" "./$t"; fi
done
for t in dev/test/cli_*.sh dev/test/check_*.sh; do
    [ -f "$t" ] && add "$(basename "$t")" bash "$t"
done

# run_one I: runs test I with its output in $DIR/I.log; writes its block ($DIR/I.block: the output, a line for a
# failure the output does not report, the summary line) and then its counts ($DIR/I.counts: "passed failed"), last,
# which marks it ended
run_one() {
    local i="$1" name="${names[$1]}" start=$SECONDS
    local log="$DIR/$i.log"
    eval "${cmds[$i]}" > "$log" 2>&1 < /dev/null
    local rc=$? p f
    p=$(grep -c '^ok - ' "$log")
    f=$(grep -c '^not ok - ' "$log")
    {
        echo "=== $name"
        cat "$log"
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "not ok - $name exited with status $rc without reporting a failed check"
            f=1
        fi
        if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
            echo "not ok - $name ran no checks"
            f=1
        fi
        echo "--- $name: $p passed, $f failed ($((SECONDS - start)) s)"
    } > "$DIR/$i.block"
    echo "$p $f" > "$DIR/$i.counts.tmp" && mv "$DIR/$i.counts.tmp" "$DIR/$i.counts"
}

passed=0
failed=0
failed_names=()
printed=()  # printed[I]=1 once test I's block is out
# collect: prints the block of every test that has ended and is not printed yet, and adds its counts
collect() {
    local i p f
    for i in "${!names[@]}"; do
        if [ -z "${printed[$i]:-}" ] && [ -f "$DIR/$i.counts" ]; then
            cat "$DIR/$i.block"
            read -r p f < "$DIR/$i.counts"
            passed=$((passed + p))
            failed=$((failed + f))
            if [ "$f" -gt 0 ]; then failed_names+=("${names[$i]}"); fi
            printed[$i]=1
        fi
    done
}

# the order: ALONE (one at a time, nothing beside them), then LONGEST in its order, then the rest as found
order=()
for i in "${!names[@]}"; do [[ "$ALONE" == *" ${names[$i]} "* ]] && order+=("$i"); done
n_alone=${#order[@]}
for l in $LONGEST; do
    for i in "${!names[@]}"; do [ "${names[$i]}" = "$l" ] && [[ "$ALONE" != *" $l "* ]] && order+=("$i"); done
done
for i in "${!names[@]}"; do
    [[ "$ALONE" == *" ${names[$i]} "* ]] || [[ " $(echo $LONGEST) " == *" ${names[$i]} "* ]] || order+=("$i")
done

for k in "${!order[@]}"; do
    i=${order[$k]}
    if [ "$k" -lt "$n_alone" ]; then
        run_one "$i"
        collect
        continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
        wait -n
        collect
    done
    run_one "$i" &
done
wait
collect

echo
if [ "${#failed_names[@]}" -gt 0 ]; then echo "failing: ${failed_names[*]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
