/*
 * llmc/cpu/rope.h -- rotary position embedding (RoPE; Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
 * Position Embedding"), forward and backward, in place on the qkv activation. The CPU twin of llmc/cuda/rope.cuh;
 * contract in llmc/backend.h ("rope"); the table comes from llmc/rope_table.h. floatX = float.
 *
 *   rope_forward(qkv(B,T,(NH+2KV)*hs) in place, table(maxT,hs/2,2) fp32, B, T, NH, KV, hs, pos0)
 *   rope_backward(dqkv(B,T,(NH+2KV)*hs) in place, the same arguments)
 * Row layout (the project's qkv, llmc/gpt2.h DIM_QKV = (NH + 2 KV) hs): [q heads NH*hs | k heads KV*hs | v heads
 * KV*hs]; the first NH+KV heads (q and k, contiguous) are rotated, the v heads are not touched. Token t of every
 * sequence has position p = pos0 + t; with c = table[p][i][0], s = table[p][i][1] and half = hs/2, pair i of a head
 * ("rotate_half", as Hugging Face Llama) becomes
 *   forward:  x[i] = x[i] c - x[i+half] s,   x[i+half] = x[i+half] c + x[i] s      (rotation by +angle)
 *   backward: g[i] = g[i] c + g[i+half] s,   g[i+half] = g[i+half] c - g[i] s      (its transpose, by -angle)
 * fp32 arithmetic. Not checked here: pos0 + T <= maxT (the table's rows; the caller sizes the table). Errors: hs odd
 * or < 2, pos0 < 0, or a negative size exits with one line (FATAL). Independent of the thread count (elementwise).
 */
#ifndef LLMC_CPU_ROPE_H
#define LLMC_CPU_ROPE_H

#include "../rope_table.h"

/* rotates pair i of the q and k heads of every row by sign * angle (sign +1: forward, -1: backward) */
static inline void rope_rotate(floatX* qkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0,
                               float sign) {
    rope_check_shape(B, T, NH, KV, hs, pos0); /* llmc/rope_table.h */
    const long N = (long)B * T;
    const int half = hs / 2, heads = NH + KV;
    const size_t row = (size_t)(NH + 2 * KV) * hs;
    #pragma omp parallel for schedule(static) if(N * heads * hs >= LLMC_CPU_PAR_MIN)
    for (long n = 0; n < N; n++) {
        const float* tab = table + (size_t)(pos0 + n % T) * hs; /* hs/2 (cos, sin) pairs */
        for (int h = 0; h < heads; h++) {
            float* x = qkv + (size_t)n * row + (size_t)h * hs;
            for (int i = 0; i < half; i++) {
                const float c = tab[2 * i], s = sign * tab[2 * i + 1];
                const float a = x[i], b = x[i + half];
                x[i] = a * c - b * s;
                x[i + half] = b * c + a * s;
            }
        }
    }
}

static inline void rope_forward(floatX* qkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0) {
    rope_rotate(qkv, table, B, T, NH, KV, hs, pos0, 1.0f);
}

static inline void rope_backward(floatX* dqkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0) {
    rope_rotate(dqkv, table, B, T, NH, KV, hs, pos0, -1.0f);
}

#endif /* LLMC_CPU_ROPE_H */
