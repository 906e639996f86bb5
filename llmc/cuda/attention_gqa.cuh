/*
 * llmc/cuda/attention_gqa.cuh -- the attention contract of llmc/backend.h on the CUDA backend: causal grouped-query
 * self-attention (GQA, Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
 * Checkpoints"; NKV = 1 is multi-query attention, Shazeer 2019; NKV = NH multi-head; llmc/README.md) on the flash
 * kernels of llmc/cuda/attention.cuh, or first on cuDNN's SDPA in builds with USE_CUDNN=1
 * (llmc/cuda/attention_cudnn.h). Defined once for every build.
 *
 * Contract (llmc/backend.h), hs = C/NH, NKV dividing NH, group g = NH/NKV:
 *   qkv  (B,T,(NH+2*NKV)*hs) floatX, rows [q (NH*hs) | k (NKV*hs) | v (NKV*hs)]; query head h uses key/value head
 *        h / g (consecutive query heads share a kv head: the Llama/HF repeat_kv order, and cuDNN's).
 *   out  (B,T,C) floatX; state (B,NH,T) fp32 natural-log log-sum-exp per query row (attention_state_floats).
 *   dqkv qkv's shape, overwritten: dQ as for multi-head attention; dK, dV of kv head j = the sum over its g query
 *        heads j*g .. j*g+g-1 of their multi-head dK, dV.
 * What runs, at every NKV (no expansion of k and v anywhere):
 *   USE_CUDNN=1, bf16/fp16, hs % 8 == 0 and hs <= 128 (attention_cudnn_supported), 16-byte aligned buffers: cuDNN's
 *     SDPA with NKV key/value heads (its GQA: the graph's K and V have NKV heads, cuDNN sums dK/dV over each group).
 *     Where cuDNN has no plan for a shape (said once on stderr), and in every other build or shape: the flash
 *     kernels below.
 *   Flash: attention_forward_flash and attention_backward_flash (attention.cuh: the three-pass
 *     attention_backward_flash7, or with ATTN_BWD_FA2=1 the one-kernel attention_backward_fa2) with NKV. The
 *     forward and dQ kernels load kv head h/g's K/V tiles straight from qkv (row stride (NH+2*NKV)*hs); the dK/dV
 *     kernel (FA2: the one backward kernel) owns one (key tile, kv head j) and loops over query heads
 *     j*g .. j*g+g-1 in that order, accumulating dK/dV in fp32 registers, rounded to floatX once (deterministic,
 *     bit-reproducible). Tensor-core path (bf16/fp16, hs 16/32/64/128, 16-byte aligned buffers) or the CUDA-core
 *     kernels, both native.
 *   The two state layouts are one (cuDNN's Stats is the natural-log LSE), so a cuDNN forward and a flash backward of
 *   the same shape (cuDNN refusing only the backward) agree.
 * Scratch (attention_scratch_floats, fp32): the flash backward's (attention_flash_scratch_floats: D (B,NH,T); FA2:
 *   + its dQ accumulator and flags), at every NKV; cuDNN uses its own workspace.
 * Performance: the flash GQA kernels read qkv once per kernel as the multi-head ones do (the g query heads of a
 *   group share their kv head's tiles through L2) and write dqkv directly. The dK/dV kernel has B*NKV*ceil(T/64)
 *   blocks, each g times the multi-head block's work: fewer, longer blocks at small B*NKV. No GPU has timed GQA
 *   here yet, on either path (dev/cuda/attention.cu times the contract at NKV = 12, 4, 1; scripts/gpu_check.sh's
 *   cuDNN stage checks cuDNN's GQA against the family fixture, test_gpt_cudnn).
 * Error behaviour: NKV < 1 or NH % NKV != 0 exits with one line (FATAL, attention_kv_group); other shape errors as
 *   attention.cuh's (attention_check_dims). Launches are checked (CUDA_CHECK_LAUNCH), cuDNN calls by
 *   attention_cudnn.cpp. Queued on main_stream(); no host sync.
 */
#ifndef LLMC_CUDA_ATTENTION_GQA_CUH
#define LLMC_CUDA_ATTENTION_GQA_CUH

#include "common.cuh"
#include "attention.cuh"
#ifdef USE_CUDNN
#include "attention_cudnn.h"
#endif

/* 1 when this build sends attention of head size hs to cuDNN's SDPA first (USE_CUDNN, bf16 or fp16, hs % 8 == 0,
 * hs <= 128) when the buffers are also 16-byte aligned (cuDNN's execute refuses others; with hs % 8 == 0 the k and v
 * views are then aligned too; the trainer's activations are 256-byte aligned); cuDNN may still decline a shape when it
 * builds the graph, and the flash kernels then run it */
static inline int attention_cudnn_supported(int hs) {
#if defined(USE_CUDNN) && !FLOATX_IS_FLOAT
    return hs % 8 == 0 && hs <= 128;
#else
    (void)hs;
    return 0;
#endif
}
#ifdef USE_CUDNN
static inline int attention_cudnn_dtype(void) {
#if defined(ENABLE_FP16)
    return ATTN_CUDNN_FP16;
#else
    return ATTN_CUDNN_BF16;
#endif
}
#endif

/* fp32 scratch floats for attention_forward / attention_backward (layout in the header); exits on a bad NKV */
static inline size_t attention_scratch_floats(int B, int T, int C, int NH, int NKV) {
    attention_kv_group(NH, NKV);
    return attention_flash_scratch_floats(B, T, C, NH);
}
/* out (B,T,C), state (B,NH,T) lse, scratch attention_scratch_floats(B, T, C, NH, NKV) floats (unused by the
 * forward), qkv (B,T,(NH+2*NKV)*hs) */
static inline void attention_forward(floatX* out, float* state, float* scratch, const floatX* qkv, int B, int T, int C,
                                     int NH, int NKV) {
    (void)scratch;
    attention_kv_group(NH, NKV);
    const int hs = attention_check_dims(B, T, C, NH);
#ifdef USE_CUDNN
    if (attention_cudnn_supported(hs) && ptr_aligned(out, 16) && ptr_aligned(qkv, 16) &&
        attention_cudnn_forward(out, state, qkv, B, T, NH, NKV, hs, attention_cudnn_dtype(), main_stream())) {
        return;
    }
#else
    (void)hs;
#endif
    attention_forward_flash(out, state, qkv, B, T, C, NH, NKV);
}
/* dqkv (B,T,(NH+2*NKV)*hs) overwritten, scratch attention_scratch_floats(B, T, C, NH, NKV) floats, dout/out (B,T,C),
 * qkv as the forward's, state (B,NH,T) lse from the forward. Deterministic on the flash kernels (and on cuDNN where
 * it has a deterministic engine; see attention_cudnn.h). */
static inline void attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                      const floatX* out, const float* state, int B, int T, int C, int NH, int NKV) {
    attention_kv_group(NH, NKV);
    const int hs = attention_check_dims(B, T, C, NH);
#ifdef USE_CUDNN
    if (attention_cudnn_supported(hs) && ptr_aligned(dqkv, 16) && ptr_aligned(dout, 16) && ptr_aligned(qkv, 16) &&
        ptr_aligned(out, 16) &&
        attention_cudnn_backward(dqkv, dout, qkv, out, state, B, T, NH, NKV, hs, attention_cudnn_dtype(), main_stream())) {
        return;
    }
#else
    (void)hs;
#endif
    attention_backward_flash(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, NKV);
}

#endif /* LLMC_CUDA_ATTENTION_GQA_CUH */
