/*
 * llmc/cuda/attention_gqa.cuh -- the attention contract of llmc/backend.h on the CUDA backend: causal grouped-query
 * self-attention (GQA, Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
 * Checkpoints"; NKV = 1 is multi-query attention, Shazeer 2019; llmc/README.md) on the flash kernels of
 * llmc/cuda/attention.cuh, or cuDNN's SDPA under USE_CUDNN (llmc/cuda/attention_cudnn.cuh). Defined once for both
 * builds.
 *
 * Contract (llmc/backend.h), hs = C/NH, NKV dividing NH, group g = NH/NKV:
 *   qkv  (B,T,(NH+2*NKV)*hs) floatX, rows [q (NH*hs) | k (NKV*hs) | v (NKV*hs)]; query head h uses key/value head
 *        h / g (consecutive query heads share a kv head: the Llama/HF repeat_kv order).
 *   out  (B,T,C) floatX; state (B,NH,T) fp32 log-sum-exp per query row (attention_state_floats, attention.cuh).
 *   dqkv qkv's shape, overwritten: dQ as for multi-head attention; dK, dV of kv head j = the sum over its g query
 *        heads j*g .. j*g+g-1 of their multi-head dK, dV.
 *   NKV = NH is multi-head attention, qkv (B,T,3C): the multi-head ops attention_mha_forward / attention_mha_backward
 *   are called (same kernels, same results as before GQA, no extra pass, no extra scratch).
 *
 * What runs at NKV < NH:
 *   Native (every build but cuDNN's): attention_forward_flash and attention_backward_flash (attention.cuh: the
 *     three-pass attention_backward_flash7, or with ATTN_BWD_FA2=1 the one-kernel attention_backward_fa2) with NKV.
 *     The forward and dQ kernels load kv head h/g's K/V tiles straight from qkv (row stride (NH+2*NKV)*hs); the
 *     dK/dV kernel (FA2: the one backward kernel) owns one (key tile, kv head j) and loops over
 *     query heads j*g .. j*g+g-1 in that order, accumulating dK/dV in fp32 registers, rounded to floatX once
 *     (deterministic, bit-reproducible). Tensor-core path as for multi-head (bf16/fp16, hs 16/32/64/128, 16-byte
 *     aligned buffers), the CUDA-core kernels otherwise, both native. No expansion, no reduction pass.
 *   Expansion (USE_CUDNN: both directions, cuDNN's SDPA takes (B,T,3C) here): attention_forward_gqa_expand /
 *     attention_backward_gqa_expand.
 *     forward:  qkv -> xqkv (B,T,3C) in scratch, each kv head repeated g times (attention_gqa_expand_kernel), then
 *               the multi-head forward on xqkv;
 *     backward: qkv -> xqkv again, the multi-head backward into xdqkv (B,T,3C) in scratch, then
 *               attention_gqa_reduce_kernel: dQ copied, dK/dV of kv head j = sum over r = 0..g-1 of xdqkv's head
 *               j*g + r, in that order, in fp32, one rounding to floatX (deterministic). The g multi-head dK/dV are
 *               each rounded to floatX before this sum (one more rounding than the native kernel's).
 *     Both kernels are memory-bound grid-stride loops over 128-bit packets (X128_SIZE elements, as
 *     llmc/cuda/gelu.cuh) when hs is a multiple of X128_SIZE and the buffers are 16-byte aligned, one element per
 *     step otherwise.
 * Scratch (attention_scratch_floats, fp32 floats): NKV = NH, or NKV < NH on the native path: the multi-head scratch
 *   (attention_mha_scratch_floats: D (B,NH,T); FA2: + its dQ accumulator and flags). Expansion path
 *   (attention_gqa_expand_scratch_floats): [multi-head scratch, rounded up to 4 floats | xqkv | xdqkv], xqkv and
 *   xdqkv B*T*3C floatX each, rounded up to 16 bytes: with a 16-byte aligned scratch pointer both are 16-byte
 *   aligned (the tensor-core path and the packed kernels need it; otherwise the slower paths run, same contract). The
 *   multi-head backward's scratch never overlaps them. The forward uses [0, xqkv end).
 *   Example, B=4 T=64 C=128 NH=4 NKV=1, bf16: native 1024 floats (4 KiB); expansion 1024 + 2*49152 = 99328 floats
 *   (388 KiB).
 * Performance: the native path reads qkv once per kernel as the multi-head kernels do (the g query heads of a group
 *   share their kv head's tiles through L2) and writes dqkv directly; the expansion path costs one extra write and
 *   read of (B,T,3C) floatX in the forward, and in the backward two passes (the re-expansion, and the reduction
 *   reading (B,T,3C) and writing dqkv), plus 2 B*T*3C floatX of scratch. The native dK/dV kernel has B*NKV*ceil(T/64)
 *   blocks, each g times the multi-head block's work: fewer, longer blocks at small B*NKV. No GPU has timed either
 *   path here (dev/cuda/attention.cu times the contract at NKV = 12, 4, 1).
 * Error behaviour: NKV < 1 or NH % NKV != 0 exits with one line (FATAL, attention_kv_group); other shape errors as
 *   attention.cuh's (attention_check_dims). Launches are checked (CUDA_CHECK_LAUNCH). Queued on main_stream(); no
 *   host sync.
 */
#ifndef LLMC_CUDA_ATTENTION_GQA_CUH
#define LLMC_CUDA_ATTENTION_GQA_CUH

#include "common.cuh"
#include "attention.cuh"
#ifdef USE_CUDNN
#include "attention_cudnn.cuh"
#endif

#define ATTN_GQA_BLOCK 256 /* threads per block of the expansion and reduction kernels */

/* row / n for a packet index: a 32-bit division whenever i fits (a 64-bit division by a runtime value is a
 * subroutine on the GPU) */
static __device__ __forceinline__ size_t attn_gqa_div(size_t i, int n) {
    return i <= 0xFFFFFFFFu ? (size_t)((unsigned)i / (unsigned)n) : i / (size_t)n;
}

/* xqkv (B,T,3C) from qkv (B,T,C+2*KVC), KVC = NKV*hs: packet i (W elements, W divides hs) of xqkv. Query channels are
 * copied; channel c of the k (v) section, head h = c/hs, reads kv head h/g of qkv's k (v) section. */
template <int W>
static __global__ void attention_gqa_expand_kernel(floatX* xqkv, const floatX* qkv, int C, int hs, int g, int KVC,
                                                   size_t npack) {
    const int PR = 3 * C / W; /* packets per xqkv row */
    const size_t ld = (size_t)C + 2 * (size_t)KVC;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = attn_gqa_div(i, PR);
        const int col = (int)(i - row * PR) * W;
        const int sec = col / C; /* 0 q, 1 k, 2 v */
        int src = col;
        if (sec > 0) {
            const int c = col - sec * C, h = c / hs;
            src = C + (sec - 1) * KVC + (h / g) * hs + (c - h * hs);
        }
        store_packed<floatX, W>(xqkv + i * W, load_packed<floatX, W>(qkv + row * ld + src));
    }
}

/* dqkv (B,T,C+2*KVC) from xdqkv (B,T,3C): packet i (W elements, W divides hs) of dqkv. dQ is copied; channel d of kv
 * head j of the dK (dV) section is sum_{r=0..g-1} xdqkv[row, sec*C + (j*g + r)*hs + d], in that order, fp32, one
 * rounding. */
template <int W>
static __global__ void attention_gqa_reduce_kernel(floatX* dqkv, const floatX* xdqkv, int C, int hs, int g, int KVC,
                                                   size_t npack) {
    const int PR = (C + 2 * KVC) / W; /* packets per dqkv row */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = attn_gqa_div(i, PR);
        const int col = (int)(i - row * PR) * W;
        const floatX* x = xdqkv + row * 3 * (size_t)C;
        if (col < C) {
            store_packed<floatX, W>(dqkv + i * W, load_packed_cs<floatX, W>(x + col));
            continue;
        }
        const int sec = col < C + KVC ? 1 : 2;
        const int c = col - C - (sec - 1) * KVC, j = c / hs;
        const floatX* src = x + sec * C + j * g * hs + (c - j * hs);
        float acc[W];
#pragma unroll
        for (int k = 0; k < W; k++) { acc[k] = 0.0f; }
        for (int r = 0; r < g; r++) {
            PackedN<floatX, W> p = load_packed_cs<floatX, W>(src + r * hs);
#pragma unroll
            for (int k = 0; k < W; k++) { acc[k] += to_float(p[k]); }
        }
        PackedN<floatX, W> y;
#pragma unroll
        for (int k = 0; k < W; k++) { y[k] = from_float<floatX>(acc[k]); }
        store_packed<floatX, W>(dqkv + i * W, y);
    }
}

/* ======================================================================== host side */

/* Which GQA path each direction runs (NKV < NH): native (the flash kernels index kv head h/g themselves: the
 * forward, the three-pass backward and the one-kernel FA2 backward of ATTN_BWD_FA2=1) unless the multi-head op
 * behind it cannot: cuDNN's SDPA (USE_CUDNN; attention_cudnn.cuh takes (B,T,3C)) expands both directions. */
#ifdef USE_CUDNN
#define ATTN_GQA_NATIVE_FWD 0
#define ATTN_GQA_NATIVE_BWD 0
#else
#define ATTN_GQA_NATIVE_FWD 1
#define ATTN_GQA_NATIVE_BWD 1
#endif

/* float offset of xqkv in the expansion path's scratch (after the multi-head scratch, 16-byte aligned), and the
 * floats of one expanded (B,T,3C) floatX buffer (rounded up to 16 bytes) */
static inline size_t attn_gqa_xqkv_offset(int B, int T, int C, int NH) {
    return (attention_mha_scratch_floats(B, T, C, NH) + 3) / 4 * 4;
}
static inline size_t attn_gqa_x_floats(int B, int T, int C) {
    return ((size_t)B * T * 3 * C * sizeof(floatX) + 15) / 16 * 4;
}

/* xqkv (B,T,3C) <- qkv (B,T,(NH+2*NKV)*hs), kv heads repeated g = NH/NKV times; shapes already validated */
static inline void attention_gqa_expand(floatX* xqkv, const floatX* qkv, int B, int T, int C, int NH, int NKV) {
    const int hs = C / NH, g = NH / NKV, KVC = NKV * hs;
    const size_t n = (size_t)B * T * 3 * C;
    if (hs % X128_SIZE == 0 && ptr_aligned(xqkv, 16) && ptr_aligned(qkv, 16)) {
        const size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, ATTN_GQA_BLOCK), ATTN_GQA_BLOCK, 0, main_stream(), attention_gqa_expand_kernel<X128_SIZE>)(
            xqkv, qkv, C, hs, g, KVC, np);
    } else {
        LAUNCH(grid_for(n, ATTN_GQA_BLOCK), ATTN_GQA_BLOCK, 0, main_stream(), attention_gqa_expand_kernel<1>)(
            xqkv, qkv, C, hs, g, KVC, n);
    }
    CUDA_CHECK_LAUNCH();
}
/* dqkv (B,T,(NH+2*NKV)*hs) <- xdqkv (B,T,3C): dQ copied, dK/dV summed over each group (see the kernel) */
static inline void attention_gqa_reduce(floatX* dqkv, const floatX* xdqkv, int B, int T, int C, int NH, int NKV) {
    const int hs = C / NH, g = NH / NKV, KVC = NKV * hs;
    const size_t n = (size_t)B * T * (C + 2 * (size_t)KVC);
    if (hs % X128_SIZE == 0 && ptr_aligned(dqkv, 16) && ptr_aligned(xdqkv, 16)) {
        const size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, ATTN_GQA_BLOCK), ATTN_GQA_BLOCK, 0, main_stream(), attention_gqa_reduce_kernel<X128_SIZE>)(
            dqkv, xdqkv, C, hs, g, KVC, np);
    } else {
        LAUNCH(grid_for(n, ATTN_GQA_BLOCK), ATTN_GQA_BLOCK, 0, main_stream(), attention_gqa_reduce_kernel<1>)(
            dqkv, xdqkv, C, hs, g, KVC, n);
    }
    CUDA_CHECK_LAUNCH();
}

/* ======================================================================== the expansion path (NKV < NH) */
/* What the cuDNN build runs in both directions; compiled in every
 * build (the kernel tests run it too). Scratch: attention_gqa_expand_scratch_floats floats, layout in the header. */
static inline size_t attention_gqa_expand_scratch_floats(int B, int T, int C, int NH) {
    return attn_gqa_xqkv_offset(B, T, C, NH) + 2 * attn_gqa_x_floats(B, T, C);
}
static inline void attention_forward_gqa_expand(floatX* out, float* state, float* scratch, const floatX* qkv, int B,
                                                int T, int C, int NH, int NKV) {
    attention_kv_group(NH, NKV);
    attention_check_dims(B, T, C, NH);
    floatX* xqkv = (floatX*)(scratch + attn_gqa_xqkv_offset(B, T, C, NH));
    attention_gqa_expand(xqkv, qkv, B, T, C, NH, NKV);
    attention_mha_forward(out, state, scratch, xqkv, B, T, C, NH);
}
static inline void attention_backward_gqa_expand(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                                 const floatX* out, const float* state, int B, int T, int C, int NH,
                                                 int NKV) {
    attention_kv_group(NH, NKV);
    attention_check_dims(B, T, C, NH);
    float* x = scratch + attn_gqa_xqkv_offset(B, T, C, NH);
    floatX* xqkv = (floatX*)x;
    floatX* xdqkv = (floatX*)(x + attn_gqa_x_floats(B, T, C));
    attention_gqa_expand(xqkv, qkv, B, T, C, NH, NKV);
    attention_mha_backward(xdqkv, scratch, dout, xqkv, out, state, B, T, C, NH);
    attention_gqa_reduce(dqkv, xdqkv, B, T, C, NH, NKV);
}

/* ======================================================================== backend contract */
/* fp32 scratch floats for attention_forward / attention_backward (layout in the header); exits on a bad NKV */
static inline size_t attention_scratch_floats(int B, int T, int C, int NH, int NKV) {
    if (attention_kv_group(NH, NKV) == 1 || ATTN_GQA_NATIVE_BWD) { return attention_mha_scratch_floats(B, T, C, NH); }
    return attention_gqa_expand_scratch_floats(B, T, C, NH);
}
/* out (B,T,C), state (B,NH,T) lse, scratch attention_scratch_floats(B, T, C, NH, NKV) floats (unused by the native
 * path and by NKV = NH), qkv (B,T,(NH+2*NKV)*hs) */
static inline void attention_forward(floatX* out, float* state, float* scratch, const floatX* qkv, int B, int T, int C,
                                     int NH, int NKV) {
    if (attention_kv_group(NH, NKV) == 1) {
        attention_mha_forward(out, state, scratch, qkv, B, T, C, NH);
    } else if (ATTN_GQA_NATIVE_FWD) {
        attention_forward_flash(out, state, qkv, B, T, C, NH, NKV);
    } else {
        attention_forward_gqa_expand(out, state, scratch, qkv, B, T, C, NH, NKV);
    }
}
/* dqkv (B,T,(NH+2*NKV)*hs) overwritten, scratch attention_scratch_floats(B, T, C, NH, NKV) floats, dout/out (B,T,C),
 * qkv as the forward's, state (B,NH,T) lse from the forward. Deterministic. */
static inline void attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                      const floatX* out, const float* state, int B, int T, int C, int NH, int NKV) {
    if (attention_kv_group(NH, NKV) == 1) {
        attention_mha_backward(dqkv, scratch, dout, qkv, out, state, B, T, C, NH);
    } else if (ATTN_GQA_NATIVE_BWD) {
        attention_backward_flash(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, NKV);
    } else {
        attention_backward_gqa_expand(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, NKV);
    }
}

#endif /* LLMC_CUDA_ATTENTION_GQA_CUH */
