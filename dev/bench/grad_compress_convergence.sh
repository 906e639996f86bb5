#!/usr/bin/env bash
# dev/bench/grad_compress_convergence.sh -- the effect of gradient compression on the loss curve (llmc/README.md,
# "Gradient compression"): the same training on 2 data-parallel processes five times -- uncompressed, int8,
# topk:RATIO with error feedback, topk:RATIO without, and topk:RATIO with error feedback plus RECIPE (by default an
# uncompressed warm-up of 60 steps and a residual re-added x0.7 per step: --grad-compress-warmup 60
# --grad-compress-ef-decay 0.7) -- then a table of the final validation losses (relative to the uncompressed run) and
# gradient bytes per step (the last step's and the mean over the run), and one plot of the validation curves.
# RUNS="none topk_ef_recipe" runs a subset (RUNS="": none, only the table and plot of the runs OUTDIR holds); runs
# not finished in OUTDIR are left out of both. The variants measured earlier and removed from the trainer (AdamW's
# variance frozen or per block, top-k in AdamW's metric) and their numbers: dev/bench/README.md.
#
# Usage: dev/bench/grad_compress_convergence.sh [OUTDIR] [extra trainer flags...]
#   defaults: OUTDIR=out/grad_compress, d4 on Tiny Shakespeare, B 8 x T 64 per process, 600 steps, -m 20, fp32 matmuls
#   (the trainer's defaults when this was measured; stated in the command since), -v 50, no samples; later flags win.
#   Results on 2 CPU cores: dev/bench/README.md (plots: dev/bench/grad_compress_d4_600steps*.png).
#   RATIO=0.01 NP=2 TRAIN=./train_gpt_cpu in the environment: the top-k ratio, the process count, the trainer;
#   RECIPE="--grad-compress-warmup 60 --grad-compress-ef-decay 0.7": the flags of the fifth run (topk_ef_recipe);
#   REFERENCE="int8=5.2004 topk_ef=6.0444": final validation losses of runs made elsewhere (another OUTDIR, an earlier
#   measurement of the same flags), drawn as dashed horizontal lines and listed, marked, in the table; an entry
#   name=STEP:VAL,STEP:VAL,... gives points of an earlier curve instead (drawn dashed; the last is its final).
# Took 6-25 minutes per run on 2 CPU cores (quiet to shared with other work). Needs mpirun and ./train_gpt_cpu; the
# plot needs matplotlib.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/grad_compress}; shift || true
RATIO=${RATIO:-0.01}; NP=${NP:-2}; TRAIN=${TRAIN:-./train_gpt_cpu}
RECIPE=${RECIPE:---grad-compress-warmup 60 --grad-compress-ef-decay 0.7}
RUNS=${RUNS-none int8 topk_ef topk_noef topk_ef_recipe}
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
run() {
    local name=$1; shift
    case " $RUNS " in *" $name "*) ;; *) echo "== $name: not in RUNS, skipped"; return;; esac
    if [ -f "$OUT/$name/DONE_final" ]; then echo "== $name: done before, kept"; return; fi
    echo "== $name: $*"
    rm -rf "$OUT/$name"
    # the measured configuration, stated rather than taken from the defaults (which changed since: B 16, 1200
    # steps, -m 10, --cpu-matmul auto): d4, B 8 x T 64 per process, 600 steps, 20 validation batches, fp32 matmuls
    mpirun --oversubscribe --bind-to none -np "$NP" -x OMP_NUM_THREADS "$TRAIN" -e d4 -b 8 -t 64 -x 600 -m 20 \
        --cpu-matmul fp32 -v 50 -s 0 -g 0 -o "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
    touch "$OUT/$name/DONE_final"
    grep -E '^val loss' "$OUT/$name.log" | tail -1
}
run none --grad-compress none "$@"
run int8 --grad-compress int8 "$@"
run topk_ef --grad-compress "topk:$RATIO" --grad-compress-ef 1 "$@"
run topk_noef --grad-compress "topk:$RATIO" --grad-compress-ef 0 "$@"
# shellcheck disable=SC2086
run topk_ef_recipe --grad-compress "topk:$RATIO" --grad-compress-ef 1 $RECIPE "$@"
python3 - "$OUT" "$RECIPE" "${REFERENCE:-}" <<'PY'
import json, os, sys
out, recipe = sys.argv[1], sys.argv[2]
# REFERENCE entries: name=FINAL, or name=STEP:VAL,STEP:VAL,... (points of an earlier curve; the last is its final)
refcurves = {kv.split("=")[0]: [(int(p.split(":")[0]), float(p.split(":")[1])) for p in kv.split("=")[1].split(",")]
             for kv in sys.argv[3].split() if ":" in kv}
refs = [(kv.split("=")[0], refcurves[kv.split("=")[0]][-1][1] if ":" in kv else float(kv.split("=")[1]))
        for kv in sys.argv[3].split()]
# runs with a log; those without DONE_final were stopped early and are marked so (their last validation is shown)
names = [n for n in ["none", "int8", "topk_ef", "topk_noef", "topk_ef_recipe"]
         if os.path.exists(os.path.join(out, n, "log.jsonl"))]
done = {n: os.path.exists(os.path.join(out, n, "DONE_final")) for n in names}
rows = {}
for n in names:
    recs = [json.loads(l) for l in open(os.path.join(out, n, "log.jsonl"))]
    val = [(r["step"], r["val_loss"]) for r in recs if r.get("kind") == "val"]
    tr = [r for r in recs if r.get("kind") == "train"]
    sent = tr[-1].get("grad_bytes_sent", None)
    fp32 = tr[-1].get("grad_bytes_fp32", None)
    mean = sum(r.get("grad_bytes_sent", 0) for r in tr) / len(tr) if sent is not None else None
    rows[n] = (val, sent, fp32, mean)
if "none" in names and done["none"]:
    base = rows["none"][0][-1][1]
elif "none" in dict(refs):
    base = dict(refs)["none"]
    print("uncompressed final from REFERENCE: %.4f" % base)
else:
    sys.exit("no finished uncompressed run in %s and no REFERENCE none=...: nothing to compare with" % out)
print("fifth run: topk_ef_recipe = topk_ef + %s" % recipe)
print("finished runs: %s; stopped early: %s" % (" ".join(n for n in names if done[n]),
                                               " ".join(n for n in names if not done[n]) or "none"))
print("| run | final val loss | vs uncompressed | grad bytes sent per step (rank 0), last step | vs fp32 ring all-reduce | mean over the run |")
print("|---|---|---|---|---|---|")
ref_fp32 = next((rows[n][2] for n in names if rows[n][2] is not None), None)
for n in names:
    val, sent, fp32, mean = rows[n]
    v = val[-1][1]
    s = "%.0f" % sent if sent is not None else ("%.0f (fp32 ring)" % ref_fp32 if ref_fp32 else "(fp32 ring)")
    r = "%.4fx" % (sent / fp32) if sent is not None else "1x"
    m = "%.4fx" % (mean / fp32) if sent is not None else "1x"
    if not done[n]:
        st = val[-1][0]
        b = dict(rows["none"][0] if "none" in rows else refcurves.get("none", [])).get(st)
        print("| %s (stopped early) | %.4f at step %d | %s | %s | %s | %s |" % (n, v, st, "%+.2f%% at step %d" % (
            100.0 * (v - b) / b, st) if b else "", s, r, m))
        continue
    print("| %s | %.4f | %+.2f%% | %s | %s | %s |" % (n, v, 100.0 * (v - base) / base, s, r, m))
for n, v in refs:
    print("| %s (REFERENCE, not run here) | %.4f | %+.2f%% | | | |" % (n, v, 100.0 * (v - base) / base))
steps = sorted({s for n in names for s, _ in rows[n][0] if s > 0 and s % 100 == 0})
last = max([s for n in names if done[n] for s, _ in rows[n][0]] or [0])
print("\nvalidation loss vs uncompressed along the run:")
print("| run | " + " | ".join("step %d" % s for s in steps) + " |")
print("|---|" + "---|" * len(steps))
for n in names:
    d, b = dict(rows[n][0]), dict(rows["none"][0] if "none" in rows else refcurves.get("none", []))
    if last not in b:
        b[last] = base  # the uncompressed run's final value (from REFERENCE when that run stopped early)
    print("| %s | " % n + " | ".join(("%.4f (%+.1f%%)" % (d[s], 100 * (d[s] - b[s]) / b[s]) if s in b else "%.4f" % d[s])
                                     if s in d else "-" for s in steps) + " |")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for n in names:
        val = rows[n][0]
        plt.plot([s for s, _ in val], [v for _, v in val], marker="o", ms=3, label=n)
    for i, (n, v) in enumerate(refs):
        col = "C%d" % ((len(names) + i) % 10)
        if n in refcurves:
            pts = refcurves[n]
            plt.plot([s for s, _ in pts], [y for _, y in pts], ls="--", lw=1, marker="x", color=col,
                     label="%s (earlier run, its logged points)" % n)
        else:
            plt.axhline(v, ls="--", lw=1, color=col, label="%s final (earlier run)" % n)
    plt.ylim(top=min(8.0, max(v for n in names for _, v in rows[n][0])))
    plt.xlabel("step"); plt.ylabel("validation loss"); plt.legend(fontsize=7); plt.grid(alpha=0.3)
    plt.title("gradient compression, %s" % os.path.basename(os.path.abspath(out)))
    plt.savefig(os.path.join(out, "val_loss.png"), dpi=120)
    print("plot: %s" % os.path.join(out, "val_loss.png"))
except ImportError:
    print("no matplotlib: no plot (pip install matplotlib)")
PY
