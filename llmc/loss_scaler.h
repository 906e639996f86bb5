/*
 * llmc/loss_scaler.h -- dynamic loss scaling for FP16 training
 * (Micikevicius et al. 2018, "Mixed Precision Training", section 3.2; same policy as
 * torch.cuda.amp.GradScaler with backoff 0.5 and growth 2.0).
 *
 * The loss is multiplied by `scale` before the backward pass; gradients are divided by it
 * before the optimizer. After each backward pass the caller reports whether any gradient
 * was inf/NaN (found_inf, agreed across all ranks first):
 *   found_inf != 0 -> the step must be skipped; scale = max(scale/2, LOSS_SCALER_MIN) and the
 *                     good-step counter restarts; returns 1.
 *   found_inf == 0 -> good_steps++; when good_steps reaches growth_interval,
 *                     scale = min(scale*2, LOSS_SCALER_MAX) and good_steps = 0; returns 0.
 * Units: scale is a plain float multiplier (a power of two when initial_scale is one).
 * loss_scaler_init: initial_scale must be finite and in [1, 2^24], growth_interval >= 1,
 *   otherwise FATAL with the bad value and the expected range.
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_LOSS_SCALER_H
#define LLMC_LOSS_SCALER_H

#include "llmc/utils.h"

#define LOSS_SCALER_MIN 1.0f
#define LOSS_SCALER_MAX 16777216.0f /* 2^24 */

typedef struct {
    float scale;           /* current multiplier applied to the loss */
    int growth_interval;   /* consecutive good steps before doubling */
    int good_steps;        /* consecutive good steps since the last change */
    long long num_skipped; /* total steps skipped so far (for logging) */
} LossScaler;

/* see header comment */
static inline void loss_scaler_init(LossScaler* ls, float initial_scale, int growth_interval) {
    if (!(initial_scale >= LOSS_SCALER_MIN && initial_scale <= LOSS_SCALER_MAX)) {
        FATAL("initial loss scale must be in [1, 2^24 = 16777216], got %g", (double)initial_scale);
    }
    if (growth_interval < 1) { FATAL("loss-scale growth interval must be >= 1 step, got %d", growth_interval); }
    ls->scale = initial_scale;
    ls->growth_interval = growth_interval;
    ls->good_steps = 0;
    ls->num_skipped = 0;
}

/* returns 1 if this step's update must be skipped (found_inf), else 0; adjusts scale */
static inline int loss_scaler_update(LossScaler* ls, int found_inf) {
    if (found_inf) {
        float s = ls->scale * 0.5f;
        ls->scale = s < LOSS_SCALER_MIN ? LOSS_SCALER_MIN : s;
        ls->good_steps = 0;
        ls->num_skipped++;
        return 1;
    }
    ls->good_steps++;
    if (ls->good_steps >= ls->growth_interval) {
        float s = ls->scale * 2.0f;
        ls->scale = s > LOSS_SCALER_MAX ? LOSS_SCALER_MAX : s;
        ls->good_steps = 0;
    }
    return 0;
}

#endif /* LLMC_LOSS_SCALER_H */
