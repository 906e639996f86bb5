# dev/test/cli_dp_zero3.sh -- ZeRO-3 (parameters sharded, gathered per layer; llmc/zero_params.h) through the CLI
# beyond cli_dp_zero.sh (which runs d2 at ZeRO-3 on 2, 3 and 5 ranks, with and without accumulation, beside ZeRO-0/1/2).
# The model here is L7:C7:NH1:T64, whose 357,343 parameters divide by none of 2, 3, 5 (every shard split, padding
# 1, 2 or 2 values), with 7 layers so the two working slots are reused. Tolerances: the argument in dp_lib.sh.
#   - on 1, 2, 3 and 5 processes, 1 micro-step: ZeRO-3 trains exactly as ZeRO-0 (identical step records, final model
#     bit for bit), its memory ledger line says "-> equal", and its bytes per rank per step are 3 (N-1)/N x 4P
#     (two all-gathers of the parameters and one reduce-scatter) within 256 bytes per collective, the ring theory
#     the trainer prints on its --comm-stats line;
#   - 5 processes, 2 micro-steps: ZeRO-3 vs ZeRO-0 within T(4) (ZeRO-3 sums over ranks first, as ZeRO-2), and the
#     step-1 gradient norm equals the single-process one within T(0);
#   - validation (-m windows and --val-tokens, uneven over the ranks: every rank runs rank 0's number of forwards)
#     and samples (every rank generates; rank 0 prints) give the same numbers and text as ZeRO-0;
#   - checkpoints: a ZeRO-3 checkpoint resumed at ZeRO-3 (same processes) or at ZeRO-1 continues bit-identically to
#     the straight ZeRO-3 run (the ZeRO-3 resume also gives the same optimizer shard file); a
#     ZeRO-1 checkpoint of 3 processes resumed at ZeRO-3 on 2 continues within T(4) of the straight run (the model
#     file is the full model either way);
#   - -z 3 with --grad-compress is refused with one line (with --tp: cli_zero3_tp.sh; with --pp: cli_pp_zero.sh);
#   - d12 on 4 processes (--dry-run 1): the ledger equals the allocation, and the parameters held are the shard +
#     2 layers + wte/wpe/lnf (below the full buffer).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
M=(-e L7:C7:NH1:T64 -b 2 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 4 --comm-stats 1)
P=357343
bytes_ok() { # LOG N TIMES: every rank's step-2 bytes = TIMES (N-1)/N 4P within 256 x TIMES
    python3 - "$@" "$P" <<'PY'
import re, sys
log, N, times, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"comm: rank (\d+) step 2 sent (\d+) recv (\d+)", open(log).read())]
theory = times * (N - 1) / N * 4 * P
printed = [float(x) for x in re.findall(r"comm: rank \d+ step 2 .* ring theory (\d+)", open(log).read())]
ok = len(rows) == N and all(abs(s - theory) <= 256 * times and abs(r - theory) <= 256 * times for _, s, r in rows) \
    and len(printed) == N and all(abs(x - theory) <= 1 for x in printed)
print("theory %d x (N-1)/N x 4P = %.0f (the trainer prints %s); measured (rank, sent, recv): %s"
      % (times, theory, sorted(set(printed)), sorted(rows)))
sys.exit(0 if ok else 1)
PY
}
VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
X2=(-j "$VAL" -v 2 -m 3 -s 2 -g 6)
X3=(-j "$VAL" -v 2 --val-tokens 224)
for N in 1 2 3 5; do
    # validation and samples in lockstep: on 2 ranks 3 -m windows (2 + 1) and a sample every 2 steps; on 3 ranks
    # --val-tokens 224 (7 sequences: 3 + 2 + 2, so rank 0 runs 2 forwards of B=2 and the others 1 plus 1 uncounted)
    case $N in 2) X=("${X2[@]}");; 3) X=("${X3[@]}");; *) X=();; esac
    for z in 0 3; do
        MPIRUN $N timeout 300 $TRAIN "${M[@]}" "${X[@]}" -z $z -d $((64 * N)) -o "$TMP/c${N}z$z" > "$TMP/c${N}z$z.log" 2>&1
        check $? "N=$N ZeRO-$z, L7:C7 (P = $P): 4 steps under mpirun"
    done
    out=$(dp_same_training "$TMP/c${N}z0" "$TMP/c${N}z3" 4)
    check $? "N=$N: ZeRO-3 vs ZeRO-0: $out"
    grep -q "^memory ledger .* -> equal$" "$TMP/c${N}z3.log"
    check $? "N=$N ZeRO-3: $(grep -o 'parameters [0-9]* | gradients [0-9]*' "$TMP/c${N}z3.log" | head -1) ... -> equal"
    if [ $N -gt 1 ]; then
        out=$(bytes_ok "$TMP/c${N}z3.log" $N 3)
        check $? "N=$N ZeRO-3: bytes per rank per step = 2 parameter all-gathers + 1 reduce-scatter: $out"
    fi
done

# 2 micro-steps on 5 processes
$TRAIN "${M[@]}" -x 1 -d 640 -o "$TMP/single" > "$TMP/single.log" 2>&1
for z in 0 3; do
    MPIRUN 5 $TRAIN "${M[@]}" -z $z -d 640 -o "$TMP/a$z" > "$TMP/a$z.log" 2>&1
    check $? "N=5 ZeRO-$z, 2 micro-steps: 4 steps under mpirun"
done
T4=$(dp_order_tol 4)
out=$(dp_compare_logs "$TMP/a0/log.jsonl" "$TMP/a3/log.jsonl" train loss $T4 4) && \
    out="$out; $(dp_compare_logs "$TMP/a0/log.jsonl" "$TMP/a3/log.jsonl" train grad_norm $T4 4)" && \
    out="$out; $(dp_compare_models_rms "$TMP/a0/model_00000004.bin" "$TMP/a3/model_00000004.bin" $T4)"
check $? "N=5, 2 micro-steps, ZeRO-3 vs ZeRO-0 (T(4) = $T4): $out"
out=$(bytes_ok "$TMP/a3.log" 5 6)
check $? "N=5 ZeRO-3, 2 micro-steps: bytes per rank per step = 2 x (2 all-gathers + 1 reduce-scatter): $out"
python3 - "$TMP/single/log.jsonl" "$TMP/a3/log.jsonl" "$(dp_order_tol 0)" <<'PY'
import json, sys
n = [[o["grad_norm"] for o in map(json.loads, open(p)) if o["kind"] == "train"][0] for p in sys.argv[1:3]]
tol = float(sys.argv[3])
print("single process %.6f, 5 processes ZeRO-3 %.6f" % tuple(n))
sys.exit(0 if abs(n[0] - n[1]) <= tol * n[0] else 1)
PY
check $? "N=5 ZeRO-3: step-1 grad norm equals the single-process norm (T(0))"

# the validation and samples of the 2- and 3-rank runs above
python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
def rec(p):
    return [(o["kind"], o["step"], o.get("val_loss"), o.get("text")) for o in map(json.loads, open(p)) if o["kind"] in ("val", "sample")]
a, b = rec(d + "/c2z0/log.jsonl") + rec(d + "/c3z0/log.jsonl"), rec(d + "/c2z3/log.jsonl") + rec(d + "/c3z3/log.jsonl")
n = [sum(1 for r in a if r[0] == k) for k in ("val", "sample")]
print("%d validation losses, %d samples: %s" % (n[0], n[1], "identical" if a == b else "DIFFER"))
sys.exit(0 if a == b and n == [6, 2] else 1)
PY
check $? "N=2 and 3: ZeRO-3's validation losses (-m windows; --val-tokens) and sample texts equal ZeRO-0's"

# checkpoints across stages and process counts
R=("${M[@]}")  # the straight ZeRO-3 run on 3 processes is $TMP/c3z3 above (-d 192)
MPIRUN 3 $TRAIN "${R[@]}" -z 3 -d 192 -o "$TMP/r3" --exit-after-steps 2 > "$TMP/r3a.log" 2>&1 && \
    MPIRUN 3 $TRAIN "${R[@]}" -z 1 -d 192 -o "$TMP/r3" -y 1 > "$TMP/r3b.log" 2>&1 && \
    grep -q "with ZeRO stage 3; re-sharding the optimizer state for 3 processes with ZeRO stage 1" "$TMP/r3b.log"
check $? "3 processes: a ZeRO-3 checkpoint of step 2 resumed at ZeRO-1 (announced)"
out=$(dp_same_training "$TMP/c3z3" "$TMP/r3" 4)
check $? "ZeRO-3 checkpoint resumed at ZeRO-1 vs 4 straight ZeRO-3 steps: $out"
MPIRUN 2 $TRAIN "${R[@]}" "${X2[@]}" -z 3 -d 128 -o "$TMP/r2" --exit-after-steps 2 > "$TMP/r2a.log" 2>&1 && \
    MPIRUN 2 $TRAIN "${R[@]}" "${X2[@]}" -z 3 -d 128 -o "$TMP/r2" -y 1 > "$TMP/r2b.log" 2>&1
check $? "2 processes: a ZeRO-3 checkpoint of step 2 resumed at ZeRO-3"
out=$(dp_same_training "$TMP/c2z3" "$TMP/r2" 4) && cmp -s "$TMP/c2z3/state_00000004_00001.bin" "$TMP/r2/state_00000004_00001.bin"
check $? "ZeRO-3 resumed at ZeRO-3 vs 4 straight steps (with validation and samples): $out; rank 1's state file identical"
MPIRUN 3 $TRAIN "${R[@]}" -z 1 -d 384 -o "$TMP/s1" > "$TMP/s1.log" 2>&1 && \
    MPIRUN 3 $TRAIN "${R[@]}" -z 1 -d 384 -o "$TMP/r1" --exit-after-steps 2 > "$TMP/r1a.log" 2>&1 && \
    MPIRUN 2 $TRAIN "${R[@]}" -z 3 -d 384 -o "$TMP/r1" -y 1 > "$TMP/r1b.log" 2>&1 && \
    grep -q "written by 3 processes with ZeRO stage 1; re-sharding the optimizer state for 2 processes with ZeRO stage 3" "$TMP/r1b.log"
check $? "a 3-process ZeRO-1 checkpoint of step 2 resumed at ZeRO-3 on 2 processes (announced)"
T4=$(dp_order_tol 4)
out=$(dp_compare_logs "$TMP/s1/log.jsonl" "$TMP/r1/log.jsonl" train loss $T4 4) && \
    out="$out; $(dp_compare_models_rms "$TMP/s1/model_00000004.bin" "$TMP/r1/model_00000004.bin" $T4)"
check $? "ZeRO-1 (3 processes) resumed at ZeRO-3 (2 processes) vs 4 straight ZeRO-1 steps (T(4) = $T4): $out"

# refusals
Q=(-e L2:C64:NH2 -b 2 -t 32 -j '' -g 0 -x 1)
dp_refused 2 "-z 1" "-z 3 with --grad-compress int8" "${R[@]}" -z 3 --grad-compress int8

# d12 on 4 processes, set up without training
MPIRUN 4 timeout 300 $TRAIN -e d12 -b 1 -t 64 -j '' -g 0 -z 3 --dry-run 1 > "$TMP/d12.log" 2>&1
rc=$?
python3 - "$TMP/d12.log" $rc <<'PY'
import re, sys
t, rc = open(sys.argv[1]).read(), int(sys.argv[2])
m = re.search(r"^memory ledger \(llmc/ledger.h, bytes, pipeline stage 0\): parameters (\d+) \| gradients (\d+) .*; allocated: (\d+) \| (\d+) .* -> (\w+)$", t, re.M)
L, C, Vp, T, N = 12, 768, 50304, 1024, 4
P = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
slot, glob = 12 * C * C + 13 * C, Vp * C + T * C + 2 * C
S = -(-P // N)
want = (S + 2 * slot + glob) * 4
ok = rc == 0 and m is not None and m.group(5) == "equal" and int(m.group(1)) == want and want < P * 4
print("d12 (P = %d), 4 processes: ledger parameters %s, allocated %s (%s); shard %d + 2 layers of %d + wte/wpe/lnf %d = %d bytes (full buffer %d)"
      % (P, m and m.group(1), m and m.group(3), m and m.group(5), S, slot, glob, want, P * 4))
sys.exit(0 if ok else 1)
PY
check $? "d12 on 4 processes, -z 3 --dry-run 1: memory ledger = allocation = shard + 2 layers + embedding unit"
