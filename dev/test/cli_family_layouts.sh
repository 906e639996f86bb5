# dev/test/cli_family_layouts.sh -- the decoder family (RMSNorm without biases, rotary positions, a SwiGLU MLP, an
# untied head, grouped-query attention, QK-norm; llmc/README.md "The model's architecture as data") trained 4 steps on
# the layouts the trainer builds, each against one process with the same global batch: every step's loss and
# gradient norm (log.jsonl, full precision) and the final weights' RMS within T(4) = dp_order_tol 4 (dev/test/dp_lib.sh:
# the layouts add the same fp32 terms in another order: a split dot product, a reduction over ranks). A wrong split of
# the unequal q/k/v blocks, a QK-norm weight gradient not summed over tp, a rotated position off by a stage's rows or
# a lost micro-batch move the loss by 1e-4 or more. Layouts: pipeline 2 interleaved (2 chunks a stage) and 1f1b (its
# checkpoint resumed bit for bit, and resumed under the interleaved schedule: re-sharded), tp 2 x pp 2 x
# dp 2 with ZeRO-1 and sequence parallelism (8 processes), tp 4 with one key/value head a rank (NH 8, KV 4), ZeRO-3
# on 3 processes (shards that cut tensors unevenly). The 2-process tp checkpoint, resume and re-sharding of the
# family are dev/test/cli_checksums.sh's; its SwiGLU experts under ep, cli_moe_ep.sh's.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
FAM=norm=rms:bias=0:tied=0:mlp=swiglu:pos=rope:qknorm=1
RUN=(-b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 4 -v 0)
T4=$(dp_order_tol 4)
# same_as ONE DIR LABEL: losses, norms and final weights of DIR against ONE within T(4)
same_as() {
    local out
    out=$(dp_compare_logs "$1/log.jsonl" "$2/log.jsonl" train loss "$T4" 4) &&
        out="$out; $(dp_compare_logs "$1/log.jsonl" "$2/log.jsonl" train grad_norm "$T4" 4)" &&
        out="$out; $(dp_compare_models_rms "$1/model_00000004.bin" "$2/model_00000004.bin" "$T4")"
    check $? "$3 equals one process within T(4) = $T4: $out"
}
A=(-e "L4:C128:NH4:KV2:T256:$FAM" "${RUN[@]}")
$TRAIN "${A[@]}" -d 512 -o "$TMP/one" > "$TMP/one.log" 2>&1
check $? "the family (L4, NH 4, KV 2), one process, 4 micro-steps a step: runs"
MPIRUN 2 $TRAIN "${A[@]}" -d 512 --pp 2 --pp-schedule interleaved --pp-virtual 2 -o "$TMP/ppi" > "$TMP/ppi.log" 2>&1
check $? "pp 2 interleaved (v 2): runs"
same_as "$TMP/one" "$TMP/ppi" "pp 2 interleaved"
# pp 2 1f1b; its checkpoint of step 2 resumed on 1f1b (bit for bit) and under the interleaved schedule (the stages'
# layers change: a re-sharded resume; within T(4)). Catches rotary positions or a family tensor (qnormw, knormw, the
# untied head) lost or misplaced by a stage's state file or its re-sharding.
MPIRUN 2 $TRAIN "${A[@]}" -d 512 --pp 2 -o "$TMP/pp1" > "$TMP/pp1.log" 2>&1
check $? "pp 2 1f1b: runs"
same_as "$TMP/one" "$TMP/pp1" "pp 2 1f1b"
MPIRUN 2 $TRAIN "${A[@]}" -d 512 --pp 2 -o "$TMP/ppr" --exit-after-steps 2 > "$TMP/ppr.log" 2>&1 &&
    cp -r "$TMP/ppr" "$TMP/ppx" &&
    MPIRUN 2 $TRAIN "${A[@]}" -d 512 --pp 2 -o "$TMP/ppr" -y 1 > "$TMP/ppr2.log" 2>&1 &&
    grep -q "^resume: continuing from step 2" "$TMP/ppr2.log" && dp_same_training "$TMP/pp1" "$TMP/ppr" 4
check $? "pp 2 1f1b: 2 steps, exit with a checkpoint, resumed: steps 3..4 and the model file bit-identical to the straight run"
MPIRUN 2 $TRAIN "${A[@]}" -d 512 --pp 2 --pp-schedule interleaved --pp-virtual 2 -o "$TMP/ppx" -y 1 \
    > "$TMP/ppx.log" 2>&1 && grep -q "^resume: checkpoint step 2 .* re-sharding" "$TMP/ppx.log"
check $? "the pp 2 1f1b checkpoint resumed under the interleaved schedule (v 2): the stages changed, re-sharded"
same_as "$TMP/one" "$TMP/ppx" "1f1b checkpoint resumed interleaved"
MPIRUN 8 $TRAIN "${A[@]}" -d 512 --tp 2 --pp 2 --sequence-parallel 1 -z 1 -o "$TMP/3d" > "$TMP/3d.log" 2>&1
check $? "tp 2 x pp 2 x dp 2, ZeRO-1, sequence parallel (8 processes): runs"
same_as "$TMP/one" "$TMP/3d" "tp 2 x pp 2 x dp 2 ZeRO-1 + sp"
B=(-e "L2:C128:NH8:KV4:T256:$FAM" "${RUN[@]}" -d 128)
$TRAIN "${B[@]}" -o "$TMP/one8" > "$TMP/one8.log" 2>&1 &&
    MPIRUN 4 $TRAIN "${B[@]}" --tp 4 --sequence-parallel 1 -o "$TMP/tp4" > "$TMP/tp4.log" 2>&1
check $? "NH 8, KV 4: one process and tp 4 + sp (2 query heads and 1 key/value head a rank): run"
same_as "$TMP/one8" "$TMP/tp4" "tp 4 + sp"
$TRAIN "${A[@]}" -d 384 -o "$TMP/one3" > "$TMP/one3.log" 2>&1 &&
    MPIRUN 3 $TRAIN "${A[@]}" -d 384 -z 3 -o "$TMP/z3" > "$TMP/z3.log" 2>&1
check $? "one process and ZeRO-3 on 3 processes (3 micro-steps a step): run"
same_as "$TMP/one3" "$TMP/z3" "ZeRO-3 on 3 processes"
