#!/usr/bin/env python3
"""
dev/data/fineweb.py -- FineWeb (or FineWeb-Edu) sample-10BT as GPT-2 token shards, the data of
scripts/run_gpt2_124M.sh.

Source: the Hugging Face dataset HuggingFaceFW/fineweb (--edu: HuggingFaceFW/fineweb-edu), config sample-10BT
(about 10B GPT-2 tokens), downloaded by the `datasets` library into its cache (HF_HOME) on the first run; or, offline,
local Parquet files in the same schema (a string column "text", one document per row) with --local-parquet.
Tokenization: GPT-2 BPE through tiktoken, built from the bundled dev/data/gpt2 files (dev/data/prepare.py), in
--workers processes (default: all cores) with a tqdm progress bar; EOT (50256) before every document.
Output, in OUT (default dev/data/fineweb10B, or dev/data/edu_fineweb10B with --edu): shards of --shard-size
tokens (default 100M) in llm.c's format, shard 0 = OUT/fineweb_val_000000.bin, then OUT/fineweb_train_000001.bin,
..._000002.bin, ... (the names scripts/run_gpt2_124M.sh reads); a document may continue into the next shard; the
last shard holds the rest. Each shard is written to name.tmp and renamed.
Resumable: after every shard OUT/fineweb_state.json (atomic) records the shards written and where the next one
starts (document index and token offset); rerunning the same command continues from there without tokenizing the
finished documents again; a different source or shard size in the same OUT is refused. --stop-after N writes N more
shards and stops, as an interruption would.
--tokenizer PATH/tokenizer.json [--eot TOKEN]: a Hugging Face tokenizer instead of GPT-2 (dev/data/prepare.py's
--tokenizer): shards of version 2 (uint32 ids) when its ids do not fit uint16, and its decode table
OUT/fineweb_tokenizer.bin (the trainer's --tokenizer); the state records the tokenizer file's sha256, so a resume with
another tokenizer is refused.
Disk: before starting it prints the space the shards will need (2 bytes per token, 4 for version 2 shards: about 20 GB for sample-10BT,
estimated from the text size for local files) and the space free in OUT, and refuses to start when the free space
is smaller (the download cache needs its own space too: tens of GB for sample-10BT, under HF_HOME).

Usage:
  pip install -r requirements/fineweb.txt           # numpy, tiktoken, tqdm, pyarrow, datasets
  python3 dev/data/fineweb.py [--edu] [-o OUT] [--workers N]
  python3 dev/data/fineweb.py --local-parquet a.parquet [b.parquet ...] -o OUT [--shard-size 100000000]
         [--tokenizer tokenizer.json [--eot TOKEN]]
Errors (missing file or column, another run's state in OUT, too little disk) print one line and exit 1.
"""
import argparse
import glob
import json
import multiprocessing as mp
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare  # noqa: E402  (the bundled GPT-2 encoding, the shard writer, die)

die = prepare.die
SAMPLE_10BT_TOKENS = 10_000_000_000  # the config's name: about 10B GPT-2 tokens
STATE = "fineweb_state.json"

_enc = None


def _init_worker(tokenizer=None, eot=None):
    global _enc
    _enc = prepare.load_tokenizer(tokenizer, eot)


def _tokenize(text):
    """one document -> its ids (uint16, or uint32 for a vocabulary beyond 65,536 tokens), EOT first (in a worker)"""
    toks = [_enc.eot] + _enc.encode(text)
    return np.array(toks, dtype=prepare.token_dtype(_enc.vocab_size))


def shard_path(out, i):
    return os.path.join(out, f"fineweb_{'val' if i == 0 else 'train'}_{i:06d}.bin")


def parquet_files(paths):
    files = []
    for p in paths:
        found = sorted(glob.glob(os.path.join(p, "*.parquet"))) if os.path.isdir(p) else sorted(glob.glob(p))
        if not found:
            die(f"{p}: no such Parquet file (or directory of *.parquet)")
        files += found
    return files


def local_source(files):
    """-> (documents iterator factory skip -> iterator of str, estimated tokens, description)"""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        die("reading Parquet needs pyarrow (pip install -r requirements/data.txt)")
    text_bytes = 0
    for f in files:
        pf = pq.ParquetFile(f)
        if "text" not in pf.schema_arrow.names:
            die(f"{f}: no column 'text' (columns: {', '.join(pf.schema_arrow.names)}); FineWeb's schema has one")
        col = pf.schema_arrow.names.index("text")
        md = pf.metadata
        text_bytes += sum(md.row_group(r).column(col).total_uncompressed_size for r in range(md.num_row_groups))

    def docs(skip):
        for f in files:
            pf = pq.ParquetFile(f)
            if skip >= pf.metadata.num_rows:  # whole file done: not even read
                skip -= pf.metadata.num_rows
                continue
            for batch in pf.iter_batches(columns=["text"], batch_size=1024):
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                rows = batch.column(0).to_pylist()[skip:]
                skip = 0
                for t in rows:
                    yield t if t is not None else ""
    # GPT-2 BPE averages a little over 4 bytes of English web text per token
    return docs, text_bytes // 4, "local:" + ",".join(os.path.abspath(f) for f in files)


def hub_source(edu):
    try:
        import datasets
    except ImportError:
        die("downloading FineWeb needs the datasets library (pip install -r requirements/fineweb.txt), "
            "or give local files with --local-parquet")
    name = "HuggingFaceFW/fineweb-edu" if edu else "HuggingFaceFW/fineweb"
    ds = datasets.load_dataset(name, name="sample-10BT", split="train")

    def docs(skip):
        for row in ds.select(range(skip, len(ds))) if skip else ds:
            yield row["text"]
    return docs, SAMPLE_10BT_TOKENS, f"hub:{name}/sample-10BT"


def read_state(out):
    p = os.path.join(out, STATE)
    if not os.path.isfile(p):
        return None
    try:
        with open(p, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(f"{p}: unreadable ({e}); delete {out} to start over")


def write_state(out, st):
    p = os.path.join(out, STATE)
    with open(p + ".tmp", "w", encoding="utf-8") as f:
        json.dump(st, f, indent=1)
        f.write("\n")
    os.replace(p + ".tmp", p)


def gb(n):
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def main(argv=None):
    ap = argparse.ArgumentParser(description="FineWeb sample-10BT -> GPT-2 token shards for scripts/run_gpt2_124M.sh")
    ap.add_argument("--edu", action="store_true", help="FineWeb-Edu instead of FineWeb")
    ap.add_argument("--local-parquet", nargs="+", metavar="FILE", help="local Parquet files (or directories, globs) "
                    "with a 'text' column, instead of the download")
    ap.add_argument("-o", "--out", help="output directory (default dev/data/fineweb10B or edu_fineweb10B)")
    ap.add_argument("--shard-size", type=int, default=100_000_000, help="tokens per shard (default 1e8)")
    ap.add_argument("--workers", type=int, default=0, help="tokenizing processes (default: all cores)")
    ap.add_argument("--stop-after", type=int, default=0, help="stop after writing N more shards (0 = run to the end)")
    ap.add_argument("--tokenizer", metavar="PATH", help="a Hugging Face tokenizer.json instead of GPT-2 (also writes "
                    "the decode table OUT/fineweb_tokenizer.bin)")
    ap.add_argument("--eot", metavar="TOKEN", help="with --tokenizer: the end-of-text token (prepare.py --eot)")
    a = ap.parse_args(argv)
    if a.eot is not None and a.tokenizer is None:
        die("--eot needs --tokenizer (GPT-2's end-of-text token is <|endoftext|>, id 50256)")
    if a.shard_size <= 0 or a.workers < 0 or a.stop_after < 0:
        die("--shard-size must be positive, --workers and --stop-after non-negative")
    here = os.path.dirname(os.path.abspath(__file__))
    out = a.out or os.path.join(here, "edu_fineweb10B" if a.edu else "fineweb10B")
    tk = prepare.load_tokenizer(a.tokenizer, a.eot)  # the tokenizer loads: fail before anything else
    version = prepare.shard_version(tk.vocab_size)
    width = 2 if version == prepare.SHARD_VERSION_U16 else 4
    tok_id = "gpt2" if a.tokenizer is None else "sha256:" + prepare.sha256_file(a.tokenizer)

    if a.local_parquet:
        docs, est_tokens, source = local_source(parquet_files(a.local_parquet))
    else:
        docs, est_tokens, source = None, SAMPLE_10BT_TOKENS, None  # known before the download starts

    st = read_state(out)
    want = {"source": source, "shard_size": a.shard_size, "tokenizer": tok_id}
    if st is not None and st.get("tokenizer", "gpt2") != tok_id:  # states of before --tokenizer are GPT-2's
        die(f"{out} holds shards of another tokenizer ({st.get('tokenizer', 'gpt2')}); give another -o or delete it")
    if st is not None:
        same_source = st["source"] == source if a.local_parquet else \
            st["source"].startswith("hub:") and ("fineweb-edu" in st["source"]) == a.edu
        if not same_source or st["shard_size"] != a.shard_size:
            die(f"{out} holds shards of another run ({st['source']}, shard size {st['shard_size']}); give another "
                f"-o or delete it")
    if st is not None and st.get("done"):
        print(f"{out}: complete ({st['shards']} shards, {st['tokens']} tokens); nothing to do")
        return
    if st is None and os.path.isdir(out) and glob.glob(os.path.join(out, "fineweb_*.bin")):
        die(f"{out} holds fineweb_*.bin shards but no {STATE}; give another -o or delete them")

    print(prepare.describe(tk))
    need = width * est_tokens
    os.makedirs(out, exist_ok=True)
    free = shutil.disk_usage(out).free
    print(f"disk: the shards need about {gb(need)} ({width} bytes x ~{est_tokens:,} tokens); {gb(free)} free in {out}"
          + ("" if a.local_parquet else "; the download cache (HF_HOME) needs its own tens of GB"))
    done_tokens = st["tokens"] if st else 0
    if free < need - width * done_tokens:
        die(f"{out}: {gb(free)} free, the remaining shards need about {gb(need - width * done_tokens)}")
    if tk.decode_table:
        table = os.path.join(out, "fineweb_tokenizer.bin")
        prepare.write_decode_table(table, tk.token_bytes(), tk.eot)
        print(f"wrote {table}: decode table of {tk.vocab_size} tokens (the trainer's --tokenizer)")

    if not a.local_parquet:
        docs, _, source = hub_source(a.edu)
        want["source"] = source
    if st is None:
        st = dict(want, shards=0, docs_done=0, doc_offset=0, tokens=0, done=False)
    else:
        print(f"resuming: {st['shards']} shards written, continuing at document {st['docs_done']} "
              f"(token {st['doc_offset']})")

    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    workers = a.workers or os.cpu_count() or 1
    bar = tqdm(total=est_tokens, initial=st["tokens"], unit="tok", unit_scale=True, desc="tokenizing") if tqdm else None
    buf = np.empty(a.shard_size, dtype=prepare.token_dtype(tk.vocab_size))
    n, written_now = 0, 0
    first_doc, first_offset = st["docs_done"], st["doc_offset"]
    with mp.Pool(workers, initializer=_init_worker, initargs=(a.tokenizer, a.eot)) as pool:
        for i, toks in enumerate(pool.imap(_tokenize, docs(first_doc), chunksize=16)):
            doc = first_doc + i
            pos = first_offset if i == 0 else 0  # the first document's leading tokens are in written shards
            while pos < len(toks):
                take = min(a.shard_size - n, len(toks) - pos)
                buf[n:n + take] = toks[pos:pos + take]
                n, pos = n + take, pos + take
                if bar is not None:
                    bar.update(take)
                if n == a.shard_size:
                    prepare.write_shard(shard_path(out, st["shards"]), buf, version)
                    st["shards"] += 1
                    st["tokens"] += n
                    st["docs_done"], st["doc_offset"] = (doc, pos) if pos < len(toks) else (doc + 1, 0)
                    write_state(out, st)
                    n, written_now = 0, written_now + 1
                    if a.stop_after and written_now == a.stop_after:
                        pool.terminate()
                        if bar is not None:
                            bar.close()
                        print(f"stopped after {written_now} shards ({st['shards']} in {out}); rerun to continue")
                        return
    if bar is not None:
        bar.close()
    if n > 0:
        prepare.write_shard(shard_path(out, st["shards"]), buf[:n], version)
        st["shards"] += 1
        st["tokens"] += n
    if st["shards"] < 2:
        die(f"{source}: only {st['tokens']} tokens, fewer than two shards of {a.shard_size} (validation and "
            f"training); give a smaller --shard-size")
    st["done"] = True
    st["docs_done"], st["doc_offset"] = None, None
    write_state(out, st)
    print(f"wrote {st['shards']} shards ({st['tokens']} tokens) to {out}: {shard_path(out, 0)} and "
          f"{os.path.join(out, 'fineweb_train_*.bin')}")


if __name__ == "__main__":
    main()
