# dev/test/cli_make.sh -- the default goal (`make` with no target): the CPU trainer always, the CUDA trainer and model
# test where nvcc is found, one "skip:" line per target or feature left out, exit status 0. Nothing is compiled here:
# the real run keeps train_gpt_cpu as it is (-o) and the build plans are read with -n (dry run).
source "$(dirname "$0")/lib_cli.sh"
unset MAKEFLAGS MFLAGS MAKELEVEL   # a fresh make, not a child of `make test`
mk() { make --no-print-directory "$@" > "$TMP/make.txt" 2>&1; }

# no nvcc: builds the CPU trainer, one skip line naming nvcc, status 0
mk -o train_gpt_cpu NVCC=/nonexistent/nvcc
rc=$?
test "$rc" -eq 0 && test "$(grep -c '' "$TMP/make.txt")" -eq 1 && grep -q "^skip: train_gpt, test_gpt (no nvcc: " "$TMP/make.txt"
check $? "make without nvcc exits 0 (status $rc) with one skip line: $(head -n 1 "$TMP/make.txt")"
mk -n -B NVCC=/nonexistent/nvcc
grep -q -- "-o train_gpt_cpu$" "$TMP/make.txt" && ! grep -q "nvcc.* -o train_gpt$" "$TMP/make.txt"
check $? "make without nvcc plans the CPU trainer build and no nvcc build"

if command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then   # where the Makefile looks
    # nvcc here: the default goal plans train_gpt and test_gpt, and without NCCL a one-GPU build with one skip line
    mk -n -B
    grep -q "nvcc.* -o train_gpt$" "$TMP/make.txt" && grep -q "nvcc.* -o test_gpt$" "$TMP/make.txt" && ! grep -q "skip:" "$TMP/make.txt"
    check $? "make with nvcc plans train_gpt and test_gpt and skips nothing"
    mk -n -B NCCL_HOME=
    grep -q 'echo "skip: NCCL in train_gpt' "$TMP/make.txt" && grep -q "nvcc.*-DLLMC_NO_NCCL.* -o train_gpt$" "$TMP/make.txt"
    check $? "make with nvcc and no NCCL plans a one-GPU build (-DLLMC_NO_NCCL) and says so"
else
    echo "# no nvcc on this machine: the CUDA half of the default goal is not checked"
fi
