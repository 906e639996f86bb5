# dev/test/cli_grad_compress_3d.sh -- gradient compression (--grad-compress, llmc/grad_compress.h) inside tensor-
# and pipeline-parallel layouts: only the data-parallel reduction of each rank's part (its tp slice of its stage's
# layers) is compressed; the tp all-reduces and the pp transfers never are. d2 (-b 4 -t 32), 4 processes:
# tp 2 x dp 2 and pp 2 x dp 2 (2 micro-batches), and tp 2 x pp 2 x dp 2 (8 processes) once.
#   - topk:1 (every value sent, 0 + a + b == a + b) trains bit-identically to the uncompressed run of the same
#     layout: the compressed path reduces the right buffer over the right group; a tp or pp exchange sent through
#     it, or a bucket missed, would not be bit-identical in the int8 check below or here;
#   - int8: step 1's loss equals the uncompressed one bit for bit (the forward's tp all-reduces and pp transfers are
#     exact), and the bytes per step are 0.125x-0.135x of the fp32 ring (ZeRO-1's reduce-scatter of int8 + scales);
#   - bytes per step exactly as the formula, from the rank's own buckets (rank 0: tp rank 0 of pipeline stage 0):
#     topk:1 sends (N-1) x 8 x P_rank, topk:0.01 (N-1) x 8 x sum ceil(0.01 n_bucket), N = 2 data-parallel ranks;
#       tp 2: per-layer bucket 12C^2/2 + 6C (the split matrices and biases + the replicated LayerNorms and
#             row-parallel biases) = 99,520; the global one wte's vocabulary half Vp C/2 + wpe T C + ln_f 2C
#             = 3,252,480;
#       pp 2 stage 0: layer 0, 12C^2 + 13C = 198,272; the global one wte + wpe = 6,471,680 (ln_f is on stage 1);
#   - resume bit-identical (6 steps straight == 3 + checkpoint + resume, weights compared): int8 stochastic with
#     error feedback on pp 2 x dp 2, whose first and last stages each hold the tied wte. Each end compresses its own
#     buckets (another S, other blocks, another top-k set), so without the first stage's wte sent to the last after
#     the update (pipeline_sync_embedding) the two copies part and the resumed run (both ends loaded from the first
#     stage's) differs: 7.6 MB of 27 differed before that fix. top-k 5% on tp 2 x dp 2 the same;
#   - without compression, pp 2 x dp 3 (ZeRO-1, tied wte; 6 processes): resume bit-identical too. There the ends'
#     ring reduce-scatters cut wte at other chunk boundaries and sum (a + b) + c on one end, (b + c) + a on the
#     other (32,920 bytes of the model differed before the fix);
#   - a pp 2 checkpoint with residuals resumed on tp 2 (the same processes and tokens) is refused with one line
#     naming both layouts (the residual of rank r is rank r's parameters).
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
F=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 3)
steps() { grep -E '^step' "$1" | sed -E 's/ *[|] [0-9.]+ ms.*//'; }
# sent LOG WANT: every train record of log.jsonl sent exactly WANT gradient bytes
sent() {
    python3 - "$1" "$2" <<'PY'
import json, sys
rs = [o for o in map(json.loads, open(sys.argv[1])) if o["kind"] == "train"]
got = [o["grad_bytes_sent"] for o in rs]
print("sent %s, expected %s" % (got, sys.argv[2]))
sys.exit(0 if len(got) == 3 and all(g == int(sys.argv[2]) for g in got) else 1)
PY
}
# C 128, Vp 50304, T 256 (wpe rows), L 2
TP_LAYER=99520; TP_GLOB=3252480; PP_LAYER=198272; PP_GLOB=6471680
test $((2 * TP_LAYER + TP_GLOB)) -eq 3451520 && test $((PP_LAYER + PP_GLOB)) -eq 6669952
check $? "the bucket sizes add up to the parameters per process the header prints (tp 2: 3451520, pp 2 stage 0: 6669952)"
topk01() { python3 -c "import math; print(8 * (2 * math.ceil(0.01 * $1) + math.ceil(0.01 * $2)) if $3 == 2 else 8 * (math.ceil(0.01 * $1) + math.ceil(0.01 * $2)))"; }

for lay in tp pp; do
    if [ $lay = tp ]; then L=(--tp 2); P=3451520; TK=$(topk01 $TP_LAYER $TP_GLOB 2); else L=(--pp 2 -d 512); P=6669952; TK=$(topk01 $PP_LAYER $PP_GLOB 1); fi
    R="$TMP/$lay"
    MPIRUN 4 $TRAIN "${F[@]}" "${L[@]}" -z 1 -o "$R-none" > "$R-none.log" 2>&1
    check $? "$lay 2 x dp 2: uncompressed reference"
    MPIRUN 4 $TRAIN "${F[@]}" "${L[@]}" -z 1 --grad-compress topk:1 -o "$R-all" > "$R-all.log" 2>&1
    check $? "$lay 2 x dp 2 --grad-compress topk:1: 3 steps"
    cmp -s <(steps "$R-none.log") <(steps "$R-all.log" | sed -E 's/ [|] grad comm.*//') && \
        cmp -s "$R-none/model_00000003.bin" "$R-all/model_00000003.bin"
    check $? "$lay 2 x dp 2 topk:1 trains bit-identically to the uncompressed run (losses, norms, final weights)"
    out=$(sent "$R-all/log.jsonl" $((8 * P)))
    check $? "$lay 2 x dp 2 topk:1: (N-1) x 8 x P_rank bytes per step: $out"
    MPIRUN 4 $TRAIN "${F[@]}" "${L[@]}" -z 1 --grad-compress topk:0.01 -o "$R-topk" > "$R-topk.log" 2>&1
    out=$(sent "$R-topk/log.jsonl" $TK)
    check $? "$lay 2 x dp 2 topk:0.01: (N-1) x 8 x sum ceil(0.01 n_bucket) bytes per step: $out"
    MPIRUN 4 $TRAIN "${F[@]}" "${L[@]}" -z 1 --grad-compress int8 -o "$R-int8" > "$R-int8.log" 2>&1
    check $? "$lay 2 x dp 2 --grad-compress int8: 3 steps"
    cmp -s <(steps "$R-none.log" | head -1 | sed -E 's/ [|] norm.*//') <(steps "$R-int8.log" | head -1 | sed -E 's/ [|] norm.*//') && \
        ! cmp -s "$R-none/model_00000003.bin" "$R-int8/model_00000003.bin"
    check $? "$lay 2 x dp 2 int8: step 1's loss equals the uncompressed one bit for bit (the forward's $lay traffic exact); the weights after 3 steps differ (the gradients were quantised)"
    python3 - "$R-int8/log.jsonl" <<'PY'
import json, sys
r = [o["grad_ratio"] for o in map(json.loads, open(sys.argv[1])) if o["kind"] == "train"]
print("ratios %s" % r)
sys.exit(0 if len(r) == 3 and all(0.125 <= x <= 0.135 for x in r) else 1)
PY
    check $? "$lay 2 x dp 2 int8 ZeRO-1: 0.125x-0.135x of the fp32 ring's bytes"
done

MPIRUN 8 $TRAIN "${F[@]}" --tp 2 --pp 2 -d 512 -z 1 -o "$TMP/3d-none" > "$TMP/3d-none.log" 2>&1 && \
    MPIRUN 8 $TRAIN "${F[@]}" --tp 2 --pp 2 -d 512 -z 1 --grad-compress topk:1 -o "$TMP/3d-all" > "$TMP/3d-all.log" 2>&1 && \
    cmp -s <(steps "$TMP/3d-none.log") <(steps "$TMP/3d-all.log" | sed -E 's/ [|] grad comm.*//') && \
    cmp -s "$TMP/3d-none/model_00000003.bin" "$TMP/3d-all/model_00000003.bin"
check $? "tp 2 x pp 2 x dp 2 topk:1 trains bit-identically to the uncompressed run"

# resume LABEL NP FLAGS...: 6 steps straight vs 3 + checkpoint + resume, steps and final weights bit for bit
resume() {
    local label=$1 np=$2; shift 2
    local G=(-e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 6 "$@") R="$TMP/res-$np-$RANDOM"
    MPIRUN $np $TRAIN "${G[@]}" -o "$R-s" > "$R-s.log" 2>&1 && \
        MPIRUN $np $TRAIN "${G[@]}" -o "$R-r" --exit-after-steps 3 > "$R-a.log" 2>&1 && \
        MPIRUN $np $TRAIN "${G[@]}" -o "$R-r" -y 1 > "$R-b.log" 2>&1 && \
        cmp -s <(steps "$R-s.log") <(cat <(steps "$R-a.log") <(steps "$R-b.log")) && \
        cmp -s "$R-s/model_00000006.bin" "$R-r/model_00000006.bin"
    check $? "$label: 6 steps straight == 3 + checkpoint + resume (steps and final weights bit for bit)"
    LAST="$R-r"
}
resume "pp 2 x dp 2 (tied wte) int8 stochastic + error feedback" 4 --pp 2 -d 512 -z 0 --grad-compress int8 --grad-compress-round stochastic
dp_refused 4 "belong to the parameters of --tp 1 --pp 2" "the pp 2 x dp 2 checkpoint with residuals resumed on tp 2 x dp 2 (the same processes and tokens)" \
    -e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 8 -d 512 --tp 2 --grad-compress int8 -o "$LAST" -y 1
resume "tp 2 x dp 2 topk:0.05 + error feedback" 4 --tp 2 -z 1 --grad-compress topk:0.05
resume "pp 2 x dp 3 (tied wte, ZeRO-1, uncompressed)" 6 --pp 2 -d 768 -z 1
