# dev/test/cli_bad_input.sh -- bad input gets one clear stderr line and a non-zero exit (no crash, no
# assert, no silent default), and nothing the user had is overwritten.
source "$(dirname "$0")/lib_cli.sh"
VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin

expect_error "unknown flag" "unknown flag" -- $TRAIN -bogus 1
expect_error "--batch-size" "misspelled flag suggests the right one" -- $TRAIN --batch-sise 4
expect_error "-b" "missing value" -- $TRAIN -b
expect_error "abc" "non-numeric value" -- $TRAIN -b abc
expect_error "4x" "trailing garbage in a number" -- $TRAIN -b 4x
expect_error "1e-3x" "non-numeric float" -- $TRAIN -l 1e-3x
expect_error "-b" "negative batch size" -- $TRAIN -b -4
expect_error "-t" "zero sequence length" -- $TRAIN -t 0
expect_error "context length" "T above the model's context" -- $TRAIN -e d2 -t 1000
expect_error "-d" "total batch not divisible by B*T" -- $TRAIN "${FAST[@]}" -d 1000
expect_error "positional" "stray positional argument" -- $TRAIN "${FAST[@]}" extra
expect_error "/nonexistent" "missing shard" -- $TRAIN "${FAST[@]}" -i "/nonexistent/shard_*.bin"
head -c 2000 $VAL > "$TMP/truncated.bin"
expect_error "truncated.bin" "truncated shard" -- $TRAIN "${FAST[@]}" -i "$TMP/truncated.bin"
python3 -c "
import struct,sys
h=[0]*256; h[0]=20240520; h[1]=1; h[2]=50
open('$TMP/short.bin','wb').write(struct.pack('<256i',*h)+bytes(100))
h[0]=12345; h[2]=20000
open('$TMP/badmagic.bin','wb').write(struct.pack('<256i',*h)+bytes(40000))
h[0]=20240520; h[1]=9
open('$TMP/badversion.bin','wb').write(struct.pack('<256i',*h)+bytes(40000))
"
expect_error "short.bin" "shard too short for one batch names the file and count" -- $TRAIN "${FAST[@]}" -i "$TMP/short.bin"
expect_error "magic" "shard with the wrong magic" -- $TRAIN "${FAST[@]}" -i "$TMP/badmagic.bin"
expect_error "version" "shard with the wrong version" -- $TRAIN "${FAST[@]}" -i "$TMP/badversion.bin"
expect_error "neither a model descriptor" "unknown model descriptor / missing model file" -- $TRAIN -e d3
python3 -c "
import struct
d=open('dev/test/fixtures/gpt2_fixture_model.bin','rb').read()
h=list(struct.unpack('<256i',d[:1024]))
h[1]=4
open('$TMP/model_v4.bin','wb').write(struct.pack('<256i',*h)+d[1024:])
open('$TMP/model_trunc.bin','wb').write(d[:len(d)//2])
h[1]=3; h[0]=1
open('$TMP/model_magic.bin','wb').write(struct.pack('<256i',*h)+d[1024:])
h=list(struct.unpack('<256i',d[:1024])); h[4]=100000
open('$TMP/model_huge.bin','wb').write(struct.pack('<256i',*h)+d[1024:])
"
expect_error "version 4" "model file with the wrong version" -- $TRAIN -e "$TMP/model_v4.bin"
expect_error "magic" "model file with the wrong magic" -- $TRAIN -e "$TMP/model_magic.bin"
expect_error "bytes" "truncated model file" -- $TRAIN -e "$TMP/model_trunc.bin"
expect_error "model_huge.bin' has" "model file whose header claims 100000 layers: the size check names the file (before any allocation)" -- $TRAIN -e "$TMP/model_huge.bin"
# the decoder family's model file (version 9, llmc/model_file.h): each architecture field is range-checked on read,
# and a knob not built yet is refused with the trainer's one line (the committed fixture: RMSNorm, rope, SwiGLU, ...)
python3 -c "
import struct
d=open('dev/test/fixtures/family_fixture_model.bin','rb').read()
for name, kv in (('mlp', {15: 7}), ('kv', {17: 3}), ('theta', {14: 0}), ('qknorm', {20: 2}),
                 ('ln_nobias', {12: 0})):
    h=list(struct.unpack('<256i',d[:1024]))
    for i, v in kv.items(): h[i]=v
    open('$TMP/family_'+name+'.bin','wb').write(struct.pack('<256i',*h)+d[1024:])
"
expect_error "invalid architecture header: mlp" "family model file with mlp = 7: the field is named" -- $TRAIN -e "$TMP/family_mlp.bin" -x 1
expect_error "invalid architecture header: key/value heads" "family model file with 3 kv heads for NH=4 is refused" -- $TRAIN -e "$TMP/family_kv.bin" -x 1
expect_error "invalid architecture header: rope theta" "family model file with theta 0 is refused" -- $TRAIN -e "$TMP/family_theta.bin" -x 1
expect_error "invalid architecture header: bias / tied / qknorm" "family model file with qknorm = 2 is refused" -- $TRAIN -e "$TMP/family_qknorm.bin" -x 1
expect_error "bias=0 with LayerNorm" "family model file of LayerNorm without bias (not built): one line naming the knob" -- $TRAIN -e "$TMP/family_ln_nobias.bin" -x 1
expect_error "--lr-schedule" "unknown learning-rate schedule" -- $TRAIN "${FAST[@]}" -k sawtooth
expect_error "output directory" "output directory that cannot be created" -- $TRAIN "${FAST[@]}" -x 1 -o /dev/null/out
expect_error "-o" "resume without an output directory" -- $TRAIN "${FAST[@]}" -y 1

# missing tokenizer: training still runs, sampling says why it is off
$TRAIN "${FAST[@]}" -x 2 -g 8 --tokenizer "$TMP/none.bin" > "$TMP/tok.out" 2> "$TMP/tok.err"
rc=$?
check $(( rc != 0 )) "missing tokenizer: training still runs (exit $rc)"
grep -qi "tokenizer" "$TMP/tok.err" "$TMP/tok.out"
check $? "missing tokenizer: a message says why decoding is off"

# a fresh run never overwrites an earlier run's checkpoints
D="$TMP/run"
$TRAIN "${FAST[@]}" -x 2 -o "$D" > /dev/null 2>&1
sum_before=$(cat "$D"/* | sha256sum)
expect_error "already holds checkpoints" "fresh run into a directory with checkpoints is refused" -- $TRAIN "${FAST[@]}" -x 2 -o "$D"
check $([ "$(cat "$D"/* | sha256sum)" = "$sum_before" ]; echo $?) "...and nothing in it changed"
# resume with another configuration is refused, naming the field
expect_error "micro-batch B" "resume with a different -b is refused" -- $TRAIN "${FAST[@]}" -b 2 -x 4 -o "$D" -y 1
expect_error "L" "resume with a different model is refused" -- $TRAIN -e d4 -b 4 -t 32 -j '' -g 0 -x 4 -o "$D" -y 1
# resume from a weights-only directory is refused
W="$TMP/weights_only"; mkdir -p "$W"; cp "$D/model_00000002.bin" "$W/"
expect_error "weights-only" "resume from weights only is refused" -- $TRAIN "${FAST[@]}" -x 4 -o "$W" -y 1

# full disk during a checkpoint: the temp file is removed, the previous checkpoint survives
F="$TMP/full"
$TRAIN "${FAST[@]}" -x 4 -n 2 -o "$F" > /dev/null 2>&1
sum_before=$(cat "$F/model_00000004.bin" "$F/state_00000004_00000.bin" | sha256sum)
( ulimit -f 8000; exec $TRAIN "${FAST[@]}" -x 6 -n 2 -o "$F" -y 1 ) > "$TMP/full.out" 2> "$TMP/full.err"
rc=$?
check $(( rc == 0 || rc >= 128 )) "write failure during a checkpoint exits non-zero without a crash (exit $rc: $(head -c 300 "$TMP/full.err"))"
test "$(grep -c '' "$TMP/full.err")" -eq 1 && grep -q "^error: .*temp file removed" "$TMP/full.err"
check $? "...with one error line saying the temp file was removed"
ls "$F" | grep -q '\.tmp$'
check $(( $? == 0 )) "...no .tmp file is left behind ($(ls "$F" | tr '\n' ' '))"
test "$(cat "$F/model_00000004.bin" "$F/state_00000004_00000.bin" | sha256sum)" = "$sum_before" && test -f "$F/DONE_00000004" && test ! -f "$F/DONE_00000006"
check $? "...the previous checkpoint (step 4) is intact and the failed one is not marked complete"

# a state file that does not hold the step its name says (renamed or copied over) is refused
R="$TMP/renamed"
$TRAIN "${FAST[@]}" -x 4 -n 2 -o "$R" > /dev/null 2>&1
cp "$R/state_00000002_00000.bin" "$R/state_00000004_00000.bin"
expect_error "holds step 2, but its name says step 4" "a state file holding another step than its name is refused" -- $TRAIN "${FAST[@]}" -x 6 -o "$R" -y 1

# flags whose value passes the range check but makes no sense
expect_error "-x (--max-steps) is 0" "-x 0 without -h 1 is refused naming the flag" -- $TRAIN "${FAST[@]}" -x 0
expect_error "-m (--val-max-steps) is 0" "-m 0 (evaluate nothing) is refused" -- $TRAIN -e d2 -b 4 -t 32 -g 0 -x 1 -m 0
expect_error "characters long" "an output path too long for checkpoint names is refused" -- $TRAIN "${FAST[@]}" -x 1 -o "$TMP/$(printf 'd%.0s' $(seq 1 950))"
# two runs can never write into the same output directory at once
L="$TMP/locked"
$TRAIN -e d2 -b 4 -t 32 -j '' -g 0 -x 400 -o "$L" > /dev/null 2>&1 &
pid=$!
for i in $(seq 1 50); do grep -q '"kind":"train"' "$L/log.jsonl" 2> /dev/null && break; sleep 0.2; done
expect_error "in use by another running training process" "a second run into a directory in use is refused" -- $TRAIN "${FAST[@]}" -x 2 -o "$L" -y 1
kill $pid 2> /dev/null; wait $pid 2> /dev/null
# resume with another seed or other training data is refused; -x below the checkpoint step too
expect_error "seed" "resume with a different --seed is refused" -- $TRAIN "${FAST[@]}" -x 4 -o "$D" -y 1 --seed 7
cp dev/data/tinyshakespeare/tiny_shakespeare_val.bin "$TMP/other_train.bin"
expect_error "other data" "resume with different training data is refused" -- $TRAIN "${FAST[@]}" -x 4 -o "$D" -y 1 -i "$TMP/other_train.bin"
expect_error "nothing is left to do" "resume with -x at or below the checkpoint step is refused" -- $TRAIN "${FAST[@]}" -x 2 -o "$D" -y 1
# --cuda-graphs 1 needs the CUDA backend (the multi-process refusal is in cli_dp_fail.sh)
expect_error "--cuda-graphs 1 needs the CUDA build" "--cuda-graphs 1 on the CPU build is refused" -- $TRAIN "${FAST[@]}" -x 1 --cuda-graphs 1

# a FIFO (or any file that is not a regular file) named as an input is refused at once, never waited on in open():
# each run gets 30 s (timeout), so a regression fails here instead of hanging the suite
mkfifo "$TMP/fifo"
T30=(timeout -k 5 30)
expect_error "not a regular file but a FIFO" "a FIFO as the model file (-e) is refused" -- \
    "${T30[@]}" $TRAIN "${FAST[@]}" -x 1 -e "$TMP/fifo"
expect_error "not a regular file but a FIFO" "a FIFO as a training shard (-i) is refused" -- \
    "${T30[@]}" $TRAIN "${FAST[@]}" -x 1 -i "$TMP/fifo"
expect_error "not a regular file but a FIFO" "a FIFO as a validation shard (-j) is refused" -- \
    "${T30[@]}" $TRAIN "${FAST[@]}" -x 1 -j "$TMP/fifo"
"${T30[@]}" $TRAIN "${FAST[@]}" -x 1 -g 8 --tokenizer "$TMP/fifo" > "$TMP/tok.out" 2> "$TMP/tok.err"
rc=$?
test $rc -eq 0 && grep -q "not a regular file but a FIFO" "$TMP/tok.err" "$TMP/tok.out"
check $? "a FIFO as the tokenizer: refused with a message, training still runs (exit $rc)"
P="$TMP/fifo_state"
$TRAIN "${FAST[@]}" -x 2 -o "$P" > /dev/null 2>&1
mv "$P/state_00000002_00000.bin" "$TMP/state.keep" && mkfifo "$P/state_00000002_00000.bin"
expect_error "not a regular file but a FIFO" "a FIFO as the state file of the checkpoint resumed is refused" -- \
    "${T30[@]}" $TRAIN "${FAST[@]}" -x 4 -o "$P" -y 1
rm "$P/state_00000002_00000.bin" && mv "$TMP/state.keep" "$P/state_00000002_00000.bin"
rm "$P/DONE_00000002" && mkfifo "$P/DONE_00000002"
expect_error "not a regular file but a FIFO" "a FIFO as the checkpoint's DONE marker is refused" -- \
    "${T30[@]}" $TRAIN "${FAST[@]}" -x 4 -o "$P" -y 1
mkdir -p "$TMP/fifo_log" && mkfifo "$TMP/fifo_log/log.jsonl"
expect_error "not a regular file but a FIFO" "a FIFO in place of the output directory's log.jsonl is refused" -- \
    "${T30[@]}" $TRAIN "${FAST[@]}" -x 1 -o "$TMP/fifo_log"
expect_error "flag -i (--train-data) is empty" "-i '' is refused naming the flag" -- $TRAIN "${FAST[@]}" -x 1 -i ''
# a model shape whose sizes do not fit (4C and the parameter count overflow) is refused with one line before any
# arithmetic on it (the sanitizer tier runs this on the UBSan build: no signed overflow on the way)
expect_error "more than the 2^48 this trainer can size" "a model shape too large to size (L1:C600000000:NH1:E1:K1) is refused" -- \
    $TRAIN -e L1:C600000000:NH1:E1:K1 -b 1 -t 8 -j '' -g 0 -x 1
expect_error "more than the 2^48 this trainer can size" "a model shape too large to size (L1000000000:C1000000:NH1) is refused" -- \
    $TRAIN -e L1000000000:C1000000:NH1 -b 1 -t 8 -j '' -g 0 -x 1
# the token arithmetic of the trainer and the planner (train_config_layout): a micro-batch of more than 2^31-1 tokens
# is refused before any product of it
expect_error "tokens per micro-batch; expected at most 2147483647" "--plan 1 -b 2147483647 -t 2147483647 is refused with one line" -- \
    $TRAIN --plan 1 -b 2147483647 -t 2147483647
expect_error "tokens per micro-batch; expected at most 2147483647" "--plan 1 -b 65536 -t 32768 --tp 2 --sequence-parallel 1 is refused" -- \
    $TRAIN --plan 1 -b 65536 -t 32768 --tp 2 --sequence-parallel 1
expect_error "tokens per micro-batch; expected at most 2147483647" "the trainer with -b 65536 -t 32768 is refused with one line" -- \
    $TRAIN -b 65536 -t 32768 -j '' -g 0 -x 1
# a planner flag (the cluster or the search of --plan) on a training run is refused, not silently ignored
expect_error "flag --gpus is a planner flag" "--gpus 16 without --plan is refused naming the flag" -- \
    $TRAIN "${FAST[@]}" --gpus 16 -x 1
expect_error "flag --device is a planner flag" "--device b200 without --plan is refused naming the flag" -- \
    $TRAIN "${FAST[@]}" --device b200 -x 1
