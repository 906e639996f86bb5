/*
 * llmc/cpu/encoder.h -- token + position embedding (GPT-2, Radford et al. 2019),
 * forward and backward. Included by llmc/cpu/backend.h (floatX = float).
 */
#ifndef LLMC_CPU_ENCODER_H
#define LLMC_CPU_ENCODER_H

#include <limits.h>

/* Vocabulary-sharded embedding (tensor parallelism: this rank holds wte rows [v0, v0 + Vs)):
 * out(B,T,C) = wte_shard[inp[b,t] - v0, :] + wpe[t, :] where v0 <= inp[b,t] < v0 + Vs, else 0, so the sum of the
 * ranks' outputs is the full embedding (exactly: one non-zero term per row). inp(B,T) int token ids;
 * wte_shard(Vs,C), wpe(maxT,C) fp32, or NULL (rotary positions: no position term; dwpe NULL in the backward). Ids
 * are not range-checked here (the dataloader validates tokens). */
static inline void encoder_forward_vocab_shard(floatX* out, const int* inp, const floatX* wte_shard, const floatX* wpe,
                                               int v0, int Vs, int B, int T, int C) {
    const long N = (long)B * T;
    #pragma omp parallel for schedule(static) if(N * C >= LLMC_CPU_PAR_MIN)
    for (long n = 0; n < N; n++) {
        float* o = out + (size_t)n * C;
        const long tok = (long)inp[n] - v0;
        if (tok < 0 || tok >= Vs) {
            for (int c = 0; c < C; c++) { o[c] = 0.0f; }
            continue;
        }
        const float* we = wte_shard + (size_t)tok * C;
        if (!wpe) { /* no position table (rotary positions): the token embedding alone */
            for (int c = 0; c < C; c++) { o[c] = we[c]; }
            continue;
        }
        const float* pe = wpe + (size_t)(n % T) * C;
        for (int c = 0; c < C; c++) { o[c] = we[c] + pe[c]; }
    }
}

/* out(B,T,C) = wte[inp[b,t], :] + wpe[t, :]: the whole vocabulary (wte (Vp,C)) */
static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                   int B, int T, int C) {
    encoder_forward_vocab_shard(out, inp, wte, wpe, 0, INT_MAX, B, T, C);
}

/* dwte_shard(Vs,C) += scatter of the dout rows whose token lies in [v0, v0 + Vs) (row inp - v0);
 * dwpe(maxT,C) += sum over b of dout[b,t,:] (every row). dout(B,T,C), inp(B,T) on the "device" (= host);
 * host_inp is the same data and unused here. Deterministic and independent of the thread count: channels are
 * statically partitioned over threads and each channel is accumulated over rows n = 0..N-1 in order, so
 * repeated tokens add up in a fixed order. */
static inline void encoder_backward_vocab_shard(floatX* dwte_shard, floatX* dwpe, const floatX* dout, const int* inp,
                                                const int* host_inp, int v0, int Vs, int B, int T, int C) {
    (void)host_inp;
    const long N = (long)B * T;
    #pragma omp parallel if(N * C >= LLMC_CPU_PAR_MIN)
    {
        long c0, c1;
        cpu_partition(C, cpu_team_size(), cpu_thread_id(), 16, &c0, &c1);
        for (long n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const long tok = (long)inp[n] - v0;
            if (dwpe) {
                float* gp = dwpe + (size_t)(n % T) * C;
                for (long c = c0; c < c1; c++) { gp[c] += d[c]; }
            }
            if (tok < 0 || tok >= Vs) { continue; }
            float* gw = dwte_shard + (size_t)tok * C;
            for (long c = c0; c < c1; c++) { gw[c] += d[c]; }
        }
    }
}

/* dwte(Vp,C) += scatter of dout rows by token id; dwpe(maxT,C) += sum over b of dout[b,t,:] (the whole vocabulary) */
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp,
                                    const int* host_inp, int B, int T, int C) {
    encoder_backward_vocab_shard(dwte, dwpe, dout, inp, host_inp, 0, INT_MAX, B, T, C);
}

/* graph mode only (CUDA): nothing to stage on the CPU */
static inline void encoder_backward_stage(int stage, const int* host_inp, int B, int T) {
    (void)stage; (void)host_inp; (void)B; (void)T;
}

#endif /* LLMC_CPU_ENCODER_H */
