#!/usr/bin/env bash
# dev/test/cli_recompute.sh -- activation checkpointing every k layers (-r 3 --recompute-every k; llmc/gpt2.h,
# gpt2_recompute_window) on the CPU build:
#   - one process, a 4-layer model (L4:C64:NH4:V512 on a shard of random ids < 512 written here, so the vocabulary
#     does not dominate): k = 1 (every block from its input), 3 (segments of 3 and 1 layers) and 4 (= L: one segment,
#     nothing recomputed) train 3 steps bit-identically to -r 0 (the recompute runs the same kernels on the same
#     inputs): the full-precision losses, norms and learning rates of log.jsonl and the final model file, byte for
#     byte; every run's memory ledger line says the ledger equals the allocation; the
#     activation bytes are ordered k=1 < k=3 < k=4 = -r 0 (the table really shrinks);
#   - --recompute-every without -r 3 is refused with one line;
#   - under mpirun (2 processes): tensor parallel with sequence parallelism, a 2-stage 1F1B pipeline with 4
#     micro-batches (k = 1 within each stage's 2 layers), data parallel ZeRO-2 and ZeRO-3 with 2 micro-steps, all
#     k = 1, and ZeRO-3 with k = 2 (each backward recomputes a 2-layer segment, whose forward gathers its layers again
#     while the backward's prefetch holds the other slot) are bit-identical to -r 0 with the same layout (log.jsonl
#     and the final model), ledger equal on every stage;
#   - mixture of experts (every 2nd block, tokens dropped, z-loss): -r 3 with k = 1 and 3 bit-identical to -r 0 in
#     every log.jsonl field (the recompute routes and drops exactly as the forward did; the aux losses are not counted
#     twice), fewer activation bytes, ledger equal; and under mpirun with --ep 2 and with ZeRO-2 on dp 2.
# The emulated GPU build's check is dev/test/cli_recompute_emu.sh. About 15 s on an idle 2-core machine.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi

dp_random_shard "$TMP/v512.bin" 512
R=(-e L4:C64:NH4:V512 -i "$TMP/v512.bin" -j '' -g 0 -b 2 -t 32 -u 1 -l 1e-3 -x 3)

# the step lines without timings, and the allocated activation bytes of the ledger line (empty unless "-> equal")
acts_equal() { grep -E '^memory ledger .* -> equal$' "$1" | sed -E 's/.* \| ([0-9]+) -> equal$/\1/'; }

$TRAIN "${R[@]}" -r 0 -o "$TMP/r0" > "$TMP/r0.txt" 2>&1
test "$(dp_step_lines "$TMP/r0.txt" | grep -c '')" -eq 3
check $? "-r 0 reference: 3 steps of L4:C64:NH4:V512"
declare -A ACTS
ACTS[r0]=$(acts_equal "$TMP/r0.txt")
for k in 1 3 4; do
    $TRAIN "${R[@]}" -r 3 --recompute-every $k -o "$TMP/k$k" > "$TMP/k$k.txt" 2>&1
    out=$(dp_same_training "$TMP/r0" "$TMP/k$k" 3)
    check $? "-r 3 --recompute-every $k vs -r 0: $out"
    ACTS[k$k]=$(acts_equal "$TMP/k$k.txt")
    test -n "${ACTS[k$k]}"
    check $? "-r 3 --recompute-every $k: the memory ledger equals the allocation ($(grep -o 'activations [0-9]*;' "$TMP/k$k.txt"))"
done
test -n "${ACTS[r0]}" && test -n "${ACTS[k1]}" && test -n "${ACTS[k3]}" && \
    test "${ACTS[k1]}" -lt "${ACTS[k3]}" && test "${ACTS[k3]}" -lt "${ACTS[k4]}" && test "${ACTS[k4]}" -eq "${ACTS[r0]}"
check $? "activation bytes allocated: k=1 ${ACTS[k1]} < k=3 ${ACTS[k3]} < k=4 ${ACTS[k4]} = -r 0 ${ACTS[r0]}"
expect_error "flag --recompute-every is 2 with -r 2" "--recompute-every without -r 3" -- $TRAIN "${R[@]}" -r 2 --recompute-every 2

# tensor parallel (sequence parallel), a pipeline, ZeRO-2 (its per-layer gradient hooks run between the recomputes)
# and ZeRO-3 (its per-layer parameter gathers run again for the recomputed segments) on 2 processes: the same layout
# with and without checkpointing
for spec in "1:--tp 2 --sequence-parallel 1" "1:--pp 2 -d 256" "1:-z 2 -d 256" "1:-z 3 -d 256" "2:-z 3 -d 256"; do
    k=${spec%%:*} layout=${spec#*:}
    name=$(echo "$layout" | tr -d ' -')
    for r in 0 3; do
        [ $r = 0 ] && [ -d "$TMP/${name}_0" ] && continue # the same -r 0 reference for k = 1 and 2
        # shellcheck disable=SC2086
        MPIRUN 2 timeout 120 $TRAIN "${R[@]}" $layout -r $r --recompute-every $([ $r = 3 ] && echo $k || echo 1) \
            -o "$TMP/${name}_$r$([ $r = 3 ] && echo "k$k")" > "$TMP/${name}_$r.txt" 2>&1
        echo "rc=$?" >> "$TMP/${name}_$r.txt"
    done
    out=$(dp_same_training "$TMP/${name}_0" "$TMP/${name}_3k$k" 3)
    check $? "2 processes $layout: -r 3 --recompute-every $k vs -r 0: $out ($(grep '^rc=' "$TMP/${name}_3.txt"))"
    n_eq=$(grep -cE '^memory ledger .* -> equal$' "$TMP/${name}_3.txt")
    n_st=$([[ "$layout" == *--pp* ]] && echo 2 || echo 1)
    test "$n_eq" -eq "$n_st"
    check $? "2 processes $layout -r 3: the memory ledger equals the allocation on each of $n_st stage(s) ($n_eq equal lines)"
done

# mixture of experts (llmc/moe.h): a window of MoE and dense-MLP entries (gpt2_moe_entry, gpt2_dense_entry), the
# routing statistics per MoE block. L6 with experts in blocks 1, 3, 5 (--moe-every 2), capacity factor 1.0 (tokens
# dropped: the recomputed routing must drop the same ones) and the z-loss on: k = 1 and 3 (windows with one and two
# MoE blocks) bit-identical to -r 0, every log.jsonl field included (aux loss, load); on 2 processes with --ep 2 (the
# recompute repeats the dispatch and combine all-to-alls: the losses, norms, aux losses and model bit-identical, the
# all-to-all counters larger) and dp 2 with ZeRO-2
ME=(-e L6:C64:NH4:V512:E4:K2 --moe-every 2 --moe-capacity-factor 1.0 --moe-z-coef 0.001)
$TRAIN "${R[@]}" "${ME[@]}" -r 0 -o "$TMP/m0" > "$TMP/m0.txt" 2>&1
for k in 1 3; do
    $TRAIN "${R[@]}" "${ME[@]}" -r 3 --recompute-every $k -o "$TMP/mk$k" > "$TMP/mk$k.txt" 2>&1
    out=$(dp_same_training "$TMP/m0" "$TMP/mk$k" 3) && \
        cmp -s <(grep -v '"config"' "$TMP/m0/log.jsonl" | sed -E 's/"(ms|tokens_per_s)":[^,}]*//g') \
               <(grep -v '"config"' "$TMP/mk$k/log.jsonl" | sed -E 's/"(ms|tokens_per_s)":[^,}]*//g')
    check $? "MoE (E4 K2 every 2, capacity 1.0, z-loss) -r 3 --recompute-every $k vs -r 0: $out; every log.jsonl field but the timings identical"
    test -n "$(acts_equal "$TMP/mk$k.txt")" && test "$(acts_equal "$TMP/mk$k.txt")" -lt "$(acts_equal "$TMP/m0.txt")"
    check $? "MoE -r 3 --recompute-every $k: the memory ledger equals the allocation, below -r 0's ($(acts_equal "$TMP/mk$k.txt") < $(acts_equal "$TMP/m0.txt") bytes)"
done
for layout in "--ep 2" "-z 2 -d 256"; do
    name=$(echo "$layout" | tr -d ' -')
    for r in 0 3; do
        # shellcheck disable=SC2086
        MPIRUN 2 timeout 120 $TRAIN "${R[@]}" "${ME[@]}" $layout -r $r -o "$TMP/m${name}_$r" > "$TMP/m${name}_$r.txt" 2>&1
    done
    out=$(dp_same_training "$TMP/m${name}_0" "$TMP/m${name}_3" 3) && python3 - "$TMP/m${name}_0/log.jsonl" "$TMP/m${name}_3/log.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"train"' in l] for p in sys.argv[1:3])
keys = [k for k in a[0] if k.startswith("moe_")]
ok = len(a) == len(b) == 3 and keys and all(x[k] == y[k] for x, y in zip(a, b) for k in keys)
ok = ok and all(y.get("a2a_rows_sent", 0) >= x.get("a2a_rows_sent", 0) for x, y in zip(a, b))
sys.exit(0 if ok else 1)
PY
    check $? "MoE on 2 processes $layout: -r 3 vs -r 0: $out; the moe_* log fields identical"
done
