/*
 * llmc/cuda/attention_decode.cuh -- one query row of causal multi-head attention against cached keys and values
 * (incremental decoding with a KV cache; GPT-2 layout), the CUDA side of llmc/cpu/attention_decode.h.
 *
 *   attention_decode(out(C), q(C), k(t,C), v(t,C), scores (unused here), t, C, NH)
 *   out_h = softmax(q_h k_h^T / sqrt(hs)) v_h over the t cached positions, hs = C/NH; floatX in and out, fp32
 *   arithmetic, exact softmax (the block's max subtracted).
 * One block of 128 threads per head: the t scores in shared memory (threads over positions), the block's max and
 * sum by the fixed-tree block_reduce (deterministic), then threads over the hs output channels sum p_j v_j in
 * position order. Decoding is latency-bound (one row, a few hundred KB of cache per layer): this is about not
 * recomputing the prefix, not about peak bandwidth. t up to ATTENTION_DECODE_MAX_T (shared memory); above, exits.
 * Queued on main_stream(); no host sync.
 */
#ifndef LLMC_CUDA_ATTENTION_DECODE_CUH
#define LLMC_CUDA_ATTENTION_DECODE_CUH

#include "common.cuh"

#define ATTENTION_DECODE_MAX_T 8192 /* 32 KB of fp32 scores per block, inside the default 48 KB of shared memory */

static __global__ void attention_decode_kernel(floatX* out, const floatX* q, const floatX* k, const floatX* v, int t,
                                               int C, int hs, float scale) {
    DYNAMIC_SHARED(float, decode_smem);
    float* reduce = decode_smem;      /* 32 floats for block_reduce */
    float* scores = decode_smem + 32; /* t floats */
    const int h = blockIdx.x;
    const floatX* qh = q + (size_t)h * hs;
    float mx = -FLT_MAX;
    for (int j = threadIdx.x; j < t; j += blockDim.x) {
        const floatX* kj = k + (size_t)j * C + (size_t)h * hs;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) { dot += to_float(qh[i]) * to_float(kj[i]); }
        scores[j] = dot * scale;
        mx = fmaxf(mx, dot * scale);
    }
    mx = block_reduce_max(mx, reduce);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < t; j += blockDim.x) {
        float e = expf(scores[j] - mx);
        scores[j] = e;
        sum += e;
    }
    sum = block_reduce_sum(sum, reduce); /* its __syncthreads also publish every thread's scores */
    const float inv = 1.0f / sum;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        const floatX* vd = v + (size_t)h * hs + d;
        float acc = 0.0f;
        for (int j = 0; j < t; j++) { acc += scores[j] * to_float(vd[(size_t)j * C]); }
        out[(size_t)h * hs + d] = from_float<floatX>(acc * inv);
    }
}

static inline void attention_decode(floatX* out, const floatX* q, const floatX* k, const floatX* v, float* scores,
                                    int t, int C, int NH) {
    (void)scores;
    if (NH <= 0 || C % NH != 0) { FATAL("attention_decode: C=%d is not divisible by NH=%d", C, NH); }
    if (t < 1 || t > ATTENTION_DECODE_MAX_T) {
        FATAL("attention_decode: %d cached positions (expected 1..%d)", t, ATTENTION_DECODE_MAX_T);
    }
    const int hs = C / NH, block = 128;
    const size_t smem = (32 + (size_t)t) * sizeof(float);
    LAUNCH(NH, block, smem, main_stream(), attention_decode_kernel)(out, q, k, v, t, C, hs, 1.0f / sqrtf((float)hs));
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_ATTENTION_DECODE_CUH */
