# dev/test/cli_muon.sh -- --optimizer muon (llmc/muon.h) through the CLI on d2 (llmc/README.md, "The Muon optimizer"):
#   - one process trains: the loss falls over 6 steps (step 6 at least 0.1 below step 1: AdamW's own fall on these
#     flags is about 0.5; a Muon update that does nothing, or diverges, fails), and the header names Muon's 8 matrices;
#   - resume is bit-identical: 6 steps straight == 3 steps, checkpoint, -y 1, 3 more (final model and state files
#     cmp-equal: the momentum lives in the state file's m section);
#   - dp 2 on L2:C128:NH4:V512 (random tokens; P = 593,408, so the ZeRO-1 shard boundary S = 296,704 cuts layer 0's
#     attprojw, which both ranks then orthogonalise and each updates its part; d2's blocks all lie on the last rank
#     behind its 6.4M-value embedding): ZeRO-0 and ZeRO-1 train bit-identically (the same ring sums; ZeRO-1 all-gathers the Nesterov updates
#     in the gradient buffer, so every rank runs Newton-Schulz on the owners' values), and both equal one process
#     over the same global batch within dp_lib.sh's T(6) (losses, norms, RMS weights; why that tolerance still holds
#     for Muon: see "The Muon optimizer" in llmc/README.md);
#   - refusals, one line each: an unknown --optimizer, --tp 2, -z 2, a mixture-of-experts model.
source "$(dirname "$0")/dp_lib.sh"
M=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 --optimizer muon)
$TRAIN "${M[@]}" -x 6 -o "$TMP/a" > "$TMP/a.log" 2>&1
check $? "muon: 6 steps on one process"
grep -q 'optimizer: Muon (momentum 0.95, 5 Newton-Schulz steps) on 8 block matrices' "$TMP/a.log"
check $? "header: Muon on d2's 8 block matrices (qkvw, attprojw, fcw, fcprojw x 2 layers)"
python3 - "$TMP/a/log.jsonl" <<'PY'
import json, sys
l = [o["loss"] for o in map(json.loads, open(sys.argv[1])) if o["kind"] == "train"]
print("# losses", l)
sys.exit(0 if len(l) == 6 and l[-1] < l[0] - 0.1 else 1)
PY
check $? "muon: the loss falls (step 6 at least 0.1 below step 1)"
$TRAIN "${M[@]}" -x 6 -o "$TMP/b" --exit-after-steps 3 > "$TMP/b1.log" 2>&1 &&
    $TRAIN "${M[@]}" -x 6 -o "$TMP/b" -y 1 > "$TMP/b2.log" 2>&1
check $? "muon: 3 steps, checkpoint, resume for 3 more"
cmp -s "$TMP/a/model_00000006.bin" "$TMP/b/model_00000006.bin" &&
    cmp -s "$TMP/a/state_00000006_00000.bin" "$TMP/b/state_00000006_00000.bin"
check $? "muon: resumed run's final model and state (momentum) are bit-identical to the straight run's"
dp_require_mpi
dp_random_shard "$TMP/v512.bin" 512
S=(-e L2:C128:NH4:V512 -i "$TMP/v512.bin" -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 --optimizer muon)
$TRAIN "${S[@]}" -x 6 -d 256 -o "$TMP/one" > "$TMP/one.log" 2>&1
check $? "muon: one process, -d 256 (the dp runs' global batch)"
for z in 0 1; do
    MPIRUN 2 $TRAIN "${S[@]}" -x 6 -z $z -o "$TMP/z$z" > "$TMP/z$z.log" 2>&1
    check $? "muon: dp 2, ZeRO-$z, 6 steps"
done
out=$(dp_same_training "$TMP/z0" "$TMP/z1" 6)
check $? "muon: dp 2 ZeRO-1 trains bit-identically to ZeRO-0: $out"
tol=$(dp_order_tol 6)
out=$(dp_compare_logs "$TMP/one/log.jsonl" "$TMP/z1/log.jsonl" train loss $tol 6) &&
    out="$out; $(dp_compare_logs "$TMP/one/log.jsonl" "$TMP/z1/log.jsonl" train grad_norm $tol 6)" &&
    out="$out; $(dp_compare_models_rms "$TMP/one/model_00000006.bin" "$TMP/z1/model_00000006.bin" $tol)"
check $? "muon: dp 2 ZeRO-1 vs one process within T(6) = $tol: $out"
expect_error "expected adamw or muon" "--optimizer sgd" -- $TRAIN "${M[@]}" -x 1 --optimizer sgd
expect_error "--optimizer muon is built for" "muon with a mixture-of-experts model" -- \
    $TRAIN "${M[@]}" -x 1 -e L2:C128:NH4:E4:K2
dp_refused 2 "--optimizer muon is built for" "muon with --tp 2" "${M[@]}" -x 1 --tp 2
dp_refused 2 "--optimizer muon is built for" "muon with -z 2" "${M[@]}" -x 1 -z 2
