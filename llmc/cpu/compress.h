/*
 * llmc/cpu/compress.h -- the gradient-compression codecs of the CPU backend (floatX = float): packing a bucket
 * with its error-feedback residual, per-block INT8 quantisation (absmax scale; round to nearest or stochastic) and
 * dequantisation, and exact top-k selection by magnitude. The orchestration (which values go to which rank, the
 * residuals, the byte counts) is llmc/grad_compress.h; the contract is in llmc/backend.h ("gradient compression").
 * Methods: INT8 with per-block absmax scales as in 1-bit/8-bit communication compression (Dettmers 2016, "8-bit
 * approximations for parallelism in deep learning"); top-k with error feedback (Lin et al. 2018, "Deep Gradient
 * Compression"; Stich et al. 2018, "Sparsified SGD with memory").
 * Every function is deterministic and computes bit for bit what llmc/cuda/compress.cuh computes (the emulator
 * test compares them): no FMA contraction (ISO C mode), IEEE division, the same counter-based random stream.
 */
#ifndef LLMC_CPU_COMPRESS_H
#define LLMC_CPU_COMPRESS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define COMPRESS_INT8_BLOCK 2048 /* values per INT8 scale (llmc/grad_compress.h says why) */

/* splitmix64 finalizer (Steele, Lea, Flood 2014) and the counter-based stream of llmc/cuda/common.cuh */
static inline uint64_t compress_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint32_t compress_random_u32(uint32_t seed, uint32_t t, uint64_t index) {
    uint64_t key = compress_mix64(((uint64_t)seed << 32) ^ (uint64_t)t ^ 0x9e3779b97f4a7c15ull);
    return (uint32_t)(compress_mix64(key + index * 0x9e3779b97f4a7c15ull) >> 32);
}

/* dst(n) fp32 = g(n) + decay * residual(n) (residual NULL: 0), the product rounded before the sum (decay = 1: g +
 * residual exactly; --grad-compress-ef-decay) */
static inline void compress_pack(float* dst, const floatX* g, const float* residual, float decay, size_t n) {
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float r = residual ? decay * residual[i] : 0.0f;
        dst[i] = residual ? (float)g[i] + r : (float)g[i];
    }
}

/* one INT8 value: x / s rounded (nearest-even, or floor(x/s + u) with u in [0,1) from 24 random bits), clamped */
static inline int8_t compress_q8(float x, float s, int stochastic, uint32_t random) {
    if (s == 0.0f) { return 0; }
    float y = x / s;
    float r = stochastic ? floorf(y + (float)(random >> 8) * (1.0f / 16777216.0f)) : rintf(y);
    r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
    if (r != r) { r = 0.0f; } /* NaN input: 0 (a non-finite gradient is caught by the step's overflow check) */
    return (int8_t)r;
}

/* x(n) fp32 -> q(n) int8 and scales(ceil(n/COMPRESS_INT8_BLOCK)) fp32: block j covers [j*BLK, min((j+1)*BLK, n)),
 * s_j = max|x| / 127 over the block, q = round(x / s_j); the random stream is keyed by (seed, step, key + i) */
static inline void compress_quantize_int8(int8_t* q, float* scales, const float* x, size_t n, int stochastic,
                                          uint32_t seed, uint32_t step, uint64_t key) {
    size_t nb = (n + COMPRESS_INT8_BLOCK - 1) / COMPRESS_INT8_BLOCK;
    #pragma omp parallel for if (n > 65536)
    for (size_t j = 0; j < nb; j++) {
        size_t a = j * COMPRESS_INT8_BLOCK, b = a + COMPRESS_INT8_BLOCK < n ? a + COMPRESS_INT8_BLOCK : n;
        float amax = 0.0f;
        for (size_t i = a; i < b; i++) { float v = fabsf(x[i]); amax = v > amax ? v : amax; }
        float s = amax / 127.0f;
        scales[j] = s;
        for (size_t i = a; i < b; i++) {
            q[i] = compress_q8(x[i], s, stochastic, stochastic ? compress_random_u32(seed, step, key + i) : 0u);
        }
    }
}

/* out(n) = (accumulate ? out : 0) + alpha * (q * s_block) (alpha = 1 decodes, -1 leaves the quantisation residual) */
static inline void compress_dequantize_int8(float* out, const int8_t* q, const float* scales, size_t n, float alpha,
                                            int accumulate) {
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float d = (float)q[i] * scales[i / COMPRESS_INT8_BLOCK] * alpha;
        out[i] = accumulate ? out[i] + d : d;
    }
}

/* scratch bytes compress_topk_select needs for n values (CPU: none) */
static inline size_t compress_topk_scratch_bytes(size_t n) { (void)n; return 0; }

/* the k (1 <= k <= n) elements of x(n) with the largest |x| (ties: the lower index first), in increasing index
 * order: idx(k) uint32 and val(k) = x[idx]. Exact radix selection on the 31-bit magnitude keys (4 passes of 8
 * bits), then one ordered pass. NaN counts as larger than every number. */
static inline void compress_topk_select(uint32_t* idx, float* val, const float* x, size_t n, size_t k, void* scratch) {
    (void)scratch;
    uint32_t prefix = 0, mask = 0;
    size_t need = k; /* how many of the elements matching prefix/mask are still to take, from the top */
    for (int shift = 24; shift >= 0; shift -= 8) {
        size_t hist[256];
        memset(hist, 0, sizeof(hist));
        for (size_t i = 0; i < n; i++) {
            uint32_t key;
            memcpy(&key, &x[i], 4);
            key &= 0x7fffffffu;
            if ((key & mask) == prefix) { hist[(key >> shift) & 255u]++; }
        }
        int d = 255;
        while (d > 0 && hist[d] < need) { need -= hist[d]; d--; }
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
    }
    /* threshold key = prefix: every key > prefix is taken, and the first `need` keys == prefix */
    size_t o = 0, ties = 0;
    for (size_t i = 0; i < n && o < k; i++) {
        uint32_t key;
        memcpy(&key, &x[i], 4);
        key &= 0x7fffffffu;
        if (key > prefix || (key == prefix && ties++ < need)) {
            idx[o] = (uint32_t)i;
            val[o] = x[i];
            o++;
        }
    }
}

/* x[idx[j]] = 0 for j < k */
static inline void compress_zero_at(float* x, const uint32_t* idx, size_t k) {
    for (size_t j = 0; j < k; j++) { x[idx[j]] = 0.0f; }
}

/* out[idx[j]] += val[j] for j < k (the indices are distinct) */
static inline void compress_scatter_add(float* out, const uint32_t* idx, const float* val, size_t k) {
    for (size_t j = 0; j < k; j++) { out[idx[j]] += val[j]; }
}

#endif /* LLMC_CPU_COMPRESS_H */
