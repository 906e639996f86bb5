#!/usr/bin/env bash
# dev/test/compare_revisions.sh -- shows that a change (typically a refactor) left the trainer's behaviour bit
# for bit as it was, by building two versions of the code and running the same commands with both.
#
#   dev/test/compare_revisions.sh [--keep] REV [NEW]
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
#   2. mpirun -np 3 ./train_gpt_cpu -e d2 -b 4 -t 32 -d 768 -x 6 --cpu-matmul fp32 (2 micro-steps; the fp32
#      reference path on any CPU; REVs from 78d3459 on know the flag) --comm-stats 1 for ZeRO-0, 1
#      and 2: step lines, the comm-stats lines (bytes sent/received and calls per rank per step), log.jsonl,
#      the model file and every rank's state file;
#   3. the GPU build's data-parallel path on the CUDA emulator with NCCL emulated over MPI, BF16
#      (train_gpt_emu_mpi_bf16, mpirun -np 2, d2, 2 steps, ZeRO-1, as dev/test/cli_dp_nccl_emu.sh runs it):
#      step lines, comm-stats lines, log.jsonl, the model file and both state files;
#   4. the output of ./test_gpt_cpu and ./test_gpt_emu_bf16 (every check, its numbers and the error counts).
# Each comparison prints one row, `identical` or `DIFFERENT` with the first differing line (text) or the first
# differing byte offset and both bytes (binary files; for model files, version 3 = fp32 / 5 = bf16 from the
# 256-int32 header, and state files, fp32 bodies, also the tensor and value there, how many values differ and
# the largest absolute difference). Step lines and exit statuses are compared as text; log.jsonl records as
# JSON with their keys in order.
# Timing is excluded -- the ms, tok/s, MFU, elapsed, eta and mem fields of step lines, "ms", "tokens_per_s" and "mfu" in
# log.jsonl -- because it changes from run to run on the same binary; so is the rest of the trainer's output
# (the header and memory ledger, which show the free memory of the moment). Temporary paths in the tests'
# output are masked for the same reason. Everything else must match exactly: the CPU and emulator runs are
# deterministic for a fixed thread count (OMP_NUM_THREADS, default 2, 1 per process under mpirun).
# Ends with "N identical, M different[, K skipped]". Exit status: 0 everything compared and identical,
# 1 something DIFFERENT, 2 bad input, 3 nothing different but some rows skipped (mpirun missing, a target
# that builds on neither side). Rows that need mpirun are skipped, not failed, where it is missing.
# Takes 5-7 minutes on 2 cores (measured 4m50s-7m00s: builds 25-50 s per side, the default run 35-115 s per
# side depending on the load, measured with the old B=8 fp32 default (B=16 now: not re-measured), test_gpt_emu_bf16
# 35 s per side; counting the differing floats of a run that differs everywhere, in plain Python, adds about a minute); JOBS=N changes make's -j.
set -u

usage() {
    cat <<'EOF'
usage: dev/test/compare_revisions.sh [--keep] REV [NEW]
Builds the CPU and emulator trainers of git revision REV and of NEW (default: the working tree, i.e. HEAD
plus uncommitted changes; or another revision) in a temporary directory, runs the same trainings and tests
with both and compares step lines (loss, norm, lr; not timing), logs, comm-stats byte counts, model and
state files, and test output. One row per comparison, then "N identical, M different".
  --keep     keep the temporary directory (builds, run outputs, logs) and print its path
  -h, --help this text
Exit status: 0 all identical, 1 something different, 2 bad input, 3 no difference but rows skipped.
Environment: JOBS (make -j, default 2), OMP_NUM_THREADS (single-process runs, default 2).
EOF
}

KEEP=0
ARGS=()
for a in "$@"; do
    case "$a" in
        -h|--help) usage; exit 0 ;;
        --keep) KEEP=1 ;;
        -*) echo "error: unknown option '$a' (usage: dev/test/compare_revisions.sh [--keep] REV [NEW])" >&2; exit 2 ;;
        *) ARGS+=("$a") ;;
    esac
done
if [ "${#ARGS[@]}" -lt 1 ] || [ "${#ARGS[@]}" -gt 2 ]; then
    echo "error: expected REV and optionally NEW, got ${#ARGS[@]} arguments (usage: dev/test/compare_revisions.sh [--keep] REV [NEW])" >&2
    exit 2
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
N_SAME=0 N_DIFF=0 N_SKIP=0
row() {  # row LABEL STATUS [DETAIL [CONTINUATION LINES]]
    case "$2" in
        identical) N_SAME=$((N_SAME + 1)) ;;
        DIFFERENT) N_DIFF=$((N_DIFF + 1)) ;;
        *) N_SKIP=$((N_SKIP + 1)) ;;
    esac
    if [ "$2" = identical ]; then
        printf '  %-54s %s\n' "$1" "$2${3:+ ($3)}"
    else
        printf '  %-54s %s\n' "$1" "$2${3:+: $3}"
    fi
    if [ -n "${4:-}" ]; then printf '%s\n' "$4"; fi
}

PY="$TMP/compare.py"
cat > "$PY" <<'PY'
# normalizes run output, or compares two text or binary files: prints "STATUS<TAB>DETAIL", then lines to show
# under the row (the two differing lines of a text file)
import array, json, math, os, re, struct, sys

TIMING_KEYS = ("ms", "tokens_per_s", "mfu")

def lines(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()

def norm(kind, src, dst, extra):
    out = []
    text = lines(src) if os.path.exists(src) else []
    if kind == "steps":  # step lines without the timing fields
        for l in text:
            if re.match(r"step\s+\d+", l):
                keep = [f for f in l.split(" | ") if not re.search(r"(^[\d.]+ ms$)|(tok/s$)|(^MFU)|(^mfu)|( elapsed$)|(^eta )|(^mem )", f.strip())]
                out.append(" | ".join(keep))
        if extra:
            out = out[: int(extra)]
    elif kind == "val":
        out = [l for l in text if l.startswith("val loss")]
    elif kind == "comm":  # every rank's lines; ranks print concurrently, so ordered by rank and step
        rows = [l for l in text if re.match(r"comm: rank \d+ step \d+ ", l)]
        out = sorted(rows, key=lambda l: tuple(int(x) for x in re.match(r"comm: rank (\d+) step (\d+)", l).groups()))
    elif kind == "jsonl":
        for l in text:
            try:
                o = json.loads(l)
            except ValueError:
                out.append(l)
                continue
            if isinstance(o, dict):
                for k in TIMING_KEYS:
                    o.pop(k, None)
            out.append(json.dumps(o, separators=(",", ":")))
    elif kind == "test":  # mkdtemp paths change every run
        tmps = [re.escape(d.rstrip("/")) for d in {"/tmp", os.environ.get("TMPDIR", "/tmp")} if d]
        pat = re.compile(r"(%s)/[^\s'\"]+" % "|".join(tmps))
        out = [pat.sub("<tmpdir>", l) for l in text]
    if kind in ("steps", "test") and os.path.exists(src + ".rc"):
        out.append("exit status: " + open(src + ".rc").read().strip())
    if kind != "jsonl" or os.path.exists(src):
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
        r = (cmp_text if mode == "text" else cmp_bin)(sys.argv[2], sys.argv[3])
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
# compare_out NAME LABEL KIND LOGNAME [EXTRA]: normalize $LOGS/{rev,new}/LOGNAME and compare
compare_out() {
    local name="$1" label="$2" kind="$3" log="$4" extra="${5:-}" s
    for s in rev new; do
        python3 "$PY" norm "$kind" "$LOGS/$s/$log" "$LOGS/$s/$name.txt" "$extra"
    done
    compare text "$label" "$LOGS/rev/$name.txt" "$LOGS/new/$name.txt"
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

# ---------------------------------------------------------------- 1. default CPU run
echo "== 1. default CPU run: ./train_gpt_cpu -o DIR --exit-after-steps 50 (d4, OMP_NUM_THREADS=$THREADS)"
if built_both train_gpt_cpu; then
    both default 1200 env OMP_NUM_THREADS="$THREADS" ./train_gpt_cpu -o cmp_out/default --exit-after-steps 50
    compare_out default_steps "default: step lines 1-50 (loss, norm, lr), exit status" steps default.log 50
    compare_out default_val "default: val lines" val default.log
    keep_log default cmp_out/default
    compare_out default_jsonl "default: log.jsonl without timing fields" jsonl default.jsonl
    f=model_00000050.bin
    compare bin "default: $f" "$OLD/cmp_out/default/$f" "$NEWD/cmp_out/default/$f"
    f=state_00000050_00000.bin
    compare bin "default: $f" "$OLD/cmp_out/default/$f" "$NEWD/cmp_out/default/$f"
else
    row "default CPU run" skipped "$(not_built train_gpt_cpu)"
fi

# ---------------------------------------------------------------- 2. three processes, ZeRO-0/1/2
echo "== 2. mpirun -np 3 ./train_gpt_cpu -e d2 -b 4 -t 32 -d 768 -x 6 --comm-stats 1 --cpu-matmul fp32 -z 0/1/2 (2 micro-steps)"
for z in 0 1 2; do
    if [ $MPI_OK = 0 ] || ! built_both train_gpt_cpu; then
        row "np3 ZeRO-$z" skipped "${MPI_WHY:-$(not_built train_gpt_cpu)}"
        continue
    fi
    D="cmp_out/np3_z$z"
    both "np3_z$z" 600 "${MPI[@]}" -np 3 ./train_gpt_cpu -e d2 -b 4 -t 32 -d 768 -x 6 -z $z -o "$D" --comm-stats 1 --cpu-matmul fp32
    compare_out "np3_z${z}_steps" "np3 ZeRO-$z: step lines (loss, norm, lr), exit status" steps "np3_z$z.log"
    compare_out "np3_z${z}_comm" "np3 ZeRO-$z: comm-stats bytes (every rank)" comm "np3_z$z.log"
    keep_log "np3_z$z" "$D"
    compare_out "np3_z${z}_jsonl" "np3 ZeRO-$z: log.jsonl without timing fields" jsonl "np3_z$z.jsonl"
    for f in model_00000006.bin state_00000006_0000{0,1,2}.bin; do
        compare bin "np3 ZeRO-$z: $f" "$OLD/$D/$f" "$NEWD/$D/$f"
    done
done

# ---------------------------------------------------------------- 3. emulated NCCL, BF16
echo "== 3. mpirun -np 2 ./train_gpt_emu_mpi_bf16 -e d2 -b 4 -t 32 -d 256 -x 2 -z 1 (CUDA emulator, NCCL over MPI)"
if [ $MPI_OK = 0 ]; then
    row "emulated NCCL BF16 run" skipped "$MPI_WHY"
elif ! built_both train_gpt_emu_mpi_bf16; then
    row "emulated NCCL BF16 run" skipped "$(not_built train_gpt_emu_mpi_bf16)"
else
    D=cmp_out/emu_bf16
    both emu_bf16 900 "${MPI[@]}" -np 2 ./train_gpt_emu_mpi_bf16 -e d2 -b 4 -t 32 -j '' -g 0 -u 2 -l 1e-3 -x 2 -z 1 -d 256 \
        -o "$D" --comm-stats 1
    compare_out emu_steps "emu BF16 np2 ZeRO-1: step lines, exit status" steps emu_bf16.log
    compare_out emu_comm "emu BF16 np2 ZeRO-1: comm-stats bytes (every rank)" comm emu_bf16.log
    keep_log emu_bf16 "$D"
    compare_out emu_jsonl "emu BF16 np2 ZeRO-1: log.jsonl without timing fields" jsonl emu_bf16.jsonl
    for f in model_00000002.bin state_00000002_0000{0,1}.bin; do
        compare bin "emu BF16 np2 ZeRO-1: $f" "$OLD/$D/$f" "$NEWD/$D/$f"
    done
fi

# ---------------------------------------------------------------- 4. model tests
echo "== 4. ./test_gpt_cpu and ./test_gpt_emu_bf16 (output with temporary paths masked, exit status)"
for t in test_gpt_cpu test_gpt_emu_bf16; do
    if built_both $t; then
        both $t 900 env OMP_NUM_THREADS="$THREADS" ./$t
        compare_out "${t}_out" "$t output and exit status" test "$t.log"
    else
        row "$t output and exit status" skipped "$(not_built $t)"
    fi
done

say "done"
echo "$N_SAME identical, $N_DIFF different$([ $N_SKIP -gt 0 ] && echo ", $N_SKIP skipped")"
if [ $N_DIFF -gt 0 ]; then exit 1; fi
if [ $N_SKIP -gt 0 ]; then exit 3; fi
exit 0
