/*
 * llmc/train_target.h -- --target-val-loss X and --target-eval-score Y, time to quality (llmc/README.md, "The
 * trainer"): a run stops after the first validation (every -v steps) whose loss is at or below X, or the first -h 1
 * evaluation whose suite score (mean centered accuracy, llmc/train_eval.h) is at or above Y, with the checkpoint a
 * normal end writes, and says how much training that took; a run that ends at -x without reaching it says so too.
 *
 * Units: losses are the validation's mean cross-entropy in nats per token (validate() in train_gpt.cu); scores are
 * centered accuracies (0 = chance, 1 = every example right); tokens = step x tokens per optimizer step (B x T x
 * gradient accumulation x data-parallel processes), earlier runs of a resumed one included, as the final "tokens
 * seen"; time_s = seconds of this run's optimizer steps (the final line's "s of training": forward, backward,
 * reductions, update), without validation, evaluation, samples and checkpoints, and without earlier runs of a
 * resumed one.
 * Every process decides alike: the validation loss and the evaluation's counts are already reduced over dp and pp
 * (identical everywhere), and world rank 0's answer is broadcast anyway, so no rounding of that reduction can make
 * one process train on alone.
 * Output (world rank 0): one stdout line, "target val loss X reached at step S: N tokens, T s of training" (or
 * "target eval score Y reached ...") or "target val loss X not reached in S steps: best val loss B (step K)", and
 * one log.jsonl record of kind "target": {"kind":"target","step":S,"tokens":N,"time_s":T,"metric":"val_loss",
 * "val_loss":V,"target":X,"reached":true} (--target-eval-score: "metric":"eval_score" and "eval_score":V; not
 * reached: the best value seen, null if none, with "best_step"; "reached":false). Both flags on: the first reached
 * ends the run, and one record per flag is logged.
 * Errors: none here. The flags' rules (validation, resp. -h 1, on) are train_config_check's: one line, exit 1.
 */
#ifndef LLMC_TRAIN_TARGET_H
#define LLMC_TRAIN_TARGET_H

#include <math.h>
#include <stdio.h>

#include "llmc/comm.h"
#include "llmc/logger.h"

/* one target: a metric, its threshold, the direction, and what was seen */
typedef struct {
    const char* metric; /* "val_loss" or "eval_score": the record's key and the line's words */
    const char* words;  /* "val loss" or "eval score" */
    float target;       /* X; 0: off */
    int below;          /* 1: reached at value <= X (a loss), 0: at value >= X (a score) */
    int reached;        /* 1 once a measurement reached it (the same on every process) */
    float value;        /* that measurement; NAN before */
    int step;           /* its step; -1 before */
    float best;         /* the best value seen (NAN: none) and its step */
    int best_step;
} Target;

typedef struct {
    Target val;         /* --target-val-loss */
    Target eval;        /* --target-eval-score */
} TargetRun;

static inline void target_one_init(Target* t, const char* metric, const char* words, float target, int below) {
    t->metric = metric;
    t->words = words;
    t->target = target;
    t->below = below;
    t->reached = 0;
    t->value = NAN;
    t->step = -1;
    t->best = NAN;
    t->best_step = -1;
}

static inline void target_init(TargetRun* t, float val_loss, float eval_score) {
    target_one_init(&t->val, "val_loss", "val loss", val_loss, 1);
    target_one_init(&t->eval, "eval_score", "eval score", eval_score, 0);
}

/* 1 once either target was reached */
static inline int target_reached(const TargetRun* t) { return t->val.reached || t->eval.reached; }

/* after a measurement v at `step` (every process, collectively over world; NAN: none was due): 1 when target t is on
 * and world rank 0's v reaches it (then recorded), else 0 */
static inline int target_check(Target* t, Comm* world, float v, int step) {
    if (t->target <= 0.0f || t->reached || isnan(v)) { return t->reached; }
    if (isnan(t->best) || (t->below ? v < t->best : v > t->best)) { t->best = v; t->best_step = step; }
    int hit = t->below ? v <= t->target : v >= t->target;
    comm_broadcast_host(world, &hit, sizeof(hit), 0);
    if (hit) { t->reached = 1; t->value = v; t->step = step; }
    return hit;
}

/* n with thousands separators ("1,966,080") into buf */
static inline const char* target_group_digits(char* buf, size_t cap, long long n) {
    char raw[32];
    int len = snprintf(raw, sizeof(raw), "%lld", n < 0 ? -n : n), o = 0;
    if (n < 0 && o + 1 < (int)cap) { buf[o++] = '-'; }
    for (int i = 0; i < len && o + 2 < (int)cap; i++) {
        if (i > 0 && (len - i) % 3 == 0) { buf[o++] = ','; }
        buf[o++] = raw[i];
    }
    buf[o] = '\0';
    return buf;
}

/* the end of a run for target t (world rank 0 prints; lg is a no-op elsewhere): reached, or not by `step` */
static inline void target_report_one(const Target* t, Logger* lg, int rank0, int step, long long tokens_per_step,
                                     double seconds) {
    if (t->target <= 0.0f) { return; }
    char fields[384], v[32], tg[32], sec[32], tok[40];
    int at = t->reached ? t->step : step;
    long long tokens = (long long)at * tokens_per_step;
    if (rank0 && t->reached) {
        printf("target %s %.4f reached at step %d: %s tokens, %.1f s of training\n", t->words, (double)t->target,
               t->step, target_group_digits(tok, sizeof(tok), tokens), seconds);
    } else if (rank0) {
        char b[64] = "no measurement";
        if (!isnan(t->best)) { snprintf(b, sizeof(b), "best %s %.4f (step %d)", t->words, (double)t->best, t->best_step); }
        printf("target %s %.4f not reached in %d steps: %s\n", t->words, (double)t->target, step, b);
    }
    int n = snprintf(fields, sizeof(fields), "\"tokens\":%lld,\"time_s\":%s,\"metric\":\"%s\",\"%s\":%s,", tokens,
                     logger_json_number(sec, sizeof(sec), seconds), t->metric, t->metric,
                     logger_json_number(v, sizeof(v), t->reached ? t->value : t->best));
    if (!t->reached) { n += snprintf(fields + n, sizeof(fields) - (size_t)n, "\"best_step\":%d,", t->best_step); }
    snprintf(fields + n, sizeof(fields) - (size_t)n, "\"target\":%s,\"reached\":%s",
             logger_json_number(tg, sizeof(tg), t->target), t->reached ? "true" : "false");
    logger_log(lg, "target", at, fields);
}

/* at the end of a run: each target that is on */
static inline void target_report(const TargetRun* t, Logger* lg, int rank0, int step, long long tokens_per_step,
                                 double seconds) {
    target_report_one(&t->val, lg, rank0, step, tokens_per_step, seconds);
    target_report_one(&t->eval, lg, rank0, step, tokens_per_step, seconds);
}

#endif /* LLMC_TRAIN_TARGET_H */
