/*
 * llmc/comm_types.h -- what the collective interface (llmc/comm.h) and its transports (llmc/comm_mpi.h,
 * llmc/comm_nccl.h) share: element types (CommDtype, comm_dtype_size bytes each), segment lists (CommSegment:
 * pieces of one flat index space), the transfers of a point-to-point batch (CommP2P), byte counters, the chunk of
 * a range under the owned-shard layout, and the one-line fatal error of a failed collective call. llmc/README.md,
 * "Collectives and the process grid".
 * Errors: comm_fail_at prints "error: <what> failed: <why>  [file:line]" and ends the whole job.
 * Header-only: static inline functions, no non-static globals.
 */
#ifndef LLMC_COMM_TYPES_H
#define LLMC_COMM_TYPES_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef USE_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* the C API only: OpenMPI's deprecated C++ bindings do not compile warning-free */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

typedef enum { COMM_F32 = 0, COMM_F64, COMM_I32, COMM_BF16, COMM_F16, COMM_U8 } CommDtype;

/* bytes per element of t */
static inline size_t comm_dtype_size(CommDtype t) {
    switch (t) {
    case COMM_F32: return 4;
    case COMM_F64: return 8;
    case COMM_I32: return 4;
    case COMM_BF16: return 2;
    case COMM_F16: return 2;
    default: return 1;
    }
}

#define COMM_FENCES 7 /* the trainer uses 0, 1 (ZeRO-2 layer slots), 2 (the embedding bucket), 3-5 (ZeRO-3 parameter gathers),
                       * 6 (the optimizer offload's gradient stream, llmc/zero.h) */

/* one piece of a flat virtual buffer: ptr[k] is element begin+k, for k in [0, end-begin) (see the header
 * comment, "Segment lists") */
typedef struct {
    void* ptr;
    size_t begin, end;
} CommSegment;

/* one transfer of a batch (comm_p2p_batch in comm.h): send = 1 sends `count` elements of type t from buf to rank
 * `peer` of the group, send = 0 receives `count` elements into buf from rank `peer`. buf: device memory (host
 * memory on the CPU build). tag >= 0 tells apart the messages between the same pair in the same direction (the
 * MPI transport matches on it; NCCL matches in posting order, so both sides post a pair's transfers in the same
 * order, see comm_p2p_batch). */
typedef struct {
    int send;
    int peer;
    void* buf;
    CommDtype t;
    size_t count;
    int tag;
} CommP2P;

typedef struct {
    unsigned long long bytes_sent;  /* payload bytes this rank sent */
    unsigned long long bytes_recv;  /* payload bytes this rank received */
    unsigned long long calls;       /* collective calls */
} CommCounters;

/* chunk c of [begin,end) under shards of `shard` elements: [*lo, *hi) (lo == hi == begin when empty) */
static inline void comm_chunk(size_t begin, size_t end, size_t shard, int c, size_t* lo, size_t* hi) {
    size_t a = (size_t)c * shard, b = a + shard;
    *lo = a > begin ? a : begin;
    *hi = b < end ? b : end;
    if (*lo >= *hi) { *lo = *hi = begin; } /* empty: anchored at begin, so lo - begin is never negative */
}

/* prints "error: <what> failed: <why>  [file:line]" and ends the job: MPI_Abort of every rank when MPI runs
 * (so mpirun ends the other processes too), else exit(EXIT_FAILURE). Never returns. */
static inline void comm_fail_at(const char* what, const char* why, const char* file, int line) {
    fflush(stdout);
    fprintf(stderr, "error: %s failed: %s  [%s:%d]\n", what, why, file, line);
    fflush(stderr);
#ifdef USE_MPI
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) { MPI_Abort(MPI_COMM_WORLD, 1); }
#endif
    exit(EXIT_FAILURE);
}

#endif /* LLMC_COMM_TYPES_H */
