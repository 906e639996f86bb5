#!/usr/bin/env bash
# dev/bench/profile_phases.sh -- the CPU build's phase table (--profile-steps, llmc/profile.h) for d4 and d12, side by
# side (a benchmark, not a test): per phase the ms per step (forward + backward + outside both) and its share, host
# gaps, the step, and the covered share (the timed phases over the step's wall time; the issue's bar: at least 95%).
# Each model runs STEPS steps, the first is warm-up, the others are profiled (their mean is the table).
# Usage: bash dev/bench/profile_phases.sh [steps] [B] [T]   (defaults 4, 4, 64: about a minute on 2 loaded cores;
#        env OMP_NUM_THREADS pins the thread count; the matmuls run in fp32, the tests' reference)
set -eu
cd "$(dirname "$0")/../.."
STEPS=${1:-4}
B=${2:-4}
T=${3:-64}
make -s train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for model in d4 d12; do
    ./train_gpt_cpu -e "$model" -b "$B" -t "$T" -x "$STEPS" -j '' -g 0 --cpu-matmul fp32 \
        --profile-steps $((STEPS - 1)) -o "$TMP/$model" > "$TMP/$model.txt" 2>&1 || { tail -n 3 "$TMP/$model.txt"; exit 1; }
done
python3 - "$TMP/d4/log.jsonl" "$TMP/d12/log.jsonl" "$B" "$T" "${OMP_NUM_THREADS:-$(nproc)}" <<'PY'
import json, sys
recs = [[json.loads(l) for l in open(p) if '"kind":"profile"' in l][-1] for p in sys.argv[1:3]]
B, T, threads = sys.argv[3], sys.argv[4], sys.argv[5]
print("phase table, CPU build, B=%s T=%s, %s threads, fp32 matmuls; ms per step (mean of steps %d-%d) and share"
      % (B, T, threads, recs[0]["first"], recs[0]["last"]))
print("%-16s | %10s %7s | %10s %7s" % ("phase", "d4 ms", "share", "d12 ms", "share"))
def cell(r, ms): return "%10.2f %6.1f%%" % (ms, 100.0 * ms / r["step_ms"])
for k in recs[0]["phases"]:
    print("%-16s | %s | %s" % (k, cell(recs[0], sum(recs[0]["phases"][k])), cell(recs[1], sum(recs[1]["phases"][k]))))
print("%-16s | %s | %s" % ("host gaps", cell(recs[0], recs[0]["host_gaps_ms"]), cell(recs[1], recs[1]["host_gaps_ms"])))
print("%-16s | %s | %s" % ("step", cell(recs[0], recs[0]["step_ms"]), cell(recs[1], recs[1]["step_ms"])))
cov = [100.0 * r["covered_ms"] / r["step_ms"] for r in recs]
print("covered share: d4 %.2f%%, d12 %.2f%% (%s)" % (cov[0], cov[1], "both >= 95%" if min(cov) >= 95 else "BELOW 95%"))
PY
