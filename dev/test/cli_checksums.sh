# dev/test/cli_checksums.sh -- --debug-checksums (llmc/debug_checksums.h) and scripts/compare_checksums.py: one step
# of d2 on one process and on tp 2 x pp 2 with sequence parallelism (4 processes, the same global batch) prints every
# layer's activations and every parameter tensor's gradient once, of full shape (the element counts of the full
# tensors), and the two agree within rtol 3e-5: the layouts reorder fp32 dot products of at most K = 4C = 512 terms,
# which moves a value by at most K 2^-24 = 3.1e-5 relative to the sum of |terms| (the tool compares on the scale of the
# tensor's sum of |x|). A run whose weights differ (another --seed) is reported at the first tensor it touches, the
# embedding output; a gradient scaled by a wrong factor would be reported at the first gradient in backward order.
source "$(dirname "$0")/dp_lib.sh"
F=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -x 1 -d 256 --debug-checksums 1)
$TRAIN "${F[@]}" > "$TMP/one.log" 2>&1
check $? "one process, --debug-checksums 1: runs"
MPIRUN 4 $TRAIN "${F[@]}" --tp 2 --pp 2 --sequence-parallel 1 > "$TMP/3d.log" 2>&1
check $? "tp 2 x pp 2 + sequence parallel, --debug-checksums 1: runs"
# d2: per layer 8 activations (ln1 qkv atty residual2 ln2 fch fch_gelu out) x 2 + encoded, lnf, logits, losses = 20;
# gradients: 12 per-layer tensors x 2 + wte, wpe, lnfw, lnfb = 28
for f in one 3d; do
    test "$(grep -c '^checksum step 1 act' "$TMP/$f.log")" -eq 20 && test "$(grep -c '^checksum step 1 grad' "$TMP/$f.log")" -eq 28 &&
        grep -q '^checksum step 1 grad -1 wte sum=.* n=6438912$' "$TMP/$f.log" && grep -q '^checksum step 1 act 1 qkv .* n=49152$' "$TMP/$f.log"
    check $? "$f: 20 activation and 28 gradient checksums of step 1, full shapes (wte 6438912 elements, qkv B*T*3C = 49152)"
done
out=$(python3 scripts/compare_checksums.py "$TMP/one.log" "$TMP/3d.log" --rtol 3e-5)
check $? "tp 2 x pp 2 + sp agrees with one process within rtol 3e-5 (K 2^-24, K = 512): $out"
# dualpipe (two parameter copies): each layer's activations and gradients printed once, by its first copy (m 4)
$TRAIN "${F[@]}" -d 512 > "$TMP/one4.log" 2>&1 && \
    MPIRUN 2 $TRAIN "${F[@]}" -d 512 --pp 2 --pp-schedule dualpipe > "$TMP/dual.log" 2>&1
out=$(python3 scripts/compare_checksums.py "$TMP/one4.log" "$TMP/dual.log" --rtol 3e-5)
check $? "pp 2 dualpipe agrees with one process within rtol 3e-5, each layer once: $out"
$TRAIN "${F[@]}" --seed 7 > "$TMP/seed.log" 2>&1
out=$(python3 scripts/compare_checksums.py "$TMP/one.log" "$TMP/seed.log" --rtol 3e-5)
rc=$?
test $rc -eq 1 && [[ "$out" == "first difference: step 1 activation layer -1 encoded:"* ]]
check $? "another --seed (other initial weights): exit $rc, the first difference is the embedding output: $out"
# The decoder family's RMSNorm without biases, with an untied head, a SwiGLU MLP, rotary positions, grouped-query
# attention and QK-norm (-e ...:KV2:norm=rms:bias=0:tied=0:mlp=swiglu:pos=rope:qknorm=1, llmc/README.md "The model's
# architecture as data"):
# the same step on one process, on tp 2 x pp 2 with sequence parallelism (RMSNorm's weight gradient summed over the tp
# ranks from their rows; wte only on the first stage, the head lmheadw split over the vocabulary on the last; each tp
# rank's fc rows its slice of the gate and of the up block, its qkv rows its 2 query heads and its 1 key/value head of
# the q, k and v blocks of unequal size; rotary positions of the gathered rows) and on dp 2 with ZeRO-3 agree within
# the same rtol (QK-norm's weight gradients summed over the tp ranks, each of which normalises its own heads); no bias
# tensors, so 8 per layer (qnormw and knormw among them), no wpe, and lmheadw; qkv of (NH + 2 KV) hs = 256 rows
R=(-e L2:C128:NH4:KV2:T256:norm=rms:bias=0:tied=0:mlp=swiglu:pos=rope:qknorm=1 -b 4 -t 32 -j '' -g 0 -u 2 -x 1 -d 256 --debug-checksums 1)
$TRAIN "${R[@]}" > "$TMP/rms_one.log" 2>&1
check $? "the family, one process, --debug-checksums 1: runs"
test "$(grep -c '^checksum step 1 grad' "$TMP/rms_one.log")" -eq 19 && ! grep -q '^checksum step 1 grad [-0-9]* [a-z0-9]*b ' "$TMP/rms_one.log" &&
    ! grep -q '^checksum step 1 grad -1 wpe ' "$TMP/rms_one.log" &&
    grep -q '^checksum step 1 grad -1 lmheadw .* n=6438912$' "$TMP/rms_one.log" &&
    grep -q '^checksum step 1 grad 1 qkvw .* n=32768$' "$TMP/rms_one.log" && grep -q '^checksum step 1 act 1 qkv .* n=32768$' "$TMP/rms_one.log"
check $? "the family (RMSNorm, bias=0, tied=0, SwiGLU, rope, KV 2, QK-norm): 19 gradient checksums (8 per layer + wte, lnfw, lmheadw of Vp x C), none of a bias or wpe; qkvw (C + 2 KV hs) x C = 32768, qkv B T (C + 2 KV hs) = 32768"
out=$(python3 scripts/compare_checksums.py "$TMP/one.log" "$TMP/rms_one.log" --rtol 3e-5)
test $? -eq 1
check $? "the family and GPT-2 differ from the first activation on (no wpe): $out"
MPIRUN 4 $TRAIN "${R[@]}" --tp 2 --pp 2 --sequence-parallel 1 > "$TMP/rms_3d.log" 2>&1
check $? "the family, tp 2 x pp 2 + sequence parallel: runs"
out=$(python3 scripts/compare_checksums.py "$TMP/rms_one.log" "$TMP/rms_3d.log" --rtol 3e-5)
check $? "the family, tp 2 x pp 2 + sp agrees with one process within rtol 3e-5: $out"
MPIRUN 2 $TRAIN "${R[@]}" -z 3 > "$TMP/rms_z3.log" 2>&1
check $? "the family, dp 2 ZeRO-3: runs"
out=$(python3 scripts/compare_checksums.py "$TMP/rms_one.log" "$TMP/rms_z3.log" --rtol 3e-5)
check $? "the family, dp 2 ZeRO-3 agrees with one process within rtol 3e-5: $out"
# the family's checkpoints: tp 2 with sequence parallelism, 6 steps straight, or 3 then a checkpoint; resumed on the same
# layout the final model and both ranks' optimizer state are bit-identical; re-sharded to one process (the full
# model's flat order: lmheadw, SwiGLU's two-block fc and grouped-query attention's unequal qkv blocks included) the next losses and the final weights agree within
# T(6), the reordering of fp32 sums the tp split brings (dp_order_tol)
G=(-e L2:C128:NH4:KV2:T256:qknorm=1:norm=rms:bias=0:tied=0:mlp=swiglu:pos=rope -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 6 -d 128)
MPIRUN 2 $TRAIN "${G[@]}" --tp 2 --sequence-parallel 1 -o "$TMP/fam_straight" > "$TMP/fam_straight.log" 2>&1
check $? "the family, tp 2 + sp: 6 steps straight"
MPIRUN 2 $TRAIN "${G[@]}" --tp 2 --sequence-parallel 1 -o "$TMP/fam_cut" --exit-after-steps 3 > "$TMP/fam_cut.log" 2>&1
check $? "the family, tp 2 + sp: 3 steps, then exit with a checkpoint"
cp -r "$TMP/fam_cut" "$TMP/fam_to1"
MPIRUN 2 $TRAIN "${G[@]}" --tp 2 --sequence-parallel 1 -o "$TMP/fam_cut" -y 1 > "$TMP/fam_cut2.log" 2>&1
ok=$?
for f in model_00000006.bin state_00000006_0000{0,1}.bin; do cmp -s "$TMP/fam_straight/$f" "$TMP/fam_cut/$f" || ok=1; done
check $ok "the family resumed on the same layout: final model (version 9) and both ranks' optimizer state bit-identical"
T6=$(dp_order_tol 6)
$TRAIN "${G[@]}" -o "$TMP/fam_to1" -y 1 > "$TMP/fam_to1.log" 2>&1 && grep -q "(tensor-parallel size 2 -> 1)" "$TMP/fam_to1.log" &&
    out=$(dp_compare_logs "$TMP/fam_straight/log.jsonl" "$TMP/fam_to1/log.jsonl" train loss $T6 6) &&
    out="$out; $(dp_compare_models_rms "$TMP/fam_straight/model_00000006.bin" "$TMP/fam_to1/model_00000006.bin" $T6)"
check $? "the family's tp 2 checkpoint re-sharded to one process: losses and final weights within T(6): $out"
# experts: 4 of them top-2 in block 1 (capacity unlimited), tp 2 x ep 2 (each expert's slices over tp, the experts
# over ep) against one process: every activation and gradient checksum, the experts' tensors summed over tp and ep
X=(-e d2 -b 2 -t 16 -j '' -g 0 -u 2 -x 1 -d 64 --debug-checksums 1 --moe-experts 4 --moe-top-k 2 --moe-every 2)
$TRAIN "${X[@]}" > "$TMP/moe_one.log" 2>&1 && MPIRUN 4 $TRAIN "${X[@]}" --tp 2 --ep 2 -z 1 > "$TMP/moe_tpep.log" 2>&1 &&
    test "$(grep -c 'checksum step 1 grad .* efcw ' "$TMP/moe_tpep.log")" -eq 1 &&
    out=$(python3 scripts/compare_checksums.py "$TMP/moe_one.log" "$TMP/moe_tpep.log" --rtol 3e-5)
check $? "experts at tp 2 x ep 2 agree with one process within rtol 3e-5 (efcw's gradient once, of the full tensor): $out"
