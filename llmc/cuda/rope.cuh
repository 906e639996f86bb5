/*
 * llmc/cuda/rope.cuh -- rotary position embedding (RoPE; Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
 * Position Embedding"), forward and backward, in place on the qkv activation; the CPU twin is llmc/cpu/rope.h and
 * the contract is llmc/backend.h ("rope"); the cos/sin table comes from llmc/rope_table.h (host, fp32), copied to
 * the device by the caller.
 *
 *   rope_forward(qkv(B,T,(NH+2KV)*hs) floatX in place, table(maxT,hs/2,2) fp32 device, B, T, NH, KV, hs, pos0)
 *   rope_backward(dqkv(B,T,(NH+2KV)*hs) floatX in place, the same arguments)
 * Row layout [q heads NH*hs | k heads KV*hs | v heads KV*hs] (llmc/gpt2.h DIM_QKV); the NH+KV q and k heads are
 * contiguous and rotated, the v heads untouched. Token t has position pos0 + t. Pair (i, i + hs/2) of a head
 * ("rotate_half"), c, s = table[pos0 + t][i]:
 *   forward  x[i] = x[i] c - x[i+hs/2] s,  x[i+hs/2] = x[i+hs/2] c + x[i] s     (rotation by +angle)
 *   backward the same with -s                                                  (the transpose)
 * dtypes: floatX in and out, fp32 table and arithmetic, one rounding to floatX per output (bf16: half an ulp,
 * 2^-9 relative). No transcendental function on the device: both backends read the same fp32 table.
 * One kernel for both directions (sign +-1): one thread per packet of W consecutive pairs of one head, W =
 * X128_SIZE (128-bit loads of x[i..i+W) and x[i+hs/2..]) when (hs/2) % X128_SIZE == 0 and qkv and the table are
 * 16-byte aligned, W = 1 otherwise. Memory-bound: reads and writes 2 (NH+KV) hs floatX per token once, plus the
 * table row (hs floats per position, shared by B*(NH+KV) heads; L2-resident).
 * Not checked: pos0 + T <= maxT (the caller sizes the table). Errors: hs odd or < 2, a negative size or pos0 exit
 * with one line (rope_check_shape); launch errors via CUDA_CHECK_LAUNCH. Queued on main_stream(); no host sync.
 */
#ifndef LLMC_CUDA_ROPE_CUH
#define LLMC_CUDA_ROPE_CUH

#include "common.cuh"
#include "../rope_table.h"

/* npack = B*T*heads*(hs/2)/W packets; row = (NH+2KV)*hs elements per token; heads = NH+KV rotated heads */
template <int W>
static __global__ void rope_rotate_kernel(floatX* qkv, const float* table, int T, int heads, int hs, size_t row,
                                          int pos0, float sign, size_t npack) {
    const int half = hs / 2, per_head = half / W;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < npack; p += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(p % (size_t)per_head) * W;
        const size_t r = p / (size_t)per_head;
        const int h = (int)(r % (size_t)heads);
        const size_t n = r / (size_t)heads;
        const int t = (int)(n % (size_t)T);
        floatX* x = qkv + n * row + (size_t)h * hs + i;
        const float* tab = table + ((size_t)(pos0 + t) * half + i) * 2;
        float cs[2 * W];
        if constexpr (W % 2 == 0) {
#pragma unroll
            for (int q = 0; q < W / 2; q++) {
                f128 v = load_packed<float, 4>(tab + 4 * q);
#pragma unroll
                for (int k = 0; k < 4; k++) { cs[4 * q + k] = v[k]; }
            }
        } else {
#pragma unroll
            for (int k = 0; k < 2 * W; k++) { cs[k] = tab[k]; }
        }
        PackedN<floatX, W> a = load_packed<floatX, W>(x), b = load_packed<floatX, W>(x + half);
        PackedN<floatX, W> ra, rb;
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float c = cs[2 * k], s = sign * cs[2 * k + 1];
            const float fa = to_float(a[k]), fb = to_float(b[k]);
            ra[k] = from_float<floatX>(fa * c - fb * s);
            rb[k] = from_float<floatX>(fb * c + fa * s);
        }
        store_packed<floatX, W>(x, ra);
        store_packed<floatX, W>(x + half, rb);
    }
}

/* both directions: sign +1 forward, -1 backward */
static inline void rope_rotate(floatX* qkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0,
                               float sign) {
    rope_check_shape(B, T, NH, KV, hs, pos0);
    const int heads = NH + KV, half = hs / 2;
    const size_t pairs = (size_t)B * T * heads * half, row = (size_t)(NH + 2 * KV) * hs;
    if (pairs == 0) { return; }
    const int block = 256;
    if (half % X128_SIZE == 0 && ptr_aligned(qkv, 16) && ptr_aligned(table, 16)) {
        const size_t np = pairs / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), rope_rotate_kernel<X128_SIZE>)(qkv, table, T, heads, hs,
                                                                                          row, pos0, sign, np);
    } else {
        LAUNCH(grid_for(pairs, block), block, 0, main_stream(), rope_rotate_kernel<1>)(qkv, table, T, heads, hs, row,
                                                                                     pos0, sign, pairs);
    }
    CUDA_CHECK_LAUNCH();
}

static inline void rope_forward(floatX* qkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0) {
    rope_rotate(qkv, table, B, T, NH, KV, hs, pos0, 1.0f);
}

static inline void rope_backward(floatX* dqkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0) {
    rope_rotate(dqkv, table, B, T, NH, KV, hs, pos0, -1.0f);
}

#endif /* LLMC_CUDA_ROPE_CUH */
