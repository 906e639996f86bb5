# dev/test/cli_dp_resume.sh -- checkpoints under ZeRO through the real CLI on 3 ranks (padded shards):
#   - ZeRO-2: 8 steps straight == 4 steps, exit with a checkpoint, resume with -y 1, 4 more steps:
#     identical step lines, bit-identical final model and every rank's optimizer-state shard;
#   - re-sharding: a ZeRO-2 checkpoint of 3 ranks (-d 768: 2 micro-steps each) resumed on 2 ranks with ZeRO-1
#     (3 micro-steps) and on 1 process with ZeRO-0 (6 micro-steps) continues like the straight 3-rank run
#     (same windows in the same global order: the data position is translated; the same per-window gradients
#     summed in another order over ranks and micro-steps): losses of steps 1..8 and the RMS of the final weights
#     within T(8) of dp_lib.sh;
#     pruning the old checkpoint (-nk 1) removes every old rank's state file;
#   - a resume that changes the tokens per optimizer step (-d) is refused with one clear line;
#   - with an epoch ending inside an optimizer step (20-window shard): re-sharding to another process count is
#     refused with one line (the ranks stand at staggered positions), a ZeRO-stage change on the same 3
#     processes continues with the same losses as the straight run (within T(6): the two steps after the
#     resume are ZeRO-2's, which sums over ranks before micro-steps);
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
G=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 8 -d 768)
MPIRUN 3 $TRAIN "${G[@]}" -z 2 -o "$TMP/r3" > "$TMP/r3.log" 2>&1
check $? "re-sharding reference: 3 ranks ZeRO-2, -d 768, 8 steps straight"
MPIRUN 3 $TRAIN "${G[@]}" -z 2 -o "$TMP/x" --exit-after-steps 4 > "$TMP/x.log" 2>&1
check $? "3 ranks ZeRO-2, -d 768: 4 steps, then exit with a checkpoint"
cp -r "$TMP/x" "$TMP/y"; cp -r "$TMP/x" "$TMP/w"
grep -E '^step +[5-8]/8' "$TMP/r3.log" | sed -E 's/ *[|] [0-9.]+ ms.*//' > "$TMP/r3.steps"
for run in "x 2 1" "y 1 0"; do
    set -- $run
    MPIRUN $2 $TRAIN "${G[@]}" -z $3 -o "$TMP/$1" -y 1 -nk 1 > "$TMP/$1.resume.log" 2>&1
    check $? "resume the 3-rank ZeRO-2 checkpoint on $2 process(es) with ZeRO-$3"
    test -f "$TMP/$1/DONE_00000008" && test -z "$(ls "$TMP/$1" | grep '_00000004')"
    check $? "$2 process(es): keeping 1 checkpoint removes all of step 4, including the 3 old ranks' states"
    grep -q "resume: checkpoint step 4 was written by 3 processes with ZeRO stage 2; re-sharding the optimizer state for $2 processes with ZeRO stage $3" "$TMP/$1.resume.log"
    check $? "$2 process(es): the re-sharding is announced"
    out=$(dp_compare_logs "$TMP/r3/log.jsonl" "$TMP/$1/log.jsonl" train loss $(dp_order_tol 8) 8)
    check $? "$2 process(es), ZeRO-$3: losses of steps 1..8 vs the straight 3-rank run: $out"
    out=$(dp_compare_models_rms "$TMP/r3/model_00000008.bin" "$TMP/$1/model_00000008.bin" $(dp_order_tol 8))
    check $? "$2 process(es), ZeRO-$3: final weights vs the straight 3-rank run: $out"
done
MPIRUN 2 $TRAIN "${G[@]}" -z 1 -d 512 -o "$TMP/w" -y 1 > "$TMP/w.log" 2> "$TMP/w.err"
rc=$?
test $rc -ne 0 && test "$(grep -c '^error:' "$TMP/w.err")" -eq 1 && grep -q "tokens per optimizer step" "$TMP/w.err"
check $? "re-sharding with another -d refused with one line (exit $rc): $(grep '^error:' "$TMP/w.err" | head -c 200)"
mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS -np 1 $TRAIN "${F[@]}" : -np 1 $TRAIN "${F[@]}" -l 2e-3 \
    > "$TMP/e.log" 2> "$TMP/e.err"
rc=$?
test $rc -ne 0 && test "$(grep -c '^error:' "$TMP/e.err")" -eq 1 && grep -q "started with a different configuration" "$TMP/e.err" && ! grep -q "^step" "$TMP/e.log"
check $? "ranks started with different flags refused before training, one line (exit $rc): $(grep '^error:' "$TMP/e.err" | head -c 160)"
# an epoch that ends inside an optimizer step (a 20-window shard, 3 ranks x 4 micro-steps = 12 windows per
# step): the ranks then stand at staggered positions, so re-sharding to 2 processes is refused (one line),
# while a change of the ZeRO stage alone keeps every rank's own position and continues like the straight run
python3 - "$TMP/short.bin" <<'PY'
import struct, sys
src = open("dev/data/tinyshakespeare/tiny_shakespeare_train.bin", "rb").read()
n = 20 * 128 + 1
hdr = [0] * 256; hdr[0], hdr[1], hdr[2] = 20240520, 1, n
open(sys.argv[1], "wb").write(struct.pack("<256i", *hdr) + src[1024:1024 + 2 * n])
PY
H=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 6 -d 1536 -i "$TMP/short.bin")
MPIRUN 3 $TRAIN "${H[@]}" -z 1 -o "$TMP/e1" > "$TMP/e1.log" 2>&1
check $? "20-window shard, 3 ranks ZeRO-1 x 4 micro-steps: 6 steps straight (epochs end inside steps)"
MPIRUN 3 $TRAIN "${H[@]}" -z 1 -o "$TMP/e2" --exit-after-steps 4 > "$TMP/e2.log" 2>&1
check $? "the same, 4 steps and exit with a checkpoint"
MPIRUN 2 $TRAIN "${H[@]}" -z 1 -o "$TMP/e2" -y 1 > "$TMP/e2b.log" 2> "$TMP/e2b.err"
rc=$?
test $rc -ne 0 && test "$(grep -c '^error:' "$TMP/e2b.err")" -eq 1 && grep -q "stood at different data positions\|is not a multiple" "$TMP/e2b.err"
check $? "re-sharding 3 -> 2 processes at staggered positions refused with one line (exit $rc): $(grep '^error:' "$TMP/e2b.err" | head -c 160)"
MPIRUN 3 $TRAIN "${H[@]}" -z 2 -o "$TMP/e2" -y 1 > "$TMP/e2c.log" 2>&1
check $? "the same checkpoint resumed by 3 processes with -z 2 (only the ZeRO stage changes)"
out=$(dp_compare_logs "$TMP/e1/log.jsonl" "$TMP/e2/log.jsonl" train loss $(dp_order_tol 6) 6)
check $? "ZeRO-1 -> ZeRO-2 on 3 processes: losses of all 6 steps vs the straight run: $out"
