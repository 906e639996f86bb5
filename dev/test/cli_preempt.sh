# dev/test/cli_preempt.sh -- --signal-checkpoint (llmc/preempt.h) through the real CLI, 1 and 3 processes:
#   - a chain of runs, each signalled (SIGTERM / SIGUSR1 in turn) once the log reaches a random step, then resumed
#     with -y 1, up to 5 signals per process count (at least 4; 10 when the random steps leave room); with 3
#     processes each signal goes to ONE random rank (or, once, SIGUSR1 to mpirun, which forwards it to every rank),
#     so the ranks must agree through the all-reduce;
#   - every signalled run exits 0 with the "preempted: ... resume with" line, after writing a complete checkpoint
#     (DONE marker and every rank's state file) at the step it stopped;
#   - the chain's train records (loss, grad norm, lr at every step of log.jsonl) and final model are bit-identical to
#     an uninterrupted run of the same flags: every resume continued exactly;
#   - --signal-checkpoint none: SIGTERM stops the run at once without a checkpoint (the default effect);
#   - a bad --signal-checkpoint value is refused with one line.
# Runs in about 20 s on 2 cores (d2, B=2, T=16, 16 steps).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
F=(-e d2 -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -x 16 -d 96)
STEPS=16
RANDOM=$$

# the number of train records in DIR/log.jsonl (after a resume: the steps done so far, the log is truncated)
log_steps() { if [ -f "$1/log.jsonl" ]; then grep -c '^{"kind":"train"' "$1/log.jsonl"; else echo 0; fi; }
newest_done() { ls "$1" 2> /dev/null | sed -n 's/^DONE_0*\([0-9]\+\)$/\1/p' | sort -n | tail -1; }

for np in 1 3; do
    launch=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np $np $TRAIN)
    [ "$np" -eq 1 ] && launch=(env OMP_NUM_THREADS=1 $TRAIN) # signalled directly (mpirun exits 1 after a SIGTERM)
    REF="$TMP/ref$np"; CH="$TMP/chain$np"
    "${launch[@]}" "${F[@]}" -o "$REF" > "$TMP/ref$np.log" 2>&1
    check $? "$np process(es): uninterrupted reference run of $STEPS steps"
    resume=()
    signals=0
    ok=1
    detail=""
    for k in 1 2 3 4 5; do
        now=$(log_steps "$CH")
        target=$((now + 1 + RANDOM % 2))
        [ "$target" -ge $((STEPS - 2)) ] && break
        sig=$([ $((k % 2)) -eq 1 ] && echo TERM || echo USR1)
        "${launch[@]}" "${F[@]}" -o "$CH" "${resume[@]}" > "$TMP/run.log" 2>&1 &
        mp=$!
        while kill -0 $mp 2> /dev/null && [ "$(log_steps "$CH")" -lt "$target" ]; do sleep 0.03; done
        who="mpirun"
        if [ "$np" -eq 1 ]; then
            kill -$sig $mp 2> /dev/null
            who="the process"
        elif [ "$k" -eq 4 ]; then
            sig=USR1
            kill -USR1 $mp 2> /dev/null           # OpenMPI's mpirun forwards SIGUSR1 to every rank
            who="mpirun (forwarded to every rank)"
        else
            pids=($(pgrep -P $mp))
            r=$((RANDOM % ${#pids[@]}))
            kill -$sig "${pids[$r]}" 2> /dev/null
            who="rank pid ${pids[$r]} of ${#pids[@]}"
        fi
        wait $mp
        rc=$?
        stop=$(newest_done "$CH")
        states=$(ls "$CH" | grep -c "^state_$(printf %08d "${stop:-0}")_")
        if [ $rc -ne 0 ] || ! grep -q "^preempted: .* stopped after step $stop .*resume with the same command and -y 1" "$TMP/run.log" ||
           [ "$states" -ne "$np" ]; then
            ok=0
            detail="$detail; signal $k (SIG$sig at step >= $target to $who): exit $rc, checkpoint ${stop:-none} with $states state files: $(grep -v '^step' "$TMP/run.log" | tail -3 | tr '\n' ' ')"
        else
            detail="$detail SIG$sig@$target->$stop"
        fi
        signals=$((signals + 1))
        resume=(-y 1)
    done
    test $ok -eq 1 && test $signals -ge 4
    check $? "$np process(es): $signals signals at random steps, each run stopped after its step with a complete checkpoint and exit 0:$detail"
    "${launch[@]}" "${F[@]}" -o "$CH" -y 1 > "$TMP/last$np.log" 2>&1
    check $? "$np process(es): the last resume runs to step $STEPS"
    out=$(dp_same_training "$REF" "$CH" $STEPS)
    check $? "$np process(es): losses, norms and lr of all $STEPS steps and the final model bit-identical to the uninterrupted run: $out"
done

# --signal-checkpoint none: SIGTERM has its default effect (no checkpoint)
$TRAIN "${F[@]}" -x 400 -o "$TMP/none" --signal-checkpoint none > "$TMP/none.log" 2>&1 &
p=$!
while kill -0 $p 2> /dev/null && [ "$(log_steps "$TMP/none")" -lt 1 ]; do sleep 0.02; done
kill -TERM $p
wait $p
rc=$?
test $rc -eq 143 && test -z "$(newest_done "$TMP/none")"
check $? "--signal-checkpoint none: SIGTERM stops the run at once (exit $rc), no checkpoint"
expect_error "signal-checkpoint" "a bad --signal-checkpoint value is refused" -- $TRAIN "${F[@]}" -o "$TMP/bad" --signal-checkpoint term,hup

# a SIGTERM during start-up (here once the output directory's lock exists: flags parsed, model and data not yet
# built) is recorded: the run stops after its first step with a checkpoint and exit 0, not with status 143
S="$TMP/startup"
env OMP_NUM_THREADS=1 $TRAIN "${F[@]}" -o "$S" > "$TMP/startup.log" 2>&1 &
p=$!
until [ -e "$S/.lock" ] || ! kill -0 $p 2> /dev/null; do sleep 0.002; done
kill -TERM $p
wait $p
rc=$?
test $rc -eq 0 && grep -q "^preempted: SIGTERM received; stopped after step 1 " "$TMP/startup.log" && test -f "$S/DONE_00000001"
check $? "SIGTERM during start-up: the run stops after step 1 with a checkpoint and exit 0 (exit $rc)"
