/*
 * llmc/cuda/encoder.cuh -- token + position embedding (GPT-2, Radford et al. 2019), forward and backward, whole or
 * split over tensor-parallel ranks by vocabulary rows (Shoeybi et al. 2019; llmc/README.md, "Where the next
 * dimensions plug in"). The unsharded ops are the shard [0, INT_MAX): the same kernels, the same arithmetic.
 *
 *   encoder_forward_vocab_shard(out(B,T,C), inp(B,T) int, wte_shard(Vs,C), wpe(maxT,C), v0, Vs, B, T, C)
 *       out[b,t,:] = wte_shard[inp[b,t]-v0,:] + wpe[t,:]  if v0 <= inp[b,t] < v0+Vs   (fp32 add, one rounding to
 *                    floatX), else 0 (so the tp ranks' outputs sum to the full embedding exactly); wpe NULL: no
 *                    position term (rotary positions), dwpe NULL: no position gradient
 *   encoder_backward_vocab_shard(dwte_shard(Vs,C) +=, dwpe(maxT,C) +=, dout(B,T,C), inp(B,T) device,
 *                    host_inp(B,T) host, v0, Vs, B, T, C)
 *       dwpe[t,:] += sum_b dout[b,t,:]                  (every row, whatever its token; each thread sums over b
 *                                                       in order)
 *       dwte_shard[v-v0,:] += sum_{(b,t): inp=v} dout[b,t,:]   for v in [v0, v0+Vs) (positions bucketed by token
 *                                                       on the host; see "dwte in chunks" below)
 *   encoder_forward / encoder_backward: the same with v0 = 0, Vs = INT_MAX and wte(Vp,C).
 * Deterministic: no atomics; every sum has a fixed order (bit-identical run to run, and a shard's dwte rows are
 * bit for bit the same rows of the unsharded op's dwte).
 * The dwte bucketing follows llm.c's idea (train_gpt2.cu encoder_backward: bucket by token with host
 * inputs); the implementation here is our own: counting sort of positions by token, work items launched
 * largest first. Only the shard's tokens get buckets; a bucket names its global token id and the kernels skip
 * buckets outside the shard (the staged uploads of graph mode bucket every token, see encoder_backward_stage).
 * dwte in chunks (issue 15, item 8): a bucket of at most ENCODER_WTE_CHUNK positions is one block, which sums its
 * rows in increasing position order in fp32 and adds the sum to dwte (one rounding to floatX). A longer bucket (a
 * frequent token: newline is ~12% of a GPT-2 batch, 7,745 of 65,536 positions) is cut into chunks of
 * ENCODER_WTE_CHUNK consecutive positions (the last one shorter), one block each, that write their fp32 partial
 * sums to rows of a device scratch buffer; a second kernel then adds, per split token, its chunks' partials in
 * chunk order (fp32), and adds that to dwte. Before, one block walked all 7,745 rows while the rest of the GPU sat
 * idle. The order is fixed by the token data alone, so the result is still bit-identical run to run, but for split
 * buckets it is NOT bit-identical to the single-block sum of the earlier kernel (fp32 addition is not
 * associative). Tolerance: the single-block sum ((d1 + d2) + d3) + ... is within (n - 1) u sum|d| of the exact sum
 * of its n terms (u = 2^-24, first order), the chunked one within (L - 1 + n/L - 1) u sum|d| (L = ENCODER_WTE_CHUNK;
 * tighter for n > L), so the two differ by less than (n + L + n/L) u sum|d|: at n = 7,745 about 5e-4 sum|d|, an
 * fp32-level difference that changes a bf16 result (rounded once, 2^-9 relative) by at most one ulp, and only where
 * the fp32 sum lies that close to a rounding boundary; the CPU reference sums in yet another order and stays within
 * the emulator test's tolerance (dev/emu/test_kernels_ops.cpp, test_encoder_skewed, which also checks the chunked
 * order bit for bit against a host model). Buckets of <= ENCODER_WTE_CHUNK positions give exactly the old bits.
 * Tokens must be >= 0 (the backward checks on the host and exits with a message; the forward writes 0 for a
 * negative token) and < Vp (not checked: Vp is not passed). v0 >= 0, Vs >= 1 (exits otherwise). 128-bit
 * accesses when C % X128_SIZE == 0 and the floatX pointers are 16-byte aligned, element accesses otherwise.
 * Queued on main_stream(); the host bucketing runs while the GPU works, no host sync: the
 * buckets go to the GPU from two pinned host buffers used in turn, each guarded by an event recorded after
 * its copy, so the host only waits when it is two calls ahead of the GPU. The buffers are sized for
 * encoder_upload_ints(B*T) ints (the most a call needs) on the first call and reallocated only if B*T grows
 * (that call synchronises: cudaFreeHost/cudaMalloc). The partial-sum scratch is sized for the most chunks any
 * token data can give, encoder_partial_rows(B*T) rows of C floats (6.3 MB at B*T = 65,536, C = 768), on the
 * first eager call and grown (synchronising) only when B*T or C grows; like the upload buffer it is the
 * backend's own, outside the memory ledger's model buffers. Under CUDA-graph capture, see encoder_backward_stage.
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
            if (wpe) {
                PackedN<floatX, W> p = load_packed<floatX, W>(wpe + (size_t)t * C + c);
#pragma unroll
                for (int k = 0; k < W; k++) { o[k] = from_float<floatX>(to_float(a[k]) + to_float(p[k])); }
            } else { /* no position table (rotary positions) */
                o = a;
            }
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

/* positions per dwte work item: a bucket with more positions is split into chunks of this many (see the header) */
#define ENCODER_WTE_CHUNK 64

/* An upload (what the dwte kernels read), in ints:
 *   [n_items | n_split | positions (N) | n_items items (token, start, count, slot) | n_split splits (token,
 *    first slot, chunks)]
 * positions: the row indices b*T + t grouped by token, increasing within a token. An item sums `count` rows
 * positions[start..start+count) of one token: slot < 0 adds the sum to dwte's row, slot >= 0 writes it to row `slot`
 * of the partial-sum scratch. A split adds scratch rows first..first+chunks-1, in order, to dwte's row.
 * The items are at a fixed offset and the splits follow them, so a graph can replay the copy and launches with
 * fixed sizes. */

/* positions per work item used by the bucketing: ENCODER_WTE_CHUNK, or larger through encoder_set_wte_chunk (the
 * buffer bounds below hold for every chunk length >= ENCODER_WTE_CHUNK) */
static int llmc_encoder_wte_chunk = ENCODER_WTE_CHUNK;
/* benchmarks (dev/cuda/encoder.cu) only: sets the chunk length for the following calls; INT_MAX gives one block per
 * token, the kernel before issue 15's item 8 (same arithmetic, same bits). Exits if L < ENCODER_WTE_CHUNK (the
 * upload and scratch buffers are sized for chunks of at least that many positions). */
static inline void encoder_set_wte_chunk(int L) {
    if (L < ENCODER_WTE_CHUNK) { FATAL("encoder_set_wte_chunk: %d positions per chunk, expected >= %d", L, ENCODER_WTE_CHUNK); }
    llmc_encoder_wte_chunk = L;
}

/* the most ints an upload of N positions needs: n_items <= N (each item has >= 1 position), n_split <= N/(L+1) */
static inline size_t encoder_upload_ints(int N) {
    return 2 + 5 * (size_t)N + 3 * (size_t)(N / (ENCODER_WTE_CHUNK + 1));
}
/* the most scratch rows (partials) N positions can need: a split bucket of c > L positions has ceil(c/L) <= 2c/L
 * chunks, so all of them together have at most 2N/L (rounded down: the count is an integer) */
static inline size_t encoder_partial_rows(int N) { return 2 * (size_t)N / ENCODER_WTE_CHUNK; }

/* W consecutive fp32 values (16-byte accesses when W is a multiple of 4; p then 16-byte aligned) */
template <int W>
static __device__ __forceinline__ void encoder_load_floats(float* v, const float* p) {
    if constexpr (W % 4 == 0) {
#pragma unroll
        for (int k = 0; k < W; k += 4) {
            PackedN<float, 4> q = load_packed<float, 4>(p + k);
#pragma unroll
            for (int j = 0; j < 4; j++) { v[k + j] = q[j]; }
        }
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) { v[k] = p[k]; }
    }
}
template <int W>
static __device__ __forceinline__ void encoder_store_floats(float* p, const float* v) {
    if constexpr (W % 4 == 0) {
#pragma unroll
        for (int k = 0; k < W; k += 4) {
            PackedN<float, 4> q;
#pragma unroll
            for (int j = 0; j < 4; j++) { q[j] = v[k + j]; }
            store_packed<float, 4>(p + k, q);
        }
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) { p[k] = v[k]; }
    }
}

/* dwte row `tok` (channels c..c+W) += acc: one fp32 add and one rounding per element */
template <int W>
static __device__ __forceinline__ void encoder_add_to_row(floatX* dwte, long long tok, int C, int c, const float* acc) {
    PackedN<floatX, W> g = load_packed<floatX, W>(dwte + (size_t)tok * C + c);
#pragma unroll
    for (int k = 0; k < W; k++) { g[k] = from_float<floatX>(to_float(g[k]) + acc[k]); }
    store_packed<floatX, W>(dwte + (size_t)tok * C + c, g);
}

/* pass 1, one block per item (x) and channel tile (y); blocks past n_items exit (a graph replays the launch with N
 * blocks), and so do items of tokens outside the shard [v0, v0 + Vs) that dwte holds (a staged upload buckets every
 * token). The item's rows are summed in increasing position order. partials: scratch rows of C floats. */
template <int W>
static __global__ void encoder_backward_wte_kernel(floatX* dwte, float* partials, const floatX* dout, const int* upload,
                                                   int N, int C, int v0, int Vs) {
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * W;
    if (c >= C || (int)blockIdx.x >= upload[0]) { return; }
    const int* positions = upload + 2;
    const int* item = upload + 2 + N + 4 * (size_t)blockIdx.x;
    long long tok;
    if (!encoder_token_in_shard(item[0], v0, Vs, &tok)) { return; }
    int start = item[1];
    int count = item[2];
    int slot = item[3];
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; k++) { acc[k] = 0.0f; }
    for (int j = 0; j < count; j++) {
        size_t row = (size_t)positions[start + j];
        PackedN<floatX, W> d = load_packed<floatX, W>(dout + row * C + c);
#pragma unroll
        for (int k = 0; k < W; k++) { acc[k] += to_float(d[k]); }
    }
    if (slot < 0) {
        encoder_add_to_row<W>(dwte, tok, C, c, acc);
    } else {
        encoder_store_floats<W>(partials + (size_t)slot * C + c, acc);
    }
}

/* pass 2, one block per split token (x) and channel tile (y); blocks past n_split exit: dwte's row += the sum of
 * the token's partials, added in chunk order */
template <int W>
static __global__ void encoder_backward_wte_reduce_kernel(floatX* dwte, const float* partials, const int* upload, int N,
                                                          int C, int v0, int Vs) {
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * W;
    if (c >= C || (int)blockIdx.x >= upload[1]) { return; }
    const int* split = upload + 2 + N + 4 * (size_t)upload[0] + 3 * (size_t)blockIdx.x;
    long long tok;
    if (!encoder_token_in_shard(split[0], v0, Vs, &tok)) { return; }
    const int first = split[1];
    const int chunks = split[2];
    float acc[W], p[W];
#pragma unroll
    for (int k = 0; k < W; k++) { acc[k] = 0.0f; }
    for (int j = 0; j < chunks; j++) {
        encoder_load_floats<W>(p, partials + (size_t)(first + j) * C + c);
#pragma unroll
        for (int k = 0; k < W; k++) { acc[k] += p[k]; }
    }
    encoder_add_to_row<W>(dwte, tok, C, c, acc);
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
 * Uploads are laid out as described at encoder_upload_ints: positions and items at fixed offsets, so a graph can
 * replay the copy and the launches with fixed sizes. */
typedef struct {
    int* host_upload[2];      /* pinned, used in turn by eager calls */
    cudaEvent_t uploaded[2];  /* recorded on the main stream after the copy out of host_upload[i] */
    int slot;                 /* host_upload buffer of the next eager call */
    int* stage[2];            /* pinned, graph mode: filled by encoder_backward_stage, read by captured copies */
    const int* stage_src;     /* host tokens staged last (checked by a captured encoder_backward) */
    int stage_current;        /* staging buffer filled last */
    int N;                    /* positions the buffers are sized for: encoder_upload_ints(N) ints each */
    int* counts;              /* per token */
    size_t counts_cap;
    int* dev_upload;
    float* partials;          /* device scratch: the chunks' fp32 partial sums, rows of C floats */
    size_t partials_cap;      /* floats */
} EncoderBucketState;
static EncoderBucketState llmc_encoder_buckets;

/* releases the bucket buffers and the partial-sum scratch (backend_shutdown; also before they grow) */
static inline void encoder_buckets_free(void) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    if (s->N > 0 || s->partials) { CUDA_CHECK(cudaStreamSynchronize(main_stream())); }
    if (s->N > 0) {
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaFreeHost(s->host_upload[i]));
            CUDA_CHECK(cudaFreeHost(s->stage[i]));
            CUDA_CHECK(cudaEventDestroy(s->uploaded[i]));
        }
        CUDA_CHECK(cudaFree(s->dev_upload));
    }
    if (s->partials) { CUDA_CHECK(cudaFree(s->partials)); }
    free(s->counts);
    memset(s, 0, sizeof(*s));
}

/* makes room for uploads of N positions (encoder_upload_ints(N) ints). Allocates (synchronising) only when N grows,
 * so never during a capture that follows a call with the same N. */
static inline void encoder_buckets_reserve(int N) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    if (N <= s->N) { return; }
    EncoderBucketState keep = *s;
    s->counts = NULL; /* keep the counts and the scratch across the reallocation */
    s->partials = NULL;
    encoder_buckets_free();
    s->counts = keep.counts;
    s->counts_cap = keep.counts_cap;
    s->partials = keep.partials;
    s->partials_cap = keep.partials_cap;
    s->N = N;
    size_t cap = encoder_upload_ints(N);
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMallocHost((void**)&s->host_upload[i], cap * sizeof(int)));
        CUDA_CHECK(cudaMallocHost((void**)&s->stage[i], cap * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&s->uploaded[i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMalloc((void**)&s->dev_upload, cap * sizeof(int)));
}

/* makes the partial-sum scratch hold encoder_partial_rows(N) rows of C floats (the most any tokens need, so a graph
 * captured after an eager call of the same shape never outgrows it); grows only, synchronising */
static inline void encoder_partials_reserve(int N, int C) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    size_t need = encoder_partial_rows(N) * (size_t)C;
    if (need <= s->partials_cap) { return; }
    if (s->partials) {
        CUDA_CHECK(cudaStreamSynchronize(main_stream()));
        CUDA_CHECK(cudaFree(s->partials));
    }
    CUDA_CHECK(cudaMalloc((void**)&s->partials, need * sizeof(float)));
    s->partials_cap = need;
}

static inline int encoder_item_compare(const void* a, const void* b) {
    const int* x = (const int*)a;
    const int* y = (const int*)b;
    if (x[2] != y[2]) { return x[2] > y[2] ? -1 : 1; } /* larger items first */
    if (x[0] != y[0]) { return x[0] < y[0] ? -1 : 1; } /* then by token id */
    return (x[1] > y[1]) - (x[1] < y[1]);              /* then by start (unique) */
}

/* counting sort by token of the N positions of host_inp whose token lies in [v0, v0 + Vs) into an upload
 * `out` (encoder_upload_ints(N) ints; layout at encoder_upload_ints): buckets of more than ENCODER_WTE_CHUNK
 * positions become chunks with consecutive scratch slots (per token in token order, from 0); returns the ints used,
 * 2 + N + 4 n_items + 3 n_split. Exits on a negative token (whether or not it is in the shard). */
static inline size_t encoder_bucket_tokens(int* out, const int* host_inp, int N, int v0, int Vs) {
    EncoderBucketState* s = &llmc_encoder_buckets;
    const int L = llmc_encoder_wte_chunk;
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
    int n_items = 0, n_split = 0;
    for (size_t v = 0; v < nrows; v++) {
        int cnt = s->counts[v];
        n_items += cnt > 0 ? (cnt - 1) / L + 1 : 0; /* ceil(cnt / L) without overflow for any L */
        n_split += cnt > L;
    }
    int* pos = out + 2;
    int* item = out + 2 + N;
    int* split = item + 4 * (size_t)n_items;
    out[0] = n_items;
    out[1] = n_split;
    /* exclusive prefix sum -> start offsets; items and splits in token order */
    int off = 0, it = 0, sp = 0, slot = 0;
    for (size_t v = 0; v < nrows; v++) {
        int cnt = s->counts[v];
        int tok = (int)(v0 + (long long)v);
        if (cnt > L) {
            int chunks = (cnt - 1) / L + 1;
            split[3 * sp + 0] = tok;
            split[3 * sp + 1] = slot;
            split[3 * sp + 2] = chunks;
            sp++;
            for (int k = 0; k < chunks; k++, it++) {
                item[4 * it + 0] = tok;
                item[4 * it + 1] = off + k * L;
                item[4 * it + 2] = k < chunks - 1 ? L : cnt - k * L;
                item[4 * it + 3] = slot + k;
            }
            slot += chunks;
        } else if (cnt > 0) {
            item[4 * it + 0] = tok;
            item[4 * it + 1] = off;
            item[4 * it + 2] = cnt;
            item[4 * it + 3] = -1;
            it++;
        }
        s->counts[v] = off; /* now: next write slot */
        off += cnt;
    }
    for (int i = 0; i < N; i++) { /* increasing i per token: stable */
        if (encoder_token_in_shard(host_inp[i], v0, Vs, &row)) { pos[s->counts[row]++] = i; }
    }
    qsort(item, (size_t)n_items, 4 * sizeof(int), encoder_item_compare); /* launch order only: results do not move */
    return 2 + (size_t)N + 4 * (size_t)n_items + 3 * (size_t)n_split;
}

/* Graph mode (--cuda-graphs): buckets the tokens host_inp(B,T) into pinned staging buffer `stage` (0 or 1) on
 * the host. An encoder_backward (or encoder_backward_vocab_shard: every token is staged, the kernel skips the
 * buckets outside the shard) captured next (same host_inp) uploads from that buffer with the fixed size
 * encoder_upload_ints(B*T) ints and launches B*T item blocks and B*T/(ENCODER_WTE_CHUNK+1) split blocks (those past
 * the counts exit), so each replay only needs the new
 * tokens staged into the same buffer first. The caller must make sure the previous replay that read `stage`
 * has finished. May allocate (synchronising) on the first call or when B*T grows; never call it during a
 * capture. The captured call needs the partial-sum scratch an eager call of the same B*T and C has sized. */
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
    /* dwpe (none without a position table: rotary positions) */
    if (dwpe) {
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
    unsigned int items, splits;
    if (capture != cudaStreamCaptureStatusNone) {
        /* being captured into a graph: the copy from the staged buffer and the launches get fixed sizes */
        if (s->stage_src != host_inp || s->N < N) {
            FATAL("encoder_backward captured without encoder_backward_stage of the same tokens first");
        }
        if (s->partials_cap < encoder_partial_rows(N) * (size_t)C) {
            FATAL("encoder_backward captured before an eager call with B*T = %d, C = %d sized its scratch", N, C);
        }
        CUDA_CHECK(cudaMemcpyAsync(s->dev_upload, s->stage[s->stage_current], encoder_upload_ints(N) * sizeof(int),
                                   cudaMemcpyHostToDevice, main_stream()));
        items = (unsigned int)N;
        splits = (unsigned int)(N / (ENCODER_WTE_CHUNK + 1));
    } else {
        encoder_buckets_reserve(N);
        encoder_partials_reserve(N, C);
        /* this buffer's previous copy (two calls ago) must have left it before it is overwritten */
        const int slot = s->slot;
        s->slot ^= 1;
        cuda_host_wait_event(s->uploaded[slot]);
        size_t need = encoder_bucket_tokens(s->host_upload[slot], host_inp, N, v0, Vs);
        /* pinned source: copied when the main stream reaches it (after the previous call's kernels read dev_upload) */
        CUDA_CHECK(cudaMemcpyAsync(s->dev_upload, s->host_upload[slot], need * sizeof(int), cudaMemcpyHostToDevice,
                                   main_stream()));
        CUDA_CHECK(cudaEventRecord(s->uploaded[slot], main_stream()));
        items = (unsigned int)s->host_upload[slot][0];
        splits = (unsigned int)s->host_upload[slot][1];
    }
    if (items == 0) { return; }
    const int block = 128;
    const unsigned int tiles = (unsigned int)CEIL_DIV(C / W, block);
    if (vec) {
        LAUNCH(dim3(items, tiles), block, 0, main_stream(), encoder_backward_wte_kernel<X128_SIZE>)(
            dwte_shard, s->partials, dout, s->dev_upload, N, C, v0, Vs);
    } else {
        LAUNCH(dim3(items, tiles), block, 0, main_stream(), encoder_backward_wte_kernel<1>)(
            dwte_shard, s->partials, dout, s->dev_upload, N, C, v0, Vs);
    }
    CUDA_CHECK_LAUNCH();
    if (splits == 0) { return; }
    if (vec) {
        LAUNCH(dim3(splits, tiles), block, 0, main_stream(), encoder_backward_wte_reduce_kernel<X128_SIZE>)(
            dwte_shard, s->partials, s->dev_upload, N, C, v0, Vs);
    } else {
        LAUNCH(dim3(splits, tiles), block, 0, main_stream(), encoder_backward_wte_reduce_kernel<1>)(
            dwte_shard, s->partials, s->dev_upload, N, C, v0, Vs);
    }
    CUDA_CHECK_LAUNCH();
}

/* the whole vocabulary: dwte(Vp,C) */
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp, const int* host_inp,
                                    int B, int T, int C) {
    encoder_backward_vocab_shard(dwte, dwpe, dout, inp, host_inp, 0, INT_MAX, B, T, C);
}

#endif /* LLMC_CUDA_ENCODER_CUH */
