/*
 * llmc/schedulers.h -- learning-rate schedules (host, float).
 *
 * lr_scheduler_init(s, type, learning_rate, warmup_iterations, train_num_batches,
 *                   final_learning_rate_frac, wsd_decay_frac)
 *   type: "cosine" | "linear" | "constant" | "wsd"; anything else -> FATAL listing the valid types.
 *   learning_rate: peak LR (>= 0). warmup_iterations >= 0. train_num_batches >= 1 (total steps).
 *   final_learning_rate_frac in [0,1]: floor = learning_rate * frac (ignored by "constant").
 *   wsd_decay_frac in [0,1]: fraction of all steps spent in WSD's final linear decay.
 *   Invalid numbers -> FATAL naming the parameter and the expected range.
 *
 * lr_scheduler_get(s, step), step 0-based:
 *   warmup (all types): step < warmup -> lr * (step+1) / warmup   (step 0 is non-zero)
 *   cosine  (Loshchilov & Hutter 2017, SGDR, without restarts):
 *           floor + (lr-floor) * 0.5*(1+cos(pi*p)),  p = (step-warmup)/(last-warmup), last = N-1,
 *           so the floor is reached exactly at step N-1.
 *   linear: lr - (lr-floor) * p, same p.
 *   wsd     (warmup-stable-decay, Hu et al. 2024 "MiniCPM"): lr until decay_start, then linear to
 *           the floor over the last round(wsd_decay_frac*N) steps, reaching it exactly at step N-1.
 *   constant: lr after warmup.
 *   Steps past N-1 return the floor (cosine/linear/wsd). Negative steps are treated as 0.
 *   If the decay phase would be empty (warmup >= N-1) the post-warmup value is the floor at N-1.
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>
#include "llmc/utils.h"

typedef enum { LR_COSINE = 0, LR_LINEAR = 1, LR_CONSTANT = 2, LR_WSD = 3 } LRScheduleType;

typedef struct {
    LRScheduleType type;
    const char* type_name;     /* static string: "cosine", ... */
    float learning_rate;       /* peak */
    int warmup_iterations;
    int train_num_batches;     /* N; last step is N-1 */
    float final_learning_rate_frac;
    float wsd_decay_frac;
    int decay_start;           /* first step of the decay phase (cosine/linear: warmup; wsd: later) */
} LRScheduler;

/* 1 if `type` names a schedule lr_scheduler_init accepts (cosine, linear, constant, wsd) */
static inline int lr_schedule_is_known(const char* type) {
    static const char* const names[] = {"cosine", "linear", "constant", "wsd"};
    for (int i = 0; i < 4; i++) { if (type != NULL && strcmp(type, names[i]) == 0) { return 1; } }
    return 0;
}

/* see header comment */
static inline void lr_scheduler_init(LRScheduler* s, const char* type, float learning_rate, int warmup_iterations,
                                     int train_num_batches, float final_learning_rate_frac, float wsd_decay_frac) {
    if (type == NULL) { type = "(null)"; }
    if (strcmp(type, "cosine") == 0) { s->type = LR_COSINE; s->type_name = "cosine"; }
    else if (strcmp(type, "linear") == 0) { s->type = LR_LINEAR; s->type_name = "linear"; }
    else if (strcmp(type, "constant") == 0) { s->type = LR_CONSTANT; s->type_name = "constant"; }
    else if (strcmp(type, "wsd") == 0) { s->type = LR_WSD; s->type_name = "wsd"; }
    else { FATAL("unknown learning-rate schedule '%s': expected one of cosine, linear, constant, wsd", type); }
    if (!(learning_rate >= 0.0f) || isinf(learning_rate)) {
        FATAL("learning rate must be a finite number >= 0, got %g", (double)learning_rate);
    }
    if (warmup_iterations < 0) { FATAL("warmup iterations must be >= 0, got %d", warmup_iterations); }
    if (train_num_batches < 1) { FATAL("number of training steps must be >= 1, got %d", train_num_batches); }
    if (!(final_learning_rate_frac >= 0.0f && final_learning_rate_frac <= 1.0f)) {
        FATAL("final learning-rate fraction must be in [0, 1], got %g", (double)final_learning_rate_frac);
    }
    if (!(wsd_decay_frac >= 0.0f && wsd_decay_frac <= 1.0f)) {
        FATAL("WSD decay fraction must be in [0, 1], got %g", (double)wsd_decay_frac);
    }
    s->learning_rate = learning_rate;
    s->warmup_iterations = warmup_iterations;
    s->train_num_batches = train_num_batches;
    s->final_learning_rate_frac = final_learning_rate_frac;
    s->wsd_decay_frac = wsd_decay_frac;
    s->decay_start = warmup_iterations;
    if (s->type == LR_WSD) {
        int decay_steps = (int)lround((double)wsd_decay_frac * (double)train_num_batches);
        int start = train_num_batches - decay_steps;
        s->decay_start = start > warmup_iterations ? start : warmup_iterations;
    }
}

/* learning rate at 0-based `step`; see header comment */
static inline float lr_scheduler_get(const LRScheduler* s, int step) {
    float lr = s->learning_rate;
    if (step < 0) { step = 0; }
    if (step < s->warmup_iterations) {
        return lr * (float)((double)(step + 1) / (double)s->warmup_iterations);
    }
    if (s->type == LR_CONSTANT) { return lr; }
    float floor_lr = lr * s->final_learning_rate_frac;
    int last = s->train_num_batches - 1;
    if (step >= last) { return floor_lr; }
    if (step < s->decay_start) { return lr; } /* WSD stable phase */
    double p = (double)(step - s->decay_start) / (double)(last - s->decay_start); /* in [0,1) */
    double w; /* weight of the peak over the floor */
    if (s->type == LR_COSINE) { w = 0.5 * (1.0 + cos(3.14159265358979323846 * p)); }
    else { w = 1.0 - p; }
    return (float)((double)floor_lr + ((double)lr - (double)floor_lr) * w);
}

#endif /* LLMC_SCHEDULERS_H */
