#!/usr/bin/env bash
# dev/test/mutate.sh -- the planted-bug check of the test suite: applies the one-line mutations of
# dev/test/mutations.txt (bugs a developer of each parallel feature plausibly makes), one at a time, to a copy of this
# working tree, builds what the covering tests need, runs those tests and prints one row per mutation: which test
# killed it (its first "not ok" line), or SURVIVED; then the kill rate. Not part of make test: a full run builds the
# trainer once per mutation and runs the multi-process tests (an hour or more on 2 loaded cores).
#
# Usage: bash dev/test/mutate.sh [--list] [--only N,ID,...] [--baseline] [--no-trigger | --trigger-only] [--keep]
#                                [--timeout S]
#   --list        the mutations (number, id, feature, file, covering tests, the bug) and whether each still applies
#   --only ...    only these mutations (numbers from --list, or ids)
#   --baseline    first run every covering test on the unmutated copy (each must pass there, or a kill means nothing)
#   --no-trigger  skip the check that the mutant changes results
#   --trigger-only  only that check, no tests (to validate a new mutation quickly)
#   --keep        keep the temporary directory (its path is printed)
#   --timeout S   a test running longer than S seconds (default 1200) counts as killed (a mutant that hangs)
# The checkout is never modified: the working tree's files (tracked and untracked, not ignored) are copied to a
# temporary directory once; each mutation is applied there, its file restored afterwards (so the next build rebuilds).
# Each mutation also has a trigger, a short run executed with the clean and the mutant trainer: the outputs (final model
# and state files, log.jsonl without timings) must differ, otherwise the row says "no change" (an equivalent mutant,
# which no test can kill: fix the mutation). A mutant whose test hangs past --timeout, crashes or exits non-zero without
# a "not ok" line counts as killed; a "not ok - ... missing (make ...)" line (a program not built here) does not.
# Exit status: 0 when every applicable mutation was killed, 1 otherwise.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIST="$ROOT/dev/test/mutations.txt"
ONLY="" BASELINE=0 TRIGGER=1 TESTS=1 KEEP=0 LIST_ONLY=0 TIMEOUT=1200
while [ $# -gt 0 ]; do
    case "$1" in
        --list) LIST_ONLY=1 ;;
        --only) ONLY="$2"; shift ;;
        --baseline) BASELINE=1 ;;
        --no-trigger) TRIGGER=0 ;;
        --trigger-only) TESTS=0 ;;
        --keep) KEEP=1 ;;
        --timeout) TIMEOUT="$2"; shift ;;
        *) echo "error: unknown option '$1' (expected --list, --only N,ID..., --baseline, --no-trigger, --trigger-only, --keep, --timeout S)" >&2; exit 2 ;;
    esac
    shift
done

# ---------------------------------------------------------------- the list (parsed once into bash arrays)
WORK=$(mktemp -d /tmp/llmc_mutate.XXXXXX)
if [ $KEEP = 0 ]; then trap 'rm -rf "$WORK"' EXIT; else echo "# temporary directory: $WORK"; fi
python3 - "$LIST" "$ROOT" "$ONLY" > "$WORK/list.sh" <<'PY' || exit 2
import shlex, sys
path, root, only = sys.argv[1], sys.argv[2], sys.argv[3]
keys = ("id", "feature", "file", "find", "replace", "tests", "trigger", "what")
recs, cur, last = [], None, None
for n, line in enumerate(open(path), 1):
    if line.startswith("#"):
        continue
    if not line.strip():
        cur = last = None
        continue
    if line[0] in " \t":
        if cur is None or last is None:
            sys.exit("%s:%d: a continuation line outside a record" % (path, n))
        cur[last] += " " + line.strip()
        continue
    k, sep, v = line.partition(":")
    if not sep or k not in keys:
        sys.exit("%s:%d: expected one of %s followed by ':'" % (path, n, ", ".join(keys)))
    if cur is None:
        cur = {}
        recs.append(cur)
    cur[k] = v.strip() if k != "replace" else v.lstrip(" ").rstrip("\n")
    last = k
ids = [r.get("id") for r in recs]
for i, r in enumerate(recs, 1):
    miss = [k for k in keys if k not in r]
    if miss:
        sys.exit("%s: mutation %d (%s) lacks %s" % (path, i, r.get("id"), ", ".join(miss)))
    if ids.count(r["id"]) > 1:
        sys.exit("%s: id %s is used twice" % (path, r["id"]))
want = set(x for x in only.split(",") if x)
sel = [i for i, r in enumerate(recs, 1) if not want or str(i) in want or r["id"] in want]
if want and len(sel) != len(want):
    sys.exit("--only %s: unknown numbers or ids (see --list)" % only)
for i, r in enumerate(recs, 1):
    try:
        count = open("%s/%s" % (root, r["file"])).read().count(r["find"])
    except OSError:
        count = -1
    r["count"] = str(count)
for k in keys + ("count",):
    print("M_%s=(%s)" % (k.upper(), " ".join(shlex.quote(recs[i - 1][k]) for i in sel)))
print("M_NUM=(%s)" % " ".join(str(i) for i in sel))
PY
# shellcheck disable=SC1091
source "$WORK/list.sh"
N_SEL=${#M_ID[@]}

if [ $LIST_ONLY = 1 ]; then
    for ((j = 0; j < N_SEL; j++)); do
        state="applies"; [ "${M_COUNT[j]}" = 1 ] || state="STALE: the fragment occurs ${M_COUNT[j]} times"
        printf '%2d %-24s %-12s %-24s %-44s %s\n   %s\n' "${M_NUM[j]}" "${M_ID[j]}" "${M_FEATURE[j]}" "${M_FILE[j]}" \
            "${M_TESTS[j]}" "$state" "${M_WHAT[j]}"
    done
    exit 0
fi

# ---------------------------------------------------------------- the copy and the clean build
TREE="$WORK/tree"
mkdir -p "$TREE"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 tar cf - 2> /dev/null) | (cd "$TREE" && tar xf -) || {
    echo "error: cannot copy the working tree of $ROOT to $TREE" >&2; exit 2; }
# what a test needs built: the trainer for the command-line tests (cli_tp.sh also its MPI model test), the rest itself
targets_of() {
    local t out="train_gpt_cpu"
    for t in "$@"; do
        case "$t" in
            test_gpt_cpu) out="$out test_gpt_cpu" ;;
            build/*) out="$out $t" ;;
            cli_tp.sh) out="$out build/mpi_test_gpt_tp" ;;
            cli_pp.sh) out="$out build/mpi_pipe_bubble" ;;
            cli_step_stats.sh) out="$out build/mpi_step_stats" ;;
        esac
    done
    echo "$out"
}
build() { # targets... -> 0 when built; the log in $WORK/build.log
    (cd "$TREE" && nice -n 10 make --no-print-directory "$@") > "$WORK/build.log" 2>&1
}
ALL_TESTS=$(printf '%s\n' "${M_TESTS[@]}" | tr ' ' '\n' | sort -u | tr '\n' ' ')
# shellcheck disable=SC2046,SC2086
if ! build $(if [ $TESTS = 1 ]; then targets_of $ALL_TESTS; else echo train_gpt_cpu; fi); then
    echo "error: the unmutated copy does not build ($WORK/build.log):" >&2; tail -n 20 "$WORK/build.log" >&2; exit 2
fi
cp "$TREE/train_gpt_cpu" "$WORK/clean_train_gpt_cpu"

# ---------------------------------------------------------------- running a test, running a trigger
# run_test NAME LOG: 0 passed; 1 killed (KILL_LINE says by what). Stops at the first "not ok" line.
run_test() {
    local t=$1 log=$2 cmd
    case "$t" in
        cli_*.sh|check_*.sh) cmd=(bash "dev/test/$t") ;;
        test_gpt_cpu) cmd=(./test_gpt_cpu) ;;
        build/*) cmd=("./$t") ;;
        *) KILL_LINE="unknown test '$t' in the list"; return 1 ;;
    esac
    (cd "$TREE" && exec timeout -k 10 "$TIMEOUT" nice -n 10 "${cmd[@]}") > "$log" 2>&1 &
    local pid=$! start=$SECONDS bad=""
    while kill -0 $pid 2> /dev/null; do
        bad=$(grep '^not ok - ' "$log" | grep -v 'missing (make ' | head -n 1)
        if [ -n "$bad" ]; then kill -TERM $pid 2> /dev/null; break; fi
        sleep 2
    done
    wait $pid
    local rc=$?
    [ -z "$bad" ] && bad=$(grep '^not ok - ' "$log" | grep -v 'missing (make ' | head -n 1)
    if [ -n "$bad" ]; then KILL_LINE="$bad"; return 1; fi
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then KILL_LINE="timed out after $((SECONDS - start)) s"; return 1; fi
    if [ $rc -ne 0 ]; then KILL_LINE="exit status $rc without a 'not ok' line"; return 1; fi
    if ! grep -q '^ok - ' "$log"; then KILL_LINE="no check ran"; return 1; fi
    return 0
}
cat > "$WORK/trigger.sh" <<'SH'
# the environment of a trigger (see dev/test/mutations.txt): $1 the trainer, $2 the output directory, $3 the command
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
TRAIN="$1 --cpu-matmul fp32"
OUT=$2
SHARD512=$(dirname "$2")/shard512.bin
TINY=(-e L2:C32:NH2 -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3)
MPIRUN() { local n="$1"; shift; mpirun --oversubscribe --bind-to none -np "$n" -x OMP_NUM_THREADS "$@"; }
mkdir -p "$OUT"
eval "$3"
SH
python3 - "$WORK/trig/shard512.bin" <<'PY'
import os, random, struct, sys
from array import array
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
random.seed(3)
toks = array("H", [random.randrange(512) for _ in range(4096)])
h = [0] * 256; h[:3] = [20240520, 1, len(toks)]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + toks.tobytes())
PY
# trigger BIN DIR CMD -> the run's exit status (its output in DIR.log)
trigger() {
    (cd "$TREE" && exec timeout -k 10 600 nice -n 10 bash "$WORK/trigger.sh" "$1" "$2" "$3") > "$2.log" 2>&1
}
# outputs_differ CLEAN MUTANT -> prints what differs; 0 when something does
outputs_differ() {
    python3 - "$1" "$2" <<'PY'
import json, os, sys
def files(d):
    out = {}
    for base, _, names in os.walk(d):
        for n in names:
            if not n.startswith("DONE_"):  # the markers record the flags, output directories included
                out[os.path.relpath(os.path.join(base, n), d)] = os.path.join(base, n)
    return out
def timing(k):
    return k in ("mfu", "bubble") or k.endswith(("ms", "_s", "gbs")) or "second" in k  # measured times and rates
def records(p):
    rs = []
    for line in open(p, errors="replace"):
        try:
            o = json.loads(line)
        except ValueError:
            rs.append(line); continue
        if isinstance(o, dict) and o.get("kind") == "config":
            continue  # the flags: the output directories differ
        rs.append({k: v for k, v in o.items() if not timing(k)} if isinstance(o, dict) else o)
    return rs
a, b = files(sys.argv[1]), files(sys.argv[2])
diff = sorted(set(a) ^ set(b))
for k in sorted(set(a) & set(b)):
    same = records(a[k]) == records(b[k]) if k.endswith(".jsonl") else open(a[k], "rb").read() == open(b[k], "rb").read()
    if not same:
        diff.append(k)
print(", ".join(diff[:4]) + (" ..." if len(diff) > 4 else "") if diff else "identical outputs")
sys.exit(0 if diff else 1)
PY
}

# ---------------------------------------------------------------- baseline
if [ $BASELINE = 1 ]; then
    echo "# baseline: every covering test on the unmutated copy"
    base_bad=0
    for t in $ALL_TESTS; do
        s=$SECONDS
        if run_test "$t" "$WORK/baseline_${t//\//_}.log"; then echo "# baseline $t: passed ($((SECONDS - s)) s)"
        else echo "# baseline $t: FAILED: $KILL_LINE"; base_bad=1; fi
    done
    [ $base_bad = 0 ] || { echo "error: a covering test fails without any mutation (logs in $WORK); fix that first" >&2; KEEP=1; trap - EXIT; exit 2; }
fi

# ---------------------------------------------------------------- the mutations
printf '%-3s %-24s %-12s %-40s %s\n' "#" "mutation" "feature" "changes results (trigger)" "result"
killed=0 applicable=0 rows=()
for ((j = 0; j < N_SEL; j++)); do
    num=${M_NUM[j]} id=${M_ID[j]} f=${M_FILE[j]} t0=$SECONDS
    row_start=$(printf '%-3s %-24s %-12s' "$num" "$id" "${M_FEATURE[j]}")
    if [ "${M_COUNT[j]}" != 1 ]; then
        rows+=("$row_start STALE: its fragment occurs ${M_COUNT[j]} times in $f (update the list)")
        echo "${rows[-1]}"; continue
    fi
    cp "$TREE/$f" "$WORK/original"
    python3 - "$TREE/$f" "${M_FIND[j]}" "${M_REPLACE[j]}" <<'PY'
import sys
p, a, b = sys.argv[1:4]
s = open(p).read()
assert s.count(a) == 1
open(p, "w").write(s.replace(a, b))
PY
    # shellcheck disable=SC2046,SC2086
    if ! build $(if [ $TESTS = 1 ]; then targets_of ${M_TESTS[j]}; else echo train_gpt_cpu; fi); then
        cp "$WORK/original" "$TREE/$f"
        rows+=("$row_start BUILD FAILED (not counted): $(grep -m1 'error' "$WORK/build.log" | head -c 150)")
        echo "${rows[-1]}"; continue
    fi
    applicable=$((applicable + 1))
    change="(not checked)"
    if [ $TRIGGER = 1 ]; then
        trigger "$WORK/clean_train_gpt_cpu" "$WORK/trig/clean$num" "${M_TRIGGER[j]}"; rc_c=$?
        trigger "$TREE/train_gpt_cpu" "$WORK/trig/mut$num" "${M_TRIGGER[j]}"; rc_m=$?
        if [ $rc_c -ne 0 ]; then change="TRIGGER FAILS ON THE CLEAN BUILD (rc $rc_c)"
        elif [ $rc_m -ne 0 ]; then change="yes: the mutant's run fails (rc $rc_m)"
        elif d=$(outputs_differ "$WORK/trig/clean$num" "$WORK/trig/mut$num"); then change="yes: $d"
        else change="NO CHANGE ($d)"; fi
    fi
    result="SURVIVED"
    [ $TESTS = 1 ] || result="(tests not run)"
    for t in ${M_TESTS[j]}; do
        [ $TESTS = 1 ] || break
        if ! run_test "$t" "$WORK/m${num}_${t//\//_}.log"; then
            result="killed by $t: $(echo "$KILL_LINE" | head -c 150)"
            killed=$((killed + 1))
            break
        fi
    done
    cp "$WORK/original" "$TREE/$f"
    rows+=("$row_start $(printf '%-40.40s' "$change") $result ($((SECONDS - t0)) s)")
    echo "${rows[-1]}"
done

echo
echo "# mutation table"
printf '%s\n' "${rows[@]}"
pct=0; [ $applicable -gt 0 ] && pct=$((100 * killed / applicable))
if [ $TESTS = 1 ]; then
    echo "kill rate: $killed of $applicable mutations killed ($pct%)"
    [ $applicable -gt 0 ] && [ $killed -eq $applicable ]
else
    ! printf '%s\n' "${rows[@]}" | grep -q 'NO CHANGE\|TRIGGER FAILS'
fi
