/*
 * llmc/comm.h -- the one collective interface of the trainer (DESIGN.md section 3).
 *
 * Backends, chosen at compile time:
 *   nvcc (CUDA build)          NCCL on device buffers, on a dedicated communication stream.
 *                              Bootstrap: MPI when built with -DUSE_MPI (mpirun / srun + PMIx), else the
 *                              environment (LLMC_RANK/LLMC_WORLD_SIZE/LLMC_LOCAL_RANK, or SLURM_PROCID/
 *                              SLURM_NTASKS/SLURM_LOCALID) plus the NCCL unique id exchanged through a shared
 *                              filesystem ("fs:DIR") or TCP ("tcp:HOST:PORT"), see comm_init.
 *   gcc -DUSE_MPI (CPU build)  MPI (OpenMPI) on host buffers. The reductions are our own ring algorithms
 *                              over MPI_Sendrecv (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce
 *                              algorithms for clusters of workstations"; the same ring NCCL uses), so the
 *                              summation order is fixed and the byte counters measure what is really sent.
 *   gcc without USE_MPI        a world of one process; every collective is a no-op (copies where needed).
 *   nvcc -DLLMC_NO_NCCL        (make USE_NCCL=0) one GPU, one process, no collectives (as cc without MPI);
 *                              a process group asked for by the environment is refused with one line.
 *   c++ -DLLMC_BACKEND_CUDA -DUSE_MPI   the CUDA backend built by a host compiler (tests): the NCCL code path
 *                              with whatever <nccl.h> the include path provides.
 *
 * Buffers: "device" pointers (on the CPU build device memory is host memory). Element types: CommDtype.
 * Reductions are sums. On the MPI backend only F32, F64 and I32 can be reduced (BF16/F16 need the GPU).
 *
 * Collectives over "owned" ranges (the ZeRO layout). A buffer of elements [0, padded) is cut into
 * world contiguous shards of `shard` elements; rank r owns [r*shard, (r+1)*shard). For a sub-range
 * [begin, end) chunk c is [max(begin, c*shard), min(end, (c+1)*shard)) (possibly empty):
 *   comm_reduce_scatter_owned   after it, every element of [begin,end) that rank r owns holds the sum over
 *                               ranks; elements it does not own hold partial sums (undefined). In place.
 *   comm_all_gather_owned       after it, every element of [begin,end) holds its owner's value. In place.
 * Ring costs per rank (count = end-begin elements of `es` bytes, chunks c_0..c_{N-1}):
 *   reduce-scatter sends and receives sum_{c != own} |c_c| * es = (N-1)/N * count * es for equal chunks,
 *   all-gather the same, all-reduce (= reduce-scatter + all-gather) 2(N-1)/N * count * es.
 * On NCCL, equal-chunk calls map to ncclReduceScatter/ncclAllGather in place; uneven ones to grouped
 * ncclReduce/ncclBroadcast per chunk (root = owner); comm_all_reduce to one ncclAllReduce; the counters then
 * hold the same ring-model numbers (NCCL does not report bytes), documented as nominal. NCCL runs
 * collectives in a world of one too (so one GPU exercises the NCCL path); MPI/single skip them.
 *
 * Segment lists (gradient buckets). A bucket is several pieces of one flat virtual buffer that need not be
 * contiguous in memory: CommSegment {ptr, begin, end} says that ptr[k] is element begin+k, for the range
 * [begin, end). comm_reduce_scatter_segments / comm_all_gather_segments / comm_all_reduce_segments run one
 * collective over all pieces of a bucket: chunk ownership follows the global index (as above), so every
 * element is summed in the same ring order as by a single call over the whole buffer (bucketed and
 * unbucketed reductions agree bit for bit). MPI: one ring pass whose messages pack the pieces of every
 * segment; NCCL: one ncclGroupStart/End of per-segment calls. Bytes: the sum of the per-segment ring costs.
 *
 * Fences (GPU): comm_fence_record(c, k) marks the collectives issued so far; comm_fence_wait(c, k) makes
 * the compute stream wait for that mark without blocking the host (double-buffered gradient buckets:
 * a buffer is reused only after its reduction finished). k < COMM_FENCES. No-ops on the CPU build.
 *
 * Counters: every call adds its payload bytes sent/received by this rank to comm->counters
 * (comm_counters_reset starts a new interval, e.g. one optimizer step).
 *
 * GPU ordering: a collective first makes the communication stream wait for the work queued so far on the
 * compute stream (event), then runs on the communication stream; comm_join() makes the compute stream wait
 * for every collective issued so far. Backward can therefore continue on the compute stream while earlier
 * buckets are reduced (overlap). On the CPU build both are no-ops and collectives are synchronous.
 *
 * Errors: every MPI/NCCL/CUDA return code is checked by COMM_MPI_CHECK / COMM_NCCL_CHECK / COMM_CUDA_CHECK,
 * which print one line "error: <call> failed: <reason>  [file:line]" and abort the whole job
 * (MPI_Abort / ncclCommAbort + exit(1)). A peer that dies: under mpirun the runtime kills the remaining
 * ranks (MPI_ERRORS_ARE_FATAL semantics); on NCCL comm_join polls ncclCommGetAsyncError and aborts the
 * communicator after comm->timeout_s seconds without progress, and so does every host wait of the CUDA
 * backend (comm_init_device installs comm_watchdog with cuda_set_wait_watchdog).
 *
 * Header-only: static inline functions, no non-static globals. Include after llmc/backend.h on CUDA builds
 * (uses main_stream()).
 */
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netdb.h>
#include "llmc/utils.h"

#ifdef USE_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* the C API only: OpenMPI's deprecated C++ bindings do not compile warning-free */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif
#if defined(LLMC_NO_NCCL) && defined(USE_MPI) && (defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA))
#error "USE_NCCL=0 builds one process on one GPU: it cannot be combined with CUDA_MPI=1 (MPI's rings work on host memory)"
#endif
#if (defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)) && !defined(LLMC_NO_NCCL)
#define COMM_HAVE_NCCL 1
#include <cuda_runtime.h>
#include <nccl.h>
#endif

/* ---------------------------------------------------------------- types */

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

#define COMM_FENCES 3 /* the trainer uses 0, 1 (ZeRO-2 layer slots) and 2 (the embedding bucket) */

/* one piece of a flat virtual buffer: ptr[k] is element begin+k, for k in [0, end-begin) (see the header
 * comment, "Segment lists") */
typedef struct {
    void* ptr;
    size_t begin, end;
} CommSegment;

typedef struct {
    unsigned long long bytes_sent;  /* payload bytes this rank sent */
    unsigned long long bytes_recv;  /* payload bytes this rank received */
    unsigned long long calls;       /* collective calls */
} CommCounters;

typedef struct {
    int rank, world;           /* this process in the group, group size */
    int local_rank;            /* rank on this node (selects the GPU) */
    const char* backend;       /* "single", "mpi" or "nccl" */
    int owns_mpi;              /* 1 if comm_init called MPI_Init (comm_finalize calls MPI_Finalize) */
    int is_subgroup;
    double timeout_s;          /* NCCL watchdog: seconds without progress before aborting */
    CommCounters counters;     /* since the last comm_counters_reset */
    CommCounters total;        /* since comm_init */
    void* tmp;                 /* host receive buffer for the MPI ring */
    size_t tmp_bytes;
#ifdef USE_MPI
    MPI_Comm mpi;
#endif
#ifdef COMM_HAVE_NCCL
    ncclComm_t nccl;
    cudaStream_t stream;       /* communication stream */
    cudaEvent_t ev_compute;    /* recorded on the compute stream before a collective */
    cudaEvent_t ev_comm;       /* recorded on the communication stream after a collective */
    cudaEvent_t ev_fence[COMM_FENCES]; /* marks, see comm_fence_record */
    double* dscratch;          /* (64) device doubles for comm_all_reduce_host_f64 */
#endif
} Comm;

/* ---------------------------------------------------------------- error checks */

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

#ifdef USE_MPI
static inline void comm_mpi_check_at(int rc, const char* what, const char* file, int line) {
    if (rc == MPI_SUCCESS) { return; }
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    comm_fail_at(what, msg, file, line);
}
#define COMM_MPI_CHECK(call) comm_mpi_check_at((call), #call, __FILE__, __LINE__)
#endif

#ifdef COMM_HAVE_NCCL
static inline void comm_nccl_check_at(ncclResult_t rc, const char* what, const char* file, int line) {
    if (rc == ncclSuccess || rc == ncclInProgress) { return; }
    comm_fail_at(what, ncclGetErrorString(rc), file, line);
}
static inline void comm_cuda_check_at(cudaError_t rc, const char* what, const char* file, int line) {
    if (rc == cudaSuccess) { return; }
    comm_fail_at(what, cudaGetErrorString(rc), file, line);
}
#define COMM_NCCL_CHECK(call) comm_nccl_check_at((call), #call, __FILE__, __LINE__)
#define COMM_CUDA_CHECK(call) comm_cuda_check_at((call), #call, __FILE__, __LINE__)
#endif

/* ---------------------------------------------------------------- counters */

static inline void comm_count(Comm* c, size_t sent, size_t recv) {
    c->counters.bytes_sent += sent; c->counters.bytes_recv += recv; c->counters.calls++;
    c->total.bytes_sent += sent; c->total.bytes_recv += recv; c->total.calls++;
}
static inline void comm_counters_reset(Comm* c) { memset(&c->counters, 0, sizeof(c->counters)); }

/* chunk c of [begin,end) under shards of `shard` elements: [*lo, *hi) (lo == hi == begin when empty) */
static inline void comm_chunk(size_t begin, size_t end, size_t shard, int c, size_t* lo, size_t* hi) {
    size_t a = (size_t)c * shard, b = a + shard;
    *lo = a > begin ? a : begin;
    *hi = b < end ? b : end;
    if (*lo >= *hi) { *lo = *hi = begin; } /* empty: anchored at begin, so lo - begin is never negative */
}

/* ring-model bytes one rank sends/receives in a reduce-scatter or all-gather over owned chunks:
 * rank r sends every chunk but its own (reduce-scatter) / but chunk r+1's (all-gather ring receive side);
 * both equal count - own for reduce-scatter; computed exactly by following the ring schedule. */
static inline void comm_ring_bytes(const Comm* c, size_t begin, size_t end, size_t shard, size_t es, int gather,
                                   size_t* sent, size_t* recv) {
    int N = c->world, r = c->rank;
    size_t s = 0, v = 0, lo, hi;
    for (int k = 0; k + 1 < N; k++) {
        int sc = gather ? ((r - k) % N + N) % N : ((r - k - 1) % N + N) % N;
        int rc = gather ? ((r - k - 1) % N + N) % N : ((r - k - 2) % N + 2 * N) % N;
        comm_chunk(begin, end, shard, sc, &lo, &hi); s += hi - lo;
        comm_chunk(begin, end, shard, rc, &lo, &hi); v += hi - lo;
    }
    *sent = s * es; *recv = v * es;
}

/* ---------------------------------------------------------------- MPI ring (host buffers) */

#ifdef USE_MPI
static inline MPI_Datatype comm_mpi_type(CommDtype t) {
    switch (t) {
    case COMM_F32: return MPI_FLOAT;
    case COMM_F64: return MPI_DOUBLE;
    case COMM_I32: return MPI_INT;
    default: return MPI_BYTE;
    }
}

static inline void comm_ensure_tmp(Comm* c, size_t bytes) {
    if (bytes <= c->tmp_bytes) { return; }
    free(c->tmp);
    c->tmp = malloc_check(bytes, "comm ring receive buffer");
    c->tmp_bytes = bytes;
}

/* MPI_Sendrecv split into pieces of at most 2^28 elements (MPI counts are int) */
#define COMM_MPI_PIECE ((size_t)1 << 28)
static inline void comm_mpi_sendrecv(Comm* c, const void* sbuf, size_t scount, void* rbuf, size_t rcount,
                                     CommDtype t, int to, int from) {
    size_t es = comm_dtype_size(t);
    MPI_Datatype mt = comm_mpi_type(t);
    if (mt == MPI_BYTE) { scount *= es; rcount *= es; es = 1; }
    size_t done_s = 0, done_r = 0;
    do {
        size_t ns = scount - done_s < COMM_MPI_PIECE ? scount - done_s : COMM_MPI_PIECE;
        size_t nr = rcount - done_r < COMM_MPI_PIECE ? rcount - done_r : COMM_MPI_PIECE;
        COMM_MPI_CHECK(MPI_Sendrecv((const char*)sbuf + done_s * es, (int)ns, mt, to, 7, (char*)rbuf + done_r * es,
                                    (int)nr, mt, from, 7, c->mpi, MPI_STATUS_IGNORE));
        done_s += ns; done_r += nr;
    } while (done_s < scount || done_r < rcount);
}

/* dst[i] += src[i] for n elements of type t (F32, F64, I32); fixed order, so results are deterministic */
static inline void comm_add_into(void* dst, const void* src, size_t n, CommDtype t) {
    if (t == COMM_F32) {
        float* d = (float*)dst; const float* s = (const float*)src;
        for (size_t i = 0; i < n; i++) { d[i] += s[i]; }
    } else if (t == COMM_F64) {
        double* d = (double*)dst; const double* s = (const double*)src;
        for (size_t i = 0; i < n; i++) { d[i] += s[i]; }
    } else if (t == COMM_I32) {
        int* d = (int*)dst; const int* s = (const int*)src;
        for (size_t i = 0; i < n; i++) { d[i] += s[i]; }
    } else {
        FATAL("comm: the MPI backend reduces only fp32, fp64 and int32 (got dtype %d); bf16/fp16 need NCCL", (int)t);
    }
}

/* one ring pass over the segments: reduce-scatter (gather = 0: each received piece is added into place)
 * or all-gather (gather = 1: copied into place). At ring step k this rank sends its pieces of chunk sc and
 * receives the pieces of chunk rc from the left neighbour; with several segments the pieces travel packed
 * in one message (one segment: sent and received in place, no packing). */
static inline void comm_mpi_ring_segments(Comm* c, const CommSegment* seg, int nseg, CommDtype t, size_t shard,
                                          int gather) {
    int N = c->world, r = c->rank;
    size_t es = comm_dtype_size(t), lo, hi;
    int right = (r + 1) % N, left = (r - 1 + N) % N;
    int direct = nseg == 1;
    size_t piece = shard ? shard : 1;
    if (!direct) {
        comm_ensure_tmp(c, 2 * piece * es); /* [send pack | receive] */
    } else if (!gather) {
        comm_ensure_tmp(c, piece * es);     /* receive */
    }
    char* sbuf = (char*)c->tmp;
    char* rbuf = direct ? (char*)c->tmp : (char*)c->tmp + piece * es;
    for (int k = 0; k + 1 < N; k++) {
        int sc = gather ? ((r - k) % N + N) % N : ((r - k - 1) % N + N) % N;
        int rc = gather ? ((r - k - 1) % N + N) % N : ((r - k - 2) % N + 2 * N) % N;
        if (direct) {
            char* base = (char*)seg[0].ptr;
            size_t lo_s, hi_s;
            comm_chunk(seg[0].begin, seg[0].end, shard, sc, &lo_s, &hi_s);
            comm_chunk(seg[0].begin, seg[0].end, shard, rc, &lo, &hi);
            char* src = base + (lo_s - seg[0].begin) * es;
            char* dst = base + (lo - seg[0].begin) * es;
            comm_mpi_sendrecv(c, src, hi_s - lo_s, gather ? dst : rbuf, hi - lo, t, right, left);
            if (!gather) { comm_add_into(dst, rbuf, hi - lo, t); }
            continue;
        }
        size_t ns = 0, nr = 0;
        for (int i = 0; i < nseg; i++) {
            comm_chunk(seg[i].begin, seg[i].end, shard, sc, &lo, &hi);
            memcpy(sbuf + ns * es, (char*)seg[i].ptr + (lo - seg[i].begin) * es, (hi - lo) * es);
            ns += hi - lo;
            comm_chunk(seg[i].begin, seg[i].end, shard, rc, &lo, &hi);
            nr += hi - lo;
        }
        comm_mpi_sendrecv(c, sbuf, ns, rbuf, nr, t, right, left);
        size_t off = 0;
        for (int i = 0; i < nseg; i++) {
            comm_chunk(seg[i].begin, seg[i].end, shard, rc, &lo, &hi);
            char* dst = (char*)seg[i].ptr + (lo - seg[i].begin) * es;
            if (gather) {
                memcpy(dst, rbuf + off * es, (hi - lo) * es);
            } else {
                comm_add_into(dst, rbuf + off * es, hi - lo, t);
            }
            off += hi - lo;
        }
    }
}
#endif

/* ---------------------------------------------------------------- NCCL helpers */

#ifdef COMM_HAVE_NCCL
static inline ncclDataType_t comm_nccl_type(CommDtype t) {
    switch (t) {
    case COMM_F32: return ncclFloat32;
    case COMM_F64: return ncclFloat64;
    case COMM_I32: return ncclInt32;
    case COMM_BF16: return ncclBfloat16;
    case COMM_F16: return ncclFloat16;
    default: return ncclUint8;
    }
}
/* the communication stream waits for everything queued so far on the compute stream */
static inline void comm_nccl_begin(Comm* c) {
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_compute, main_stream()));
    COMM_CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->ev_compute, 0));
}
#endif

/* ---------------------------------------------------------------- collectives */

/* whether collectives move data: always in a world of several processes; in a world of one only on NCCL, and
 * only once comm_init_device started the communicator (the trainer does so for ZeRO-1/2, so that a single GPU
 * exercises the NCCL path; a one-GPU ZeRO-0 run never starts NCCL). MPI and the single-process backend skip
 * them in a world of one. */
static inline int comm_collectives_on(const Comm* c) {
#ifdef COMM_HAVE_NCCL
    return c->world > 1 || c->nccl != NULL;
#else
    return c->world > 1;
#endif
}

/* ring-model bytes of a segment list (sum over segments of comm_ring_bytes) */
static inline void comm_segments_bytes(const Comm* c, const CommSegment* seg, int nseg, size_t shard, size_t es,
                                       int gather, size_t* sent, size_t* recv) {
    *sent = 0; *recv = 0;
    for (int i = 0; i < nseg; i++) {
        size_t s1, r1;
        comm_ring_bytes(c, seg[i].begin, seg[i].end, shard, es, gather, &s1, &r1);
        *sent += s1; *recv += r1;
    }
}

/* reduce-scatter (gather = 0) or all-gather (gather = 1) over a segment list; see the two wrappers below */
static inline void comm_owned_segments(Comm* c, const CommSegment* seg, int nseg, CommDtype t, size_t shard, int gather) {
    if (nseg <= 0 || !comm_collectives_on(c)) { return; }
    size_t sent, recv, es = comm_dtype_size(t);
    comm_segments_bytes(c, seg, nseg, shard, es, gather, &sent, &recv);
    if (sent + recv == 0 && c->world > 1) { return; }
    comm_count(c, sent, recv);
#if defined(COMM_HAVE_NCCL)
    comm_nccl_begin(c);
    if (nseg == 1 && seg[0].begin == 0 && seg[0].end == shard * (size_t)c->world) {
        /* the whole padded buffer in equal chunks: NCCL's own collective, in place */
        char* b = (char*)seg[0].ptr;
        char* own = b + (size_t)c->rank * shard * es;
        if (gather) {
            COMM_NCCL_CHECK(ncclAllGather(own, b, shard, comm_nccl_type(t), c->nccl, c->stream));
        } else {
            COMM_NCCL_CHECK(ncclReduceScatter(b, own, shard, comm_nccl_type(t), ncclSum, c->nccl, c->stream));
        }
    } else {
        /* uneven pieces: one reduce to / broadcast from the owner per non-empty chunk, all in one group */
        COMM_NCCL_CHECK(ncclGroupStart());
        for (int i = 0; i < nseg; i++) {
            for (int q = 0; q < c->world; q++) {
                size_t lo, hi;
                comm_chunk(seg[i].begin, seg[i].end, shard, q, &lo, &hi);
                if (hi == lo) { continue; }
                char* p = (char*)seg[i].ptr + (lo - seg[i].begin) * es;
                if (gather) {
                    COMM_NCCL_CHECK(ncclBroadcast(p, p, hi - lo, comm_nccl_type(t), q, c->nccl, c->stream));
                } else {
                    COMM_NCCL_CHECK(ncclReduce(p, p, hi - lo, comm_nccl_type(t), ncclSum, q, c->nccl, c->stream));
                }
            }
        }
        COMM_NCCL_CHECK(ncclGroupEnd());
    }
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
#elif defined(USE_MPI)
    comm_mpi_ring_segments(c, seg, nseg, t, shard, gather);
#else
    (void)t; (void)shard;
#endif
}

/* reduce-scatter over a segment list (see the header comment, "Segment lists" and "owned" ranges): after it,
 * every element of every segment that this rank owns (global index in [rank*shard, (rank+1)*shard)) holds
 * the sum over ranks; the other elements hold partial sums (undefined). In place. */
static inline void comm_reduce_scatter_segments(Comm* c, const CommSegment* seg, int nseg, CommDtype t, size_t shard) {
    comm_owned_segments(c, seg, nseg, t, shard, 0);
}

/* all-gather over a segment list: afterwards every element of every segment holds its owner's value */
static inline void comm_all_gather_segments(Comm* c, const CommSegment* seg, int nseg, CommDtype t, size_t shard) {
    comm_owned_segments(c, seg, nseg, t, shard, 1);
}

/* all-reduce over a segment list (a DDP gradient bucket): every element of every segment ends up holding
 * the sum over ranks. MPI: reduce-scatter + all-gather with chunks of `shard` (the ZeRO layout, so the sums
 * equal those of comm_reduce_scatter_segments bit for bit); NCCL: grouped ncclAllReduce per segment, counted
 * with the same ring model. */
static inline void comm_all_reduce_segments(Comm* c, const CommSegment* seg, int nseg, CommDtype t, size_t shard) {
#if defined(COMM_HAVE_NCCL)
    if (nseg <= 0 || !comm_collectives_on(c)) { return; }
    size_t s1, r1, s2, r2, es = comm_dtype_size(t);
    comm_segments_bytes(c, seg, nseg, shard, es, 0, &s1, &r1);
    comm_segments_bytes(c, seg, nseg, shard, es, 1, &s2, &r2);
    comm_count(c, s1 + s2, r1 + r2);
    comm_nccl_begin(c);
    COMM_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < nseg; i++) {
        if (seg[i].end > seg[i].begin) {
            COMM_NCCL_CHECK(ncclAllReduce(seg[i].ptr, seg[i].ptr, seg[i].end - seg[i].begin, comm_nccl_type(t), ncclSum,
                                          c->nccl, c->stream));
        }
    }
    COMM_NCCL_CHECK(ncclGroupEnd());
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
#else
    comm_reduce_scatter_segments(c, seg, nseg, t, shard);
    comm_all_gather_segments(c, seg, nseg, t, shard);
#endif
}

/* see the header comment ("owned" ranges). buf: device buffer of at least `end` elements of type t. */
static inline void comm_reduce_scatter_owned(Comm* c, void* buf, CommDtype t, size_t begin, size_t end, size_t shard) {
    if (end <= begin) { return; }
    CommSegment seg = {(char*)buf + begin * comm_dtype_size(t), begin, end};
    comm_reduce_scatter_segments(c, &seg, 1, t, shard);
}

/* see the header comment ("owned" ranges) */
static inline void comm_all_gather_owned(Comm* c, void* buf, CommDtype t, size_t begin, size_t end, size_t shard) {
    if (end <= begin) { return; }
    CommSegment seg = {(char*)buf + begin * comm_dtype_size(t), begin, end};
    comm_all_gather_segments(c, &seg, 1, t, shard);
}

/* shard size that splits n elements over the group: ceil(n / world) */
static inline size_t comm_shard_size(const Comm* c, size_t n) { return (n + (size_t)c->world - 1) / (size_t)c->world; }

/* sum over ranks of buf(count), result on every rank, in place: ring reduce-scatter + all-gather,
 * 2(N-1)/N * count * es bytes each way per rank */
static inline void comm_all_reduce(Comm* c, void* buf, CommDtype t, size_t count) {
    size_t shard = comm_shard_size(c, count);
#ifdef COMM_HAVE_NCCL
    /* one ncclAllReduce (NCCL picks ring or tree); counted with the ring model */
    if (count == 0 || !comm_collectives_on(c)) { return; }
    size_t s1, r1, s2, r2, es = comm_dtype_size(t);
    comm_ring_bytes(c, 0, count, shard, es, 0, &s1, &r1);
    comm_ring_bytes(c, 0, count, shard, es, 1, &s2, &r2);
    comm_count(c, s1 + s2, r1 + r2);
    comm_nccl_begin(c);
    COMM_NCCL_CHECK(ncclAllReduce(buf, buf, count, comm_nccl_type(t), ncclSum, c->nccl, c->stream));
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
#else
    comm_reduce_scatter_owned(c, buf, t, 0, count, shard);
    comm_all_gather_owned(c, buf, t, 0, count, shard);
#endif
}

/* equal-count reduce-scatter: buf holds world*count elements; afterwards rank r's block
 * buf[r*count, (r+1)*count) holds the sum (in place, as ncclReduceScatter with recvbuff = buf + r*count) */
static inline void comm_reduce_scatter(Comm* c, void* buf, CommDtype t, size_t count) {
    comm_reduce_scatter_owned(c, buf, t, 0, count * (size_t)c->world, count);
}

/* equal-count all-gather: rank r's block buf[r*count, (r+1)*count) is copied to every rank (in place) */
static inline void comm_all_gather(Comm* c, void* buf, CommDtype t, size_t count) {
    comm_all_gather_owned(c, buf, t, 0, count * (size_t)c->world, count);
}

#ifdef COMM_HAVE_NCCL
/* the NCCL watchdog (Comm* ctx): aborts the job, one error line, on an asynchronous NCCL error or when a wait
 * has lasted longer than timeout_s. Called by comm_join's polling loop and, through cuda_set_wait_watchdog,
 * by every host wait of the CUDA backend (a host wait can be stuck behind a collective, e.g. ZeRO-2's fence). */
static inline void comm_watchdog(void* ctx, double waited_s) {
    Comm* c = (Comm*)ctx;
    ncclResult_t async_err = ncclSuccess;
    COMM_NCCL_CHECK(ncclCommGetAsyncError(c->nccl, &async_err));
    if (async_err != ncclSuccess && async_err != ncclInProgress) {
        ncclCommAbort(c->nccl);
        comm_fail_at("NCCL collective (asynchronous error)", ncclGetErrorString(async_err), __FILE__, __LINE__);
    }
    if (waited_s > c->timeout_s) {
        ncclCommAbort(c->nccl);
        comm_fail_at("NCCL collective", "no progress within the timeout (--comm-timeout); a peer rank probably died",
                     __FILE__, __LINE__);
    }
}
#endif

/* makes later compute-stream work wait for every collective issued so far; on NCCL also the watchdog:
 * polls until the communication stream is idle, aborting the job (one error line) on an asynchronous
 * NCCL error or after timeout_s seconds without completion. */
static inline void comm_join(Comm* c) {
#ifdef COMM_HAVE_NCCL
    if (!c->nccl) { return; } /* NCCL not started: nothing was issued */
    time_t start = time(NULL);
    for (;;) {
        cudaError_t q = cudaEventQuery(c->ev_comm);
        if (q == cudaSuccess) { break; }
        if (q != cudaErrorNotReady) { COMM_CUDA_CHECK(q); }
        comm_watchdog(c, difftime(time(NULL), start));
        usleep(100);
    }
    COMM_CUDA_CHECK(cudaStreamWaitEvent(main_stream(), c->ev_comm, 0));
#else
    (void)c;
#endif
}

/* marks every collective issued so far as fence k (0 <= k < COMM_FENCES); see comm_fence_wait */
static inline void comm_fence_record(Comm* c, int k) {
#ifdef COMM_HAVE_NCCL
    if (c->nccl) { COMM_CUDA_CHECK(cudaEventRecord(c->ev_fence[k], c->stream)); }
#else
    (void)c; (void)k;
#endif
}

/* later compute-stream work waits for fence k (the host does not block; comm_join still watches for hangs) */
static inline void comm_fence_wait(Comm* c, int k) {
#ifdef COMM_HAVE_NCCL
    if (c->nccl) { COMM_CUDA_CHECK(cudaStreamWaitEvent(main_stream(), c->ev_fence[k], 0)); }
#else
    (void)c; (void)k;
#endif
}

/* sum of n host doubles over ranks, result on every rank (synchronous). Used for losses, token counts and
 * squared gradient norms; n <= 64 on NCCL. */
static inline void comm_all_reduce_host_f64(Comm* c, double* x, int n) {
    if (c->world == 1 || n <= 0) { return; }
#if defined(COMM_HAVE_NCCL)
    if (n > 64) { FATAL("comm_all_reduce_host_f64: n=%d above the 64-value scratch", n); }
    size_t bytes = (size_t)n * sizeof(double);
    size_t sent, recv;
    comm_ring_bytes(c, 0, (size_t)n, comm_shard_size(c, (size_t)n), 8, 0, &sent, &recv);
    comm_count(c, 2 * sent, 2 * recv);
    comm_nccl_begin(c);
    COMM_CUDA_CHECK(cudaMemcpyAsync(c->dscratch, x, bytes, cudaMemcpyHostToDevice, c->stream));
    COMM_NCCL_CHECK(ncclAllReduce(c->dscratch, c->dscratch, (size_t)n, ncclFloat64, ncclSum, c->nccl, c->stream));
    COMM_CUDA_CHECK(cudaMemcpyAsync(x, c->dscratch, bytes, cudaMemcpyDeviceToHost, c->stream));
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
    comm_join(c);
    COMM_CUDA_CHECK(cudaStreamSynchronize(c->stream));
#else
    comm_all_reduce(c, x, COMM_F64, (size_t)n);
#endif
}

/* root's host bytes buf(bytes) to every rank (synchronous; host memory). Counted as bytes sent by the
 * root (bytes * (N-1), flat model) and received by the others. */
static inline void comm_broadcast_host(Comm* c, void* buf, size_t bytes, int root) {
    if (c->world == 1 || bytes == 0) { return; }
    comm_count(c, c->rank == root ? bytes * (size_t)(c->world - 1) : 0, c->rank == root ? 0 : bytes);
#if defined(USE_MPI)
    if (bytes > (size_t)1 << 30) { FATAL("comm_broadcast_host: %zu bytes above the 1 GiB limit", bytes); }
    COMM_MPI_CHECK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->mpi));
#elif defined(COMM_HAVE_NCCL)
    void* d = NULL;
    COMM_CUDA_CHECK(cudaMalloc(&d, bytes));
    COMM_CUDA_CHECK(cudaMemcpy(d, buf, bytes, cudaMemcpyHostToDevice));
    COMM_NCCL_CHECK(ncclBroadcast(d, d, bytes, ncclUint8, root, c->nccl, c->stream));
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
    comm_join(c);
    COMM_CUDA_CHECK(cudaMemcpy(buf, d, bytes, cudaMemcpyDeviceToHost));
    COMM_CUDA_CHECK(cudaFree(d));
#else
    (void)buf; (void)root;
#endif
}

/* point-to-point on device buffers: count elements of type t to/from rank `peer` (blocking on MPI; on NCCL
 * queued on the communication stream, complete after comm_join). */
static inline void comm_send(Comm* c, const void* buf, CommDtype t, size_t count, int peer) {
    size_t bytes = count * comm_dtype_size(t);
    comm_count(c, bytes, 0);
#if defined(COMM_HAVE_NCCL)
    comm_nccl_begin(c);
    COMM_NCCL_CHECK(ncclSend(buf, count, comm_nccl_type(t), peer, c->nccl, c->stream));
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
#elif defined(USE_MPI)
    if (bytes > (size_t)1 << 30) { FATAL("comm_send: %zu bytes above the 1 GiB limit", bytes); }
    COMM_MPI_CHECK(MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 11, c->mpi));
#else
    (void)buf; (void)peer;
    FATAL("comm_send: no peer in a single-process build");
#endif
}
static inline void comm_recv(Comm* c, void* buf, CommDtype t, size_t count, int peer) {
    size_t bytes = count * comm_dtype_size(t);
    comm_count(c, 0, bytes);
#if defined(COMM_HAVE_NCCL)
    comm_nccl_begin(c);
    COMM_NCCL_CHECK(ncclRecv(buf, count, comm_nccl_type(t), peer, c->nccl, c->stream));
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
#elif defined(USE_MPI)
    if (bytes > (size_t)1 << 30) { FATAL("comm_recv: %zu bytes above the 1 GiB limit", bytes); }
    COMM_MPI_CHECK(MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 11, c->mpi, MPI_STATUS_IGNORE));
#else
    (void)buf; (void)peer;
    FATAL("comm_recv: no peer in a single-process build");
#endif
}

/* all ranks reach this point (and on NCCL all queued collectives have completed) */
static inline void comm_barrier(Comm* c) {
    if (c->world == 1) { return; }
#if defined(USE_MPI)
    COMM_MPI_CHECK(MPI_Barrier(c->mpi));
#elif defined(COMM_HAVE_NCCL)
    double one = 1.0;
    comm_all_reduce_host_f64(c, &one, 1);
#endif
}

/* ---------------------------------------------------------------- bootstrap without MPI */

/* FNV-1a over bytes (config hashes, run ids) */
static inline uint64_t comm_hash64(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}

#define COMM_BOOT_MAGIC 0x6c6c6d63626f6f74ULL /* "llmcboot" */

/* Shared-filesystem exchange of a blob (the NCCL unique id) from rank 0 to every rank.
 * Rank 0 removes any old "DIR/llmc_nccl_id_<run_id>" and writes a new one atomically (tmp + rename) holding
 * magic, rank-0 wall time (s) and the blob. Other ranks poll for it for up to timeout_s seconds and reject a
 * file written more than stale_s seconds before they started waiting (a leftover of an earlier run with the
 * same run id). Returns 0 on success; on timeout FATAL with the path. Rank 0 should remove the file with
 * comm_bootstrap_fs_cleanup after every rank has joined (after the first collective). */
static inline void comm_bootstrap_fs_path(char* out, size_t cap, const char* dir, const char* run_id) {
    snprintf(out, cap, "%s/llmc_nccl_id_%s", dir, run_id);
}
static inline void comm_bootstrap_fs(const char* dir, const char* run_id, int rank, void* blob, size_t n,
                                     double timeout_s, double stale_s) {
    char path[1024];
    comm_bootstrap_fs_path(path, sizeof(path), dir, run_id);
    uint64_t magic = COMM_BOOT_MAGIC;
    if (rank == 0) {
        remove(path);
        int64_t now = (int64_t)time(NULL);
        AtomicFile af;
        atomic_file_open(&af, path);
        atomic_file_write(&af, &magic, sizeof(magic), 1);
        atomic_file_write(&af, &now, sizeof(now), 1);
        atomic_file_write(&af, blob, 1, n);
        atomic_file_commit(&af);
        return;
    }
    time_t start = time(NULL);
    for (;;) {
        FILE* f = fopen(path, "rb");
        if (f) {
            uint64_t m = 0; int64_t written = 0;
            int ok = fread(&m, sizeof(m), 1, f) == 1 && fread(&written, sizeof(written), 1, f) == 1 &&
                     fread(blob, 1, n, f) == n && m == COMM_BOOT_MAGIC;
            fclose(f);
            if (ok && (double)written >= (double)start - stale_s) { return; }
        }
        if (difftime(time(NULL), start) > timeout_s) {
            FATAL("NCCL id exchange: no fresh id file '%s' from rank 0 within %.0f s (an older file is ignored as "
                  "stale); check that every rank sees the same shared directory and run id", path, timeout_s);
        }
        usleep(50000);
    }
}
static inline void comm_bootstrap_fs_cleanup(const char* dir, const char* run_id) {
    char path[1024];
    comm_bootstrap_fs_path(path, sizeof(path), dir, run_id);
    remove(path);
}

static inline int comm_write_all(int fd, const void* p, size_t n) {
    const char* b = (const char*)p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR) { continue; }
        if (k <= 0) { return -1; }
        b += k; n -= (size_t)k;
    }
    return 0;
}
static inline int comm_read_all(int fd, void* p, size_t n) {
    char* b = (char*)p;
    while (n > 0) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR) { continue; }
        if (k <= 0) { return -1; }
        b += k; n -= (size_t)k;
    }
    return 0;
}

/* TCP exchange of a blob from rank 0 to the world-1 other ranks. Rank 0 listens on `port` (all interfaces)
 * and answers world-1 connections with magic + blob; the others connect to host:port, retrying for up to
 * timeout_s seconds (rank 0 may start later). A connection whose first 8 bytes are not the magic is
 * rejected. FATAL with host:port on timeout or socket errors. */
static inline void comm_bootstrap_tcp(const char* host, int port, int rank, int world, void* blob, size_t n,
                                      double timeout_s) {
    uint64_t magic = COMM_BOOT_MAGIC;
    if (rank == 0) {
        int srv = socket(AF_INET, SOCK_STREAM, 0);
        if (srv < 0) { FATAL("NCCL id exchange: socket(): %s", strerror(errno)); }
        int yes = 1;
        setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        if (bind(srv, (struct sockaddr*)&a, sizeof(a)) != 0) {
            FATAL("NCCL id exchange: cannot listen on TCP port %d: %s (choose another with tcp:HOST:PORT)", port,
                  strerror(errno));
        }
        if (listen(srv, 128) != 0) { FATAL("NCCL id exchange: listen(): %s", strerror(errno)); }
        for (int served = 0; served < world - 1;) {
            int fd = accept(srv, NULL, NULL);
            if (fd < 0) {
                if (errno == EINTR) { continue; }
                FATAL("NCCL id exchange: accept(): %s", strerror(errno));
            }
            uint64_t hello = 0;
            if (comm_read_all(fd, &hello, sizeof(hello)) == 0 && hello == COMM_BOOT_MAGIC &&
                comm_write_all(fd, &magic, sizeof(magic)) == 0 && comm_write_all(fd, blob, n) == 0) {
                served++;
            }
            close(fd);
        }
        close(srv);
        return;
    }
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    time_t start = time(NULL);
    for (;;) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, portstr, &hints, &res) == 0 && res) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
                uint64_t m = 0;
                int ok = comm_write_all(fd, &magic, sizeof(magic)) == 0 && comm_read_all(fd, &m, sizeof(m)) == 0 &&
                         m == COMM_BOOT_MAGIC && comm_read_all(fd, blob, n) == 0;
                close(fd);
                freeaddrinfo(res);
                if (ok) { return; }
            } else {
                if (fd >= 0) { close(fd); }
                freeaddrinfo(res);
            }
        }
        if (difftime(time(NULL), start) > timeout_s) {
            FATAL("NCCL id exchange: could not get the id from rank 0 at %s:%d within %.0f s", host, port, timeout_s);
        }
        usleep(100000);
    }
}

/* ---------------------------------------------------------------- lifetime */

/* reads an int from the first set environment variable of names (NULL-terminated); -1 if none */
static inline int comm_env_int(const char* const* names) {
    for (int i = 0; names[i]; i++) {
        const char* v = getenv(names[i]);
        if (v && v[0]) { return atoi(v); }
    }
    return -1;
}

/* Starts the process group.
 *   argc/argv: passed to MPI_Init (may be NULL).
 *   init_method (NCCL builds without MPI only): "" or "auto" = world of one unless LLMC_WORLD_SIZE /
 *     SLURM_NTASKS says otherwise (then "fs:$LLMC_NCCL_ID_DIR" or, if unset, "fs:."),
 *     "fs:DIR" shared-filesystem id exchange, "tcp:HOST:PORT" TCP id exchange. Run id for the id file:
 *     $LLMC_RUN_ID, else $SLURM_JOB_ID, else "default".
 *   timeout_s: bootstrap wait and NCCL watchdog (seconds).
 * MPI builds: MPI_Init_thread (singleton when not started by mpirun), a private duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN (so our checks print file:line before MPI_Abort), local rank from
 * MPI_Comm_split_type(SHARED). Never returns on error. */
static inline void comm_init(Comm* c, int* argc, char*** argv, const char* init_method, double timeout_s) {
    memset(c, 0, sizeof(*c));
    c->rank = 0; c->world = 1; c->local_rank = 0;
    c->backend = "single";
    c->timeout_s = timeout_s > 0 ? timeout_s : 600.0;
    (void)init_method;
#ifdef USE_MPI
    int inited = 0;
    COMM_MPI_CHECK(MPI_Initialized(&inited));
    if (!inited) {
        int provided = 0;
        COMM_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
        c->owns_mpi = 1;
    }
    COMM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi));
    COMM_MPI_CHECK(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN));
    COMM_MPI_CHECK(MPI_Comm_rank(c->mpi, &c->rank));
    COMM_MPI_CHECK(MPI_Comm_size(c->mpi, &c->world));
    MPI_Comm local;
    COMM_MPI_CHECK(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local));
    COMM_MPI_CHECK(MPI_Comm_rank(local, &c->local_rank));
    COMM_MPI_CHECK(MPI_Comm_free(&local));
    c->backend = "mpi";
#else
    (void)argc; (void)argv;
    static const char* const rank_vars[] = {"LLMC_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
    static const char* const world_vars[] = {"LLMC_WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    static const char* const local_vars[] = {"LLMC_LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", NULL};
    int r = comm_env_int(rank_vars), w = comm_env_int(world_vars), lr = comm_env_int(local_vars);
#ifdef COMM_HAVE_NCCL
    if (w > 1) {
        if (r < 0 || r >= w) { FATAL("process group: rank %d is not in [0, %d) (set LLMC_RANK)", r, w); }
        c->rank = r; c->world = w; c->local_rank = lr >= 0 ? lr : r;
    }
#else
    if (w > 1) {
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
        FATAL("process group: the environment asks for %d processes but this CUDA build has no NCCL (USE_NCCL=0); "
              "rebuild with `make train_gpt` where NCCL is installed", w);
#else
        FATAL("process group: the environment asks for %d processes but this CPU build has no MPI; build with "
              "`make train_gpt_cpu` where mpicc exists and start it with mpirun", w);
#endif
    }
    (void)r; (void)lr;
#endif
#endif
}

#ifdef COMM_HAVE_NCCL
/* the communication stream, its events (collective done, fences; recorded once so a first wait passes) and
 * the device scratch of comm_all_reduce_host_f64, for a communicator c->nccl that exists */
static inline void comm_nccl_create_resources(Comm* c) {
    COMM_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    COMM_CUDA_CHECK(cudaEventCreateWithFlags(&c->ev_compute, cudaEventDisableTiming));
    COMM_CUDA_CHECK(cudaEventCreateWithFlags(&c->ev_comm, cudaEventDisableTiming));
    COMM_CUDA_CHECK(cudaEventRecord(c->ev_comm, c->stream));
    for (int k = 0; k < COMM_FENCES; k++) {
        COMM_CUDA_CHECK(cudaEventCreateWithFlags(&c->ev_fence[k], cudaEventDisableTiming));
        COMM_CUDA_CHECK(cudaEventRecord(c->ev_fence[k], c->stream));
    }
    COMM_CUDA_CHECK(cudaMalloc((void**)&c->dscratch, 64 * sizeof(double)));
}
#endif

/* Second half of initialisation for NCCL builds, after backend_init selected the GPU: creates the NCCL
 * communicator (id from MPI_Bcast, the filesystem or TCP; see comm_init), the communication stream, events
 * and scratch. No-op on CPU builds. Optional in a world of one: without it every collective is a no-op there
 * (comm_collectives_on), and NCCL is never initialised. */
static inline void comm_init_device(Comm* c, const char* init_method) {
#ifdef COMM_HAVE_NCCL
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (c->rank == 0) { COMM_NCCL_CHECK(ncclGetUniqueId(&id)); }
    const char* run_id = getenv("LLMC_RUN_ID");
    if (!run_id || !run_id[0]) { run_id = getenv("SLURM_JOB_ID"); }
    if (!run_id || !run_id[0]) { run_id = "default"; }
    char fsdir[1024] = "";
    if (c->world > 1) {
#ifdef USE_MPI
        (void)init_method;
        COMM_MPI_CHECK(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, c->mpi));
#else
        const char* m = init_method && init_method[0] ? init_method : "auto";
        if (strcmp(m, "auto") == 0) {
            const char* d = getenv("LLMC_NCCL_ID_DIR");
            snprintf(fsdir, sizeof(fsdir), "%s", d && d[0] ? d : ".");
        } else if (strncmp(m, "fs:", 3) == 0) {
            snprintf(fsdir, sizeof(fsdir), "%s", m + 3);
        } else if (strncmp(m, "tcp:", 4) == 0) {
            char host[256];
            const char* colon = strrchr(m + 4, ':');
            if (!colon || colon == m + 4) { FATAL("--nccl-init '%s': expected tcp:HOST:PORT", m); }
            snprintf(host, sizeof(host), "%.*s", (int)(colon - (m + 4)), m + 4);
            comm_bootstrap_tcp(host, atoi(colon + 1), c->rank, c->world, &id, sizeof(id), c->timeout_s);
        } else {
            FATAL("--nccl-init '%s': expected auto, fs:DIR or tcp:HOST:PORT", m);
        }
        if (fsdir[0]) { comm_bootstrap_fs(fsdir, run_id, c->rank, &id, sizeof(id), c->timeout_s, 120.0); }
#endif
    } else {
        (void)init_method;
    }
    COMM_NCCL_CHECK(ncclCommInitRank(&c->nccl, c->world, id, c->rank));
    comm_nccl_create_resources(c);
    c->backend = "nccl";
    cuda_set_wait_watchdog(comm_watchdog, c); /* host waits of the backend poll the watchdog from now on */
    comm_barrier(c);
    if (c->rank == 0 && fsdir[0]) { comm_bootstrap_fs_cleanup(fsdir, run_id); }
#else
    (void)c; (void)init_method;
#endif
}

/* Sub-group creation: ranks with the same color form a group ordered by key (MPI_Comm_split /
 * ncclCommSplit). `out` shares nothing with the parent but the processes; free it with comm_finalize. */
static inline void comm_split(Comm* parent, int color, int key, Comm* out) {
    memset(out, 0, sizeof(*out));
    out->backend = parent->backend;
    out->timeout_s = parent->timeout_s;
    out->local_rank = parent->local_rank;
    out->is_subgroup = 1;
    out->rank = 0; out->world = 1;
#if defined(USE_MPI)
    COMM_MPI_CHECK(MPI_Comm_split(parent->mpi, color, key, &out->mpi));
    COMM_MPI_CHECK(MPI_Comm_set_errhandler(out->mpi, MPI_ERRORS_RETURN));
    COMM_MPI_CHECK(MPI_Comm_rank(out->mpi, &out->rank));
    COMM_MPI_CHECK(MPI_Comm_size(out->mpi, &out->world));
#endif
#if defined(COMM_HAVE_NCCL)
    if (parent->nccl) { /* else a one-process group that never started NCCL: so is the subgroup */
        COMM_NCCL_CHECK(ncclCommSplit(parent->nccl, color, key, &out->nccl, NULL));
        COMM_NCCL_CHECK(ncclCommCount(out->nccl, &out->world));
        COMM_NCCL_CHECK(ncclCommUserRank(out->nccl, &out->rank));
        comm_nccl_create_resources(out);
    }
#endif
#if !defined(USE_MPI) && !defined(COMM_HAVE_NCCL)
    (void)parent; (void)color; (void)key;
#endif
}

/* ends the group (collective): frees the communicator; the world communicator also finalizes MPI when
 * comm_init initialised it. */
static inline void comm_finalize(Comm* c) {
#ifdef COMM_HAVE_NCCL
    if (c->nccl) {
        if (cuda_state()->watchdog_ctx == (void*)c) { cuda_set_wait_watchdog(NULL, NULL); }
        COMM_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        COMM_NCCL_CHECK(ncclCommDestroy(c->nccl));
        COMM_CUDA_CHECK(cudaStreamDestroy(c->stream));
        COMM_CUDA_CHECK(cudaEventDestroy(c->ev_compute));
        COMM_CUDA_CHECK(cudaEventDestroy(c->ev_comm));
        for (int k = 0; k < COMM_FENCES; k++) { COMM_CUDA_CHECK(cudaEventDestroy(c->ev_fence[k])); }
        COMM_CUDA_CHECK(cudaFree(c->dscratch));
    }
#endif
#ifdef USE_MPI
    if (c->mpi != MPI_COMM_NULL && c->mpi != 0) { COMM_MPI_CHECK(MPI_Comm_free(&c->mpi)); }
    if (!c->is_subgroup && c->owns_mpi) { COMM_MPI_CHECK(MPI_Finalize()); }
#endif
    free(c->tmp);
    c->tmp = NULL;
    c->tmp_bytes = 0;
}

#endif /* LLMC_COMM_H */
