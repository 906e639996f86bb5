/*
 * llmc/cuda/layernorm.cuh -- LayerNorm (Ba, Kiros, Hinton 2016), eps 1e-5, biased variance, as GPT-2.
 *
 *   layernorm_forward(out(N,C), mean(N) fp32, rstd(N) fp32, inp(N,C), w(C), b(C), N, C)
 *   fused_residual_layernorm_forward(residual(N,C) = inp1 + inp2, out(N,C), mean(N), rstd(N),
 *                                    inp1(N,C), inp2(N,C), w(C), b(C), N, C)
 *       the residual is rounded to floatX first and the LayerNorm is taken of the rounded values, so
 *       the result equals residual_forward followed by layernorm_forward.
 *   layernorm_backward(dinp(N,C) +=, dw(C) +=, db(C) +=, scratch fp32, dout(N,C), inp(N,C), w(C),
 *                      mean(N), rstd(N), N, C)     scratch: layernorm_scratch_floats(N, C) floats
 *
 * Forward: one warp per row, two-pass statistics in fp32 (mean, then sum of squared deviations),
 * 128-bit loads when C is a multiple of the packet size (rows re-read from L1 for passes 2-3).
 * mean/rstd may be NULL (inference).
 * Backward: one warp per row; dinp = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)),
 * dnorm = w * dout (standard derivation, as llm.c layernorm_backward). dw/db are reduced
 * deterministically: the rows are split into a fixed number of chunks (a function of N only), each
 * warp of a block sums its rows of the chunk in row order, then the warps are summed in order into
 * scratch[chunk][2C]; a second kernel sums the chunks in order and adds to dw/db. No atomics.
 * The per-warp sums: for C <= LAYERNORM_BWD_REG_C (1024) each lane keeps its columns' dw/db partial sums in
 * registers across the rows (2 * C / 32 floats: 48 at C = 768) and writes them to shared memory once; above it
 * they are accumulated in shared memory (my_dw[c + k] +=: with 128-bit packets the lanes' addresses are W floats
 * apart, a W-way bank conflict on every row). Both sum in the same order, so their results are bit-identical.
 * Error behaviour: C too large for shared memory (> ~7000 on H100/H200) exits with a message;
 * launch errors exit via CUDA_CHECK_LAUNCH. Queued on main_stream(); no host sync.
 *
 * RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"), eps RMSNORM_EPS = 1e-5, no bias:
 *   rmsnorm_forward(out(N,C), rstd(N) fp32, inp(N,C), w(C), N, C)       out = inp * rstd * w,
 *                                                                       rstd = 1/sqrt(mean(inp^2) + eps)
 *   fused_residual_rmsnorm_forward(residual(N,C) = inp1 + inp2, out(N,C), rstd(N), inp1, inp2, w(C), N, C)
 *       the residual rounded to floatX first and normalised as stored, as LayerNorm's.
 *   rmsnorm_backward(dinp(N,C) +=, dw(C) +=, scratch fp32, dout(N,C), inp(N,C), w(C), rstd(N), N, C)
 *       dinp += rstd * (dxhat - xhat * mean(dxhat * xhat)), xhat = inp * rstd, dxhat = w * dout; dw += sum dout xhat.
 *       scratch: rmsnorm_scratch_floats(N, C) floats (the chunks' dw partial sums).
 * The same kernels as LayerNorm's, instantiated with RMS = true: the mean is 0 (the forward's one pass over the
 * row sums x^2 while it loads it; no second pass), no bias, no mean(dnorm) term, and the backward's per-warp and
 * per-chunk partial sums hold dw only (C floats instead of 2C). Same warps, loads, chunks and summation order.
 * Error behaviour as LayerNorm's.
 */
#ifndef LLMC_CUDA_LAYERNORM_CUH
#define LLMC_CUDA_LAYERNORM_CUH

#include "common.cuh"

#define LAYERNORM_EPS 1e-5f
#define RMSNORM_EPS 1e-5f          /* RMSNorm's eps, added to mean(x^2); the CPU twin uses the same value */
#define LAYERNORM_FWD_WARPS 8     /* rows per forward block */
#define LAYERNORM_BWD_WARPS 4     /* warps per backward block (each keeps 2*C fp32 partials in smem) */
#define LAYERNORM_BWD_MAX_CHUNKS 1024
#define LAYERNORM_BWD_MIN_ROWS 16
#define LAYERNORM_BWD_REG_FLOATS 32   /* dw (and as many db) partial sums per lane kept in registers */
#define LAYERNORM_BWD_REG_C (WARP_SIZE * LAYERNORM_BWD_REG_FLOATS) /* largest C of the register path */

/* number of row chunks of the backward reduction: depends on N only (determinism across devices) */
static inline int layernorm_backward_chunks(int N) {
    int ch = CEIL_DIV(N, LAYERNORM_BWD_MIN_ROWS);
    if (ch > LAYERNORM_BWD_MAX_CHUNKS) { ch = LAYERNORM_BWD_MAX_CHUNKS; }
    return ch < 1 ? 1 : ch;
}
/* fp32 scratch needed by layernorm_backward */
static inline size_t layernorm_scratch_floats(int N, int C) { return (size_t)layernorm_backward_chunks(N) * 2 * (size_t)C; }
/* fp32 scratch needed by rmsnorm_backward: the chunks' dw partial sums (no db) */
static inline size_t rmsnorm_scratch_floats(int N, int C) { return (size_t)layernorm_backward_chunks(N) * (size_t)C; }

/* loads W input values at column c of a row: x1 (plain) or round(x1 + x2) (fused residual) */
template <int W, bool FUSED>
static __device__ __forceinline__ void layernorm_load_input(float* v, const floatX* x1, const floatX* x2, int c) {
    PackedN<floatX, W> a = load_packed<floatX, W>(x1 + c);
    if constexpr (FUSED) {
        PackedN<floatX, W> b = load_packed<floatX, W>(x2 + c);
#pragma unroll
        for (int k = 0; k < W; k++) { v[k] = to_float(from_float<floatX>(to_float(a[k]) + to_float(b[k]))); }
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) { v[k] = to_float(a[k]); }
    }
}

/* RMS: RMSNorm (mean 0, sum of squares taken in the first pass, no bias: b and mean unused) */
template <int W, bool FUSED, bool RMS>
static __global__ void layernorm_forward_kernel(floatX* residual, floatX* out, float* mean, float* rstd,
                                                const floatX* inp1, const floatX* inp2, const floatX* w,
                                                const floatX* b, int N, int C) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= N) { return; } /* whole warp leaves together; no block barrier below */
    const floatX* x1 = inp1 + (size_t)row * C;
    const floatX* x2 = FUSED ? inp2 + (size_t)row * C : NULL;
    float v[W];
    float sum = 0.0f, var = 0.0f;
    for (int c = lane * W; c < C; c += WARP_SIZE * W) {
        layernorm_load_input<W, FUSED>(v, x1, x2, c);
        if constexpr (FUSED) {
            PackedN<floatX, W> r;
#pragma unroll
            for (int k = 0; k < W; k++) { r[k] = from_float<floatX>(v[k]); }
            store_packed<floatX, W>(residual + (size_t)row * C + c, r);
        }
#pragma unroll
        for (int k = 0; k < W; k++) {
            if constexpr (RMS) { var += v[k] * v[k]; } else { sum += v[k]; }
        }
    }
    float m = 0.0f;
    if constexpr (!RMS) {
        m = warp_reduce_sum(sum) / (float)C;
        for (int c = lane * W; c < C; c += WARP_SIZE * W) {
            layernorm_load_input<W, FUSED>(v, x1, x2, c);
#pragma unroll
            for (int k = 0; k < W; k++) { float d = v[k] - m; var += d * d; }
        }
    }
    const float s = rsqrtf(warp_reduce_sum(var) / (float)C + (RMS ? RMSNORM_EPS : LAYERNORM_EPS));
    for (int c = lane * W; c < C; c += WARP_SIZE * W) {
        layernorm_load_input<W, FUSED>(v, x1, x2, c);
        PackedN<floatX, W> wv = load_packed<floatX, W>(w + c);
        PackedN<floatX, W> o;
        if constexpr (RMS) {
#pragma unroll
            for (int k = 0; k < W; k++) { o[k] = from_float<floatX>(v[k] * s * to_float(wv[k])); }
        } else {
            PackedN<floatX, W> bv = load_packed<floatX, W>(b + c);
#pragma unroll
            for (int k = 0; k < W; k++) { o[k] = from_float<floatX>((v[k] - m) * s * to_float(wv[k]) + to_float(bv[k])); }
        }
        store_packed<floatX, W>(out + (size_t)row * C + c, o);
    }
    if (lane == 0) {
        if (mean) { mean[row] = m; }
        if (rstd) { rstd[row] = s; }
    }
}

/* block = LAYERNORM_BWD_WARPS warps, one block per row chunk; smem: warps * NP C floats (NP = 2: dw and db;
 * RMS: 1, dw only), partials: (chunks, NP C).
 * REG: the lane's partial sums of dw/db in registers (C <= LAYERNORM_BWD_REG_C: column c = lane * W + j * 32 * W
 * + k lives in rdw[j * W + k]), written to shared memory once after the rows; else accumulated in shared memory.
 * RMS: RMSNorm's backward (mean unused, taken as 0; no mean(dnorm) term; no db). */
template <int W, bool REG, bool RMS>
static __global__ void layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                                 const floatX* w, const float* mean, const float* rstd, int N, int C,
                                                 int rows_per_chunk) {
    DYNAMIC_SHARED(float, acc);
    constexpr int NR = REG ? LAYERNORM_BWD_REG_FLOATS : 1; /* register partial sums per lane (W per column stride) */
    constexpr int NP = RMS ? 1 : 2;                         /* partial-sum arrays: dw (and db) */
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int nwarps = blockDim.x / WARP_SIZE;
    if constexpr (!REG) {
        for (int i = threadIdx.x; i < nwarps * NP * C; i += blockDim.x) { acc[i] = 0.0f; }
        __syncthreads();
    }
    float* my_dw = acc + (size_t)warp * NP * C;
    float* my_db = my_dw + (NP - 1) * C; /* RMS: never written */
    float rdw[NR], rdb[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) { rdw[i] = 0.0f; rdb[i] = 0.0f; }
    const int row0 = blockIdx.x * rows_per_chunk;
    const int row_end = min(N, row0 + rows_per_chunk);
    for (int row = row0 + warp; row < row_end; row += nwarps) {
        const float m = RMS ? 0.0f : mean[row];
        const float s = rstd[row];
        const floatX* x = inp + (size_t)row * C;
        const floatX* dy = dout + (size_t)row * C;
        float s1 = 0.0f, s2 = 0.0f;
        for (int c = lane * W; c < C; c += WARP_SIZE * W) {
            PackedN<floatX, W> xv = load_packed<floatX, W>(x + c);
            PackedN<floatX, W> gv = load_packed<floatX, W>(dy + c);
            PackedN<floatX, W> wv = load_packed<floatX, W>(w + c);
#pragma unroll
            for (int k = 0; k < W; k++) {
                float xhat = (to_float(xv[k]) - m) * s;
                float dn = to_float(wv[k]) * to_float(gv[k]);
                s1 += dn;
                s2 += dn * xhat;
            }
        }
        s1 = RMS ? 0.0f : warp_reduce_sum(s1) / (float)C;
        s2 = warp_reduce_sum(s2) / (float)C;
        floatX* dx = dinp + (size_t)row * C;
        /* REG: a loop of NR / W column strides with a compile-time index, so rdw/rdb stay in registers */
#pragma unroll
        for (int j = 0; j < (REG ? NR / W : 1); j++) {
            for (int c = lane * W + j * WARP_SIZE * W; c < C; c += WARP_SIZE * W) {
                PackedN<floatX, W> xv = load_packed<floatX, W>(x + c);
                PackedN<floatX, W> gv = load_packed<floatX, W>(dy + c);
                PackedN<floatX, W> wv = load_packed<floatX, W>(w + c);
                PackedN<floatX, W> dv = load_packed<floatX, W>(dx + c);
#pragma unroll
                for (int k = 0; k < W; k++) {
                    float xhat = (to_float(xv[k]) - m) * s;
                    float g = to_float(gv[k]);
                    float dn = to_float(wv[k]) * g;
                    dv[k] = from_float<floatX>(to_float(dv[k]) + (dn - s1 - xhat * s2) * s);
                    if constexpr (REG) {
                        rdw[j * W + k] += g * xhat;
                        if constexpr (!RMS) { rdb[j * W + k] += g; }
                    } else {
                        my_dw[c + k] += g * xhat;
                        if constexpr (!RMS) { my_db[c + k] += g; }
                    }
                }
                store_packed<floatX, W>(dx + c, dv);
                if constexpr (REG) { break; } /* one stride per j */
            }
        }
    }
    if constexpr (REG) { /* each column of this warp is written once, by its lane (also when the warp had no rows) */
#pragma unroll
        for (int j = 0; j < NR / W; j++) {
            const int c = lane * W + j * WARP_SIZE * W;
            if (c < C) {
#pragma unroll
                for (int k = 0; k < W; k++) {
                    my_dw[c + k] = rdw[j * W + k];
                    if constexpr (!RMS) { my_db[c + k] = rdb[j * W + k]; }
                }
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < NP * C; i += blockDim.x) {
        float t = 0.0f;
        for (int q = 0; q < nwarps; q++) { t += acc[(size_t)q * NP * C + i]; }
        partials[(size_t)blockIdx.x * NP * C + i] = t;
    }
}

/* the backward kernel: 128-bit packets (vec) or scalar accesses; partial sums in registers (reg, needs
 * C <= LAYERNORM_BWD_REG_C) or in shared memory; LayerNorm's or (RMS) RMSNorm's */
typedef void (*LayernormBackwardKernel)(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*,
                                        const float*, int, int, int);
template <bool RMS>
static inline LayernormBackwardKernel norm_backward_kernel_for(int vec, int reg) {
    if (vec) { return reg ? layernorm_backward_kernel<X128_SIZE, true, RMS> : layernorm_backward_kernel<X128_SIZE, false, RMS>; }
    return reg ? layernorm_backward_kernel<1, true, RMS> : layernorm_backward_kernel<1, false, RMS>;
}
static inline LayernormBackwardKernel layernorm_backward_kernel_for(int vec, int reg) {
    return norm_backward_kernel_for<false>(vec, reg);
}
/* launches that kernel on nchunks blocks of LAYERNORM_BWD_WARPS warps with smem bytes of dynamic shared memory
 * (the attribute for more than 48 KiB is the caller's); the arguments are layernorm_backward_kernel's */
template <bool RMS>
static inline void norm_backward_launch(int vec, int reg, int nchunks, size_t smem, floatX* dinp, float* partials,
                                        const floatX* dout, const floatX* inp, const floatX* w, const float* mean,
                                        const float* rstd, int N, int C, int rows_per_chunk) {
    const int block = LAYERNORM_BWD_WARPS * WARP_SIZE;
    if (vec && reg) {
        LAUNCH(nchunks, block, smem, main_stream(), layernorm_backward_kernel<X128_SIZE, true, RMS>)(dinp, partials, dout, inp, w, mean, rstd, N, C, rows_per_chunk);
    } else if (vec) {
        LAUNCH(nchunks, block, smem, main_stream(), layernorm_backward_kernel<X128_SIZE, false, RMS>)(dinp, partials, dout, inp, w, mean, rstd, N, C, rows_per_chunk);
    } else if (reg) {
        LAUNCH(nchunks, block, smem, main_stream(), layernorm_backward_kernel<1, true, RMS>)(dinp, partials, dout, inp, w, mean, rstd, N, C, rows_per_chunk);
    } else {
        LAUNCH(nchunks, block, smem, main_stream(), layernorm_backward_kernel<1, false, RMS>)(dinp, partials, dout, inp, w, mean, rstd, N, C, rows_per_chunk);
    }
}
static inline void layernorm_backward_launch(int vec, int reg, int nchunks, size_t smem, floatX* dinp, float* partials,
                                             const floatX* dout, const floatX* inp, const floatX* w, const float* mean,
                                             const float* rstd, int N, int C, int rows_per_chunk) {
    norm_backward_launch<false>(vec, reg, nchunks, smem, dinp, partials, dout, inp, w, mean, rstd, N, C, rows_per_chunk);
}

/* block (32, 32): 32 columns of the (chunks, np C) partials (np = 2: dw then db; 1: dw only, db unused);
 * fixed-order sum, then dw/db += */
static __global__ void layernorm_backward_reduce_kernel(floatX* dw, floatX* db, const float* partials, int nchunks, int C,
                                                        int np) {
    __shared__ float tile[32][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    float t = 0.0f;
    if (col < np * C) {
        for (int ch = threadIdx.y; ch < nchunks; ch += 32) { t += partials[(size_t)ch * np * C + col]; }
    }
    tile[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && col < np * C) {
        float sum = 0.0f;
        for (int q = 0; q < 32; q++) { sum += tile[q][threadIdx.x]; }
        floatX* dst = col < C ? dw + col : db + (col - C);
        *dst = from_float<floatX>(to_float(*dst) + sum);
    }
}

static inline int layernorm_vec_ok(int C, const void* a, const void* b, const void* c, const void* d, const void* e) {
    return C % X128_SIZE == 0 && ptr_aligned(a, 16) && ptr_aligned(b, 16) && ptr_aligned(c, 16) &&
           (d == NULL || ptr_aligned(d, 16)) && (e == NULL || ptr_aligned(e, 16));
}

/* the forward launch of both ops (RMS: RMSNorm, mean and b unused); residual/inp2 NULL: not fused */
template <bool RMS>
static inline void norm_forward(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                const floatX* inp2, const floatX* w, const floatX* b, int N, int C) {
    if (N == 0) { return; }
    const int block = LAYERNORM_FWD_WARPS * WARP_SIZE;
    const unsigned int grid = (unsigned int)CEIL_DIV(N, LAYERNORM_FWD_WARPS);
    if (inp2 == NULL) {
        if (layernorm_vec_ok(C, out, inp1, w, b, NULL)) {
            LAUNCH(grid, block, 0, main_stream(), layernorm_forward_kernel<X128_SIZE, false, RMS>)(NULL, out, mean, rstd, inp1, NULL, w, b, N, C);
        } else {
            LAUNCH(grid, block, 0, main_stream(), layernorm_forward_kernel<1, false, RMS>)(NULL, out, mean, rstd, inp1, NULL, w, b, N, C);
        }
    } else if (layernorm_vec_ok(C, out, inp1, w, b, inp2) && ptr_aligned(residual, 16)) {
        LAUNCH(grid, block, 0, main_stream(), layernorm_forward_kernel<X128_SIZE, true, RMS>)(residual, out, mean, rstd, inp1, inp2, w, b, N, C);
    } else {
        LAUNCH(grid, block, 0, main_stream(), layernorm_forward_kernel<1, true, RMS>)(residual, out, mean, rstd, inp1, inp2, w, b, N, C);
    }
    CUDA_CHECK_LAUNCH();
}

/* the backward of both ops (RMS: RMSNorm; mean and db unused); scratch: layernorm_ or rmsnorm_scratch_floats */
template <bool RMS>
static inline void norm_backward(floatX* dinp, floatX* dw, floatX* db, float* scratch, const floatX* dout,
                                 const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N, int C) {
    if (N == 0 || C == 0) { return; }
    const int np = RMS ? 1 : 2;
    const int nchunks = layernorm_backward_chunks(N);
    const int rows_per_chunk = CEIL_DIV(N, nchunks);
    const size_t smem = (size_t)LAYERNORM_BWD_WARPS * np * (size_t)C * sizeof(float);
    const int vec = layernorm_vec_ok(C, dinp, inp, w, dout, NULL);
    const int reg = C <= LAYERNORM_BWD_REG_C;
    if (smem > 48 * 1024) {
        if (smem > cuda_state()->smem_optin) {
            FATAL("%s: C=%d needs %zu bytes of shared memory, device allows %zu", RMS ? "rmsnorm_backward" : "layernorm_backward",
                  C, smem, cuda_state()->smem_optin);
        }
        CUDA_CHECK(cudaFuncSetAttribute(norm_backward_kernel_for<RMS>(vec, reg), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    }
    norm_backward_launch<RMS>(vec, reg, nchunks, smem, dinp, scratch, dout, inp, w, mean, rstd, N, C, rows_per_chunk);
    CUDA_CHECK_LAUNCH();
    dim3 rblock(32, 32);
    LAUNCH((unsigned int)CEIL_DIV(np * C, 32), rblock, 0, main_stream(), layernorm_backward_reduce_kernel)(dw, db, scratch, nchunks, C, np);
    CUDA_CHECK_LAUNCH();
}

/* ---- LayerNorm (contract in llmc/backend.h) ---- */

static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                     const floatX* b, int N, int C) {
    norm_forward<false>(NULL, out, mean, rstd, inp, NULL, w, b, N, C);
}

static inline void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                                    const floatX* inp1, const floatX* inp2, const floatX* w,
                                                    const floatX* b, int N, int C) {
    norm_forward<false>(residual, out, mean, rstd, inp1, inp2, w, b, N, C);
}

static inline void layernorm_backward(floatX* dinp, floatX* dw, floatX* db, float* scratch, const floatX* dout,
                                      const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N,
                                      int C) {
    norm_backward<false>(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C);
}

/* ---- RMSNorm (Zhang & Sennrich 2019; contract in llmc/backend.h) ---- */

/* out(N,C) = inp * rstd * w(C), rstd(N) = 1/sqrt(mean_c(inp^2) + RMSNORM_EPS) fp32 (may be NULL: inference) */
static inline void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C) {
    norm_forward<true>(NULL, out, NULL, rstd, inp, NULL, w, NULL, N, C);
}

/* residual(N,C) = inp1 + inp2 rounded to floatX, out(N,C) = rmsnorm(residual as stored), rstd(N) fp32 */
static inline void fused_residual_rmsnorm_forward(floatX* residual, floatX* out, float* rstd, const floatX* inp1,
                                                  const floatX* inp2, const floatX* w, int N, int C) {
    norm_forward<true>(residual, out, NULL, rstd, inp1, inp2, w, NULL, N, C);
}

/* dinp(N,C) += rstd (dxhat - xhat mean_c(dxhat xhat)), dw(C) += sum_n dout xhat (xhat = inp rstd, dxhat = dout w);
 * scratch: rmsnorm_scratch_floats(N, C) fp32; deterministic (fixed chunks and summation order, no atomics) */
static inline void rmsnorm_backward(floatX* dinp, floatX* dw, float* scratch, const floatX* dout, const floatX* inp,
                                    const floatX* w, const float* rstd, int N, int C) {
    norm_backward<true>(dinp, dw, NULL, scratch, dout, inp, w, NULL, rstd, N, C);
}

#endif /* LLMC_CUDA_LAYERNORM_CUH */
