/*
 * llmc/rope_table.h -- the host-side cos/sin table of rotary position embedding (RoPE; Su et al. 2021,
 * "RoFormer: Enhanced Transformer with Rotary Position Embedding"), shared by both backends' rope kernels
 * (llmc/cpu/rope.h, llmc/cuda/rope.cuh; contract in llmc/backend.h, "rope"). Backend-neutral: the common subset of
 * C11 and C++17, no floatX, no device memory; the caller copies the table to the device (dev_memcpy_h2d).
 *
 *   rope_inv_freq(i, hs, theta, scaling) -> double    inverse frequency (radians per position) of pair i < hs/2
 *   rope_table(float* host_table(maxT, hs/2, 2), int maxT, int hs, float theta, const RopeScaling* scaling or NULL)
 *       host_table[(t*(hs/2) + i)*2 + 0] = cos(t * inv_freq[i]),  [... + 1] = sin(t * inv_freq[i]),  t < maxT
 *       each computed in double and rounded once to fp32 (|error| <= 2^-25 + ~t * 2^-53 ~ 3e-8; the rotation's
 *       angle is never formed in fp32, so large positions lose no accuracy).
 *   rope_check_shape(B, T, NH, KV, hs, pos0)          the kernels' argument check (exits with one line)
 *
 * Frequencies: inv_freq[i] = theta^(-2i/hs) (Su et al. 2021; theta = 10000 there, 500000 in Llama 3), for
 * the pairing (i, i + hs/2) of the "rotate_half" convention (GPT-NeoX, Hugging Face Llama). Optional Llama-3
 * frequency scaling (Hugging Face transformers' rope_type "llama3", function _compute_llama3_parameters; Meta's
 * Llama 3.1 release), with L = original_max_pos, wavelen = 2 pi / inv_freq:
 *     wavelen <  L / high_freq_factor                     inv_freq unchanged (high frequencies)
 *     wavelen >  L / low_freq_factor                      inv_freq / factor   (low frequencies)
 *     otherwise (both ends inclusive)                     (1 - s) inv_freq / factor + s inv_freq,
 *                                                         s = (L / wavelen - low_freq_factor)
 *                                                             / (high_freq_factor - low_freq_factor)
 * (Hugging Face computes inv_freq and the scaling in fp32 torch tensors; here everything is double, so a table
 * entry may differ from theirs by fp32 rounding of the frequency, ~1e-7 relative in the angle.)
 * Llama 3.1 8B: theta 500000, factor 8, low_freq_factor 1, high_freq_factor 4, original_max_pos 8192.
 *
 * Errors: hs odd or < 2, maxT < 1, theta not a finite number > 1, or scaling with factor > 0 and
 * (original_max_pos < 1, low_freq_factor <= 0, high_freq_factor <= low_freq_factor) exit with one line (FATAL).
 * scaling == NULL or scaling->factor == 0: no scaling. A negative or non-finite factor is an error too.
 */
#ifndef LLMC_ROPE_TABLE_H
#define LLMC_ROPE_TABLE_H

#include <math.h>
#include <stddef.h>

#include "utils.h"

/* Llama-3 frequency scaling (Hugging Face config "rope_scaling" with "rope_type": "llama3"); factor 0 = none */
typedef struct {
    float factor;            /* e.g. 8 (Llama 3.1), 32 (Llama 3.2 1B/3B) */
    float low_freq_factor;   /* e.g. 1 */
    float high_freq_factor;  /* e.g. 4 */
    int original_max_pos;    /* original_max_position_embeddings, e.g. 8192 */
} RopeScaling;

#define ROPE_PI 3.14159265358979323846

static inline int rope_scaling_on(const RopeScaling* s) { return s != NULL && s->factor != 0.0f; }

/* NULL when the scaling s is valid (NULL, factor 0 = none, or the rules of the header comment); else the first
 * field that breaks them, as a phrase (the descriptor parser, the model-file reader and rope_check_args share it) */
static inline const char* rope_scaling_invalid(const RopeScaling* s) {
    if (s == NULL || s->factor == 0.0f) { return NULL; }
    return !(s->factor > 0.0f) || !isfinite(s->factor) ? "factor (expected a finite number > 0)"
         : !(s->low_freq_factor > 0.0f) || !isfinite(s->low_freq_factor) ? "low_freq_factor (expected a finite number > 0)"
         : !(s->high_freq_factor > s->low_freq_factor) || !isfinite(s->high_freq_factor)
             ? "high_freq_factor (expected a finite number > low_freq_factor)"
         : s->original_max_pos < 1 ? "original_max_pos (expected an integer >= 1)"
         : NULL;
}

/* exits with one line unless (maxT, hs, theta, scaling) are valid (see the header comment) */
static inline void rope_check_args(int maxT, int hs, float theta, const RopeScaling* s) {
    if (hs < 2 || hs % 2 != 0) { FATAL("rope: head size %d must be even and >= 2", hs); }
    if (maxT < 1) { FATAL("rope: table length maxT = %d must be >= 1", maxT); }
    if (!(theta > 1.0f) || !isfinite(theta)) { FATAL("rope: theta = %g must be a finite number > 1", (double)theta); }
    const char* bad = rope_scaling_invalid(s);
    if (bad) {
        FATAL("rope: llama3 scaling needs factor > 0, original_max_pos >= 1 and 0 < low_freq_factor < "
              "high_freq_factor; %s is wrong (got factor %g, low %g, high %g, original_max_pos %d)", bad,
              (double)s->factor, (double)s->low_freq_factor, (double)s->high_freq_factor, s->original_max_pos);
    }
}

/* the argument check of both backends' rope_forward / rope_backward (llmc/cpu/rope.h, llmc/cuda/rope.cuh) */
static inline void rope_check_shape(int B, int T, int NH, int KV, int hs, int pos0) {
    if (hs < 2 || hs % 2 != 0) { FATAL("rope: head size %d must be even and >= 2", hs); }
    if (B < 0 || T < 0 || NH < 0 || KV < 0 || pos0 < 0) {
        FATAL("rope: negative size or position (B %d, T %d, NH %d, KV %d, pos0 %d)", B, T, NH, KV, pos0);
    }
}

/* inverse frequency of pair i (0 <= i < hs/2), radians per position, in double; scaling NULL or factor 0: none */
static inline double rope_inv_freq(int i, int hs, double theta, const RopeScaling* s) {
    const double f = pow(theta, -2.0 * (double)i / (double)hs);
    if (!rope_scaling_on(s)) { return f; }
    const double L = (double)s->original_max_pos, lo = s->low_freq_factor, hi = s->high_freq_factor;
    const double wavelen = 2.0 * ROPE_PI / f;
    if (wavelen < L / hi) { return f; }
    if (wavelen > L / lo) { return f / s->factor; }
    const double smooth = (L / wavelen - lo) / (hi - lo);
    return (1.0 - smooth) * f / s->factor + smooth * f;
}

/* fills host_table(maxT, hs/2, 2) with (cos, sin) of t * inv_freq[i]; see the header comment */
static inline void rope_table(float* host_table, int maxT, int hs, float theta, const RopeScaling* scaling) {
    rope_check_args(maxT, hs, theta, scaling);
    const int half = hs / 2;
    for (int i = 0; i < half; i++) {
        const double f = rope_inv_freq(i, hs, (double)theta, scaling);
        for (int t = 0; t < maxT; t++) {
            const double a = (double)t * f;
            float* e = host_table + ((size_t)t * half + i) * 2;
            e[0] = (float)cos(a);
            e[1] = (float)sin(a);
        }
    }
}

#endif /* LLMC_ROPE_TABLE_H */
