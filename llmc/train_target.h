/*
 * llmc/train_target.h -- --target-val-loss X, time to quality (llmc/README.md, "The trainer"): a run stops after the
 * first validation (every -v steps) whose loss is at or below X, with the checkpoint a normal end writes, and says how
 * much training that took; a run that ends at -x without reaching X says so too.
 *
 * Units: losses are the validation's mean cross-entropy in nats per token (validate() in train_gpt.cu); tokens = step
 * x tokens per optimizer step (B x T x gradient accumulation x data-parallel processes), earlier runs of a resumed one
 * included, as the final "tokens seen"; time_s = seconds of this run's optimizer steps (the final line's "s of
 * training": forward, backward, reductions, update), without validation, evaluation, samples and checkpoints, and
 * without earlier runs of a resumed one.
 * Every process decides alike: the validation loss is already reduced over dp and pp (identical everywhere), and world
 * rank 0's answer is broadcast anyway, so no rounding of that reduction can make one process train on alone.
 * Output (world rank 0): one stdout line, "target val loss X reached at step S: N tokens, T s of training" or "target
 * val loss X not reached in S steps: best val loss B (step K)", and one log.jsonl record of kind "target":
 * {"kind":"target","step":S,"tokens":N,"time_s":T,"val_loss":V,"target":X,"reached":true} (not reached: val_loss is
 * the best seen, null if none, with "best_step"; "reached":false).
 * Errors: none here. The flag's rule (validation on: -v > 0 and a -j file) is train_config_check's: one line, exit 1.
 */
#ifndef LLMC_TRAIN_TARGET_H
#define LLMC_TRAIN_TARGET_H

#include <math.h>
#include <stdio.h>

#include "llmc/comm.h"
#include "llmc/logger.h"

typedef struct {
    float target;   /* X (nats per token); 0: off */
    int reached;    /* 1 once a validation reached it (the same on every process) */
    float val_loss; /* that validation's loss; NAN before */
    int step;       /* its step; -1 before */
} TargetRun;

static inline void target_init(TargetRun* t, float target) {
    t->target = target;
    t->reached = 0;
    t->val_loss = NAN;
    t->step = -1;
}

/* after a validation of loss vl at `step` (every process, collectively over world): 1 when the target is on and
 * world rank 0's vl is at or below it (then recorded in t), else 0 */
static inline int target_check(TargetRun* t, Comm* world, float vl, int step) {
    if (t->target <= 0.0f || t->reached) { return t->reached; }
    int hit = !isnan(vl) && vl <= t->target;
    comm_broadcast_host(world, &hit, sizeof(hit), 0);
    if (hit) { t->reached = 1; t->val_loss = vl; t->step = step; }
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

/* at the end of a run with the target on (world rank 0 prints and logs; lg is a no-op elsewhere): reached, or not
 * reached by `step` with the best validation loss seen (best, best_step; NAN, -1: none) */
static inline void target_report(const TargetRun* t, Logger* lg, int rank0, int step, long long tokens_per_step,
                                 double seconds, float best, int best_step) {
    if (t->target <= 0.0f) { return; }
    char fields[384], vl[32], tg[32], sec[32], tok[40];
    if (t->reached) {
        long long tokens = (long long)t->step * tokens_per_step;
        if (rank0) {
            printf("target val loss %.4f reached at step %d: %s tokens, %.1f s of training\n", (double)t->target, t->step,
                   target_group_digits(tok, sizeof(tok), tokens), seconds);
        }
        snprintf(fields, sizeof(fields), "\"tokens\":%lld,\"time_s\":%s,\"val_loss\":%s,\"target\":%s,\"reached\":true",
                 tokens, logger_json_number(sec, sizeof(sec), seconds), logger_json_number(vl, sizeof(vl), t->val_loss),
                 logger_json_number(tg, sizeof(tg), t->target));
        logger_log(lg, "target", t->step, fields);
        return;
    }
    if (rank0) {
        char b[64] = "no validation";
        if (!isnan(best)) { snprintf(b, sizeof(b), "best val loss %.4f (step %d)", (double)best, best_step); }
        printf("target val loss %.4f not reached in %d steps: %s\n", (double)t->target, step, b);
    }
    snprintf(fields, sizeof(fields), "\"tokens\":%lld,\"time_s\":%s,\"val_loss\":%s,\"best_step\":%d,\"target\":%s,"
             "\"reached\":false", (long long)step * tokens_per_step, logger_json_number(sec, sizeof(sec), seconds),
             logger_json_number(vl, sizeof(vl), best), best_step, logger_json_number(tg, sizeof(tg), t->target));
    logger_log(lg, "target", step, fields);
}

#endif /* LLMC_TRAIN_TARGET_H */
