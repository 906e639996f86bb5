# dev/test/cli_tokens32.sh -- vocabularies beyond 65,535 tokens, end to end, offline: a Hugging Face tokenizer.json
# built here with the `tokenizers` library (a byte-level BPE trained on 100 kB of the bundled Tiny Shakespeare text,
# its merged tokens moved to ids 69,736 and up behind unused filler tokens, V = 70,000; and the same BPE unmoved,
# V < 65,536); dev/data/prepare.py --tokenizer writes version 2 (uint32) shards for the first and version 1 for the
# second, says so, and the shards hold exactly the tokenizer's ids (EOT first in every document); the trainer's own
# readers (build/shard_decode: llmc/dataloader.h + the decode table through llmc/tokenizer.h) give back every
# document byte for byte (accents, an emoji split over byte tokens) with ids above 65,535 read unchanged; the trainer
# trains a V70000 model on the 32-bit shards (fineweb.py --tokenizer too) (first loss near ln 70000, samples printed through the decode table);
# and the same GPT-2 token stream as a version 1 and a version 2 shard gives bit-identical training and validation
# losses, gradient norms and samples. Needs python3 with numpy, tiktoken and tokenizers (scripts/install_deps.sh).
source "$(dirname "$0")/lib_cli.sh"
if ! python3 -c "import numpy, tiktoken, tokenizers" 2> /dev/null; then
    echo "not ok - python3 has no numpy, tiktoken or tokenizers: run bash scripts/install_deps.sh"
    exit 1
fi
DEC=build/shard_decode
[ -x "$DEC" ] || { echo "not ok - $DEC is not built (make $DEC; make test and make test-quick build it)"; exit 1; }
python3 - "$TMP" <<'PY'
import json, sys
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders
tmp = sys.argv[1]
text = open("dev/data/tinyshakespeare/input.txt", encoding="utf-8").read()[:100000]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=520, special_tokens=["<|endoftext|>"],
                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tok.save(f"{tmp}/small.json")
spec = json.load(open(f"{tmp}/small.json"))
vocab = spec["model"]["vocab"]
V = 70000
eot_old = vocab["<|endoftext|>"]
merged = sorted((i, t) for t, i in vocab.items() if t != "<|endoftext|>" and i > 256)
# byte tokens keep their ids (< 257), merged tokens move to the top (order kept), EOT last, fillers between
base = V - 1 - len(merged)
new = {t: i for t, i in vocab.items() if i <= 256 and t != "<|endoftext|>"}
new.update({t: base + k for k, (_, t) in enumerate(merged)})
new["<|endoftext|>"] = V - 1
used = set(new.values())
new.update({f"<filler {i}>": i for i in range(V) if i not in used})
assert sorted(new.values()) == list(range(V))
spec["model"]["vocab"] = new
for a in spec["added_tokens"]:
    if a["content"] == "<|endoftext|>":
        a["id"] = V - 1
json.dump(spec, open(f"{tmp}/big.json", "w"), ensure_ascii=False)
big = Tokenizer.from_file(f"{tmp}/big.json")
docs = [text[:30000], "caf\u00e9 na\u00efve \u00fcber \u2014 \u2713 \U0001F917 end", text[30000:60000]]
with open(f"{tmp}/docs.jsonl", "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
with open(f"{tmp}/expect.txt", "wb") as f:
    f.write(b"".join(b"<|endoftext|>" + d.encode("utf-8") for d in docs))
ids = big.encode(docs[0]).ids
print(f"# tokenizers: small V {Tokenizer.from_file(f'{tmp}/small.json').get_vocab_size()}, big V "
      f"{big.get_vocab_size()}, {sum(i > 65535 for i in ids)} of the first document's {len(ids)} ids above 65535")
PY
check $? "tokenizer.json files built offline with the tokenizers library (V = 70000 with ids above 65535, and a small one)"

for k in big small; do
    python3 dev/data/prepare.py "$TMP/docs.jsonl" -o "$TMP/$k/ts" --tokenizer "$TMP/$k.json" --val-tokens 3000 \
        --shard-size 6000 --no-progress > "$TMP/$k.out" 2> "$TMP/$k.err"
    check $? "prepare.py --tokenizer $k.json: $(head -n 1 "$TMP/$k.out")"
done
grep -q "vocabulary 70000 tokens, EOT id 69999; shard version 2 (uint32 token ids)" "$TMP/big.out" &&
    grep -q "wrote .*ts_tokenizer.bin: decode table of 70000 tokens" "$TMP/big.out" && ! grep -q warning "$TMP/big.err"
check $? "V 70000: prints the vocabulary size and version 2, writes the decode table; no round-trip warning"
grep -q "shard version 1 (uint16 token ids)" "$TMP/small.out"
check $? "V < 65536: version 1 (llm.c's uint16 shards)"
python3 - "$TMP" <<'PY'
import glob, json, sys
import numpy as np
from tokenizers import Tokenizer
sys.path.insert(0, "dev/data")
import prepare
tmp = sys.argv[1]
docs = [json.loads(l)["text"] for l in open(f"{tmp}/docs.jsonl", encoding="utf-8")]
ok = True
for k, version, dtype in (("big", 2, "<u4"), ("small", 1, "<u2")):
    tok = Tokenizer.from_file(f"{tmp}/{k}.json")
    eot = tok.token_to_id("<|endoftext|>")
    want = np.concatenate([[eot] + tok.encode(d, add_special_tokens=False).ids for d in docs])
    files = [f"{tmp}/{k}/ts_val_000000.bin"] + sorted(glob.glob(f"{tmp}/{k}/ts_train_*.bin"))
    heads = [np.fromfile(p, dtype="<i4", count=256) for p in files]
    got = np.concatenate([np.fromfile(p, dtype=dtype, offset=1024) for p in files])
    same = all(h[0] == 20240520 and h[1] == version for h in heads) and np.array_equal(got, want) and \
        all(np.array_equal(prepare.read_shard(p), np.fromfile(p, dtype=dtype, offset=1024)) for p in files)
    print(f"# {k}: {len(files)} shards of version {[int(h[1]) for h in heads]}, {got.size} ids, max {got.max()}, "
          f"{int((got > 65535).sum())} above 65535; equal to the tokenizer's: {np.array_equal(got, want)}")
    ok = ok and same and (k == "small" or (got > 65535).sum() > 1000)
sys.exit(0 if ok else 1)
PY
check $? "the shards hold exactly the tokenizer's ids, EOT first in each document, in the version's width (big: ids above 65535)"

for k in big small; do
    { $DEC "$TMP/$k/ts_tokenizer.bin" "$TMP/$k/ts_val_*.bin" && $DEC "$TMP/$k/ts_tokenizer.bin" "$TMP/$k/ts_train_*.bin"; } \
        > "$TMP/$k.dec" 2> "$TMP/$k.decerr"
    rc=$?
    cmp -s "$TMP/$k.dec" "$TMP/expect.txt"
    check $((rc + $?)) "$k: the trainer's readers (dataloader.h, tokenizer.h's decode table) give back all 3 documents byte for byte$([ $k = big ] && echo ", every id above 65535 included") ($(tr '\n' ' ' < "$TMP/$k.decerr"))"
done
# fineweb.py --local-parquet --tokenizer: the same documents, version 2 shards, its decode table; another tokenizer
# in the same directory is refused
python3 - "$TMP" <<'PY'
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
docs = [json.loads(l)["text"] for l in open(f"{sys.argv[1]}/docs.jsonl", encoding="utf-8")]
pq.write_table(pa.table({"text": docs}), f"{sys.argv[1]}/docs.parquet")
PY
python3 dev/data/fineweb.py --local-parquet "$TMP/docs.parquet" --tokenizer "$TMP/big.json" --shard-size 5000 \
    --workers 1 -o "$TMP/fw" > "$TMP/fw.out" 2>&1 &&
    grep -q "shard version 2" "$TMP/fw.out" && grep -q "disk: the shards need about .* (4 bytes x" "$TMP/fw.out"
check $? "fineweb.py --tokenizer: version 2 chosen and 4 bytes per token in its disk estimate"
{ $DEC "$TMP/fw/fineweb_tokenizer.bin" "$TMP/fw/fineweb_val_*.bin" && $DEC "$TMP/fw/fineweb_tokenizer.bin" "$TMP/fw/fineweb_train_*.bin"; } \
    > "$TMP/fw.dec" 2> /dev/null && cmp -s "$TMP/fw.dec" "$TMP/expect.txt"
check $? "fineweb.py --tokenizer: its shards and decode table give back the documents byte for byte"
python3 dev/data/fineweb.py --local-parquet "$TMP/docs.parquet" --tokenizer "$TMP/small.json" --shard-size 5000 \
    --workers 1 -o "$TMP/fw" > "$TMP/fw2.out" 2>&1
test $? -eq 1 && grep -q "fineweb.py: error: .* holds shards of another tokenizer (sha256:" "$TMP/fw2.out"
check $? "fineweb.py: resuming a directory with another tokenizer is refused: $(grep error "$TMP/fw2.out" | cut -c1-120)"

expect_error "has token id 69999 at token offset 0, but the vocabulary size is 520" \
    "a V70000 shard under a 520-token decode table is refused" -- $DEC "$TMP/small/ts_tokenizer.bin" "$TMP/big/ts_val_*.bin"

# training on version 2 shards: V 70000, first loss near ln V. The initial logits are wte (std 0.02) times the final
# LayerNorm's output (norm sqrt(C) = 8): std sigma ~ 0.16, which moves the mean loss by ~sigma^2/2 = 0.013 (log-sum-exp)
# and its 256-position average by ~sigma/16 = 0.01 (the target logits): 0.05 is over 2x their sum; a model of another
# vocabulary (ln 65536 = 11.09, ln 50257 = 10.82) is outside it
$TRAIN -e L2:C64:NH4:V70000:T64 -i "$TMP/big/ts_train_*.bin" -j "$TMP/big/ts_val_*.bin" \
    --tokenizer "$TMP/big/ts_tokenizer.bin" -b 4 -t 64 -x 4 -v 2 -m 1 -u 1 -l 1e-3 -g 12 -s 4 -o "$TMP/run" \
    > "$TMP/run.txt" 2>&1
check $? "train_gpt_cpu -e L2:C64:NH4:V70000:T64 trains 4 steps on version 2 shards with the decode table"
python3 - "$TMP/run/log.jsonl" <<'PY'
import json, math, sys
rec = [json.loads(l) for l in open(sys.argv[1])]
loss = [r["loss"] for r in rec if r["kind"] == "train"]
val = [r["val_loss"] for r in rec if r["kind"] == "val"]
print(f"# train losses {loss}, val {val}, ln 70000 = {math.log(70000):.4f}")
sys.exit(0 if len(loss) == 4 and abs(loss[0] - math.log(70000)) < 0.05 and loss[-1] < loss[0] and len(val) >= 2 else 1)
PY
check $? "first loss within 0.05 of ln 70000 = 11.1563, and it falls over 4 steps"
grep -q "^sample (from <|endoftext|>)" "$TMP/run.txt"
check $? "samples start from the tokenizer's EOT and print through the decode table: $(grep -m1 '^sample' "$TMP/run.txt" | cut -c1-80)"

# the same token stream as version 1 and as version 2: bit-identical losses, norms, samples
python3 - "$TMP" <<'PY'
import sys
sys.path.insert(0, "dev/data")
import prepare
t = prepare.read_shard("dev/data/tinyshakespeare/tiny_shakespeare_val.bin")
for name, part in (("train", t[:24000]), ("val", t[24000:])):
    prepare.write_shard(f"{sys.argv[1]}/w16_{name}.bin", part, 1)
    prepare.write_shard(f"{sys.argv[1]}/w32_{name}.bin", part, 2)
PY
for w in 16 32; do
    $TRAIN -e d2 -b 4 -t 32 -u 2 -l 1e-3 -x 6 -v 3 -m 2 -g 6 -s 3 -i "$TMP/w${w}_train.bin" -j "$TMP/w${w}_val.bin" \
        -o "$TMP/w$w" > "$TMP/w$w.txt" 2>&1
    check $? "d2 on the GPT-2 stream as $w-bit shards, 6 steps"
    grep -E '^(step|val loss|sample)' "$TMP/w$w.txt" | sed 's/ | [0-9.]* ms | .*//' > "$TMP/w$w.lines"
    grep -E '"kind":"(train|val)"' "$TMP/w$w/log.jsonl" | sed 's/,"ms":.*//' > "$TMP/w$w.log"
done
cmp -s "$TMP/w16.lines" "$TMP/w32.lines" && cmp -s "$TMP/w16.log" "$TMP/w32.log" &&
    [ "$(grep -c '^step' "$TMP/w16.lines")" -eq 6 ] && [ "$(grep -c '^sample' "$TMP/w16.lines")" -ge 2 ]
check $? "16-bit and 32-bit shards of one stream: bit-identical step, validation and sample lines and log records ($(grep -c '' "$TMP/w16.lines") lines; last: $(grep '^step' "$TMP/w16.lines" | tail -n 1))"
