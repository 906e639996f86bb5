# dev/test/cli_progress.sh -- the step line's elapsed time and ETA with --log-every 2, and the final line (wall time,
# tokens seen, best validation loss). The ETA's arithmetic is unit-tested in dev/test/test_progress.c; here the
# trainer prints it on the right lines and the final line's numbers agree with the run.
source "$(dirname "$0")/lib_cli.sh"
$TRAIN -e d2 -b 4 -t 32 -g 0 -u 2 -x 6 -v 3 -m 2 --log-every 2 > "$TMP/run.txt" 2>&1
check $? "train_gpt_cpu -x 6 -v 3 --log-every 2 runs"
D='([0-9.]+s|[0-9]+m[0-9]{2}s|[0-9]+h[0-9]{2}m|[0-9]+d[0-9]{2}h)'
grep -E '^step' "$TMP/run.txt" | sed -E 's/ +/ /g' > "$TMP/steps.txt"
test "$(cut -d'|' -f1 "$TMP/steps.txt" | tr -d ' ' | tr '\n' ,)" = "step2/6,step4/6,step6/6," &&
    test "$(grep -cE "tok/s \| $D elapsed \| eta $D$" "$TMP/steps.txt")" -eq 3
check $? "--log-every 2 prints steps 2, 4, 6, each ending '| <elapsed> elapsed | eta <time left>': $(sed -n 2p "$TMP/steps.txt" | cut -d'|' -f7-)"
grep -qE '^step 6/6 .*\| eta 0\.0s$' "$TMP/steps.txt" && ! grep -q 'eta ?$' "$TMP/steps.txt"
check $? "the ETA is 0 on the last step and known (not '?') before it"
python3 - "$TMP/run.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
vals = [(float(v), int(s)) for v, s in re.findall(r"^val loss ([0-9.]+) \(step (\d+)\)$", t, re.M)]
m = re.search(r"^done: 6 steps in this run \(now at step 6\), [0-9.]+ s of training, (\S+) wall \| (\d+) tokens seen \| "
              r"best val loss ([0-9.]+) \(step (\d+)\)$", t, re.M)
best = min(vals) if vals else None
ok = m and len(vals) == 3 and int(m.group(2)) == 6 * 4 * 32 and (float(m.group(3)), int(m.group(4))) == best
print(f"# final line: {m.group(0) if m else 'missing'}; val losses {vals}")
sys.exit(0 if ok else 1)
PY
check $? "the final line gives the wall time, 6 x B x T = 768 tokens seen and the lowest of the 3 val losses with its step"
