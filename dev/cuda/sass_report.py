#!/usr/bin/env python3
"""dev/cuda/sass_report.py -- what the compiler made of every kernel, read without a GPU.

Usage: sass_report.py PTXAS_LOG SASS_DUMP [--check]
  PTXAS_LOG  the output of `nvcc -Xptxas -v` for one architecture (registers, stack frame, spills per kernel)
  SASS_DUMP  `cuobjdump -sass` of the same build (one architecture)

Prints one row per kernel: registers, stack frame, spill bytes, tensor-core MMAs (HMMA), asynchronous copies
(LDGSTS, cp.async), 128-bit and narrower (16/32-bit) global loads and stores, 16-bit shared loads, and
local-memory instructions (LDL/STL). With --check it also prints TAP-style "ok - / not ok -" lines for the
properties the CUDA backend promises (llmc/README.md, "Tests"):
  - no kernel spills or uses local memory (no stack frame, no LDL/STL);
  - every kernel in the machine code has its ptxas resource line (so none escapes the spill check);
  - the flash-attention kernels run on the tensor cores (HMMA.16816.F32 with bf16 or f16 inputs), load their
    tiles with cp.async (LDGSTS, 16 bytes) and their MMA fragments with ldmatrix (LDSM, no 16-bit shared loads);
  - the one-kernel FlashAttention-2 backward (attention_backward_fa2_mma_kernel) has, per tile pair and warp,
    exactly 5/7 of the HMMAs of the three-pass backward (dK/dV kernel + dQ kernel scaled to the same pair);
  - every packed instantiation (template argument 8 = 16 bytes of bf16; the X128_SIZE variants) moves global
    memory in 128-bit accesses (at least one LDG/STG .128, and no more 16-bit global accesses than it has
    128-bit ones);
  - the attention backward's row-dot pass, D = rowsum(dO * O) (attention_backward_rowdot_kernel<8>), has 128-bit
    global loads and no 16-bit ones (issue 15, item 9);
and exits 1 if any fails. The instruction names are those of NVIDIA's "CUDA Binary Utilities" documentation
(Hopper instruction set table).
"""
import collections
import re
import subprocess
import sys


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def parse_ptxas(path):
    res, cur = {}, None
    for line in open(path, errors="replace"):
        m = re.search(r"Compiling entry function '(\S+)'", line) or re.search(r"Function properties for (\S+)", line)
        if m:
            cur = m.group(1)
            res.setdefault(cur, {"regs": 0, "stack": 0, "spill": 0})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            res[cur]["stack"] = int(m.group(1))
            res[cur]["spill"] = int(m.group(2)) + int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            res[cur]["regs"] = int(m.group(1))
    return res


def parse_sass(path):
    ops, cur = collections.OrderedDict(), None
    for line in open(path, errors="replace"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            ops[cur] = collections.Counter()
            continue
        if cur is None:
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[cur][m.group(1)] += 1
    return ops


def count(c, pred):
    return sum(n for op, n in c.items() if pred(op))


def summarize(c):
    parts = lambda op: op.split(".")
    return {
        "hmma": count(c, lambda op: op.startswith("HMMA.16816.F32")),
        "ldgsts": count(c, lambda op: op.startswith("LDGSTS") and "128" in parts(op)),
        "g128": count(c, lambda op: (op.startswith("LDG") or op.startswith("STG")) and not op.startswith("LDGSTS")
                      and "128" in parts(op)),
        "g16": count(c, lambda op: (op.startswith("LDG") or op.startswith("STG")) and not op.startswith("LDGSTS")
                     and ("U16" in parts(op) or "S16" in parts(op))),
        "lds16": count(c, lambda op: op.startswith("LDS") and "U16" in parts(op)),
        "ldsm": count(c, lambda op: op.startswith("LDSM")),
        "local": count(c, lambda op: op.split(".")[0] in ("LDL", "STL")),
    }


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    check = "--check" in sys.argv
    if len(args) != 2:
        sys.exit(__doc__)
    res = parse_ptxas(args[0])
    ops = parse_sass(args[1])
    if not ops:
        print("not ok - no kernels found in %s (cuobjdump -sass output expected)" % args[1])
        sys.exit(1)
    names = demangle(list(ops))
    rows = []
    for f, c in ops.items():
        s = summarize(c)
        r = res.get(f, {"regs": -1, "stack": -1, "spill": -1})
        rows.append((f, re.sub(r"\(.*", "", names.get(f, f)), r, s))
    print("%-58s %5s %5s %5s %5s %6s %6s %5s %6s %5s %5s" % ("kernel", "regs", "stack", "spill", "HMMA", "LDGSTS",
                                                             "G.128", "G.16", "LDS.16", "LDSM", "LDL/STL"))
    for _, name, r, s in rows:
        print("%-58s %5d %5d %5d %5d %6d %6d %5d %6d %5d %5d" % (name[:58], r["regs"], r["stack"], r["spill"], s["hmma"],
                                                                s["ldgsts"], s["g128"], s["g16"], s["lds16"], s["ldsm"],
                                                                s["local"]))
    if not check:
        return
    failed = 0

    def tap(ok, msg):
        nonlocal failed
        failed += 0 if ok else 1
        print("%s - %s" % ("ok" if ok else "not ok", msg))

    unmatched = [name for f, name, r, s in rows if f not in res]
    tap(not unmatched, "every one of the %d kernels in the machine code has its ptxas resource line%s"
        % (len(rows), "; missing: " + ", ".join(unmatched[:5]) if unmatched else ""))
    bad = [name for f, name, r, s in rows if f in res and (r["stack"] > 0 or r["spill"] > 0 or s["local"] > 0)]
    tap(not bad and not unmatched, "%d kernels: no stack frame, spills or local memory (LDL/STL)%s"
        % (len(rows), "; offenders: " + ", ".join(bad) if bad else ""))
    attn = [(name, s) for _, name, r, s in rows if re.search(r"attention_(forward|backward_q|backward_kv|backward_fa2)_mma_kernel", name)]
    tap(len(attn) >= 3 and all(s["hmma"] > 0 and s["ldgsts"] > 0 for _, s in attn),
        "%d flash-attention kernels run on the tensor cores (HMMA.16816.F32: %s) and load tiles with cp.async "
        "(LDGSTS.128: %s)" % (len(attn), ", ".join(str(s["hmma"]) for _, s in attn),
                               ", ".join(str(s["ldgsts"]) for _, s in attn)))
    tap(len(attn) >= 3 and all(s["ldsm"] > 0 and s["lds16"] == 0 for _, s in attn),
        "the flash-attention kernels load their MMA fragments with ldmatrix (LDSM: %s) and no 16-bit shared loads"
        % ", ".join("%d/%d" % (s["ldsm"], s["lds16"]) for _, s in attn))
    # the one-kernel FA2 backward against the three-pass one, per (64 keys x BQ queries) tile pair and warp: the
    # dK/dV kernel's MMAs + the dQ kernel's scaled to BQ query rows (it runs 64 x 64 pairs) = 7 matmuls; FA2 = 5
    by = {}
    for _, name, r, s in rows:
        m = re.search(r"attention_backward_(kv|q|fa2)_mma_kernel<(\d+)(?:, (\d+))?>", name)
        if m:
            by[(m.group(1), int(m.group(2)))] = (s, int(m.group(3) or 64))
    fa2 = sorted(hs for kind, hs in by if kind == "fa2")
    parts = []
    for hs in fa2:
        (f, bq), (kv, _), (q, _) = by[("fa2", hs)], by.get(("kv", hs), ({"hmma": 0, "ldsm": 0}, 0)), \
            by.get(("q", hs), ({"hmma": 0, "ldsm": 0}, 0))
        old = kv["hmma"] + q["hmma"] * bq // 64
        parts.append((hs, f["hmma"], old, f["ldsm"], kv["ldsm"] + q["ldsm"] * bq // 64))
    tap(len(parts) == 4 and all(7 * new == 5 * old for _, new, old, _, _ in parts),
        "the FA2 backward issues 5/7 of the three-pass backward's MMAs per tile pair (hs: HMMA fa2/three-pass, "
        "LDSM fa2/three-pass: %s)" % ", ".join("%d: %d/%d, %d/%d" % p for p in parts))
    packed = [(name, s) for f, name, r, s in rows if re.search(r"<8[,>]", name) and "mma" not in name]
    weak = [name for name, s in packed if s["g128"] == 0 or s["g16"] > s["g128"]]
    tap(len(packed) >= 10 and not weak, "%d packed (X128_SIZE = 8 bf16) kernels move global memory in 128-bit "
        "accesses%s" % (len(packed), "; not: " + ", ".join(weak) if weak else ""))
    rowdot = [(name, s) for _, name, r, s in rows if re.search(r"attention_backward_rowdot_kernel<8>", name)]
    tap(len(rowdot) == 1 and all(s["g128"] > 0 and s["g16"] == 0 for _, s in rowdot),
        "the attention backward's row-dot pass (attention_backward_rowdot_kernel<8>) loads dO and O in 128-bit "
        "accesses only (G.128 / G.16: %s)" % ", ".join("%d/%d" % (s["g128"], s["g16"]) for _, s in rowdot))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
