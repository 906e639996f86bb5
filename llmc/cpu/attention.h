/*
 * llmc/cpu/attention.h -- causal multi-head self-attention (Vaswani et al. 2017,
 * "Attention Is All You Need"; GPT-2 layout), forward and backward. floatX = float.
 *
 *   qkv(B,T,3C) rows are [q(C) | k(C) | v(C)]; head h uses channels h*hs..(h+1)*hs-1,
 *   hs = C/NH. P = softmax(q k^T / sqrt(hs) + causal mask) (exact: the row max is
 *   subtracted), out = P v, written back as (B,T,C) with heads concatenated.
 *   state(B,NH,T,T) = P in fp32 (masked entries stored as 0), saved for backward.
 *
 * Optimised path: one task per (b,h), statically scheduled; K (forward) or V
 * (backward) is transposed into scratch so every inner loop is a unit-stride
 * axpy that the compiler vectorises without reassociating sums (so results do not
 * depend on -ffast-math or the thread count). -DLLMC_CPU_NAIVE: llm.c-style
 * dot-product loops per (b,t,h).
 *
 * Scratch: attention_scratch_floats = B*T*C + B*NH*T floats, independent of the
 * thread count (one transposed (hs,T) matrix and one T-row per (b,h) task).
 * C must be divisible by NH (exits otherwise).
 */
#ifndef LLMC_CPU_ATTENTION_H
#define LLMC_CPU_ATTENTION_H

/* fp32 values per layer kept for backward: the (B,NH,T,T) probabilities */
static inline size_t attention_state_floats(int B, int T, int NH) { return (size_t)B * NH * T * T; }

/* fp32 scratch shared by forward and backward (not preserved between calls) */
static inline size_t attention_scratch_floats(int B, int T, int C, int NH) {
    return (size_t)B * T * C + (size_t)B * NH * T;
}

static inline void attention_check_shape(int C, int NH) {
    if (NH <= 0 || C % NH != 0) { FATAL("attention: C=%d is not divisible by NH=%d", C, NH); }
}

/* softmax in place over row[0..len) (len >= 1), exact: subtracts the max */
static inline void attention_softmax_row(float* row, int len) {
    float mx = row[0];
    for (int j = 1; j < len; j++) { mx = row[j] > mx ? row[j] : mx; }
    float s = 0.0f;
    for (int j = 0; j < len; j++) { float e = expf(row[j] - mx); row[j] = e; s += e; }
    const float inv = 1.0f / s;
    for (int j = 0; j < len; j++) { row[j] *= inv; }
}

/* out(B,T,C) = causal attention of qkv(B,T,3C); state(B,NH,T,T) = probabilities; scratch see above. */
static inline void attention_forward(floatX* out, float* state, float* scratch, const floatX* qkv,
                                     int B, int T, int C, int NH) {
    attention_check_shape(C, NH);
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    (void)scratch;
#ifdef LLMC_CPU_NAIVE
    #pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float* base = qkv + (size_t)b * T * C3;
                const float* q = base + (size_t)t * C3 + h * hs;
                float* row = state + (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = base + (size_t)t2 * C3 + C + h * hs;
                    float s = 0.0f;
                    #pragma omp simd reduction(+:s)
                    for (int i = 0; i < hs; i++) { s += q[i] * k[i]; }
                    row[t2] = s * scale;
                }
                attention_softmax_row(row, t + 1);
                for (int t2 = t + 1; t2 < T; t2++) { row[t2] = 0.0f; }
                float* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) { o[i] = 0.0f; }
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = base + (size_t)t2 * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) { o[i] += row[t2] * v[i]; }
                }
            }
        }
    }
#else
    #pragma omp parallel for schedule(static) if((long)B * T * T * C >= 16L * LLMC_CPU_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float* base = qkv + (size_t)b * T * C3;
        float* kt = scratch + (size_t)bh * hs * T; /* K^T (hs,T) */
        for (int t2 = 0; t2 < T; t2++) {
            const float* k = base + (size_t)t2 * C3 + C + h * hs;
            for (int i = 0; i < hs; i++) { kt[(size_t)i * T + t2] = k[i]; }
        }
        for (int t = 0; t < T; t++) {
            const float* q = base + (size_t)t * C3 + h * hs;
            float* row = state + ((size_t)bh * T + t) * T;
            const int len = t + 1;
            for (int j = 0; j < len; j++) { row[j] = 0.0f; }
            int i = 0;
            for (; i + 4 <= hs; i += 4) { /* 4 channels per sweep: fewer row loads/stores */
                const float q0 = q[i] * scale, q1 = q[i + 1] * scale, q2 = q[i + 2] * scale, q3 = q[i + 3] * scale;
                const float* k0 = kt + (size_t)i * T;
                const float* k1 = k0 + T;
                const float* k2 = k1 + T;
                const float* k3 = k2 + T;
                for (int j = 0; j < len; j++) { row[j] += q0 * k0[j] + q1 * k1[j] + q2 * k2[j] + q3 * k3[j]; }
            }
            for (; i < hs; i++) {
                const float qi = q[i] * scale;
                const float* ki = kt + (size_t)i * T;
                for (int j = 0; j < len; j++) { row[j] += qi * ki[j]; }
            }
            attention_softmax_row(row, len);
            for (int j = len; j < T; j++) { row[j] = 0.0f; }
            float* o = out + ((size_t)b * T + t) * C + h * hs;
            for (int c = 0; c < hs; c++) { o[c] = 0.0f; }
            for (int j = 0; j < len; j++) {
                const float p = row[j];
                const float* v = base + (size_t)j * C3 + 2 * C + h * hs;
                for (int c = 0; c < hs; c++) { o[c] += p * v[c]; }
            }
        }
    }
#endif
}

/* Backward of attention_forward. dqkv(B,T,3C) is overwritten; dout(B,T,C); qkv as in forward;
 * state = the probabilities saved by forward; out unused on the CPU. With dS = P*(dP - rowsum(P*dP)):
 *   dv = P^T dout, dP = dout v^T, dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs).
 * Deterministic: one task per (b,h) owns its dq/dk/dv slices and accumulates t in order. */
static inline void attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                      const floatX* out, const float* state, int B, int T, int C, int NH) {
    attention_check_shape(C, NH);
    (void)out;
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for schedule(static) if((long)B * T * T * C >= 16L * LLMC_CPU_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float* base = qkv + (size_t)b * T * C3;
        float* dbase = dqkv + (size_t)b * T * C3;
        float* dp = scratch + (size_t)B * T * C + (size_t)bh * T; /* dP row, then dS row */
        for (int t = 0; t < T; t++) {
            float* dk = dbase + (size_t)t * C3 + C + h * hs;
            for (int c = 0; c < hs; c++) { dk[c] = 0.0f; dk[C + c] = 0.0f; } /* dk and dv */
        }
#ifndef LLMC_CPU_NAIVE
        float* vt = scratch + (size_t)bh * hs * T; /* V^T (hs,T) */
        for (int t2 = 0; t2 < T; t2++) {
            const float* v = base + (size_t)t2 * C3 + 2 * C + h * hs;
            for (int i = 0; i < hs; i++) { vt[(size_t)i * T + t2] = v[i]; }
        }
#endif
        for (int t = 0; t < T; t++) {
            const float* P = state + ((size_t)bh * T + t) * T;
            const float* dO = dout + ((size_t)b * T + t) * C + h * hs;
            const float* q = base + (size_t)t * C3 + h * hs;
            const int len = t + 1;
            /* dP[j] = dO . v_j */
#ifdef LLMC_CPU_NAIVE
            for (int j = 0; j < len; j++) {
                const float* v = base + (size_t)j * C3 + 2 * C + h * hs;
                float s = 0.0f;
                #pragma omp simd reduction(+:s)
                for (int i = 0; i < hs; i++) { s += dO[i] * v[i]; }
                dp[j] = s;
            }
#else
            for (int j = 0; j < len; j++) { dp[j] = 0.0f; }
            int i = 0;
            for (; i + 4 <= hs; i += 4) {
                const float g0 = dO[i], g1 = dO[i + 1], g2 = dO[i + 2], g3 = dO[i + 3];
                const float* v0 = vt + (size_t)i * T;
                const float* v1 = v0 + T;
                const float* v2 = v1 + T;
                const float* v3 = v2 + T;
                for (int j = 0; j < len; j++) { dp[j] += g0 * v0[j] + g1 * v1[j] + g2 * v2[j] + g3 * v3[j]; }
            }
            for (; i < hs; i++) {
                const float gi = dO[i];
                const float* vi = vt + (size_t)i * T;
                for (int j = 0; j < len; j++) { dp[j] += gi * vi[j]; }
            }
#endif
            /* softmax backward: dS = P * (dP - sum(P*dP)), pre-multiplied by scale */
            float s = 0.0f;
            for (int j = 0; j < len; j++) { s += P[j] * dp[j]; }
            for (int j = 0; j < len; j++) { dp[j] = P[j] * (dp[j] - s) * scale; }
            float* dq = dbase + (size_t)t * C3 + h * hs;
            for (int c = 0; c < hs; c++) { dq[c] = 0.0f; }
            for (int j = 0; j < len; j++) {
                const float* kj = base + (size_t)j * C3 + C + h * hs;
                float* dkj = dbase + (size_t)j * C3 + C + h * hs;
                float* dvj = dkj + C;
                const float ds = dp[j], pj = P[j];
                for (int c = 0; c < hs; c++) {
                    dq[c] += ds * kj[c];
                    dkj[c] += ds * q[c];
                    dvj[c] += pj * dO[c];
                }
            }
        }
    }
}

#endif /* LLMC_CPU_ATTENTION_H */
