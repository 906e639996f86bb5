/*
 * llmc/cuda/compress.cuh -- the gradient-compression codecs of the CUDA backend (contract: llmc/backend.h,
 * "gradient compression"; orchestration: llmc/grad_compress.h). The same results as llmc/cpu/compress.h bit for
 * bit on the same fp32 inputs (the emulator test compares them): IEEE division and explicit _rn arithmetic, so
 * neither --use_fast_math nor FMA contraction changes a value; the counter-based stream of common.cuh.
 *   compress_pack            dst fp32 = g + decay * residual; elementwise, grid-stride
 *   compress_quantize_int8   one 256-thread block per COMPRESS_INT8_BLOCK values: block absmax by warp shuffles,
 *                            then each thread quantises its 8 values (Dettmers 2016, per-block absmax scaling)
 *   compress_dequantize_int8 elementwise
 *   compress_topk_select     exact top-k by magnitude without a host synchronisation: four radix passes of 8 bits
 *                            (a histogram kernel with shared-memory atomics, integer counts so the order of the
 *                            atomics cannot matter, then a one-thread kernel that picks the digit), then a
 *                            per-tile count, a one-thread exclusive scan of the tile counts, and an ordered
 *                            write (warp ballots) that keeps the output in increasing index order with the
 *                            lower index winning ties (Lin et al. 2018, Deep Gradient Compression, select the
 *                            largest values; here exactly, not by sampling)
 *   compress_zero_at, compress_scatter_add   one thread per selected index (indices distinct: no races)
 * All kernels are queued on main_stream(); no host synchronisation. Errors: launch errors exit via CUDA_CHECK_LAUNCH.
 */
#ifndef LLMC_CUDA_COMPRESS_CUH
#define LLMC_CUDA_COMPRESS_CUH

#include "common.cuh"

#define COMPRESS_INT8_BLOCK 2048 /* values per INT8 scale (llmc/grad_compress.h says why); = 256 threads x 8 */
#define COMPRESS_TOPK_TILE 4096  /* elements per tile of the ordered top-k write */

template <typename T>
static __global__ void compress_pack_kernel(float* dst, const T* g, const float* residual, float decay, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = to_float(g[i]);
        dst[i] = residual ? __fadd_rn(v, __fmul_rn(decay, residual[i])) : v;
    }
}

static inline void compress_pack(float* dst, const floatX* g, const float* residual, float decay, size_t n) {
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), compress_pack_kernel<floatX>)(dst, g, residual, decay, n);
    CUDA_CHECK_LAUNCH();
}

static __device__ __forceinline__ int8_t compress_q8(float x, float s, int stochastic, uint32_t random) {
    if (s == 0.0f) { return 0; }
    float y = __fdiv_rn(x, s);
    float r = stochastic ? floorf(__fadd_rn(y, (float)(random >> 8) * (1.0f / 16777216.0f))) : rintf(y);
    r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
    if (r != r) { r = 0.0f; } /* NaN input: 0, as the CPU backend */
    return (int8_t)r;
}

static __global__ void compress_quantize_int8_kernel(int8_t* q, float* scales, const float* x, size_t n, int stochastic,
                                                     uint32_t seed, uint32_t step, uint64_t key) {
    __shared__ float warp_max[8];
    size_t a = (size_t)blockIdx.x * COMPRESS_INT8_BLOCK;
    float v[8], amax = 0.0f;
    for (int j = 0; j < 8; j++) {
        size_t i = a + threadIdx.x + 256 * (size_t)j;
        v[j] = i < n ? x[i] : 0.0f;
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int o = 16; o > 0; o >>= 1) { amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o)); }
    if ((threadIdx.x & 31) == 0) { warp_max[threadIdx.x >> 5] = amax; }
    __syncthreads();
    amax = warp_max[0];
    for (int w = 1; w < 8; w++) { amax = fmaxf(amax, warp_max[w]); }
    float s = __fdiv_rn(amax, 127.0f);
    if (threadIdx.x == 0) { scales[blockIdx.x] = s; }
    for (int j = 0; j < 8; j++) {
        size_t i = a + threadIdx.x + 256 * (size_t)j;
        if (i < n) { q[i] = compress_q8(v[j], s, stochastic, stochastic ? random_u32_counter(seed, step, key + i) : 0u); }
    }
}

static inline void compress_quantize_int8(int8_t* q, float* scales, const float* x, size_t n, int stochastic,
                                          uint32_t seed, uint32_t step, uint64_t key) {
    if (n == 0) { return; }
    unsigned int blocks = (unsigned int)((n + COMPRESS_INT8_BLOCK - 1) / COMPRESS_INT8_BLOCK);
    LAUNCH(blocks, 256, 0, main_stream(), compress_quantize_int8_kernel)(q, scales, x, n, stochastic, seed, step, key);
    CUDA_CHECK_LAUNCH();
}

static __global__ void compress_dequantize_int8_kernel(float* out, const int8_t* q, const float* scales, size_t n,
                                                       float alpha, int accumulate) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d = __fmul_rn(__fmul_rn((float)q[i], scales[i / COMPRESS_INT8_BLOCK]), alpha);
        out[i] = accumulate ? __fadd_rn(out[i], d) : d;
    }
}

static inline void compress_dequantize_int8(float* out, const int8_t* q, const float* scales, size_t n, float alpha,
                                            int accumulate) {
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), compress_dequantize_int8_kernel)(out, q, scales, n, alpha, accumulate);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- top-k */

/* scratch layout (uint32): [0,256) histogram, [256] prefix, [257] mask, [258] need, [259] unused,
 * then tile counts gt[tiles], eq[tiles], and their exclusive prefixes gt0[tiles], eq0[tiles] */
static inline size_t compress_topk_tiles(size_t n) { return (n + COMPRESS_TOPK_TILE - 1) / COMPRESS_TOPK_TILE; }
static inline size_t compress_topk_scratch_bytes(size_t n) { return (260 + 4 * compress_topk_tiles(n)) * sizeof(uint32_t); }

static __device__ __forceinline__ uint32_t compress_key(float x) { return __float_as_uint(x) & 0x7fffffffu; }

static __global__ void compress_topk_init_kernel(uint32_t* s, uint32_t k) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) { s[i] = 0; }
    if (threadIdx.x == 0) { s[256] = 0; s[257] = 0; s[258] = k; s[259] = 0; }
}

static __global__ void compress_topk_hist_kernel(uint32_t* s, const float* x, size_t n, int shift) {
    __shared__ uint32_t h[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) { h[i] = 0; }
    __syncthreads();
    uint32_t prefix = s[256], mask = s[257];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t key = compress_key(x[i]);
        if ((key & mask) == prefix) { atomicAdd(&h[(key >> shift) & 255u], 1u); }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) { if (h[i]) { atomicAdd(&s[i], h[i]); } }
}

/* one thread: the digit at `shift` of the k-th largest key among those matching prefix/mask; clears the histogram */
static __global__ void compress_topk_pick_kernel(uint32_t* s, int shift) {
    uint32_t need = s[258];
    int d = 255;
    while (d > 0 && s[d] < need) { need -= s[d]; d--; }
    s[256] |= (uint32_t)d << shift;
    s[257] |= 255u << shift;
    s[258] = need;
    for (int i = 0; i < 256; i++) { s[i] = 0; }
}

/* per tile: how many keys are above the threshold (gt) and equal to it (eq) */
static __global__ void compress_topk_count_kernel(uint32_t* s, const float* x, size_t n) {
    __shared__ uint32_t cgt, ceq;
    if (threadIdx.x == 0) { cgt = 0; ceq = 0; }
    __syncthreads();
    uint32_t thr = s[256], gt = 0, eq = 0;
    size_t a = (size_t)blockIdx.x * COMPRESS_TOPK_TILE;
    for (size_t i = a + threadIdx.x; i < n && i < a + COMPRESS_TOPK_TILE; i += blockDim.x) {
        uint32_t key = compress_key(x[i]);
        gt += key > thr;
        eq += key == thr;
    }
    atomicAdd(&cgt, gt);
    atomicAdd(&ceq, eq);
    __syncthreads();
    size_t tiles = (n + COMPRESS_TOPK_TILE - 1) / COMPRESS_TOPK_TILE;
    if (threadIdx.x == 0) { s[260 + blockIdx.x] = cgt; s[260 + tiles + blockIdx.x] = ceq; }
}

/* one thread: exclusive prefix sums of the tile counts, in tile order */
static __global__ void compress_topk_scan_kernel(uint32_t* s, size_t tiles) {
    uint32_t gt = 0, eq = 0;
    for (size_t t = 0; t < tiles; t++) {
        s[260 + 2 * tiles + t] = gt;
        s[260 + 3 * tiles + t] = eq;
        gt += s[260 + t];
        eq += s[260 + tiles + t];
    }
}

/* ordered write: element i is taken if key > thr, or key == thr and fewer than `need` equal keys precede it; its
 * output slot is (greater keys before it) + min(equal keys before it, need) */
static __global__ void compress_topk_write_kernel(uint32_t* idx, float* val, const uint32_t* s, const float* x, size_t n) {
    __shared__ uint32_t wgt[8], weq[8];
    size_t tiles = (n + COMPRESS_TOPK_TILE - 1) / COMPRESS_TOPK_TILE;
    uint32_t thr = s[256], need = s[258];
    uint32_t base_gt = s[260 + 2 * tiles + blockIdx.x], base_eq = s[260 + 3 * tiles + blockIdx.x];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint32_t below = (1u << lane) - 1u;
    size_t a = (size_t)blockIdx.x * COMPRESS_TOPK_TILE;
    for (size_t c = a; c < a + COMPRESS_TOPK_TILE && c < n; c += 256) {
        size_t i = c + threadIdx.x;
        float v = i < n ? x[i] : 0.0f;
        uint32_t key = compress_key(v);
        int gt = i < n && key > thr, eq = i < n && key == thr;
        uint32_t bgt = __ballot_sync(0xffffffffu, gt), beq = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) { wgt[warp] = __popc(bgt); weq[warp] = __popc(beq); }
        __syncthreads();
        uint32_t pgt = base_gt + __popc(bgt & below), peq = base_eq + __popc(beq & below);
        uint32_t tgt = 0, teq = 0;
        for (int w = 0; w < 8; w++) {
            if (w < warp) { pgt += wgt[w]; peq += weq[w]; }
            tgt += wgt[w];
            teq += weq[w];
        }
        if (gt || (eq && peq < need)) {
            uint32_t o = pgt + (peq < need ? peq : need);
            idx[o] = (uint32_t)i;
            val[o] = v;
        }
        base_gt += tgt;
        base_eq += teq;
        __syncthreads(); /* wgt/weq are rewritten by the next round */
    }
}

static inline void compress_topk_select(uint32_t* idx, float* val, const float* x, size_t n, size_t k, void* scratch) {
    if (n == 0 || k == 0) { return; }
    uint32_t* s = (uint32_t*)scratch;
    size_t tiles = compress_topk_tiles(n);
    LAUNCH(1, 256, 0, main_stream(), compress_topk_init_kernel)(s, (uint32_t)k);
    CUDA_CHECK_LAUNCH();
    unsigned int grid = grid_for(n, 256);
    if (grid > 1024) { grid = 1024; }
    for (int shift = 24; shift >= 0; shift -= 8) {
        LAUNCH(grid, 256, 0, main_stream(), compress_topk_hist_kernel)(s, x, n, shift);
        CUDA_CHECK_LAUNCH();
        LAUNCH(1, 1, 0, main_stream(), compress_topk_pick_kernel)(s, shift);
        CUDA_CHECK_LAUNCH();
    }
    LAUNCH((unsigned int)tiles, 256, 0, main_stream(), compress_topk_count_kernel)(s, x, n);
    CUDA_CHECK_LAUNCH();
    LAUNCH(1, 1, 0, main_stream(), compress_topk_scan_kernel)(s, tiles);
    CUDA_CHECK_LAUNCH();
    LAUNCH((unsigned int)tiles, 256, 0, main_stream(), compress_topk_write_kernel)(idx, val, s, x, n);
    CUDA_CHECK_LAUNCH();
}

static __global__ void compress_zero_at_kernel(float* x, const uint32_t* idx, size_t k) {
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += (size_t)gridDim.x * blockDim.x) { x[idx[j]] = 0.0f; }
}
static inline void compress_zero_at(float* x, const uint32_t* idx, size_t k) {
    if (k == 0) { return; }
    LAUNCH(grid_for(k, 256), 256, 0, main_stream(), compress_zero_at_kernel)(x, idx, k);
    CUDA_CHECK_LAUNCH();
}

static __global__ void compress_scatter_add_kernel(float* out, const uint32_t* idx, const float* val, size_t k) {
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += (size_t)gridDim.x * blockDim.x) {
        out[idx[j]] = __fadd_rn(out[idx[j]], val[j]);
    }
}
static inline void compress_scatter_add(float* out, const uint32_t* idx, const float* val, size_t k) {
    if (k == 0) { return; }
    LAUNCH(grid_for(k, 256), 256, 0, main_stream(), compress_scatter_add_kernel)(out, idx, val, k);
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_COMPRESS_CUH */
