#!/usr/bin/env python3
"""
dev/data/write_tokenizer.py -- write dev/data/gpt2_tokenizer.bin (llm.c format), offline.

Source: the bundled dev/data/gpt2/encoder.json (OpenAI GPT-2 release; sha256-checked).
encoder.json maps byte-level "printable" strings to ids 0..50256; each character
stands for one byte via GPT-2's bytes_to_unicode table (bytes 33-126, 161-172,
174-255 map to themselves; the remaining 68 bytes map, in increasing order, to
U+0100, U+0101, ...). We invert that table to get each token's raw bytes.

Output: int32 header[256] = [20240328, 2, 50257 (vocab), 50256 (EOT), 0...];
then for each id 0..50256: uint8 length, length bytes. Written to name.tmp then
renamed. Exits 1 with a message if encoder.json is missing, altered, has a gap
in its ids, or a token longer than 255 bytes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gpt2_tokenizer.bin")
TOKENIZER_MAGIC, TOKENIZER_VERSION = prepare.TOKENIZER_MAGIC, prepare.TOKENIZER_VERSION


def byte_decoder():
    """Inverse of GPT-2's bytes_to_unicode: printable char -> byte value (prepare.gpt2_byte_decoder)."""
    return prepare.gpt2_byte_decoder()


def token_bytes():
    """List of the raw bytes of every token id 0..50256."""
    prepare.check_gpt2_files()
    with open(os.path.join(prepare.GPT2_DIR, "encoder.json"), "r", encoding="utf-8") as f:
        encoder = json.load(f)
    dec = byte_decoder()
    n = len(encoder)
    out = [None] * n
    for s, i in encoder.items():
        if not (0 <= i < n) or out[i] is not None:
            prepare.die(f"encoder.json: id {i} out of range or repeated")
        out[i] = bytes(dec[c] for c in s)
    return out


def main():
    toks = token_bytes()
    if len(toks) != 50257 or toks[prepare.EOT] != b"<|endoftext|>":
        prepare.die(f"encoder.json: {len(toks)} entries / EOT {toks[prepare.EOT]!r}, expected 50257 with <|endoftext|> at 50256")
    prepare.write_decode_table(OUT, toks, prepare.EOT)  # name.tmp, then renamed
    print(f"wrote {os.path.relpath(OUT)}: {len(toks)} tokens, {os.path.getsize(OUT):,} bytes, sha256 {prepare.sha256_file(OUT)}")


if __name__ == "__main__":
    main()
