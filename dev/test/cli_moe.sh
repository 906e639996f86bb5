# dev/test/cli_moe.sh -- the mixture-of-experts model through the real CLI (llmc/moe.h), d2 with 4 experts top-2 on
# tiny batches: two identical runs are bit-identical; 6 steps straight == 3 steps, checkpoint, resume, 3 more
# (losses, MoE statistics, weights and optimizer state); the step line and log.jsonl carry the routing statistics; the
# model file is version 7 with the MoE header; refusals are one line (--ep above the processes, k > E, a dense/MoE
# mismatch between a model file and the --moe-* flags, --cuda-graphs with experts). Under mpirun: data parallelism against one
# process, and validation (--val-tokens) identical on 1, 2 and 3 processes. Expert parallelism: dev/test/cli_moe_ep.sh.
# The capacity factor 1.1 makes the capacity non-integral (1.1 x 2 x 64 / 4 = 35.2 -> 36 rows per expert): every
# block's dropped fraction in log.jsonl must be what that capacity gives for the logged routing (the choices of expert
# i, f_i N k, beyond 36, over N k), and some expert must get 36 or more choices (where rounding 35.2 down would drop
# one more); the unit test of the arithmetic is build/test_moe_capacity.
source "$(dirname "$0")/lib_cli.sh"
MOE=(-e d2 -b 2 -t 32 -j '' -g 0 -u 2 -l 1e-3 -v 0 --moe-experts 4 --moe-top-k 2 --moe-capacity-factor 1.1
     --moe-z-coef 0.001)
A="$TMP/a"; A2="$TMP/a2"; B="$TMP/b"
$TRAIN "${MOE[@]}" -x 6 -o "$A" > "$TMP/a.log" 2>&1
check $? "MoE d2 (4 experts, top-2): 6 steps"
$TRAIN "${MOE[@]}" -x 6 -o "$A2" > "$TMP/a2.log" 2>&1
check $? "the same run again"
cmp -s "$A/model_00000006.bin" "$A2/model_00000006.bin" && cmp -s "$A/state_00000006_00000.bin" "$A2/state_00000006_00000.bin"
check $? "two identical runs: bit-identical weights and optimizer state"
grep -E '^step ' "$TMP/a.log" | sed -E 's/[|] [0-9.]+ ms.*[|] moe/| moe/; s/[|] [0-9.]+s elapsed.*//' > "$TMP/a.steps"
grep -E '^step ' "$TMP/a2.log" | sed -E 's/[|] [0-9.]+ ms.*[|] moe/| moe/; s/[|] [0-9.]+s elapsed.*//' > "$TMP/a2.steps"
test "$(wc -l < "$TMP/a.steps")" -eq 6 && cmp -s "$TMP/a.steps" "$TMP/a2.steps"
check $? "two identical runs: identical step lines (loss, norm, lr, MoE statistics)"
grep -qE '^step +1/6 .*[|] moe aux [0-9.]+ drop [0-9.]+% max load [0-9.]+' "$TMP/a.log"
check $? "the step line shows the MoE loss, dropped fraction and max load"
grep -q "parameters [0-9]* total, [0-9]* active per token (MFU uses the active FLOPs)" "$TMP/a.log"
check $? "the header gives total and active parameters"
grep -q -- "-> equal" "$TMP/a.log"
check $? "the memory ledger equals what the MoE model allocates"
python3 - "$A/log.jsonl" "$A/model_00000006.bin" <<'PY'
import json, sys
import numpy as np
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r["kind"] == "train"]
assert len(train) == 6
for r in train:
    assert len(r["moe"]) == 2 and [b["block"] for b in r["moe"]] == [0, 1], r["moe"]
    for b in r["moe"]:
        assert len(b["f"]) == 4 and abs(sum(b["f"]) - 1) < 1e-3 and 0 <= b["drop"] < 1 and b["aux"] > 0 and b["z"] > 0
    assert abs(r["moe_aux"] - sum(b["aux"] + b["z"] for b in r["moe"])) < 1e-5
h = np.fromfile(sys.argv[2], dtype="<i4", count=12)
assert list(h[[0, 1, 4, 6, 8, 9, 10, 11]]) == [20240326, 7, 2, 128, 4, 2, 1, 512], h
PY
check $? "log.jsonl: per MoE block the fraction per expert (sums to 1), dropped fraction, aux and z-loss; model file v7 with E=4 k=2 n=1 H=512"
python3 - "$A/log.jsonl" <<'PY'
import json, math, struct, sys
c = struct.unpack("<f", struct.pack("<f", 1.1))[0]  # the flag as the trainer stores it (fp32)
N, k, E = 64, 2, 4
cap = min(N, math.ceil(c * k * N / E))
worst, most = 0.0, 0
for r in (r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "train"):
    for b in r["moe"]:
        routed = [round(f * N * k) for f in b["f"]]
        assert sum(routed) == N * k, routed
        want = sum(max(0, x - cap) for x in routed) / (N * k)
        worst = max(worst, abs(b["drop"] - want))
        most = max(most, max(routed))
print("# capacity %d, the most choices of one expert %d, worst |drop - expected| %.2g" % (cap, most, worst))
sys.exit(0 if cap == 36 and most >= 36 and worst <= 1e-5 else 1)
PY
check $? "capacity factor 1.1 (35.2 rows -> 36): every block's dropped fraction in log.jsonl is the one the logged routing gives at capacity 36, with an expert at 36 or more choices"
$TRAIN "${MOE[@]}" -x 6 -o "$B" --exit-after-steps 3 > "$TMP/b1.log" 2>&1
$TRAIN "${MOE[@]}" -x 6 -o "$B" -y 1 > "$TMP/b2.log" 2>&1
check $? "3 steps, checkpoint, resume with -y 1"
grep -E '^step +[4-6]/6' "$TMP/a.log" | sed -E 's/[|] [0-9.]+ ms.*[|] moe/| moe/; s/[|] [0-9.]+s elapsed.*//' > "$TMP/a.tail"
grep -E '^step +[4-6]/6' "$TMP/b2.log" | sed -E 's/[|] [0-9.]+ ms.*[|] moe/| moe/; s/[|] [0-9.]+s elapsed.*//' > "$TMP/b.tail"
test "$(wc -l < "$TMP/b.tail")" -eq 3 && cmp -s "$TMP/a.tail" "$TMP/b.tail" && cmp -s "$A/model_00000006.bin" "$B/model_00000006.bin" &&
    cmp -s "$A/state_00000006_00000.bin" "$B/state_00000006_00000.bin"
check $? "resume is bit-identical: steps 4..6 (losses and MoE statistics), final weights and optimizer state"
expect_error "--ep 2 does not divide the data-parallel size dp = 1" \
    "--ep 2 on one process is refused (expert parallelism: dev/test/cli_moe_ep.sh)" -- $TRAIN "${MOE[@]}" -x 1 --ep 2
expect_error "--moe-top-k 5 is above --moe-experts 4" "top-k above E is refused" -- $TRAIN "${MOE[@]}" -x 1 --moe-top-k 5
expect_error "is a mixture-of-experts model" "a MoE model file with dense flags is refused" -- \
    $TRAIN -e "$A/model_00000006.bin" -b 2 -t 32 -j '' -g 0 -x 1
expect_error "is a dense model" "a dense model file with --moe-experts is refused" -- \
    $TRAIN -e dev/test/fixtures/gpt2_fixture_model.bin -b 2 -t 32 -j '' -g 0 -x 1 --moe-experts 4
if python3 -c "import numpy" 2> /dev/null; then
    expect_error "a mixture-of-experts model file (version 7" "scripts/export_hf.py refuses a MoE model file" -- \
        python3 scripts/export_hf.py "$A/model_00000006.bin" "$TMP/hf"
else
    echo "# SKIP export_hf.py refusal of a MoE model file: no numpy for python3"
fi
expect_error "mixture-of-experts models run without CUDA graphs" "experts with --cuda-graphs 1 are refused" -- \
    $TRAIN "${MOE[@]}" -x 1 --cuda-graphs 1
# data parallelism: experts replicated, their gradients in the global bucket. 2 processes with ZeRO-2 against one
# process accumulating the same two micro-batches (-d 128): the routing and capacity are per micro-batch, so the
# same; only the order of the gradient sum differs
if command -v mpirun > /dev/null 2>&1 && ldd "$TRAIN_BIN" 2> /dev/null | grep -q libmpi; then
    DP=(-e d2 -b 2 -t 32 -d 128 -j '' -g 0 -u 2 -v 0 -x 3 --moe-experts 4 --moe-top-k 2 --moe-capacity-factor 1.1)
    $TRAIN "${DP[@]}" -o "$TMP/dp1" > "$TMP/dp1.log" 2>&1
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
        mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS $TRAIN "${DP[@]}" -z 2 -o "$TMP/dp2" > "$TMP/dp2.log" 2>&1
    # tolerance T(3) = (3 + 4) x 16 x 2^-24 = 6.7e-6 relative: the same fp32 gradient terms summed in another order
    # (dev/test/dp_lib.sh, "Two kinds of comparison"); full-precision numbers of log.jsonl, not the step line's digits
    python3 - "$TMP/dp1/log.jsonl" "$TMP/dp2/log.jsonl" <<'PY'
import json, sys
def rec(p):
    return [(o["loss"], o["grad_norm"]) for o in map(json.loads, open(p)) if o["kind"] == "train"]
a, b = rec(sys.argv[1]), rec(sys.argv[2])
tol = 7 * 16 * 2.0 ** -24
worst = max((abs(x - y) / abs(x) for p, q in zip(a, b) for x, y in zip(p, q)), default=1.0)
print("# 1 process:", a, "\n# 2 processes, ZeRO-2:", b, "\n# worst relative difference %.3g (tolerance %.3g)" % (worst, tol))
sys.exit(0 if len(a) == 3 and len(b) == 3 and worst <= tol else 1)
PY
    check $? "MoE under data parallelism: 2 processes with ZeRO-2 equal one process accumulating the same micro-batches (loss and norm of log.jsonl, 3 steps, T(3))"
    # validation of a MoE model is layout-independent (llmc/README.md, "Mixture of experts"): --val-tokens 84 = 7
    # sequences of T=12 in batches of B=3 (the last one row + two padding rows), capacity 1.25 (ceil(22.5) = 23 per
    # expert of a full batch, ceil(7.5) = 8 of the partial one). The capacity is per batch, so the batches must be the
    # same sequences on any number of processes and the padding must take no capacity. 1 process; 2 with --ep 2 (one
    # rank also runs a forward of padding only, for the other's all-to-all); 3 processes. The full-precision val loss
    # of step 0 from log.jsonl must be equal, as it is for a dense model. Bugs caught: batches dealt by sequence
    # (measured before the fix: 2.0e-4 relative between 1 and 2 processes), the padding routed (with the per-padding unit
    # test in test_gpt.cu), a rank of padding only that hangs or crashes the exchange.
    VT=(-e L1:C64:NH4:E4:K2 -b 3 -t 12 -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -g 0 -x 1 -v 1 -d 216
        --val-tokens 84 --moe-capacity-factor 1.25)
    $TRAIN "${VT[@]}" -o "$TMP/vt1" > "$TMP/vt1.log" 2>&1
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
        mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS $TRAIN "${VT[@]}" --ep 2 -o "$TMP/vt2" > "$TMP/vt2.log" 2>&1
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
        mpirun --oversubscribe --bind-to none -np 3 -x OMP_NUM_THREADS $TRAIN "${VT[@]}" -o "$TMP/vt3" > "$TMP/vt3.log" 2>&1
    python3 - "$TMP"/vt{1,2,3}/log.jsonl <<'PY'
import json, sys
v = [[r["val_loss"] for r in map(json.loads, open(p)) if r["kind"] == "val" and r["step"] == 0] for p in sys.argv[1:]]
print("# MoE val loss at step 0 on 1, 2 (--ep 2) and 3 processes:", v)
sys.exit(0 if all(len(x) == 1 and isinstance(x[0], float) for x in v) and v[0] == v[1] == v[2] else 1)
PY
    check $? "MoE validation (--val-tokens, a padded last batch, capacity 1.25) is identical on 1, 2 (--ep 2) and 3 processes"
else
    echo "# SKIP MoE data-parallel check: no mpirun or no MPI build"
fi
