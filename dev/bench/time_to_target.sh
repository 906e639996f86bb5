#!/usr/bin/env bash
# dev/bench/time_to_target.sh -- time to quality on Tiny Shakespeare: how many tokens and seconds each recipe needs to
# reach the validation loss today's default run reaches at 75% of its steps (a benchmark, not a test: make test does
# not run it; hours on 2 CPU cores with the defaults).
#
# The target: the default recipe (GPT-2 -e d4, AdamW, every other flag the trainer's default: B 16, T 64, -l 1e-3,
# warmup 20, cosine to 0.1, -c 0.1) run for STEPS steps on the first seed of SEEDS (OUT/ref_sSEED); its validation
# row at step 0.75 x STEPS, or the last one before it, gives the target X. Then every config of CONFIGS on every
# seed of SEEDS trains with the same flags, -x STEPS (so the learning-rate schedule is the default run's) and
# --target-val-loss X: the run stops at its first validation (every VAL_EVERY steps) at or below X, and its log's
# "target" record gives the steps, tokens (steps x B x T) and seconds (the trainer's seconds of training: optimizer
# steps only, not validation, samples or checkpoints; wall clock on a shared machine, so a rough figure) to X. A run
# that does not reach X within STEPS says "not reached" with its best validation loss.
# Configs (names: MODEL_OPTIMIZER): d4 (GPT-2), l4 (the Llama-style member of d4's parameter count: RMSNorm, rotary,
# SwiGLU, no biases, tied head), l4qk (l4 with QK-norm: -e L4:C256:NH4:T256:norm=rms:pos=rope:theta=500000:
# mlp=swiglu:bias=0:qknorm=1, which is l4 spelled out plus qknorm=1), l4r2 (l4 with ReLU² instead of SwiGLU:
# mlp=relu2, width 4C: 2 x 4C^2 per block against SwiGLU's 3 x C x 704), each with adamw or muon (--optimizer muon -l
# MUON_LR; AdamW keeps the default -l).
# MUON_LR must be chosen on seed 1337 and confirmed on seed 42, never tuned on the evaluation seed: the table's
# other seeds are only a check of what seed 1337 chose. Its default is AdamW's default learning rate (1e-3), untuned.
# Every run uses --cpu-matmul CPU_MATMUL (default fp32): auto times fp32 against bf16 at start-up and, on a loaded
# machine, may pick differently from one run to the next, which changes the arithmetic (d4_adamw on the first seed
# would then not repeat the reference run).
# Every run: no samples but the last (-s 0; sampling does not touch training), the reference stops one step after
# 0.75 x STEPS (--exit-after-steps; its learning-rate schedule is still -x STEPS's).
# Output: the table (config, seed, steps, tokens and seconds to the target, tokens against d4_adamw's on the same
# seed) on stdout and as Markdown in OUT/table.md; OUT/val_loss_vs_tokens.png (matplotlib; skipped with a note
# without it).
# Usage: bash dev/bench/time_to_target.sh [OUT]   (default /tmp/time_to_target, /tmp/time_to_target_smoke with SMOKE=1)
#   STEPS=1200 (the default run's -x)  SEEDS="1337 42"  VAL_EVERY=10  MUON_LR=1e-3  CPU_MATMUL=fp32
#   CONFIGS="d4_adamw d4_muon l4_adamw l4_muon l4qk_adamw l4qk_muon"
#   SMOKE=1: STEPS=20, VAL_EVERY=5, SEEDS=1337 (a check that the script works end to end, minutes, meaningless numbers)
#   ANALYZE_ONLY=1: only the table and the plot, from the existing OUT/*/log.jsonl
#   REF_SEED (default the first of SEEDS): the reference's seed; REF_ONLY=1: run only the reference; REUSE_REF=1: keep
#   an existing OUT/ref_sREF_SEED; TARGET=X: no reference run, X is the target (a value the reference gave before,
#   e.g. dev/bench/README.md's, to add configs to a measured table on another day). Two seeds on two cores, each run on one thread (what dev/bench/README.md reports):
#     REF_ONLY=1 bash time_to_target.sh OUT
#     for s in 1337 42; do OMP_NUM_THREADS=1 REUSE_REF=1 REF_SEED=1337 SEEDS=$s bash time_to_target.sh OUT & done; wait
#     ANALYZE_ONLY=1 bash time_to_target.sh OUT
set -u
cd "$(dirname "$0")/../.." || exit 2
if [ "${SMOKE:-0}" = 1 ]; then
    STEPS=${STEPS:-20}; SEEDS=${SEEDS:-1337}; VAL_EVERY=${VAL_EVERY:-5}; OUT=${1:-/tmp/time_to_target_smoke}
else
    STEPS=${STEPS:-1200}; SEEDS=${SEEDS:-"1337 42"}; VAL_EVERY=${VAL_EVERY:-10}; OUT=${1:-/tmp/time_to_target}
fi
MUON_LR=${MUON_LR:-1e-3}
CPU_MATMUL=${CPU_MATMUL:-fp32}
CONFIGS=${CONFIGS:-"d4_adamw d4_muon l4_adamw l4_muon l4qk_adamw l4qk_muon"}
L4QK="L4:C256:NH4:T256:norm=rms:pos=rope:theta=500000:mlp=swiglu:bias=0:qknorm=1"
L4R2="L4:C256:NH4:T256:norm=rms:pos=rope:theta=500000:mlp=relu2:bias=0"
REF_SEED=${REF_SEED:-${SEEDS%% *}}
BIN=./train_gpt_cpu
mkdir -p "$OUT" || exit 1

# the flags of config $1 (MODEL_OPTIMIZER)
config_flags() {
    local model=${1%_*} opt=${1##*_}
    case "$model" in
        d4|l4) echo -n "-e $model" ;;
        l4qk) echo -n "-e $L4QK" ;;
        l4r2) echo -n "-e $L4R2" ;;
        *) echo "error: config '$1': unknown model '$model' (expected d4, l4, l4qk or l4r2)" >&2; return 1 ;;
    esac
    case "$opt" in
        adamw) echo " --optimizer adamw" ;;
        muon) echo " --optimizer muon -l $MUON_LR" ;;
        *) echo "error: config '$1': unknown optimizer '$opt' (expected adamw or muon)" >&2; return 1 ;;
    esac
}

# run NAME FLAGS...: the trainer into OUT/NAME (its output in OUT/NAME.txt); exits on failure
run() {
    local name=$1; shift
    rm -rf "${OUT:?}/$name"
    echo "[time_to_target] $name: $*"
    "$BIN" --cpu-matmul "$CPU_MATMUL" "$@" -g 0 -s 0 -v "$VAL_EVERY" -x "$STEPS" -o "$OUT/$name" > "$OUT/$name.txt" 2>&1 ||
        { echo "error: $name failed: see $OUT/$name.txt" >&2; exit 1; }
}

# the target: the reference run's val row at 0.75 x STEPS or just before it ("X STEP")
target_of_ref() {
    python3 - "$OUT/ref_s$REF_SEED/log.jsonl" "$STEPS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
at = int(0.75 * int(sys.argv[2]))
vals = [(r["step"], r["val_loss"]) for r in rows if r["kind"] == "val" and r["step"] <= at]
if not vals:
    sys.exit("error: %s has no validation row at or before step %d" % (sys.argv[1], at))
print("%r %d" % (vals[-1][1], vals[-1][0])) # the logged value itself (%.9g of the float: it parses back exactly)
PY
}

if [ "${ANALYZE_ONLY:-0}" != 1 ]; then
    [ -x "$BIN" ] || { echo "error: $BIN is missing: make train_gpt_cpu" >&2; exit 1; }
    for c in $CONFIGS; do config_flags "$c" > /dev/null || exit 1; done
    # stopped just after 0.75 x STEPS (its validation there included): the schedule is still -x STEPS's
    if [ -n "${TARGET:-}" ]; then
        echo "[time_to_target] TARGET=$TARGET given: no reference run"
    elif [ "${REUSE_REF:-0}" = 1 ] && [ -s "$OUT/ref_s$REF_SEED/log.jsonl" ]; then
        echo "[time_to_target] ref_s$REF_SEED: reused (REUSE_REF=1)"
    else
        run "ref_s$REF_SEED" -e d4 --seed "$REF_SEED" --exit-after-steps $((STEPS * 3 / 4 + 1))
    fi
    [ "${REF_ONLY:-0}" = 1 ] && { echo "[time_to_target] REF_ONLY=1: the reference only"; exit 0; }
fi
if [ -n "${TARGET:-}" ]; then TARGET_STEP=0; else
    read -r TARGET TARGET_STEP <<< "$(target_of_ref)" || exit 1
fi
[ -n "${TARGET_STEP:-}" ] || exit 1
echo "[time_to_target] target: val loss $TARGET, d4 AdamW (the default recipe, seed $REF_SEED) at step $TARGET_STEP of $STEPS"
if [ "${ANALYZE_ONLY:-0}" != 1 ]; then
    for seed in $SEEDS; do
        for c in $CONFIGS; do
            # shellcheck disable=SC2046 # config_flags' words are flags
            run "${c}_s$seed" $(config_flags "$c") --seed "$seed" --target-val-loss "$TARGET"
        done
    done
fi

python3 - "$OUT" "$TARGET" "$TARGET_STEP" "$STEPS" "$REF_SEED" "$MUON_LR" "$CONFIGS" $SEEDS <<'PY'
import json, os, sys
out, target, target_step, steps, ref_seed, muon_lr, configs = sys.argv[1:8]
seeds, configs = sys.argv[8:], configs.split()
def load(name):
    path = os.path.join(out, name, "log.jsonl")
    return [json.loads(l) for l in open(path)] if os.path.isfile(path) else None
def tokens_per_step(rows):
    c = next(r for r in rows if r["kind"] == "config")
    return c["batch-size"] * c["seq-len"] * c["grad_accum_steps"] * c["processes"]
res, curves = {}, {}
for seed in seeds:
    for c in configs:
        rows = load(f"{c}_s{seed}")
        if rows is None:
            continue
        tps = tokens_per_step(rows)
        curves[f"{c}_s{seed}"] = [(r["step"] * tps, r["val_loss"]) for r in rows if r["kind"] == "val"]
        t = [r for r in rows if r["kind"] == "target"]
        res[(c, seed)] = t[-1] if t else None
ref = load(f"ref_s{ref_seed}")
if ref:
    tps = tokens_per_step(ref)
    curves[f"ref_s{ref_seed}"] = [(r["step"] * tps, r["val_loss"]) for r in ref if r["kind"] == "val"]
where = (f"reached by the default recipe (d4, AdamW, seed {ref_seed}) at step {target_step} of {steps}"
         if int(target_step) > 0 else "given (TARGET=, no reference run)")
lines = [f"Target: validation loss {float(target):.4f}, {where}. Muon -l {muon_lr}. Seconds: the trainer's seconds of training (optimizer "
         f"steps only), one shared 2-core CPU.", "",
         "| config | seed | steps to target | tokens to target | seconds | tokens / d4_adamw's |",
         "|---|---|---|---|---|---|"]
for seed in seeds:
    base = res.get(("d4_adamw", seed))
    for c in configs:
        if (c, seed) not in res:
            continue
        t = res[(c, seed)]
        if t is None:
            lines.append(f"| {c} | {seed} | no target record (run unfinished?) | | | |")
        elif not t["reached"]:
            best = "-" if t["val_loss"] is None else "%.4f" % t["val_loss"]
            lines.append(f"| {c} | {seed} | not reached in {t['step']} (best {best} at step {t['best_step']}) | "
                         f"> {t['tokens']:,} | > {t['time_s']:.1f} | - |")
        else:
            ratio = "%.3f" % (t["tokens"] / base["tokens"]) if base and base["reached"] else "-"
            lines.append(f"| {c} | {seed} | {t['step']} | {t['tokens']:,} | {t['time_s']:.1f} | {ratio} |")
table = "\n".join(lines) + "\n"
print(table, end="")
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(table)
print("wrote", os.path.join(out, "table.md"))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib not installed: no plot (pip install matplotlib)")
    sys.exit(0)
fig, ax = plt.subplots(figsize=(8, 5))
for name, pts in sorted(curves.items()):
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-" if "muon" in name else "--", marker=".", ms=3, label=name)
ax.axhline(float(target), color="k", lw=0.8, ls=":", label=f"target {float(target):.4f}")
ax.set_xlabel("tokens"); ax.set_ylabel("validation loss"); ax.grid(alpha=0.3); ax.legend(fontsize=8)
ax.set_title("Tiny Shakespeare: validation loss against tokens, to the target")
fig.savefig(os.path.join(out, "val_loss_vs_tokens.png"), dpi=110, bbox_inches="tight")
print("wrote", os.path.join(out, "val_loss_vs_tokens.png"))
PY
