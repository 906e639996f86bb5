#!/usr/bin/env python3
"""
dev/data/tinyshakespeare.py -- build the bundled default dataset, offline.

Reads dev/data/tinyshakespeare/input.txt (1,115,394 bytes; sha256-checked),
encodes the whole text as one document with the GPT-2 tokenizer (tiktoken,
built from the bundled dev/data/gpt2 files, see prepare.py), EOT (50256)
prepended, and writes llm.c token shards:
  dev/data/tinyshakespeare/tiny_shakespeare_val.bin    the first 32,768 tokens
  dev/data/tinyshakespeare/tiny_shakespeare_train.bin  the rest
Deterministic: rerunning gives byte-identical files (their sha256 is recorded in
dev/data/README.md and printed here). Exits 1 with a message on a bad input file.

--tokenizer PATH/tokenizer.json [--eot TOKEN] -o DIR: the same with a Hugging Face tokenizer
(prepare.py's --tokenizer) into DIR/tiny_shakespeare_{val,train}.bin (version 1 shards
when the vocabulary fits uint16, else version 2) and its decode table DIR/tokenizer.bin
(the trainer's --tokenizer); -o is required then, so the bundled GPT-2 shards stay as they are.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DIR = os.path.join(HERE, "tinyshakespeare")
INPUT = os.path.join(DIR, "input.txt")
INPUT_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
VAL_TOKENS = 32768


def main():
    ap = argparse.ArgumentParser(description="Tiny Shakespeare -> token shards (GPT-2, or --tokenizer tokenizer.json)")
    ap.add_argument("--tokenizer", metavar="PATH", help="a Hugging Face tokenizer.json instead of GPT-2 (needs -o)")
    ap.add_argument("--eot", metavar="TOKEN", help="with --tokenizer: the end-of-text token (prepare.py --eot)")
    ap.add_argument("-o", "--out", metavar="DIR", help="output directory (only with --tokenizer)")
    a = ap.parse_args()
    if (a.tokenizer is None) != (a.out is None) or (a.eot is not None and a.tokenizer is None):
        prepare.die("--tokenizer and -o DIR go together (--eot only with them); without them the bundled GPT-2 "
                    "shards in dev/data/tinyshakespeare are rebuilt")
    if not os.path.isfile(INPUT):
        prepare.die(f"{INPUT} missing (it is bundled with the repository; restore it with git)")
    got = prepare.sha256_file(INPUT)
    if got != INPUT_SHA256:
        prepare.die(f"{INPUT}: sha256 {got}, expected {INPUT_SHA256}")
    tk = prepare.load_tokenizer(a.tokenizer, a.eot)
    print(prepare.describe(tk))
    version = prepare.shard_version(tk.vocab_size)
    with open(INPUT, "r", encoding="utf-8") as f:
        text = f.read()
    tokens = [tk.eot] + tk.encode(text)
    val, train = tokens[:VAL_TOKENS], tokens[VAL_TOKENS:]
    d = a.out or DIR
    out = [(os.path.join(d, "tiny_shakespeare_val.bin"), val),
           (os.path.join(d, "tiny_shakespeare_train.bin"), train)]
    for path, toks in out:
        prepare.write_shard(path, toks, version)
        print(f"wrote {os.path.relpath(path)}: {len(toks):,} tokens, shard version {version}, "
              f"sha256 {prepare.sha256_file(path)}")
    if tk.decode_table:
        table = tk.token_bytes()
        path = os.path.join(d, "tokenizer.bin")
        prepare.write_decode_table(path, table, tk.eot)
        prepare.check_round_trip(tk, text, table)
        print(f"wrote {os.path.relpath(path)}: decode table of {tk.vocab_size} tokens (the trainer's --tokenizer)")
    print(f"total {len(tokens):,} tokens")


if __name__ == "__main__":
    main()
