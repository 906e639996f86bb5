#!/usr/bin/env bash
# dev/bench/moe_learning.sh -- learning check of the mixture of experts (llmc/moe.h) on Tiny Shakespeare: dense d4
# against d4 with 8 experts top-2 in every block, the same steps, tokens, schedule and seed (and, with NOAUX=1, the
# MoE model without the load-balancing loss, to see the balance it buys). Prints the validation losses side by side,
# the last step's routing (largest f_i*E, dropped fraction) and writes OUT/val_loss.png (needs matplotlib).
# Usage: bash dev/bench/moe_learning.sh [OUT=/tmp/moe_learning] [STEPS=150]
#   ANALYZE_ONLY=1: only the table and the plot, from existing OUT/{dense,moe,moe_noaux}/log.jsonl (runs that were
#   stopped early are shown up to where they got).
# Result on 2 CPU cores shared with other work: README.md, "Mixture of experts".
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-/tmp/moe_learning}
STEPS=${2:-150}
RUNS="dense moe"
[ "${NOAUX:-0}" = 1 ] && RUNS="$RUNS moe_noaux"
COMMON=(-e d4 -b 4 -t 64 -x "$STEPS" -u 10 -v 50 --val-tokens 8192 -s 0 -g 0 --seed 1337 --cpu-matmul fp32)
if [ "${ANALYZE_ONLY:-0}" != 1 ]; then
    for run in $RUNS; do
        case $run in
            dense) X=() ;;
            moe) X=(--moe-experts 8 --moe-top-k 2) ;;
            moe_noaux) X=(--moe-experts 8 --moe-top-k 2 --moe-aux-coef 0) ;;
        esac
        rm -rf "${OUT:?}/$run"
        ./train_gpt_cpu "${COMMON[@]}" "${X[@]}" -o "$OUT/$run" > "$OUT.$run.txt" 2>&1 || { echo "$run failed: see $OUT.$run.txt"; exit 1; }
    done
fi
python3 - "$OUT" dense moe moe_noaux <<'PY'
import json, os, sys
out, runs = sys.argv[1], [r for r in sys.argv[2:] if os.path.isfile(os.path.join(sys.argv[1], r, "log.jsonl"))]
logs = {r: [json.loads(l) for l in open(os.path.join(out, r, "log.jsonl"))] for r in runs}
val = {r: {o["step"]: o["val_loss"] for o in logs[r] if o["kind"] == "val"} for r in runs}
steps = sorted(set().union(*[set(v) for v in val.values()]))
print("step  " + "  ".join("%10s" % r for r in runs))
for s in steps:
    print("%4d  " % s + "  ".join("%10s" % ("%.4f" % val[r][s] if s in val[r] else "-") for r in runs))
for r in runs:
    train = [o for o in logs[r] if o["kind"] == "train"]
    if train and "moe" in train[-1]:
        t = train[-1]
        print("%s, step %d: max load %.2f (1 = balanced, 8 = one expert), dropped %.1f%%, per block f = %s" % (
            r, t["step"], t["moe_max_load"], 100 * t["moe_drop"],
            " | ".join(",".join("%.2f" % f for f in b["f"]) for b in t["moe"])))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.figure(figsize=(6, 4))
    for r in runs:
        pts = sorted(val[r].items())
        plt.plot([s for s, _ in pts], [v for _, v in pts], marker="o", ms=3, label=r)
    plt.xlabel("step"); plt.ylabel("validation loss"); plt.legend(); plt.title("d4 dense vs 8 experts top-2")
    plt.savefig(os.path.join(out, "val_loss.png"), dpi=120)
    print("plot: %s" % os.path.join(out, "val_loss.png"))
except ImportError:
    print("no matplotlib: no plot (pip install matplotlib)")
PY
