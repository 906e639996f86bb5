/*
 * llmc/progress.h -- elapsed time and the time left for the step line (train_gpt.cu, "eta 3m12s"), and the
 * duration format the trainer prints.
 *
 * Progress tracks the wall-clock seconds of one run of the training loop (this process, from the loop's start):
 *   progress_start(p, now)          at the start of the loop (before any step or validation)
 *   progress_step_done(p, now)      after every optimizer step, printed or not (--log-every > 1 keeps counting)
 *   progress_elapsed(p, now)        seconds since progress_start
 *   progress_eta(p, now, left)      seconds for `left` more steps: the mean wall time per step measured after the
 *                                   run's first step (which carries one-time warm-up: allocator, library handles,
 *                                   the first validation), times `left`; with only the first step done, that
 *                                   step's time. Everything the loop does between steps (validation, samples,
 *                                   checkpoints) is in the mean, so periodic work is spread over the steps.
 *                                   Returns -1 before the first step.
 * progress_format_duration(seconds, buf, size)  "0.4s" under 1 s, "12s", "3m12s", "1h02m", "2d03h" (rounded
 *                                   down to the unit shown); negative or non-finite -> "?". buf of >= 16 bytes.
 * Times are seconds as double (wall_seconds() in llmc/utils.h). Header-only, no globals.
 */
#ifndef LLMC_PROGRESS_H
#define LLMC_PROGRESS_H

#include <math.h>
#include <stdio.h>

typedef struct {
    double start;       /* progress_start's time */
    double first_done;  /* end of the first step of this run */
    int steps_done;     /* steps of this run so far */
} Progress;

static inline void progress_start(Progress* p, double now) {
    p->start = now;
    p->first_done = now;
    p->steps_done = 0;
}

static inline void progress_step_done(Progress* p, double now) {
    if (p->steps_done == 0) { p->first_done = now; }
    p->steps_done++;
}

static inline double progress_elapsed(const Progress* p, double now) { return now - p->start; }

static inline double progress_eta(const Progress* p, double now, int steps_left) {
    if (p->steps_done == 0) { return -1.0; }
    if (steps_left <= 0) { return 0.0; }
    double per_step = p->steps_done >= 2 ? (now - p->first_done) / (p->steps_done - 1) : (p->first_done - p->start);
    return per_step * steps_left;
}

static inline void progress_format_duration(double seconds, char* buf, size_t size) {
    if (!isfinite(seconds) || seconds < 0) { snprintf(buf, size, "?"); return; }
    if (seconds < 1.0) { snprintf(buf, size, "%.1fs", floor(seconds * 10.0) / 10.0); return; }
    long long s = (long long)seconds;
    if (s < 60) {
        snprintf(buf, size, "%llds", s);
    } else if (s < 3600) {
        snprintf(buf, size, "%lldm%02llds", s / 60, s % 60);
    } else if (s < 86400) {
        snprintf(buf, size, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
    } else {
        snprintf(buf, size, "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
    }
}

#endif /* LLMC_PROGRESS_H */
