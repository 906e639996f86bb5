# dev/test/cli_zero3_tp.sh -- ZeRO-3 inside tensor-parallel groups (FSDP-in-TP, torchtitan's 2D layout; llmc/README.md,
# "ZeRO and the gradient store"): each tp rank's part of the model is sharded over its data-parallel group and gathered
# layer by layer. The model L3:C64:NH4:T48 has P = 1,688,480 parameters per tp rank at tp 2 (computed below from the
# sharding table's rules, not read from the trainer), even over dp 2 and uneven over dp 3 (padding 1), 3 layers so the
# two working slots are reused. Tolerances: the argument in dp_lib.sh.
#   - tp 2 x dp 2 (1 and 2 micro-steps) and tp 2 x dp 3: -z 3 trains exactly as -z 2 (ZeRO-3 is ZeRO-2's arithmetic
#     with gathered parameters: identical step records, final model file bit for bit; a gather of the wrong tp
#     part or a model file assembled from the working buffer fails it); also with sequence parallelism, -r 3,
#     validation and samples, and with --optimizer muon and --offload-params cpu;
#   - 2 micro-steps: against one process within T(4) (losses, norms, weights);
#   - the memory ledger equals the allocation; each rank's data-parallel bytes per micro-step are 3 (N-1)/N x 4P
#     (two all-gathers and a reduce-scatter of the tp rank's part) within 256 bytes per collective;
#   - checkpoints: resumed at -z 3 on the same layout (model and every state file bit for bit), at -z 1 (bit for
#     bit: one micro-step), re-sharded to tp 1 x dp 2 at -z 3 and from a tp 1 x dp 2 -z 1 checkpoint to tp 2 x dp 2
#     at -z 3 (within T(4)). (tp 2 x pp 2 x dp 2 at -z 3: cli_pp_zero.sh.)
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
M=(-e L3:C64:NH4:T48 -b 2 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 4)
P=$(python3 -c "
C, L, T, Vp, tp = 64, 3, 48, 50304, 2
layer = 2 * C + (3 * C * C + 3 * C) // tp + C * C // tp + C + 2 * C + (4 * C * C + 4 * C) // tp + 4 * C * C // tp + C
print(Vp * C // tp + T * C + L * layer + 2 * C)")
bytes_ok() { # LOG N TIMES: every rank's step-2 data-parallel bytes = TIMES (N-1)/N 4P within 256 x TIMES
    python3 - "$@" "$P" <<'PY'
import re, sys
log, N, times, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = open(log).read()
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"comm: rank (\d+) step 2 sent (\d+) recv (\d+) bytes in \d+ calls \(zero 3, world \d+, P (\d+)", t)]
theory = times * (N - 1) / N * 4 * P
ok = len(rows) == 2 * N and all(abs(s - theory) <= 256 * times and abs(r - theory) <= 256 * times and p == P for _, s, r, p in rows)
print("P = %d per tp rank; theory %d x (N-1)/N x 4P = %.0f; measured (dp rank, sent, recv, P): %s" % (P, times, theory, sorted(set(rows))))
sys.exit(0 if ok else 1)
PY
}
VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
run() { # NAME N args...: a 4-step run into $TMP/NAME
    local name=$1 n=$2; shift 2
    MPIRUN "$n" timeout 300 $TRAIN "${M[@]}" "$@" -o "$TMP/$name" > "$TMP/$name.log" 2>&1
    check $? "$name: $n processes, $*: runs under mpirun (exit 0)"
}

# -z 3 against -z 2 on the same ranks
for spec in "a:4:-d 128 --comm-stats 1" "b:4:-d 256" "c:6:-d 192 --comm-stats 1"; do
    IFS=: read -r name n flags <<< "$spec"
    # shellcheck disable=SC2086
    { run "${name}z2" "$n" --tp 2 -z 2 $flags; run "${name}z3" "$n" --tp 2 -z 3 $flags; }
    out=$(dp_same_training "$TMP/${name}z2" "$TMP/${name}z3" 4)
    check $? "$n processes (tp 2 x dp $((n / 2))), $flags: -z 3 vs -z 2: $out"
    grep -q "^memory ledger .* -> equal$" "$TMP/${name}z3.log"
    check $? "$n processes, -z 3 --tp 2: $(grep -o 'parameters [0-9]* | gradients [0-9]*' "$TMP/${name}z3.log" | head -1) ... -> equal"
done
out=$(bytes_ok "$TMP/az3.log" 2 3)
check $? "tp 2 x dp 2 -z 3: data-parallel bytes per rank per step = 2 all-gathers + 1 reduce-scatter of the tp part: $out"
out=$(bytes_ok "$TMP/cz3.log" 3 3)
check $? "tp 2 x dp 3 -z 3 (P uneven over 3): the same bytes: $out"
$TRAIN "${M[@]}" -d 256 -o "$TMP/single" > "$TMP/single.log" 2>&1
T4=$(dp_order_tol 4)
out=$(dp_compare_logs "$TMP/single/log.jsonl" "$TMP/bz3/log.jsonl" train loss $T4 4) && \
    out="$out; $(dp_compare_logs "$TMP/single/log.jsonl" "$TMP/bz3/log.jsonl" train grad_norm $T4 4)" && \
    out="$out; $(dp_compare_models_rms "$TMP/single/model_00000004.bin" "$TMP/bz3/model_00000004.bin" $T4)"
check $? "tp 2 x dp 2 -z 3, 2 micro-steps, vs one process (T(4) = $T4): $out"

# with the options that touch the parameters' reads: sequence parallelism, -r 3, validation and samples; Muon with
# the parameter shard in host memory
O1=(-d 128 --sequence-parallel 1 -r 3 -j "$VAL" -v 2 -m 3 -s 2 -g 6)
run o1z2 4 --tp 2 -z 2 "${O1[@]}"
run o1z3 4 --tp 2 -z 3 "${O1[@]}"
out=$(dp_same_training "$TMP/o1z2" "$TMP/o1z3" 4) && python3 - "$TMP/o1z2/log.jsonl" "$TMP/o1z3/log.jsonl" <<'PY'
import json, sys
rec = lambda p: [(o["kind"], o["step"], o.get("val_loss"), o.get("text")) for o in map(json.loads, open(p)) if o["kind"] in ("val", "sample")]
a, b = rec(sys.argv[1]), rec(sys.argv[2])
print("%d validation and sample records" % len(a), "identical" if a == b else "DIFFER", file=sys.stderr)
sys.exit(0 if a == b and len(a) == 5 else 1)  # validation at steps 0, 2, 4; samples at 2, 4
PY
check $? "tp 2 x dp 2, sequence parallel, -r 3, validation and samples: -z 3 vs -z 2: $out; validation losses and samples identical"
run o2z2 4 --tp 2 -z 2 -d 128 --optimizer muon
run o2z3 4 --tp 2 -z 3 -d 128 --optimizer muon --offload-params cpu
out=$(dp_same_training "$TMP/o2z2" "$TMP/o2z3" 4)
check $? "tp 2 x dp 2, --optimizer muon: -z 3 --offload-params cpu vs -z 2: $out"

# checkpoints
R=(--tp 2 -z 3 -d 128 -n 2)
rm -rf "$TMP/r"; run r 4 "${R[@]}" --exit-after-steps 2
cp -r "$TMP/r" "$TMP/r1"; cp -r "$TMP/r" "$TMP/r4"
MPIRUN 4 $TRAIN "${M[@]}" "${R[@]}" -o "$TMP/r" -y 1 > "$TMP/r.log" 2>&1
out=$(dp_same_training "$TMP/az3" "$TMP/r" 4) && for k in 0 1 2 3; do
    cmp -s "$TMP/az3/state_00000004_0000$k.bin" "$TMP/r/state_00000004_0000$k.bin" || out="$out; state file $k DIFFERS"
done
! grep -q DIFFERS <<< "$out"
check $? "tp 2 x dp 2 -z 3: resumed at step 2 vs 4 straight steps: $out; every rank's state file identical"
MPIRUN 4 $TRAIN "${M[@]}" --tp 2 -z 1 -d 128 -o "$TMP/r1" -y 1 > "$TMP/r1.log" 2>&1 && \
    grep -q "with ZeRO stage 3; re-sharding the optimizer state for 4 processes with ZeRO stage 1" "$TMP/r1.log"
out=$(dp_same_training "$TMP/az3" "$TMP/r1" 4)
check $? "tp 2 x dp 2: the -z 3 checkpoint resumed at -z 1 (announced) vs 4 straight -z 3 steps: $out"
MPIRUN 2 $TRAIN "${M[@]}" --tp 1 -z 3 -d 128 -o "$TMP/r4" -y 1 > "$TMP/r4.log" 2>&1 && \
    grep -q "re-sharding the optimizer state for 2 processes with ZeRO stage 3 (tensor-parallel size 2 -> 1)" "$TMP/r4.log"
out=$(dp_compare_logs "$TMP/az3/log.jsonl" "$TMP/r4/log.jsonl" train loss $T4 4) && \
    out="$out; $(dp_compare_models_rms "$TMP/az3/model_00000004.bin" "$TMP/r4/model_00000004.bin" $T4)"
check $? "the tp 2 x dp 2 -z 3 checkpoint re-sharded to tp 1 x dp 2 -z 3 (announced) vs the straight run (T(4)): $out"
run s 2 -z 1 -d 128
rm -rf "$TMP/s2"; run s2 2 -z 1 -d 128 -n 2 --exit-after-steps 2
MPIRUN 4 $TRAIN "${M[@]}" --tp 2 -z 3 -d 128 -o "$TMP/s2" -y 1 > "$TMP/s2.log" 2>&1 && \
    grep -q "written by 2 processes with ZeRO stage 1; re-sharding the optimizer state for 4 processes with ZeRO stage 3 (tensor-parallel size 1 -> 2)" "$TMP/s2.log"
out=$(dp_compare_logs "$TMP/s/log.jsonl" "$TMP/s2/log.jsonl" train loss $T4 4) && \
    out="$out; $(dp_compare_models_rms "$TMP/s/model_00000004.bin" "$TMP/s2/model_00000004.bin" $T4)"
check $? "a tp 1 x dp 2 -z 1 checkpoint resumed at tp 2 x dp 2 -z 3 (announced) vs the straight -z 1 run (T(4)): $out"
