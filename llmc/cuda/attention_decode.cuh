/*
 * llmc/cuda/attention_decode.cuh -- one query row of causal grouped-query attention against cached keys and values
 * (incremental decoding with a KV cache), the CUDA side of llmc/cpu/attention_decode.h. GQA: Ainslie et al. 2023;
 * NKV = NH is multi-head attention (GPT-2), NKV = 1 multi-query attention.
 *
 *   attention_decode(out(C), q(C), k(t,NKV*hs), v(t,NKV*hs), scores (unused here), t, C, NH, NKV)
 *   out_h = softmax(q_h k_j^T / sqrt(hs)) v_j over the t cached positions, hs = C/NH, kv head j = h / (NH/NKV)
 *   (consecutive query heads share a kv head, as llmc/cuda/attention_gqa.cuh); the cache rows hold NKV heads
 *   (row stride NKV*hs), read in place: no expansion. floatX in and out, fp32 arithmetic, exact softmax (the
 *   block's max subtracted).
 * One block of 128 threads per head: the t scores in shared memory (threads over positions), the block's max and
 * sum by the fixed-tree block_reduce (deterministic), then threads over the hs output channels sum p_j v_j in
 * position order. Decoding is latency-bound (one row, a few hundred KB of cache per layer): this is about not
 * recomputing the prefix, not about peak bandwidth. t up to ATTENTION_DECODE_MAX_T (shared memory); above, exits.
 * Errors (one line, exit): C % NH != 0, NKV not dividing NH, t outside 1..ATTENTION_DECODE_MAX_T.
 * Queued on main_stream(); no host sync.
 */
#ifndef LLMC_CUDA_ATTENTION_DECODE_CUH
#define LLMC_CUDA_ATTENTION_DECODE_CUH

#include "common.cuh"

#define ATTENTION_DECODE_MAX_T 8192 /* 32 KB of fp32 scores per block, inside the default 48 KB of shared memory */

/* grid NH (one block per query head h), block 128; k, v (t, KVC) with KVC = NKV*hs; query head h reads kv head h/g */
static __global__ void attention_decode_kernel(floatX* out, const floatX* q, const floatX* k, const floatX* v, int t,
                                               int KVC, int hs, int g, float scale) {
    DYNAMIC_SHARED(float, decode_smem);
    float* reduce = decode_smem;      /* 32 floats for block_reduce */
    float* scores = decode_smem + 32; /* t floats */
    const int h = blockIdx.x;
    const floatX* qh = q + (size_t)h * hs;
    const size_t kvh = (size_t)(h / g) * hs; /* this query head's kv head, as a channel offset in a cache row */
    float mx = -FLT_MAX;
    for (int j = threadIdx.x; j < t; j += blockDim.x) {
        const floatX* kj = k + (size_t)j * KVC + kvh;
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
        const floatX* vd = v + kvh + d;
        float acc = 0.0f;
        for (int j = 0; j < t; j++) { acc += scores[j] * to_float(vd[(size_t)j * KVC]); }
        out[(size_t)h * hs + d] = from_float<floatX>(acc * inv);
    }
}

/* out (C), q (C), k and v (t, NKV*hs) device floatX; scores unused (the CPU backend's scratch) */
static inline void attention_decode(floatX* out, const floatX* q, const floatX* k, const floatX* v, float* scores,
                                    int t, int C, int NH, int NKV) {
    (void)scores;
    if (NH <= 0 || C % NH != 0) { FATAL("attention_decode: C=%d is not divisible by NH=%d", C, NH); }
    if (NKV <= 0 || NH % NKV != 0) { FATAL("attention_decode: NKV=%d key/value heads must divide NH=%d", NKV, NH); }
    if (t < 1 || t > ATTENTION_DECODE_MAX_T) {
        FATAL("attention_decode: %d cached positions (expected 1..%d)", t, ATTENTION_DECODE_MAX_T);
    }
    const int hs = C / NH, block = 128;
    const size_t smem = (32 + (size_t)t) * sizeof(float);
    LAUNCH(NH, block, smem, main_stream(), attention_decode_kernel)(out, q, k, v, t, NKV * hs, hs, NH / NKV,
                                                                   1.0f / sqrtf((float)hs));
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_ATTENTION_DECODE_CUH */
