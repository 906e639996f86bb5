# dev/test/cli_crash_safety.sh -- kill -9 while checkpoints are being written (checkpoint every step, -n 1):
#   - 20 times: a run (resuming with -y 1 after the first) is killed with SIGKILL at a random moment: 0-0.29 s after
#     a temp file of a checkpoint write appeared in the output directory, at the next moment (polled every few ms)
#     a checkpoint file is being written (a temp file exists): while the model, a state file or the DONE marker is
#     written, fsynced or renamed, or old checkpoints pruned;
#   - after every kill the next run trains, resuming from the newest complete checkpoint (the newest DONE marker; it
#     prints "resume: continuing from step N" for exactly that N; a kill during the first checkpoint leaves none,
#     and the next run starts from step 0) and the leftover temp files are removed;
#   - at least half the kills landed inside a checkpoint write (temp files or files of a step newer than the newest
#     DONE left behind), so the test exercises what it claims;
#   - the final resume runs to the end and leaves only the newest -nk 2 complete checkpoints (pruning leaked nothing:
#     a prune killed between removing a marker and the files leaves them to the next prune);
#   - the whole chain's train records (loss, grad norm, lr of every step) and
#     final model are bit-identical to an uninterrupted run.
# Every other run is killed only after it completed a checkpoint of its own, so at least 8 of the runs after it
# resume from a DONE checkpoint (the others may be killed inside their first write and start from the last DONE).
# About 15 s on 2 cores (d2, B=2, T=16, 30 steps; one process: the write path is the same for every rank).
source "$(dirname "$0")/dp_lib.sh"
export OMP_NUM_THREADS=1
F=(-e d2 -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 30 -nk 2)
STEPS=30
RANDOM=$$
D="$TMP/chain"
newest_done() { ls "$1" 2> /dev/null | sed -n 's/^DONE_0*\([0-9]\+\)$/\1/p' | sort -n | tail -1; }
newest_file_step() { ls "$1" 2> /dev/null | sed -n 's/^\(model\|state\)_0*\([0-9]\+\).*/\2/p' | sort -n | tail -1; }

$TRAIN "${F[@]}" -o "$TMP/ref" > "$TMP/ref.log" 2>&1
check $? "uninterrupted reference run of $STEPS steps"
resume=()
kills=0; hits=0; resumed=0; bad=""
for k in $(seq 1 20); do
    before=$(newest_done "$D")
    [ -n "$before" ] && [ "$before" -ge $((STEPS - 2)) ] && break
    rm -f "$TMP/run.log" # (the shell truncates it in the child: the loop below must not read the last run's)
    $TRAIN "${F[@]}" -n 1 -o "$D" "${resume[@]}" > "$TMP/run.log" 2>&1 &
    p=$!
    # wait for a checkpoint write of this run (a temp file), then kill at a random moment of it
    until ! kill -0 $p 2> /dev/null || { grep -qs "^step" "$TMP/run.log" && compgen -G "$D/*.tmp" > /dev/null; }; do
        sleep 0.005
    done
    # every other run first completes a checkpoint of its own, so the chain advances and later runs resume from it
    if [ $((k % 2)) -eq 1 ]; then
        until ! kill -0 $p 2> /dev/null || [ "$(newest_done "$D")" -gt "${before:--1}" ] 2> /dev/null; do sleep 0.005; done
    fi
    sleep "0.$((RANDOM % 25 / 10))$((RANDOM % 10))"  # 0 to 0.29 s: sometimes a checkpoint completes first
    until ! kill -0 $p 2> /dev/null || compgen -G "$D/*.tmp" > /dev/null; do sleep 0.002; done # inside a write
    kill -9 $p 2> /dev/null
    wait $p 2> /dev/null
    kills=$((kills + 1))
    if ! grep -q "^step" "$TMP/run.log"; then
        bad="$bad; run $k trained no step: $(tail -c 400 "$TMP/run.log" | tr '\n' ' ')"
    elif [ -n "$before" ] && ! grep -q "^resume: continuing from step $before of" "$TMP/run.log"; then
        bad="$bad; run $k did not resume from step $before (the newest DONE): $(grep -m2 'error\|resume' "$TMP/run.log" | tr '\n' ' ')"
    elif [ -n "$before" ]; then
        resumed=$((resumed + 1))
    fi
    done_now=$(newest_done "$D")
    newest=$(newest_file_step "$D")
    if compgen -G "$D/*.tmp" > /dev/null || [ "${newest:-0}" -gt "${done_now:-0}" ]; then hits=$((hits + 1)); fi
    resume=(-y 1)
done
test -z "$bad" && test $kills -ge 15 && test $resumed -ge 8
check $? "$kills runs killed with SIGKILL; each next run trained, $resumed of them resumed from the newest DONE checkpoint$bad"
test $hits -ge $((kills / 2))
check $? "$hits of $kills kills landed inside a checkpoint write (temp files or an unmarked newer step left behind)"
from=$(newest_done "$D")
$TRAIN "${F[@]}" -o "$D" -y 1 > "$TMP/last.log" 2>&1  # (without -n 1: only the final checkpoint)
check $? "the last resume (from step $from) runs to step $STEPS"
! compgen -G "$D/*.tmp" > /dev/null
check $? "no temp file is left after a completed run"
# pruning leaks nothing, whatever the kills interrupted (a prune killed between removing a marker and the files
# leaves files the next prune must remove): only the -nk 2 newest complete checkpoints' files remain
dones=$(ls "$D" | sed -n 's/^DONE_0*\([0-9]\+\)$/\1/p' | sort -n | tr '\n' ' ')
orphans=$(ls "$D" | sed -n 's/^\(model\|state\)_0*\([0-9]\+\).*/\2/p' | sort -un | while read -r st; do
    [ -f "$D/DONE_$(printf %08d "$st")" ] || echo -n "$st "; done)
test "$(echo $dones | wc -w)" -le 2 && test -z "$orphans"
check $? "after the chain only the newest -nk 2 complete checkpoints remain (DONE: $dones; steps without a marker: ${orphans:-none})"
out=$(dp_same_training "$TMP/ref" "$D" $STEPS)
check $? "losses, norms and lr of all $STEPS steps and the final model bit-identical to the uninterrupted run: $out"
