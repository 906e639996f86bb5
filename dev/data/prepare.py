#!/usr/bin/env python3
"""
dev/data/prepare.py -- turn a local text file into llm.c token shards.

Input: a .txt file (the whole file is one document), a .jsonl file (one JSON object per line, the
document in the field --text-field, default "text"), or a .parquet file (column
--text-field; needs pyarrow).
Tokenizer: tiktoken's GPT-2 encoding built offline from the bundled files
dev/data/gpt2/{vocab.bpe,encoder.json} (sha256-checked), with the GPT-2 split
regex; no network access. The EOT token (50256) is written before every document.
Output (llm.c format): int32 header[256] = [20240520, 1, ntok, 0...] then ntok
uint16 tokens. The first --val-tokens tokens go to OUT_val_000000.bin (one
shard), the rest to OUT_train_000000.bin, _000001.bin, ... of at most
--shard-size tokens each.

Usage:
  python3 dev/data/prepare.py input.jsonl -o data/mydata/mydata [--text-field text]
         [--val-tokens 32768] [--shard-size 100000000]
Errors (missing file, unknown extension, bad JSON line, missing field, too few
tokens) print one line naming the file and exit with status 1.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2_DIR = os.path.join(HERE, "gpt2")
GPT2_SHA256 = {  # identical to the files tiktoken's "gpt2" encoding downloads
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256
SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def die(msg):
    """one line naming the script that runs (prepare.py, or fineweb.py, which uses these functions), exit 1"""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "prepare.py"
    print(f"{prog}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_gpt2_files():
    for name, want in GPT2_SHA256.items():
        path = os.path.join(GPT2_DIR, name)
        if not os.path.isfile(path):
            die(f"{path} missing (it is bundled with the repository; restore it with git)")
        got = sha256_file(path)
        if got != want:
            die(f"{path}: sha256 {got}, expected {want}")


def gpt2_encoding():
    """tiktoken's GPT-2 encoding, built from the bundled files (no network)."""
    try:
        import tiktoken
        import tiktoken.load
    except ImportError:
        die("tiktoken is not installed (pip install -r requirements/data.txt)")
    check_gpt2_files()
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(GPT2_DIR, "vocab.bpe"),
        encoder_json_file=os.path.join(GPT2_DIR, "encoder.json"))
    return tiktoken.Encoding(name="gpt2_local", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": EOT}, explicit_n_vocab=50257)


def iter_documents(path, text_field):
    """Yields the documents of a .txt, .jsonl or .parquet file as str."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".txt":
        with open(path, "r", encoding="utf-8") as f:
            yield f.read()
    elif ext == ".jsonl":
        with open(path, "r", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    die(f"{path}:{lineno}: not valid JSON ({e.msg})")
                if not isinstance(obj, dict) or text_field not in obj:
                    die(f"{path}:{lineno}: no field '{text_field}' (use --text-field to choose another)")
                if not isinstance(obj[text_field], str):
                    die(f"{path}:{lineno}: field '{text_field}' is not a string")
                yield obj[text_field]
    elif ext == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            die("reading .parquet needs pyarrow (pip install pyarrow)")
        pf = pq.ParquetFile(path)
        if text_field not in pf.schema_arrow.names:
            die(f"{path}: no column '{text_field}' (columns: {', '.join(pf.schema_arrow.names)})")
        for batch in pf.iter_batches(columns=[text_field], batch_size=1024):
            for t in batch.column(0).to_pylist():
                if t is not None:
                    yield t
    else:
        die(f"{path}: unknown extension '{ext}' (expected .txt, .jsonl or .parquet)")


def write_shard(path, tokens):
    """Writes an llm.c token shard (to path.tmp, then renamed)."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 1 << 16):
        die(f"{path}: token ids out of uint16 range")
    header = np.zeros(256, dtype="<i4")
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, tokens.size]
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
    os.replace(path + ".tmp", path)


def tokenize(path, text_field, enc, progress=True):
    """All tokens of the file as a uint16 array, EOT before each document."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    size = os.path.getsize(path)
    bar = tqdm(total=size, unit="B", unit_scale=True, desc="tokenizing") if (tqdm and progress and size > (8 << 20)) else None
    chunks, ndocs = [], 0
    for doc in iter_documents(path, text_field):
        toks = [EOT] + enc.encode_ordinary(doc)
        chunks.append(np.array(toks, dtype=np.uint16))
        ndocs += 1
        if bar is not None:
            bar.update(len(doc.encode("utf-8")))
    if bar is not None:
        bar.close()
    if ndocs == 0:
        die(f"{path}: no documents found")
    return np.concatenate(chunks), ndocs


def prepare(path, out_prefix, text_field="text", val_tokens=32768, shard_size=100_000_000, progress=True):
    """Tokenizes path and writes out_prefix_val_000000.bin and _train_NNNNNN.bin; returns the paths."""
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    if shard_size <= 0 or val_tokens < 0:
        die("--shard-size must be positive and --val-tokens non-negative")
    tokens, ndocs = tokenize(path, text_field, gpt2_encoding(), progress)
    if tokens.size <= val_tokens:
        die(f"{path}: only {tokens.size} tokens, not more than --val-tokens {val_tokens}")
    written = []
    val_path = f"{out_prefix}_val_000000.bin"
    write_shard(val_path, tokens[:val_tokens])
    written.append((val_path, val_tokens))
    train = tokens[val_tokens:]
    for i, start in enumerate(range(0, train.size, shard_size)):
        p = f"{out_prefix}_train_{i:06d}.bin"
        part = train[start:start + shard_size]
        write_shard(p, part)
        written.append((p, part.size))
    print(f"{path}: {ndocs} documents, {tokens.size} tokens")
    for p, n in written:
        print(f"  wrote {p}: {n} tokens")
    return written


def main():
    ap = argparse.ArgumentParser(description="Tokenize a local .txt/.jsonl/.parquet file into llm.c token shards (GPT-2 BPE, offline).")
    ap.add_argument("input", help="path to a .txt, .jsonl or .parquet file")
    ap.add_argument("-o", "--out", required=True, help="output prefix, e.g. data/mydata/mydata")
    ap.add_argument("--text-field", default="text", help="JSON field / parquet column holding the text (default: text)")
    ap.add_argument("--val-tokens", type=int, default=32768, help="first N tokens go to the val shard (default 32768)")
    ap.add_argument("--shard-size", type=int, default=100_000_000, help="max tokens per train shard (default 1e8)")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args()
    prepare(a.input, a.out, a.text_field, a.val_tokens, a.shard_size, not a.no_progress)


if __name__ == "__main__":
    main()
