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
"""
import hashlib
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
    if not os.path.isfile(INPUT):
        prepare.die(f"{INPUT} missing (it is bundled with the repository; restore it with git)")
    got = prepare.sha256_file(INPUT)
    if got != INPUT_SHA256:
        prepare.die(f"{INPUT}: sha256 {got}, expected {INPUT_SHA256}")
    enc = prepare.gpt2_encoding()
    with open(INPUT, "r", encoding="utf-8") as f:
        text = f.read()
    tokens = [prepare.EOT] + enc.encode_ordinary(text)
    val, train = tokens[:VAL_TOKENS], tokens[VAL_TOKENS:]
    out = [(os.path.join(DIR, "tiny_shakespeare_val.bin"), val),
           (os.path.join(DIR, "tiny_shakespeare_train.bin"), train)]
    for path, toks in out:
        prepare.write_shard(path, toks)
        print(f"wrote {os.path.relpath(path)}: {len(toks):,} tokens, sha256 {prepare.sha256_file(path)}")
    print(f"total {len(tokens):,} tokens")


if __name__ == "__main__":
    main()
