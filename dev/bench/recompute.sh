#!/usr/bin/env bash
# dev/bench/recompute.sh -- activation checkpointing every k layers (-r 3 --recompute-every k) on the CPU build (a
# benchmark, not a test): for d12 (GPT-2 124M, L = 12) at small B, T, one table row per k in {1, 2, 3, 4, 6, 12}
# and one for no recompute (-r 0), each a separate run of ./train_gpt_cpu:
#   alloc     activation bytes the trainer allocated (its 'memory ledger' line; the ledger's own count beside it,
#             and the line must say "equal")
#   blocks    the part of them that depends on k: alloc - F, F = what no k changes (embedding output, LM head,
#             logits, backward buffers), derived from the -r 0 and k = 1 rows: with A' = (alloc(r0) - alloc(k1)) /
#             (L - 1) (one block's activations besides its output row) and c = B T C 4 bytes (one residual row),
#             A = A' + c is one block's activations and F = alloc(r0) - L A
#   textbook  (ceil(L/k) + k) A: Chen et al.'s count, where a stored segment input costs a whole block's A
#   RSS       the process's peak resident memory (GNU time), which also holds weights, gradients, AdamW state
#   recomp    blocks whose forward runs twice per step: (ceil(L/k) - 1) k (the last segment's activations are still
#             in place after the forward)
#   ms/step   median over the steps after the first two, and its overhead against -r 0
#   expected  the recomputed FLOPs over those of forward + backward (3 forwards): recomp x (24 C^2 + 2 T C) per token
#             over 3 (L (24 C^2 + 2 T C) + 2 C Vp) (block matmuls and causal attention; the LM head, never recomputed);
#             the AdamW update and elementwise work are not counted, so the measured share can only be lower
# Usage: bash dev/bench/recompute.sh [steps] [B] [T]     (defaults 8 1 256; env OMP_NUM_THREADS to pin threads)
# Timings on a shared machine are noisy: run it when the machine is otherwise idle, and with enough steps.
set -eu
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
B=${2:-1}
T=${3:-256}
make -s train_gpt_cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() { # name, flags...
    local name=$1; shift
    /usr/bin/time -f '%M' -o "$TMP/$name.rss" ./train_gpt_cpu -e d12 -b "$B" -t "$T" -x "$STEPS" -j '' -g 0 -u 1 \
        -o "$TMP/$name" "$@" > "$TMP/$name.txt" 2>&1 || { echo "run $name failed:"; tail -n 3 "$TMP/$name.txt"; exit 1; }
}
run r0 -r 0
for k in 1 2 3 4 6 12; do run "k$k" -r 3 --recompute-every "$k"; done
python3 - "$TMP" "$B" "$T" "$STEPS" "${OMP_NUM_THREADS:-$(nproc)}" <<'PY'
import json, math, re, statistics, sys
tmp, B, T, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
L, C = 12, 768
rows = {}
for name in ["r0"] + ["k%d" % k for k in (1, 2, 3, 4, 6, 12)]:
    txt = open("%s/%s.txt" % (tmp, name)).read()
    m = re.search(r"^memory ledger .*activations (\d+); allocated: .* \| (\d+) -> (\w+)$", txt, re.M)
    ms = [json.loads(l)["ms"] for l in open("%s/%s/log.jsonl" % (tmp, name)) if '"kind":"train"' in l][2:]
    rss = int(open("%s/%s.rss" % (tmp, name)).read().split()[-1]) * 1024
    rows[name] = dict(ledger=int(m.group(1)), alloc=int(m.group(2)), equal=m.group(3), ms=statistics.median(ms),
                      rss=rss)
c = B * T * C * 4
Ap = (rows["r0"]["alloc"] - rows["k1"]["alloc"]) / (L - 1)
A = Ap + c
F = rows["r0"]["alloc"] - L * A
MiB = 1024.0 * 1024.0
base = rows["r0"]["ms"]
print("d12 (L=%d, C=%d), B=%d T=%d, %d steps (median of the last %d), %s threads; A = %.2f MiB per block, "
      "F = %.2f MiB" % (L, C, B, T, steps, steps - 2, threads, A / MiB, F / MiB))
print("| run | alloc MiB | ledger MiB | ledger | blocks MiB | textbook (L/k+k)A MiB | RSS MiB | recomp | ms/step | overhead "
      "| expected |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
f_block, f_head = 24.0 * C * C + 2.0 * T * C, 2.0 * C * 50304
for name, r in rows.items():
    k = int(name[1:]) if name != "r0" else None
    nseg = math.ceil(L / k) if k else None
    text = "%.1f" % ((nseg + k) * A / MiB) if k else "-"
    recomp = (nseg - 1) * k if k else 0
    over = 100.0 * (r["ms"] / base - 1.0)
    expect = 100.0 * recomp * f_block / (3.0 * (L * f_block + f_head))
    print("| %s | %.1f | %.1f | %s | %.1f | %s | %.0f | %d | %.0f | %s | %s |" % (
        "-r 0" if not k else "-r 3 k=%d" % k, r["alloc"] / MiB, r["ledger"] / MiB, r["equal"],
        (r["alloc"] - F) / MiB, text, r["rss"] / MiB, recomp, r["ms"], "-" if not k else "%+.1f%%" % over,
        "-" if not k else "%.1f%%" % expect))
PY
