#!/usr/bin/env bash
# dev/bench/recompute.sh -- activation checkpointing every k layers (-r 3 --recompute-every k) on the CPU build (a
# benchmark, not a test): runs build/recompute_bench (dev/bench/recompute_bench.c: one forward + backward of d12,
# GPT-2 124M with L = 12, for -r 0 and k in {1, 2, 3, 4, 6, 12}, interleaved, median of REPS, one thread) and prints
# a markdown table, one row per configuration:
#   alloc     activation bytes allocated for the table (gpt2_allocate_activations' acts_bytes)
#   ledger    the memory ledger's count of them (ledger_rank: must be equal)
#   blocks    the part that depends on k: alloc - F, F = what no k changes (embedding output, LM head, logits,
#             backward buffers), derived from the -r 0 and k = 1 rows: A' = (alloc(r0) - alloc(k1)) / (L - 1) (one
#             block's activations besides its output row), c = B T C 4 bytes (one residual row), A = A' + c one
#             block's activations, F = alloc(r0) - L A
#   textbook  (ceil(L/k) + k) A: Chen et al.'s count, in which a stored segment input costs a whole block's A
#   recomp    blocks whose forward runs twice per step: (ceil(L/k) - 1) k (the last segment's activations are still
#             in place after the forward)
#   CPU s     forward + backward CPU time (one thread: the work done, little inflated by other processes on a
#             shared machine), median of REPS; overhead against -r 0
#   expected  recomputed FLOPs over those of forward + backward (3 forwards): recomp (24 C^2 + 2 T C) per token over
#             3 (L (24 C^2 + 2 T C) + 2 C Vp) (block matmuls and causal attention; the LM head is never recomputed)
#   wall s    wall time of the same, median (noisy on a shared machine)
#   grads     every k's gradients equal -r 0's bit for bit
# Usage: bash dev/bench/recompute.sh [B] [T] [REPS]     (defaults 1 256 5; a few minutes on 2 cores)
set -eu
cd "$(dirname "$0")/../.."
B=${1:-1}
T=${2:-256}
REPS=${3:-5}
make -s build/recompute_bench
OUT=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./build/recompute_bench d12 "$B" "$T" "$REPS" 1,2,3,4,6,12)
python3 - "$B" "$T" "$REPS" <<PY
import math, re, sys
B, T, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
L, C, Vp = 12, 768, 50304
rows = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in """$OUT""".strip().splitlines()]
for r in rows:
    r["k"] = int(r["run"][2:]) if r["run"].startswith("k=") else None
    for f in ("acts", "ledger"): r[f] = int(r[f])
    for f in ("cpu_s", "wall_s"): r[f] = float(r[f])
r0 = next(r for r in rows if r["k"] is None)
k1 = next(r for r in rows if r["k"] == 1)
c = B * T * C * 4
A = (r0["acts"] - k1["acts"]) / (L - 1) + c
F = r0["acts"] - L * A
MiB = 1024.0 * 1024.0
f_block, f_head = 24.0 * C * C + 2.0 * T * C, 2.0 * C * Vp
print("d12 (L=%d, C=%d), B=%d T=%d, one forward + backward, median of %d, 1 thread; A = %.2f MiB per block (c = %.2f "
      "MiB per residual row), F = %.2f MiB" % (L, C, B, T, reps, A / MiB, c / MiB, F / MiB))
print("| run | alloc MiB | ledger MiB | blocks MiB | textbook (L/k+k)A MiB | recomp | CPU s | overhead | expected | wall s | grads |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    k = r["k"]
    nseg = math.ceil(L / k) if k else None
    recomp = (nseg - 1) * k if k else 0
    print("| %s | %.1f | %.1f%s | %.1f | %s | %d | %.3f | %s | %s | %.3f | %s |" % (
        "-r 0" if not k else "-r 3 k=%d" % k, r["acts"] / MiB, r["ledger"] / MiB,
        "" if r["ledger"] == r["acts"] else " (DIFFERENT)", (r["acts"] - F) / MiB,
        "%.1f" % ((nseg + k) * A / MiB) if k else "-", recomp, r["cpu_s"],
        "%+.1f%%" % (100.0 * (r["cpu_s"] / r0["cpu_s"] - 1.0)) if k else "-",
        "%.1f%%" % (100.0 * recomp * f_block / (3.0 * (L * f_block + f_head))) if k else "-", r["wall_s"], r["grads"]))
PY
