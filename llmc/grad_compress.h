/*
 * llmc/grad_compress.h -- gradient compression for data parallelism (llmc/README.md, "Gradient compression"):
 * the reducer of ZeRO-0/1 gradient buckets (llmc/zero.h) sends INT8 values or the top-k values instead of floatX,
 * with an optional error-feedback residual per rank. Flags: --grad-compress none|int8|topk:RATIO,
 * --grad-compress-round nearest|stochastic, --grad-compress-ef 0|1, --grad-compress-warmup N (the first N optimizer
 * steps uncompressed; Lin et al. 2018's warm-up), --grad-compress-ef-decay F (the residual re-added times F).
 * Variants measured and removed (AdamW's variance frozen or per block, top-k in AdamW's metric): dev/bench/README.md.
 *
 * Methods. INT8: per-block absmax scaling (Dettmers 2016, "8-bit approximations for parallelism in deep learning");
 * blocks of COMPRESS_INT8_BLOCK = 2048 values: the scale costs 4/2048 = 0.2% of the payload, and one 256-thread GPU
 * block quantises a block in one pass (8 values per thread); smaller blocks bound the error tighter (the scale
 * follows local magnitudes: each layer's tensors differ by orders of magnitude, and a block never spans two buckets
 * or two destination ranks) at more scale bytes. Top-k: Deep Gradient Compression (Lin et al. 2018) and sparsified
 * SGD with memory (Stich et al. 2018): per bucket the k = ceil(ratio * n) values of largest magnitude of
 * (gradient + residual), selected exactly with the lower index winning ties; the residual keeps what was not sent.
 *
 * The exchange, per bucket of n values (the ZeRO layout: rank c owns the global range [c*S, (c+1)*S); "part c" of a
 * bucket = its elements in that range, packed in segment order):
 *   INT8, ZeRO-1 (a reduce-scatter): every rank quantises (gradient + residual) once, sends part c (int8 + scales)
 *     straight to rank c (an all-to-all through batched point-to-point transfers, not a ring: a ring would
 *     dequantise, add and requantise at every hop, N-1 roundings of partial sums; here each contribution is rounded
 *     once, error <= s_r/2 per value and rank with round-to-nearest, s_r = that rank's block absmax / 127), and rank
 *     c sums the N dequantised contributions in fp32 in rank order (deterministic).
 *   INT8, ZeRO-0 (an all-reduce): the reduce-scatter above, then each owner quantises its sum once more and sends it
 *     (int8 + scales) to every rank, which all decode the same bytes, so the replicas stay identical; the second
 *     rounding adds <= s_sum/2 per value (s_sum from the block absmax of the sum). Error feedback covers the first
 *     rounding (each rank's own contribution), not the second.
 *   Top-k (ZeRO-0 and ZeRO-1): every rank sends its k (uint32 index, fp32 value) pairs to every other rank (an
 *     all-gather of 8k bytes per rank); every rank adds the N lists in rank order into zeros (deterministic, the
 *     same bits everywhere) and takes the whole bucket (ZeRO-1 then uses its owned part).
 * Bytes per rank per step, n gradient values, N ranks, against the fp32 ring all-reduce 2(N-1)/N * 4n:
 *   INT8 ZeRO-0  2(N-1)/N * n * (1 + 4/2048) (+ block slack): 0.25x;  INT8 ZeRO-1: half of that, 0.125x
 *   top-k        (N-1) * 8k: N*ratio/(1 - 1/N)/... = N*ratio times the fp32 figure's (N-1)/N-normalised share:
 *                exactly (N-1)*8*ratio*n / (8(N-1)/N * n) = N*ratio (0.02x for 1% on 2 ranks; it grows with N, as
 *                every all-gather of sparse lists does)
 * The counters (comm->counters) measure what is really sent; GradCompressStats carries them per step beside the
 * fp32 ring figure of the same buckets.
 *
 * When: ZeRO-0/1 reduce once per optimizer step (the last micro-step's backward), so compression runs once per step
 * whatever the gradient accumulation. Each bucket is encoded and its transfers posted from backward's bucket hook
 * (on the GPU they run on the communication stream and overlap the rest of backward); grad_compress_finish, after
 * the last bucket, decodes every bucket into the gradient buffer (so the gradient norm, the clipping and the
 * update see the decompressed gradient). Not for ZeRO-2 (its reduce-scatter runs every micro-step): the trainer
 * refuses it with one line. Inside tensor- and pipeline-parallel layouts each rank compresses its own part over its
 * data-parallel group; the tp and pp traffic is never compressed (llmc/README.md, "Gradient compression").
 *
 * Residuals (error feedback): fp32, one per real parameter, on this rank (device memory; the ledger counts them),
 * saved in every checkpoint as DIR/gradres_SSSSSSSS_RRRRR.bin (magic 20261201, version 1: [2] step [3] rank
 * [4] data-parallel size [5] kind [6,7] P as uint64; then P fp32; with --ep the expert group's, over the expert-dp
 * group, as DIR/gradrese_SSSSSSSS_RRRRR.bin), so a resume continues bit for bit. They belong
 * to one rank of one data-parallel size: resuming with compression and error feedback on another number of
 * processes is refused with one line; resuming without compression drops them (one line says so).
 *
 * Errors: bad flag values exit with one line (grad_compress_parse's message); allocation failures via dev_malloc.
 */
#ifndef LLMC_GRAD_COMPRESS_H
#define LLMC_GRAD_COMPRESS_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/checkpoint.h"

#define GRAD_RESIDUAL_MAGIC 20261201
#define GRAD_RESIDUAL_VERSION 1
#define GRAD_COMPRESS_MAX_SEGMENTS 16

typedef enum { GRAD_COMPRESS_NONE = 0, GRAD_COMPRESS_INT8 = 1, GRAD_COMPRESS_TOPK = 2 } GradCompressKind;

/* what the flags ask for */
typedef struct {
    GradCompressKind kind;
    double ratio;         /* top-k: fraction of each bucket sent, (0, 1] */
    int stochastic;       /* INT8: stochastic rounding instead of round-to-nearest */
    int error_feedback;   /* keep and re-add the residual of what was not sent */
    float ef_decay;       /* error feedback: the residual re-added as ef_decay * residual, (0, 1]; 1 = all of it
                             (--grad-compress-ef-decay: a value not sent for j steps counts ef_decay^j, see
                             grad_compress_move) */
    int warmup;           /* the first `warmup` optimizer steps (0-based steps < warmup) reduce uncompressed */
} GradCompressSpec;

/* Parses --grad-compress TEXT ("none", "int8", "topk:RATIO" with 0 < RATIO <= 1) into spec->kind/ratio. Returns 0,
 * or -1 with a message naming what was expected in err. */
static inline int grad_compress_parse(const char* text, GradCompressSpec* spec, char* err, size_t cap) {
    spec->ratio = 0.0;
    if (strcmp(text, "none") == 0 || text[0] == '\0') { spec->kind = GRAD_COMPRESS_NONE; return 0; }
    if (strcmp(text, "int8") == 0) { spec->kind = GRAD_COMPRESS_INT8; return 0; }
    if (strncmp(text, "topk:", 5) == 0) {
        char* end = NULL;
        errno = 0;
        double r = strtod(text + 5, &end);
        if (end != text + 5 && *end == '\0' && errno == 0 && r > 0.0 && r <= 1.0) {
            spec->kind = GRAD_COMPRESS_TOPK;
            spec->ratio = r;
            return 0;
        }
        snprintf(err, cap, "--grad-compress '%s': the top-k ratio must be a number in (0, 1], e.g. topk:0.01", text);
        return -1;
    }
    snprintf(err, cap, "--grad-compress '%s' is not a compression; expected none, int8 or topk:RATIO (e.g. topk:0.01)",
             text);
    return -1;
}

/* 1 when optimizer step `step` (0-based) is compressed: none of the --grad-compress-warmup steps before it */
static inline int grad_compress_active_at(const GradCompressSpec* s, int step) {
    return s->kind != GRAD_COMPRESS_NONE && step >= s->warmup;
}

/* "int8 (nearest, error feedback)" etc. into buf */
static inline const char* grad_compress_describe(const GradCompressSpec* s, char* buf, size_t cap) {
    char extra[160] = "";
    if (s->warmup > 0) {
        snprintf(extra, sizeof(extra), ", the first %d steps uncompressed", s->warmup);
    }
    if (s->error_feedback && s->ef_decay != 1.0f) {
        size_t len = strlen(extra);
        snprintf(extra + len, sizeof(extra) - len, ", the residual re-added x%g per step", (double)s->ef_decay);
    }
    if (s->kind == GRAD_COMPRESS_NONE) { snprintf(buf, cap, "none"); }
    else if (s->kind == GRAD_COMPRESS_INT8) {
        snprintf(buf, cap, "int8 (blocks of %d, %s rounding, error feedback %s%s)", COMPRESS_INT8_BLOCK,
                 s->stochastic ? "stochastic" : "nearest", s->error_feedback ? "on" : "off", extra);
    } else {
        snprintf(buf, cap, "topk:%g (error feedback %s%s)", s->ratio, s->error_feedback ? "on" : "off", extra);
    }
    return buf;
}

/* one gradient bucket's plan: its segments (the last encode's pointers) and where each part lives */
typedef struct {
    int used;                      /* encoded this step, to be decoded by grad_compress_finish */
    int nseg;
    CommSegment seg[GRAD_COMPRESS_MAX_SEGMENTS];
    size_t n;                      /* values in the bucket */
    size_t* part;                  /* (N+1) packed offset of part c (elements); part N = n */
    size_t* spart;                 /* (N+1) offset of part c's INT8 scales within the bucket's scales */
    size_t q0, s0;                 /* the bucket's offsets in send_q / send_s */
    size_t rq0, rs0;               /* the bucket's offsets in recv_q / recv_s (N slots of the own part) */
    size_t k, t0;                  /* top-k: k, and the offset in send_idx/val (recv: N*t0 + r*k) */
} GradCompressBucket;

/* per optimizer step, this rank */
typedef struct {
    unsigned long long bytes_sent, bytes_recv;  /* gradient-reduction payload, from the group's counters */
    double fp32_ring_bytes;                     /* what the fp32 ring all-reduce of the same buckets sends */
} GradCompressStats;

typedef struct {
    GradCompressSpec spec;
    Comm* dp;
    int zero_stage;                /* 0: all-reduce, 1: reduce-scatter */
    uint32_t seed, step;           /* the stochastic-rounding stream: (seed, step, element key); the caller sets step to
                                      the optimizer step, so a resumed run draws the same numbers */
    size_t P, S;                   /* parameters, shard size of the ZeRO layout */
    int nb;                        /* buckets: index layer + 1, layer -1 (embeddings, ln_f) .. L-1 */
    GradCompressBucket* b;
    size_t max_n;
    float* stage;                  /* (max_n) fp32 packed bucket */
    float* sum;                    /* (max_n) fp32 decoded sums */
    float* residual;               /* (P) fp32 error-feedback residual (NULL without) */
    int8_t* send_q; float* send_s; int8_t* recv_q; float* recv_s;        /* INT8 */
    uint32_t* send_idx; float* send_val; uint32_t* recv_idx; float* recv_val; void* topk_scratch; /* top-k */
    size_t device_bytes;           /* everything above (the memory ledger) */
    GradCompressStats stats;
} GradCompressor;

static inline size_t grad_compress_blocks(size_t n) { return (n + COMPRESS_INT8_BLOCK - 1) / COMPRESS_INT8_BLOCK; }

/* Sets up compression `spec` for the ZeRO stage (0 or 1) over group dp (P parameters, shard S) with nb buckets;
 * then call grad_compress_plan_bucket for every bucket and grad_compress_allocate. */
static inline void grad_compress_init(GradCompressor* g, const GradCompressSpec* spec, Comm* dp, int zero_stage,
                                      size_t P, size_t S, int nb, uint32_t seed) {
    memset(g, 0, sizeof(*g));
    g->spec = *spec;
    g->dp = dp;
    g->zero_stage = zero_stage;
    g->P = P;
    g->S = S;
    g->nb = nb;
    g->seed = seed;
    g->b = (GradCompressBucket*)calloc_check((size_t)nb, sizeof(GradCompressBucket), "compression buckets");
}

/* bucket `b`'s segments (llmc/zero.h's bucket of layer b - 1): its part offsets and buffer offsets */
static inline void grad_compress_plan_bucket(GradCompressor* g, int b, const CommSegment* seg, int nseg) {
    if (nseg > GRAD_COMPRESS_MAX_SEGMENTS) { FATAL("internal: a gradient bucket of %d segments", nseg); }
    int N = g->dp->world;
    GradCompressBucket* k = &g->b[b];
    k->part = (size_t*)calloc_check((size_t)N + 1, sizeof(size_t), "compression plan");
    k->spart = (size_t*)calloc_check((size_t)N + 1, sizeof(size_t), "compression plan");
    size_t off = 0, soff = 0;
    for (int c = 0; c < N; c++) {
        k->part[c] = off;
        k->spart[c] = soff;
        size_t m = 0;
        for (int i = 0; i < nseg; i++) {
            size_t lo, hi;
            comm_chunk(seg[i].begin, seg[i].end, g->S, c, &lo, &hi);
            m += hi - lo;
        }
        off += m;
        soff += grad_compress_blocks(m);
    }
    k->part[N] = off;
    k->spart[N] = soff;
    k->n = off;
    k->q0 = b > 0 ? g->b[b - 1].q0 + g->b[b - 1].n : 0;
    k->s0 = b > 0 ? g->b[b - 1].s0 + g->b[b - 1].spart[N] : 0;
    k->rq0 = b > 0 ? g->b[b - 1].rq0 + (size_t)N * (g->b[b - 1].part[g->dp->rank + 1] - g->b[b - 1].part[g->dp->rank]) : 0;
    k->rs0 = b > 0 ? g->b[b - 1].rs0 + (size_t)N * grad_compress_blocks(g->b[b - 1].part[g->dp->rank + 1] -
                                                                       g->b[b - 1].part[g->dp->rank]) : 0;
    if (g->spec.kind == GRAD_COMPRESS_TOPK) {
        size_t kk = (size_t)ceil(g->spec.ratio * (double)k->n);
        k->k = k->n == 0 ? 0 : (kk < 1 ? 1 : (kk > k->n ? k->n : kk));
    }
    k->t0 = b > 0 ? g->b[b - 1].t0 + g->b[b - 1].k : 0;
    if (k->n > g->max_n) { g->max_n = k->n; }
}

static inline void* grad_compress_malloc(GradCompressor* g, size_t bytes, const char* what) {
    g->device_bytes += bytes;
    return dev_malloc(bytes ? bytes : 16, what);
}

/* allocates the buffers of the planned buckets (zeroed: the residual starts at 0) */
static inline void grad_compress_allocate(GradCompressor* g) {
    int N = g->dp->world;
    const GradCompressBucket* last = &g->b[g->nb - 1];
    g->stage = (float*)grad_compress_malloc(g, g->max_n * sizeof(float), "compression staging");
    g->sum = (float*)grad_compress_malloc(g, g->max_n * sizeof(float), "compression sums");
    if (g->spec.error_feedback) { g->residual = (float*)grad_compress_malloc(g, g->P * sizeof(float), "error-feedback residual"); }
    if (g->spec.kind == GRAD_COMPRESS_INT8) {
        size_t own = last->part[g->dp->rank + 1] - last->part[g->dp->rank];
        g->send_q = (int8_t*)grad_compress_malloc(g, last->q0 + last->n, "int8 gradients (send)");
        g->send_s = (float*)grad_compress_malloc(g, (last->s0 + last->spart[N]) * sizeof(float), "int8 scales (send)");
        g->recv_q = (int8_t*)grad_compress_malloc(g, last->rq0 + (size_t)N * own, "int8 gradients (receive)");
        g->recv_s = (float*)grad_compress_malloc(g, (last->rs0 + (size_t)N * grad_compress_blocks(own)) * sizeof(float),
                                                 "int8 scales (receive)");
    } else {
        size_t total = last->t0 + last->k;
        g->send_idx = (uint32_t*)grad_compress_malloc(g, total * sizeof(uint32_t), "top-k indices (send)");
        g->send_val = (float*)grad_compress_malloc(g, total * sizeof(float), "top-k values (send)");
        g->recv_idx = (uint32_t*)grad_compress_malloc(g, (size_t)N * total * sizeof(uint32_t), "top-k indices (receive)");
        g->recv_val = (float*)grad_compress_malloc(g, (size_t)N * total * sizeof(float), "top-k values (receive)");
        g->topk_scratch = grad_compress_malloc(g, compress_topk_scratch_bytes(g->max_n), "top-k scratch");
    }
}

static inline void grad_compress_free(GradCompressor* g) {
    void* bufs[] = {g->stage, g->sum, g->residual, g->send_q, g->send_s, g->recv_q, g->recv_s,
                    g->send_idx, g->send_val, g->recv_idx, g->recv_val, g->topk_scratch};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) { if (bufs[i]) { dev_free(bufs[i]); } }
    for (int b = 0; b < g->nb; b++) { free(g->b[b].part); free(g->b[b].spart); }
    free(g->b);
    memset(g, 0, sizeof(*g));
}

/* ---------------------------------------------------------------- packing */

/* pack (to = 1: x <- gradient + ef_decay * residual) or unpack a bucket's packed fp32 values `x` into the floatX gradient
 * pieces (to = 0) or into the residual (to = 2), for the parts c0 <= c < c1; x[0] is packed element `base` */
static inline void grad_compress_move(GradCompressor* g, const GradCompressBucket* k, float* x, size_t base, int to,
                                      int c0, int c1) {
    for (int c = c0; c < c1; c++) {
        size_t off = k->part[c] - base;
        for (int i = 0; i < k->nseg; i++) {
            const CommSegment* s = &k->seg[i];
            size_t lo, hi;
            comm_chunk(s->begin, s->end, g->S, c, &lo, &hi);
            if (hi == lo) { continue; }
            floatX* grad = (floatX*)s->ptr + (lo - s->begin);
            if (to == 1) { compress_pack(x + off, grad, g->residual ? g->residual + lo : NULL, g->spec.ef_decay, hi - lo); }
            else if (to == 0) { dev_copy_floats_to_floatX(grad, x + off, hi - lo); }
            else { dev_memcpy_d2d(g->residual + lo, x + off, (hi - lo) * sizeof(float)); }
            off += hi - lo;
        }
    }
}

/* appends the four transfers between this rank (me) and peer c -- two messages each way (data, then scales or
 * values) -- in the order both sides post them: the lower rank's messages first (NCCL matches in posting order) */
static inline void grad_compress_pair(CommP2P* ops, int* n, int me, int c, CommP2P s1, CommP2P s2, CommP2P r1, CommP2P r2) {
    s1.send = s2.send = 1; r1.send = r2.send = 0;
    s1.peer = s2.peer = r1.peer = r2.peer = c;
    CommP2P order[4] = {s1, s2, r1, r2};
    if (me > c) { order[0] = r1; order[1] = r2; order[2] = s1; order[3] = s2; }
    for (int i = 0; i < 4; i++) { ops[(*n)++] = order[i]; }
}

/* posts a batch of transfers (empty ones dropped: both sides agree which are empty) and adds its bytes, from the
 * group's counters, to the step's figures */
static inline void grad_compress_exchange(GradCompressor* g, CommP2P* ops, int n) {
    int w = 0;
    for (int i = 0; i < n; i++) { if (ops[i].count > 0) { ops[w++] = ops[i]; } }
    unsigned long long s0 = g->dp->counters.bytes_sent, r0 = g->dp->counters.bytes_recv;
    comm_p2p_batch(g->dp, ops, w);
    g->stats.bytes_sent += g->dp->counters.bytes_sent - s0;
    g->stats.bytes_recv += g->dp->counters.bytes_recv - r0;
}

/* ---------------------------------------------------------------- one bucket, from backward's hook */

/* 1 when this step's buckets go through grad_compress_bucket; 0 during the --grad-compress-warmup steps (g->step is
 * the 0-based optimizer step, set by the caller before backward) */
static inline int grad_compress_active(const GradCompressor* g) {
    return grad_compress_active_at(&g->spec, (int)g->step);
}

/* A warm-up step's bucket: reduce(dp, seg, nseg, dtype, S) -- the uncompressed all-reduce (ZeRO-0) or
 * reduce-scatter (ZeRO-1) -- with its bytes, from the group's counters, and the fp32 ring figure added to the
 * step's figures (so the step line shows the full cost of the warm-up). The residual is untouched. */
static inline void grad_compress_uncompressed(GradCompressor* g, const CommSegment* seg, int nseg, CommDtype dtype,
                                              void (*reduce)(Comm*, const CommSegment*, int, CommDtype, size_t)) {
    size_t ring_s, ring_r, ag_s, ag_r;
    comm_segments_bytes(g->dp, seg, nseg, g->S, 4, 0, &ring_s, &ring_r);
    comm_segments_bytes(g->dp, seg, nseg, g->S, 4, 1, &ag_s, &ag_r);
    g->stats.fp32_ring_bytes += (double)(ring_s + ag_s);
    unsigned long long s0 = g->dp->counters.bytes_sent, r0 = g->dp->counters.bytes_recv;
    reduce(g->dp, seg, nseg, dtype, g->S);
    g->stats.bytes_sent += g->dp->counters.bytes_sent - s0;
    g->stats.bytes_recv += g->dp->counters.bytes_recv - r0;
}

/* Bucket b (layer b - 1) is complete in the gradient buffer (segments seg): packs gradient + residual, encodes
 * (INT8 or top-k), updates the residual and posts the transfers. Decoded by grad_compress_finish. */
static inline void grad_compress_bucket(GradCompressor* g, int b, const CommSegment* seg, int nseg) {
    GradCompressBucket* k = &g->b[b];
    int N = g->dp->world, me = g->dp->rank;
    k->nseg = nseg;
    memcpy(k->seg, seg, (size_t)nseg * sizeof(CommSegment));
    k->used = 1;
    size_t ring_s, ring_r, ag_s, ag_r;
    comm_segments_bytes(g->dp, seg, nseg, g->S, 4, 0, &ring_s, &ring_r);
    comm_segments_bytes(g->dp, seg, nseg, g->S, 4, 1, &ag_s, &ag_r);
    g->stats.fp32_ring_bytes += (double)(ring_s + ag_s);
    if (k->n == 0) { return; }
    grad_compress_move(g, k, g->stage, 0, 1, 0, N);
    CommP2P* ops = (CommP2P*)calloc_check(4 * (size_t)N, sizeof(CommP2P), "compression transfers");
    int nops = 0;
    if (g->spec.kind == GRAD_COMPRESS_INT8) {
        for (int c = 0; c < N; c++) {
            size_t m = k->part[c + 1] - k->part[c];
            compress_quantize_int8(g->send_q + k->q0 + k->part[c], g->send_s + k->s0 + k->spart[c], g->stage + k->part[c],
                                   m, g->spec.stochastic, g->seed, g->step, (uint64_t)(k->q0 + k->part[c]));
            if (g->residual) { /* what was not sent: x - q*s */
                compress_dequantize_int8(g->stage + k->part[c], g->send_q + k->q0 + k->part[c],
                                         g->send_s + k->s0 + k->spart[c], m, -1.0f, 1);
            }
        }
        if (g->residual) { grad_compress_move(g, k, g->stage, 0, 2, 0, N); }
        size_t own = k->part[me + 1] - k->part[me], ob = grad_compress_blocks(own);
        for (int c = 0; c < N; c++) {
            if (c == me) { continue; }
            size_t m = k->part[c + 1] - k->part[c];
            CommP2P sq = {1, c, g->send_q + k->q0 + k->part[c], COMM_U8, m, 4 * b};
            CommP2P ss = {1, c, g->send_s + k->s0 + k->spart[c], COMM_F32, grad_compress_blocks(m), 4 * b + 1};
            CommP2P rq = {0, c, g->recv_q + k->rq0 + (size_t)c * own, COMM_U8, own, 4 * b};
            CommP2P rs = {0, c, g->recv_s + k->rs0 + (size_t)c * ob, COMM_F32, ob, 4 * b + 1};
            grad_compress_pair(ops, &nops, me, c, sq, ss, rq, rs);
        }
    } else {
        compress_topk_select(g->send_idx + k->t0, g->send_val + k->t0, g->stage, k->n, k->k, g->topk_scratch);
    }
    if (g->spec.kind == GRAD_COMPRESS_TOPK) {
        if (g->residual) {
            compress_zero_at(g->stage, g->send_idx + k->t0, k->k);
            grad_compress_move(g, k, g->stage, 0, 2, 0, N);
        }
        size_t total = g->b[g->nb - 1].t0 + g->b[g->nb - 1].k;
        for (int c = 0; c < N; c++) {
            if (c == me) { continue; }
            CommP2P si = {1, c, g->send_idx + k->t0, COMM_I32, k->k, 4 * b};
            CommP2P sv = {1, c, g->send_val + k->t0, COMM_F32, k->k, 4 * b + 1};
            CommP2P ri = {0, c, g->recv_idx + (size_t)c * total + k->t0, COMM_I32, k->k, 4 * b};
            CommP2P rv = {0, c, g->recv_val + (size_t)c * total + k->t0, COMM_F32, k->k, 4 * b + 1};
            grad_compress_pair(ops, &nops, me, c, si, sv, ri, rv);
        }
    }
    grad_compress_exchange(g, ops, nops);
    free(ops);
}

/* ---------------------------------------------------------------- decoding, after the last bucket */

/* ZeRO-0 INT8: each owner quantises its part of the sum once more and sends it to every rank; every rank decodes
 * all parts (its own from the same bytes) into the gradient buffer */
static inline void grad_compress_int8_all_gather(GradCompressor* g, int b, GradCompressBucket* k) {
    int N = g->dp->world, me = g->dp->rank;
    size_t own = k->part[me + 1] - k->part[me];
    /* the own part's send slot is free again (its reduce-scatter is done): the requantised sum goes there */
    compress_quantize_int8(g->send_q + k->q0 + k->part[me], g->send_s + k->s0 + k->spart[me], g->sum, own,
                           g->spec.stochastic, g->seed, g->step, (uint64_t)(g->P + k->q0 + k->part[me]));
    CommP2P* ops = (CommP2P*)calloc_check(4 * (size_t)N, sizeof(CommP2P), "compression transfers");
    int nops = 0;
    for (int c = 0; c < N; c++) {
        if (c == me) { continue; }
        size_t m = k->part[c + 1] - k->part[c];
        CommP2P sq = {1, c, g->send_q + k->q0 + k->part[me], COMM_U8, own, 4 * b + 2};
        CommP2P ss = {1, c, g->send_s + k->s0 + k->spart[me], COMM_F32, grad_compress_blocks(own), 4 * b + 3};
        CommP2P rq = {0, c, g->send_q + k->q0 + k->part[c], COMM_U8, m, 4 * b + 2};
        CommP2P rs = {0, c, g->send_s + k->s0 + k->spart[c], COMM_F32, grad_compress_blocks(m), 4 * b + 3};
        grad_compress_pair(ops, &nops, me, c, sq, ss, rq, rs);
    }
    grad_compress_exchange(g, ops, nops);
    free(ops);
    comm_join(g->dp);
    for (int c = 0; c < N; c++) {
        size_t m = k->part[c + 1] - k->part[c];
        compress_dequantize_int8(g->stage + k->part[c], g->send_q + k->q0 + k->part[c], g->send_s + k->s0 + k->spart[c],
                                 m, 1.0f, 0);
    }
    grad_compress_move(g, k, g->stage, 0, 0, 0, N);
}

/* After the last bucket of the step (its transfers posted): waits for them and writes the decoded gradients of
 * every bucket into the gradient buffer (ZeRO-1 INT8: the owned part; otherwise every element). */
static inline void grad_compress_finish(GradCompressor* g) {
    int N = g->dp->world, me = g->dp->rank, any = 0;
    for (int b = 0; b < g->nb; b++) { any |= g->b[b].used; }
    if (!any) { return; }
    comm_join(g->dp);
    size_t total = g->b[g->nb - 1].t0 + g->b[g->nb - 1].k;
    for (int b = 0; b < g->nb; b++) {
        GradCompressBucket* k = &g->b[b];
        if (!k->used || k->n == 0) { k->used = 0; continue; }
        k->used = 0;
        if (g->spec.kind == GRAD_COMPRESS_INT8) {
            size_t own = k->part[me + 1] - k->part[me], ob = grad_compress_blocks(own);
            for (int r = 0; r < N; r++) { /* sum of the N contributions in rank order */
                const int8_t* q = r == me ? g->send_q + k->q0 + k->part[me] : g->recv_q + k->rq0 + (size_t)r * own;
                const float* s = r == me ? g->send_s + k->s0 + k->spart[me] : g->recv_s + k->rs0 + (size_t)r * ob;
                compress_dequantize_int8(g->sum, q, s, own, 1.0f, r > 0);
            }
            if (g->zero_stage == 1) { grad_compress_move(g, k, g->sum, k->part[me], 0, me, me + 1); }
            else { grad_compress_int8_all_gather(g, b, k); }
        } else {
            dev_memset(g->sum, 0, k->n * sizeof(float));
            for (int r = 0; r < N; r++) {
                const uint32_t* idx = r == me ? g->send_idx + k->t0 : g->recv_idx + (size_t)r * total + k->t0;
                const float* val = r == me ? g->send_val + k->t0 : g->recv_val + (size_t)r * total + k->t0;
                compress_scatter_add(g->sum, idx, val, k->k);
            }
            grad_compress_move(g, k, g->sum, 0, 0, 0, N);
        }
    }
}

/* the step's figures, then zeroed for the next step */
static inline GradCompressStats grad_compress_take_stats(GradCompressor* g) {
    GradCompressStats s = g->stats;
    memset(&g->stats, 0, sizeof(g->stats));
    return s;
}

/* ---------------------------------------------------------------- residuals in checkpoints */

/* writes this rank's residual of parameter group `group` (0; 1: the expert group under --ep) for checkpoint `step`
 * atomically (path.tmp, fsync, rename, directory fsync); no-op without one; a write error removes the temp file and
 * exits with one line */
static inline void grad_compress_write_residual(const GradCompressor* g, const char* dir, int step, int rank,
                                                int group) {
    if (!g->residual) { return; }
    char path[1024];
    checkpoint_residual_path(path, sizeof(path), dir, step, rank, group);
    int h[FILE_HEADER_INTS];
    memset(h, 0, sizeof(h));
    h[0] = GRAD_RESIDUAL_MAGIC; h[1] = GRAD_RESIDUAL_VERSION;
    h[2] = step; h[3] = rank; h[4] = g->dp->world; h[5] = (int)g->spec.kind;
    h[6] = (int)(uint32_t)(g->P & 0xffffffffu); h[7] = (int)(uint32_t)((uint64_t)g->P >> 32);
    float* host = (float*)malloc_check(g->P * sizeof(float), "residual download");
    dev_memcpy_d2h(host, g->residual, g->P * sizeof(float));
    AtomicFile af; /* temp file, fsync, rename, fsync of the directory (llmc/utils.h) */
    atomic_file_open(&af, path);
    atomic_file_write(&af, h, sizeof(int), FILE_HEADER_INTS);
    atomic_file_write(&af, host, sizeof(float), g->P);
    atomic_file_commit(&af);
    free(host);
}

/* Reads this rank's residual of parameter group `group` of checkpoint `step` when this run keeps residuals. A missing file (the checkpoint was
 * written without error feedback) leaves zeros and returns 0; a file of another data-parallel size, rank, kind or
 * parameter count exits with one line; returns 1 when read. */
static inline int grad_compress_read_residual(GradCompressor* g, const char* dir, int step, int rank, int group) {
    if (!g->residual) { return 0; }
    char path[1024];
    checkpoint_residual_path(path, sizeof(path), dir, step, rank, group);
    if (!file_exists(path)) { return 0; }
    int h[FILE_HEADER_INTS];
    FILE* f = checkpoint_open_checked(path, h, GRAD_RESIDUAL_MAGIC, GRAD_RESIDUAL_VERSION, GRAD_RESIDUAL_VERSION,
                                      "error-feedback residual file", "written by --grad-compress with --grad-compress-ef 1");
    uint64_t P = (uint64_t)(uint32_t)h[6] | ((uint64_t)(uint32_t)h[7] << 32);
    if (h[4] != g->dp->world || h[3] != rank || P != (uint64_t)g->P || h[2] != step) {
        FATAL_ALL("cannot resume '%s' with --grad-compress error feedback: the residual belongs to rank %d of %d "
              "data-parallel processes (step %d, %llu parameters), this is rank %d of %d (step %d, %zu parameters); "
              "resume on %d processes, or with --grad-compress-ef 0 or --grad-compress none to drop the residuals",
              path, h[3], h[4], h[2], (unsigned long long)P, rank, g->dp->world, step, g->P, h[4]);
    }
    if (h[5] != (int)g->spec.kind) {
        printf("resume: the residuals of '%s' came from another --grad-compress kind; they are added as they are\n", path);
    }
    float* host = (float*)malloc_check(g->P * sizeof(float), "residual upload");
    if (fread(host, sizeof(float), g->P, f) != g->P) {
        FATAL("error-feedback residual file '%s' is truncated: expected %zu fp32 values after the header", path, g->P);
    }
    fclose(f);
    dev_memcpy_h2d(g->residual, host, g->P * sizeof(float));
    free(host);
    return 1;
}

#endif /* LLMC_GRAD_COMPRESS_H */
