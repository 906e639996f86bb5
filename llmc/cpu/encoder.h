/*
 * llmc/cpu/encoder.h -- token + position embedding (GPT-2, Radford et al. 2019),
 * forward and backward. Included by llmc/cpu/backend.h (floatX = float).
 */
#ifndef LLMC_CPU_ENCODER_H
#define LLMC_CPU_ENCODER_H

/* out(B,T,C) = wte[inp[b,t], :] + wpe[t, :].
 * inp(B,T) int token ids in [0, Vp); wte(Vp,C), wpe(maxT,C) fp32. Ids are not
 * range-checked here (the dataloader validates tokens). */
static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                   int B, int T, int C) {
    const long N = (long)B * T;
    #pragma omp parallel for schedule(static) if(N * C >= LLMC_CPU_PAR_MIN)
    for (long n = 0; n < N; n++) {
        const float* we = wte + (size_t)inp[n] * C;
        const float* pe = wpe + (size_t)(n % T) * C;
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) { o[c] = we[c] + pe[c]; }
    }
}

/* dwte(Vp,C) += scatter of dout rows by token id; dwpe(maxT,C) += sum over b of dout[b,t,:].
 * dout(B,T,C), inp(B,T) on the "device" (= host); host_inp is the same data and unused here.
 * Deterministic and independent of the thread count: channels are statically
 * partitioned over threads and each channel is accumulated over rows n = 0..N-1
 * in order, so repeated tokens add up in a fixed order. */
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp,
                                    const int* host_inp, int B, int T, int C) {
    (void)host_inp;
    const long N = (long)B * T;
    #pragma omp parallel if(N * C >= LLMC_CPU_PAR_MIN)
    {
        long c0, c1;
        cpu_partition(C, cpu_team_size(), cpu_thread_id(), 16, &c0, &c1);
        for (long n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            float* gw = dwte + (size_t)inp[n] * C;
            float* gp = dwpe + (size_t)(n % T) * C;
            for (long c = c0; c < c1; c++) { gw[c] += d[c]; gp[c] += d[c]; }
        }
    }
}

/* graph mode only (CUDA): nothing to stage on the CPU */
static inline void encoder_backward_stage(int stage, const int* host_inp, int B, int T) {
    (void)stage; (void)host_inp; (void)B; (void)T;
}

#endif /* LLMC_CPU_ENCODER_H */
