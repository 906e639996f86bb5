# dev/test/cli_dp_equiv.sh -- data parallelism through the real CLI under mpirun:
# 2 ranks x 1 micro-step == 1 rank x 2 micro-steps (same global batch of 256 tokens), 20 steps.
# The two runs add the same per-window fp32 gradients in another order (ring sum vs accumulation in the
# backward ops), so losses, grad norms and the RMS of the final weights agree within T(steps) of dp_lib.sh
# (the argument there; T(20) = 2.3e-5), and the validation loss at step 0 (same weights) is identical
# whatever the number of ranks, later ones within T(step).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
F=(-e d2 -b 4 -t 32 -g 0 -u 2 -l 1e-3 -v 10 -m 6 -x 20)
A="$TMP/one"; B="$TMP/two"
$TRAIN "${F[@]}" -d 256 -o "$A" > "$TMP/a.log" 2>&1
check $? "1 process x 2 micro-steps (-d 256), 20 steps"
grep -q "B=4 T=32 x 2 accumulation x 1 processes = 256 tokens/step" "$TMP/a.log"
check $? "single process: 2 accumulation steps"
MPIRUN 2 $TRAIN "${F[@]}" -o "$B" > "$TMP/b.log" 2>&1
check $? "2 processes x 1 micro-step under mpirun, 20 steps"
grep -q "B=4 T=32 x 1 accumulation x 2 processes = 256 tokens/step" "$TMP/b.log"
check $? "two processes: total batch B*T*accum*processes = 256 tokens"
test "$(grep -c '^step ' "$TMP/b.log")" -eq 20 && test "$(grep -c '^| device' "$TMP/b.log")" -eq 1
check $? "only rank 0 prints (20 step lines, one header)"
T20=$(dp_order_tol 20)
out=$(dp_compare_logs "$A/log.jsonl" "$B/log.jsonl" train loss $T20 20)
check $? "losses of all 20 steps within T(20) = $T20: $out"
out=$(dp_compare_logs "$A/log.jsonl" "$B/log.jsonl" train grad_norm $T20 20)
check $? "global grad norms of all 20 steps within T(20): $out"
python3 - "$A/log.jsonl" "$B/log.jsonl" <<'PY'
import json, sys
v = [{o["step"]: o["val_loss"] for o in map(json.loads, open(p)) if o["kind"] == "val"} for p in sys.argv[1:]]
T = lambda s: (s + 4) * 16 * 2.0 ** -24  # dp_order_tol
print("val losses", v)
sys.exit(0 if sorted(v[0]) == [0, 10, 20] == sorted(v[1]) and v[0][0] == v[1][0] and
         all(abs(v[0][s] - v[1][s]) <= T(s) * v[0][s] for s in v[0]) else 1)
PY
check $? "validation loss independent of the number of ranks (step 0 identical, steps 10 and 20 within T(step))"
out=$(dp_compare_models_rms "$A/model_00000020.bin" "$B/model_00000020.bin" $T20)
check $? "final weights, RMS difference within T(20): $out"
test -f "$B/state_00000020_00000.bin" && test -f "$B/state_00000020_00001.bin" && test "$(ls "$B"/model_* | wc -l)" -eq 1
check $? "each rank wrote its optimizer state, rank 0 the one model file"
MPIRUN 3 $TRAIN "${F[@]}" -d 256 > "$TMP/c.log" 2> "$TMP/c.err"
rc=$?
test $rc -ne 0 && grep -q "not a positive multiple of B\*T\*processes = 4\*32\*3" "$TMP/c.err"
check $? "-d 256 on 3 processes is refused with a clear error (exit $rc)"
