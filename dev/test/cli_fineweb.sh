# dev/test/cli_fineweb.sh -- dev/data/fineweb.py offline (--local-parquet) on a small Parquet file in FineWeb's
# schema: the shards hold every document's tokens in order (EOT first) although 2 processes tokenize them, are
# named as scripts/run_gpt2_124M.sh reads them (val 000000, train 000001...) and train_gpt_cpu trains on them; an
# interrupted run (--stop-after) resumed gives the same files; a finished run is left alone; another shard size
# in the same directory is refused. Needs python3 with numpy, pyarrow and tiktoken (scripts/install_deps.sh);
# without them it prints one "# SKIP" line.
source "$(dirname "$0")/lib_cli.sh"
if ! python3 -c "import numpy, pyarrow, tiktoken" 2> /dev/null; then
    echo "ok - fineweb.py --local-parquet # SKIP python3 has no numpy, pyarrow or tiktoken (bash scripts/install_deps.sh)"
    exit 0
fi
# 200 documents of 5-80 lines of Tiny Shakespeare (decoded from the bundled shard), FineWeb's columns
python3 - "$TMP/fw.parquet" <<'PY'
import sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
sys.path.insert(0, "dev/data")
import prepare
enc = prepare.gpt2_encoding()
toks = np.fromfile("dev/data/tinyshakespeare/tiny_shakespeare_val.bin", dtype="<u2", offset=1024)
lines = enc.decode([int(t) for t in toks if t != prepare.EOT]).split("\n")
rng = np.random.default_rng(0)
docs, i = [], 0
for d in range(200):
    k = int(rng.integers(5, 80))
    docs.append("\n".join(lines[i:i + k]).strip() or "empty")
    i = (i + k) % (len(lines) - 100)
n = len(docs)
t = pa.table({"text": docs, "id": [f"<urn:uuid:{j}>" for j in range(n)], "dump": ["CC-MAIN-2024-10"] * n,
              "url": [f"https://example.org/{j}" for j in range(n)], "date": ["2024-02-20T00:00:00Z"] * n,
              "file_path": ["s3://x"] * n, "language": ["en"] * n, "language_score": [0.9] * n,
              "token_count": [0] * n})
pq.write_table(t, sys.argv[1], row_group_size=50)
PY
FW=(python3 dev/data/fineweb.py --local-parquet "$TMP/fw.parquet" --shard-size 4000 --workers 2)
"${FW[@]}" -o "$TMP/a" > "$TMP/a.txt" 2>&1
check $? "fineweb.py --local-parquet writes shards: $(tail -n 1 "$TMP/a.txt" | cut -c1-100)"
grep -q "^disk: the shards need about .* free in" "$TMP/a.txt"
check $? "it prints the disk space first: $(grep '^disk:' "$TMP/a.txt")"
python3 - "$TMP/fw.parquet" "$TMP/a" <<'PY'
import glob, os, sys
import numpy as np, pyarrow.parquet as pq
sys.path.insert(0, "dev/data")
import prepare
enc = prepare.gpt2_encoding()
want = np.concatenate([np.array([prepare.EOT] + enc.encode_ordinary(t), dtype=np.uint16)
                       for t in pq.read_table(sys.argv[1]).column("text").to_pylist()])
files = sorted(glob.glob(os.path.join(sys.argv[2], "fineweb_*.bin")), key=lambda p: p[-10:])
names = [os.path.basename(p) for p in files]
expect = ["fineweb_val_000000.bin"] + [f"fineweb_train_{i:06d}.bin" for i in range(1, len(files))]
parts = []
for p in files:
    h = np.fromfile(p, dtype="<i4", count=256)
    parts.append(np.fromfile(p, dtype="<u2", offset=1024))
    assert h[0] == 20240520 and h[1] == 1 and h[2] == parts[-1].size, p
got = np.concatenate(parts)
sizes = [x.size for x in parts]
ok = names == expect and len(files) >= 3 and all(s == 4000 for s in sizes[:-1]) and 0 < sizes[-1] <= 4000 \
    and np.array_equal(got, want)
print(f"# {len(files)} shards {sizes}; {want.size} tokens expected, {got.size} written")
sys.exit(0 if ok else 1)
PY
check $? "the shards (val 000000, train 000001..., 4000 tokens each, the rest last) are every document's tokens in order, EOT first"
$TRAIN -e d2 -b 2 -t 32 -g 0 -x 2 -v 2 -m 1 -i "$TMP/a/fineweb_train_*.bin" -j "$TMP/a/fineweb_val_*.bin" > "$TMP/t.txt" 2>&1 &&
    grep -q '^step *2/2' "$TMP/t.txt"
check $? "train_gpt_cpu trains on them with the recipe's globs (fineweb_train_*.bin, fineweb_val_*.bin)"
"${FW[@]}" -o "$TMP/b" --stop-after 2 > "$TMP/b1.txt" 2>&1 && test "$(ls "$TMP"/b/fineweb_*.bin | wc -l)" -eq 2 &&
    "${FW[@]}" -o "$TMP/b" > "$TMP/b2.txt" 2>&1 && grep -q "^resuming: 2 shards written" "$TMP/b2.txt" &&
    diff -r "$TMP/a" "$TMP/b" > /dev/null
check $? "stopped after 2 shards and rerun, it resumes ($(grep '^resuming' "$TMP/b2.txt" | cut -c1-70)) and writes the same files"
"${FW[@]}" -o "$TMP/b" > "$TMP/b3.txt" 2>&1 && grep -q "nothing to do" "$TMP/b3.txt"
check $? "rerun on a finished directory does nothing: $(tail -n 1 "$TMP/b3.txt")"
python3 dev/data/fineweb.py --local-parquet "$TMP/fw.parquet" --shard-size 3000 -o "$TMP/b" > "$TMP/b4.txt" 2>&1
rc=$?
test $rc -eq 1 && test "$(grep -c '' "$TMP/b4.txt")" -eq 1 && grep -q "holds shards of another run" "$TMP/b4.txt"
check $? "another shard size in the same directory is refused with one line: $(head -n 1 "$TMP/b4.txt")"
