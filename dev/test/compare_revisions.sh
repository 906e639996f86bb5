#!/usr/bin/env bash
# dev/test/compare_revisions.sh -- shows that a change (typically a refactor) left the trainer's behaviour bit
# for bit as it was, by building two versions of the code and running the same commands with both.
#
#   dev/test/compare_revisions.sh [--keep] [--expect FILE] REV [NEW]
#
# REV is any git revision. NEW defaults to the working tree (HEAD plus uncommitted changes, tracked and
# untracked-but-not-ignored files); it may also be a revision. REV is checked out with `git worktree add
# --detach` and the working tree copied (git ls-files | tar) into one temporary directory (mktemp -d, removed
# at exit; --keep keeps it and prints its path), so the checkout and its build outputs are never touched.
# Both sides are built there by the same `make -j2 -k train_gpt_cpu test_gpt_cpu test_gpt_emu_bf16
# train_gpt_emu_mpi_bf16` in the same environment (same compiler, same flags unless NEW's Makefile changes
# them, in which case a note shows the first differing build command), then run with the same commands:
#   1. the default CPU run: ./train_gpt_cpu -o DIR --exit-after-steps 50 (d4, every default flag, so bf16 matmuls
#      on AVX512_BF16 CPUs and fp32 elsewhere, and the defaults of each side: a REV older than the B=16 / 1200-step
#      defaults differs here for that reason; stops after 50 steps with a checkpoint): the 50 step lines (loss,
#      norm, lr), the val lines, log.jsonl, the step-50 model file and state file;
#   then the parallel and memory-saving paths of the CPU build, each the smallest run the command-line tests use
#   for it, with --cpu-matmul fp32 (the fp32 reference path on any CPU; REVs from 78d3459 on know the flag),
#   --comm-stats 1 under mpirun (one OpenMP thread per process), and unless said 2 steps without validation or
#   sampling (-j '' -g 0 -u 2 -l 1e-3 -x 2), ending with a checkpoint:
#   2. mpirun -np 3, d2, B=4 T=32, -d 768 (2 micro-steps), 6 steps with the default validation, warm-up and
#      learning rate, for ZeRO-0, 1, 2 and 3;
#   3. tensor parallelism: mpirun -np 2 --tp 2, d2, B=4 T=32, -d 256 (2 micro-steps), with and without
#      --sequence-parallel 1 (dev/test/cli_tp.sh's model);
#   4. pipeline parallelism: mpirun -np 2 --pp 2 with each schedule (gpipe, 1f1b, interleaved with --pp-virtual 2),
#      d8 (8 layers, so 2 stages x 2 virtual stages divide it), B=2 T=16, -d 128 (4 micro-batches), validation on
#      2 windows at steps 0 and 2 (dev/test/cli_pp.sh's model);
#   5. tp 2 x pp 2 x dp 2 with ZeRO-1: mpirun -np 8 (oversubscribed), d8, B=2 T=16, -d 256 (dev/test/cli_pp.sh's
#      3D run);
#   6. a mixture of experts with expert parallelism: mpirun -np 2 --ep 2, d2 with 4 experts top-2, B=1 T=16
#      (dev/test/cli_moe_ep.sh's model);
#   7. optimizer offload: --offload-optimizer cpu on one process (OMP_NUM_THREADS as the default run, no
#      comm-stats) and nvme:DIR (DIR inside each side's tree) on mpirun -np 2 with ZeRO-2 and 2 micro-steps,
#      model L1:C32:NH2 (dev/test/cli_offload.sh's);
#   8. the GPU build's data-parallel path on the CUDA emulator with NCCL emulated over MPI, BF16
#      (train_gpt_emu_mpi_bf16, mpirun -np 2, d2, 2 steps, ZeRO-1, --comm-stats 1, as dev/test/cli_dp_nccl_emu.sh
#      runs it);
#   9. the output of ./test_gpt_cpu and ./test_gpt_emu_bf16 (every check, its numbers and the error counts).
# Rows of runs 2-8: the step lines and exit status, the comm-stats lines (bytes sent/received and calls per rank
# per step, with the tp, pp-boundary, all-to-all and offload bytes where the run has them), log.jsonl's config
# record, its other records, the model file of the final checkpoint and every rank's state file.
# Each comparison prints one row, `identical` or `DIFFERENT` with the first differing line (text) or the first
# differing byte offset and both bytes (binary files; for model files, version 3 = fp32 / 5 = bf16 from the
# 256-int32 header, and state files, fp32 bodies, also the tensor and value there, how many values differ and
# the largest absolute difference). Step lines and exit statuses are compared as text; log.jsonl records as
# JSON with their keys in order; the config record (the run's flags) key by key, so that its row names the keys
# removed, added and changed (`config: keys removed: a, b; keys added: c; values changed: d (REV 1, NEW 2)`), or
# says that only their order changed.
# --expect FILE names the differences a change makes on purpose: one a line, `ROW-REGEX<TAB>reason` (blank lines
# and lines starting with # are skipped), ROW-REGEX an extended regular expression (bash =~) matched anywhere in a
# row's name, e.g. `log.jsonl config record<TAB>the flag table writes the config line`. A DIFFERENT row whose
# name matches a line (the first one that matches) is printed `different (expected: reason)` and counted apart;
# a line that names no DIFFERENT row gets a note at the end (it may be stale).
# Timing is excluded because it changes from run to run on the same binary: the ms, tok/s, MFU, elapsed, eta, mem
# and (pipeline) bubble fields of step lines, the offload's "update N ms," and NVMe GB/s inside theirs, the tp
# collectives' ms in comm-stats lines, "ms", "tokens_per_s", "mfu", "bubble", "offload_ms" and "nvme_gbs" in
# log.jsonl, the pipeline runs' trace.json; so is the rest of the trainer's output (the header and memory ledger,
# which show the free memory of the moment). Temporary paths in the tests' output are masked for the same reason.
# Everything else must match exactly: the CPU and emulator runs are deterministic for a fixed thread count
# (OMP_NUM_THREADS, default 2, 1 per process under mpirun).
# Ends with "N identical, M different[, E expected-different][, K skipped]" (E shown with --expect). Exit status:
# 0 everything compared and identical or an expected difference, 1 something DIFFERENT that --expect does not
# name, 2 bad input, 3 no unexpected difference but some rows skipped (mpirun missing, a target that builds on
# neither side). Rows that need mpirun are skipped, not failed, where it is missing.
# Takes 18-22 minutes of CPU time (user + sys, measured; so about 10 minutes on 2 idle cores, not measured), 30-43
# minutes measured on 2 cores shared with other jobs at load 8-12. Of it the two builds take about a quarter, the default run's 50
# steps a quarter (B=16 T=64 d4), test_gpt_emu_bf16 a sixth, runs 2-7 a quarter (each 5-30 s per side); counting
# the differing floats of runs that differ everywhere, in plain Python, adds a minute or more. An older measure,
# on an idle machine with the B=8 default and without runs 3-7 and ZeRO-3: 4m50s-7m00s. JOBS=N changes make's -j.
set -u

usage() {
    cat <<'EOF'
usage: dev/test/compare_revisions.sh [--keep] [--expect FILE] REV [NEW]
Builds the CPU and emulator trainers of git revision REV and of NEW (default: the working tree, i.e. HEAD
plus uncommitted changes; or another revision) in a temporary directory, runs the same trainings (the default
run; ZeRO-0/1/2/3 on 3 processes; tp 2 with and without sequence parallelism; pp 2 with each schedule;
tp 2 x pp 2 x dp 2; MoE with ep 2; optimizer offload to cpu and nvme; the emulated BF16 data-parallel run) and
tests with both and compares step lines (loss, norm, lr; not timing), logs (the config record key by key),
comm-stats byte counts, model and state files, and test output. One row per comparison, then
"N identical, M different[, E expected-different][, K skipped]".
  --expect FILE  differences made on purpose, one a line: ROW-REGEX<TAB>reason (an extended regular
                 expression matched anywhere in a row's name; blank and # lines skipped), e.g.
                 "log.jsonl config record<TAB>the new flag table". A DIFFERENT row it matches is printed
                 "different (expected: reason)" and counted as expected-different
  --keep         keep the temporary directory (builds, run outputs, logs) and print its path
  -h, --help     this text
Exit status: 0 all identical or expected, 1 an unexpected difference, 2 bad input, 3 no unexpected
difference but rows skipped (mpirun missing, a target that builds on neither side).
Environment: JOBS (make -j, default 2), OMP_NUM_THREADS (single-process runs, default 2).
EOF
}

SYNOPSIS="usage: dev/test/compare_revisions.sh [--keep] [--expect FILE] REV [NEW]"
KEEP=0
EXPECT=""
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --keep) KEEP=1 ;;
        --expect)
            if [ $# -lt 2 ]; then echo "error: --expect needs a FILE ($SYNOPSIS)" >&2; exit 2; fi
            EXPECT=$2; shift ;;
        -*) echo "error: unknown option '$1' ($SYNOPSIS)" >&2; exit 2 ;;
        *) ARGS+=("$1") ;;
    esac
    shift
done
if [ "${#ARGS[@]}" -lt 1 ] || [ "${#ARGS[@]}" -gt 2 ]; then
    echo "error: expected REV and optionally NEW, got ${#ARGS[@]} arguments ($SYNOPSIS)" >&2
    exit 2
fi
# --expect FILE: the differences a change makes on purpose, one a line: ROW-REGEX<TAB>reason
EXP_RE=() EXP_WHY=() EXP_LINE=() EXP_USED=()
if [ -n "$EXPECT" ]; then
    if [ ! -f "$EXPECT" ] || [ ! -r "$EXPECT" ]; then
        echo "error: --expect $EXPECT: no such readable file" >&2
        exit 2
    fi
    n=0
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        line=${line%$'\r'}
        [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
        re=${line%%$'\t'*}
        why=${line#*$'\t'}
        if [[ "$line" != *$'\t'* ]] || [ -z "$re" ] || [ -z "${why//[[:space:]]/}" ]; then
            echo "error: --expect $EXPECT line $n: expected 'ROW-REGEX<TAB>reason' (an extended regular expression" \
                "matched against the row's name, a tab, a non-empty reason), got '$line'" >&2
            exit 2
        fi
        [[ "" =~ $re ]]
        if [ $? = 2 ]; then
            echo "error: --expect $EXPECT line $n: '$re' is not a valid extended regular expression" >&2
            exit 2
        fi
        EXP_RE+=("$re") EXP_WHY+=("$why") EXP_LINE+=("$n") EXP_USED+=(0)
    done < "$EXPECT"
fi
for tool in git make python3 tar; do
    if ! command -v "$tool" > /dev/null 2>&1; then echo "error: '$tool' not found on PATH" >&2; exit 2; fi
done
if ! ROOT=$(git rev-parse --show-toplevel 2> /dev/null); then
    echo "error: $(pwd) is not inside a git checkout (run this from the repository)" >&2
    exit 2
fi
if [ ! -f "$ROOT/train_gpt.cu" ] || [ ! -f "$ROOT/Makefile" ]; then
    echo "error: $ROOT has no train_gpt.cu and Makefile: not a checkout of this project" >&2
    exit 2
fi
resolve() {  # prints the commit of revision $1, or an error line and exits
    local sha
    if ! sha=$(git -C "$ROOT" rev-parse --verify --quiet "$1^{commit}"); then
        echo "error: unknown revision '$1' (not a commit of $ROOT)" >&2
        exit 2
    fi
    echo "$sha"
}
REV=${ARGS[0]}
REV_SHA=$(resolve "$REV") || exit 2
NEW=${ARGS[1]:-}
NEW_SHA=""
if [ -n "$NEW" ]; then NEW_SHA=$(resolve "$NEW") || exit 2; fi
JOBS=${JOBS:-2}
THREADS=${OMP_NUM_THREADS:-2}

T0=$SECONDS
say() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*"; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/llmc_compare.XXXXXX")
WORKTREES=()
# shellcheck disable=SC2317  # (cleanup is run by the EXIT trap)
cleanup() {
    if [ "$KEEP" = 1 ]; then
        echo "kept: $TMP"
        for w in "${WORKTREES[@]}"; do echo "  (a git worktree of $ROOT; remove with: git worktree remove --force $w)"; done
        return
    fi
    for w in "${WORKTREES[@]}"; do git -C "$ROOT" worktree remove --force "$w" > /dev/null 2>&1; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

OLD="$TMP/rev"
NEWD="$TMP/new"
LOGS="$TMP/logs"
mkdir -p "$LOGS/rev" "$LOGS/new"

short() { git -C "$ROOT" log -1 --format='%h %s' "$1" | cut -c1-90; }
echo "REV = $REV = $(short "$REV_SHA")"
if [ -n "$NEW" ]; then
    echo "NEW = $NEW = $(short "$NEW_SHA")"
else
    changed=$(git -C "$ROOT" status --porcelain | grep -c '')
    echo "NEW = working tree of $ROOT (HEAD $(git -C "$ROOT" rev-parse --short HEAD) + $changed changed/untracked paths)"
fi

# ---------------------------------------------------------------- the two trees
side_dir() { if [ "$1" = rev ]; then echo "$OLD"; else echo "$NEWD"; fi; }
checkout() {  # checkout SIDE SHA: a detached worktree of SHA in SIDE's directory
    local dir
    dir=$(side_dir "$1")
    say "checking out ${1^^} into $dir"
    if ! git -C "$ROOT" worktree add --detach --quiet "$dir" "$2" > "$LOGS/worktree.log" 2>&1; then
        echo "error: git worktree add failed: $(head -n 1 "$LOGS/worktree.log")" >&2
        exit 2
    fi
    WORKTREES+=("$dir")
}
checkout rev "$REV_SHA"
if [ -n "$NEW" ]; then
    checkout new "$NEW_SHA"
else
    say "copying the working tree (tracked and untracked, not ignored files) into $NEWD"
    mkdir -p "$NEWD"
    (cd "$ROOT" && git ls-files -z -co --exclude-standard |
        while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done |
        tar --null -T - -cf - | tar -xf - -C "$NEWD") || { echo "error: copying the working tree failed" >&2; exit 2; }
fi

# ---------------------------------------------------------------- comparison helpers
N_SAME=0 N_DIFF=0 N_EXP=0 N_SKIP=0
# row LABEL STATUS [DETAIL [CONTINUATION LINES]]: prints and counts one row; a DIFFERENT row whose LABEL matches
# the first possible --expect line's regex is printed "different (expected: reason)" and counted apart
row() {
    local status="$2" i
    if [ "$status" = DIFFERENT ]; then
        for i in "${!EXP_RE[@]}"; do
            if [[ "$1" =~ ${EXP_RE[$i]} ]]; then
                status="different (expected: ${EXP_WHY[$i]})"
                EXP_USED[i]=1
                break
            fi
        done
    fi
    case "$status" in
        identical) N_SAME=$((N_SAME + 1)) ;;
        DIFFERENT) N_DIFF=$((N_DIFF + 1)) ;;
        different*) N_EXP=$((N_EXP + 1)) ;;
        *) N_SKIP=$((N_SKIP + 1)) ;;
    esac
    if [ "$status" = identical ]; then
        printf '  %-60s %s\n' "$1" "$status${3:+ ($3)}"
    else
        printf '  %-60s %s\n' "$1" "$status${3:+: $3}"
    fi
    if [ -n "${4:-}" ]; then printf '%s\n' "$4"; fi
}

PY="$TMP/compare.py"
cat > "$PY" <<'PY'
# normalizes run output, or compares two text or binary files: prints "STATUS<TAB>DETAIL", then lines to show
# under the row (the two differing lines of a text file)
import array, json, math, os, re, struct, sys

TIMING_KEYS = ("ms", "tokens_per_s", "mfu", "bubble", "offload_ms", "nvme_gbs")
# step-line fields that are timings (dropped), and timings inside a field (cut out of it)
TIMING_FIELD = re.compile(r"(^[\d.]+ ms$)|(tok/s$)|(^MFU)|(^mfu)|( elapsed$)|(^eta )|(^mem )|(^bubble [\d.]+%$)")
TIMING_PART = [(re.compile(r" update [\d.]+ ms,"), ""),             # the CPU AdamW's time under optimizer offload
               (re.compile(r"(nvme [\d.]+ MB) [\d.]+ GB/s"), r"\1"),  # the NVMe throughput
               (re.compile(r" calls, [\d.]+ ms \("), " calls (")]     # comm-stats: the time in tp collectives

def untime(text):
    for pat, rep in TIMING_PART:
        text = pat.sub(rep, text)
    return text

def lines(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()

def norm(kind, src, dst, extra):
    out = []
    text = lines(src) if os.path.exists(src) else []
    if kind == "steps":  # step lines without the timing fields
        for l in text:
            if re.match(r"step\s+\d+", l):
                keep = [untime(f) for f in l.split(" | ") if not TIMING_FIELD.search(f.strip())]
                out.append(" | ".join(keep))
        if extra:
            out = out[: int(extra)]
    elif kind == "val":
        out = [l for l in text if l.startswith("val loss")]
    elif kind == "comm":  # every rank's lines; ranks print concurrently, so ordered by rank, step and text (the
        # rank is the data-parallel one: the tp/pp/ep ranks of one dp rank print lines that differ further on)
        rows = [untime(l) for l in text if re.match(r"comm: rank \d+ step \d+ ", l)]
        out = sorted(rows, key=lambda l: tuple(int(x) for x in re.match(r"comm: rank (\d+) step (\d+)", l).groups()) + (l,))
    elif kind in ("jsonl", "config"):  # the config records (compared key by key), or every other record
        for l in text:
            try:
                o = json.loads(l)
            except ValueError:
                o = None
            is_config = isinstance(o, dict) and o.get("kind") == "config"
            if is_config != (kind == "config"):
                continue
            if o is None:
                out.append(l)
                continue
            if isinstance(o, dict) and not is_config:
                for k in TIMING_KEYS:
                    o.pop(k, None)
            out.append(json.dumps(o, separators=(",", ":")))
    elif kind == "test":  # mkdtemp paths change every run
        tmps = [re.escape(d.rstrip("/")) for d in {"/tmp", os.environ.get("TMPDIR", "/tmp")} if d]
        pat = re.compile(r"(%s)/[^\s'\"]+" % "|".join(tmps))
        out = [pat.sub("<tmpdir>", l) for l in text]
    if kind in ("steps", "test") and os.path.exists(src + ".rc"):
        out.append("exit status: " + open(src + ".rc").read().strip())
    if kind not in ("jsonl", "config") or os.path.exists(src):
        with open(dst, "w") as f:
            f.write("".join(l + "\n" for l in out))

def window(x, y, n=130):
    """both lines, or for long ones the part around their first differing character"""
    c = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))
    if max(len(x), len(y)) <= n:
        return repr(x), repr(y), c
    start = max(0, c - n // 3)
    cut = lambda l: ("..." if start > 0 else "") + repr(l[start:start + n])[1:-1] + ("..." if start + n < len(l) else "")
    return cut(x), cut(y), c

def cmp_text(a, b):
    ea, eb = os.path.exists(a), os.path.exists(b)
    if not ea or not eb:
        return missing(ea, eb)
    la, lb = lines(a), lines(b)
    if la == lb:
        if not la:
            return "skipped", "no such lines on either side"
        return "identical", "%d line%s" % (len(la), "" if len(la) == 1 else "s")
    i = next((k for k in range(min(len(la), len(lb))) if la[k] != lb[k]), min(len(la), len(lb)))
    where = "line %d of %d/%d" % (i + 1, len(la), len(lb))
    if i < len(la) and i < len(lb):
        ra, rb, c = window(la[i], lb[i])
        where += ", column %d" % (c + 1)
    else:
        ra = repr(la[i][:130]) if i < len(la) else "(none: REV has %d lines)" % len(la)
        rb = repr(lb[i][:130]) if i < len(lb) else "(none: NEW has %d lines)" % len(lb)
    return "DIFFERENT", where, "      REV: %s\n      NEW: %s" % (ra, rb)

def short(v, n=40):
    t = json.dumps(v)
    return t if len(t) <= n else t[:n - 3] + "..."

def cmp_config(a, b):
    """the config records (one JSON object a line) key by key: which keys were removed, added, changed"""
    r = cmp_text(a, b)
    if r[0] != "DIFFERENT" or not os.path.exists(a) or not os.path.exists(b):
        if r[0] == "identical":
            ca = [json.loads(l) for l in lines(a)]
            return "identical", "%d record%s, %d keys" % (len(ca), "" if len(ca) == 1 else "s", len(ca[0]))
        return r
    ca, cb = [json.loads(l) for l in lines(a)], [json.loads(l) for l in lines(b)]
    parts = []
    if len(ca) != len(cb):
        parts.append("%d config records in REV, %d in NEW" % (len(ca), len(cb)))
    for i, (x, y) in enumerate(zip(ca, cb)):
        removed = [k for k in x if k not in y]
        added = [k for k in y if k not in x]
        changed = ["%s (REV %s, NEW %s)" % (k, short(x[k]), short(y[k])) for k in x if k in y and x[k] != y[k]]
        what = []
        if removed:
            what.append("keys removed: " + ", ".join(removed))
        if added:
            what.append("keys added: " + ", ".join(added))
        if changed:
            what.append("values changed: " + ", ".join(changed))
        if not what and list(x) != list(y):
            k = next(j for j in range(len(x)) if list(x)[j] != list(y)[j])
            what.append("same keys and values, another order (key %d: REV %s, NEW %s)" % (k + 1, list(x)[k], list(y)[k]))
        if what:
            parts.append(("record %d: " % (i + 1) if len(ca) > 1 or len(cb) > 1 else "") + "; ".join(what))
    return "DIFFERENT", "config: " + ("; ".join(parts) or "the same records, written differently")

def missing(ea, eb):
    if not ea and not eb:
        return "skipped", "missing on both sides (the runs failed; see the step-line rows)"
    return "DIFFERENT", "missing in " + ("REV" if not ea else "NEW")

MODEL_HDR = {0: "magic", 1: "version", 2: "maxT", 3: "V", 4: "L", 5: "NH", 6: "C", 7: "Vp"}
STATE_HDR = {0: "magic", 1: "version", 2: "step", 3: "rank", 4: "world", 5: "zero stage", 6: "B", 7: "T",
             8: "grad accum", 9: "L", 10: "C", 11: "NH", 12: "V", 13: "Vp", 14: "maxT", 15: "master weights",
             16: "num_parameters lo", 17: "num_parameters hi", 18: "shard start lo", 19: "shard start hi",
             20: "shard size lo", 21: "shard size hi", 22: "loader epoch lo", 23: "loader epoch hi",
             24: "loader position lo", 25: "loader position hi", 26: "rng lo", 27: "rng hi", 28: "sizeof(floatX)",
             29: "seed", 30: "loss scale", 31: "loss scaler good steps", 32: "data fingerprint lo",
             33: "data fingerprint hi"}

def layout(kind, hdr):
    """[(name, count)] of the body's values, element size and element format"""
    if kind == "model":
        maxT, V, L, NH, C, Vp = hdr[2:8]
        sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
                 ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C),
                 ("ln2b", L * C), ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C),
                 ("fcprojb", L * C), ("lnfw", C), ("lnfb", C)]
        return sizes, (4 if hdr[1] == 3 else 2), ("fp32" if hdr[1] == 3 else "bf16")
    shard = (hdr[20] & 0xffffffff) | ((hdr[21] & 0xffffffff) << 32)
    sizes = [("m", shard), ("v", shard)] + ([("master", shard)] if hdr[15] == 1 else [])
    return sizes, 4, "fp32"

def where(sizes, idx):
    for name, n in sizes:
        if idx < n:
            return "%s[%d]" % (name, idx)
        idx -= n
    return "value %d past the tensors" % idx

def bf16(h):
    return struct.unpack("<f", struct.pack("<I", h << 16))[0]

def cmp_bin(a, b):
    ea, eb = os.path.exists(a), os.path.exists(b)
    if not ea or not eb:
        return missing(ea, eb)
    A, B = open(a, "rb").read(), open(b, "rb").read()
    if A == B:
        return "identical", "%d bytes" % len(A)
    n = min(len(A), len(B))
    off, step = n, 1 << 16
    for s in range(0, n, step):
        if A[s:s + step] != B[s:s + step]:
            off = next(i for i in range(s, min(s + step, n)) if A[i] != B[i])
            break
    parts = []
    if len(A) != len(B):
        parts.append("sizes %d/%d bytes" % (len(A), len(B)))
    if off < n:
        parts.append("first difference at byte %d (REV 0x%02x, NEW 0x%02x)" % (off, A[off], B[off]))
    else:
        parts.append("one is a prefix of the other")
    kind = None
    if len(A) >= 1024 and len(B) >= 1024:
        ha, hb = array.array("i", A[:1024]), array.array("i", B[:1024])
        if sys.byteorder != "little":
            ha.byteswap(); hb.byteswap()
        if ha[0] == hb[0] == 20240326 and ha[1] == hb[1] and ha[1] in (3, 5):
            kind = "model"
        elif ha[0] == hb[0] == 20241129:
            kind = "state"
        if kind and off < 1024:
            i = off // 4
            names = MODEL_HDR if kind == "model" else STATE_HDR
            parts.append("header int32 [%d]%s: REV %d, NEW %d" % (i, " (%s)" % names[i] if i in names else "", ha[i], hb[i]))
    detail = "; ".join(parts)
    if kind and len(A) == len(B) and list(ha[:2]) == list(hb[:2]):
        sizes, es, fmt = layout(kind, ha)
        code = "I" if es == 4 else "H"
        ndiff, worst, nnan, first = 0, 0.0, 0, None
        chunk = 1 << 20
        for s in range(1024, len(A), chunk):
            ca, cb = A[s:s + chunk], B[s:s + chunk]
            if ca == cb:
                continue
            ra, rb = array.array(code, ca), array.array(code, cb)
            if es == 4:
                fa, fb = array.array("f", ca), array.array("f", cb)
            base = (s - 1024) // es
            for k in (k for k in range(len(ra)) if ra[k] != rb[k]):
                x, y = (fa[k], fb[k]) if es == 4 else (bf16(ra[k]), bf16(rb[k]))
                if first is None:
                    first = (base + k, x, y)
                ndiff += 1
                if math.isnan(x) or math.isnan(y):
                    nnan += 1
                else:
                    worst = max(worst, abs(x - y))
        total = (len(A) - 1024) // es
        if first is not None:
            detail += "; %s %s: REV %.9g, NEW %.9g" % (fmt, where(sizes, first[0]), first[1], first[2])
        detail += "; %d of %d %s values differ, max |diff| %.3g%s" % (ndiff, total, fmt, worst,
                                                                      " (%d NaN)" % nnan if nnan else "")
    return "DIFFERENT", detail

if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "norm":
        norm(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else "")
    else:
        r = {"text": cmp_text, "config": cmp_config, "bin": cmp_bin}[mode](sys.argv[2], sys.argv[3])
        print(r[0] + "\t" + (r[1] if len(r) > 1 else ""))
        if len(r) > 2:
            print(r[2])
PY

# compare KIND LABEL A B: one row from compare.py's verdict
compare() {
    local kind="$1" label="$2" out status detail cont
    out=$(python3 "$PY" "$kind" "$3" "$4" 2>&1)
    IFS=$'\t' read -r status detail <<< "$(head -n 1 <<< "$out")"
    cont=$(tail -n +2 <<< "$out")
    case "$status" in
        identical|DIFFERENT|skipped) ;;
        *) status=DIFFERENT; detail="the comparison itself failed: $(tail -n 1 <<< "$out")"; cont="" ;;
    esac
    row "$label" "$status" "$detail" "$cont"
}
# keep_log NAME DIR: copies DIR/log.jsonl of both sides' runs to $LOGS/SIDE/NAME.jsonl
keep_log() { local s; for s in rev new; do cp "$(side_dir $s)/$2/log.jsonl" "$LOGS/$s/$1.jsonl" 2> /dev/null; done; }
# compare_out NAME LABEL KIND LOGNAME [EXTRA]: normalize $LOGS/{rev,new}/LOGNAME and compare (as text; the
# config records of log.jsonl key by key)
compare_out() {
    local name="$1" label="$2" kind="$3" log="$4" extra="${5:-}" s
    for s in rev new; do
        python3 "$PY" norm "$kind" "$LOGS/$s/$log" "$LOGS/$s/$name.txt" "$extra"
    done
    compare "$([ "$kind" = config ] && echo config || echo text)" "$label" "$LOGS/rev/$name.txt" "$LOGS/new/$name.txt"
}

# ---------------------------------------------------------------- build
TARGETS=(train_gpt_cpu test_gpt_cpu test_gpt_emu_bf16 train_gpt_emu_mpi_bf16)
say "compilers: $(${CC:-cc} --version 2> /dev/null | head -n 1); $(${CXX:-g++} --version 2> /dev/null | head -n 1)"
for s in rev new; do
    dir=$(side_dir $s)
    say "building ${s^^} (make -j$JOBS -k ${TARGETS[*]})"
    (cd "$dir" && make -j"$JOBS" -k "${TARGETS[@]}") > "$LOGS/build_$s.log" 2>&1
    built=""
    for t in "${TARGETS[@]}"; do [ -x "$dir/$t" ] && built="$built $t"; done
    say "built ${s^^}:${built:- nothing}"
done
# a target that builds on one side only is a difference; on neither, the rows that need it are skipped
first_error() { grep -m 1 -E ': (fatal )?error: |\*\*\* ' "$1" | cut -c1-200; }
BUILD_OK=()
for t in "${TARGETS[@]}"; do
    a=0; b=0
    [ -x "$OLD/$t" ] && a=1
    [ -x "$NEWD/$t" ] && b=1
    if [ $a = 1 ] && [ $b = 1 ]; then BUILD_OK+=("$t"); continue; fi
    if [ $a != $b ]; then
        side=$([ $a = 0 ] && echo rev || echo new)
        row "build $t" DIFFERENT "builds only in $([ $a = 1 ] && echo REV || echo NEW): $(first_error "$LOGS/build_$side.log")"
    else
        say "$t builds on neither side: $(first_error "$LOGS/build_rev.log")"
    fi
done
built_both() { local t; for t in "${BUILD_OK[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }
not_built() {  # why target $1 cannot be run on both sides
    if [ -x "$OLD/$1" ]; then echo "$1 does not build in NEW"
    elif [ -x "$NEWD/$1" ]; then echo "$1 does not build in REV"
    else echo "$1 builds on neither side"; fi
}
# the compile commands, for a note when they differ (NEW's Makefile may change flags on purpose)
for s in rev new; do
    dir=$(side_dir $s)
    sed -e :a -e '/\\$/N; s/\\\n//; ta' "$LOGS/build_$s.log" | grep -E '^(cc|gcc|g\+\+|c\+\+|clang|\S*nvcc|\S*mpicc) ' |
        sed "s#$dir#.#g" | sort > "$LOGS/build_cmds_$s.txt"
done
if ! cmp -s "$LOGS/build_cmds_rev.txt" "$LOGS/build_cmds_new.txt"; then
    say "note: the build commands differ (first: $(diff "$LOGS/build_cmds_rev.txt" "$LOGS/build_cmds_new.txt" | grep -m 1 '^[<>]' | cut -c1-160))"
fi

# run SIDE NAME TIMEOUT cmd...: runs cmd in SIDE's tree, output to $LOGS/SIDE/NAME.log, status to .rc
run() {
    local s="$1" name="$2" limit="$3" dir rc
    shift 3
    dir=$(side_dir "$s")
    mkdir -p "$dir/cmp_out"
    (cd "$dir" && timeout "$limit" "$@") > "$LOGS/$s/$name.log" 2>&1
    rc=$?
    echo "$rc" > "$LOGS/$s/$name.log.rc"
    return $rc
}
both() {  # both NAME TIMEOUT cmd...: runs on REV then NEW with progress lines
    local name="$1" s
    shift
    for s in rev new; do
        say "running ${s^^}: $name"
        run "$s" "$name" "$@" || say "  (${s^^} $name exited with status $(cat "$LOGS/$s/$name.log.rc"))"
    done
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers without CMA (ptrace) permissions
MPI_OK=1
MPI_WHY=""
if ! command -v mpirun > /dev/null 2>&1; then
    MPI_OK=0; MPI_WHY="mpirun not found (scripts/install_deps.sh installs OpenMPI)"
elif built_both train_gpt_cpu && ! { ldd "$OLD/train_gpt_cpu" | grep -q libmpi && ldd "$NEWD/train_gpt_cpu" | grep -q libmpi; }; then
    MPI_OK=0; MPI_WHY="train_gpt_cpu is not an MPI build on both sides (mpicc missing?)"
fi
# one OpenMP thread per process; a command array, not a function, so that timeout can run it
MPI=(env OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS)

# train_case NAME LABEL TARGET NP STEP ARGS...: runs ./TARGET ARGS -o cmp_out/NAME on both sides (NP processes under
# mpirun, one OpenMP thread each; NP = 0: one process with OMP_NUM_THREADS=$THREADS), then compares its step lines and
# exit status, its comm-stats lines (when ARGS has --comm-stats), log.jsonl, the model file of step STEP (the last: a
# run writes a checkpoint when it ends) and every rank's state file. Skipped when mpirun or TARGET is missing.
train_case() {
    local name="$1" label="$2" target="$3" np="$4" step="$5" D="cmp_out/$1" why=""
    shift 5
    if [ "$np" -gt 0 ] && [ $MPI_OK = 0 ]; then
        why=$MPI_WHY
    elif ! built_both "$target"; then
        why=$(not_built "$target")
    fi
    if [ -n "$why" ]; then row "$label" skipped "$why"; return; fi
    if [ "$np" -gt 0 ]; then
        both "$name" 900 "${MPI[@]}" -np "$np" "./$target" "$@" -o "$D"
    else
        both "$name" 900 env OMP_NUM_THREADS="$THREADS" "./$target" "$@" -o "$D"
    fi
    compare_out "${name}_steps" "$label: step lines (no timing), exit status" steps "$name.log"
    if [[ " $* " == *" --comm-stats "* ]]; then
        compare_out "${name}_comm" "$label: comm-stats bytes (every rank)" comm "$name.log"
    fi
    compare_run "$name" "$label" "$D" "$step" $((np > 0 ? np : 1))
}
# compare_run NAME LABEL DIR STEP NRANKS: DIR/log.jsonl's config records key by key and its other records without
# their timing fields; DIR's model file of step STEP and the state files of ranks 0..NRANKS-1
compare_run() {
    local name="$1" label="$2" D="$3" step r f
    step=$(printf '%08d' "$4")
    keep_log "$name" "$D"
    compare_out "${name}_config" "$label: log.jsonl config record" config "$name.jsonl"
    compare_out "${name}_jsonl" "$label: log.jsonl other records (no timing)" jsonl "$name.jsonl"
    for f in "model_$step.bin" $(for ((r = 0; r < $5; r++)); do printf 'state_%s_%05d.bin ' "$step" $r; done); do
        compare bin "$label: $f" "$OLD/$D/$f" "$NEWD/$D/$f"
    done
}
CPU=train_gpt_cpu
FP32=(--cpu-matmul fp32 --comm-stats 1)  # the fp32 reference path on any CPU (REVs from 78d3459 on know the flag)
FAST=(-j '' -g 0 -u 2 -l 1e-3 -x 2)      # no validation or sampling, 2 warm-up steps, 2 steps (dev/test/lib_cli.sh)

# ---------------------------------------------------------------- 1. default CPU run
echo "== 1. default CPU run: ./train_gpt_cpu -o DIR --exit-after-steps 50 (d4, OMP_NUM_THREADS=$THREADS)"
if built_both train_gpt_cpu; then
    both default 1200 env OMP_NUM_THREADS="$THREADS" ./train_gpt_cpu -o cmp_out/default --exit-after-steps 50
    compare_out default_steps "default: step lines 1-50 (loss, norm, lr), exit status" steps default.log 50
    compare_out default_val "default: val lines" val default.log
    compare_run default default cmp_out/default 50 1
else
    row "default CPU run" skipped "$(not_built train_gpt_cpu)"
fi

# ---------------------------------------------------------------- 2. three processes, ZeRO-0/1/2/3
echo "== 2. mpirun -np 3 ./train_gpt_cpu -e d2 -b 4 -t 32 -d 768 -x 6 -z 0/1/2/3 (2 micro-steps)"
for z in 0 1 2 3; do
    train_case "np3_z$z" "np3 ZeRO-$z" $CPU 3 6 -e d2 -b 4 -t 32 -d 768 -x 6 -z $z "${FP32[@]}"
done

# ---------------------------------------------------------------- 3. tensor parallelism
echo "== 3. mpirun -np 2 ./train_gpt_cpu --tp 2 [--sequence-parallel 1] -e d2 -b 4 -t 32 -d 256 -x 2 (2 micro-steps)"
train_case tp2 "tp2" $CPU 2 2 -e d2 -b 4 -t 32 -d 256 "${FAST[@]}" --tp 2 "${FP32[@]}"
train_case tp2_sp "tp2 SP" $CPU 2 2 -e d2 -b 4 -t 32 -d 256 "${FAST[@]}" --tp 2 --sequence-parallel 1 "${FP32[@]}"

# ---------------------------------------------------------------- 4. pipeline parallelism
echo "== 4. mpirun -np 2 ./train_gpt_cpu --pp 2 --pp-schedule gpipe/1f1b/interleaved (v 2) -e d8 -b 2 -t 16 -d 128 -x 2 (4 micro-batches, validation)"
PP=(-e d8 -b 2 -t 16 -d 128 -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -m 2 -v 2 -g 0 -u 2 -l 1e-3 -x 2)
for sched in gpipe 1f1b interleaved; do
    v=1; [ $sched = interleaved ] && v=2
    train_case "pp2_$sched" "pp2 $sched$([ $v = 2 ] && echo " v2")" $CPU 2 2 "${PP[@]}" --pp 2 --pp-schedule $sched \
        --pp-virtual $v "${FP32[@]}"
done

# ---------------------------------------------------------------- 5. tp x pp x dp
echo "== 5. mpirun -np 8 ./train_gpt_cpu --tp 2 --pp 2 -z 1 -e d8 -b 2 -t 16 -d 256 -x 2 (tp 2 x pp 2 x dp 2, ZeRO-1)"
train_case tp2pp2dp2 "tp2 x pp2 x dp2 ZeRO-1" $CPU 8 2 -e d8 -b 2 -t 16 -d 256 "${FAST[@]}" --tp 2 --pp 2 -z 1 "${FP32[@]}"

# ---------------------------------------------------------------- 6. mixture of experts, expert parallelism
echo "== 6. mpirun -np 2 ./train_gpt_cpu --ep 2 -e d2 --moe-experts 4 --moe-top-k 2 -b 1 -t 16 -x 2 (dev/test/cli_moe_ep.sh's model)"
train_case moe_ep2 "MoE ep2" $CPU 2 2 -e d2 -b 1 -t 16 "${FAST[@]}" -v 0 --moe-experts 4 --moe-top-k 2 \
    --moe-capacity-factor 1.0 --moe-z-coef 0.001 --ep 2 "${FP32[@]}"

# ---------------------------------------------------------------- 7. optimizer offload
echo "== 7. --offload-optimizer cpu (1 process) and nvme:DIR (mpirun -np 2, ZeRO-2, 2 micro-steps) -e L1:C32:NH2 -b 2 -t 16 -x 2"
mkdir -p "$OLD/cmp_out/nvme" "$NEWD/cmp_out/nvme"
OFF=(-e L1:C32:NH2 -b 2 -t 16 "${FAST[@]}")  # dev/test/cli_offload.sh's model: 1.66M parameters, 2 offload chunks
train_case offload_cpu "offload cpu" $CPU 0 2 "${OFF[@]}" --offload-optimizer cpu --cpu-matmul fp32
train_case offload_nvme "offload nvme np2 ZeRO-2" $CPU 2 2 "${OFF[@]}" -d 128 -z 2 --offload-optimizer nvme:cmp_out/nvme \
    "${FP32[@]}"

# ---------------------------------------------------------------- 8. emulated NCCL, BF16
echo "== 8. mpirun -np 2 ./train_gpt_emu_mpi_bf16 -e d2 -b 4 -t 32 -d 256 -x 2 -z 1 (CUDA emulator, NCCL over MPI)"
train_case emu_bf16 "emu BF16 np2 ZeRO-1" train_gpt_emu_mpi_bf16 2 2 -e d2 -b 4 -t 32 -d 256 "${FAST[@]}" -z 1 --comm-stats 1

# ---------------------------------------------------------------- 9. model tests
echo "== 9. ./test_gpt_cpu and ./test_gpt_emu_bf16 (output with temporary paths masked, exit status)"
for t in test_gpt_cpu test_gpt_emu_bf16; do
    if built_both $t; then
        both $t 900 env OMP_NUM_THREADS="$THREADS" ./$t
        compare_out "${t}_out" "$t output and exit status" test "$t.log"
    else
        row "$t output and exit status" skipped "$(not_built $t)"
    fi
done

say "done"
for i in "${!EXP_RE[@]}"; do
    [ "${EXP_USED[$i]}" = 1 ] || say "note: $EXPECT line ${EXP_LINE[$i]} ('${EXP_RE[$i]}') named no DIFFERENT row"
done
echo "$N_SAME identical, $N_DIFF different$([ -n "$EXPECT" ] || [ $N_EXP -gt 0 ] && echo ", $N_EXP expected-different")$([ $N_SKIP -gt 0 ] && echo ", $N_SKIP skipped")"
if [ $N_DIFF -gt 0 ]; then exit 1; fi
if [ $N_SKIP -gt 0 ]; then exit 3; fi
exit 0
