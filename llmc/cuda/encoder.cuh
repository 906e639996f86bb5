/*
 * llmc/cuda/encoder.cuh -- token + position embedding (GPT-2, Radford et al. 2019), forward and backward, whole or
 * split over tensor-parallel ranks by vocabulary rows (Shoeybi et al. 2019; llmc/README.md, "Where the next
 * dimensions plug in"). The unsharded ops are the shard [0, INT_MAX): the same kernels, the same arithmetic.
 *
 *   encoder_forward_vocab_shard(out(B,T,C), inp(B,T) int, wte_shard(Vs,C), wpe(maxT,C), v0, Vs, B, T, C)
 *       out[b,t,:] = wte_shard[inp[b,t]-v0,:] + wpe[t,:]  if v0 <= inp[b,t] < v0+Vs   (fp32 add, one rounding to
 *                    floatX), else 0 (so the tp ranks' outputs sum to the full embedding exactly)
 *   encoder_backward_vocab_shard(dwte_shard(Vs,C) +=, dwpe(maxT,C) +=, dout(B,T,C), inp(B,T) device,
 *                    host_inp(B,T) host, v0, Vs, B, T, C)
 *       dwpe[t,:] += sum_b dout[b,t,:]                  (every row, whatever its token; each thread sums over b
 *                                                       in order)
 *       dwte_shard[v-v0,:] += sum_{(b,t): inp=v} dout[b,t,:]   for v in [v0, v0+Vs) (positions bucketed by token
 *                                                       on the host, summed in increasing position order)
 *   encoder_forward / encoder_backward: the same with v0 = 0, Vs = INT_MAX and wte(Vp,C).
 * Deterministic: no atomics; every sum has a fixed order (bit-identical run to run, and a shard's dwte rows are
 * bit for bit the same rows of the unsharded op's dwte).
 * The dwte bucketing follows llm.c's idea (train_gpt2.cu encoder_backward: bucket by token with host
 * inputs); the implementation here is our own: counting sort of positions by token, buckets launched
 * largest first so frequent tokens do not finish last. Only the shard's tokens get buckets; a bucket names its
 * global token id and the kernel skips buckets outside the shard (the staged uploads of graph mode bucket
 * every token, see encoder_backward_stage).
 * Tokens must be >= 0 (the backward checks on the host and exits with a message; the forward writes 0 for a
 * negative token) and < Vp (not checked: Vp is not passed). v0 >= 0, Vs >= 1 (exits otherwise). 128-bit
 * accesses when C % X128_SIZE == 0 and the floatX pointers are 16-byte aligned, element accesses otherwise.
 * Queued on main_stream(); the host bucketing runs while the GPU works, no host sync: the
 * buckets go to the GPU from two pinned host buffers used in turn, each guarded by an event recorded after
 * its copy, so the host only waits when it is two calls ahead of the GPU. The buffers are sized for
 * 1 + 4*B*T ints (the most a call needs) on the first call and reallocated only if B*T grows (that call
 * synchronises: cudaFreeHost/cudaMalloc). Under CUDA-graph capture, see encoder_backward_stage.
 */
#ifndef LLMC_CUDA_ENCODER_CUH
#define LLMC_CUDA_ENCODER_CUH

#include <limits.h>

#include "common.cuh"

/* 1 if token id v lies in the shard [v0, v0 + Vs); *row = v - v0 (64-bit: no overflow for any int inputs) */
static __host__ __device__ __forceinline__ int encoder_token_in_shard(int v, int v0, int Vs, long long* row) {
    *row = (long long)v - v0;
    return *row >= 0 && *row < Vs;
}

/* one thread per packet of W channels of one row; wte holds the vocabulary rows [v0, v0 + Vs) */
template <int W>
static __global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                              int v0, int Vs, int T, int C, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        size_t e = i * W;
        size_t bt = e / (size_t)C;
        int c = (int)(e % (size_t)C);
        int t = (int)(bt % (size_t)T);
        long long tok;
        PackedN<floatX, W> o;
        if (encoder_token_in_shard(inp[bt], v0, Vs, &tok)) {
            PackedN<floatX, W> a = load_packed<floatX, W>(wte + (size_t)tok * C + c);
            PackedN<floatX, W> p = load_packed<floatX, W>(wpe + (size_t)t * C + c);
#pragma unroll
            for (int k = 0; k < W; k++) { o[k] = from_float<floatX>(to_float(a[k]) + to_float(p[k])); }
        } else {
#pragma unroll
            for (int k = 0; k < W; k++) { o[k] = from_float<floatX>(0.0f); }
        }
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

/* upload = [nb | positions (N) | nb triples (token, start, count) into positions]; grid (>= nb, channel tiles):
 * blocks past nb exit (a graph replays the launch with N blocks), and so do buckets of tokens outside the shard
 * [v0, v0 + Vs) that dwte holds (a staged upload buckets every token) */
template <int W>
static __global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* upload, int N, int C,
                                                   int v0, int Vs) {
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * W;
    if (c >= C || (int)blockIdx.x >= upload[0]) { return; }
    const int* positions = upload + 1;
    const int* bucket = upload + 1 + N + 3 * (size_t)blockIdx.x;
    long long tok;
    if (!encoder_token_in_shard(bucket[0], v0, Vs, &tok)) { return; }
    int start = bucket[1];
    int count = bucket[2];
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

static inline void encoder_check_shard(const char* op, int v0, int Vs) {
    if (v0 < 0 || Vs < 1) { FATAL("%s: vocabulary shard [%d, %d + %d) is empty or starts below 0", op, v0, v0, Vs); }
}

/* the embedding of the tokens in this rank's vocabulary rows [v0, v0 + Vs) (wte_shard(Vs,C)); 0 for the others */
static inline void encoder_forward_vocab_shard(floatX* out, const int* inp, const floatX* wte_shard, const floatX* wpe,
                                               int v0, int Vs, int B, int T, int C) {
    encoder_check_shard("encoder_forward_vocab_shard", v0, Vs);
    size_t n = (size_t)B * T * C;
    if (n == 0) { return; }
    const int block = 256;
    if (C % X128_SIZE == 0 && ptr_aligned(out, 16) && ptr_aligned(wte_shard, 16) && ptr_aligned(wpe, 16)) {
        size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), encoder_forward_kernel<X128_SIZE>)(out, inp, wte_shard, wpe,
                                                                                              v0, Vs, T, C, np);
    } else {
        LAUNCH(grid_for(n, block), block, 0, main_stream(), encoder_forward_kernel<1>)(out, inp, wte_shard, wpe, v0, Vs,
                                                                                      T, C, n);
    }
    CUDA_CHECK_LAUNCH();
}

/* the whole vocabulary: wte(Vp,C) */
static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    encoder_forward_vocab_shard(out, inp, wte, wpe, 0, INT_MAX, B, T, C);
}

/* host-side bucketing state, grown on demand (static: one per translation unit).
 * An upload is [nb | positions (N) | nb triples (token, start, count)]: positions at a fixed offset, so a
 * graph can replay the copy and the launch with fixed sizes. */
typedef struct {
    int* host_upload[2];      /* pinned, used in turn by eager calls */
    cudaEvent_t uploaded[2];  /* recorded on the main stream after the copy out of host_upload[i] */
    int slot;                 /* host_upload buffer of the next eager call */
    int* stage[2];            /* pinned, graph mode: filled by encoder_backward_stage, read by captured copies */
    const int* stage_src;     /* host tokens staged last (checked by a captured encoder_backward) */
    int stage_current;        /* staging buffer filled last */
    int N;                    /* positions the buffers are sized for: 1 + 4N ints each */
    int* counts;              /* per token */
    size_t counts_cap;
    int* dev_upload;
} EncoderBucketState;
static EncoderBucketState llmc_encoder_buckets;

/* releases the bucket buffers (backend_shutdown; also before they grow) */
static inline void encoder_buckets_free(void) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    if (s->N > 0) {
        CUDA_CHECK(cudaStreamSynchronize(main_stream()));
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaFreeHost(s->host_upload[i]));
            CUDA_CHECK(cudaFreeHost(s->stage[i]));
            CUDA_CHECK(cudaEventDestroy(s->uploaded[i]));
        }
        CUDA_CHECK(cudaFree(s->dev_upload));
    }
    free(s->counts);
    memset(s, 0, sizeof(*s));
}

/* makes room for uploads of N positions (1 + 4N ints: nb <= N). Allocates (synchronising) only when N grows,
 * so never during a capture that follows a call with the same N. */
static inline void encoder_buckets_reserve(int N) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    if (N <= s->N) { return; }
    EncoderBucketState keep = *s;
    s->counts = NULL; /* keep the counts across the reallocation */
    encoder_buckets_free();
    s->counts = keep.counts;
    s->counts_cap = keep.counts_cap;
    s->N = N;
    size_t cap = 1 + 4 * (size_t)N;
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMallocHost((void**)&s->host_upload[i], cap * sizeof(int)));
        CUDA_CHECK(cudaMallocHost((void**)&s->stage[i], cap * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&s->uploaded[i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMalloc((void**)&s->dev_upload, cap * sizeof(int)));
}

static inline int encoder_bucket_compare(const void* a, const void* b) {
    const int* x = (const int*)a;
    const int* y = (const int*)b;
    if (x[2] != y[2]) { return x[2] > y[2] ? -1 : 1; } /* larger buckets first */
    return (x[0] > y[0]) - (x[0] < y[0]);              /* then by token id */
}

/* counting sort by token of the N positions of host_inp whose token lies in [v0, v0 + Vs) into
 * out = [nb | positions | triples (global token id, start, count)] (1 + 4N ints); returns the ints used,
 * 1 + N + 3*nb. Exits on a negative token (whether or not it is in the shard). */
static inline size_t encoder_bucket_tokens(int* out, const int* host_inp, int N, int v0, int Vs) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    long long row, max_row = -1; /* largest local row in the shard */
    for (int i = 0; i < N; i++) {
        if (host_inp[i] < 0) { FATAL("encoder_backward: negative token id %d at position %d", host_inp[i], i); }
        if (encoder_token_in_shard(host_inp[i], v0, Vs, &row) && row > max_row) { max_row = row; }
    }
    const size_t nrows = (size_t)(max_row + 1);
    if (nrows + 1 > s->counts_cap) {
        free(s->counts);
        s->counts_cap = nrows + 1;
        s->counts = (int*)malloc_check(s->counts_cap * sizeof(int), "encoder bucket counts");
    }
    memset(s->counts, 0, (nrows + 1) * sizeof(int));
    for (int i = 0; i < N; i++) {
        if (encoder_token_in_shard(host_inp[i], v0, Vs, &row)) { s->counts[row]++; }
    }
    int nb = 0;
    for (size_t v = 0; v < nrows; v++) { nb += s->counts[v] > 0; }
    int* pos = out + 1;
    int* trip = out + 1 + N;
    out[0] = nb;
    /* exclusive prefix sum -> start offsets; buckets in token order */
    int off = 0, b = 0;
    for (size_t v = 0; v < nrows; v++) {
        int cnt = s->counts[v];
        if (cnt > 0) {
            trip[3 * b + 0] = (int)(v0 + (long long)v);
            trip[3 * b + 1] = off;
            trip[3 * b + 2] = cnt;
            b++;
        }
        s->counts[v] = off; /* now: next write slot */
        off += cnt;
    }
    for (int i = 0; i < N; i++) { /* increasing i per token: stable */
        if (encoder_token_in_shard(host_inp[i], v0, Vs, &row)) { pos[s->counts[row]++] = i; }
    }
    qsort(trip, (size_t)nb, 3 * sizeof(int), encoder_bucket_compare);
    return 1 + (size_t)N + 3 * (size_t)nb;
}

/* Graph mode (--cuda-graphs): buckets the tokens host_inp(B,T) into pinned staging buffer `stage` (0 or 1) on
 * the host. An encoder_backward (or encoder_backward_vocab_shard: every token is staged, the kernel skips the
 * buckets outside the shard) captured next (same host_inp) uploads from that buffer with the fixed size
 * 1 + 4*B*T ints and launches B*T blocks (those past the bucket count exit), so each replay only needs the new
 * tokens staged into the same buffer first. The caller must make sure the previous replay that read `stage`
 * has finished. May allocate (synchronising) on the first call or when B*T grows; never call it during a
 * capture. */
static inline void encoder_backward_stage(int stage, const int* host_inp, int B, int T) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    if (stage < 0 || stage > 1) { FATAL("encoder_backward_stage: stage %d is not 0 or 1", stage); }
    encoder_buckets_reserve(B * T);
    encoder_bucket_tokens(s->stage[stage], host_inp, B * T, 0, INT_MAX);
    s->stage_src = host_inp;
    s->stage_current = stage;
}

/* dwte_shard(Vs,C) += the dout rows whose token lies in [v0, v0 + Vs); dwpe += every dout row */
static inline void encoder_backward_vocab_shard(floatX* dwte_shard, floatX* dwpe, const floatX* dout, const int* inp,
                                                const int* host_inp, int v0, int Vs, int B, int T, int C) {
    (void)inp;
    encoder_check_shard("encoder_backward_vocab_shard", v0, Vs);
    const int N = B * T;
    if (N == 0 || C == 0) { return; }
    const int vec = (C % X128_SIZE == 0 && ptr_aligned(dwte_shard, 16) && ptr_aligned(dwpe, 16) && ptr_aligned(dout, 16));
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
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(main_stream(), &capture));
    unsigned int blocks;
    if (capture != cudaStreamCaptureStatusNone) {
        /* being captured into a graph: the copy from the staged buffer and the launch get fixed sizes */
        if (s->stage_src != host_inp || s->N < N) {
            FATAL("encoder_backward captured without encoder_backward_stage of the same tokens first");
        }
        CUDA_CHECK(cudaMemcpyAsync(s->dev_upload, s->stage[s->stage_current], (1 + 4 * (size_t)N) * sizeof(int),
                                   cudaMemcpyHostToDevice, main_stream()));
        blocks = (unsigned int)N;
    } else {
        encoder_buckets_reserve(N);
        /* this buffer's previous copy (two calls ago) must have left it before it is overwritten */
        const int slot = s->slot;
        s->slot ^= 1;
        cuda_host_wait_event(s->uploaded[slot]);
        size_t need = encoder_bucket_tokens(s->host_upload[slot], host_inp, N, v0, Vs);
        /* pinned source: copied when the main stream reaches it (after the previous call's kernels read dev_upload) */
        CUDA_CHECK(cudaMemcpyAsync(s->dev_upload, s->host_upload[slot], need * sizeof(int), cudaMemcpyHostToDevice,
                                   main_stream()));
        CUDA_CHECK(cudaEventRecord(s->uploaded[slot], main_stream()));
        blocks = (unsigned int)s->host_upload[slot][0];
    }
    if (blocks == 0) { return; }
    const int block = 128;
    dim3 grid(blocks, (unsigned int)CEIL_DIV(C / W, block));
    if (vec) {
        LAUNCH(grid, block, 0, main_stream(), encoder_backward_wte_kernel<X128_SIZE>)(dwte_shard, dout, s->dev_upload, N, C,
                                                                                      v0, Vs);
    } else {
        LAUNCH(grid, block, 0, main_stream(), encoder_backward_wte_kernel<1>)(dwte_shard, dout, s->dev_upload, N, C, v0, Vs);
    }
    CUDA_CHECK_LAUNCH();
}

/* the whole vocabulary: dwte(Vp,C) */
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp, const int* host_inp,
                                    int B, int T, int C) {
    encoder_backward_vocab_shard(dwte, dwpe, dout, inp, host_inp, 0, INT_MAX, B, T, C);
}

#endif /* LLMC_CUDA_ENCODER_CUH */
