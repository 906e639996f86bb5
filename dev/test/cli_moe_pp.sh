# dev/test/cli_moe_pp.sh -- mixture of experts with pipeline parallelism (llmc/README.md, "Mixture of experts" and
# "Pipeline parallelism"): each stage holds the expert tensors of its own MoE blocks and the dense-MLP tensors of its
# other blocks (stage-local slices, llmc/gpt2.h gpt2_stage_slices), the interleaved schedule's chunks their part of
# those; the routing statistics are gathered over the stages for the log; with --ep the experts' norm is summed over
# pp too and the model file gathers each stage's experts over its ep group. Model d8 (L8 C128) with 4 experts top-2
# in every second block (blocks 1, 3, 5, 7), B=2 T=16, -d 128 (4 micro-batches on one process), 10 steps, fp32 CPU
# build under mpirun. Tolerance T(10) = 14 x 16 x 2^-24 (dev/test/dp_lib.sh: a pipeline computes every layer as one
# process does; the norm is summed over the stages and the tied wte's gradient in another order). A block reading
# another block's expert slice (a global index used for a stage-local tensor) moves the loss by 1e-3 or more.
#   - pp 2 (1f1b, capacity factor 1.25: choices dropped), pp 2 interleaved v 2 (no capacity limit; every chunk holds
#     one MoE and one dense block, so both kinds of slice start past the stage's first), pp 2 x dp 2 with ep 2, tp 2 x pp 2 x dp 2 with ep 2 (8 processes): losses, gradient norms (log.jsonl, full
#     precision) and the final weights' RMS against one process;
#   - every MoE block's routing statistics in the log (the fractions per expert and the dropped fraction exactly,
#     the aux and z losses within T(10)) equal one process's: the stages' statistics gathered;
#   - validation with padding (3 windows) equals one process's (the padding not routed on any stage);
#   - -r 3 at pp 2 interleaved is bit-identical to -r 0 (the MoE blocks recomputed in their chunk's window);
#   - the memory ledger equals the allocation on every stage;
#   - pp 4 x ep 2 with d8 and experts in every 4th block: stages 0 and 2 hold no MoE block (an empty expert group);
#   - checkpoints: pp 2 x dp 2 with ep 2 resumed on the same layout bit for bit (steps, model file, every state
#     file); its step-5 checkpoint re-sharded onto one process, and one process's onto pp 2 interleaved x ep 2 with
#     ZeRO-2 (llmc/zero_experts.h, zero_experts_read_resharded through each file's stage): within T(10).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
T10=$(dp_order_tol 10)
MOE=(-e d8 -b 2 -t 16 -d 128 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 10 --moe-experts 4 --moe-top-k 2 --moe-every 2
     --moe-z-coef 0.001)
CAP=(--moe-capacity-factor 1.25)
VAL=(-j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -m 3 -v 5)
ledger() { # NAME STAGES: every stage's memory ledger equals its allocation
    test "$(grep -c '^memory ledger (llmc/ledger.h, bytes, pipeline stage [0-9]*).* -> equal$' "$TMP/$1.log")" -eq "$2"
    check $? "$1: the memory ledger equals the allocation on each of its $2 stages"
}

dp_run one 1 "${MOE[@]}" "${CAP[@]}"
dp_run pp2 2 "${MOE[@]}" "${CAP[@]}" --pp 2
dp_against one pp2
python3 - "$TMP/one/log.jsonl" "$TMP/pp2/log.jsonl" "$T10" <<'PY'
import json, sys
a, b = ([o["moe"] for o in map(json.loads, open(p)) if o["kind"] == "train"] for p in sys.argv[1:3])
tol, ok, worst = float(sys.argv[3]), len(a) == 10 and len(b) == 10, 0.0
for x, y in zip(a, b):
    ok &= [e["block"] for e in x] == [1, 3, 5, 7] and [e["block"] for e in y] == [1, 3, 5, 7]
    for e, f in zip(x, y):
        ok &= e["f"] == f["f"] and e["drop"] == f["drop"]
        for k in ("aux", "z"):
            worst = max(worst, abs(e[k] - f[k]) / abs(e[k]))
print("# blocks", [e["block"] for e in b[-1]], "drops", [e["drop"] for e in b[-1]], "worst aux/z relative", worst)
sys.exit(0 if ok and worst <= tol and any(e["drop"] > 0 for s in b for e in s) else 1)
PY
check $? "pp 2: every MoE block's routing statistics (4 blocks over 2 stages, choices dropped) equal one process's"
ledger pp2 2
dp_run onev 1 "${MOE[@]}" "${VAL[@]}"
dp_run il 2 "${MOE[@]}" "${VAL[@]}" --pp 2 --pp-schedule interleaved --pp-virtual 2
dp_against onev il
out=$(dp_compare_logs "$TMP/onev/log.jsonl" "$TMP/il/log.jsonl" val val_loss $T10 3)
check $? "pp 2 interleaved: validation (3 windows, the last batch padded) equals one process's at steps 0, 5, 10: $out"
ledger il 2
dp_run ilr3 2 "${MOE[@]}" "${VAL[@]}" --pp 2 --pp-schedule interleaved --pp-virtual 2 -r 3
out=$(dp_same_training "$TMP/il" "$TMP/ilr3" 10)
check $? "pp 2 interleaved with -r 3 (MoE blocks recomputed, routing replayed) vs -r 0: $out"
dp_run ppep 4 "${MOE[@]}" "${CAP[@]}" --pp 2 --ep 2 -z 1
dp_against one ppep
ledger ppep 2
dp_run tpppep 8 "${MOE[@]}" "${CAP[@]}" --tp 2 --pp 2 --ep 2 -z 1
dp_against one tpppep
E4=(-e d8 -b 2 -t 16 -d 256 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 10 --moe-experts 4 --moe-top-k 2 --moe-every 4)
dp_run e4one 1 "${E4[@]}"
dp_run e4pp4 8 "${E4[@]}" --pp 4 --ep 2 -z 1
dp_against e4one e4pp4

# checkpoints: pp 2 x dp 2 with ep 2 stops after step 5; resumed on the same layout and on one process; one
# process's step-5 checkpoint resumed on pp 2 interleaved x dp 2 with ep 2 and ZeRO-2
MPIRUN 4 $TRAIN "${MOE[@]}" "${CAP[@]}" --pp 2 --ep 2 -z 1 -o "$TMP/ck" --exit-after-steps 5 > "$TMP/ck1.log" 2>&1
check $? "pp 2 x ep 2: checkpoint at step 5"
cp -r "$TMP/ck" "$TMP/ck_one"
MPIRUN 4 $TRAIN "${MOE[@]}" "${CAP[@]}" --pp 2 --ep 2 -z 1 -o "$TMP/ck" -y 1 > "$TMP/ck2.log" 2>&1
check $? "pp 2 x ep 2: resumed from step 5"
out=$(dp_same_checkpoint "$TMP/ppep" "$TMP/ck" 10 4)
check $? "pp 2 x ep 2 resume on the same layout: $out"
$TRAIN "${MOE[@]}" "${CAP[@]}" -o "$TMP/ck_one" -y 1 > "$TMP/ck_one.log" 2>&1 &&
    grep -q "re-sharding the optimizer state for 1 processes with ZeRO stage 0 (pipeline size 2 -> 1) (expert-parallel size 2 -> 1)" "$TMP/ck_one.log" &&
    test "$(grep -c '^step' "$TMP/ck_one.log")" -eq 5
check $? "the pp 2 x ep 2 checkpoint resumes on one process (re-sharded, said in one line)"
dp_against one ck_one
$TRAIN "${MOE[@]}" "${CAP[@]}" -o "$TMP/ck_pp" --exit-after-steps 5 > "$TMP/ck_pp1.log" 2>&1 &&
    MPIRUN 4 $TRAIN "${MOE[@]}" "${CAP[@]}" --pp 2 --pp-schedule interleaved --pp-virtual 2 --ep 2 -z 2 -o "$TMP/ck_pp" -y 1 \
    > "$TMP/ck_pp.log" 2>&1 && grep -q "(pipeline size 1 -> 2) (expert-parallel size 1 -> 2)" "$TMP/ck_pp.log" &&
    test "$(grep -c '^step' "$TMP/ck_pp.log")" -eq 5
check $? "a one-process checkpoint resumes on pp 2 interleaved x ep 2 with ZeRO-2 (re-sharded)"
dp_against one ck_pp
