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
 *
 * Vocabulary-parallel cross-entropy (tensor parallelism, Shoeybi et al. 2019, section 3; llmc/README.md, "Where the
 * next dimensions plug in"): this rank holds logits(N,Vs) floatX of the vocabulary columns [v0, v0+Vs), the first
 * `valid` real (0 <= valid <= Vs), the rest padding; no rank holds N x Vp logits. The caller runs the three steps
 * with fp32 all-reduces (sums) over the tp ranks in between; the semantics are those of the CPU reference
 * (llmc/cpu/classifier.h), the contract is llmc/backend.h:
 *   vocab_parallel_row_max(row_max(N) fp32 out, logits, N, Vs, valid)
 *     row_max[i] = max_{j < valid} logits[i,j]; -FLT_MAX if valid = 0 (an all-padding shard never holds the max)
 *   vocab_parallel_row_sums(sums(2N) fp32 out, logits, maxes(tp,N) fp32, tp, targets(N) int, v0, N, Vs, valid)
 *     M_i = max over r = 0..tp-1 of maxes[r*N+i] (in order, as the CPU); sums[i] = sum_{j < valid} exp(logits[i,j]
 *     - M_i); sums[N+i] = logits[i, targets[i]-v0] if that column is one of this shard's real ones, else 0;
 *     both 0 for targets[i] < 0
 *   vocab_parallel_finish(logits in: logits, out: dlogits if write_dlogits, losses(N) fp32 out, maxes(tp,N), tp,
 *                         sums(2N) all-reduced, targets(N), v0, N, Vs, valid, dloss, write_dlogits)
 *     losses[i] = log(S_i) - (x_i - M_i) with S_i = sums[i], x_i = sums[N+i] (the same on every rank);
 *     dlogits[i,j] = dloss * (exp(logits[i,j] - M_i) / S_i - [j == target - v0]) for j < valid, 0 in the
 *     padding (fused_classifier's arithmetic, softmax_dlogits_row: exp times the reciprocal of S_i, minus the
 *     one-hot, times dloss); targets[i] < 0: loss 0 and (if written) the whole row 0. Without write_dlogits the
 *     logits are untouched.
 * One block per row (VOCAB_PARALLEL_BLOCK threads; finish without dlogits: one warp). Thread t reads the packets
 * at columns t*W, t*W + blockDim*W, ... (W = X128_SIZE: 128-bit loads when Vs % X128_SIZE == 0 and logits is
 * 16-byte aligned, so every row is; W = 1 otherwise) and keeps one fp32 max or sum in that order; the block then
 * combines them in block_reduce's fixed tree. No atomics: bit-identical run to run. finish reads and writes the
 * row with streaming hints. Queued on main_stream(), no host sync; launch errors exit via CUDA_CHECK_LAUNCH; bad
 * sizes (N, Vs < 0, valid outside [0, Vs], tp < 1, v0 < 0) exit with one line. Targets are not range-checked (a
 * target in no shard's real columns gives a meaningless loss, as in fused_classifier).
 * Precision: the exp sum is fp32 on the GPU (the CPU reference sums in double). All terms are positive, so the
 * relative error of one shard's sum is at most (ceil(valid / (blockDim*W))*W + 8) * 2^-24 from the in-thread
 * sums and the 256-leaf tree (GPT-2, 50257 columns at tp = 1: 208 * 6e-8 = 1.2e-5 worst case, ~1e-6 typical),
 * plus __expf's error (2 + 1.17|x| ulp at x = logit - M_i, weighted by exp(x): a few ulp), plus the fp32
 * all-reduce over the tp partial sums ((tp-1) * 2^-24). The loss's absolute error is that relative error of S_i
 * (log), and dlogits carry it as a relative error before their rounding to floatX.
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

/* dlogits in place over the columns [0, ncols) of one row x, by the whole block (thread t: packets t, t + blockDim,
 * ...; streaming loads and stores): scale * (exp(x - row_max) * inv_sum - [j == target]) for j < nreal, 0 beyond */
template <int W>
static __device__ __forceinline__ void softmax_dlogits_row(floatX* x, int ncols, int nreal, float row_max,
                                                           float inv_sum, float scale, long long target) {
    for (int c = threadIdx.x * W; c < ncols; c += blockDim.x * W) {
        PackedN<floatX, W> v = load_packed_cs<floatX, W>(x + c);
        PackedN<floatX, W> g;
#pragma unroll
        for (int k = 0; k < W; k++) {
            float d = 0.0f;
            if (c + k < nreal) {
                float p = __expf(to_float(v[k]) - row_max) * inv_sum;
                d = scale * (p - (c + k == target ? 1.0f : 0.0f));
            }
            g[k] = from_float<floatX>(d);
        }
        store_packed_cs<floatX, W>(x + c, g);
    }
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
    softmax_dlogits_row<W>(x, Vp, V, row_max, 1.0f / row_sum, (target >= 0) ? dloss : 0.0f, target);
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

/* ---------------------------------------------------------------- vocabulary-parallel cross-entropy */

#define VOCAB_PARALLEL_BLOCK 256

/* M_i = max over r = 0..tp-1 of maxes[r*N+i], in order with the CPU reference's comparison */
static __device__ __forceinline__ float vocab_parallel_max_over_ranks(const float* maxes, int tp, int N, int i) {
    float m = maxes[i];
    for (int r = 1; r < tp; r++) {
        const float x = maxes[(size_t)r * N + i];
        m = x > m ? x : m;
    }
    return m;
}

template <int W>
static __global__ void vocab_parallel_row_max_kernel(float* row_max, const floatX* logits, int Vs, int valid) {
    __shared__ float red[32];
    const floatX* x = logits + (size_t)blockIdx.x * Vs;
    float m = -FLT_MAX;
    for (int c = threadIdx.x * W; c < valid; c += blockDim.x * W) {
        PackedN<floatX, W> v = load_packed<floatX, W>(x + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            if (c + k < valid) { m = fmaxf(m, to_float(v[k])); }
        }
    }
    m = block_reduce_max(m, red);
    if (threadIdx.x == 0) { row_max[blockIdx.x] = m; }
}

template <int W>
static __global__ void vocab_parallel_row_sums_kernel(float* sums, const floatX* logits, const float* maxes, int tp,
                                                      const int* targets, int v0, int N, int Vs, int valid) {
    __shared__ float red[32];
    const int i = blockIdx.x;
    const int target = targets[i];
    if (target < 0) { /* ignored row (uniform over the block: no thread reaches the barriers) */
        if (threadIdx.x == 0) { sums[i] = 0.0f; sums[N + i] = 0.0f; }
        return;
    }
    const floatX* x = logits + (size_t)i * Vs;
    const float mx = vocab_parallel_max_over_ranks(maxes, tp, N, i);
    float s = 0.0f;
    for (int c = threadIdx.x * W; c < valid; c += blockDim.x * W) {
        PackedN<floatX, W> v = load_packed<floatX, W>(x + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            if (c + k < valid) { s += __expf(to_float(v[k]) - mx); }
        }
    }
    s = block_reduce_sum(s, red);
    if (threadIdx.x == 0) {
        const long long t = (long long)target - v0;
        sums[i] = s;
        sums[N + i] = (t >= 0 && t < valid) ? to_float(x[t]) : 0.0f;
    }
}

template <int W>
static __global__ void vocab_parallel_finish_kernel(floatX* logits, float* losses, const float* maxes, int tp,
                                                    const float* sums, const int* targets, int v0, int N, int Vs,
                                                    int valid, float dloss, int write_dlogits) {
    const int i = blockIdx.x;
    const int target = targets[i];
    floatX* x = logits + (size_t)i * Vs;
    if (target < 0) {
        if (threadIdx.x == 0) { losses[i] = 0.0f; }
        if (!write_dlogits) { return; }
        PackedN<floatX, W> zero;
#pragma unroll
        for (int k = 0; k < W; k++) { zero[k] = from_float<floatX>(0.0f); }
        for (int c = threadIdx.x * W; c < Vs; c += blockDim.x * W) { store_packed_cs<floatX, W>(x + c, zero); }
        return;
    }
    const float mx = vocab_parallel_max_over_ranks(maxes, tp, N, i);
    const float S = sums[i];
    if (threadIdx.x == 0) { losses[i] = logf(S) - (sums[N + i] - mx); }
    if (!write_dlogits) { return; }
    softmax_dlogits_row<W>(x, Vs, valid, mx, 1.0f / S, dloss, (long long)target - v0);
}

/* exits on sizes the kernels cannot serve; returns 1 if the rows can be read in 128-bit packets */
static inline int vocab_parallel_prepare(const char* op, const floatX* logits, int N, int Vs, int valid, int tp,
                                         int v0) {
    if (N < 0 || Vs < 0 || valid < 0 || valid > Vs || tp < 1 || v0 < 0) {
        FATAL("%s: bad sizes N=%d Vs=%d valid=%d tp=%d v0=%d (need N, Vs >= 0, 0 <= valid <= Vs, tp >= 1, v0 >= 0)",
              op, N, Vs, valid, tp, v0);
    }
    return Vs % X128_SIZE == 0 && ptr_aligned(logits, 16);
}

static inline void vocab_parallel_row_max(float* row_max, const floatX* logits, int N, int Vs, int valid) {
    const int vec = vocab_parallel_prepare("vocab_parallel_row_max", logits, N, Vs, valid, 1, 0);
    if (N == 0) { return; }
    if (vec) {
        LAUNCH(N, VOCAB_PARALLEL_BLOCK, 0, main_stream(), vocab_parallel_row_max_kernel<X128_SIZE>)(row_max, logits, Vs,
                                                                                                   valid);
    } else {
        LAUNCH(N, VOCAB_PARALLEL_BLOCK, 0, main_stream(), vocab_parallel_row_max_kernel<1>)(row_max, logits, Vs, valid);
    }
    CUDA_CHECK_LAUNCH();
}

static inline void vocab_parallel_row_sums(float* sums, const floatX* logits, const float* maxes, int tp,
                                           const int* targets, int v0, int N, int Vs, int valid) {
    const int vec = vocab_parallel_prepare("vocab_parallel_row_sums", logits, N, Vs, valid, tp, v0);
    if (N == 0) { return; }
    if (vec) {
        LAUNCH(N, VOCAB_PARALLEL_BLOCK, 0, main_stream(), vocab_parallel_row_sums_kernel<X128_SIZE>)(
            sums, logits, maxes, tp, targets, v0, N, Vs, valid);
    } else {
        LAUNCH(N, VOCAB_PARALLEL_BLOCK, 0, main_stream(), vocab_parallel_row_sums_kernel<1>)(
            sums, logits, maxes, tp, targets, v0, N, Vs, valid);
    }
    CUDA_CHECK_LAUNCH();
}

static inline void vocab_parallel_finish(floatX* logits, float* losses, const float* maxes, int tp, const float* sums,
                                         const int* targets, int v0, int N, int Vs, int valid, float dloss,
                                         int write_dlogits) {
    const int vec = vocab_parallel_prepare("vocab_parallel_finish", logits, N, Vs, valid, tp, v0);
    if (N == 0) { return; }
    const int block = write_dlogits ? VOCAB_PARALLEL_BLOCK : WARP_SIZE; /* losses only: thread 0 of each row */
    if (vec) {
        LAUNCH(N, block, 0, main_stream(), vocab_parallel_finish_kernel<X128_SIZE>)(
            logits, losses, maxes, tp, sums, targets, v0, N, Vs, valid, dloss, write_dlogits);
    } else {
        LAUNCH(N, block, 0, main_stream(), vocab_parallel_finish_kernel<1>)(
            logits, losses, maxes, tp, sums, targets, v0, N, Vs, valid, dloss, write_dlogits);
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
