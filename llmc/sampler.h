/*
 * llmc/sampler.h -- token sampling from logits, and a tiny seeded RNG.
 *
 * sample_token(logits, V, temperature, top_k, coin):
 *   logits: float[V] host array (only the first V entries are read, so padded vocab
 *           columns beyond the real vocabulary are never sampled).
 *   temperature: > 0 scales logits by 1/temperature before the softmax;
 *           <= 0 means greedy (argmax, lowest index wins ties).
 *   top_k:  keep only the k largest logits (ties at the boundary are all kept);
 *           top_k <= 0 or >= V means no truncation.
 *   coin:   a uniform random number in [0,1) (e.g. random_f32); inverse-CDF sampling.
 *   Returns a token id in [0, V). Non-finite logits (NaN) are treated as -inf; if every
 *   logit is -inf/NaN, returns the argmax fallback 0. V <= 0 -> FATAL.
 *   Softmax with max-subtraction (numerically stable), computed in double.
 *
 * random_u32 / random_f32: xorshift64* (Marsaglia 2003, "Xorshift RNGs", J. Stat. Softw.;
 *   the '*' output multiplier from Vigna 2016). The state must be non-zero; a zero state
 *   is replaced by a fixed non-zero constant. random_f32 returns [0,1) with 24 bits.
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "llmc/utils.h"

/* xorshift64*: returns the upper 32 bits of the scrambled state */
static inline unsigned int random_u32(uint64_t* state) {
    if (*state == 0) { *state = 0x9E3779B97F4A7C15ULL; }
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (unsigned int)((*state * 0x2545F4914F6CDD1DULL) >> 32);
}

/* uniform float in [0,1): 24 random bits / 2^24 */
static inline float random_f32(uint64_t* state) {
    return (float)(random_u32(state) >> 8) / 16777216.0f;
}

/* index of the largest finite-or-inf logit among the first V (lowest index on ties); 0 if none */
static inline int sampler_argmax(const float* logits, int V) {
    int best = 0;
    float bv = -INFINITY;
    int found = 0;
    for (int i = 0; i < V; i++) {
        float v = logits[i];
        if (isnan(v)) { continue; }
        if (!found || v > bv) { bv = v; best = i; found = 1; }
    }
    return best;
}

/* see header comment */
static inline int sample_token(const float* logits, int V, float temperature, int top_k, float coin) {
    if (V <= 0) { FATAL("sample_token: vocabulary size must be positive, got %d", V); }
    if (!(temperature > 0.0f)) { return sampler_argmax(logits, V); }
    int argmax = sampler_argmax(logits, V);
    float maxv = logits[argmax];
    if (isnan(maxv) || maxv == -INFINITY) { return argmax; }
    /* threshold for top-k: the k-th largest value (keep everything >= it) */
    float threshold = -INFINITY;
    if (top_k > 0 && top_k < V) {
        /* partial selection: copy and find k-th largest with a simple quickselect */
        float* tmp = (float*)malloc_check((size_t)V * sizeof(float), "sampler top-k buffer");
        int n = 0;
        for (int i = 0; i < V; i++) { if (!isnan(logits[i])) { tmp[n++] = logits[i]; } }
        if (top_k < n) {
            int lo = 0, hi = n - 1, k = top_k - 1; /* k-th largest, 0-based, descending order */
            while (lo < hi) {
                float pivot = tmp[(lo + hi) / 2];
                int i = lo, j = hi;
                while (i <= j) {
                    while (tmp[i] > pivot) { i++; }
                    while (tmp[j] < pivot) { j--; }
                    if (i <= j) { float t = tmp[i]; tmp[i] = tmp[j]; tmp[j] = t; i++; j--; }
                }
                if (k <= j) { hi = j; } else if (k >= i) { lo = i; } else { break; }
            }
            threshold = tmp[k];
        }
        free(tmp);
    }
    double inv_t = 1.0 / (double)temperature;
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        float v = logits[i];
        if (isnan(v) || v < threshold) { continue; }
        sum += exp(((double)v - (double)maxv) * inv_t);
    }
    double target = (double)coin * sum;
    double cdf = 0.0;
    int last = argmax;
    for (int i = 0; i < V; i++) {
        float v = logits[i];
        if (isnan(v) || v < threshold) { continue; }
        double p = exp(((double)v - (double)maxv) * inv_t);
        if (p <= 0.0) { continue; }
        cdf += p;
        last = i;
        if (target < cdf) { return i; }
    }
    return last; /* rounding: coin close to 1 */
}

#endif /* LLMC_SAMPLER_H */
