# dev/test/cli_options.sh -- options that must not change the numbers: recompute (-r) and GELU fusion (-ge)
# give bit-identical losses on the CPU backend (same operations, same order); gradient accumulation gives
# the same loss as one larger micro-batch over the same tokens (means over all tokens of the step); --cpu-matmul bf16
# (an option that does change the numbers) stays within 1% of the fp32 losses; the default --cpu-matmul auto picks the
# faster path it timed and trains exactly as that path; OpenBLAS runs kernels this CPU's vector units fit (a user's
# OPENBLAS_CORETYPE kept). (Every other test passes --cpu-matmul fp32: lib_cli.sh's $TRAIN.)
source "$(dirname "$0")/lib_cli.sh"
run() { local out="$1"; shift; $TRAIN "$@" > "$TMP/$out.txt" 2>&1 || echo "run $out failed: $(tail -n 3 "$TMP/$out.txt")"; grep -E '^step' "$TMP/$out.txt" | sed -E 's/[|] [0-9.]+ ms.*//' > "$TMP/$out.steps"; }
run r0 "${FAST[@]}" -x 5 -r 0
run r1 "${FAST[@]}" -x 5 -r 1
run r2 "${FAST[@]}" -x 5 -r 2
test -s "$TMP/r0.steps" && cmp -s "$TMP/r0.steps" "$TMP/r1.steps"
check $? "-r 1 (recompute GELU) gives bit-identical losses and norms to -r 0"
test -s "$TMP/r0.steps" && cmp -s "$TMP/r0.steps" "$TMP/r2.steps"
check $? "-r 2 (recompute GELU and LayerNorm) gives bit-identical losses and norms to -r 0"
run ge0 "${FAST[@]}" -x 5 -ge 0
test -s "$TMP/ge0.steps" && cmp -s "$TMP/r0.steps" "$TMP/ge0.steps"
check $? "-ge 0 (separate GELU) gives bit-identical losses to the fused epilogue"
# gradient accumulation: B=4 x 2 micro-steps == B=8 x 1 (unshuffled, so both read the same tokens)
run acc2 -e d2 -b 4 -t 32 -d 256 -j '' -g 0 -u 2 -x 5 --shuffle 0
run acc1 -e d2 -b 8 -t 32 -d 256 -j '' -g 0 -u 2 -x 5 --shuffle 0
python3 - "$TMP/acc2.steps" "$TMP/acc1.steps" <<'PY'
import re, sys
def losses(p): return [float(re.search(r'loss ([0-9.]+)', l).group(1)) for l in open(p)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
# fp32: the two splits sum the same per-token gradients in a different order (relative ~1e-7 per step);
# 5 AdamW steps keep the losses within 1e-5 relative.
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and len(a) == len(b) else 1.0
print("# accumulation: worst relative loss difference %.2e over %d steps" % (worst, len(a)))
sys.exit(0 if worst <= 1e-5 else 1)
PY
check $? "gradient accumulation (B=4 x 2 micro-steps) matches one micro-batch of B=8 within 1e-5 relative"
grep -q "x 2 accumulation" "$TMP/acc2.txt"
check $? "-d 256 with B=4 T=32 runs 2 accumulation micro-steps"
# --cpu-matmul bf16 (AVX512_BF16 CPUs): the same training with the matmuls' operands rounded to bf16; over 5 steps
# of d2 the losses stay within 1% of fp32's (bf16 keeps 8 significant bits: ~0.4% per product, sums in fp32),
# yet differ from them (the bf16 path really ran). Elsewhere the flag is refused with one error line.
if grep -q -w avx512_bf16 /proc/cpuinfo 2>/dev/null; then
    run bf16 "${FAST[@]}" -x 5 --cpu-matmul bf16
    python3 - "$TMP/r0.steps" "$TMP/bf16.steps" <<'PY'
import re, sys
def losses(p): return [float(re.search(r'loss ([0-9.]+)', l).group(1)) for l in open(p)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else 1.0
print("# --cpu-matmul bf16: worst relative loss difference to fp32 %.2e over %d steps" % (worst, len(a)))
sys.exit(0 if 0 < worst <= 1e-2 else 1)
PY
    check $? "--cpu-matmul bf16 trains: losses within 1% of fp32's over 5 steps, not identical"
else
    expect_error "AVX512_BF16" "--cpu-matmul bf16 on a CPU without AVX512_BF16 is refused" -- $TRAIN "${FAST[@]}" -x 1 --cpu-matmul bf16
fi
# the default, --cpu-matmul auto: the faster of fp32 and bf16 (where the CPU has AVX512_BF16) on a GEMM of the model's
# MLP shape, timed once at start-up (llmc/cpu/matmul_auto.h); which one wins is the machine's business, so the test
# reads the pick from the header and checks that the header names both times, that the pick is the faster one printed
# (bf16 n/a and fp32 on CPUs without AVX512_BF16), that the run trains exactly as --cpu-matmul with the pick and that
# the checkpoint records the pick
$TRAIN_BIN "${FAST[@]}" -x 5 -o "$TMP/auto" > "$TMP/auto.txt" 2>&1
grep -E '^step' "$TMP/auto.txt" | sed -E 's/[|] [0-9.]+ ms.*//' > "$TMP/auto.steps"
HEAD=$(grep '^| precision ' "$TMP/auto.txt")
AUTO=$(echo "$HEAD" | sed -n -E 's/.*\(--cpu-matmul auto picked (fp32|bf16): fp32 ([0-9.]+) ms, bf16 ([0-9.]+ ms|n\/a \(no AVX512_BF16\)) for a \([0-9]+x[0-9]+\)x\([0-9]+x[0-9]+\) GEMM.*/\1 \2 \3/p')
read -r PICK T_FP32 T_BF16 _ <<< "$AUTO"
if grep -q -w avx512_bf16 /proc/cpuinfo 2>/dev/null; then
    [ "$T_BF16" != "n/a" ] && awk -v p="$PICK" -v a="$T_FP32" -v b="$T_BF16" \
        'BEGIN { exit !((p == "bf16" && b <= a) || (p == "fp32" && a <= b)) }' # equal as printed: either
else
    [ "$T_BF16" = "n/a" ] && [ "$PICK" = fp32 ]
fi
check $? "--cpu-matmul auto: the header names the pick and both times, and the pick is the faster available: '(--cpu-matmul ${HEAD#*(--cpu-matmul }'"
AUTO_REF=$([ "$PICK" = bf16 ] && echo bf16 || echo r0)
test -s "$TMP/auto.steps" && cmp -s "$TMP/auto.steps" "$TMP/$AUTO_REF.steps" && grep -qx "cpu-matmul	\"$PICK\"" "$TMP/auto/DONE_00000005"
check $? "no --cpu-matmul (auto) trains exactly as --cpu-matmul ${PICK:-?} and records ${PICK:-?} in the checkpoint"
grep -q '^| precision .*(--cpu-matmul fp32)$' "$TMP/r0.txt"
check $? "--cpu-matmul fp32 is forced: no timing, the header names the flag's value"
expect_error "cpu-matmul" "--cpu-matmul with an unknown value is refused" -- $TRAIN "${FAST[@]}" -x 1 --cpu-matmul fp16
# OpenBLAS's kernel set (llmc/cpu/blas_core.h): a user's OPENBLAS_CORETYPE is kept as given (no re-execution); without
# it, on a CPU with AVX2 + FMA, OpenBLAS never runs one of its SSE-only cores (where it chose one, the trainer
# re-executes itself with a better one and the device line says so)
OPENBLAS_CORETYPE=Prescott $TRAIN "${FAST[@]}" -x 1 > "$TMP/blas_user.txt" 2>&1
grep -q '^device: CPU (.*, OpenBLAS Prescott)$' "$TMP/blas_user.txt"
check $? "OPENBLAS_CORETYPE=Prescott set by the user is kept: '$(grep -m 1 '^device:' "$TMP/blas_user.txt")'"
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    CORE=$(sed -n -E 's/^device: CPU \([^,]*, OpenBLAS ([A-Za-z0-9]+).*/\1/p' "$TMP/r0.txt")
    [ -n "$CORE" ] && [[ " Prescott Core2 Penryn Dunnington Nehalem " != *" $CORE "* ]]
    check $? "this CPU has AVX2 + FMA and OpenBLAS runs kernels that use them: '$(grep -m 1 '^device:' "$TMP/r0.txt")'"
fi
