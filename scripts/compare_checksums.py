#!/usr/bin/env python3
"""scripts/compare_checksums.py -- compares the --debug-checksums lines of two runs and names the first layer and
tensor where they differ (llmc/README.md, "Debugging a layout: --debug-checksums").

    ./train_gpt_cpu -e d2 -x 2 --debug-checksums 2 > one.log
    mpirun -np 4 ./train_gpt_cpu -e d2 -x 2 --tp 2 --pp 2 -d 256 --debug-checksums 2 > layout.log   # same batch
    python3 scripts/compare_checksums.py one.log layout.log --rtol 1e-5

Lines "checksum step S act|grad LAYER NAME sum=X abs=Y n=N" are read from both files (any order: every process of
a run prints its own stage's). For each step, the activations are compared in forward order (embedding, layer 0,
1, ..., head) and the gradients in backward order (head, last layer, ..., first, embeddings); the first entry whose
sum or abs differs by more than rtol relative to the tensor's sum of |x| (plus atol), or whose count differs, is reported with both values, as is an entry that only one run has (a tensor printed twice by one run
is an error). Exit status: 0 when everything agrees, 1 with the first difference, 2 for bad input. Step 1's
activations of layouts that compute them in the same order (a pipeline against one process) agree to fp64 rounding
of the sums (the default rtol 1e-9); gradients summed over ranks, tensor parallelism's matmuls and every later step
reorder fp32 sums, so compare those with --rtol around 1e-5 (a dot product of K terms moves by up to K 2^-24
relative) and look for the first entry far above it: a real bug moves a tensor by far more.
"""
import argparse
import re
import sys

LINE = re.compile(r"^checksum step (\d+) (act|grad) (-?\d+) (\S+) sum=(\S+) abs=(\S+) n=(\d+)$")
ACT_ORDER = ["encoded", "ln1", "qkv", "atty", "residual2", "ln2", "fch", "fch_gelu", "out", "lnf", "logits", "losses"]


def read(path):
    out = {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.match(line.strip())
                if m:
                    key = (int(m.group(1)), m.group(2), int(m.group(3)), m.group(4))
                    if key in out:  # two processes printed the same tensor: a layout counted it twice
                        sys.exit("error: '%s' has two lines for step %d %s layer %d %s" % ((path,) + key))
                    out[key] = (float(m.group(5)), float(m.group(6)), int(m.group(7)))
    except OSError as e:
        sys.exit("error: cannot read '%s': %s" % (path, e.strerror))
    if not out:
        sys.exit("error: '%s' holds no checksum lines; run the trainer with --debug-checksums N" % path)
    return out


def order(key):
    step, kind, layer, name = key
    if kind == "act":  # forward: embedding (-1, encoded), layers ascending, then the head tensors (-1)
        head = layer < 0 and name != "encoded"
        rank = ACT_ORDER.index(name) if name in ACT_ORDER else len(ACT_ORDER)
        return (step, 0, 2 if head else (0 if layer < 0 else 1), layer, rank, name)
    # backward: the non-layer tensors (head, embeddings) first, then layers descending
    return (step, 1, 0 if layer < 0 else 1, -layer, name)


def main():
    ap = argparse.ArgumentParser(description="first layer and tensor where two --debug-checksums runs differ")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-9, help="relative tolerance (default 1e-9: fp64 rounding)")
    ap.add_argument("--atol", type=float, default=1e-12, help="absolute tolerance for values near zero")
    args = ap.parse_args()
    a, b = read(args.a), read(args.b)
    for key in sorted(set(a) | set(b), key=order):
        step, kind, layer, name = key
        where = "step %d %s layer %d %s" % (step, "activation" if kind == "act" else "gradient", layer, name)
        if key not in a or key not in b:
            print("first difference: %s is only in %s" % (where, args.a if key in a else args.b))
            return 1
        (sa, aa, na), (sb, ab, nb) = a[key], b[key]
        # both the sum and the sum of |x| are compared on the scale of the sum of |x| (a sum near zero, e.g. of a
        # normalised activation, is not a scale)
        scale = max(abs(aa), abs(ab))
        bad = na != nb or abs(sa - sb) > args.atol + args.rtol * scale or abs(aa - ab) > args.atol + args.rtol * scale
        if bad:
            print("first difference: %s: sum %.9e vs %.9e, abs %.9e vs %.9e, n %d vs %d (rtol %g)" %
                  (where, sa, sb, aa, ab, na, nb, args.rtol))
            return 1
    print("%d checksums agree within rtol %g" % (len(a), args.rtol))
    return 0


if __name__ == "__main__":
    sys.exit(main())
