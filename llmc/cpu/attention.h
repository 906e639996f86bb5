/*
 * llmc/cpu/attention.h -- causal multi-head self-attention (Vaswani et al. 2017,
 * "Attention Is All You Need"; GPT-2 layout) with grouped-query attention (Ainslie et al. 2023,
 * "GQA"), forward and backward. floatX = float.
 *
 *   qkv(B,T,R), R = (NH + 2 NKV) hs, rows are [q(NH hs) | k(NKV hs) | v(NKV hs)], hs = C/NH;
 *   query head h uses channels h*hs..(h+1)*hs-1 of q and key/value head h/g of k and v,
 *   g = NH/NKV (consecutive query heads share a key/value head, Hugging Face's repeat_kv
 *   order). NKV = NH is GPT-2's multi-head attention, qkv (B,T,3C); NKV = 1 multi-query.
 *   P = softmax(q k^T / sqrt(hs) + causal mask) (exact: the row max is subtracted),
 *   out = P v, written back as (B,T,C) with heads concatenated.
 *   state(B,NH,T,T) = P in fp32 (masked entries stored as 0), saved for backward.
 *
 * Optimised path: one task per (b,h), statically scheduled over OpenMP threads;
 * inside a task the query rows are processed in tiles of ATT_TILE rows, and every
 * product is a single-threaded cblas_sgemm on strided views of qkv (causal: a tile
 * of rows [t0,t1) only touches keys [0,t1)). Each task owns its output slices and
 * runs in a fixed order, so results are deterministic and independent of the
 * thread count. -DLLMC_CPU_NAIVE: llm.c-style dot-product loops per (b,t,h).
 *
 * Backward runs one task per (b, key/value head): it owns that head's dk and dv and
 * adds the g query heads' contributions in ascending h, so the group sum is deterministic.
 *
 * Scratch: attention_scratch_floats = B*NH*min(T,ATT_TILE)*T floats (one dP/dS
 * tile per task), independent of the thread count. C % NH != 0 or NH % NKV != 0 exits.
 */
#ifndef LLMC_CPU_ATTENTION_H
#define LLMC_CPU_ATTENTION_H

/* fp32 values per layer kept for backward: the (B,NH,T,T) probabilities */
static inline size_t attention_state_floats(int B, int T, int NH) { return (size_t)B * NH * T * T; }

#define ATT_TILE 64 /* query rows per sgemm tile */

/* fp32 scratch shared by forward and backward (not preserved between calls) */
static inline size_t attention_scratch_floats(int B, int T, int C, int NH, int NKV) {
    (void)C; (void)NKV;
    return (size_t)B * NH * (T < ATT_TILE ? T : ATT_TILE) * T;
}

/* exits with a message unless NH > 0, C % NH == 0, NKV > 0 and NH % NKV == 0 */
static inline void attention_check_shape(int C, int NH, int NKV) {
    if (NH <= 0 || C % NH != 0) { FATAL("attention: C=%d is not divisible by NH=%d", C, NH); }
    if (NKV <= 0 || NH % NKV != 0) { FATAL("attention: NKV=%d key/value heads do not divide NH=%d", NKV, NH); }
}

/* softmax in place over row[0..len) (len >= 1), exact: subtracts the max */
static inline void attention_softmax_row(float* row, int len) {
    float mx = row[0];
    #pragma omp simd reduction(max:mx)
    for (int j = 1; j < len; j++) { mx = row[j] > mx ? row[j] : mx; }
    float s = 0.0f;
    #pragma omp simd reduction(+:s)
    for (int j = 0; j < len; j++) { float e = cpu_expf(row[j] - mx); row[j] = e; s += e; }
    const float inv = 1.0f / s;
    for (int j = 0; j < len; j++) { row[j] *= inv; }
}

/* out(B,T,C) = causal attention of qkv(B,T,(NH+2NKV)hs); state(B,NH,T,T) = probabilities; scratch see above. */
static inline void attention_forward(floatX* out, float* state, float* scratch, const floatX* qkv,
                                     int B, int T, int C, int NH, int NKV) {
    attention_check_shape(C, NH, NKV);
    const int hs = C / NH, C3 = (NH + 2 * NKV) * hs, KVd = NKV * hs, g = NH / NKV; /* C3: the qkv row */
    const float scale = 1.0f / sqrtf((float)hs);
    (void)scratch; /* forward needs no scratch on the CPU (backward uses it) */
#ifdef LLMC_CPU_NAIVE
    #pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float* base = qkv + (size_t)b * T * C3;
                const float* q = base + (size_t)t * C3 + h * hs;
                float* row = state + (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = base + (size_t)t2 * C3 + C + (h / g) * hs;
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
                    const float* v = base + (size_t)t2 * C3 + C + KVd + (h / g) * hs;
                    for (int i = 0; i < hs; i++) { o[i] += row[t2] * v[i]; }
                }
            }
        }
    }
#else
    cpu_blas_single_threaded();
    #pragma omp parallel for schedule(static) if((long)B * T * T * C >= 16L * LLMC_CPU_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float* Q = qkv + (size_t)b * T * C3 + h * hs; /* (T,hs) views, leading dim C3 */
        const float* K = qkv + (size_t)b * T * C3 + C + (h / g) * hs;
        const float* V = K + KVd;
        float* O = out + (size_t)b * T * C + h * hs;        /* (T,hs), leading dim C */
        float* P = state + (size_t)bh * T * T;              /* (T,T) */
        for (int t0 = 0; t0 < T; t0 += ATT_TILE) {
            const int t1 = t0 + ATT_TILE < T ? t0 + ATT_TILE : T, rows = t1 - t0;
            float* Pt = P + (size_t)t0 * T;
            /* S[t0:t1, 0:t1] = scale * Q[t0:t1] K[0:t1]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, t1, hs, scale, Q + (size_t)t0 * C3, C3,
                        K, C3, 0.0f, Pt, T);
            for (int t = t0; t < t1; t++) {
                float* row = P + (size_t)t * T;
                attention_softmax_row(row, t + 1);
                for (int j = t + 1; j < T; j++) { row[j] = 0.0f; }
            }
            /* O[t0:t1] = P[t0:t1, 0:t1] V[0:t1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, t1, 1.0f, Pt, T, V, C3,
                        0.0f, O + (size_t)t0 * C, C);
        }
    }
#endif
}

/* Backward of attention_forward. dqkv(B,T,(NH+2NKV)hs) is overwritten; dout(B,T,C); qkv as in forward;
 * state = the probabilities saved by forward; out unused on the CPU. With dS = P*(dP - rowsum(P*dP)):
 *   dv = P^T dout, dP = dout v^T, dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs),
 * dk and dv of a key/value head summed over its g query heads. Deterministic: one task per (b, key/value head)
 * owns its dk/dv slices and its query heads' dq slices, and accumulates heads and t in order. */
static inline void attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                      const floatX* out, const float* state, int B, int T, int C, int NH, int NKV) {
    attention_check_shape(C, NH, NKV);
    (void)out;
    const int hs = C / NH, C3 = (NH + 2 * NKV) * hs, KVd = NKV * hs, g = NH / NKV; /* C3: the qkv row */
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t tile_floats = (size_t)(T < ATT_TILE ? T : ATT_TILE) * T;
    cpu_blas_single_threaded();
    #pragma omp parallel for schedule(static) if((long)B * T * T * C >= 16L * LLMC_CPU_PAR_MIN)
    for (int bj = 0; bj < B * NKV; bj++) {
        const int b = bj / NKV, j = bj % NKV;               /* key/value head j serves query heads jg..jg+g-1 */
        const float* K = qkv + (size_t)b * T * C3 + C + j * hs; /* (T,hs) views, leading dim C3 */
        const float* V = K + KVd;
        float* dK = dqkv + (size_t)b * T * C3 + C + j * hs;
        float* dV = dK + KVd;
        float* dS = scratch + (size_t)bj * tile_floats;      /* (rows, T) tile */
        for (int t = 0; t < T; t++) {
            for (int c = 0; c < hs; c++) { dK[(size_t)t * C3 + c] = 0.0f; dV[(size_t)t * C3 + c] = 0.0f; }
        }
        for (int h = j * g; h < (j + 1) * g; h++) {
            const float* Q = qkv + (size_t)b * T * C3 + h * hs;
            float* dQ = dqkv + (size_t)b * T * C3 + h * hs;
            const float* dO = dout + (size_t)b * T * C + h * hs; /* (T,hs), leading dim C */
            const float* P = state + ((size_t)b * NH + h) * T * T;
            for (int t0 = 0; t0 < T; t0 += ATT_TILE) {
                const int t1 = t0 + ATT_TILE < T ? t0 + ATT_TILE : T, rows = t1 - t0;
                const float* Pt = P + (size_t)t0 * T;
                const float* dOt = dO + (size_t)t0 * C;
#ifdef LLMC_CPU_NAIVE
                (void)rows; (void)Pt; (void)dOt;
                for (int t = t0; t < t1; t++) { /* dP[t, j] = dO[t] . V[j], one dot product each */
                    for (int jj = 0; jj < t1; jj++) {
                        float s = 0.0f;
                        #pragma omp simd reduction(+:s)
                        for (int i = 0; i < hs; i++) { s += dO[(size_t)t * C + i] * V[(size_t)jj * C3 + i]; }
                        dS[(size_t)(t - t0) * T + jj] = s;
                    }
                }
#else
                /* dP[t0:t1, 0:t1] = dO[t0:t1] V[0:t1]^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, t1, hs, 1.0f, dOt, C, V, C3, 0.0f, dS, T);
#endif
                /* dS = P * (dP - rowsum(P * dP)) * scale (zero above the diagonal since P is) */
                for (int t = t0; t < t1; t++) {
                    const float* pr = P + (size_t)t * T;
                    float* dr = dS + (size_t)(t - t0) * T;
                    float s = 0.0f;
                    for (int jj = 0; jj <= t; jj++) { s += pr[jj] * dr[jj]; }
                    for (int jj = 0; jj < t1; jj++) { dr[jj] = pr[jj] * (dr[jj] - s) * scale; }
                }
#ifdef LLMC_CPU_NAIVE
                for (int t = t0; t < t1; t++) { /* llm.c-style accumulation loops */
                    float* dq = dQ + (size_t)t * C3;
                    const float* q = Q + (size_t)t * C3;
                    const float* go = dO + (size_t)t * C;
                    for (int c = 0; c < hs; c++) { dq[c] = 0.0f; }
                    for (int jj = 0; jj <= t; jj++) {
                        const float ds = dS[(size_t)(t - t0) * T + jj], pj = P[(size_t)t * T + jj];
                        for (int c = 0; c < hs; c++) {
                            dq[c] += ds * K[(size_t)jj * C3 + c];
                            dK[(size_t)jj * C3 + c] += ds * q[c];
                            dV[(size_t)jj * C3 + c] += pj * go[c];
                        }
                    }
                }
#else
                /* dV[0:t1] += P[t0:t1,0:t1]^T dO[t0:t1];  dQ[t0:t1] = dS K[0:t1];  dK[0:t1] += dS^T Q[t0:t1] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t1, hs, rows, 1.0f, Pt, T, dOt, C, 1.0f, dV, C3);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, t1, 1.0f, dS, T, K, C3, 0.0f,
                            dQ + (size_t)t0 * C3, C3);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t1, hs, rows, 1.0f, dS, T, Q + (size_t)t0 * C3, C3,
                            1.0f, dK, C3);
#endif
            }
        } /* query heads of the group */
    }
}

#endif /* LLMC_CPU_ATTENTION_H */
