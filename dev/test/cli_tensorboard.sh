#!/usr/bin/env bash
# dev/test/cli_tensorboard.sh -- scripts/log_to_tensorboard.py on the log of a short real run (MoE, so the MoE load
# tags are there, with validation), plus eval rows in the format the in-loop evaluation writes, read back with the
# same tensorboard package (EventAccumulator). Needs python3 with tensorboard (requirements/tensorboard.txt,
# installed by scripts/install_deps.sh): without it the test fails, it does not skip.
source "$(dirname "$0")/lib_cli.sh"

if ! python3 -c "import tensorboard" 2> /dev/null; then
    echo "not ok - the tensorboard package is not installed for $(command -v python3): scripts/install_deps.sh installs it (pip install -r requirements/tensorboard.txt)"
    exit 1
fi

RUN="$TMP/run"
$TRAIN -e d2 -b 2 -t 32 -g 0 -u 2 -l 1e-3 -x 4 -v 2 --moe-experts 4 --moe-top-k 2 -o "$RUN" > "$TMP/train.log" 2>&1
check $? "a 4-step MoE run with validation writes $RUN/log.jsonl"
LOG="$RUN/log.jsonl"
# eval rows as the in-loop evaluation logs them (llmc/README.md), and a skipped step (loss null: no point may appear)
cat >> "$LOG" << 'EOF'
{"kind":"eval","step":4,"task":"hellaswag","n":16,"acc":0.3125,"acc_sum_logprob":0.25}
{"kind":"eval","step":4,"task":"suite","n":16,"acc":0.0833333333}
{"kind":"train","step":5,"loss":null,"grad_norm":null,"lr":0.0001,"ms":50.5,"tokens_per_s":1200,"skipped":true}
EOF

# check_events DIR LOG: the event files in DIR hold exactly the log's scalars. The expectation is written out here
# from the log, field by field, not by the converter's own mapping, so that a tag renamed or dropped (the MoE
# per-expert loads, val/loss), a wrong step, a null written as NaN, a bool ("skipped") written as 1.0, or a point
# written twice (a rerun adding a second event file) each fails it.
check_events() {
    python3 - "$1" "$2" << 'EOF'
import glob, json, math, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
d, log = sys.argv[1], sys.argv[2]
exp = {}
def put(tag, step, v):
    if v is not None:
        exp.setdefault(tag, []).append((step, float(np.float32(v))))
for line in open(log):
    r = json.loads(line)
    k, s = r["kind"], r.get("step")
    if k == "train":
        for f in ("loss", "grad_norm", "lr", "ms", "tokens_per_s", "mfu"):
            if f in r: put("train/" + f, s, r[f])
        for f in ("aux", "drop", "max_load"):
            if "moe_" + f in r: put("moe/" + f, s, r["moe_" + f])
        for b in r.get("moe", []):
            for f in ("aux", "drop", "z"): put(f"moe/block{b['block']}/{f}", s, b[f])
            for e, x in enumerate(b["f"]): put(f"moe/block{b['block']}/load_e{e}", s, x)
    elif k == "val":
        put("val/loss", s, r["val_loss"])
    elif k == "eval":
        for f in ("n", "acc", "acc_sum_logprob"):
            if f in r: put(f"eval/{r['task']}/{f}", s, r[f])
files = glob.glob(d + "/*tfevents*")
acc = EventAccumulator(d, size_guidance={"scalars": 0})
acc.Reload()
got = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
bad = []
if len(files) != 1: bad.append(f"{len(files)} event files, expected 1")
for t in sorted(set(exp) | set(got)):
    if exp.get(t) != got.get(t):
        bad.append(f"{t}: expected {exp.get(t)}, got {got.get(t)}")
n = sum(len(v) for v in exp.values())
must = ["train/loss", "val/loss", "moe/block1/load_e3", "eval/hellaswag/acc", "eval/suite/acc"]
if any(t not in got for t in must): bad.append(f"missing one of {must}")
print(("not ok - " if bad else "ok - ") + f"{d}: {len(got)} tags, {n} points equal to the log's (steps, float32 "
      f"values)" + ("; " + "; ".join(bad[:5]) if bad else ""))
EOF
}

python3 scripts/log_to_tensorboard.py "$LOG" > "$TMP/conv.out" 2>&1
check $? "the converter runs on the log: $(tail -n 1 "$TMP/conv.out")"
check_events "$RUN/tb" "$LOG"
python3 scripts/log_to_tensorboard.py "$LOG" > /dev/null 2>&1
check_events "$RUN/tb" "$LOG"   # rerun: the event file replaced, not a second one beside it

# --follow on a log written in pieces, as a trainer writes it: half the lines, then a line cut before its newline
# (it must wait for the rest, not fail or drop it), then the rest, then the log replaced under its name as a resumed
# run does (its points must not be written twice)
F="$TMP/follow"
mkdir -p "$F"
n=$(wc -l < "$LOG")
head -n $((n / 2)) "$LOG" > "$F/log.jsonl"
python3 scripts/log_to_tensorboard.py "$F/log.jsonl" --follow --poll 0.1 --idle-exit 3 > "$TMP/follow.out" 2>&1 &
pid=$!
sleep 1
line=$(sed -n "$((n / 2 + 1))p" "$LOG")
printf '%s' "${line:0:20}" >> "$F/log.jsonl"
sleep 1
printf '%s\n' "${line:20}" >> "$F/log.jsonl"
tail -n +$((n / 2 + 2)) "$LOG" >> "$F/log.jsonl"
sleep 1
cp "$LOG" "$F/log.new" && mv "$F/log.new" "$F/log.jsonl"
wait "$pid"
check $? "--follow exits after --idle-exit seconds without new lines: $(tail -n 1 "$TMP/follow.out")"
check_events "$F/tb" "$LOG"

# bad input: one error line naming the file and line, exit 1
printf '{"kind":"train","step":1,"loss":2.5}\n{"kind":"train","step":2,"loss":\n' > "$TMP/bad.jsonl"
expect_error "bad.jsonl:2: not valid JSON" "a malformed line is refused" -- \
    env PYTHONWARNINGS=ignore python3 scripts/log_to_tensorboard.py "$TMP/bad.jsonl" -o "$TMP/badtb"
test ! -e "$TMP/badtb/events.out.tfevents.llmc" && test -z "$(ls -A "$TMP/badtb" 2> /dev/null)"
check $? "a refused log leaves no event file (nor a temporary one) behind"
expect_error "no such file" "a missing log is refused" -- python3 scripts/log_to_tensorboard.py "$TMP/none.jsonl"
