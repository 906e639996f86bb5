#!/usr/bin/env bash
# dev/test/run_sanitize.sh -- the sanitizer tier (`make test-sanitize`, run by .ci/run before `make test`):
#   1. every unit-test program built with AddressSanitizer + UndefinedBehaviorSanitizer (build/asan/test_*), and
#      the command-line tests of input handling on the sanitizer build of the trainer (build/asan/train_gpt_cpu):
#      cli_bad_input, cli_resume, cli_reliability, cli_options (bad flags and files, damaged checkpoints,
#      tokenizer, data loader, resume). They run through dev/test/run_tests.sh and count as usual;
#   2. every libFuzzer harness of dev/fuzz/ (token shard, model file, tokenizer, training state, debug-state
#      fixture) for FUZZ_RUNS inputs (default 80000: about 20 s on an idle 2-core machine; FUZZ_SECONDS = 180
#      caps a loaded one) from the fixed seed FUZZ_SEED,
#      starting from valid small files (dev/fuzz/make_seeds.py and the harnesses' own writers) and
#      with the inputs earlier fuzzing found to crash (dev/fuzz/regressions/NAME/, one file per fixed bug);
#      a crash, hang (> 10 s), leak, sanitizer report or a rejected input without exactly one "error:" line fails;
#   3. every sanitizer report of steps 1-2 counts as a failure: ASan/UBSan/LSan write them to files
#      (log_path), so they do not disturb the tests' checks of stderr, and they are listed here.
# Settings: every report is fatal (halt_on_error, -fno-sanitize-recover=all); leaks are checked at every exit,
# including error exits; allocations that OpenMP and OpenBLAS keep until exit are suppressed (dev/test/sanitize.supp),
# ours are not. The sanitizer trainer is a single-process build (OpenMPI's plugins keep allocations that LeakSanitizer
# cannot attribute once they are unloaded), so the multi-process check of cli_reliability is left out here (it runs in
# make test).
# Ends with "N passed, M failed"; exits non-zero if anything failed. About 3-7 minutes on 2 cores (with its builds).
set -u
cd "$(dirname "$0")/../.." || exit 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The gate is reproducible: a fixed libFuzzer seed and a fixed number of inputs per reader (FUZZ_RUNS), so a CI run
# explores the same inputs on every machine (a faster machine only finishes sooner; FUZZ_SECONDS caps the time on a
# slow one). Exploration with a random seed for longer is `make fuzz` (FUZZ_SEED=0, FUZZ_SECONDS=300, FUZZ_RUNS=-1):
# what it finds goes into dev/fuzz/regressions/ with the fix, and every later run of the gate replays it.
FUZZ_SECONDS=${FUZZ_SECONDS:-180}
FUZZ_RUNS=${FUZZ_RUNS:-80000}
FUZZ_SEED=${FUZZ_SEED:-1}
LOG=$(mktemp -d /tmp/llmc_sanitize.XXXXXX)
trap 'rm -rf "$LOG"' EXIT
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:log_path=$LOG/report"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$LOG/report"
export LSAN_OPTIONS="suppressions=$(pwd)/dev/test/sanitize.supp"
export LLMC_SANITIZE_SINGLE=1 # build/asan/train_gpt_cpu is a single-process build: cli_reliability leaves out its MPI part
passed=0
failed=0
count() { # count OUTPUT_FILE: adds its ok / not ok lines
    passed=$((passed + $(grep -c '^ok - ' "$1")))
    failed=$((failed + $(grep -c '^not ok - ' "$1")))
}

echo "=== unit tests and input-handling CLI tests on the ASan + UBSan build"
LLMC_TRAIN_BIN=build/asan/train_gpt_cpu TESTS_BUILD_DIR=build/asan \
    TESTS_FILTER='^(test_|cli_(bad_input|resume|reliability|options)\.sh)' TESTS_SKIP='^test_gpt_' \
    bash dev/test/run_tests.sh > "$LOG/tests.txt" 2>&1
grep -v '^[0-9]* passed, [0-9]* failed$' "$LOG/tests.txt"
count "$LOG/tests.txt"

echo "=== fuzzing every file reader (libFuzzer seed $FUZZ_SEED, $FUZZ_RUNS inputs or $FUZZ_SECONDS s each)"
python3 dev/fuzz/make_seeds.py "$LOG/seeds"
for h in build/asan/fuzz_*; do
    name=${h#build/asan/fuzz_}
    mkdir -p "$LOG/seeds/$name" "$LOG/corpus_$name" "$LOG/art_$name"
    [ -z "$(ls "$LOG/seeds/$name")" ] && LLMC_FUZZ_WRITE_SEED="$LOG/seeds/$name/seed" "$h" > /dev/null 2>&1
    "$h" -seed="$FUZZ_SEED" -runs="$FUZZ_RUNS" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 \
        -artifact_prefix="$LOG/art_$name/" "$LOG/corpus_$name" "$LOG/seeds/$name" \
        $(ls -d "dev/fuzz/regressions/$name" 2>/dev/null) > "$LOG/fuzz_$name.txt" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$LOG/fuzz_$name.txt")
    art=$(ls "$LOG/art_$name")
    if [ $rc -eq 0 ] && [ -z "$art" ] && [ -n "$(ls "$LOG/seeds/$name")" ]; then
        echo "ok - fuzz $name: ${runs:-?} inputs (seed $FUZZ_SEED), each loaded or refused with one error line; no crash, hang, leak or sanitizer report"
        passed=$((passed + 1))
    else
        echo "not ok - fuzz $name: exit $rc, artifacts: ${art:-none} (reproduce: $h FILE); $(grep -m3 'ERROR\|fuzz:\|runtime error' "$LOG/fuzz_$name.txt" | tr '\n' ' ')"
        for a in $art; do od -An -tx1 -N64 "$LOG/art_$name/$a" | head -2; done
        failed=$((failed + 1))
    fi
done

reports=$(ls "$LOG" | grep '^report\.' || true)
for r in $reports; do
    echo "not ok - sanitizer report $r: $(grep -m1 'ERROR\|runtime error\|SUMMARY' "$LOG/$r")"
    sed -n 1,30p "$LOG/$r"
    failed=$((failed + 1))
done
[ -z "$reports" ] && echo "ok - no sanitizer report from any test or fuzz run" && passed=$((passed + 1))
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
