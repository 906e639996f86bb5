#!/usr/bin/env python3
"""
scripts/plot_log.py -- plot train and val loss vs step from a trainer log, and the -h 1 evaluation beside them.

Input: DIR/log.jsonl written by train_gpt (llmc/README.md, "Command line and log"): one JSON object per
line with "kind" in train/val/sample/eval/config and "step"; train lines carry
"loss", val lines "val_loss", eval lines (-h 1, llmc/train_eval.h) "task" and "acc" per task, "centered" for the
task "suite": with eval lines a second panel beside the losses shows each task's accuracy and the suite's mean centered
accuracy vs step. Other kinds and unknown fields are ignored. A loss of null (a step whose loss
was not finite, logged with "skipped": true) is left out of the plot.
Output: a PNG (matplotlib, Agg backend; no display needed).

Usage: python3 scripts/plot_log.py out/log.jsonl -o loss.png [--title TEXT] [--logy]
Errors (missing file, no train/val points, malformed line) print one line and
exit with status 1.
"""
import argparse
import json
import os
import sys


def die(msg):
    print(f"plot_log.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_log(path):
    """Returns (train_steps, train_losses, val_steps, val_losses, evals) from a log.jsonl; evals maps a task name to
    its (steps, values): "acc" per task, "centered" for "suite"."""
    if not os.path.isfile(path):
        die(f"{path}: no such file (the trainer writes DIR/log.jsonl when run with -o DIR)")
    ts, tl, vs, vl, ev = [], [], [], [], {}
    with open(path, "r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                die(f"{path}:{lineno}: not valid JSON ({e.msg})")
            if not isinstance(rec, dict):
                die(f"{path}:{lineno}: expected a JSON object")
            kind = rec.get("kind")
            try:
                if kind in ("train", "val") and rec.get("loss", rec.get("val_loss", 0)) is None:
                    continue  # a non-finite loss (the step was skipped): no point to plot
                if kind == "train" and "loss" in rec:
                    ts.append(int(rec["step"])); tl.append(float(rec["loss"]))
                elif kind == "val" and "val_loss" in rec:
                    vs.append(int(rec["step"])); vl.append(float(rec["val_loss"]))
                elif kind == "eval" and "task" in rec:
                    key = "centered" if rec["task"] == "suite" else "acc"
                    if rec.get(key) is not None:
                        e = ev.setdefault(str(rec["task"]), ([], []))
                        e[0].append(int(rec["step"])); e[1].append(float(rec[key]))
            except (KeyError, TypeError, ValueError):
                die(f"{path}:{lineno}: {kind} record without a numeric step/loss")
    if not ts and not vs:
        die(f"{path}: no train or val loss records (empty log?)")
    return ts, tl, vs, vl, ev


def plot(path, out, title=None, logy=False):
    try:
        import matplotlib
    except ImportError:
        die("matplotlib is not installed for %s: apt-get install python3-matplotlib, or pip install matplotlib"
            % sys.executable)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ts, tl, vs, vl, ev = read_log(path)
    if ev:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 5), dpi=100)
        for task, (s, a) in sorted(ev.items()):
            ax2.plot(s, a, marker="o", markersize=3, label="suite (mean centered acc)" if task == "suite" else task,
                     linewidth=2.0 if task == "suite" else 1.0)
        ax2.set_xlabel("step")
        ax2.set_ylabel("accuracy")
        ax2.set_title("evaluation (-h 1)")
        ax2.grid(True, alpha=0.3)
        ax2.legend()
    else:
        fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    if ts:
        ax.plot(ts, tl, label="train loss", linewidth=1.0, alpha=0.8)
    if vs:
        ax.plot(vs, vl, label="val loss", marker="o", markersize=3, linewidth=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    if logy:
        ax.set_yscale("log")
    ax.set_title(title or path)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    print(f"wrote {out}: {len(ts)} train points, {len(vs)} val points, {len(ev)} eval curves"
          + (f"; last train {tl[-1]:.4f}" if tl else "") + (f", last val {vl[-1]:.4f}" if vl else ""))


def main():
    ap = argparse.ArgumentParser(description="Plot train/val loss from a log.jsonl.")
    ap.add_argument("log", help="path to log.jsonl")
    ap.add_argument("-o", "--out", default="loss.png", help="output PNG (default loss.png)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--logy", action="store_true", help="log-scale loss axis")
    a = ap.parse_args()
    plot(a.log, a.out, a.title, a.logy)


if __name__ == "__main__":
    main()
