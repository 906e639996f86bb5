#!/usr/bin/env bash
# dev/bench/muon_step.sh -- the optimizer step's time with --optimizer muon against AdamW on the CPU build (a
# benchmark, not a test), side by side for d4 and d12: per model and optimizer the mean optimizer phase ("adamw" in
# the --profile-steps table, llmc/profile.h: the whole update, Newton-Schulz included) and the mean step, over STEPS-1
# profiled steps after one warm-up; and Muon's Newton-Schulz FLOPs per step (the planner's count, --plan's "plan muon"
# line) over its extra time: the rate the CPU GEMMs reach. The iteration's FLOPs do not depend on the batch, so the
# share of the step falls as B x T grows (the planner predicts 2.8% for d12 on one H100 at B 64, T 1024).
# Usage: bash dev/bench/muon_step.sh [steps=4] [B=1] [T=64] [models="d4 d12"]
# Result on 2 CPU cores: dev/bench/README.md, "Muon's optimizer step".
set -eu
cd "$(dirname "$0")/../.."
STEPS=${1:-4}
B=${2:-1}
T=${3:-64}
MODELS=${4:-"d4 d12"}
make -s train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for model in $MODELS; do
    for opt in adamw muon; do
        echo "[muon_step] $model $opt: $STEPS steps" >&2
        ./train_gpt_cpu -e "$model" -b "$B" -t "$T" -x "$STEPS" -j '' -g 0 --optimizer "$opt" \
            --profile-steps $((STEPS - 1)) -o "$TMP/${model}_$opt" > "$TMP/${model}_$opt.txt" 2>&1 ||
            { tail -n 3 "$TMP/${model}_$opt.txt"; exit 1; }
    done
    ./train_gpt_cpu -e "$model" --plan 1 --gpus 1 --optimizer muon -b "$B" -t "$T" > "$TMP/${model}_plan.txt" 2>&1 ||
        { tail -n 3 "$TMP/${model}_plan.txt"; exit 1; }
done
python3 - "$TMP" "$B" "$T" "${OMP_NUM_THREADS:-$(nproc)}" $MODELS <<'PY'
import json, os, re, sys
tmp, B, T, threads, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
def prof(run):
    r = [json.loads(l) for l in open(os.path.join(tmp, run, "log.jsonl")) if '"kind":"profile"' in l][-1]
    return r["phases"]["adamw"][2], r["step_ms"]
print("optimizer step, CPU build, B=%s T=%s, %s threads (ms per step, mean of the profiled steps)" % (B, T, threads))
print("| model | AdamW optimizer | AdamW step | Muon optimizer | Muon step | Newton-Schulz GFLOP | GFLOP/s of Muon's extra time |")
print("|---|---|---|---|---|---|---|")
for m in models:
    ao, ast = prof(m + "_adamw")
    mo, mst = prof(m + "_muon")
    tf = float(re.search(r"plan muon: Newton-Schulz \(\d+ steps\) ([0-9.e+-]+) TFLOP", open(os.path.join(tmp, m + "_plan.txt")).read()).group(1))
    print("| %s | %.1f | %.0f | %.1f | %.0f | %.1f | %.1f |" % (m, ao, ast, mo, mst, tf * 1e3, tf * 1e3 / max(1e-9, (mo - ao) / 1e3)))
PY
