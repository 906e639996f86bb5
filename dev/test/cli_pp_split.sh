# dev/test/cli_pp_split.sh -- the split-backward pipeline schedule zb-h1 (Qi et al. 2023, "Zero Bubble Pipeline
# Parallelism"; llmc/README.md, "Pipeline parallelism") through the real CLI under mpirun, CPU build (fp32, MPI).
# Each backward pass is B (input gradients, and the norms', biases' and embedding's) and, later, W (the weight GEMMs
# from the operands B kept); ZB-H1 runs 1F1B's F and B order and defers W into the cool-down. Every tensor's gradient
# is then accumulated over the micro-batches in the order 1F1B accumulates it (W in micro-batch order; B's parts as
# 1F1B's B), and W is the very GEMM 1F1B's backward calls, so zb-h1 trains bit for bit as 1f1b on the same layout:
# that is the check here, stronger than any tolerance (a W run twice, skipped, run on another slot's operands, or a
# bucket reduced before its W, changes bits). Model L4:C64:NH4:T48, B 2, T 32, 4 steps.
#   - pp 2 (m 8 and m 4, with -r 3 too), pp 4 (one layer a stage, m 8 and 4), tp 2 x pp 2 x dp 2 ZeRO-1 with sequence
#     parallelism (W's inputs copied, as the gathered rows do not stay), a mixture of experts (E4 top-2: the expert
#     MLPs' weight gradients stay in B, attention's go to W): step records and the model file equal
#     1f1b's on the same layout byte for byte; pp 2 also against one process within T(4) of dp_lib.sh;
#   - the memory ledger equals the allocation on every stage (the W operands counted);
#   - trace.json: per rank m W slices per traced step beside m F and m B;
#   - a checkpoint resumes bit for bit under zb-h1, and resumed under 1f1b continues bit for bit too;
#   - -z 2 and -z 3 with zb-h1 are refused with one line (ZeRO-2 reduce-scatters a layer's slot as its backward
#     ends, before its W).
# dualpipev (DeepSeek's V-shaped DualPipe without a second copy): rank s holds virtual stages s and 2p-1-s, so rank 0
# holds the embedding and the head (one wte, no embedding group) and rank p-1 turns the V by a local hand-over of the
# boundary rows. Its layers sit on other ranks than 1f1b's, so the gradient norm's per-rank partial sums and the
# tied wte's micro-batch terms are added in another order: against one process within T(4) (losses, norms,
# validation losses through the V's forward-only pass, final weights):
#   - pp 2 (m 4, 8), pp 4 (L8, m 8), tp 2 x pp 2 x dp 2 ZeRO-1; the ledger equals the allocation; 2m W slices per
#     rank and traced step;
#   - a checkpoint resumes bit for bit under dualpipev, and resumed under 1f1b (the stages' layers change:
#     re-sharded) continues within T(4);
#   - sampling through the V prints the text one process prints (the logits row stays on rank 0);
#   - refused with one line: m < 2p, L not divisible by 2p, --pp-virtual 2.
# dualpipe (DeepSeek-V3's DualPipe: two pipelines in opposite directions, two parameter copies): rank s holds stage s
# and a second copy of stage p-1-s; micro-batches 0..m/2-1 run down, the others up; the copies' gradients are summed
# pairwise before the data-parallel reduction, the norm counts each layer once. Against the same one-process
# references within T(4), the same four shapes; the ledger; stage lines; m F, B and W slices per rank;
#   - a checkpoint resumes bit for bit under dualpipe, and re-sharded under 1f1b (from the first copies) within T(4);
#   - pp 2 x dp 2 with int8 compression resumes bit for bit (the copies stay one through the post-update sync);
#   - sampling prints one process's text (the head on rank p-1);
#   - refused with one line: odd --pp, odd m, m < 2p, experts, --pp-virtual 2, -z 2.
# Overlapped F&B pairs (--pp-fb-overlap 1, the default): dualpipev with experts over ep 2 and dense dualpipe train bit
# for bit as with --pp-fb-overlap 0 (the same arithmetic, interleaved); the trace marks the pairs on every rank.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
M=(-e L4:C64:NH4:T48 -b 2 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 4)
run() { local name=$1 n=$2; shift 2; dp_run "$name" "$n" "${M[@]}" "$@"; } # NAME N args...: 4 steps into $TMP/NAME
trace_slices() { # TRACE P M CHUNKS: per rank and traced step, CHUNKS x M F, B and W slices
    python3 - "$@" <<'PY'
import collections, json, sys
path, p, m, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ev = json.load(open(path))["traceEvents"]
count = collections.Counter((e["tid"], e["cat"]) for e in ev if e.get("ph") == "X")
steps = count[(0, "optimizer")]
kinds = ("forward", "backward", "weight gradient", "optimizer")
ok = steps >= 1 and all(count[(r, c)] == steps * v * m for r in range(p) for c in kinds[:3])
print("per rank (forward, backward, weight, optimizer): %s" % [tuple(count[(r, c)] for c in kinds) for r in range(p)])
sys.exit(0 if ok else 1)
PY
}
T4=$(dp_order_tol 4)

for spec in "a:2:--pp 2 -d 512" "b:2:--pp 2 -d 256" "c:2:--pp 2 -d 512 -r 3" "d:4:--pp 4 -d 512" "g:4:--pp 4 -d 256" \
            "e:8:--tp 2 --pp 2 -z 1 -d 512 --sequence-parallel 1" "f:2:-e L4:C64:NH4:T48:E4:K2 --pp 2 -d 256"; do
    IFS=: read -r name n flags <<< "$spec"
    # shellcheck disable=SC2086
    { run "${name}_1f1b" "$n" $flags --pp-schedule 1f1b; run "${name}_zb" "$n" $flags --pp-schedule zb-h1; }
    out=$(dp_same_training "$TMP/${name}_1f1b" "$TMP/${name}_zb" 4)
    check $? "$n processes, $flags: zb-h1 trains bit for bit as 1f1b: $out"
    stages=$(grep -c '^memory ledger .* -> equal$' "$TMP/${name}_zb.log")
    want=$(grep -o -- '--pp [0-9]*' <<< "$flags" | cut -d' ' -f2)
    test "$stages" -eq "$want"
    check $? "$n processes, $flags zb-h1: the memory ledger equals the allocation on every stage ($stages of $want)"
done


trace_slices "$TMP/a_zb/trace.json" 2 8 1
check $? "trace.json (pp 2 zb-h1, m 8): every rank has m F, m B and m W slices per traced step"

run cut 2 --pp 2 -d 512 --pp-schedule zb-h1 --exit-after-steps 2
cp -r "$TMP/cut" "$TMP/cut1f1b"
MPIRUN 2 $TRAIN "${M[@]}" --pp 2 -d 512 --pp-schedule zb-h1 -o "$TMP/cut" -y 1 > "$TMP/cut2.log" 2>&1 && \
    grep -q "^resume: continuing from step 2" "$TMP/cut2.log"
ok=$?
for f in model_00000004.bin state_00000004_0000{0,1}.bin; do cmp -s "$TMP/a_zb/$f" "$TMP/cut/$f" || ok=1; done
check $ok "pp 2 zb-h1 resumed at step 2: the final model and both state files equal the straight run's"
MPIRUN 2 $TRAIN "${M[@]}" --pp 2 -d 512 --pp-schedule 1f1b -o "$TMP/cut1f1b" -y 1 > "$TMP/cut3.log" 2>&1
out=$(dp_same_training "$TMP/a_zb" "$TMP/cut1f1b" 4)
check $? "the zb-h1 checkpoint of step 2 resumed under 1f1b equals zb-h1's straight run: $out"

VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
V=(-j "$VAL" -v 2 -m 2)
# against_one REF RUN LABEL PP: losses, norms, validation losses and final weights of run RUN within T(4) of the
# one-process run REF; the memory ledger equals the allocation on each of its PP stages
against_one() {
    local ref=$1 name=$2 label=$3 pp=$4
    out=$(dp_compare_logs "$TMP/$ref/log.jsonl" "$TMP/$name/log.jsonl" train loss "$T4" 4 && \
          dp_compare_logs "$TMP/$ref/log.jsonl" "$TMP/$name/log.jsonl" train grad_norm "$T4" 4 && \
          dp_compare_logs "$TMP/$ref/log.jsonl" "$TMP/$name/log.jsonl" val val_loss "$T4" 3 && \
          dp_compare_models_rms "$TMP/$ref/model_00000004.bin" "$TMP/$name/model_00000004.bin" "$T4")
    check $? "$label vs one process within T(4): ${out//$'\n'/; }"
    stages=$(grep -c '^memory ledger .* -> equal$' "$TMP/$name.log")
    test "$stages" -eq "$pp" && test "$(grep -c '^pipeline stage [0-9]*: layers' "$TMP/$name.log")" -eq "$pp"
    check $? "$label: the memory ledger equals the allocation on every stage ($stages)"
}
# dualpipev and dualpipe on pp 2 (m 8 and 4), pp 4 and tp 2 x pp 2 x dp 2 ZeRO-1 against one process
for spec in "v1:2:2:-d 512" "v2:2:2:-d 256" "v3:4:4:-e L8:C64:NH4:T48 -d 512" "v4:8:2:--tp 2 -z 1 -d 512"; do
    IFS=: read -r name n pp flags <<< "$spec"
    # shellcheck disable=SC2086
    # the one-process reference (v4's is v1's: the same batch and steps without tp)
    [ "$name" = v4 ] || run "${name}_one" 1 ${flags/--tp 2 -z 1/} "${V[@]}"
    [ "$name" = v4 ] && cp -r "$TMP/v1_one" "$TMP/v4_one"
    for sched in dualpipev dualpipe; do
        # shellcheck disable=SC2086
        run "${sched}_$name" "$n" $flags "${V[@]}" --pp "$pp" --pp-schedule "$sched"
        against_one "${name}_one" "${sched}_$name" "$n processes, $sched, --pp $pp $flags" "$pp"
    done
done
out=$(dp_compare_logs "$TMP/v1_one/log.jsonl" "$TMP/a_zb/log.jsonl" train loss "$T4" 4 && \
      dp_compare_logs "$TMP/v1_one/log.jsonl" "$TMP/a_zb/log.jsonl" train grad_norm "$T4" 4 && \
      dp_compare_models_rms "$TMP/v1_one/model_00000004.bin" "$TMP/a_zb/model_00000004.bin" "$T4")
check $? "pp 2 zb-h1 vs one process (the dualpipev rows' reference: validation does not change training) within T(4) = $T4: ${out//$'\n'/; }"
grep -q '^pipeline stage 0: layers 0,3 + embedding + lnf, head' "$TMP/dualpipev_v1.log" && \
    grep -q '^pipeline stage 1: layers 1,2 |' "$TMP/dualpipev_v1.log"
check $? "dualpipev pp 2: stage 0 holds layers 0 and 3, the embedding and the head; stage 1 layers 1 and 2"
trace_slices "$TMP/dualpipev_v1/trace.json" 2 8 2
check $? "trace.json (pp 2 dualpipev, m 8): every rank has 2m F, B and W slices per traced step (two chunks)"

# resume_checks SCHED: a checkpoint of step 2 resumed under SCHED equals the straight run (pp 2, m 8); resumed under
# 1f1b (the stages' layers change: re-sharded, announced) within T(4) of one process
resume_checks() {
    local sched=$1
    run "cut_$sched" 2 -d 512 "${V[@]}" --pp 2 --pp-schedule "$sched" --exit-after-steps 2
    cp -r "$TMP/cut_$sched" "$TMP/cut_${sched}_1f1b"
    MPIRUN 2 $TRAIN "${M[@]}" -d 512 "${V[@]}" --pp 2 --pp-schedule "$sched" -o "$TMP/cut_$sched" -y 1 \
        > "$TMP/cut_${sched}_2.log" 2>&1
    out=$(dp_same_checkpoint "$TMP/${sched}_v1" "$TMP/cut_$sched" 4 2)
    check $? "pp 2 $sched resumed at step 2 equals the straight run: $out"
    MPIRUN 2 $TRAIN "${M[@]}" -d 512 "${V[@]}" --pp 2 --pp-schedule 1f1b -o "$TMP/cut_${sched}_1f1b" -y 1 \
        > "$TMP/cut_${sched}_3.log" 2>&1 && grep -q "^resume: checkpoint step 2 .* re-sharding" "$TMP/cut_${sched}_3.log"
    out=$(dp_compare_logs "$TMP/v1_one/log.jsonl" "$TMP/cut_${sched}_1f1b/log.jsonl" train loss "$T4" 4 && \
          dp_compare_models_rms "$TMP/v1_one/model_00000004.bin" "$TMP/cut_${sched}_1f1b/model_00000004.bin" "$T4")
    check $? "the $sched checkpoint resumed under 1f1b (re-sharded, announced; dualpipe's from the first copies) within T(4) of one process: ${out//$'\n'/; }"
}
resume_checks dualpipev

S=(-e L4:C64:NH4:T48 -b 2 -t 32 -j '' -g 12 -l 0 -x 1 -d 256 --prompt "ROMEO:")
$TRAIN "${S[@]}" -o "$TMP/s1" > "$TMP/s1.log" 2>&1 && \
    MPIRUN 2 $TRAIN "${S[@]}" --pp 2 --pp-schedule dualpipev -o "$TMP/s2" > "$TMP/s2.log" 2>&1
same_sample() { # LOG1 LOG2: one sample each, the same non-empty text
    python3 - "$1" "$2" <<'PY'
import json, sys
t = [[o["text"] for o in map(json.loads, open(p)) if o["kind"] == "sample"] for p in sys.argv[1:3]]
print("one process %r; pipeline %r" % (t[0], t[1]))
sys.exit(0 if len(t[0]) == 1 and t[0] == t[1] and len(t[0][0]) > 0 else 1)
PY
}
same_sample "$TMP/s1/log.jsonl" "$TMP/s2/log.jsonl"
check $? "sampling through the dualpipev V prints the text one process prints"

L=$TMP/dualpipe_v3.log
grep -q '^pipeline stage 1: layers 2-3,4-5 |' "$L" && grep -q '^pipeline stage 2: layers 4-5,2-3 |' "$L" && \
    grep -q '^pipeline stage 3: layers 6-7,0-1 + embedding + lnf, head' "$L" && grep -q '2 parameter copies' "$L"
check $? "dualpipe pp 4: stage 1 holds layers 2-3 and a copy of stage 2's 4-5, stage 2 the reverse; stage 3 holds 6-7, a copy of 0-1 and both ends; 2 parameter copies"
trace_slices "$TMP/dualpipe_v1/trace.json" 2 8 1
check $? "trace.json (pp 2 dualpipe, m 8): every rank has m F, B and W slices per traced step (m/2 per direction)"
resume_checks dualpipe
# pp 2 x dp 2 with int8 compression: each copy compresses its own buckets (another flat order), so the copies part
# unless rank s sends its chunk 0 to the other copy after the update; a resume loads both copies from one, so
# 6 steps straight equal 3 + checkpoint + resume only if the copies stayed one (it fails from step 4 without the sync)
G=("${M[@]}" -x 6 --pp 2 -d 512 -z 0 --pp-schedule dualpipe --grad-compress int8 --grad-compress-round stochastic)
MPIRUN 4 $TRAIN "${G[@]}" -o "$TMP/dz-s" > "$TMP/dz-s.log" 2>&1 && \
    MPIRUN 4 $TRAIN "${G[@]}" -o "$TMP/dz-r" --exit-after-steps 3 > "$TMP/dz-a.log" 2>&1 && \
    MPIRUN 4 $TRAIN "${G[@]}" -o "$TMP/dz-r" -y 1 > "$TMP/dz-b.log" 2>&1 && \
    cmp -s <(dp_step_lines "$TMP/dz-s.log") <(cat <(dp_step_lines "$TMP/dz-a.log") <(dp_step_lines "$TMP/dz-b.log")) && \
    cmp -s "$TMP/dz-s/model_00000006.bin" "$TMP/dz-r/model_00000006.bin"
check $? "pp 2 x dp 2 dualpipe, int8 compression: 6 steps straight == 3 + checkpoint + resume (the copies stay one)"
MPIRUN 2 $TRAIN "${S[@]}" --pp 2 --pp-schedule dualpipe -o "$TMP/s3" > "$TMP/s3.log" 2>&1
same_sample "$TMP/s1/log.jsonl" "$TMP/s3/log.jsonl"
check $? "sampling through dualpipe (the head on rank p-1, its logits row sent to rank 0) prints the text one process prints"

# overlapped F&B pairs (--pp-fb-overlap, llmc/gpt2_pair.h): dualpipe(v)'s chunk pairs run interleaved block by block,
# a MoE block's all-to-alls posted while the other pass computes; the same arithmetic as one after the other, so
# the runs are bit for bit the same: dualpipev with experts over ep 2 (pp 2 x dp 2, the all-to-alls deferred), and
# dense dualpipe; the trace marks each pair's two halves
pair_runs() { # NAME NP FLAGS...: the run with and without the pairs, compared byte for byte
    local name=$1 np=$2; shift 2
    run "${name}1" "$np" "$@" --pp-fb-overlap 1
    run "${name}0" "$np" "$@" --pp-fb-overlap 0
    out=$(dp_same_training "$TMP/${name}0" "$TMP/${name}1" 4)
}
pair_runs fbe 4 -e L4:C64:NH4:T48:E4:K2 -d 512 --pp 2 --ep 2 -z 1 --pp-schedule dualpipev
check $? "pp 2 x dp 2 x ep 2 dualpipev with experts: the overlapped F&B pairs train bit for bit as one after the other: $out"
pair_runs fbd 2 -d 512 --pp 2 --pp-schedule dualpipe
check $? "pp 2 dualpipe: the overlapped F&B pairs train bit for bit as one after the other: $out"
python3 - "$TMP/fbe1/trace.json" "$TMP/fbe0/trace.json" <<'PY'
import collections, json, sys
def pairs(path):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e["args"].get("pair")]
    return collections.Counter((e["tid"], e["cat"]) for e in ev)
on, off = pairs(sys.argv[1]), pairs(sys.argv[2])
print("pair halves per (rank, kind): %s; with --pp-fb-overlap 0: %d" % (dict(on), sum(off.values())))
ranks = {r for r, _ in on}
sys.exit(0 if len(ranks) == 4 and all(on[(r, "forward")] == on[(r, "backward")] > 0 for r in ranks) and not off else 1)
PY
check $? "trace.json: every rank ran overlapped F&B pairs (one forward and one backward half each), none with --pp-fb-overlap 0"

B=(-e L4:C64:NH4:T48 -b 2 -t 32 -j '' -g 0 -x 1 -d 256)
dp_refused 2 "needs at least 4 micro-batches" "dualpipev with 2 micro-batches on 2 stages" "${B[@]}" -d 128 --pp 2 --pp-schedule dualpipev
dp_refused 4 "divisible by 2 x --pp" "dualpipev over 4 stages of a 4-layer model" "${B[@]}" -d 512 --pp 4 --pp-schedule dualpipev
dp_refused 2 "--pp-virtual" "dualpipev with --pp-virtual 2" "${B[@]}" --pp 2 --pp-schedule dualpipev --pp-virtual 2
dp_refused 3 "even --pp of 2 or more" "dualpipe over 3 stages" "${B[@]}" -e L6:C64:NH4:T48 -d 768 --pp 3 --pp-schedule dualpipe
dp_refused 2 "an even number of them" "dualpipe with 5 micro-batches" "${B[@]}" -d 320 --pp 2 --pp-schedule dualpipe
dp_refused 2 "needs at least 4 micro-batches" "dualpipe with 2 micro-batches on 2 stages" "${B[@]}" -d 128 --pp 2 --pp-schedule dualpipe
dp_refused 2 "dense models" "dualpipe with experts" "${B[@]}" -e L4:C64:NH4:T48:E4:K2 --pp 2 --pp-schedule dualpipe
dp_refused 2 "--pp-virtual" "dualpipe with --pp-virtual 2" "${B[@]}" --pp 2 --pp-schedule dualpipe --pp-virtual 2
dp_refused 4 "-z 2" "dualpipe with ZeRO-2" "${B[@]}" --pp 2 -z 2 --pp-schedule dualpipe
dp_refused 4 "-z 2" "zb-h1 with ZeRO-2" "${B[@]}" --pp 2 -z 2 --pp-schedule zb-h1
dp_refused 4 "-z 3" "zb-h1 with ZeRO-3" "${B[@]}" --pp 2 -z 3 --pp-schedule zb-h1
