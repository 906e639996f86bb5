/*
 * llmc/cuda/encoder.cuh -- token + position embedding (GPT-2, Radford et al. 2019), forward and backward.
 *
 *   encoder_forward(out(B,T,C), inp(B,T) int, wte(Vp,C), wpe(maxT,C), B, T, C)
 *       out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]          (fp32 add, one rounding to floatX)
 *   encoder_backward(dwte(Vp,C) +=, dwpe(maxT,C) +=, dout(B,T,C), inp(B,T) device, host_inp(B,T) host, B, T, C)
 *       dwpe[t,:] += sum_b dout[b,t,:]                  (each thread sums over b in order)
 *       dwte[v,:] += sum_{(b,t): inp=v} dout[b,t,:]     (positions bucketed by token on the host,
 *                                                       summed in increasing position order)
 * Deterministic: no atomics; every sum has a fixed order (bit-identical run to run).
 * The dwte bucketing follows llm.c's idea (train_gpt2.cu encoder_backward: bucket by token with host
 * inputs); the implementation here is our own: counting sort of positions by token, buckets launched
 * largest first so frequent tokens do not finish last.
 * Tokens must be >= 0 (checked on the host; exits with a message otherwise) and < Vp (not checked: Vp is
 * not passed). Queued on main_stream(); the host bucketing runs while the GPU works, no host sync: the
 * buckets go to the GPU from two pinned host buffers used in turn, each guarded by an event recorded after
 * its copy, so the host only waits when it is two calls ahead of the GPU. The buffers are sized for
 * 4*B*T ints (the most a call needs) on the first call and reallocated only if B*T grows (that call
 * synchronises: cudaFreeHost/cudaMalloc).
 */
#ifndef LLMC_CUDA_ENCODER_CUH
#define LLMC_CUDA_ENCODER_CUH

#include "common.cuh"

template <int W>
static __global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                              int T, int C, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        size_t e = i * W;
        size_t bt = e / (size_t)C;
        int c = (int)(e % (size_t)C);
        int t = (int)(bt % (size_t)T);
        int tok = inp[bt];
        PackedN<floatX, W> a = load_packed<floatX, W>(wte + (size_t)tok * C + c);
        PackedN<floatX, W> p = load_packed<floatX, W>(wpe + (size_t)t * C + c);
        PackedN<floatX, W> o;
#pragma unroll
        for (int k = 0; k < W; k++) { o[k] = from_float<floatX>(to_float(a[k]) + to_float(p[k])); }
        store_packed_cs<floatX, W>(out + e, o);
    }
}

/* one thread per (t, packet of W channels): dwpe[t, c..c+W) += sum over b */
template <int W>
static __global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    int cp = C / W;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * cp) { return; }
    int t = (int)(i / cp);
    int c = (int)(i % cp) * W;
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; k++) { acc[k] = 0.0f; }
    for (int b = 0; b < B; b++) {
        PackedN<floatX, W> d = load_packed<floatX, W>(dout + ((size_t)b * T + t) * C + c);
#pragma unroll
        for (int k = 0; k < W; k++) { acc[k] += to_float(d[k]); }
    }
    PackedN<floatX, W> g = load_packed<floatX, W>(dwpe + (size_t)t * C + c);
#pragma unroll
    for (int k = 0; k < W; k++) { g[k] = from_float<floatX>(to_float(g[k]) + acc[k]); }
    store_packed<floatX, W>(dwpe + (size_t)t * C + c, g);
}

/* buckets: nb triples (token, start, count) into positions[]; grid (nb, channel tiles) */
template <int W>
static __global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* buckets,
                                                   const int* positions, int C) {
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * W;
    if (c >= C) { return; }
    int tok = buckets[3 * blockIdx.x + 0];
    int start = buckets[3 * blockIdx.x + 1];
    int count = buckets[3 * blockIdx.x + 2];
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; k++) { acc[k] = 0.0f; }
    for (int j = 0; j < count; j++) {
        size_t row = (size_t)positions[start + j];
        PackedN<floatX, W> d = load_packed<floatX, W>(dout + row * C + c);
#pragma unroll
        for (int k = 0; k < W; k++) { acc[k] += to_float(d[k]); }
    }
    PackedN<floatX, W> g = load_packed<floatX, W>(dwte + (size_t)tok * C + c);
#pragma unroll
    for (int k = 0; k < W; k++) { g[k] = from_float<floatX>(to_float(g[k]) + acc[k]); }
    store_packed<floatX, W>(dwte + (size_t)tok * C + c, g);
}

static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (n == 0) { return; }
    const int block = 256;
    if (C % X128_SIZE == 0 && ptr_aligned(out, 16) && ptr_aligned(wte, 16) && ptr_aligned(wpe, 16)) {
        size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), encoder_forward_kernel<X128_SIZE>)(out, inp, wte, wpe, T, C, np);
    } else {
        LAUNCH(grid_for(n, block), block, 0, main_stream(), encoder_forward_kernel<1>)(out, inp, wte, wpe, T, C, n);
    }
    CUDA_CHECK_LAUNCH();
}

/* host-side bucketing state, grown on demand (static: one per translation unit) */
typedef struct {
    int* host_upload[2];      /* pinned, used in turn: [3*nb bucket triples | N positions] */
    cudaEvent_t uploaded[2];  /* recorded on the main stream after the copy out of host_upload[i] */
    int slot;                 /* host_upload buffer of the next call */
    size_t cap;               /* ints in each host_upload buffer and in dev_upload */
    int* counts;              /* per token */
    size_t counts_cap;
    int* dev_upload;
} EncoderBucketState;
static EncoderBucketState llmc_encoder_buckets;

/* releases the bucket buffers (backend_shutdown; also before they grow) */
static inline void encoder_buckets_free(void) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    if (s->cap > 0) {
        CUDA_CHECK(cudaStreamSynchronize(main_stream()));
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaFreeHost(s->host_upload[i]));
            CUDA_CHECK(cudaEventDestroy(s->uploaded[i]));
        }
        CUDA_CHECK(cudaFree(s->dev_upload));
    }
    free(s->counts);
    memset(s, 0, sizeof(*s));
}

/* makes room for `need` ints (one-time: sized for 4N, the most a call with N positions needs) */
static inline void encoder_buckets_reserve(size_t need, int N) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    if (need <= s->cap) { return; }
    int* counts = s->counts;
    size_t counts_cap = s->counts_cap;
    s->counts = NULL; /* keep the counts across the reallocation */
    encoder_buckets_free();
    s->counts = counts;
    s->counts_cap = counts_cap;
    s->cap = need > 4 * (size_t)N ? need : 4 * (size_t)N;
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMallocHost((void**)&s->host_upload[i], s->cap * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&s->uploaded[i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMalloc((void**)&s->dev_upload, s->cap * sizeof(int)));
}

static inline int encoder_bucket_compare(const void* a, const void* b) {
    const int* x = (const int*)a;
    const int* y = (const int*)b;
    if (x[2] != y[2]) { return x[2] > y[2] ? -1 : 1; } /* larger buckets first */
    return (x[0] > y[0]) - (x[0] < y[0]);              /* then by token id */
}

static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp, const int* host_inp,
                                    int B, int T, int C) {
    (void)inp;
    const int N = B * T;
    if (N == 0 || C == 0) { return; }
    const int vec = (C % X128_SIZE == 0 && ptr_aligned(dwte, 16) && ptr_aligned(dwpe, 16) && ptr_aligned(dout, 16));
    const int W = vec ? X128_SIZE : 1;
    /* dwpe */
    {
        const int block = 256;
        size_t threads = (size_t)T * (C / W);
        unsigned int grid = (unsigned int)CEIL_DIV(threads, (size_t)block);
        if (vec) {
            LAUNCH(grid, block, 0, main_stream(), encoder_backward_wpe_kernel<X128_SIZE>)(dwpe, dout, B, T, C);
        } else {
            LAUNCH(grid, block, 0, main_stream(), encoder_backward_wpe_kernel<1>)(dwpe, dout, B, T, C);
        }
        CUDA_CHECK_LAUNCH();
    }
    /* dwte: counting sort of positions by token on the host */
    EncoderBucketState* s = &llmc_encoder_buckets;
    int max_tok = 0;
    for (int i = 0; i < N; i++) {
        if (host_inp[i] < 0) { FATAL("encoder_backward: negative token id %d at position %d", host_inp[i], i); }
        if (host_inp[i] > max_tok) { max_tok = host_inp[i]; }
    }
    if ((size_t)max_tok + 2 > s->counts_cap) {
        free(s->counts);
        s->counts_cap = (size_t)max_tok + 2;
        s->counts = (int*)malloc_check(s->counts_cap * sizeof(int), "encoder bucket counts");
    }
    memset(s->counts, 0, ((size_t)max_tok + 2) * sizeof(int));
    for (int i = 0; i < N; i++) { s->counts[host_inp[i]]++; }
    int nb = 0;
    for (int v = 0; v <= max_tok; v++) { nb += s->counts[v] > 0; }
    size_t need = 3 * (size_t)nb + (size_t)N;
    encoder_buckets_reserve(need, N);
    /* this buffer's previous copy (two calls ago) must have left it before it is overwritten */
    const int slot = s->slot;
    s->slot ^= 1;
    CUDA_CHECK(cudaEventSynchronize(s->uploaded[slot]));
    int* trip = s->host_upload[slot];
    int* pos = trip + 3 * (size_t)nb;
    /* exclusive prefix sum -> start offsets; buckets in token order */
    int off = 0, b = 0;
    for (int v = 0; v <= max_tok; v++) {
        int cnt = s->counts[v];
        if (cnt > 0) {
            trip[3 * b + 0] = v;
            trip[3 * b + 1] = off;
            trip[3 * b + 2] = cnt;
            b++;
        }
        s->counts[v] = off; /* now: next write slot */
        off += cnt;
    }
    for (int i = 0; i < N; i++) { pos[s->counts[host_inp[i]]++] = i; } /* increasing i per token: stable */
    qsort(trip, (size_t)nb, 3 * sizeof(int), encoder_bucket_compare);
    /* pinned source: copied when the main stream reaches it (after the previous call's kernels read dev_upload) */
    CUDA_CHECK(cudaMemcpyAsync(s->dev_upload, trip, need * sizeof(int), cudaMemcpyHostToDevice, main_stream()));
    CUDA_CHECK(cudaEventRecord(s->uploaded[slot], main_stream()));
    const int block = 128;
    dim3 grid((unsigned int)nb, (unsigned int)CEIL_DIV(C / W, block));
    const int* dbuckets = s->dev_upload;
    const int* dpos = s->dev_upload + 3 * (size_t)nb;
    if (vec) {
        LAUNCH(grid, block, 0, main_stream(), encoder_backward_wte_kernel<X128_SIZE>)(dwte, dout, dbuckets, dpos, C);
    } else {
        LAUNCH(grid, block, 0, main_stream(), encoder_backward_wte_kernel<1>)(dwte, dout, dbuckets, dpos, C);
    }
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_ENCODER_CUH */
