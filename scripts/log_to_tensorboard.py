#!/usr/bin/env python3
"""
scripts/log_to_tensorboard.py -- converts a trainer log (DIR/log.jsonl) into a TensorBoard event file.

Input: the JSONL log of train_gpt / train_gpt_cpu run with -o DIR (README.md, "The log"; llmc/logger.h): one JSON
object per line with "kind" and "step". Output: LOGDIR/events.out.tfevents.llmc (LOGDIR defaults to DIR/tb), written
with the `tensorboard` package's own protobufs and record writer (requirements/tensorboard.txt; scripts/install_deps.sh
installs it), so `tensorboard --logdir LOGDIR` shows it.

Scalars (tag <- record field; every number at the record's "step"; null, i.e. a non-finite value, is left out):
  train/<field>       every numeric field of a "train" record: loss, grad_norm, lr, ms, tokens_per_s, mfu (GPU),
                      bubble, grad_ratio, ... (moe_* fields go to moe/ below)
  moe/aux, moe/drop, moe/max_load            from moe_aux, moe_drop, moe_max_load
  moe/block<l>/aux|drop|z                    per MoE block l, from the "moe" list
  moe/block<l>/load_e<e>                     the fraction of routed tokens expert e received ("f")
  val/loss            from "val" records' val_loss
  eval/<task>/<field> "eval" records ({"kind":"eval","step":S,"task":"hellaswag","n":N,"acc":A,"acc_sum_logprob":A2};
                      "task":"suite" holds the suite score): every numeric field, n included
  <kind>/<field>      any other kind's numeric fields, nested objects flattened with "/" (e.g. profile/...)
"config" and "sample" records and strings are skipped. Wall times are not in the log: an event's wall time is the
conversion's start time plus the sum of the "ms" of the train records up to it, so TensorBoard's "relative" axis
shows training time.

Usage:
  python3 scripts/log_to_tensorboard.py out/log.jsonl [-o out/tb]
  python3 scripts/log_to_tensorboard.py out/log.jsonl --follow [--poll 2] [--idle-exit SECONDS]
Without --follow the event file is written to a temporary name and renamed over LOGDIR/events.out.tfevents.llmc
(a rerun replaces it: no duplicated points). With --follow the file is rewritten from the log's start, then new
complete lines are appended to it as the trainer writes them (checked every --poll seconds; a line without its
newline yet waits), until Ctrl-C or --idle-exit seconds without new lines. A log replaced under the same name (a
resumed run rewrites it: llmc/logger.h, logger_truncate_after_step) is reread from its start and points already
written (same tag and step) are not written again.
Errors (missing file, malformed line, tensorboard not installed) print one line, "error: ...", and exit with
status 1.
"""
import argparse
import json
import math
import os
import sys
import time

EVENT_NAME = "events.out.tfevents.llmc"


def die(msg):
    print(f"error: log_to_tensorboard.py: {msg}", file=sys.stderr)
    sys.exit(1)


def _num(v):
    """v as a float if it is a JSON number (not a bool) and finite, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _flatten(prefix, obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}/{k}", v, out)
    else:
        v = _num(obj)
        if v is not None:
            out.append((prefix, v))


def record_scalars(rec):
    """[(tag, value)] of one log record (see the module docstring); [] for kinds without scalars."""
    kind = rec.get("kind")
    out = []
    if kind in ("config", "sample") or not isinstance(kind, str):
        return out
    if kind == "train":
        for k, v in rec.items():
            if k in ("kind", "step", "moe"):
                continue
            if k.startswith("moe_"):
                _flatten("moe/" + k[4:], v, out)
            elif not isinstance(v, (dict, list)):
                _flatten("train/" + k, v, out)
        for blk in rec.get("moe") or []:
            if not isinstance(blk, dict) or _num(blk.get("block")) is None:
                continue
            b = int(blk["block"])
            for k in ("aux", "drop", "z"):
                if k in blk:
                    _flatten(f"moe/block{b}/{k}", blk[k], out)
            for e, f in enumerate(blk.get("f") or []):
                _flatten(f"moe/block{b}/load_e{e}", f, out)
    elif kind == "val":
        for k, v in rec.items():
            if k not in ("kind", "step"):
                _flatten("val/" + (k[4:] if k.startswith("val_") else k), v, out)
    elif kind == "eval":
        task = rec.get("task")
        task = task if isinstance(task, str) and task else "unknown"
        for k, v in rec.items():
            if k not in ("kind", "step", "task"):
                _flatten(f"eval/{task}/{k}", v, out)
    else:
        for k, v in rec.items():
            if k not in ("kind", "step"):
                _flatten(f"{kind}/{k}", v, out)
    return out


def parse_line(path, lineno, line):
    """the record of one log line, or None for a blank line; exits with one line on malformed input"""
    line = line.strip()
    if not line:
        return None
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        die(f"{path}:{lineno}: not valid JSON ({e.msg})")
    if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
        die(f"{path}:{lineno}: expected a JSON object with a string \"kind\"")
    if rec["kind"] not in ("config", "sample") and record_scalars(rec):
        step = rec.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            die(f"{path}:{lineno}: {rec['kind']} record without a non-negative integer \"step\"")
    return rec


class EventWriter:
    """one event file written with tensorboard's protobufs and TFRecord writer"""

    def __init__(self, path):
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.record_writer import RecordWriter
        except ImportError as e:
            die(f"the tensorboard package is not installed for {sys.executable} ({e}): "
                "pip install -r requirements/tensorboard.txt (scripts/install_deps.sh does)")
        self.event_pb2, self.summary_pb2 = event_pb2, summary_pb2
        self.f = open(path, "wb")
        self.w = RecordWriter(self.f)
        self.t0 = time.time()
        self.train_s = 0.0  # the sum of the train records' ms so far, in seconds
        self.seen = set()   # (tag, step) written (--follow rereads a replaced log)
        self.n = 0
        self.w.write(event_pb2.Event(wall_time=self.t0, file_version="brain.Event:2").SerializeToString())

    def add(self, rec):
        if rec.get("kind") == "train" and _num(rec.get("ms")) is not None and rec["ms"] > 0:
            self.train_s += rec["ms"] / 1e3
        step = rec.get("step")
        values = []
        for tag, v in record_scalars(rec):
            if (tag, step) not in self.seen:
                self.seen.add((tag, step))
                values.append(self.summary_pb2.Summary.Value(tag=tag, simple_value=v))
        if values:
            ev = self.event_pb2.Event(wall_time=self.t0 + self.train_s, step=step,
                                      summary=self.summary_pb2.Summary(value=values))
            self.w.write(ev.SerializeToString())
            self.n += len(values)

    def flush(self):
        self.w.flush()

    def close(self):
        self.w.close()


def convert(log, logdir):
    """the whole log to LOGDIR/events.out.tfevents.llmc, atomically (temporary name, then rename)"""
    os.makedirs(logdir, exist_ok=True)
    final = os.path.join(logdir, EVENT_NAME)
    # no "tfevents" in the temporary name: a running TensorBoard reads only files whose name holds it
    tmp = os.path.join(logdir, f".llmc-events.tmp{os.getpid()}")
    w = EventWriter(tmp)
    try:
        with open(log, "r", encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                rec = parse_line(log, lineno, line)
                if rec is not None:
                    w.add(rec)
        w.close()
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return final, w.n


def follow(log, logdir, poll, idle_exit):
    """converts the log, then appends its new lines as they come (see the module docstring)"""
    os.makedirs(logdir, exist_ok=True)
    final = os.path.join(logdir, EVENT_NAME)
    w = EventWriter(final)
    ino, pos, lineno, buf = None, 0, 0, b""
    last_new = time.time()
    print(f"following {log} -> {final} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            try:
                st = os.stat(log)
            except FileNotFoundError:
                st = None
            if st is not None and (st.st_ino != ino or st.st_size < pos):
                ino, pos, lineno, buf = st.st_ino, 0, 0, b""  # new or replaced log: reread (seen points skipped)
            got = False
            if st is not None and st.st_size > pos:
                with open(log, "rb") as f:
                    f.seek(pos)
                    data = f.read(st.st_size - pos)
                pos += len(data)
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    lineno += 1
                    rec = parse_line(log, lineno, line.decode("utf-8", errors="replace"))
                    if rec is not None:
                        w.add(rec)
                        got = True
                w.flush()
            now = time.time()
            if got:
                last_new = now
                print(f"{lineno} lines, {w.n} scalars", flush=True)
            elif idle_exit is not None and now - last_new >= idle_exit:
                break
            time.sleep(poll)
    except KeyboardInterrupt:
        pass
    w.close()
    return final, w.n


def main():
    ap = argparse.ArgumentParser(description="Convert a trainer log.jsonl to a TensorBoard event file.")
    ap.add_argument("log", help="DIR/log.jsonl written by the trainer with -o DIR")
    ap.add_argument("-o", "--logdir", default=None, help="TensorBoard log directory (default: DIR/tb)")
    ap.add_argument("--follow", action="store_true", help="keep converting new lines as the trainer writes them")
    ap.add_argument("--poll", type=float, default=2.0, help="--follow: seconds between checks (default 2)")
    ap.add_argument("--idle-exit", type=float, default=None,
                    help="--follow: stop after this many seconds without a new line (default: never)")
    a = ap.parse_args()
    if not (a.poll > 0):
        die(f"--poll {a.poll}: expected a positive number of seconds")
    if a.idle_exit is not None and not (a.idle_exit >= 0):
        die(f"--idle-exit {a.idle_exit}: expected a non-negative number of seconds")
    if not a.follow and not os.path.isfile(a.log):
        die(f"{a.log}: no such file (the trainer writes DIR/log.jsonl when run with -o DIR)")
    logdir = a.logdir or os.path.join(os.path.dirname(os.path.abspath(a.log)), "tb")
    try:
        if a.follow:
            path, n = follow(a.log, logdir, a.poll, a.idle_exit)
        else:
            path, n = convert(a.log, logdir)
    except OSError as e:
        die(f"{e.filename or logdir}: {e.strerror}")
    print(f"wrote {path}: {n} scalars (tensorboard --logdir {logdir})")


if __name__ == "__main__":
    main()
