/*
 * llmc/cuda/classifier.cuh -- fused softmax + cross-entropy + dlogits (the llm.c fused classifier idea,
 * train_gpt2.cu fused_classifier; implementation our own).
 *
 *   fused_classifier(logits(N,Vp) in: logits, out: dlogits if write_dlogits, losses(N) fp32 out,
 *                    dloss, targets(N) int, N, V, Vp, write_dlogits)
 *     losses[i] = logsumexp(logits[i,:V]) - logits[i,target]          (fp32)
 *     dlogits[i,j] = dloss * (softmax(logits[i,:V])_j - [j == target])  for j < V, 0 for V <= j < Vp
 *     target < 0: loss 0 and (if written) dlogits row all 0. Targets >= V are a caller error (not checked).
 *
 * One block (1024 threads) per row. Pass 1 reads the row once with 128-bit loads and keeps an online
 * (max, sum of exp) pair per thread (Milakov & Gimelshein 2018), combined across the block; pass 2
 * re-reads the row (from L2: a 50304-column bf16 row is 100 KB) with streaming loads and writes
 * dlogits in place with streaming stores. Without write_dlogits only pass 1 runs.
 * Queued on main_stream(); no host sync. Launch errors exit via CUDA_CHECK_LAUNCH.
 *
 *   loss_mean_accumulate(mean(1) fp32 out, sum(1) fp64 accumulates, losses(N) fp32, N)
 *     mean = (float)(sum_i losses[i] / N), the sum in fp64; sum += (double)mean. One block of
 *     LOSS_MEAN_BLOCK threads: thread t sums i = t, t+256, ... in order, then a fixed shared-memory
 *     tree: deterministic (the fp64 sum may differ from a sequential one in its last bits, far below
 *     the fp32 rounding of mean). Lets the trainer read the loss once per optimizer step instead of
 *     copying the per-token losses to the host after every micro-step.
 */
#ifndef LLMC_CUDA_CLASSIFIER_CUH
#define LLMC_CUDA_CLASSIFIER_CUH

#include "common.cuh"

#define CLASSIFIER_BLOCK 1024

/* merges online-softmax state (m, s) with (m2, s2); -FLT_MAX means "empty" and stays finite */
static __device__ __forceinline__ void softmax_state_merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
    m = mn;
}

template <int W>
static __global__ void fused_classifier_kernel(floatX* logits, float* losses, float dloss, const int* targets, int V,
                                               int Vp, int write_dlogits) {
    __shared__ float red_m[32];
    __shared__ float red_s[32];
    const size_t row = blockIdx.x;
    floatX* x = logits + row * (size_t)Vp;
    const int target = targets[row];
    const float x_target = (target >= 0) ? to_float(x[target]) : 0.0f; /* read before pass 2 overwrites it */

    /* pass 1: online max / sum of exp over columns < V */
    float m = -FLT_MAX, s = 0.0f;
    for (int c = threadIdx.x * W; c < V; c += blockDim.x * W) {
        PackedN<floatX, W> v = load_packed<floatX, W>(x + c);
        float lm = -FLT_MAX;
#pragma unroll
        for (int k = 0; k < W; k++) {
            if (c + k < V) { lm = fmaxf(lm, to_float(v[k])); }
        }
        float ls = 0.0f;
#pragma unroll
        for (int k = 0; k < W; k++) {
            if (c + k < V) { ls += __expf(to_float(v[k]) - lm); }
        }
        softmax_state_merge(m, s, lm, ls);
    }
    /* block combine in a fixed tree: warp shuffles, then warp 0 over the warps */
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        softmax_state_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x / WARP_SIZE;
        m = lane < nw ? red_m[lane] : -FLT_MAX;
        s = lane < nw ? red_s[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            softmax_state_merge(m, s, m2, s2);
        }
        if (lane == 0) { red_m[0] = m; red_s[0] = s; }
    }
    __syncthreads();
    const float row_max = red_m[0];
    const float row_sum = red_s[0];
    if (threadIdx.x == 0) {
        losses[row] = (target >= 0) ? (logf(row_sum) + row_max - x_target) : 0.0f;
    }
    if (!write_dlogits) { return; }

    /* pass 2: dlogits in place */
    const float inv_sum = 1.0f / row_sum;
    const float scale = (target >= 0) ? dloss : 0.0f;
    for (int c = threadIdx.x * W; c < Vp; c += blockDim.x * W) {
        PackedN<floatX, W> v = load_packed_cs<floatX, W>(x + c);
        PackedN<floatX, W> g;
#pragma unroll
        for (int k = 0; k < W; k++) {
            float d = 0.0f;
            if (c + k < V) {
                float p = __expf(to_float(v[k]) - row_max) * inv_sum;
                d = scale * (p - (c + k == target ? 1.0f : 0.0f));
            }
            g[k] = from_float<floatX>(d);
        }
        store_packed_cs<floatX, W>(x + c, g);
    }
}

static inline void fused_classifier(floatX* logits, float* losses, float dloss, const int* targets, int N, int V, int Vp,
                                    int write_dlogits) {
    if (N == 0) { return; }
    if (Vp % X128_SIZE == 0 && ptr_aligned(logits, 16)) {
        LAUNCH(N, CLASSIFIER_BLOCK, 0, main_stream(), fused_classifier_kernel<X128_SIZE>)(logits, losses, dloss, targets, V, Vp, write_dlogits);
    } else {
        LAUNCH(N, CLASSIFIER_BLOCK, 0, main_stream(), fused_classifier_kernel<1>)(logits, losses, dloss, targets, V, Vp, write_dlogits);
    }
    CUDA_CHECK_LAUNCH();
}

#define LOSS_MEAN_BLOCK 256

static __global__ void loss_mean_accumulate_kernel(float* mean, double* sum, const float* losses, int N) {
    __shared__ double part[LOSS_MEAN_BLOCK];
    double acc = 0.0;
    for (int i = threadIdx.x; i < N; i += LOSS_MEAN_BLOCK) { acc += (double)losses[i]; }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int half = LOSS_MEAN_BLOCK / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half) { part[threadIdx.x] += part[threadIdx.x + half]; }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float m = (float)(part[0] / (double)N);
        *mean = m;
        *sum += (double)m;
    }
}

static inline void loss_mean_accumulate(float* mean, double* sum, const float* losses, int N) {
    if (N <= 0) { return; }
    LAUNCH(1, LOSS_MEAN_BLOCK, 0, main_stream(), loss_mean_accumulate_kernel)(mean, sum, losses, N);
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_CLASSIFIER_CUH */
