/*
 * llmc/comm_mpi.h -- the MPI transport of llmc/comm.h (builds with -DUSE_MPI: the CPU build under mpirun, and the
 * bootstrap of NCCL builds made with CUDA_MPI=1). comm.h includes it; it needs comm_types.h and utils.h (FATAL, malloc_check).
 *
 * Holds: the MPI state of a group (CommMpi), MPI start/split/end, the ring algorithms behind comm.h's
 * reduce-scatter / all-gather (and so all-reduce) on host buffers, the host broadcast, send/recv and barrier, and
 * batches of non-blocking point-to-point transfers (comm_p2p_batch: MPI_Isend / MPI_Irecv, one MPI_Waitall).
 * The ring is the bandwidth-optimal one (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for
 * clusters of workstations", J. Parallel Distrib. Comput. 69(2); the ring NCCL uses) over MPI_Sendrecv: N-1
 * steps, at step k rank r sends its part of chunk (r-k-1) mod N (reduce-scatter) or (r-k) mod N (all-gather) to
 * rank r+1 and receives chunk (r-k-2) mod N resp. (r-k-1) mod N from rank r-1. Our own ring rather than
 * MPI_Allreduce, so that the summation order is fixed (every element is summed in the same order on every run,
 * whatever the segmentation of the buffer) and the bytes it sends are the bytes comm.h counts.
 * Dtypes: sums of COMM_F32, COMM_F64 and COMM_I32 (bf16/fp16 need the GPU); copies of any CommDtype.
 * Units: counts in elements, messages split below 2^28 elements (MPI counts are int); broadcast, send/recv and
 * each transfer of a point-to-point batch refuse more than 1 GiB.
 * Tags: 7 the ring, 11 send/recv, COMM_MPI_P2P_TAG0 + the caller's tag the transfers of a batch (so a batch never
 * matches the transport's own messages).
 * Errors: every MPI call is checked by COMM_MPI_CHECK: one line "error: <call> failed: <MPI's reason>
 * [file:line]" and MPI_Abort of the whole job (comm_fail_at in comm_types.h). The communicators use
 * MPI_ERRORS_RETURN, so that the line is printed before the job ends; a dead peer ends the job through mpirun.
 */
#ifndef LLMC_COMM_MPI_H
#define LLMC_COMM_MPI_H

#include "comm_types.h"
#include "utils.h"

#include <string.h>

/* the MPI side of a group */
typedef struct {
    MPI_Comm comm;     /* private duplicate of MPI_COMM_WORLD (or a split of it) with MPI_ERRORS_RETURN */
    int owns_mpi;      /* 1 if comm_mpi_init called MPI_Init (the world's comm_mpi_finalize calls MPI_Finalize) */
    void* tmp;         /* ring receive (and send-pack) buffer, grown on demand */
    size_t tmp_bytes;
    MPI_Request* reqs; /* (reqs_cap) requests and statuses of a point-to-point batch, grown on demand */
    MPI_Status* stats;
    int reqs_cap;
    CommP2P* posted;   /* (reqs_cap) the batch posted and not yet waited for (comm_mpi_p2p_wait), posted_n of them */
    int posted_n;
} CommMpi;

static inline void comm_mpi_check_at(int rc, const char* what, const char* file, int line) {
    if (rc == MPI_SUCCESS) { return; }
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    comm_fail_at(what, msg, file, line);
}
#define COMM_MPI_CHECK(call) comm_mpi_check_at((call), #call, __FILE__, __LINE__)

/* ---------------------------------------------------------------- ring */

static inline MPI_Datatype comm_mpi_type(CommDtype t) {
    switch (t) {
    case COMM_F32: return MPI_FLOAT;
    case COMM_F64: return MPI_DOUBLE;
    case COMM_I32: return MPI_INT;
    default: return MPI_BYTE;
    }
}

static inline void comm_mpi_ensure_tmp(CommMpi* m, size_t bytes) {
    if (bytes <= m->tmp_bytes) { return; }
    free(m->tmp);
    m->tmp = malloc_check(bytes, "comm ring receive buffer");
    m->tmp_bytes = bytes;
}

/* MPI_Sendrecv of scount elements to `to` and rcount from `from`, split into pieces of at most 2^28 elements */
#define COMM_MPI_PIECE ((size_t)1 << 28)
static inline void comm_mpi_sendrecv(CommMpi* m, const void* sbuf, size_t scount, void* rbuf, size_t rcount,
                                     CommDtype t, int to, int from) {
    size_t es = comm_dtype_size(t);
    MPI_Datatype mt = comm_mpi_type(t);
    if (mt == MPI_BYTE) { scount *= es; rcount *= es; es = 1; }
    size_t done_s = 0, done_r = 0;
    do {
        size_t ns = scount - done_s < COMM_MPI_PIECE ? scount - done_s : COMM_MPI_PIECE;
        size_t nr = rcount - done_r < COMM_MPI_PIECE ? rcount - done_r : COMM_MPI_PIECE;
        COMM_MPI_CHECK(MPI_Sendrecv((const char*)sbuf + done_s * es, (int)ns, mt, to, 7, (char*)rbuf + done_r * es,
                                    (int)nr, mt, from, 7, m->comm, MPI_STATUS_IGNORE));
        done_s += ns; done_r += nr;
    } while (done_s < scount || done_r < rcount);
}

/* dst[i] += src[i] for n elements of type t (F32, F64, I32); fixed order, so results are deterministic */
static inline void comm_mpi_add_into(void* dst, const void* src, size_t n, CommDtype t) {
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

/* One ring pass over the segments of a group of `world` ranks in which this process is `rank`: reduce-scatter
 * (gather = 0: each received piece is added into place) or all-gather (gather = 1: copied into place), chunks of
 * `shard` elements owned as in comm.h. At ring step k this rank sends its pieces of chunk sc and receives the
 * pieces of chunk rc from the left neighbour; with several segments the pieces travel packed in one message
 * (one segment: sent and received in place, no packing). Host buffers; synchronous. */
static inline void comm_mpi_ring_segments(CommMpi* m, int rank, int world, const CommSegment* seg, int nseg,
                                          CommDtype t, size_t shard, int gather) {
    int N = world, r = rank;
    size_t es = comm_dtype_size(t), lo, hi;
    int right = (r + 1) % N, left = (r - 1 + N) % N;
    int direct = nseg == 1;
    size_t piece = shard ? shard : 1;
    if (!direct) {
        comm_mpi_ensure_tmp(m, 2 * piece * es); /* [send pack | receive] */
    } else if (!gather) {
        comm_mpi_ensure_tmp(m, piece * es);     /* receive */
    }
    char* sbuf = (char*)m->tmp;
    char* rbuf = direct ? (char*)m->tmp : (char*)m->tmp + piece * es;
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
            comm_mpi_sendrecv(m, src, hi_s - lo_s, gather ? dst : rbuf, hi - lo, t, right, left);
            if (!gather) { comm_mpi_add_into(dst, rbuf, hi - lo, t); }
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
        comm_mpi_sendrecv(m, sbuf, ns, rbuf, nr, t, right, left);
        size_t off = 0;
        for (int i = 0; i < nseg; i++) {
            comm_chunk(seg[i].begin, seg[i].end, shard, rc, &lo, &hi);
            char* dst = (char*)seg[i].ptr + (lo - seg[i].begin) * es;
            if (gather) {
                memcpy(dst, rbuf + off * es, (hi - lo) * es);
            } else {
                comm_mpi_add_into(dst, rbuf + off * es, hi - lo, t);
            }
            off += hi - lo;
        }
    }
}

/* ---------------------------------------------------------------- host messages */

/* root's buf(bytes) to every rank of m (MPI_Bcast; at most 1 GiB) */
static inline void comm_mpi_broadcast(CommMpi* m, void* buf, size_t bytes, int root) {
    if (bytes > (size_t)1 << 30) { FATAL("comm_broadcast_host: %zu bytes above the 1 GiB limit", bytes); }
    COMM_MPI_CHECK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, m->comm));
}

/* blocking send / receive of buf(bytes) to / from rank `peer` of m (at most 1 GiB) */
static inline void comm_mpi_send(CommMpi* m, const void* buf, size_t bytes, int peer) {
    if (bytes > (size_t)1 << 30) { FATAL("comm_send: %zu bytes above the 1 GiB limit", bytes); }
    COMM_MPI_CHECK(MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 11, m->comm));
}
static inline void comm_mpi_recv(CommMpi* m, void* buf, size_t bytes, int peer) {
    if (bytes > (size_t)1 << 30) { FATAL("comm_recv: %zu bytes above the 1 GiB limit", bytes); }
    COMM_MPI_CHECK(MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 11, m->comm, MPI_STATUS_IGNORE));
}

static inline void comm_mpi_barrier(CommMpi* m) { COMM_MPI_CHECK(MPI_Barrier(m->comm)); }

/* ---------------------------------------------------------------- batched point-to-point */

#define COMM_MPI_P2P_TAG0 32 /* MPI tag of a batch transfer = COMM_MPI_P2P_TAG0 + its tag (above 7 and 11) */

/* Posts every transfer of ops(n) (n >= 1, peers already checked by comm.h) at once, MPI_Isend / MPI_Irecv of
 * buf(count * comm_dtype_size(t) bytes) with tag COMM_MPI_P2P_TAG0 + tag, and returns; comm_mpi_p2p_wait completes
 * them with one MPI_Waitall (one batch outstanding at a time: comm.h waits before posting another); host buffers. Messages between a pair match on the tag (and,
 * for equal tags, in posting order). Errors, one line and the job ends: a transfer above 1 GiB or a tag above
 * MPI_TAG_UB - COMM_MPI_P2P_TAG0 (before anything is posted), a failed MPI call, a receive that got a different
 * number of bytes than it asked for (the two sides posted different counts). */
static inline void comm_mpi_p2p_post(CommMpi* m, const CommP2P* ops, int n) {
    int* tag_ub = NULL;
    int flag = 0;
    COMM_MPI_CHECK(MPI_Comm_get_attr(m->comm, MPI_TAG_UB, &tag_ub, &flag));
    int max_tag = (flag ? *tag_ub : 32767) - COMM_MPI_P2P_TAG0; /* the standard guarantees at least 32767 */
    for (int i = 0; i < n; i++) {
        size_t bytes = ops[i].count * comm_dtype_size(ops[i].t);
        if (bytes > (size_t)1 << 30) { FATAL("comm_p2p_batch: transfer %d: %zu bytes above 1 GiB", i, bytes); }
        if (ops[i].tag > max_tag) {
            FATAL("comm_p2p_batch: transfer %d: tag %d above this MPI's limit %d", i, ops[i].tag, max_tag);
        }
    }
    if (n > m->reqs_cap) {
        free(m->reqs);
        free(m->stats);
        free(m->posted);
        m->reqs = (MPI_Request*)malloc_check((size_t)n * sizeof(MPI_Request), "comm_p2p_batch requests");
        m->stats = (MPI_Status*)malloc_check((size_t)n * sizeof(MPI_Status), "comm_p2p_batch statuses");
        m->posted = (CommP2P*)malloc_check((size_t)n * sizeof(CommP2P), "comm_p2p_batch transfers");
        m->reqs_cap = n;
    }
    memcpy(m->posted, ops, (size_t)n * sizeof(CommP2P));
    m->posted_n = n;
    for (int i = 0; i < n; i++) {
        int bytes = (int)(ops[i].count * comm_dtype_size(ops[i].t)), tag = COMM_MPI_P2P_TAG0 + ops[i].tag;
        if (ops[i].send) {
            COMM_MPI_CHECK(MPI_Isend(ops[i].buf, bytes, MPI_BYTE, ops[i].peer, tag, m->comm, &m->reqs[i]));
        } else {
            COMM_MPI_CHECK(MPI_Irecv(ops[i].buf, bytes, MPI_BYTE, ops[i].peer, tag, m->comm, &m->reqs[i]));
        }
    }
}

/* completes the batch comm_mpi_p2p_post posted (none: no-op): MPI_Waitall, then each receive's byte count checked */
static inline void comm_mpi_p2p_wait(CommMpi* m) {
    int n = m->posted_n;
    const CommP2P* ops = m->posted;
    if (n == 0) { return; }
    m->posted_n = 0;
    int rc = MPI_Waitall(n, m->reqs, m->stats);
    if (rc == MPI_ERR_IN_STATUS) { /* name the transfer's own error rather than "error code in status" */
        for (int i = 0; i < n; i++) {
            int e = m->stats[i].MPI_ERROR;
            if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) {
                comm_mpi_check_at(e, "MPI_Waitall (comm_p2p_batch)", __FILE__, __LINE__);
            }
        }
    }
    COMM_MPI_CHECK(rc);
    for (int i = 0; i < n; i++) {
        if (ops[i].send) { continue; }
        int got = 0;
        COMM_MPI_CHECK(MPI_Get_count(&m->stats[i], MPI_BYTE, &got));
        size_t want = ops[i].count * comm_dtype_size(ops[i].t);
        if ((size_t)got != want) {
            FATAL("comm_p2p_batch: transfer %d received %d bytes from rank %d (tag %d) but expected %zu; both sides "
                  "must post the same count", i, got, ops[i].peer, ops[i].tag, want);
        }
    }
}

/* ---------------------------------------------------------------- lifetime */

/* MPI_Init_thread (FUNNELED) unless MPI already runs (a singleton when not started by mpirun), a private
 * duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, and this process's rank, the group size and the rank on
 * this node (MPI_Comm_split_type SHARED). argc/argv may be NULL. */
static inline void comm_mpi_init(CommMpi* m, int* argc, char*** argv, int* rank, int* world, int* local_rank) {
    int inited = 0;
    COMM_MPI_CHECK(MPI_Initialized(&inited));
    if (!inited) {
        int provided = 0;
        COMM_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
        m->owns_mpi = 1;
    }
    COMM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm));
    COMM_MPI_CHECK(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN));
    COMM_MPI_CHECK(MPI_Comm_rank(m->comm, rank));
    COMM_MPI_CHECK(MPI_Comm_size(m->comm, world));
    MPI_Comm local;
    COMM_MPI_CHECK(MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &local));
    COMM_MPI_CHECK(MPI_Comm_rank(local, local_rank));
    COMM_MPI_CHECK(MPI_Comm_free(&local));
}

/* ranks of `parent` with the same color form `out`, ordered by key (MPI_Comm_split, collective) */
static inline void comm_mpi_split(CommMpi* parent, int color, int key, CommMpi* out, int* rank, int* world) {
    COMM_MPI_CHECK(MPI_Comm_split(parent->comm, color, key, &out->comm));
    COMM_MPI_CHECK(MPI_Comm_set_errhandler(out->comm, MPI_ERRORS_RETURN));
    COMM_MPI_CHECK(MPI_Comm_rank(out->comm, rank));
    COMM_MPI_CHECK(MPI_Comm_size(out->comm, world));
}

/* frees the communicator, the ring buffer and the batch requests; the world group (is_world) also ends MPI if
 * comm_mpi_init began it */
static inline void comm_mpi_finalize(CommMpi* m, int is_world) {
    if (m->comm != MPI_COMM_NULL && m->comm != 0) { COMM_MPI_CHECK(MPI_Comm_free(&m->comm)); }
    if (is_world && m->owns_mpi) { COMM_MPI_CHECK(MPI_Finalize()); }
    free(m->tmp);
    m->tmp = NULL;
    m->tmp_bytes = 0;
    free(m->reqs);
    free(m->stats);
    free(m->posted);
    m->reqs = NULL;
    m->stats = NULL;
    m->posted = NULL;
    m->posted_n = 0;
    m->reqs_cap = 0;
}

#endif /* LLMC_COMM_MPI_H */
