# dev/test/cli_pp_zero.sh -- ZeRO-2 and ZeRO-3 inside a pipeline (llmc/README.md, "Pipeline parallelism" and "ZeRO and
# the gradient store"): every micro-batch's backward on a stage reduce-scatters its layers' buckets over the stage's
# data-parallel group as the schedule runs it (two layer slots; a pass's last bucket folded into the shard accumulator
# at the pass's end, before another pass reuses its slot), the global tensors' bucket (wte, wpe, lnf) once per step
# after the tied embedding's sum; ZeRO-3 also gathers the pass's layers for every forward and backward pass, and its
# first stage sends the updated wte from its gathered global unit to the last stage, which keeps its own shard's part.
# Model L4:C64:NH4:T48 (2 layers a stage at pp 2), B 2, T 32. Tolerances: the argument in dp_lib.sh (ZeRO-2 sums over
# ranks before micro-batches, ZeRO-1 after: a reordered fp32 sum; ZeRO-3 is ZeRO-2's arithmetic).
#   - pp 2 x dp 2 with 1f1b, gpipe and interleaved (L6, v 3: chunks of one layer, so odd chunk offsets map to the
#     other slot), pp 2 x dp 3, tp 2 x pp 2 x dp 2, and with -r 3 and --optimizer muon: -z 2 against -z 1 on the
#     same layout within T(4) (losses, norms, final weights; a bucket folded twice, lost, or written to the wrong
#     slot moves them by 1e-3 and more);
#   - the same layouts at -z 3: bit for bit as -z 2 (step records, model file; interleaved: a chunk reads the stage's
#     slots at its layer offset), also with validation and samples, and on dp 3 (the wte sync) with parameter and
#     optimizer offload;
#   - pp 2 x dp 2 -z 2 against one process within T(4);
#   - each stage's data-parallel bytes of step 2, mean over its dp ranks, equal the ring theory computed here from
#     the stage's tensors: ZeRO-2 (m x its layers' elements + its global tensors' + P) x (N-1)/N x 4, ZeRO-3 the same
#     reductions + 2 m P of gathers (+ the globals once more on the first stage with 3 dp ranks: the wte sync; the
#     interleaved chunks between the ends gather none), the
#     trainer printing the same figure, within 256 bytes per collective (the step statistics);
#   - the memory ledger equals the allocation on every stage;
#   - --offload-optimizer cpu streams every reduced bucket once: bit-identical to -z 2 without it;
#   - checkpoints of -z 2 and -z 3 resume bit-identically on the same layout (model and every state file), and
#     re-sharded to -z 1 on one pipeline stage within T(4); a -z 1 checkpoint of one stage resumes at pp 2 -z 3.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
M=(-e L4:C64:NH4:T48 -b 2 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 4)
run() { # NAME N args...: 4 steps into $TMP/NAME
    local name=$1 n=$2; shift 2
    MPIRUN "$n" timeout 300 $TRAIN "${M[@]}" "$@" -o "$TMP/$name" > "$TMP/$name.log" 2>&1
    check $? "$name: $n processes, $*: runs under mpirun (exit 0)"
}
T4=$(dp_order_tol 4)
close() { # A B: losses, norms, final weights within T(4) (one line; the status of the comparisons)
    local o rc
    o=$(dp_compare_logs "$TMP/$1/log.jsonl" "$TMP/$2/log.jsonl" train loss "$T4" 4 && \
        dp_compare_logs "$TMP/$1/log.jsonl" "$TMP/$2/log.jsonl" train grad_norm "$T4" 4 && \
        dp_compare_models_rms "$TMP/$1/model_00000004.bin" "$TMP/$2/model_00000004.bin" "$T4")
    rc=$?
    echo "${o//$'\n'/; }"
    return $rc
}

for spec in "a:4:--pp 2 -d 512 --comm-stats 1" "b:4:--pp 2 -d 512 --pp-schedule gpipe" \
            "c:4:-e L6:C64:NH4:T48 --pp 2 -d 512 --pp-schedule interleaved --pp-virtual 3 --comm-stats 1" \
            "d:6:--pp 2 -d 768 --comm-stats 1" "e:8:--tp 2 --pp 2 -d 512 --sequence-parallel 1" \
            "f:4:--pp 2 -d 512 -r 3" "g:4:--pp 2 -d 512 --optimizer muon"; do
    IFS=: read -r name n flags <<< "$spec"
    # shellcheck disable=SC2086
    { run "${name}1" "$n" $flags -z 1; run "${name}2" "$n" $flags -z 2; }
    out=$(close "${name}1" "${name}2")
    check $? "$n processes, $flags: -z 2 vs -z 1 (T(4) = $T4): $out"
    test "$(grep -c '^memory ledger .* -> equal$' "$TMP/${name}2.log")" -eq 2
    check $? "$n processes, $flags -z 2: the memory ledger equals the allocation on both stages"
done
# ZeRO-3: bit for bit as ZeRO-2 on the same layouts
VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
for spec in "a:4:--pp 2 -d 512 --comm-stats 1" "b:4:--pp 2 -d 512 --pp-schedule gpipe" \
            "c:4:-e L6:C64:NH4:T48 --pp 2 -d 512 --pp-schedule interleaved --pp-virtual 3 --comm-stats 1" "d:6:--pp 2 -d 768 --comm-stats 1" \
            "e:8:--tp 2 --pp 2 -d 512 --sequence-parallel 1" "f:4:--pp 2 -d 512 -r 3" "g:4:--pp 2 -d 512 --optimizer muon" \
            "v:4:--pp 2 -d 512 -j $VAL -v 2 -m 3 -s 2 -g 6" "p:6:--pp 2 -d 768 --offload-optimizer cpu --offload-params cpu"; do
    IFS=: read -r name n flags <<< "$spec"
    # shellcheck disable=SC2086
    case $name in v|p) run "${name}2" "$n" ${flags/--offload-params cpu/} -z 2;; esac
    # shellcheck disable=SC2086
    run "${name}3" "$n" $flags -z 3
    out=$(dp_same_training "$TMP/${name}2" "$TMP/${name}3" 4)
    check $? "$n processes, $flags: -z 3 vs -z 2: $out"
    test "$(grep -c '^memory ledger .* -> equal$' "$TMP/${name}3.log")" -eq 2
    check $? "$n processes, $flags -z 3: the memory ledger equals the allocation on both stages"
done
python3 - "$TMP/v2/log.jsonl" "$TMP/v3/log.jsonl" <<'PY'
import json, sys
rec = lambda p: [(o["kind"], o["step"], o.get("val_loss"), o.get("text")) for o in map(json.loads, open(p)) if o["kind"] in ("val", "sample")]
a, b = rec(sys.argv[1]), rec(sys.argv[2])
print("%d validation and sample records %s" % (len(a), "identical" if a == b else "DIFFER"))
sys.exit(0 if a == b and len(a) == 5 else 1)  # validation at steps 0, 2, 4; samples at 2, 4
PY
check $? "pp 2 x dp 2 -z 3: validation losses and samples identical to -z 2's"

$TRAIN "${M[@]}" -d 512 -o "$TMP/single" > "$TMP/single.log" 2>&1
out=$(close single a2)
check $? "pp 2 x dp 2 -z 2 vs one process (T(4)): $out"

bytes_ok() { # LOG N M Z LAYERS: each stage's mean step-2 dp bytes = the theory, and the trainer's printed figure
    python3 - "$@" <<'PY'
import re, sys
log, N, m, z, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
C, T, Vp = 64, 48, 50304
layer = 12 * C * C + 13 * C
glob = {0: Vp * C + T * C, 1: Vp * C + 2 * C}   # first stage: wte, wpe; last: the tied wte, lnf
rows = re.findall(r"comm: rank \d+ step 2 sent (\d+) recv \d+ bytes in (\d+) calls \(zero %d, world \d+, P (\d+), S \d+\) ring theory (\d+) \| pp rank (\d+)" % z, open(log).read())
ok, out = len(rows) == 2 * N, []
for s in (0, 1):
    P = layers * layer + glob[s]
    gathers = P if z == 2 else 2 * m * P + (glob[s] if s == 0 and N >= 3 else 0)
    theory = (m * layers * layer + glob[s] + gathers) * (N - 1) / N * 4
    mine = [r for r in rows if int(r[4]) == s]
    mean = sum(int(r[0]) for r in mine) / max(len(mine), 1)
    calls = max(int(r[1]) for r in mine) if mine else 0
    ok = ok and len(mine) == N and all(int(r[2]) == P for r in mine) and abs(mean - theory) <= 256 * calls \
        and all(abs(int(r[3]) - theory) <= 1 for r in mine)
    out.append("stage %d: P %d, theory %.0f, measured mean %.0f, printed %s" % (s, P, theory, mean, sorted({r[3] for r in mine})))
print("; ".join(out))
sys.exit(0 if ok else 1)
PY
}
for z in 2 3; do
    out=$(bytes_ok "$TMP/a$z.log" 2 4 $z 2)
    check $? "pp 2 x dp 2 -z $z, m 4: data-parallel bytes per step per stage: $out"
    out=$(bytes_ok "$TMP/d$z.log" 3 4 $z 2)
    check $? "pp 2 x dp 3 -z $z, m 4: data-parallel bytes per step per stage: $out"
    out=$(bytes_ok "$TMP/c$z.log" 2 4 $z 3)
    check $? "interleaved pp 2 (v 3) x dp 2 -z $z, m 4: data-parallel bytes per step per stage (ZeRO-3: chunks between the ends gather no globals): $out"
done

run o2 4 --pp 2 -d 512 -z 2 --offload-optimizer cpu
out=$(dp_same_training "$TMP/a2" "$TMP/o2" 4)
check $? "pp 2 x dp 2 -z 2 --offload-optimizer cpu vs without: $out"

# checkpoints
for z in 2 3; do
    rm -rf "$TMP/r$z"; run "r$z" 4 --pp 2 -d 512 -z $z --comm-stats 1 -n 2 --exit-after-steps 2
    cp -r "$TMP/r$z" "$TMP/r${z}s"
    MPIRUN 4 $TRAIN "${M[@]}" --pp 2 -d 512 -z $z --comm-stats 1 -o "$TMP/r$z" -y 1 > "$TMP/r$z.log" 2>&1
    out=$(dp_same_training "$TMP/a$z" "$TMP/r$z" 4) && for k in 0 1 2 3; do
        cmp -s "$TMP/a$z/state_00000004_0000$k.bin" "$TMP/r$z/state_00000004_0000$k.bin" || out="$out; state file $k DIFFERS"
    done
    ! grep -q DIFFERS <<< "$out"
    check $? "pp 2 x dp 2 -z $z: resumed at step 2 vs 4 straight steps: $out; every rank's state file identical"
    MPIRUN 2 $TRAIN "${M[@]}" -d 512 -z 1 -o "$TMP/r${z}s" -y 1 > "$TMP/r${z}s.log" 2>&1 && \
        grep -q "with ZeRO stage $z; re-sharding the optimizer state for 2 processes with ZeRO stage 1" "$TMP/r${z}s.log"
    out=$(close "a$z" "r${z}s")
    check $? "the pp 2 x dp 2 -z $z checkpoint resumed on 2 processes without pp at -z 1 (announced) (T(4)): $out"
done
rm -rf "$TMP/q"; run q 2 -d 512 -z 1 -n 2 --exit-after-steps 2
MPIRUN 4 $TRAIN "${M[@]}" --pp 2 -d 512 -z 3 -o "$TMP/q" -y 1 > "$TMP/q.log" 2>&1 && \
    grep -q "with ZeRO stage 1; re-sharding the optimizer state for 4 processes with ZeRO stage 3" "$TMP/q.log"
out=$(close a3 q)
check $? "a 2-process -z 1 checkpoint resumed at pp 2 x dp 2 -z 3 (announced) vs the straight pp 2 -z 3 run (T(4)): $out"

