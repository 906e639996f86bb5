# dev/test/cli_dp_resume.sh -- checkpoints under ZeRO through the real CLI on 3 ranks (padded shards):
#   - ZeRO-2: 8 steps straight == 4 steps, exit with a checkpoint, resume with -y 1, 4 more steps:
#     identical step lines, bit-identical final model and every rank's optimizer-state shard;
#   - resume with another number of processes or another ZeRO stage is refused with one clear line
#     (re-sharding is not supported);
#   - processes started with different flags are refused at start (configuration hash).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
F=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 8 -z 2)
A="$TMP/straight"; B="$TMP/resumed"
MPIRUN 3 $TRAIN "${F[@]}" -o "$A" > "$TMP/a.log" 2>&1
check $? "3 ranks ZeRO-2: 8 steps straight"
MPIRUN 3 $TRAIN "${F[@]}" -o "$B" --exit-after-steps 4 > "$TMP/b1.log" 2>&1
check $? "3 ranks ZeRO-2: 4 steps, then exit with a checkpoint"
test -f "$B/DONE_00000004" && test -f "$B/state_00000004_00002.bin" && test ! -f "$B/state_00000004_00003.bin"
check $? "checkpoint 4 holds one optimizer shard per rank and the DONE marker"
MPIRUN 3 $TRAIN "${F[@]}" -o "$B" -y 1 > "$TMP/b2.log" 2>&1
check $? "3 ranks ZeRO-2: resume with -y 1"
grep -E '^step +[5-8]/8' "$TMP/a.log" | sed -E 's/[|] [0-9.]+ ms.*//' > "$TMP/a.steps"
grep -E '^step +[5-8]/8' "$TMP/b2.log" | sed -E 's/[|] [0-9.]+ ms.*//' > "$TMP/b.steps"
test "$(wc -l < "$TMP/a.steps")" -eq 4 && cmp -s "$TMP/a.steps" "$TMP/b.steps"
check $? "steps 5..8: identical loss, norm and lr lines"
cmp -s "$A/model_00000008.bin" "$B/model_00000008.bin"
check $? "final weights bit-identical"
ok=0
for r in 0 1 2; do
    f=$(printf "state_00000008_%05d.bin" $r)
    cmp -s "$A/$f" "$B/$f" || ok=1
done
check $ok "every rank's final optimizer shard bit-identical"
MPIRUN 2 $TRAIN "${F[@]}" -o "$B" -y 1 -x 12 > "$TMP/c.log" 2> "$TMP/c.err"
rc=$?
test $rc -ne 0 && test "$(grep -c '^error:' "$TMP/c.err")" -eq 1 && grep -q "written by 3 processes.*re-sharding the optimizer state is not supported" "$TMP/c.err"
check $? "resume on 2 processes refused with one line (exit $rc): $(grep '^error:' "$TMP/c.err" | head -c 200)"
MPIRUN 3 $TRAIN "${F[@]}" -z 1 -o "$B" -y 1 -x 12 > "$TMP/d.log" 2> "$TMP/d.err"
rc=$?
test $rc -ne 0 && grep -q "ZeRO stage 2.*re-sharding" "$TMP/d.err"
check $? "resume with -z 1 of a ZeRO-2 checkpoint refused (exit $rc)"
mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS -np 1 $TRAIN "${F[@]}" : -np 1 $TRAIN "${F[@]}" -l 2e-3 \
    > "$TMP/e.log" 2> "$TMP/e.err"
rc=$?
test $rc -ne 0 && test "$(grep -c '^error:' "$TMP/e.err")" -eq 1 && grep -q "started with a different configuration" "$TMP/e.err" && ! grep -q "^step" "$TMP/e.log"
check $? "ranks started with different flags refused before training, one line (exit $rc): $(grep '^error:' "$TMP/e.err" | head -c 160)"
