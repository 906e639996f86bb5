# dev/test/cli_moe_tp.sh -- mixture of experts with tensor parallelism (expert tensor parallelism; llmc/README.md,
# "Mixture of experts"): each expert's fc rows and fcproj columns split over tp like the dense MLP's, the router
# replicated and run on every tp rank on the same rows, the gates' gradients summed over tp. Model d2 with 4 experts
# top-2 in every second block (block 1 has experts, block 0 a dense MLP: both kinds of MLP slice under tp), B=2
# T=16, 10 steps, fp32 CPU build under mpirun. Tolerance T(10) = 14 x 16 x 2^-24 (dev/test/dp_lib.sh: tp splits
# the fp32 sums of the row-parallel GEMMs, the gates' dot products and the norm over the ranks; a token routed
# differently on one tp rank would sum slices of different experts and move the loss by 1e-3 or more).
#   - tp 2 (capacity factor 1.25, so drops happen), tp 2 with sequence parallelism (no capacity limit), tp 2 x dp 2
#     with sequence parallelism and ZeRO-2 (2 micro-steps against one process's 4) and the decoder family's SwiGLU
#     experts (RMSNorm, rotary, untied head) at tp 2: losses, gradient norms (log.jsonl, full precision) and the
#     final weights' RMS against one process;
#   - validation with padding (3 windows) equals one process's;
#   - -r 3 (activation checkpointing) at tp 2 is bit-identical to -r 0 at tp 2;
#   - the memory ledger equals the allocation, and each rank holds half of every expert (the header's count);
#   - bytes every rank moves in its tp group per step = the dense theory of dev/test/cli_tp.sh + one all-reduce of
#     the N k gate gradients (fp32) per MoE block (within 64 bytes): a missing gate sum fails it, and the losses;
#   - checkpoints: resumed on the same layout (tp 2 x dp 2) bit for bit (steps, model file, every state file),
#     re-sharded to one process and from one process to tp 2 (llmc/zero_experts.h, zero_experts_read_resharded):
#     within T(10);
#   - tp 2 x ep 2 (4 processes, ZeRO-1: the experts split over ep, each expert's slices over tp, the experts' norm
#     summed over tp and ep, the model file gathered over both) against one process, and its checkpoint of step 5
#     re-sharded onto one process;
#   - refused with one line: a --tp not dividing --moe-hidden.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
T10=$(dp_order_tol 10)
MOE=(-e d2 -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 10 --moe-experts 4 --moe-top-k 2 --moe-every 2 --moe-z-coef 0.001)
VAL=(-j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -m 3 -v 5)
tp_bytes() { # LOG ACCUM SP: step 2's tp bytes of every rank = theory within 64 bytes
    python3 - "$@" <<'PY'
import re, sys
log, accum, sp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p, Nr, C, L, Lm, k, es = 2, 2 * 16, 128, 2, 1, 2, 4
ring = lambda count: (p - 1) / p * count * es
if sp:
    per_micro = (4 * L + 2) * ring(Nr * C) + (6 * L + 3) * ring(Nr * C) + (2 * L + 1) * 2 * ring(2 * C)
else:
    per_micro = (4 * L + 2) * 2 * ring(Nr * C)
per_micro += 2 * ring(p * Nr) + 2 * ring(2 * Nr)  # vocabulary-parallel loss statistics
per_micro += Lm * 2 * ring(Nr * k)                  # each MoE block's gate gradients (N, k) fp32
theory = accum * per_micro
rows = [tuple(map(int, m.groups())) for m in re.finditer(r"step 2 sent \d+ recv \d+ bytes .*\| tp rank (\d+) sent (\d+) recv (\d+)", open(log).read())]
ok = len(rows) > 0 and all(abs(s - theory) <= 64 and abs(r - theory) <= 64 for _, s, r in rows)
print("theory %.0f bytes per rank (%d micro-steps); measured (tp rank, sent, recv): %s" % (theory, accum, sorted(rows)))
sys.exit(0 if ok else 1)
PY
}

dp_run one 1 "${MOE[@]}" "${VAL[@]}" --moe-capacity-factor 1.25
dp_run tp2 2 "${MOE[@]}" "${VAL[@]}" --moe-capacity-factor 1.25 --tp 2 --comm-stats 1
dp_against one tp2
out=$(dp_compare_logs "$TMP/one/log.jsonl" "$TMP/tp2/log.jsonl" val val_loss $T10 3)
check $? "tp 2: validation (3 windows, the last batch padded) equals one process's at steps 0, 5, 10: $out"
grep -q "drop [1-9]" "$TMP/tp2.log"
check $? "tp 2 with capacity factor 1.25 drops choices in some step (the capacity is exercised)"
out=$(tp_bytes "$TMP/tp2.log" 1 0)
check $? "tp 2: tp bytes per rank per step = dense theory + the gates' all-reduce: $out"
grep -q "^memory ledger .* -> equal$" "$TMP/tp2.log"
check $? "tp 2: the memory ledger equals the allocation"
python3 - "$TMP/tp2.log" <<'PY'
import re, sys
# d2, Vp 50304, maxT 256, C 128, L 2 (block 1 with 4 experts of H 512), biases, tied head; each tp rank holds
# split tensors / 2 and replicated ones whole
C, H, E, Vp, T = 128, 512, 4, 50304, 256
dense_block = 2 * C + (3 * C * C + 3 * C) // 2 + C * C // 2 + C + 2 * C            # ln1, qkv, attproj(+b), ln2
mlp = (4 * C * C + 4 * C) // 2 + 4 * C * C // 2 + C                                  # fc(+b), fcproj(+b)
experts = E * C + E * ((H * C + H) // 2 + C * H // 2 + C)                             # router, experts' halves
want = Vp * C // 2 + T * C + 2 * dense_block + mlp + experts + 2 * C
got = int(re.search(r"tensor parallel 2: each process holds (\d+) of", open(sys.argv[1]).read()).group(1))
print("# parameters per tp rank: header %d, from the sharding rules %d" % (got, want))
sys.exit(0 if got == want else 1)
PY
check $? "tp 2: each rank holds half of every expert and of the dense MLP, the router whole (header = sharding rules)"

dp_run one0 1 "${MOE[@]}" --moe-capacity-factor 0
dp_run tp2sp 2 "${MOE[@]}" --moe-capacity-factor 0 --tp 2 --sequence-parallel 1 --comm-stats 1
dp_against one0 tp2sp
out=$(tp_bytes "$TMP/tp2sp.log" 1 1)
check $? "tp 2 with sequence parallelism: tp bytes per rank per step = dense theory + the gates' all-reduce: $out"
dp_run one4 1 "${MOE[@]}" --moe-capacity-factor 1.25 -d 128
dp_run tp2dp2 4 "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 --tp 2 --sequence-parallel 1 -z 2
dp_against one4 tp2dp2
grep -q "^memory ledger .* -> equal$" "$TMP/tp2dp2.log"
check $? "tp 2 x dp 2, ZeRO-2: the memory ledger equals the allocation"
FAM=(-e L2:C64:NH4:KV2:T48:norm=rms:bias=0:mlp=swiglu:pos=rope:tied=0 -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 10
     --moe-experts 4 --moe-top-k 2 --moe-every 2 --moe-capacity-factor 1.25)
dp_run fam1 1 "${FAM[@]}"
dp_run fam2 2 "${FAM[@]}" --tp 2
dp_against fam1 fam2
dp_run tp2r3 2 "${MOE[@]}" "${VAL[@]}" --moe-capacity-factor 1.25 --tp 2 -r 3
out=$(dp_same_training "$TMP/tp2" "$TMP/tp2r3" 10)
check $? "tp 2 with -r 3 (the MoE block recomputed, routing replayed) vs -r 0: $out"

# checkpoints: tp 2 x dp 2 stops after step 5; resumed on the same layout, on one process, and one process to tp 2
MPIRUN 4 $TRAIN "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 --tp 2 --sequence-parallel 1 -z 2 -o "$TMP/ck" \
    --exit-after-steps 5 > "$TMP/ck1.log" 2>&1
check $? "tp 2 x dp 2: checkpoint at step 5"
cp -r "$TMP/ck" "$TMP/ck_one"
MPIRUN 4 $TRAIN "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 --tp 2 --sequence-parallel 1 -z 2 -o "$TMP/ck" -y 1 \
    > "$TMP/ck2.log" 2>&1
check $? "tp 2 x dp 2: resumed from step 5"
same=1
for f in model_00000010.bin state_00000010_00000.bin state_00000010_00001.bin state_00000010_00002.bin state_00000010_00003.bin; do
    cmp -s "$TMP/tp2dp2/$f" "$TMP/ck/$f" || same=0
done
out=$(dp_same_training "$TMP/tp2dp2" "$TMP/ck" 10)
test $? -eq 0 && test $same = 1
check $? "tp 2 x dp 2 resume on the same layout: $out; every state file identical"
$TRAIN "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 -o "$TMP/ck_one" -y 1 > "$TMP/ck_one.log" 2>&1 &&
    grep -q "re-sharding the optimizer state for 1 processes with ZeRO stage 0 (tensor-parallel size 2 -> 1)" "$TMP/ck_one.log" &&
    test "$(grep -c '^step' "$TMP/ck_one.log")" -eq 5
check $? "the tp 2 x dp 2 checkpoint resumes on one process (re-sharded, said in one line)"
dp_against one4 ck_one
$TRAIN "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 -o "$TMP/ck_tp" --exit-after-steps 5 > "$TMP/ck_tp1.log" 2>&1 &&
    MPIRUN 2 $TRAIN "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 --tp 2 -z 1 -o "$TMP/ck_tp" -y 1 > "$TMP/ck_tp.log" 2>&1 &&
    grep -q "(tensor-parallel size 1 -> 2)" "$TMP/ck_tp.log" && test "$(grep -c '^step' "$TMP/ck_tp.log")" -eq 5
check $? "a one-process checkpoint resumes at tp 2 with ZeRO-1 (re-sharded)"
dp_against one4 ck_tp

# experts split over ep and each expert over tp
dp_run tpep 4 "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 --tp 2 --ep 2 -z 1
dp_against one4 tpep
grep -q "^memory ledger .* -> equal$" "$TMP/tpep.log"
check $? "tp 2 x ep 2: the memory ledger equals the allocation"
MPIRUN 4 $TRAIN "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 --tp 2 --ep 2 -z 1 -o "$TMP/ck_tpep" --exit-after-steps 5 \
    > "$TMP/ck_tpep1.log" 2>&1 && $TRAIN "${MOE[@]}" --moe-capacity-factor 1.25 -d 128 -o "$TMP/ck_tpep" -y 1 \
    > "$TMP/ck_tpep.log" 2>&1 && grep -q "(tensor-parallel size 2 -> 1) (expert-parallel size 2 -> 1)" "$TMP/ck_tpep.log"
check $? "a tp 2 x ep 2 checkpoint of step 5 resumes on one process (re-sharded over tp and ep)"
dp_against one4 ck_tpep
dp_refused 2 "does not divide the experts' hidden width 511" "--tp not dividing --moe-hidden" "${MOE[@]}" -x 1 --tp 2 \
    --moe-hidden 511
