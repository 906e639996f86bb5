#!/usr/bin/env bash
# dev/bench/family_learning.sh -- learning check of the decoder family (llmc/README.md, "The model's architecture as
# data") on Tiny Shakespeare: GPT-2 d4 against the Llama-style l4 (RMSNorm, rotary positions, SwiGLU, no biases, tied
# head; parameter count within 0.1% of d4's), the default run's settings (B=16, T=64, lr, warmup, schedule) for
# STEPS steps, on two seeds each: the same tokens, the same data order. Prints the validation losses side by side and
# writes OUT/val_loss.png (needs matplotlib). Not tuned: both use the default run's hyperparameters.
# Usage: bash dev/bench/family_learning.sh [OUT=/tmp/family_learning] [STEPS=300] [SEEDS="1337 42"]
#   ANALYZE_ONLY=1: only the table and the plot, from existing OUT/{d4,l4}_sSEED/log.jsonl.
# Result on 2 CPU cores: dev/bench/README.md, "The decoder family against GPT-2".
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-/tmp/family_learning}
STEPS=${2:-300}
SEEDS=${3:-"1337 42"}
mkdir -p "$OUT"
if [ "${ANALYZE_ONLY:-0}" != 1 ]; then
    for seed in $SEEDS; do
        for e in d4 l4; do
            run="${e}_s$seed"
            rm -rf "${OUT:?}/$run"
            echo "[family_learning] $run: $STEPS steps"
            ./train_gpt_cpu -e "$e" -x "$STEPS" --seed "$seed" -s 0 -o "$OUT/$run" > "$OUT/$run.txt" 2>&1 ||
                { echo "$run failed: see $OUT/$run.txt"; exit 1; }
        done
    done
fi
python3 - "$OUT" $SEEDS <<'PY'
import json, os, sys
out, seeds = sys.argv[1], sys.argv[2:]
runs = [f"{e}_s{s}" for s in seeds for e in ("d4", "l4") if os.path.isfile(os.path.join(out, f"{e}_s{s}", "log.jsonl"))]
val = {}
for r in runs:
    rows = [json.loads(l) for l in open(os.path.join(out, r, "log.jsonl"))]
    val[r] = {o["step"]: o["val_loss"] for o in rows if o.get("kind") == "val"}
steps = sorted(set().union(*[set(v) for v in val.values()]))
print("step  " + "  ".join("%10s" % r for r in runs))
for s in steps:
    print("%4d  " % s + "  ".join("%10s" % ("%.4f" % val[r][s] if s in val[r] else "-") for r in runs))
for s in seeds:
    d, l = val.get(f"d4_s{s}", {}), val.get(f"l4_s{s}", {})
    if d and l:
        last = max(set(d) & set(l))
        print(f"seed {s}, step {last}: d4 {d[last]:.4f}, l4 {l[last]:.4f}: "
              f"{'l4 lower' if l[last] < d[last] else 'l4 NOT lower'} by {d[last] - l[last]:+.4f}")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib not installed: no plot"); sys.exit(0)
fig, ax = plt.subplots(figsize=(7, 4.5))
for r in runs:
    xs = sorted(val[r])
    ax.plot(xs, [val[r][x] for x in xs], ("-" if r.startswith("l4") else "--"), marker=".", label=r)
ax.set_xlabel("step (the default run's batch)"); ax.set_ylabel("validation loss")
ax.set_title("Tiny Shakespeare: GPT-2 d4 vs Llama-style l4"); ax.legend(); ax.grid(alpha=0.3)
fig.savefig(os.path.join(out, "val_loss.png"), dpi=110, bbox_inches="tight")
print("wrote", os.path.join(out, "val_loss.png"))
PY
