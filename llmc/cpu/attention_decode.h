/*
 * llmc/cpu/attention_decode.h -- one query row of causal multi-head attention against cached keys and values
 * (incremental decoding with a KV cache, as in every autoregressive Transformer sampler since Vaswani et al. 2017;
 * GPT-2 layout; grouped-query attention, Ainslie et al. 2023). floatX = float.
 *
 *   attention_decode(out(C), q(C), k(t,KVd), v(t,KVd), scores(NH*t) scratch, t, C, NH, NKV), KVd = NKV hs
 *   q holds the heads concatenated (head h: channels h*hs..(h+1)*hs-1, hs = C/NH); row j of k and v is position
 *   j's keys and values of the NKV key/value heads (the cache holds NKV heads); query head h reads key/value head
 *   h/(NH/NKV). out_h = softmax(q_h k_h^T / sqrt(hs)) v_h over the t positions (the newest query sees
 *   every cached position, so no mask). Exact softmax (the row max is subtracted), fp32 arithmetic.
 * One task per head over OpenMP threads when the work is large enough; each head owns its output slice and sums
 * in a fixed order, so the result does not depend on the thread count. C % NH != 0 or NH % NKV != 0
 * exits (attention_check_shape).
 */
#ifndef LLMC_CPU_ATTENTION_DECODE_H
#define LLMC_CPU_ATTENTION_DECODE_H

static inline void attention_decode(floatX* out, const floatX* q, const floatX* k, const floatX* v, float* scores,
                                    int t, int C, int NH, int NKV) {
    attention_check_shape(C, NH, NKV);
    if (t < 1) { FATAL("attention_decode: %d cached positions (expected at least 1)", t); }
    const int hs = C / NH, KVd = NKV * hs, g = NH / NKV;
    const float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for schedule(static) if((long)t * C >= LLMC_CPU_PAR_MIN)
    for (int h = 0; h < NH; h++) {
        const float* qh = q + (size_t)h * hs;
        float* s = scores + (size_t)h * t;
        for (int j = 0; j < t; j++) {
            const float* kj = k + (size_t)j * KVd + (size_t)(h / g) * hs;
            float dot = 0.0f;
            #pragma omp simd reduction(+:dot)
            for (int i = 0; i < hs; i++) { dot += qh[i] * kj[i]; }
            s[j] = dot * scale;
        }
        attention_softmax_row(s, t);
        float* o = out + (size_t)h * hs;
        for (int i = 0; i < hs; i++) { o[i] = 0.0f; }
        for (int j = 0; j < t; j++) {
            const float* vj = v + (size_t)j * KVd + (size_t)(h / g) * hs;
            const float p = s[j];
            #pragma omp simd
            for (int i = 0; i < hs; i++) { o[i] += p * vj[i]; }
        }
    }
}

#endif /* LLMC_CPU_ATTENTION_DECODE_H */
