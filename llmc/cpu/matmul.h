/*
 * llmc/cpu/matmul.h -- fully connected layer as in torch.nn.Linear:
 * out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC), with an optional GELU
 * epilogue (llmc/cpu/gelu.h), forward and backward. floatX = float.
 *
 * Optimised path: cblas_sgemm (OpenBLAS, single-threaded) called once per
 * OpenMP thread on a static row or column slab of the output (cpu_sgemm_rows),
 * so there is exactly one thread pool and the partition is fixed (deterministic).
 * With --cpu-matmul bf16 (cpu_matmul_bf16_on) the same slabs go to cpu_bf16gemm (llmc/cpu/matmul_bf16.h:
 * operands rounded to bf16, fp32 sums, AVX512_BF16) instead of cblas_sgemm.
 * -DLLMC_CPU_NAIVE: plain OpenMP loops in the style of llm.c's train_gpt2.c
 * (dot products per output element), the speed baseline.
 */
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include "matmul_bf16.h" /* --cpu-matmul bf16: cpu_bf16gemm, cpu_matmul_bf16_on */

/* Row-major Cm(M,Ncol) = op(A)(M,K) @ op(Bm)(K,Ncol) + beta * Cm, op = transpose if trans*.
 * The output is statically split over the OpenMP threads into slabs of rows (if
 * M >= Ncol) or of columns (otherwise; multiples of 16) and each thread calls
 * single-threaded sgemm on its slab. Splitting the larger output dimension means
 * the operand every thread must read in full is the smaller one (e.g. for the
 * lm head, x(N,C) rather than wte(Vp,C)). Every output element is reduced over K
 * by one thread: deterministic for a given thread count. Call from outside any
 * parallel region. */
static inline void cpu_sgemm_rows(int transA, int transB, int M, int Ncol, int K,
                                  const float* A, int lda, const float* Bm, int ldb,
                                  float beta, float* Cm, int ldc) {
    if (M <= 0 || Ncol <= 0) { return; }
    cpu_blas_single_threaded();
    const int split_rows = M >= Ncol;
    const int D = split_rows ? M : Ncol;
    /* fewer threads for tiny problems: < ~1 MFLOP per thread is not worth a fork */
    int nt = cpu_num_threads();
    double flops = 2.0 * M * Ncol * K;
    if (flops < 2e6 * nt) { nt = (int)(flops / 2e6) + 1; }
    if (nt > (D + 15) / 16) { nt = (D + 15) / 16; }
    const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
    #pragma omp parallel num_threads(nt)
    {
        long d0, d1;
        cpu_partition(D, cpu_team_size(), cpu_thread_id(), 16, &d0, &d1);
        if (d1 > d0 && split_rows) {
            const float* a = transA ? A + d0 : A + (size_t)d0 * lda;
            if (cpu_matmul_bf16_on) {
                cpu_bf16gemm(transA, transB, (int)(d1 - d0), Ncol, K, a, lda, Bm, ldb, beta, Cm + (size_t)d0 * ldc, ldc);
            } else {
                cblas_sgemm(CblasRowMajor, ta, tb, (int)(d1 - d0), Ncol, K, 1.0f, a, lda, Bm, ldb,
                            beta, Cm + (size_t)d0 * ldc, ldc);
            }
        } else if (d1 > d0) {
            const float* b = transB ? Bm + (size_t)d0 * ldb : Bm + d0;
            if (cpu_matmul_bf16_on) {
                cpu_bf16gemm(transA, transB, M, (int)(d1 - d0), K, A, lda, b, ldb, beta, Cm + d0, ldc);
            } else {
                cblas_sgemm(CblasRowMajor, ta, tb, M, (int)(d1 - d0), K, 1.0f, A, lda, b, ldb,
                            beta, Cm + d0, ldc);
            }
        }
    }
}

/* out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC) (bias may be NULL).
 * If pre_gelu != NULL: pre_gelu(N,OC) = that result and out = gelu(pre_gelu). */
static inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                                  int N, int C, int OC, floatX* pre_gelu) {
    float* dst = pre_gelu ? pre_gelu : out;
#ifdef LLMC_CPU_NAIVE
    /* llm.c train_gpt2.c style: blocks of 8 rows share each weight row (register
     * tile of 8 accumulators); the leftover rows use one dot product per output */
    const int N8 = N / 8 * 8;
    #pragma omp parallel for schedule(static) if((long)N * OC >= LLMC_CPU_PAR_MIN)
    for (int n0 = 0; n0 < N8; n0 += 8) {
        for (int o = 0; o < OC; o++) {
            const float* wr = weight + (size_t)o * C;
            float acc[8];
            for (int r = 0; r < 8; r++) { acc[r] = bias ? bias[o] : 0.0f; }
            for (int i = 0; i < C; i++) {
                const float wi = wr[i];
                for (int r = 0; r < 8; r++) { acc[r] += inp[(size_t)(n0 + r) * C + i] * wi; }
            }
            for (int r = 0; r < 8; r++) { dst[(size_t)(n0 + r) * OC + o] = acc[r]; }
        }
    }
    for (int n = N8; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        #pragma omp parallel for schedule(static)
        for (int o = 0; o < OC; o++) {
            const float* wr = weight + (size_t)o * C;
            float val = bias ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) { val += x[i] * wr[i]; }
            dst[(size_t)n * OC + o] = val;
        }
    }
#else
    if (bias) {
        #pragma omp parallel for schedule(static) if((long)N * OC >= LLMC_CPU_PAR_MIN)
        for (int n = 0; n < N; n++) { memcpy(dst + (size_t)n * OC, bias, (size_t)OC * sizeof(float)); }
    }
    cpu_sgemm_rows(0, 1, N, OC, C, inp, C, weight, C, bias ? 1.0f : 0.0f, dst, OC);
#endif
    if (pre_gelu) { gelu_forward(out, pre_gelu, (size_t)N * OC); }
}

/* fp32 scratch needed by matmul_backward: none on the CPU (returns 0). */
static inline size_t matmul_scratch_floats(int N, int C, int OC) { (void)N; (void)C; (void)OC; return 0; }

/* dweight(OC,C) += dout(N,OC)^T @ inp(N,C): matmul_backward's weight gradient alone (llmc/backend.h; W of the split
 * backward). Deterministic: fixed partitions; rows summed in order. */
static inline void matmul_backward_weight(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC) {
#ifdef LLMC_CPU_NAIVE
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        float* dw = dweight + (size_t)o * C;
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            float g = dout[(size_t)n * OC + o];
            for (int i = 0; i < C; i++) { dw[i] += x[i] * g; }
        }
    }
#else
    cpu_sgemm_rows(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
#endif
}

/* Backward of matmul_forward:
 *   if pre_gelu != NULL: dout(N,OC) *= gelu'(pre_gelu) in place (dout is clobbered);
 *   dinp(N,C) = dout @ weight (overwritten; may be NULL to skip);
 *   dweight(OC,C) += dout^T @ inp (NULL: left to matmul_backward_weight);  dbias(OC) += sum_n dout[n,:] (if dbias
 *   != NULL).
 * scratch unused. Deterministic: fixed partitions; dbias sums rows in order. */
static inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, floatX* dout,
                                   const floatX* inp, const floatX* weight, float* scratch,
                                   int N, int C, int OC, const floatX* pre_gelu) {
    (void)scratch;
    if (pre_gelu) { gelu_backward_inplace(dout, pre_gelu, (size_t)N * OC); }
    if (dweight) { matmul_backward_weight(dweight, dout, inp, N, C, OC); }
#ifdef LLMC_CPU_NAIVE
    if (dinp) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float* dx = dinp + (size_t)n * C;
            const float* d = dout + (size_t)n * OC;
            for (int i = 0; i < C; i++) { dx[i] = 0.0f; }
            for (int o = 0; o < OC; o++) {
                const float* wr = weight + (size_t)o * C;
                float g = d[o];
                for (int i = 0; i < C; i++) { dx[i] += wr[i] * g; }
            }
        }
    }
    if (dbias) {
        #pragma omp parallel for schedule(static)
        for (int o = 0; o < OC; o++) {
            float bsum = 0.0f;
            for (int n = 0; n < N; n++) { bsum += dout[(size_t)n * OC + o]; }
            dbias[o] += bsum;
        }
    }
#else
    if (dinp) { cpu_sgemm_rows(0, 0, N, C, OC, dout, OC, weight, C, 0.0f, dinp, C); }
    if (dbias) {
        #pragma omp parallel if((long)N * OC >= LLMC_CPU_PAR_MIN)
        {
            long o0, o1;
            cpu_partition(OC, cpu_team_size(), cpu_thread_id(), 16, &o0, &o1);
            for (int n = 0; n < N; n++) {
                const float* d = dout + (size_t)n * OC;
                for (long o = o0; o < o1; o++) { dbias[o] += d[o]; }
            }
        }
    }
#endif
}

/* matmul_backward with pre_gelu = NULL, then dinp(N,C) *= gelu'(inp_pre_gelu(N,C)) (llmc/backend.h; the CUDA backend
 * uses cuBLASLt's DGELU epilogue). The same arithmetic as the fused path (the next layer's matmul_backward with
 * pre_gelu = inp_pre_gelu applies the same gelu_backward_inplace to the same values), so bit-identical to it. */
static inline void matmul_backward_dgelu(floatX* dinp, floatX* dweight, floatX* dbias, floatX* dout, const floatX* inp,
                                         const floatX* weight, float* scratch, int N, int C, int OC,
                                         const floatX* inp_pre_gelu) {
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, scratch, N, C, OC, NULL);
    if (dinp && N > 0 && C > 0) { gelu_backward_inplace(dinp, inp_pre_gelu, (size_t)N * C); }
}

#endif /* LLMC_CPU_MATMUL_H */
