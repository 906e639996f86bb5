/*
 * llmc/cuda/qknorm.cuh -- QK-norm: RMSNorm (Zhang & Sennrich 2019) of every query and key head of qkv in place,
 * forward and backward; the CPU twin and the full contract (shapes, formulas) are llmc/cpu/qknorm.h's (QK-norm:
 * Dehghani et al. 2023; per head with weights of head size, as Hugging Face's Qwen3 q_norm / k_norm).
 *
 *   qknorm_forward(qkv (N,R) floatX in place, pre (N,NH+NKV,hs) floatX out, rstd (N,NH+NKV) fp32 out, qw (hs),
 *                  kw (hs), N, NH, NKV, hs),  R = (NH + 2 NKV) hs
 *   qknorm_backward(dqkv (N,R) floatX in place, dqw (hs) +=, dkw (hs) +=, scratch fp32 (qknorm_scratch_floats),
 *                   pre, qw, kw, rstd, N, NH, NKV, hs)
 * One warp per head row (hs values, lanes strided by 32; fp32 arithmetic, one rounding to floatX per output); the
 * row's sum of squares and the backward's sum of dxhat xhat are warp shuffles. The weight gradients are
 * deterministic without atomics: QKNORM_CHUNKS blocks each sum a contiguous range of tokens (2 hs threads, one per
 * element of qw and kw) into the scratch, then one pass adds the chunks in order into dqw and dkw. Memory-bound:
 * the forward reads and writes the (NH+NKV) hs q and k values of each token once and writes them to pre.
 * Errors: hs > 512 or a negative size exit with one line; launches are checked (CUDA_CHECK_LAUNCH). Queued on
 * main_stream(); no host synchronisation.
 */
#ifndef LLMC_CUDA_QKNORM_CUH
#define LLMC_CUDA_QKNORM_CUH

#include "common.cuh"
#include "layernorm.cuh"

#define QKNORM_CHUNKS 256 /* token ranges of the weight-gradient partial sums */

/* fp32 scratch of qknorm_backward: the chunks' partial weight gradients */
static inline size_t qknorm_scratch_floats(int N, int NH, int NKV, int hs) {
    (void)N; (void)NH; (void)NKV;
    return (size_t)QKNORM_CHUNKS * 2 * (size_t)hs;
}

static inline void qknorm_check(int N, int NH, int NKV, int hs) {
    if (N < 0 || NH < 1 || NKV < 1 || hs < 1 || hs > 512) {
        FATAL("qknorm: N=%d NH=%d NKV=%d hs=%d (expected N >= 0, heads >= 1, 1 <= hs <= 512)", N, NH, NKV, hs);
    }
}

/* one warp per row r of rows = N (NH+NKV), grid-stride over the rows */
static __global__ void qknorm_forward_kernel(floatX* qkv, floatX* pre, float* rstd, const floatX* qw,
                                             const floatX* kw, size_t rows, int H, int NH, int hs, size_t R) {
    const int lane = (int)(threadIdx.x % WARP_SIZE);
    const size_t warps = (size_t)gridDim.x * blockDim.x / WARP_SIZE;
    for (size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE; r < rows; r += warps) {
        const size_t n = r / (size_t)H;
        const int j = (int)(r % (size_t)H);
        floatX* x = qkv + n * R + (size_t)j * hs;
        floatX* p = pre + r * (size_t)hs;
        const floatX* w = j < NH ? qw : kw;
        float ss = 0.0f;
        for (int i = lane; i < hs; i += WARP_SIZE) {
            const float v = to_float(x[i]);
            p[i] = x[i];
            ss += v * v;
        }
        ss = warp_reduce_sum(ss);
        const float rs = 1.0f / sqrtf(ss / (float)hs + RMSNORM_EPS);
        if (lane == 0) { rstd[r] = rs; }
        for (int i = lane; i < hs; i += WARP_SIZE) { x[i] = from_float<floatX>(to_float(p[i]) * rs * to_float(w[i])); }
    }
}

/* block c, thread e < 2 hs (element e % hs of qw for e < hs, of kw after): the sum of dy xhat over tokens
 * [c chunk, (c+1) chunk) and their query (or key) heads, in order */
static __global__ void qknorm_dweight_partial_kernel(float* partial, const floatX* dqkv, const floatX* pre,
                                                     const float* rstd, int N, int H, int NH, int hs, size_t R,
                                                     int chunk) {
    const int e = (int)threadIdx.x, i = e % hs, key = e / hs;
    if (e >= 2 * hs) { return; }
    const int n0 = (int)blockIdx.x * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
    float s = 0.0f;
    for (int n = n0; n < n1; n++) {
        for (int j = key ? NH : 0; j < (key ? H : NH); j++) {
            const size_t r = (size_t)n * H + j;
            s += to_float(dqkv[(size_t)n * R + (size_t)j * hs + i]) * (to_float(pre[r * hs + i]) * rstd[r]);
        }
    }
    partial[(size_t)blockIdx.x * 2 * hs + e] = s;
}

/* thread e < 2 hs: dqw / dkw[e % hs] += the chunks' partial sums, chunk 0 first */
static __global__ void qknorm_dweight_reduce_kernel(floatX* dqw, floatX* dkw, const float* partial, int chunks,
                                                    int hs) {
    const int e = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (e >= 2 * hs) { return; }
    float s = 0.0f;
    for (int c = 0; c < chunks; c++) { s += partial[(size_t)c * 2 * hs + e]; }
    floatX* d = e < hs ? dqw + e : dkw + (e - hs);
    *d = from_float<floatX>(to_float(*d) + s);
}

/* one warp per row (grid-stride): dqkv <- rstd (dy w - xhat mean(dy w xhat)), xhat = pre rstd */
static __global__ void qknorm_backward_kernel(floatX* dqkv, const floatX* pre, const floatX* qw, const floatX* kw,
                                              const float* rstd, size_t rows, int H, int NH, int hs, size_t R) {
    const int lane = (int)(threadIdx.x % WARP_SIZE);
    const size_t warps = (size_t)gridDim.x * blockDim.x / WARP_SIZE;
    for (size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE; r < rows; r += warps) {
        const size_t n = r / (size_t)H;
        const int j = (int)(r % (size_t)H);
        floatX* d = dqkv + n * R + (size_t)j * hs;
        const floatX* p = pre + r * (size_t)hs;
        const floatX* w = j < NH ? qw : kw;
        const float rs = rstd[r];
        float s = 0.0f;
        for (int i = lane; i < hs; i += WARP_SIZE) { s += to_float(d[i]) * to_float(w[i]) * (to_float(p[i]) * rs); }
        s = warp_reduce_sum(s) / (float)hs;
        for (int i = lane; i < hs; i += WARP_SIZE) {
            const float x = to_float(p[i]) * rs;
            d[i] = from_float<floatX>(rs * (to_float(d[i]) * to_float(w[i]) - x * s));
        }
    }
}

static inline void qknorm_forward(floatX* qkv, floatX* pre, float* rstd, const floatX* qw, const floatX* kw, int N,
                                  int NH, int NKV, int hs) {
    qknorm_check(N, NH, NKV, hs);
    const int H = NH + NKV, block = 256;
    const size_t rows = (size_t)N * H, R = (size_t)(NH + 2 * NKV) * hs;
    if (rows == 0) { return; }
    LAUNCH(grid_for(rows * WARP_SIZE, block), block, 0, main_stream(), qknorm_forward_kernel)(qkv, pre, rstd, qw, kw,
                                                                                             rows, H, NH, hs, R);
    CUDA_CHECK_LAUNCH();
}

static inline void qknorm_backward(floatX* dqkv, floatX* dqw, floatX* dkw, float* scratch, const floatX* pre,
                                   const floatX* qw, const floatX* kw, const float* rstd, int N, int NH, int NKV,
                                   int hs) {
    qknorm_check(N, NH, NKV, hs);
    const int H = NH + NKV, block = 256;
    const size_t rows = (size_t)N * H, R = (size_t)(NH + 2 * NKV) * hs;
    if (rows == 0) { return; }
    const int chunk = (N + QKNORM_CHUNKS - 1) / QKNORM_CHUNKS, chunks = (N + chunk - 1) / chunk;
    /* the weight gradients first: they read dy before the row pass overwrites it */
    LAUNCH(chunks, CEIL_DIV(2 * hs, WARP_SIZE) * WARP_SIZE, 0, main_stream(), qknorm_dweight_partial_kernel)(
        scratch, dqkv, pre, rstd, N, H, NH, hs, R, chunk);
    CUDA_CHECK_LAUNCH();
    LAUNCH(1, CEIL_DIV(2 * hs, WARP_SIZE) * WARP_SIZE, 0, main_stream(), qknorm_dweight_reduce_kernel)(dqw, dkw,
                                                                                                     scratch, chunks,
                                                                                                     hs);
    CUDA_CHECK_LAUNCH();
    LAUNCH(grid_for(rows * WARP_SIZE, block), block, 0, main_stream(), qknorm_backward_kernel)(dqkv, pre, qw, kw,
                                                                                              rstd, rows, H, NH, hs,
                                                                                              R);
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_QKNORM_CUH */
