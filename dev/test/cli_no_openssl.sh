# dev/test/cli_no_openssl.sh -- OpenSSL is optional (Makefile, USE_OPENSSL; llmc/comm_bootstrap.h). A copy of the
# sources is built with the OpenSSL headers hidden: an include directory on CPATH (searched before the system's)
# whose openssl/hmac.h, evp.h, crypto.h and rand.h each stop the compiler with #error, so any build that still
# includes one of them fails. Checked: `make` (nvcc hidden) builds the CPU trainer and prints one "skip:" line for
# the TCP bootstrap; no command line links -lcrypto; the unit test of the bootstrap built so runs its filesystem
# tests and sees tcp: refused (dev/test/test_comm_bootstrap.c); the trainer refuses --nccl-init tcp: with one error
# line and trains under mpirun. With the headers visible, the same Makefile links -lcrypto (where they exist).
# One CPU trainer build (~20 s of CPU); the copy keeps the checkout's programs untouched.
source "$(dirname "$0")/lib_cli.sh"
SRC="$TMP/src"
mkdir -p "$SRC/dev/test" "$SRC/dev/emu" "$TMP/shadow/openssl"
cp -r Makefile train_gpt.cu llmc "$SRC/"
cp dev/test/test_comm_bootstrap.c dev/test/testing.h "$SRC/dev/test/"
cp dev/emu/emu.mk "$SRC/dev/emu/"
for h in hmac evp crypto rand; do echo '#error "OpenSSL hidden by dev/test/cli_no_openssl.sh"' > "$TMP/shadow/openssl/$h.h"; done

# the shadow is in force: a plain include of the header fails
printf '#include <openssl/hmac.h>\n' | CPATH="$TMP/shadow" ${CC:-cc} -E -x c - > /dev/null 2>&1
test $? -ne 0
check $? "the shadow include directory hides <openssl/hmac.h> (including it is an error)"

# the detection must run in this make: a calling make (make test) exports its own USE_OPENSSL
CPATH="$TMP/shadow" nice -n 10 env -u USE_OPENSSL make -j2 -C "$SRC" --no-print-directory all build/test_comm_bootstrap NVCC=/nonexistent/nvcc \
    > "$TMP/make.log" 2>&1
rc=$?
test $rc -eq 0 -a -x "$SRC/train_gpt_cpu" -a -x "$SRC/build/test_comm_bootstrap"
check $? "make with the OpenSSL headers hidden builds train_gpt_cpu and test_comm_bootstrap (exit $rc$([ $rc -ne 0 ] && echo "; $(grep -m 1 'error' "$TMP/make.log" | cut -c1-160)"))"
n_skip=$(grep -c '^skip: --nccl-init tcp:' "$TMP/make.log")
test "$n_skip" -eq 1
check $? "make prints one 'skip:' line for the TCP bootstrap ($n_skip): $(grep -m 1 '^skip: --nccl-init' "$TMP/make.log" | cut -c1-100)"
! grep -q -- '-lcrypto' "$TMP/make.log" && grep -q -- '-DLLMC_NO_OPENSSL .*train_gpt.cu' "$TMP/make.log"
check $? "the compile lines pass -DLLMC_NO_OPENSSL and none links -lcrypto"

"$SRC/build/test_comm_bootstrap" > "$TMP/unit.log" 2>&1
rc=$?
grep -E '^not ok - |^ok - no OpenSSL' "$TMP/unit.log" | sed -E 's/^(ok|not ok) - /\1 - test_comm_bootstrap without OpenSSL: /'
test $rc -eq 0 && test "$(grep -c '^ok - no OpenSSL:' "$TMP/unit.log")" -eq 3
check $? "test_comm_bootstrap without OpenSSL exits 0 with its three refusal checks (exit $rc)"

DATA=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
expect_error "--nccl-init tcp:127.0.0.1:29511: this build has no OpenSSL" \
    "train_gpt_cpu without OpenSSL refuses --nccl-init tcp:HOST:PORT" -- \
    "$SRC/train_gpt_cpu" --cpu-matmul fp32 "${FAST[@]}" -x 1 -i "$DATA" --nccl-init tcp:127.0.0.1:29511
if command -v mpirun > /dev/null 2>&1; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 \
        "$SRC/train_gpt_cpu" --cpu-matmul fp32 "${FAST[@]}" -x 2 -i "$DATA" > "$TMP/mpi.log" 2>&1
    rc=$?
    test $rc -eq 0 && test "$(grep -c '^step' "$TMP/mpi.log")" -eq 2
    check $? "train_gpt_cpu without OpenSSL trains 2 steps on 2 MPI processes (exit $rc)"
fi

# the headers visible (where this machine has them): the same Makefile links -lcrypto and does not define the flag
if printf '#include <openssl/hmac.h>\n' | ${CC:-cc} -E -x c - > /dev/null 2>&1; then
    env -u USE_OPENSSL make -C "$SRC" --no-print-directory -n -B build/test_comm_bootstrap > "$TMP/n.log" 2>&1
    grep -q -- '-lcrypto' "$TMP/n.log" && ! grep -q -- '-DLLMC_NO_OPENSSL' "$TMP/n.log"
    check $? "with the OpenSSL headers visible the bootstrap test links -lcrypto, without -DLLMC_NO_OPENSSL"
fi
