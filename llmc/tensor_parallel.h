/*
 * llmc/tensor_parallel.h -- tensor parallelism as the model sees it (Megatron-LM: Shoeybi et al. 2019, "Megatron-LM:
 * Training Multi-Billion Parameter Language Models Using Model Parallelism"; sequence parallelism: Korthikanti et al.
 * 2022, "Reducing Activation Recomputation in Large Transformer Models"). llmc/README.md, "Where the next dimensions
 * plug in".
 *
 * A model instance is rank `rank` of the `size` ranks of a tensor-parallel group. The group's collectives are the
 * caller's (the trainer wires them to the process grid's tp communicator), so the model needs no communicator:
 * in-place sums and gathers on device buffers; when a call returns, device work queued afterwards sees its result
 * (the host need not wait). With size 1 nothing is ever called.
 *
 * The two conjugate operators of a transformer block (Shoeybi et al., section 3, "f" and "g"):
 *   f, at the entry of a tensor-parallel region (before a column-parallel GEMM):
 *        forward  identity               (sequence parallel: all-gather the rows)
 *        backward all-reduce             (sequence parallel: reduce-scatter the rows)
 *   g, at its exit (after a row-parallel GEMM, whose outputs are partial sums over the ranks):
 *        forward  all-reduce             (sequence parallel: reduce-scatter the rows)
 *        backward identity               (sequence parallel: all-gather the rows)
 * So there are two operations: tp_reduce (f backward, g forward) and tp_gather (f forward, g backward).
 * Sequence parallelism splits the N = B*T rows of the LayerNorm and residual regions into `size` contiguous blocks
 * of N/size rows (rank r holds rows [r*N/size, (r+1)*N/size)): LayerNorm, the residual add and (future) dropout act
 * on each row alone, so any split of the rows works; the all-gather + reduce-scatter move the same bytes as the
 * all-reduce they replace.
 * Shapes: N rows of C channels, floatX, device. Errors: none here (the collectives check their own calls).
 */
#ifndef LLMC_TENSOR_PARALLEL_H
#define LLMC_TENSOR_PARALLEL_H

#include <stddef.h>
#include <string.h>

#include "llmc/backend.h"

typedef struct {
    int rank, size;              /* this rank in the tensor-parallel group, and the group size (1: none) */
    int sequence_parallel;       /* 1: the LayerNorm/residual regions hold N/size rows */
    void* ctx;                   /* passed to the collectives */
    void (*all_reduce)(void* ctx, floatX* buf, size_t count);          /* sum of buf(count) over the ranks */
    void (*all_reduce_f32)(void* ctx, float* buf, size_t count);       /* the same for fp32 */
    void (*all_gather)(void* ctx, floatX* buf, size_t count);          /* rank r's buf[r*count, +count) to all */
    void (*reduce_scatter)(void* ctx, floatX* buf, size_t count);      /* sum of buf(size*count); rank r keeps
                                                                          block r, buf[r*count, +count) */
} TensorParallel;

/* no tensor parallelism: one rank, nothing to call */
static inline TensorParallel tensor_parallel_none(void) {
    TensorParallel tp;
    memset(&tp, 0, sizeof(tp));
    tp.size = 1;
    return tp;
}

/* rows of the LayerNorm/residual regions this rank holds: N, or N/size with sequence parallelism */
static inline int tp_rows(const TensorParallel* tp, int N) {
    return tp->size > 1 && tp->sequence_parallel ? N / tp->size : N;
}

/* g forward / f backward: the (N,C) partial sums in `buf` (every rank's contribution) become the sum, in place:
 * all rows (all-reduce), or with sequence parallelism this rank's rows (reduce-scatter). Returns where this
 * rank's rows of the sum start (buf, or buf + rank*N/size*C). */
static inline floatX* tp_reduce(const TensorParallel* tp, floatX* buf, int N, int C) {
    if (tp->size == 1) { return buf; }
    if (!tp->sequence_parallel) {
        tp->all_reduce(tp->ctx, buf, (size_t)N * C);
        return buf;
    }
    size_t block = (size_t)tp_rows(tp, N) * C;
    tp->reduce_scatter(tp->ctx, buf, block);
    return buf + (size_t)tp->rank * block;
}

/* f forward / g backward: the full (N,C) rows for a tensor-parallel region from this rank's rows `local`: `local`
 * itself when every rank holds all rows, else (sequence parallelism) `local` copied into block `rank` of `full`
 * (N,C) and all-gathered there. Returns the (N,C) rows. */
static inline floatX* tp_gather(const TensorParallel* tp, floatX* local, floatX* full, int N, int C) {
    if (tp->size == 1 || !tp->sequence_parallel) { return local; }
    size_t block = (size_t)tp_rows(tp, N) * C;
    floatX* mine = full + (size_t)tp->rank * block;
    if (mine != local) { dev_memcpy_d2d(mine, local, block * sizeof(floatX)); }
    tp->all_gather(tp->ctx, full, block);
    return full;
}

#endif /* LLMC_TENSOR_PARALLEL_H */
