# dev/test/cli_muon.sh -- --optimizer muon (llmc/muon.h) through the CLI on d2 (llmc/README.md, "The Muon optimizer"):
#   - one process trains: the loss falls over 6 steps (step 6 at least 0.1 below step 1: AdamW's own fall on these
#     flags is about 0.5; a Muon update that does nothing, or diverges, fails), and the header names Muon's 8 matrices;
#   - resume is bit-identical: 6 steps straight == 3 steps, checkpoint, -y 1, 3 more (final model and state files
#     cmp-equal: the momentum lives in the state file's m section);
#   - every layout against one process over the same global batch (L2:C128:NH4:V512 on 16k random tokens, -d 512, 10
#     steps): dp 2 with ZeRO-1, 2 and 3, tp 2, pp 2 and tp 2 x pp 2 x dp 2 (8 processes); losses and final weights
#     within dp_lib.sh's T(10) (why that tolerance holds for Muon: "The Muon optimizer" in llmc/README.md; measured
#     6e-7..9e-7 relative; tp's Gram matrices left unsummed give 6e-3, a cut matrix not gathered garbage). The ZeRO-1
#     shard boundary S = 296,704 cuts layer 0's attprojw, so the gather of a cut matrix runs; ZeRO-3 trains
#     bit-identically to ZeRO-2 (the same reduced gradients, the same gathers);
#   - the bytes each dp 2 rank sends per step under ZeRO-1/2/3 equal zero_step_bytes_theory (which counts the cut
#     matrices' gathers: without them it is 2 KiB or 62 KiB off per rank) plus the step statistics' 32 bytes;
#   - ZeRO-0 and ZeRO-1 train bit-identically on dp 2 (the same ring sums; every rank runs Newton-Schulz on the
#     owners' values);
#   - resume: a dp 2 ZeRO-2 run cut at step 5 resumes bit for bit (model, both ranks' state files), and its
#     checkpoint re-shards to tp 2 (momentum re-sharded as m) within T(10) of one process;
#   - a mixture-of-experts model (the router and each expert's fc and fcproj are Muon matrices): one process, tp 2,
#     pp 2 and dp 2 at ZeRO-1 within T(10) of one process; ZeRO-3 bit-identical to ZeRO-2;
#   - refusals, one line each: an unknown --optimizer, --offload-optimizer, --grad-compress, --ep.
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
dp_random_shard "$TMP/v512.bin" 512 16384
S=(-e L2:C128:NH4:V512 -i "$TMP/v512.bin" -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 --optimizer muon -d 512 -x 10)
$TRAIN "${S[@]}" -o "$TMP/one" > "$TMP/one.log" 2>&1
check $? "muon: one process, 10 steps of -d 512 (4 micro-steps)"
T10=$(dp_order_tol 10)
for L in "2 -z 0" "2 -z 1" "2 -z 2" "2 -z 3" "2 --tp 2" "2 --pp 2" "8 --tp 2 --pp 2 -z 1"; do
    n=${L%% *}; flags=${L#* }; run=$(echo "$flags" | tr -d ' -')
    MPIRUN "$n" $TRAIN "${S[@]}" $flags --comm-stats 1 -o "$TMP/$run" > "$TMP/$run.log" 2>&1
    check $? "muon: $n processes, $flags: 10 steps"
    [ "$flags" = "-z 0" ] && continue
    out=$(dp_compare_logs "$TMP/one/log.jsonl" "$TMP/$run/log.jsonl" train loss $T10 10) &&
        out="$out; $(dp_compare_models_rms "$TMP/one/model_00000010.bin" "$TMP/$run/model_00000010.bin" $T10)"
    check $? "muon: $n processes, $flags vs one process within T(10) = $T10: $out"
done
python3 - "$TMP"/z{1,2,3}.log <<'PY'
import re, sys
bad, n = [], 0
for f in sys.argv[1:]:
    for sent, theory in re.findall(r"^comm: rank \d step \d+ sent (\d+) .* ring theory (\d+)", open(f).read(), re.M):
        n += 1
        if int(sent) != int(theory) + 32: bad.append((f, sent, theory))
print("# %d comm lines, mismatches %s" % (n, bad[:3]))
sys.exit(0 if n == 60 and not bad else 1)
PY
check $? "muon: dp 2 ZeRO-1/2/3 bytes each rank sends per step = the ring theory (with the cut matrices' gathers) + the 32 bytes of step statistics"
out=$(dp_same_training "$TMP/z0" "$TMP/z1" 10)
check $? "muon: dp 2 ZeRO-1 trains bit-identically to ZeRO-0: $out"
out=$(dp_same_training "$TMP/z2" "$TMP/z3" 10)
check $? "muon: dp 2 ZeRO-3 trains bit-identically to ZeRO-2: $out"
MPIRUN 2 $TRAIN "${S[@]}" -z 2 -o "$TMP/cut" --exit-after-steps 5 > "$TMP/cut.log" 2>&1
check $? "muon: dp 2 ZeRO-2, 5 steps, then exit with a checkpoint"
cp -r "$TMP/cut" "$TMP/totp"
MPIRUN 2 $TRAIN "${S[@]}" -z 2 -o "$TMP/cut" -y 1 > "$TMP/cut2.log" 2>&1
ok=$?
for f in model_00000010.bin state_00000010_0000{0,1}.bin; do cmp -s "$TMP/z2/$f" "$TMP/cut/$f" || ok=1; done
check $ok "muon: dp 2 ZeRO-2 resumed on the same layout: final model and both ranks' state (momentum) bit-identical"
MPIRUN 2 $TRAIN "${S[@]}" --tp 2 -o "$TMP/totp" -y 1 > "$TMP/totp.log" 2>&1
check $? "muon: the dp 2 ZeRO-2 checkpoint resumes on tp 2"
out=$(dp_compare_logs "$TMP/one/log.jsonl" "$TMP/totp/log.jsonl" train loss $T10 10) &&
    out="$out; $(dp_compare_models_rms "$TMP/one/model_00000010.bin" "$TMP/totp/model_00000010.bin" $T10)"
check $? "muon: re-sharded dp 2 ZeRO-2 -> tp 2 resume vs one process within T(10): $out"
expect_error "expected adamw or muon" "--optimizer sgd" -- $TRAIN "${M[@]}" -x 1 --optimizer sgd
# a mixture-of-experts model: the router (one E x C matrix per MoE block) and every expert's fc and fcproj (one
# matrix each) are Muon's too; d2 with 4 experts in block 1: 4 dense-block + 2 attention + 1 router + 8 expert
# matrices. One process, tp 2 (each expert's slice, its Gram matrix summed over tp), pp 2 and dp 2 at ZeRO-1 within
# T(10); ZeRO-3 bit-identical to ZeRO-2
E=(-e d2 -b 2 -t 32 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 10 -d 256 --optimizer muon --moe-experts 4 --moe-top-k 2 --moe-every 2)
$TRAIN "${E[@]}" -o "$TMP/e1" > "$TMP/e1.log" 2>&1 &&
    grep -q 'optimizer: Muon (momentum 0.95, 5 Newton-Schulz steps) on 15 block matrices' "$TMP/e1.log"
check $? "muon with experts: one process, 15 matrices (qkvw, attprojw x 2, fcw, fcprojw, routerw, 4 x efcw, 4 x efcprojw)"
for f in "etp|--tp 2" "epp|--pp 2" "ez1|-z 1" "ez2|-z 2" "ez3|-z 3"; do
    MPIRUN 2 $TRAIN "${E[@]}" ${f#*|} -o "$TMP/${f%%|*}" > "$TMP/${f%%|*}.log" 2>&1 || echo "# ${f%%|*} failed"
done
for x in etp epp ez1; do
    out=$(dp_compare_logs "$TMP/e1/log.jsonl" "$TMP/$x/log.jsonl" train loss $T10 10) &&
        out="$out; $(dp_compare_models_rms "$TMP/e1/model_00000010.bin" "$TMP/$x/model_00000010.bin" $T10)"
    check $? "muon with experts, $x vs one process within T(10): $out"
done
out=$(dp_same_training "$TMP/ez2" "$TMP/ez3" 10)
check $? "muon with experts: ZeRO-3 vs ZeRO-2 on dp 2: $out"
dp_refused 2 "--optimizer muon does not combine with --ep" "muon with --ep 2" "${E[@]}" -x 1 --ep 2
expect_error "--optimizer muon does not combine with" "muon with --offload-optimizer cpu" -- \
    $TRAIN "${M[@]}" -x 1 --offload-optimizer cpu
dp_refused 2 "--optimizer muon does not combine with" "muon with --grad-compress" "${M[@]}" -x 1 --grad-compress int8
