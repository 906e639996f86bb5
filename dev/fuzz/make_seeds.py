"""dev/fuzz/make_seeds.py DIR -- small valid inputs for the fuzzers of dev/fuzz/ whose files Python writes simply:
DIR/tokenizer/seed (version 2, 40 tokens: the 26 letters, digits, space, punctuation, two merges; EOT 39) and
DIR/shard/seed (llm.c token shard, version 1, 41 tokens below 64) and DIR/shard/seed_v2 (version 2: the same 41
tokens as uint32, so mutations reach the 4-byte reader). The model and training-state seeds are
written by the harnesses themselves with the trainer's own writers (LLMC_FUZZ_WRITE_SEED)."""
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(os.path.join(out, "tokenizer"), exist_ok=True)
os.makedirs(os.path.join(out, "shard"), exist_ok=True)

tokens = [bytes([c]) for c in b"abcdefghijklmnopqrstuvwxyz0123456789 ,!"][:38] + [b"he", b"<|endoftext|>"]
header = [0] * 256
header[0], header[1], header[2], header[3] = 20240328, 2, len(tokens), len(tokens) - 1
with open(os.path.join(out, "tokenizer", "seed"), "wb") as f:
    f.write(struct.pack("<256i", *header))
    for t in tokens:
        f.write(bytes([len(t)]) + t)

n = 41
header = [0] * 256
header[0], header[1], header[2] = 20240520, 1, n
with open(os.path.join(out, "shard", "seed"), "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % n, *[(7 * i + 3) % 64 for i in range(n)]))
header[1] = 2
with open(os.path.join(out, "shard", "seed_v2"), "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dI" % n, *[(7 * i + 3) % 64 for i in range(n)]))
