#!/usr/bin/env python3
"""
dev/eval/reference_scorer.py -- an independent reference for the trainer's multiple-choice scores (-h 1).

It scores llm.c eval files (dev/data/eval_suite.py's output) with a Hugging Face model run by transformers itself,
sharing no code with llmc/eval.h, llmc/train_eval.h or the trainer, and compares the result, example by example,
with the trainer's `--eval-dump` file (dev/eval/check_reference.sh runs both on imported and exported models).

  score: loads HF_DIR with transformers (GPT2LMHeadModel or LlamaForCausalLM, by config.json's "architectures"; the
    directories scripts/export_hf.py writes and scripts/import_hf.py reads) on the CPU in --dtype (float64 by default,
    so the reference's own rounding is far below the trainer's fp32 rounding), reads the eval file (format version 1,
    uint16 words, or 2, uint32: header int32[256] = [20240522, version, N, longest bytes, ...], then per example START,
    size in bytes, index, label, K, the context length and tokens, K times an ending length and tokens), and scores
    each example as llm.c's completion-style HellaSwag evaluation: for each ending k the sequence context ++ ending;
    when it is longer than T + 1 tokens only its last T + 1 are kept (the trainer's rule for -t T); the loss of each
    ending token is the cross entropy of that token given all tokens before it (log-softmax over the whole vocabulary
    of the model's logits at the previous position); S_k = their sum, n_k = their count (the ending's length, or the
    T targets when the ending alone is longer), mean_k = S_k / n_k. Chosen: argmin mean_k ("pred", llm.c's acc) and
    argmin S_k = argmax summed log-probability ("pred_sum_logprob"); ties go to the lowest k (numpy's argmin).
    Writes one JSON line per example: {"task", "index", "label", "pred", "pred_sum_logprob", "mean_loss": [K],
    "sum_loss": [K], "n_tokens": [K]} (floats as Python's repr: every digit of the float64).
  compare: reads the trainer's dump (--eval-dump: {"step", "task", "index", "label", "pred", "pred_sum_logprob",
    "mean_loss", "sum_loss"}) and the reference's lines and, per task of the reference, checks: the same examples
    (indices and labels), the same choices by mean loss and by summed log-probability, and every ending's mean and
    summed loss within --rtol relative (default 1e-4). A differing choice is printed with the reference's gap between
    its two smallest mean (or sum) losses and whether that gap is below --rtol relative (a near tie, which rounding
    can flip) -- it fails either way. Prints TAP lines ("ok - ..." / "not ok - ...") with the number of examples and
    the worst relative differences, one line per task; exits 1 if any check failed.

Usage:
  python3 dev/eval/reference_scorer.py score HF_DIR EVAL.bin [EVAL2.bin ...] -t T [-n MAX_EXAMPLES] [--task NAME]
         [--dtype float64|float32] [--threads N] -o REF.jsonl
  python3 dev/eval/reference_scorer.py compare DUMP.jsonl REF.jsonl [REF2.jsonl ...] [--rtol 1e-4]
Needs torch and transformers (requirements/interop-check.txt); `compare` needs only the standard library.
Errors (a missing or malformed file, an unsupported architecture) print one line and exit with status 1.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

EVAL_MAGIC = 20240522
ARCHITECTURES = ("GPT2LMHeadModel", "LlamaForCausalLM")


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_eval_file(path):
    """[(label, ctx tokens, [ending tokens])] of an llm.c eval file, version 1 or 2, with the format's checks"""
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        die(f"eval file '{path}': {e.strerror}")
    if len(raw) < 1024:
        die(f"eval file '{path}': {len(raw)} bytes, shorter than the 1024-byte header")
    magic, version, n, _longest = struct.unpack_from("<4i", raw, 0)
    if magic != EVAL_MAGIC or version not in (1, 2):
        die(f"eval file '{path}': magic {magic} version {version}, expected {EVAL_MAGIC} and 1 or 2")
    wb = 2 if version == 1 else 4
    body = raw[1024:]
    if len(body) % wb:
        die(f"eval file '{path}': the body is not a whole number of {wb}-byte words")
    words = struct.unpack(f"<{len(body) // wb}{'H' if wb == 2 else 'I'}", body)
    start = (1 << (8 * wb)) - 1
    out, i = [], 0
    for idx in range(n):
        try:
            if words[i] != start or words[i + 2] != idx:
                die(f"eval file '{path}': example {idx} at word {i}: no START word or index {idx}")
            size, label, k, lc = words[i + 1], words[i + 3], words[i + 4], words[i + 5]
            ctx = list(words[i + 6:i + 6 + lc])
            j = i + 6 + lc
            ends = []
            for _ in range(k):
                le = words[j]
                ends.append(list(words[j + 1:j + 1 + le]))
                j += 1 + le
        except IndexError:
            j = len(words) + 1
        if j > len(words):
            die(f"eval file '{path}': example {idx} runs past the end of the file")
        if (j - i) * wb != size or not 0 <= label < k or lc < 1 or any(len(e) < 1 for e in ends) or len(ctx) != lc:
            die(f"eval file '{path}': example {idx}: size field, label, or a length does not match its words")
        out.append((label, ctx, ends))
        i = j
    if i != len(words):
        die(f"eval file '{path}': {len(words) - i} words after the last example")
    return out


def task_name(path):
    base = os.path.basename(path)
    for suffix in (".bin", "_val_u32", "_val"):
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[:-len(suffix)]
    return base


def load_model(hf_dir, dtype):
    import torch
    import transformers
    cfg_path = os.path.join(hf_dir, "config.json")
    try:
        arch = json.load(open(cfg_path)).get("architectures") or []
    except (OSError, ValueError) as e:
        die(f"{cfg_path}: cannot read a Hugging Face config ({e})")
    if len(arch) != 1 or arch[0] not in ARCHITECTURES:
        die(f"{cfg_path}: architectures {arch}, expected one of {', '.join(ARCHITECTURES)}")
    cls = getattr(transformers, arch[0])
    model = cls.from_pretrained(hf_dir, torch_dtype=torch.float32)  # bf16 files are upcast exactly
    model = model.to(dtype={"float64": torch.float64, "float32": torch.float32}[dtype]).eval()
    return model, arch[0]


def score_examples(model, examples, T, progress):
    """per example: (mean losses, summed losses, token counts) of its endings (see the module docstring)"""
    import torch
    base, head = model.base_model, model.get_output_embeddings()
    results = []
    with torch.no_grad():
        for ei, (label, ctx, ends) in enumerate(examples):
            seqs, n_end = [], []
            for e in ends:
                toks = (ctx + e)[-(T + 1):]
                seqs.append(toks)
                n_end.append(min(len(e), len(toks) - 1))  # the last n targets are the ending's tokens
            L = max(len(s) for s in seqs) - 1
            x = torch.zeros((len(seqs), L), dtype=torch.long)  # right padding: causal, so it never reaches a real row
            for r, s in enumerate(seqs):
                x[r, :len(s) - 1] = torch.tensor(s[:-1])
            hidden = base(input_ids=x).last_hidden_state  # final norm applied
            means, sums = [], []
            for r, s in enumerate(seqs):
                pos = torch.arange(len(s) - 1 - n_end[r], len(s) - 1)  # positions predicting the ending's tokens
                logp = torch.log_softmax(head(hidden[r, pos]), dim=-1)
                tgt = torch.tensor(s[len(s) - n_end[r]:])
                total = -logp[torch.arange(n_end[r]), tgt].sum().item()
                sums.append(total)
                means.append(total / n_end[r])
            results.append((means, sums, n_end))
            if progress and (ei + 1) % 100 == 0:
                print(f"  scored {ei + 1}/{len(examples)}", file=sys.stderr, flush=True)
    return results


def argmin(v):
    return min(range(len(v)), key=lambda k: (v[k], k))


def cmd_score(a):
    if a.t < 1:
        die(f"-t {a.t}: expected a positive sequence length")
    if a.task and len(a.eval_files) != 1:
        die("--task names one eval file's task; give one file or leave --task out")
    sets = []
    for path in a.eval_files:
        examples = read_eval_file(path)
        sets.append((a.task or task_name(path), examples[:a.n] if a.n > 0 else examples))
    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    model, arch = load_model(a.hf_dir, a.dtype)
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        for name, examples in sets:
            t0 = time.time()
            res = score_examples(model, examples, a.t, a.progress)
            for i, ((label, _, _), (means, sums, ns)) in enumerate(zip(examples, res)):
                f.write(json.dumps({"task": name, "index": i, "label": label, "pred": argmin(means),
                                    "pred_sum_logprob": argmin(sums), "mean_loss": means, "sum_loss": sums,
                                    "n_tokens": ns}) + "\n")
            print(f"reference: {arch} {a.dtype}, {name}: {len(examples)} examples scored in {time.time() - t0:.1f} s")
    os.replace(tmp, a.output)


def read_jsonl(path, what):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        die(f"{what} '{path}': {e.strerror}")
    except ValueError as e:
        die(f"{what} '{path}': not JSON lines ({e})")


def gap(v):
    """the two smallest values' difference and it relative to the smallest's magnitude"""
    s = sorted(v)
    return s[1] - s[0], (s[1] - s[0]) / max(abs(s[0]), 1e-30)


def cmd_compare(a):
    ours = {}
    for r in read_jsonl(a.dump, "trainer dump"):
        ours[(r["task"], r["index"])] = r
    refs = []
    for p in a.ref:
        refs += read_jsonl(p, "reference")
    tasks = []
    for r in refs:
        if r["task"] not in tasks:
            tasks.append(r["task"])
    failed = False
    for t in tasks:
        rows = [r for r in refs if r["task"] == t]
        n_ours = sum(1 for k in ours if k[0] == t)
        problems, worst_mean, worst_sum, smallest_gap, diff_lines = [], 0.0, 0.0, math.inf, []
        if n_ours != len(rows):
            problems.append(f"the dump has {n_ours} examples of {t}, the reference {len(rows)}")
        for ref in rows:
            o = ours.get((t, ref["index"]))
            if o is None:
                problems.append(f"example {ref['index']} missing from the dump")
                continue
            if o["label"] != ref["label"] or len(o["mean_loss"]) != len(ref["mean_loss"]):
                problems.append(f"example {ref['index']}: label or ending count differ")
                continue
            smallest_gap = min(smallest_gap, gap(ref["mean_loss"])[1])
            for key, w in (("mean_loss", "m"), ("sum_loss", "s")):
                for u, v in zip(o[key], ref[key]):
                    rel = abs(u - v) / abs(v) if v != 0 else abs(u - v)
                    if w == "m":
                        worst_mean = max(worst_mean, rel)
                    else:
                        worst_sum = max(worst_sum, rel)
            for key, loss in (("pred", "mean_loss"), ("pred_sum_logprob", "sum_loss")):
                if o[key] != ref[key]:
                    g, grel = gap(ref[loss])
                    diff_lines.append(f"example {ref['index']} {key}: ours {o[key]}, reference {ref[key]}; the "
                                      f"reference's two smallest {loss} differ by {g:.3g} ({grel:.2e} relative: "
                                      f"{'a near tie' if grel < a.rtol else 'NOT a near tie'})")
        ok_l = worst_mean <= a.rtol and worst_sum <= a.rtol
        ok = not problems and not diff_lines and ok_l
        print(f"{'ok' if ok else 'not ok'} - {t}: {len(rows)} examples; choices by mean loss and by summed "
              f"log-probability identical to the reference's ({len(diff_lines)} differ; smallest relative gap between "
              f"the best two mean losses {smallest_gap:.2e}); every ending's mean and summed loss within {a.rtol:g} "
              f"relative (worst: mean {worst_mean:.2e}, sum {worst_sum:.2e})"
              + ("" if not problems else "; " + "; ".join(problems[:5])))
        for line in diff_lines:
            print(f"#   {line}")
        failed |= not ok
    if not tasks:
        die("the reference files hold no examples")
    sys.exit(1 if failed else 0)


def main():
    ap = argparse.ArgumentParser(description="Reference multiple-choice scores with transformers, and the "
                                             "comparison with the trainer's --eval-dump.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="score an eval file with a Hugging Face model directory")
    s.add_argument("hf_dir")
    s.add_argument("eval_files", nargs="+", metavar="EVAL.bin")
    s.add_argument("-t", type=int, required=True, help="the trainer's -t: sequences keep their last T+1 tokens")
    s.add_argument("-n", type=int, default=0, help="the first N examples (0 = all; the trainer's --eval-max-examples)")
    s.add_argument("--task", default=None, help="one file's task name (default: the file's base name without .bin "
                   "and _val / _val_u32, as the trainer names it)")
    s.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    s.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    s.add_argument("--progress", action="store_true", help="a line on stderr every 100 examples")
    s.add_argument("-o", "--output", required=True)
    c = sub.add_parser("compare", help="compare a trainer --eval-dump with reference files")
    c.add_argument("dump")
    c.add_argument("ref", nargs="+")
    c.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    cmd_score(a) if a.cmd == "score" else cmd_compare(a)


if __name__ == "__main__":
    main()
