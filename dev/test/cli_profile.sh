# dev/test/cli_profile.sh -- --profile-steps N (llmc/profile.h): the phase table of the CPU build has every phase row
# of llmc/profile.h's PROFILE_PHASES, non-negative times, non-zero forward, backward and update phases, rows that add
# up to the step, and one valid log.jsonl record; profiling changes no number (step lines and model file bit-identical
# to the same run without it) and the default prints no table; the collectives' rows under mpirun (tp, pp, dp) are
# non-zero; the CUDA build's timers (events with timing) through the emulated GPU build, when it is built. Timing itself (the covered share on d4 and d12) is dev/bench/profile_phases.sh's, not a test's.
source "$(dirname "$0")/lib_cli.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NAMES="$TMP/names.txt" # the rows of llmc/profile.h: the table's name and the log's key, tab-separated, in order
sed -n 's/^ *X(PROFILE_[A-Z_]*, "\([^"]*\)", "\([^"]*\)").*/\1\t\2/p' llmc/profile.h > "$NAMES"
test "$(grep -c '' "$NAMES")" -ge 15
check $? "llmc/profile.h's PROFILE_PHASES read: $(grep -c '' "$NAMES") phases"

# -ge 0 -r 1: GELU as its own op, recomputed in backward, so its row has a forward and a backward time too
$TRAIN "${FAST[@]}" -x 3 -ge 0 -r 1 --profile-steps 2 -o "$TMP/p" > "$TMP/p.txt" 2>&1
check $? "a run with --profile-steps 2 succeeds"
awk 'tolower($0) ~ /phase table/ { on = 1 } on && NF == 0 { exit } on { print }' "$TMP/p.txt" > "$TMP/table.txt"
grep -q '^phase table (--profile-steps 2: steps 2-3, mean of 2; rank 0, wall clock)$' "$TMP/table.txt"
check $? "the table's title names steps 2-3 (the first step is warm-up) and the clock: '$(head -n 1 "$TMP/table.txt")'"
python3 - "$TMP/table.txt" "$NAMES" "$TMP/p/log.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
names, keys = zip(*(l.split("\t") for l in open(sys.argv[2]).read().splitlines()))
names = list(names)
rows = {}
for l in lines[2:]:
    for n in names + ["host gaps", "step"]:
        if l.startswith(n + " ") and n not in rows:
            rows[n] = [float(x) for x in l[len(n):].replace("%", "").split()]
            break
def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what)
ok(all(n in rows and len(rows[n]) == 5 for n in names), "every phase of llmc/profile.h has a row (fwd, bwd, other, total, share): %d of %d" % (sum(n in rows for n in names), len(names)))
ok("host gaps" in rows and "step" in rows, "the table ends with host gaps and the step")
ok(all(v >= 0 for n in names for v in rows.get(n, [-1])), "every phase's times are non-negative")
fwd_bwd = ["embedding", "matmul qkv", "matmul attproj", "matmul fc", "matmul fcproj", "matmul lm head", "attention",
           "layernorm", "gelu"]
ok(all(rows.get(n, [0, 0])[0] > 0 and rows[n][1] > 0 for n in fwd_bwd), "forward and backward times are non-zero for: " + ", ".join(fwd_bwd))
ok(rows.get("classifier", [0])[0] > 0 and rows.get("adamw", [0, 0, 0])[2] > 0 and rows.get("loss and norm", [0, 0, 0])[2] > 0,
   "the classifier (forward), the loss and norm and AdamW (outside the passes) are non-zero")
ok(all(rows.get(n, [1, 1, 1])[:3] == [0, 0, 0] for n in ["comm tp", "comm pp", "comm ep", "moe experts"]),
   "one process of a dense model: no tp, pp or ep collectives, no experts")
step = rows.get("step", [-1])[0]
tot = sum(rows[n][3] for n in names if n in rows) + rows.get("host gaps", [0])[0]
ok(abs(tot - step) <= 0.001 * (len(names) + 2), "the phases and host gaps add up to the step: %.3f vs %.3f ms" % (tot, step))
recs = [json.loads(l) for l in open(sys.argv[3])]  # every line valid JSON, or this raises
prof = [r for r in recs if r["kind"] == "profile"]
ok(len(prof) == 1 and prof[0]["step"] == 3 and prof[0]["steps"] == 2 and prof[0]["first"] == 2 and prof[0]["last"] == 3,
   "log.jsonl: every line is JSON, one profile record at step 3 for steps 2-3")
p = prof[0] if prof else {"phases": {}, "step_ms": -1, "covered_ms": -1, "host_gaps_ms": 0}
ph = p["phases"]
ok(sorted(ph) == sorted(keys) and all(len(ph[k]) == 3 and min(ph[k]) >= 0 for k in keys),
   "the record has every phase as [fwd, bwd, other] ms, non-negative")
# the record prints step, covered and host gaps (= step - covered) with %.6f: each carries up to 0.5e-6 ms of
# rounding, so covered + host gaps may miss step by 3 x 0.5e-6 (1e-9 more for the sum's own double rounding)
ok(abs(p["step_ms"] - step) < 1e-3 and abs(p["covered_ms"] + p["host_gaps_ms"] - p["step_ms"]) <= 1.5e-6 + 1e-9,
   "the record's step, covered and host-gap ms agree with the table")
PY

# the same run without the flag: no table, no record, and the same numbers (profiling only reads clocks)
$TRAIN "${FAST[@]}" -x 3 -ge 0 -r 1 -o "$TMP/q" > "$TMP/q.txt" 2>&1
for r in p q; do grep -E '^step +[0-9]+/' "$TMP/$r.txt" | sed -E 's/[|] [0-9.]+ ms.*//' > "$TMP/$r.steps"; done
test -s "$TMP/q.steps" && cmp -s "$TMP/p.steps" "$TMP/q.steps" && cmp -s "$TMP/p/model_00000003.bin" "$TMP/q/model_00000003.bin"
check $? "--profile-steps 2 changes nothing: step lines and model file bit-identical to the run without it"
! grep -qi 'phase table' "$TMP/q.txt" && ! grep -q '"kind":"profile"' "$TMP/q/log.jsonl"
check $? "without --profile-steps (0, the default) no table is printed and no profile record logged"
expect_error "profile-steps" "--profile-steps -1 is refused" -- $TRAIN "${FAST[@]}" -x 1 --profile-steps -1

# the collectives' rows: tp x pp (2 x 2 processes) and ZeRO-1 over 2 data-parallel processes
row() { awk -v n="$2" 'index($0, n " ") == 1 { print $(NF - 1) }' "$1"; }
nonzero() { awk -v x="${1:-0}" 'BEGIN { exit !(x > 0) }'; }
if command -v mpirun > /dev/null; then
    MPI=(nice -n 10 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
    "${MPI[@]}" -np 4 $TRAIN "${FAST[@]}" -x 2 --tp 2 --pp 2 -d 256 --profile-steps 1 > "$TMP/tppp.txt" 2>&1
    nonzero "$(row "$TMP/tppp.txt" "comm tp")" && nonzero "$(row "$TMP/tppp.txt" "comm pp")" && \
        [ "$(grep -ci 'phase table' "$TMP/tppp.txt")" = 1 ]
    check $? "--tp 2 --pp 2 (4 processes): one table (rank 0's), comm tp $(row "$TMP/tppp.txt" "comm tp") ms and comm pp $(row "$TMP/tppp.txt" "comm pp") ms non-zero"
    "${MPI[@]}" -np 2 $TRAIN "${FAST[@]}" -x 2 -z 1 --profile-steps 1 > "$TMP/dp.txt" 2>&1
    nonzero "$(row "$TMP/dp.txt" "comm dp")"
    check $? "-z 1 over 2 processes: comm dp $(row "$TMP/dp.txt" "comm dp") ms non-zero"
else
    echo "ok - # SKIP mpirun not installed: the collectives' rows are not checked"
fi

# the CUDA backend's timers (cudaEventRecord / cudaEventElapsedTime) in the emulated GPU build: a table with every row
# and no negative time, and the same step lines as without profiling
if [ -x ./train_gpt_emu_mpi ]; then
    source dev/test/dp_lib.sh
    dp_random_shard "$TMP/v512.bin" 512
    E=(-e L2:C64:NH4:V512 -i "$TMP/v512.bin" -j '' -g 0 -b 2 -t 32 -u 1 -l 1e-3 -x 3)
    ./train_gpt_emu_mpi "${E[@]}" --profile-steps 2 > "$TMP/emu_p.txt" 2>&1
    ./train_gpt_emu_mpi "${E[@]}" > "$TMP/emu_q.txt" 2>&1
    awk 'tolower($0) ~ /phase table/ { on = 1 } on && NF == 0 { exit } on { print }' "$TMP/emu_p.txt" > "$TMP/emu_table.txt"
    rows=$(cut -f1 "$NAMES" | while read -r n; do grep -c "^$n " "$TMP/emu_table.txt"; done | grep -c '^1$')
    grep -q 'rank 0, CUDA events on the main stream)$' "$TMP/emu_table.txt" && [ "$rows" = "$(grep -c '' "$NAMES")" ] && \
        ! sed -n '3,$p' "$TMP/emu_table.txt" | grep -q -- ' -[0-9]' && test -s "$TMP/emu_q.txt" && \
        cmp -s <(grep -E '^step +[0-9]+/' "$TMP/emu_p.txt" | sed -E 's/[|] [0-9.]+ ms.*//') \
               <(grep -E '^step +[0-9]+/' "$TMP/emu_q.txt" | sed -E 's/[|] [0-9.]+ ms.*//')
    check $? "emulated GPU build: the table from CUDA events has all $rows rows, no negative time, and the step lines are those of the run without it"
else
    echo "ok - # SKIP ./train_gpt_emu_mpi not built: the CUDA timers are not checked"
fi
