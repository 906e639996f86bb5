#!/usr/bin/env python3
"""
dev/data/prepare.py -- turn a local text file into llm.c token shards.

Input: a .txt file (the whole file is one document), a .jsonl file (one JSON object per line, the
document in the field --text-field, default "text"), or a .parquet file (column
--text-field; needs pyarrow).
Tokenizer: by default tiktoken's GPT-2 encoding built offline from the bundled files
dev/data/gpt2/{vocab.bpe,encoder.json} (sha256-checked), with the GPT-2 split
regex; no network access. The EOT token (50256) is written before every document.
--tokenizer PATH/tokenizer.json: any Hugging Face tokenizer file instead (the `tokenizers`
library, offline: the file is read, nothing is downloaded), encoded without its
post-processor's special tokens; its end-of-text token (--eot TOKEN, default the first of
EOT_CANDIDATES it has) is written before every document.
Output: int32 header[256] = [20240520, version, ntok, 0...] then ntok token ids:
version 1 (llm.c's format) uint16 ids when every id fits (vocabulary <= 65,536 tokens),
version 2 uint32 ids otherwise (llmc/README.md, "File formats"). The first --val-tokens
tokens go to OUT_val_000000.bin (one shard), the rest to OUT_train_000000.bin,
_000001.bin, ... of at most --shard-size tokens each. With --tokenizer, also the decode
table OUT_tokenizer.bin (the trainer's --tokenizer file: each id's bytes, for samples).
Prints the vocabulary size and the shard version chosen.

Usage:
  python3 dev/data/prepare.py input.jsonl -o data/mydata/mydata [--text-field text]
         [--val-tokens 32768] [--shard-size 100000000] [--tokenizer tokenizer.json [--eot TOKEN]]
Errors (missing file, unknown extension, bad JSON line, missing field, too few
tokens, a tokenizer file that does not load, no end-of-text token) print one line
naming the file and exit with status 1.
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
SHARD_MAGIC = 20240520
SHARD_VERSION_U16, SHARD_VERSION_U32 = 1, 2  # llm.c's uint16 ids; uint32 ids (vocabularies over 65,536 tokens)
SHARD_VERSION = SHARD_VERSION_U16  # GPT-2's
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2  # the decode table (llmc/tokenizer.h)
# end-of-text tokens looked for, in this order, in a tokenizer.json without --eot
EOT_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>", "[SEP]")


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


def shard_version(vocab_size):
    """the shard version for a vocabulary of vocab_size ids 0..V-1: 1 (uint16) when every id fits, else 2 (uint32)"""
    return SHARD_VERSION_U16 if vocab_size <= 1 << 16 else SHARD_VERSION_U32


def token_dtype(vocab_size):
    """numpy dtype holding the ids of a vocabulary of vocab_size tokens: uint16 or uint32"""
    return np.uint16 if shard_version(vocab_size) == SHARD_VERSION_U16 else np.uint32


def write_shard(path, tokens, version=SHARD_VERSION_U16):
    """Writes a token shard: version 1 (llm.c's, uint16 ids) or 2 (uint32 ids); to path.tmp, then renamed."""
    tokens = np.asarray(tokens)
    if version not in (SHARD_VERSION_U16, SHARD_VERSION_U32):
        die(f"{path}: shard version {version}, expected 1 or 2")
    top = (1 << 16) if version == SHARD_VERSION_U16 else (1 << 31)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= top):
        die(f"{path}: token ids {tokens.min()}..{tokens.max()} out of range for shard version {version} (ids < {top})")
    header = np.zeros(256, dtype="<i4")
    header[:3] = [SHARD_MAGIC, version, tokens.size]
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2" if version == SHARD_VERSION_U16 else "<u4").tobytes())
    os.replace(path + ".tmp", path)


def read_shard(path):
    """The token ids of a shard of either version as a numpy array (uint16 or uint32); dies on a bad file."""
    size = os.path.getsize(path)
    h = np.fromfile(path, dtype="<i4", count=256) if size >= 1024 else np.zeros(0, dtype="<i4")
    if h.size < 256 or h[0] != SHARD_MAGIC or h[1] not in (SHARD_VERSION_U16, SHARD_VERSION_U32):
        die(f"{path}: not a token shard (magic {SHARD_MAGIC}, version 1 or 2)")
    width = 2 if h[1] == SHARD_VERSION_U16 else 4
    if size != 1024 + width * int(h[2]):
        die(f"{path}: {size} bytes, expected {1024 + width * int(h[2])} = 1024 + {width} * {h[2]} tokens")
    return np.fromfile(path, dtype="<u2" if width == 2 else "<u4", offset=1024)


def write_decode_table(path, token_bytes, eot):
    """Writes the trainer's decode table (llmc/tokenizer.h, version 2): for each id its bytes, 1..255 of them;
    to path.tmp, then renamed. Dies naming the id of a token it cannot hold."""
    header = np.zeros(256, dtype="<i4")
    header[:4] = [TOKENIZER_MAGIC, TOKENIZER_VERSION, len(token_bytes), eot]
    body = bytearray()
    for i, b in enumerate(token_bytes):
        if not 0 < len(b) < 256:
            die(f"{path}: token {i} has {len(b)} bytes; the decode table holds 1..255 bytes per token")
        body.append(len(b))
        body += b
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(header.tobytes())
        f.write(bytes(body))
    os.replace(path + ".tmp", path)


def gpt2_byte_decoder():
    """Inverse of GPT-2's bytes_to_unicode (byte-level BPE's printable alphabet): char -> byte value. Bytes 33-126,
    161-172 and 174-255 stand for themselves, the other 68 for U+0100, U+0101, ... in increasing order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    dec, extra = {}, 0
    for b in range(256):
        if b in keep:
            dec[chr(b)] = b
        else:
            dec[chr(256 + extra)] = b
            extra += 1
    return dec


class TextTokenizer:
    """A tokenizer as the preparation scripts use it: name, vocab_size (ids 0..V-1), eot (id written before every
    document), encode(str) -> list of ids, token_bytes() -> the bytes of every id (the decode table), and
    decode_table (True when the trainer needs a decode table written beside the shards: not for GPT-2, whose
    dev/data/gpt2_tokenizer.bin is bundled)."""

    def __init__(self, name, vocab_size, eot, encode, token_bytes, decode_table):
        self.name, self.vocab_size, self.eot = name, vocab_size, eot
        self.encode, self.token_bytes, self.decode_table = encode, token_bytes, decode_table


def gpt2_tokenizer():
    """GPT-2's encoding (tiktoken, bundled files) as a TextTokenizer"""
    enc = gpt2_encoding()
    return TextTokenizer("GPT-2 (tiktoken, bundled dev/data/gpt2)", 50257, EOT, enc.encode_ordinary,
                         lambda: [enc.decode_single_token_bytes(i) for i in range(50257)], False)


def _decoder_types(node):
    """the "type" names of a tokenizer.json decoder, with those inside a Sequence"""
    if not isinstance(node, dict):
        return []
    out = [node.get("type")]
    for d in node.get("decoders") or []:
        out += _decoder_types(d)
    return out


def hf_tokenizer(path, eot_token=None):
    """A Hugging Face tokenizer.json (the `tokenizers` library, offline) as a TextTokenizer. The vocabulary size is
    the largest id + 1 (added tokens included; an unused id in a gap decodes to "<unused ID>"). A token's bytes: an
    added token's content; with a ByteLevel decoder each character through GPT-2's byte alphabet; with a Metaspace
    decoder its replacement character (default U+2581) as a space and, with ByteFallback, <0xNN> as that byte;
    otherwise the token's UTF-8. Dies with one line when the file does not load or has no end-of-text token."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        die("--tokenizer needs the tokenizers library (pip install -r requirements/data.txt)")
    if not os.path.isfile(path):
        die(f"{path}: no such tokenizer file (--tokenizer expects a Hugging Face tokenizer.json)")
    try:
        tok = Tokenizer.from_file(path)
        with open(path, "r", encoding="utf-8") as f:
            spec = json.load(f)
    except Exception as e:  # the library raises its own exception type for a malformed file
        die(f"{path}: not a Hugging Face tokenizer.json the tokenizers library can load ({str(e).splitlines()[0][:200]})")
    vocab = tok.get_vocab(with_added_tokens=True)
    if not vocab:
        die(f"{path}: the tokenizer has an empty vocabulary")
    V = max(vocab.values()) + 1
    if V > 1 << 31:
        die(f"{path}: largest token id {V - 1} does not fit a shard (ids < 2^31)")
    if eot_token is None:
        eot_token = next((c for c in EOT_CANDIDATES if c in vocab), None)
        if eot_token is None:
            die(f"{path}: none of the end-of-text tokens {', '.join(EOT_CANDIDATES)} is in the vocabulary; name the "
                f"token written before every document with --eot TOKEN")
    elif eot_token not in vocab:
        die(f"{path}: --eot '{eot_token}' is not a token of this tokenizer")
    eot = vocab[eot_token]
    added = {a["id"]: a["content"] for a in spec.get("added_tokens") or []}
    types = _decoder_types(spec.get("decoder"))
    meta = next((d for d in [spec.get("decoder")] + list((spec.get("decoder") or {}).get("decoders") or [])
                 if isinstance(d, dict) and d.get("type") == "Metaspace"), None)

    def token_bytes():
        byte_dec = gpt2_byte_decoder()
        by_id = {i: t for t, i in vocab.items()}
        out = []
        for i in range(V):
            t = by_id.get(i)
            if t is None:
                out.append(f"<unused {i}>".encode())
            elif i in added:
                out.append(added[i].encode("utf-8"))
            elif "ByteLevel" in types:
                if all(c in byte_dec for c in t):
                    out.append(bytes(byte_dec[c] for c in t))
                else:  # not of the byte alphabet: as written
                    out.append(t.encode("utf-8"))
            elif meta is not None or "ByteFallback" in types:
                if "ByteFallback" in types and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                    out.append(bytes([int(t[3:5], 16)]))
                else:
                    rep = (meta or {}).get("replacement", "\u2581")
                    out.append(t.replace(rep, " ").encode("utf-8"))
            else:
                out.append(t.encode("utf-8"))
        return out

    def encode(text):
        return tok.encode(text, add_special_tokens=False).ids

    return TextTokenizer(f"{path} (tokenizers)", V, eot, encode, token_bytes, True)


def load_tokenizer(path=None, eot_token=None):
    """GPT-2's encoding (path None) or the tokenizer.json at path, as a TextTokenizer"""
    return gpt2_tokenizer() if path is None else hf_tokenizer(path, eot_token)


def describe(tk):
    """the line every preparation script prints: the tokenizer, its vocabulary size and the shard version chosen"""
    v = shard_version(tk.vocab_size)
    return (f"tokenizer {tk.name}: vocabulary {tk.vocab_size} tokens, EOT id {tk.eot}; shard version {v} "
            f"({'uint16' if v == SHARD_VERSION_U16 else 'uint32'} token ids)")


def check_round_trip(tk, text, table):
    """One warning line when the decode table's bytes of text's tokens are not text's bytes (a tokenizer whose decoder
    is no per-token byte map, e.g. WordPiece: samples then print approximately); True when they are."""
    ids = tk.encode(text[:20000])
    got = b"".join(table[i] for i in ids)
    if got != text[:20000].encode("utf-8"):
        print(f"warning: the decode table does not give back the text byte for byte for this tokenizer "
              f"({tk.name}): samples will print approximately", file=sys.stderr)
        return False
    return True


def tokenize(path, text_field, tk, progress=True):
    """All tokens of the file (TextTokenizer tk) as a uint16 or uint32 array (token_dtype), EOT before each document."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    size = os.path.getsize(path)
    bar = tqdm(total=size, unit="B", unit_scale=True, desc="tokenizing") if (tqdm and progress and size > (8 << 20)) else None
    chunks, ndocs = [], 0
    dtype = token_dtype(tk.vocab_size)
    for doc in iter_documents(path, text_field):
        toks = [tk.eot] + tk.encode(doc)
        chunks.append(np.array(toks, dtype=dtype))
        ndocs += 1
        if bar is not None:
            bar.update(len(doc.encode("utf-8")))
    if bar is not None:
        bar.close()
    if ndocs == 0:
        die(f"{path}: no documents found")
    return np.concatenate(chunks), ndocs


def prepare(path, out_prefix, text_field="text", val_tokens=32768, shard_size=100_000_000, progress=True,
            tokenizer=None, eot_token=None):
    """Tokenizes path (GPT-2, or the tokenizer.json `tokenizer`) and writes out_prefix_val_000000.bin and
    _train_NNNNNN.bin (and, for a tokenizer.json, the decode table out_prefix_tokenizer.bin); returns the shards'
    (path, tokens)."""
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    if shard_size <= 0 or val_tokens < 0:
        die("--shard-size must be positive and --val-tokens non-negative")
    tk = load_tokenizer(tokenizer, eot_token)
    print(describe(tk))
    version = shard_version(tk.vocab_size)
    tokens, ndocs = tokenize(path, text_field, tk, progress)
    if tokens.size <= val_tokens:
        die(f"{path}: only {tokens.size} tokens, not more than --val-tokens {val_tokens}")
    written = []
    val_path = f"{out_prefix}_val_000000.bin"
    write_shard(val_path, tokens[:val_tokens], version)
    written.append((val_path, val_tokens))
    train = tokens[val_tokens:]
    for i, start in enumerate(range(0, train.size, shard_size)):
        p = f"{out_prefix}_train_{i:06d}.bin"
        part = train[start:start + shard_size]
        write_shard(p, part, version)
        written.append((p, part.size))
    print(f"{path}: {ndocs} documents, {tokens.size} tokens")
    for p, n in written:
        print(f"  wrote {p}: {n} tokens, shard version {version}")
    if tk.decode_table:
        table = tk.token_bytes()
        table_path = f"{out_prefix}_tokenizer.bin"
        write_decode_table(table_path, table, tk.eot)
        first = next(iter_documents(path, text_field))
        check_round_trip(tk, first, table)
        print(f"  wrote {table_path}: decode table of {tk.vocab_size} tokens (train with --tokenizer {table_path} "
              f"and a model of vocabulary {tk.vocab_size}, e.g. -e L12:C768:NH12:V{tk.vocab_size})")
    return written


def main():
    ap = argparse.ArgumentParser(description="Tokenize a local .txt/.jsonl/.parquet file into token shards (GPT-2 BPE or "
                                 "a Hugging Face tokenizer.json, offline).")
    ap.add_argument("input", help="path to a .txt, .jsonl or .parquet file")
    ap.add_argument("-o", "--out", required=True, help="output prefix, e.g. data/mydata/mydata")
    ap.add_argument("--text-field", default="text", help="JSON field / parquet column holding the text (default: text)")
    ap.add_argument("--val-tokens", type=int, default=32768, help="first N tokens go to the val shard (default 32768)")
    ap.add_argument("--shard-size", type=int, default=100_000_000, help="max tokens per train shard (default 1e8)")
    ap.add_argument("--tokenizer", metavar="PATH", help="a Hugging Face tokenizer.json instead of GPT-2 (also writes "
                    "the decode table OUT_tokenizer.bin)")
    ap.add_argument("--eot", metavar="TOKEN", help="with --tokenizer: the token written before every document "
                    f"(default: the first of {', '.join(EOT_CANDIDATES)} in its vocabulary)")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args()
    if a.eot is not None and a.tokenizer is None:
        die("--eot needs --tokenizer (GPT-2's end-of-text token is <|endoftext|>, id 50256)")
    prepare(a.input, a.out, a.text_field, a.val_tokens, a.shard_size, not a.no_progress, a.tokenizer, a.eot)


if __name__ == "__main__":
    main()
