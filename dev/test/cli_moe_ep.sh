# dev/test/cli_moe_ep.sh -- expert parallelism (--ep, llmc/moe.h + llmc/moe_ep_comm.h) through the real CLI under
# mpirun: d2 with 4 experts top-2, B=1 T=16, 10 steps (5 on 8 processes).
#   - ep=2 on dp=2 and ep=2 on dp=4 (4 processes) against ep=1 on the same processes: equal losses and gradient
#     norms of log.jsonl (full precision) within dp_order_tol(10) = 14 x 16 x 2^-24 = 1.3e-5 relative. Why
#     not bit-identical: the routing, the capacity and every expert's forward are the same rows in the same order
#     (step 1 is bit-identical), but an expert's weight gradient is summed in another order: under ep its holder
#     accumulates the blocks of every source rank into one gradient with sgemm (C += A^T B: the BLAS adds a
#     block's products into the running sum, not necessarily as one rounded block sum), without ep each rank sums
#     its own block and the ring reduction adds the ranks' sums. The same fp32 terms added in another order: the argument of
#     dev/test/dp_lib.sh ("Two kinds of comparison") applies as it stands; a routing or exchange error moves the
#     loss by 1e-3 or more. (Measured: about 1e-7 relative in some steps.) The capacity factor 1.1 is non-integral
#     (1.1 x 2 x 16 / 4 = 8.8 -> 9 rows per expert), so the receive-side buffers (moe_recv_rows) round as the layer;
#   - accumulation x processes differ between the sides: --ep 2 with ZeRO-2 on 2 processes x 2 micro-steps against one
#     process x 4 micro-steps (the same 4 windows per step, each routed alone, so the same routing; the experts'
#     ZeRO-2 store must keep every micro-step's gradients): losses, norms and the final weights' RMS within
#     dp_order_tol(4);
#   - determinism: a second ep=2 run's steps 1..5 are bit-identical (step lines), and after a checkpoint at step 5
#     its resume gives bit-identical steps 6..10, final weights and optimizer state;
#   - the ep=2 checkpoint of step 5 resumes at ep=1 (the model file is the full model; the optimizer state is rebuilt
#     from both ranks' state files, said in one line): steps 6..10 equal the ep=2 run's within the same tolerance;
#   - re-sharded resume across ZeRO stages and process counts: at -z 1 on 2 processes (bit-identical), on 1 process
#     at --ep 1 -z 2, and a 1-process checkpoint on 2 processes at --ep 2 -z 2 (within the same tolerance);
#   - memory: a rank holds E/ep experts (llmc/zero_experts.h): the expert group has 2 x 4/ep x 131712 parameters
#     (d2: C=128, H=512, 2 MoE blocks) over dp/ep processes, the dense group the rest over dp;
#   - ep=2 on dp=4 with ZeRO-1, ep=4 on dp=4 (one expert each) with ZeRO-2, and ep=4 on dp=8 (two ep groups,
#     each expert's state over expert-dp = 2) with ZeRO-1 equal ep=1 on the same processes (ZeRO-0, which trains
#     bit-identically to ZeRO-1/2 without accumulation, llmc/README.md) within the same tolerance;
#   - the all-to-all counters: every step line's bytes sent (the private ep communicator's counter) equal the
#     token rows this rank sent (counted by the layer) x C x 4 bytes + the count exchanges, and are printed beside
#     the theory for balanced routing; the memory ledger equals what was allocated.
#   - validation with an uneven split of windows over the ranks equals ep=1's, and a sample is printed (every
#     rank of an ep group runs the forwards: they exchange tokens);
#   - optimizer offload of both ZeRO groups (--offload-optimizer with --ep: each group its own host state, and for
#     nvme its own file): cpu at ZeRO-0 and nvme at ZeRO-2 train bit-identically to the same layout on the device
#     (the CPU build's offloaded AdamW is the backend's function on the same values), the offload ledger (host
#     state, buffers, both files) equals the allocation, every step's PCIe bytes equal the theory summed over the
#     groups, and an nvme run resumed at step 5 ends with the same weights and state files;
#   - gradient compression of both groups: topk:1 on ep=2 x dp=4 equals the uncompressed run within the same
#     tolerance; int8 with error feedback resumes bit for bit (each group's residual file, gradres_ and gradrese_);
# Refusals (one line): --ep not dividing E, --ep on a dense model, --ep not dividing dp.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
run() { local np=$1; shift; MPIRUN "$np" $TRAIN "$@"; }
TOL=$(dp_order_tol 10)
MOE=(-e d2 -b 1 -t 16 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 10 --moe-experts 4 --moe-top-k 2 --moe-capacity-factor 1.1
     --moe-z-coef 0.001)
# step lines without the timings (ms, tok/s, MFU, elapsed): what must be bit-identical
steps() { grep -E '^step ' "$1" | sed -E 's/[|] [0-9.]+ ms [|] [0-9]+ tok\/s( [|] MFU [0-9.]+%)?//; s/[|] [0-9.]+s elapsed.*//'; }
# compare STEP_FROM STEP_TO DIR_A DIR_B [TOL]: losses and norms of those steps in DIR/log.jsonl (full precision, not the
# step line's 4 decimals of the norm) within TOL (default $TOL) relative (prints both)
compare() {
    python3 - "$1" "$2" "$3" "$4" "${5:-$TOL}" <<'PY'
import json, sys
lo, hi = int(sys.argv[1]), int(sys.argv[2])
def rows(p):
    r = {o["step"]: (o["loss"], o["grad_norm"]) for o in map(json.loads, open(p + "/log.jsonl")) if o["kind"] == "train"}
    return [r.get(s) for s in range(lo, hi + 1)]
a, b = rows(sys.argv[3]), rows(sys.argv[4])
tol = float(sys.argv[5])
pairs = [(x, y) for p, q in zip(a, b) if p and q for x, y in zip(p, q)]
worst = max((abs(x - y) / abs(x) for x, y in pairs), default=1.0)
print("# losses/norms", sys.argv[3].split("/")[-1], a, "\n#", sys.argv[4].split("/")[-1], b, "\n# worst relative", worst)
sys.exit(0 if all(a) and all(b) and all(abs(x - y) <= tol * abs(x) for x, y in pairs) else 1)
PY
}

# validation every 5 steps on 3 windows: 2 on rank 0, 1 on rank 1, so under ep rank 1 runs a third, uncounted
# forward for rank 0's all-to-all (a hang otherwise)
VAL=(-j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -m 3 -v 5)
run 2 "${MOE[@]}" "${VAL[@]}" --ep 1 -o "$TMP/ep1" > "$TMP/ep1.log" 2>&1
check $? "ep=1 on 2 processes: 10 steps"
run 2 "${MOE[@]}" "${VAL[@]}" --ep 2 -o "$TMP/ep2" > "$TMP/ep2.log" 2>&1
check $? "ep=2 on 2 processes (2 experts each): 10 steps"
compare 1 10 "$TMP/ep1" "$TMP/ep2"
check $? "ep=2 equals ep=1 on dp=2 (losses and norms of 10 steps, $TOL relative)"
python3 - "$TMP/ep1/log.jsonl" "$TMP/ep2/log.jsonl" "$TOL" <<'PY'
import json, sys
a, b = ([o["val_loss"] for o in map(json.loads, open(p)) if o["kind"] == "val"] for p in sys.argv[1:3])
print("# val losses", a, b)
sys.exit(0 if len(a) == 3 and len(b) == 3 and all(abs(x - y) <= float(sys.argv[3]) * x for x, y in zip(a, b)) else 1)
PY
check $? "ep=2 validation (3 windows over 2 ranks) equals ep=1's at steps 0, 5, 10"
test "$(steps "$TMP/ep1.log" | head -n 1 | cut -d'|' -f1-3)" = "$(steps "$TMP/ep2.log" | head -n 1 | cut -d'|' -f1-3)"
check $? "step 1 is bit-identical (same routing, same expert rows; only the later gradient sums differ)"
grep -q -- "-> equal" "$TMP/ep2.log"
check $? "ep=2: the memory ledger equals what was allocated"
python3 - "$TMP/ep2.log" "$TMP/ep2/log.jsonl" <<'PY'
import json, re, sys
lines = re.findall(r"^step +\d+/10 .*\| a2a sent (\d+) B = rows (\d+) x C (\d+) x (\d+) B \+ counts (\d+) B "
                   r"\(balanced routing, no drops: (\d+) B\)", open(sys.argv[1]).read(), re.M)
assert len(lines) == 10, lines
for sent, rows, C, b, counts, theory in lines:
    sent, rows, C, b, counts, theory = map(int, (sent, rows, C, b, counts, theory))
    assert C == 128 and b == 4 and rows > 0 and sent == rows * C * b + counts, (sent, rows, C, b, counts)
    # 2 MoE blocks, 1 count exchange each (2 experts x 4 B to the one peer)
    assert counts == 2 * 2 * 4, counts
    # balanced: 2 blocks x 4 exchanges x 16 tokens x k=2 x 1/2 to the peer x 128 x 4 B
    assert theory == 2 * 4 * 16 * 2 // 2 * 128 * 4, theory
    assert 0.5 * theory <= rows * C * b <= 1.5 * theory, (rows, theory)
train = [r for r in map(json.loads, open(sys.argv[2])) if r["kind"] == "train"]
assert [(r["a2a_bytes_sent"], r["a2a_rows_sent"], r["a2a_count_bytes_sent"], r["a2a_balanced_bytes"]) for r in train] == \
    [(int(l[0]), int(l[1]), int(l[4]), int(l[5])) for l in lines], train
print("# a2a bytes per step", [int(l[0]) for l in lines], "theory", lines[0][5])
PY
check $? "all-to-all bytes sent per step = token rows sent x C x 4 B + count exchanges, beside the balanced theory (step line and log.jsonl)"

# determinism and resume: a second ep=2 run stops after a checkpoint at step 5, then resumes
run 2 "${MOE[@]}" --ep 2 -o "$TMP/r" --exit-after-steps 5 > "$TMP/r1.log" 2>&1
check $? "ep=2 again, checkpoint at step 5"
cp -r "$TMP/r" "$TMP/r_ep1"; cp -r "$TMP/r" "$TMP/r_z1"; cp -r "$TMP/r" "$TMP/r_one"
run 2 "${MOE[@]}" --ep 2 -o "$TMP/r" -y 1 > "$TMP/r2.log" 2>&1
check $? "ep=2 resumed from step 5"
test "$(steps "$TMP/r1.log" | wc -l)" -eq 5 && cmp -s <(steps "$TMP/ep2.log" | head -n 5) <(steps "$TMP/r1.log")
check $? "two ep=2 runs: steps 1..5 bit-identical (losses, norms, MoE statistics, all-to-all bytes)"
test "$(steps "$TMP/r2.log" | wc -l)" -eq 5 && cmp -s <(steps "$TMP/ep2.log" | tail -n 5) <(steps "$TMP/r2.log") &&
    cmp -s "$TMP/ep2/model_00000010.bin" "$TMP/r/model_00000010.bin" &&
    cmp -s "$TMP/ep2/state_00000010_00000.bin" "$TMP/r/state_00000010_00000.bin" &&
    cmp -s "$TMP/ep2/state_00000010_00001.bin" "$TMP/r/state_00000010_00001.bin"
check $? "ep=2 resume is bit-identical: steps 6..10, final weights and both ranks' optimizer state"
python3 - "$TMP/ep2/model_00000010.bin" <<'PY'
import sys
import numpy as np
h = np.fromfile(sys.argv[1], dtype="<i4", count=12)
assert list(h[[0, 1, 8, 9, 10, 11]]) == [20240326, 7, 4, 2, 1, 512], h
PY
check $? "the ep=2 checkpoint's model file is the full MoE model (version 7, E=4 k=2 n=1 H=512)"
run 2 "${MOE[@]}" --ep 1 -o "$TMP/r_ep1" -y 1 > "$TMP/r_ep1.log" 2>&1 &&
    grep -q '^resume: checkpoint step 5 was written with --ep 2; rebuilding the optimizer state for --ep 1' "$TMP/r_ep1.log"
check $? "the ep=2 checkpoint of step 5 resumes at ep=1 (optimizer state rebuilt from both state files)"
compare 6 10 "$TMP/ep2" "$TMP/r_ep1"
check $? "resumed at ep=1: steps 6..10 equal the ep=2 run's ($TOL relative)"
# re-sharded resume (llmc/zero_experts.h, zero_experts_read_resharded): the ep=2 ZeRO-0 checkpoint of step 5 on the
# same 2 processes at -z 1 (ZeRO-0 and ZeRO-1 train bit-identically without accumulation, so bit-identical), and on
# one process at --ep 1 -z 2 with 2 micro-steps (the same windows, each routed alone): within $TOL. A misplaced
# expert range (every file's experts read as ep rank 0's) moves the later losses by about 1e-2.
run 2 "${MOE[@]}" --ep 2 -z 1 -o "$TMP/r_z1" -y 1 > "$TMP/r_z1.log" 2>&1 &&
    grep -q '^resume: checkpoint step 5 was written by 2 processes with ZeRO stage 0; re-sharding the optimizer state for 2 processes with ZeRO stage 1' "$TMP/r_z1.log"
check $? "the ep=2 -z 0 checkpoint of step 5 resumes with -z 1 (re-sharded, said in one line)"
test "$(steps "$TMP/r_z1.log" | wc -l)" -eq 5 && cmp -s <(steps "$TMP/ep2.log" | tail -n 5) <(steps "$TMP/r_z1.log") &&
    cmp -s "$TMP/ep2/model_00000010.bin" "$TMP/r_z1/model_00000010.bin"
check $? "resumed at -z 1: steps 6..10 and the final weights bit-identical to the -z 0 run's"
run 1 "${MOE[@]}" --ep 1 -z 2 -d 32 -o "$TMP/r_one" -y 1 > "$TMP/r_one.log" 2>&1 &&
    grep -q 're-sharding the optimizer state for 1 processes with ZeRO stage 2 (expert-parallel size 2 -> 1)' "$TMP/r_one.log" &&
    test "$(steps "$TMP/r_one.log" | wc -l)" -eq 5
check $? "the ep=2 checkpoint of step 5 (2 processes) resumes on 1 process with -z 2 and 2 micro-steps"
out=$(compare 6 10 "$TMP/ep2" "$TMP/r_one") && out="$out; $(dp_compare_models_rms "$TMP/ep2/model_00000010.bin" "$TMP/r_one/model_00000010.bin" "$TOL")"
check $? "resumed on 1 process: steps 6..10 and the final weights' RMS equal the ep=2 run's ($TOL): $(echo "$out" | tail -n 1)"
# the other way: a 1-process checkpoint (2 micro-steps, -z 0) resumed on 2 processes at --ep 2 -z 2
run 1 "${MOE[@]}" -d 32 -o "$TMP/one" > "$TMP/one.log" 2>&1 &&
    run 1 "${MOE[@]}" -d 32 -o "$TMP/r_two" --exit-after-steps 5 > "$TMP/r_two1.log" 2>&1 &&
    run 2 "${MOE[@]}" --ep 2 -z 2 -o "$TMP/r_two" -y 1 > "$TMP/r_two.log" 2>&1 &&
    grep -q '^resume: continuing from step 5' "$TMP/r_two.log" && test "$(steps "$TMP/r_two.log" | wc -l)" -eq 5
check $? "a 1-process checkpoint of step 5 resumes on 2 processes with --ep 2 -z 2"
out=$(compare 6 10 "$TMP/one" "$TMP/r_two") && out="$out; $(dp_compare_models_rms "$TMP/one/model_00000010.bin" "$TMP/r_two/model_00000010.bin" "$TOL")"
check $? "resumed at --ep 2 on 2 processes: steps 6..10 and the final weights' RMS equal the 1-process run's ($TOL): $(echo "$out" | tail -n 1)"

# accumulation x processes changed between the sides: 1 process x 4 micro-steps (ep=1) against 2 processes x 2
# micro-steps with --ep 2 and ZeRO-2 (the experts' group reduce-scatters every micro-step into its shard accumulator)
T4=$(dp_order_tol 4)
run 1 "${MOE[@]}" -x 4 -d 64 -o "$TMP/acc1" > "$TMP/acc1.log" 2>&1
check $? "ep=1 on 1 process, 4 micro-steps: 4 steps"
run 2 "${MOE[@]}" -x 4 -d 64 --ep 2 -z 2 -o "$TMP/acc2" > "$TMP/acc2.log" 2>&1
check $? "ep=2 on 2 processes, 2 micro-steps, ZeRO-2: 4 steps"
out=$(compare 1 4 "$TMP/acc1" "$TMP/acc2" "$T4") && out="$out; $(dp_compare_models_rms "$TMP/acc1/model_00000004.bin" "$TMP/acc2/model_00000004.bin" "$T4")"
check $? "ep=2 x 2 micro-steps (ZeRO-2) equals 1 process x 4 micro-steps (losses, norms, final weights' RMS, T(4) = $T4): $(echo "$out" | tail -n 1)"

# 4 processes: dp=4 with ep=2 (two ep groups, experts replicated twice) against ep=1
run 4 "${MOE[@]}" --ep 1 -o "$TMP/dp4_ep1" > "$TMP/dp4_ep1.log" 2>&1
check $? "ep=1 on 4 processes"
run 4 "${MOE[@]}" --ep 2 -z 1 -g 4 --comm-stats 1 -o "$TMP/dp4_ep2" > "$TMP/dp4_ep2.log" 2>&1
check $? "ep=2 on 4 processes (dp=4: 2 ep groups of 2), ZeRO-1 (dense state over 4, expert state over 2), with a sample at the end"
grep -q "^sample (from" "$TMP/dp4_ep2.log"
check $? "ep=2: the sample is printed (every rank of the ep groups runs the forwards)"
python3 - "$TMP/dp4_ep2.log" <<'PY'
import re, sys
rows = re.findall(r"^comm: rank (\d+) step (\d+) .*\| ep rank (\d+) all-to-all sent (\d+) recv (\d+) bytes in (\d+) calls, "
                  r"rows sent (\d+) recv (\d+) \(ep 2\)$", open(sys.argv[1]).read(), re.M)
assert len(rows) == 40, len(rows)  # 4 ranks x 10 steps
for step in range(1, 11):
    r = [tuple(map(int, x)) for x in rows if int(x[1]) == step]
    for g in (0, 1):  # the ep groups {0,1} and {2,3}: what one rank sends the other receives
        a, b = [x for x in r if x[0] // 2 == g]
        assert a[3] == b[4] and a[4] == b[3] and a[6] == b[7], (a, b)
    for x in r:  # 2 MoE blocks x (count exchange + 2 forward + 2 backward all-to-alls); 2 int32 counts per block
        assert x[5] == 10 and x[3] == x[6] * 128 * 4 + 16 and x[4] == x[7] * 128 * 4 + 16, x
print("# per-rank all-to-all bytes of step 1:", [(x[0], x[3]) for x in rows if x[1] == "1"])
PY
check $? "dp=4, ep=2 (--comm-stats 1): every rank's all-to-all bytes = its rows x C x 4 B + counts, what one rank of an ep group sends its peer receives"
compare 1 10 "$TMP/dp4_ep1" "$TMP/dp4_ep2"
check $? "ep=2 with ZeRO-1 equals ep=1 with ZeRO-0 on dp=4 (losses and norms of 10 steps, $TOL relative)"
run 4 "${MOE[@]}" --ep 4 -z 2 -o "$TMP/dp4_ep4" > "$TMP/dp4_ep4.log" 2>&1
check $? "ep=4 on 4 processes (one expert each), ZeRO-2"
compare 1 10 "$TMP/dp4_ep1" "$TMP/dp4_ep4"
check $? "ep=4 with ZeRO-2 equals ep=1 with ZeRO-0 on dp=4 (losses and norms of 10 steps, $TOL relative)"
# dp = 2 x ep with ep = 4: 8 processes, two ep groups of 4 (one expert each), each expert's state over expert-dp = 2;
# 5 steps (the smallest run that still compares several updates) to keep 8 processes on 2 cores short
run 8 "${MOE[@]}" -x 5 --ep 1 -o "$TMP/dp8_ep1" > "$TMP/dp8_ep1.log" 2>&1
check $? "ep=1 on 8 processes: 5 steps"
run 8 "${MOE[@]}" -x 5 --ep 4 -z 1 -o "$TMP/dp8_ep4" > "$TMP/dp8_ep4.log" 2>&1
check $? "ep=4 on 8 processes (dp=8: 2 ep groups of 4), ZeRO-1: 5 steps"
compare 1 5 "$TMP/dp8_ep1" "$TMP/dp8_ep4"
check $? "ep=4 with ZeRO-1 equals ep=1 with ZeRO-0 on dp=8 (losses and norms of 5 steps, $TOL relative)"
# the experts held per process: 2 MoE blocks x E/ep experts x 131712 values, over dp/ep processes; ledger = allocation
for spec in "ep2:2:1" "dp4_ep2:2:2" "dp4_ep4:1:1" "dp8_ep4:1:2"; do
    IFS=: read -r log per over <<< "$spec"
    grep -q "^expert parallelism: .* expert group $((2 * per * 131712)) parameters over $over processes" "$TMP/$log.log" &&
        grep -q -- "-> equal" "$TMP/$log.log"
    check $? "$log: each process holds $per of 4 experts ($((2 * per * 131712)) expert parameters, reduced over $over processes), memory ledger = allocation"
done

dp_refused 2 "--ep 4 does not divide --moe-experts 6" "--ep not dividing E" "${MOE[@]}" -x 1 --moe-experts 6 --ep 4
# optimizer offload of both groups
pcie_ok() { # LOG STEPS: every step line's counted offload PCIe bytes equal its theory
    python3 - "$1" "$2" <<'PY'
import re, sys
rows = re.findall(r"^step .*offload PCIe ([0-9.]+)\+([0-9.]+) MB \(theory ([0-9.]+)\+([0-9.]+)\)", open(sys.argv[1]).read(), re.M)
print("offload PCIe per step (MB, counted and theory): %s" % sorted(set(rows)))
sys.exit(0 if len(rows) == int(sys.argv[2]) and all(a == c and b == d for a, b, c, d in rows) else 1)
PY
}
run 2 "${MOE[@]}" "${VAL[@]}" --ep 2 --offload-optimizer cpu -o "$TMP/off_cpu" > "$TMP/off_cpu.log" 2>&1
check $? "ep=2 with --offload-optimizer cpu (both groups' state in host memory): 10 steps"
out=$(dp_same_training "$TMP/ep2" "$TMP/off_cpu" 10) && grep -q "^offload ledger .* -> equal;" "$TMP/off_cpu.log" &&
    out="$out; $(pcie_ok "$TMP/off_cpu.log" 10)"
check $? "ep=2 with cpu offload vs ep=2 on the device: $out; offload ledger equal"
mkdir -p "$TMP/nv"
run 2 "${MOE[@]}" --ep 2 -z 2 -o "$TMP/z2dev" > "$TMP/z2dev.log" 2>&1
run 2 "${MOE[@]}" --ep 2 -z 2 --offload-optimizer "nvme:$TMP/nv" -o "$TMP/z2nv" --exit-after-steps 5 > "$TMP/z2nv1.log" 2>&1 &&
    run 2 "${MOE[@]}" --ep 2 -z 2 --offload-optimizer "nvme:$TMP/nv" -o "$TMP/z2nv" -y 1 > "$TMP/z2nv.log" 2>&1
check $? "ep=2 ZeRO-2 with --offload-optimizer nvme (two files per process): 5 steps, checkpoint, resumed for 5 more"
out=$(dp_same_training "$TMP/z2dev" "$TMP/z2nv" 10) &&
    cmp -s "$TMP/z2dev/state_00000010_00000.bin" "$TMP/z2nv/state_00000010_00000.bin" &&
    cmp -s "$TMP/z2dev/state_00000010_00001.bin" "$TMP/z2nv/state_00000010_00001.bin" &&
    grep -q "^offload ledger .* -> equal;" "$TMP/z2nv.log" && out="$out; $(pcie_ok "$TMP/z2nv1.log" 5)"
check $? "ep=2 ZeRO-2 nvme, resumed, vs the device run: $out; both state files identical; offload ledger equal"
# gradient compression of both groups (the dense one over dp, the experts' over expert-dp = 2): top-k at ratio 1
# sends every value (fp32 index/value pairs summed in another order than the ring's), so it equals the uncompressed
# dp4_ep2 run within the same tolerance, which an undecoded or uncompressed expert bucket does not; int8 with error
# feedback resumes bit for bit from both groups' residual files
run 4 "${MOE[@]}" --ep 2 -z 1 -g 4 --grad-compress topk:1 -o "$TMP/dp4_ep2_tk" > "$TMP/dp4_ep2_tk.log" 2>&1
check $? "ep=2 on dp=4 with --grad-compress topk:1: 10 steps"
out=$(compare 1 10 "$TMP/dp4_ep2" "$TMP/dp4_ep2_tk") && grep -q "^gradient compression of the expert group (2 processes)" "$TMP/dp4_ep2_tk.log"
check $? "ep=2 on dp=4, topk:1 on both groups vs uncompressed: $(echo "$out" | tail -1)"
run 4 "${MOE[@]}" --ep 2 -z 1 --grad-compress int8 -o "$TMP/i8" > "$TMP/i8.log" 2>&1 &&
    run 4 "${MOE[@]}" --ep 2 -z 1 --grad-compress int8 -o "$TMP/i8ck" --exit-after-steps 5 > "$TMP/i8ck1.log" 2>&1 &&
    test -f "$TMP/i8ck/gradres_00000005_00003.bin" && test -f "$TMP/i8ck/gradrese_00000005_00003.bin" &&
    run 4 "${MOE[@]}" --ep 2 -z 1 --grad-compress int8 -o "$TMP/i8ck" -y 1 > "$TMP/i8ck2.log" 2>&1
check $? "ep=2 on dp=4 with --grad-compress int8: 10 steps; 5 steps, a checkpoint with both groups' residuals, resumed"
same=1
for f in model_00000010.bin state_00000010_00000.bin state_00000010_00003.bin gradrese_00000010_00001.bin; do
    cmp -s "$TMP/i8/$f" "$TMP/i8ck/$f" || same=0
done
test "$(steps "$TMP/i8.log" | tail -5)" = "$(steps "$TMP/i8ck2.log")" && test $same = 1
check $? "ep=2 int8 resumed: steps 6..10, the model, state and expert residual files bit-identical to the straight run"
dp_refused 2 "needs a mixture-of-experts model" "--ep on a dense model" -e d2 -b 1 -t 32 -j '' -g 0 -x 1 --ep 2
dp_refused 2 "--ep 4 does not divide the data-parallel size dp = 2" "--ep not dividing dp" "${MOE[@]}" -x 1 --ep 4

# the decoder family's experts: SwiGLU (fc rows [gate | up] of 2H = 1024, Mixtral-style) with RMSNorm, rotary
# positions, GQA and QK-norm around them; ep=2 against ep=1 on 2 processes, the same argument and tolerance as above
FAM=(-e L2:C128:NH4:KV2:T256:norm=rms:bias=0:tied=0:mlp=swiglu:pos=rope:qknorm=1 "${MOE[@]:2}")
run 2 "${FAM[@]}" --ep 1 -o "$TMP/fam_ep1" > "$TMP/fam_ep1.log" 2>&1 &&
    run 2 "${FAM[@]}" --ep 2 -o "$TMP/fam_ep2" > "$TMP/fam_ep2.log" 2>&1 && compare 1 10 "$TMP/fam_ep1" "$TMP/fam_ep2"
check $? "SwiGLU experts in the decoder family: ep=2 equals ep=1 on dp=2 (losses and norms of 10 steps, $TOL relative)"
