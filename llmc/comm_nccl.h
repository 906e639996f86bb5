/*
 * llmc/comm_nccl.h -- the NCCL transport of llmc/comm.h (CUDA builds without LLMC_NO_NCCL). comm.h
 * includes it; it needs only comm_types.h and the backend contract.
 *
 * Holds: the NCCL state of a group (CommNccl: communicator, communication stream, events, a small device scratch),
 * the collectives on device buffers, point-to-point transfers (alone, or batched in one ncclGroupStart/End), their
 * ordering against the compute stream, fences, the watchdog, and the host-buffer collectives staged through
 * device memory (and pinned host memory, so that no copy blocks the host outside the watchdog's polling).
 * Written against the stream/event API of the backend contract (llmc/backend.h: DevStream, DevEvent,
 * dev_stream_create, dev_event_record[_on], dev_stream_wait_event, dev_wait_event, dev_event_query,
 * dev_stream_synchronize, dev_memcpy_{h2d,d2h}_on, dev_malloc, host_malloc_pinned, dev_set/get_wait_watchdog;
 * llmc/README.md, "The backend contract"), never against the backend's internals; NCCL calls take the DevStream
 * (cudaStream_t on CUDA).
 * Ordering: a collective first makes the communication stream wait for the work queued so far on the main
 * (compute) stream (event ev_compute), runs on the communication stream and records ev_comm; comm_nccl_join makes
 * the main stream wait for ev_comm. So backward goes on computing while earlier gradient buckets are reduced.
 * Collectives (NCCL 2.x, "Collective Operations", docs.nvidia.com/deeplearning/nccl): equal-chunk reduce-scatter /
 * all-gather over a whole padded buffer map to ncclReduceScatter / ncclAllGather in place; uneven owned chunks to
 * one ncclReduce / ncclBroadcast per non-empty chunk with the owner as root, in one ncclGroupStart/End; all-reduce
 * to ncclAllReduce (NCCL chooses ring or tree, so the summation order is NCCL's). Sums only.
 * Dtypes: every CommDtype (bf16/fp16 summed by NCCL). Units: counts in elements.
 * Errors: every NCCL call is checked by COMM_NCCL_CHECK (ncclInProgress counts as success): one line
 * "error: <call> failed: <NCCL's reason>  [file:line]" and the job ends (comm_fail_at in comm_types.h: MPI_Abort when
 * MPI runs, else exit(1)). Stream, event, copy and allocation errors are checked by the backend, which prints
 * file:line and exits. A peer that dies or hangs: comm_nccl_watchdog, called while comm_nccl_join polls and by
 * every host wait of the backend (installed with dev_set_wait_watchdog), aborts the communicator and the job on an
 * asynchronous NCCL error or after timeout_s seconds without progress.
 */
#ifndef LLMC_COMM_NCCL_H
#define LLMC_COMM_NCCL_H

#include "comm_types.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include <nccl.h>

/* doubles of device scratch behind comm_all_reduce_host_f64 (one chunk): at least 64, and world + 2 so that the
 * per-step statistics (loss, overflow flag, one norm partial per rank: step_stats) take one all-reduce at
 * any scale */
#define COMM_NCCL_HOST_SCRATCH_MIN 64

/* the NCCL side of a group; comm == NULL until comm_nccl_init / comm_nccl_split */
typedef struct {
    ncclComm_t comm;
    DevStream stream;                  /* communication stream */
    DevEvent ev_compute;               /* recorded on the main stream before a collective */
    DevEvent ev_comm;                  /* recorded on the communication stream after a collective */
    DevEvent ev_fence[COMM_FENCES];    /* marks, see comm_nccl_fence_record */
    double* dscratch;                  /* (dscratch_n) device doubles for host fp64 all-reduces */
    int dscratch_n;
    void* hstage;                      /* (hstage_bytes) pinned host staging of the host-buffer collectives */
    size_t hstage_bytes;
    double timeout_s;                  /* watchdog: seconds without progress before aborting */
} CommNccl;

static inline void comm_nccl_check_at(ncclResult_t rc, const char* what, const char* file, int line) {
    if (rc == ncclSuccess || rc == ncclInProgress) { return; }
    comm_fail_at(what, ncclGetErrorString(rc), file, line);
}
#define COMM_NCCL_CHECK(call) comm_nccl_check_at((call), #call, __FILE__, __LINE__)

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

/* ---------------------------------------------------------------- watchdog and ordering */

/* the watchdog (ctx: CommNccl*): aborts the job, one error line, on an asynchronous NCCL error or when a wait
 * has lasted longer than timeout_s. Called by comm_nccl_join's polling loop and, through dev_set_wait_watchdog,
 * by every host wait of the backend (a host wait can be stuck behind a collective, e.g. ZeRO-2's fence). */
static inline void comm_nccl_watchdog(void* ctx, double waited_s) {
    CommNccl* n = (CommNccl*)ctx;
    ncclResult_t async_err = ncclSuccess;
    COMM_NCCL_CHECK(ncclCommGetAsyncError(n->comm, &async_err));
    if (async_err != ncclSuccess && async_err != ncclInProgress) {
        ncclCommAbort(n->comm);
        comm_fail_at("NCCL collective (asynchronous error)", ncclGetErrorString(async_err), __FILE__, __LINE__);
    }
    if (waited_s > n->timeout_s) {
        ncclCommAbort(n->comm);
        comm_fail_at("NCCL collective", "no progress within the timeout (--comm-timeout); a peer rank probably died",
                     __FILE__, __LINE__);
    }
}

/* the communication stream waits for everything queued so far on the main stream */
static inline void comm_nccl_begin(CommNccl* n) {
    dev_event_record(n->ev_compute);
    dev_stream_wait_event(n->stream, n->ev_compute);
}
/* marks the collectives queued so far on the communication stream (what comm_nccl_join waits for) */
static inline void comm_nccl_end(CommNccl* n) { dev_event_record_on(n->ev_comm, n->stream); }

/* later main-stream work waits for every collective issued so far; the host polls until they are done, calling
 * the watchdog (so a collective whose peer died ends the job within timeout_s) */
static inline void comm_nccl_join(CommNccl* n) {
    time_t start = time(NULL);
    while (!dev_event_query(n->ev_comm)) {
        comm_nccl_watchdog(n, difftime(time(NULL), start));
        usleep(100);
    }
    dev_wait_event(n->ev_comm);
}

/* later main-stream work waits for every collective issued so far, without blocking the host (a hang is caught by
 * the next host wait, which polls the watchdog) */
static inline void comm_nccl_wait(CommNccl* n) { dev_wait_event(n->ev_comm); }

/* fence k (0 <= k < COMM_FENCES) marks the collectives issued so far; waiting on it makes later main-stream work
 * wait for them without blocking the host */
static inline void comm_nccl_fence_record(CommNccl* n, int k) { dev_event_record_on(n->ev_fence[k], n->stream); }
static inline void comm_nccl_fence_wait(CommNccl* n, int k) { dev_wait_event(n->ev_fence[k]); }

/* ---------------------------------------------------------------- collectives on device buffers */

/* reduce-scatter (gather = 0) or all-gather (gather = 1) over a segment list, chunks of `shard` elements owned
 * as in comm.h, in a group of `world` ranks in which this process is `rank`; queued on the communication stream */
static inline void comm_nccl_owned_segments(CommNccl* n, int rank, int world, const CommSegment* seg, int nseg,
                                            CommDtype t, size_t shard, int gather) {
    size_t es = comm_dtype_size(t);
    comm_nccl_begin(n);
    if (nseg == 1 && seg[0].begin == 0 && seg[0].end == shard * (size_t)world) {
        /* the whole padded buffer in equal chunks: NCCL's own collective, in place */
        char* b = (char*)seg[0].ptr;
        char* own = b + (size_t)rank * shard * es;
        if (gather) {
            COMM_NCCL_CHECK(ncclAllGather(own, b, shard, comm_nccl_type(t), n->comm, n->stream));
        } else {
            COMM_NCCL_CHECK(ncclReduceScatter(b, own, shard, comm_nccl_type(t), ncclSum, n->comm, n->stream));
        }
    } else {
        /* uneven pieces: one reduce to / broadcast from the owner per non-empty chunk, all in one group */
        COMM_NCCL_CHECK(ncclGroupStart());
        for (int i = 0; i < nseg; i++) {
            for (int q = 0; q < world; q++) {
                size_t lo, hi;
                comm_chunk(seg[i].begin, seg[i].end, shard, q, &lo, &hi);
                if (hi == lo) { continue; }
                char* p = (char*)seg[i].ptr + (lo - seg[i].begin) * es;
                if (gather) {
                    COMM_NCCL_CHECK(ncclBroadcast(p, p, hi - lo, comm_nccl_type(t), q, n->comm, n->stream));
                } else {
                    COMM_NCCL_CHECK(ncclReduce(p, p, hi - lo, comm_nccl_type(t), ncclSum, q, n->comm, n->stream));
                }
            }
        }
        COMM_NCCL_CHECK(ncclGroupEnd());
    }
    comm_nccl_end(n);
}

/* sum over ranks of every segment, in place: one ncclAllReduce per non-empty segment, in one group */
static inline void comm_nccl_all_reduce_segments(CommNccl* n, const CommSegment* seg, int nseg, CommDtype t) {
    comm_nccl_begin(n);
    COMM_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < nseg; i++) {
        if (seg[i].end > seg[i].begin) {
            COMM_NCCL_CHECK(ncclAllReduce(seg[i].ptr, seg[i].ptr, seg[i].end - seg[i].begin, comm_nccl_type(t), ncclSum,
                                          n->comm, n->stream));
        }
    }
    COMM_NCCL_CHECK(ncclGroupEnd());
    comm_nccl_end(n);
}

/* sum over ranks of buf(count), in place: one ncclAllReduce */
static inline void comm_nccl_all_reduce(CommNccl* n, void* buf, CommDtype t, size_t count) {
    comm_nccl_begin(n);
    COMM_NCCL_CHECK(ncclAllReduce(buf, buf, count, comm_nccl_type(t), ncclSum, n->comm, n->stream));
    comm_nccl_end(n);
}

/* point-to-point: count elements of buf to / from rank `peer`, queued on the communication stream (complete
 * after comm_nccl_join) */
static inline void comm_nccl_send(CommNccl* n, const void* buf, CommDtype t, size_t count, int peer) {
    comm_nccl_begin(n);
    COMM_NCCL_CHECK(ncclSend(buf, count, comm_nccl_type(t), peer, n->comm, n->stream));
    comm_nccl_end(n);
}
static inline void comm_nccl_recv(CommNccl* n, void* buf, CommDtype t, size_t count, int peer) {
    comm_nccl_begin(n);
    COMM_NCCL_CHECK(ncclRecv(buf, count, comm_nccl_type(t), peer, n->comm, n->stream));
    comm_nccl_end(n);
}

/* the transfers ops(nops) as one group on the communication stream, after the compute work queued so far:
 * ncclGroupStart, ncclSend / ncclRecv in the given order, ncclGroupEnd; main-stream work queued after comm.h's
 * comm_p2p_wait (comm_nccl_wait) waits for them without blocking the host (a hang is caught by the next host wait's
 * watchdog); main-stream work queued before that wait runs beside them. NCCL ignores the
 * tags: between a pair, the k-th send matches the peer's k-th receive (see comm_p2p_batch in comm.h). */
static inline void comm_nccl_p2p_post(CommNccl* n, const CommP2P* ops, int nops) {
    comm_nccl_begin(n);
    COMM_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < nops; i++) {
        const CommP2P* o = &ops[i];
        if (o->send) {
            COMM_NCCL_CHECK(ncclSend(o->buf, o->count, comm_nccl_type(o->t), o->peer, n->comm, n->stream));
        } else {
            COMM_NCCL_CHECK(ncclRecv(o->buf, o->count, comm_nccl_type(o->t), o->peer, n->comm, n->stream));
        }
    }
    COMM_NCCL_CHECK(ncclGroupEnd());
    comm_nccl_end(n);
}

/* ---------------------------------------------------------------- collectives on host buffers */

/* the pinned host staging buffer, grown to at least `bytes` (its old contents are not kept) */
static inline void* comm_nccl_host_stage(CommNccl* n, size_t bytes) {
    if (bytes > n->hstage_bytes) {
        host_free_pinned(n->hstage);
        n->hstage = host_malloc_pinned(bytes, "comm host-collective staging buffer");
        n->hstage_bytes = bytes;
    }
    return n->hstage;
}

/* host(count elements of t) through the device buffer dev (at least as large) on the communication stream:
 * root < 0: sum over ranks (ncclAllReduce); else root's values to every rank (ncclBroadcast). Synchronous:
 * returns when host holds the result. host may be any host memory (e.g. the caller's stack): it is staged through
 * the group's pinned buffer, because a device-to-host cudaMemcpyAsync into pageable memory returns only when the
 * copy is done (CUDA Runtime API, "API synchronization behavior"), i.e. it would block inside the driver until the
 * collective before it finished, where no watchdog runs and a dead peer hangs the job. Into pinned memory both
 * copies are asynchronous, and the only host wait is comm_nccl_join's polling of ev_comm, which calls the watchdog
 * (so a collective whose peer died ends the job within timeout_s). */
static inline void comm_nccl_host_collective(CommNccl* n, void* host, void* dev, size_t count, CommDtype t, int root) {
    size_t bytes = count * comm_dtype_size(t);
    void* pinned = comm_nccl_host_stage(n, bytes);
    memcpy(pinned, host, bytes);
    comm_nccl_begin(n); /* also orders after main-stream work on dev (e.g. dev_malloc's zeroing) */
    dev_memcpy_h2d_on(dev, pinned, bytes, n->stream);
    if (root < 0) {
        COMM_NCCL_CHECK(ncclAllReduce(dev, dev, count, comm_nccl_type(t), ncclSum, n->comm, n->stream));
    } else {
        COMM_NCCL_CHECK(ncclBroadcast(dev, dev, count, comm_nccl_type(t), root, n->comm, n->stream));
    }
    dev_memcpy_d2h_on(pinned, dev, bytes, n->stream);
    comm_nccl_end(n);   /* ev_comm follows the copy back */
    comm_nccl_join(n);  /* polls ev_comm with the watchdog; once it passed, pinned holds the result */
    memcpy(host, pinned, bytes);
}

/* root's host buf(bytes) to every rank, staged through a temporary device buffer */
static inline void comm_nccl_broadcast_host(CommNccl* n, void* buf, size_t bytes, int root) {
    void* d = dev_malloc(bytes, "comm_broadcast_host staging buffer");
    comm_nccl_host_collective(n, buf, d, bytes, COMM_U8, root);
    dev_free(d);
}

/* ---------------------------------------------------------------- lifetime */

/* the unique id of a new communicator: NCCL's on rank 0, zeros elsewhere (to be overwritten by rank 0's) */
static inline void comm_nccl_unique_id(ncclUniqueId* id, int rank) {
    memset(id, 0, sizeof(*id));
    if (rank == 0) { COMM_NCCL_CHECK(ncclGetUniqueId(id)); }
}

/* the communication stream, its events (collective done, fences; recorded once so a first wait passes) and the
 * device scratch, for a communicator n->comm that exists */
static inline void comm_nccl_create_resources(CommNccl* n, int world, double timeout_s) {
    n->timeout_s = timeout_s;
    n->stream = dev_stream_create();
    n->ev_compute = dev_event_create();
    n->ev_comm = dev_event_create();
    dev_event_record_on(n->ev_comm, n->stream);
    for (int k = 0; k < COMM_FENCES; k++) {
        n->ev_fence[k] = dev_event_create();
        dev_event_record_on(n->ev_fence[k], n->stream);
    }
    n->dscratch_n = world + 2 > COMM_NCCL_HOST_SCRATCH_MIN ? world + 2 : COMM_NCCL_HOST_SCRATCH_MIN;
    n->dscratch = (double*)dev_malloc((size_t)n->dscratch_n * sizeof(double), "comm host-reduction scratch");
    n->hstage_bytes = (size_t)n->dscratch_n * sizeof(double);
    n->hstage = host_malloc_pinned(n->hstage_bytes, "comm host-collective staging buffer");
}

/* joins the communicator of `world` ranks named by id (collective: every rank calls it with rank 0's id), after
 * the backend selected the device; installs the watchdog on the backend's host waits */
static inline void comm_nccl_init(CommNccl* n, int rank, int world, const ncclUniqueId* id, double timeout_s) {
    COMM_NCCL_CHECK(ncclCommInitRank(&n->comm, world, *id, rank));
    comm_nccl_create_resources(n, world, timeout_s);
    dev_set_wait_watchdog(comm_nccl_watchdog, n);
}

/* ranks of `parent` with the same color form `out`, ordered by key (ncclCommSplit, collective) */
static inline void comm_nccl_split(CommNccl* parent, int color, int key, CommNccl* out, int* rank, int* world) {
    COMM_NCCL_CHECK(ncclCommSplit(parent->comm, color, key, &out->comm, NULL));
    COMM_NCCL_CHECK(ncclCommCount(out->comm, world));
    COMM_NCCL_CHECK(ncclCommUserRank(out->comm, rank));
    comm_nccl_create_resources(out, *world, parent->timeout_s);
}

/* waits for the communication stream, destroys the communicator, stream, events, scratch and pinned staging
 * (no-op when NCCL never started); removes the watchdog if it is this group's */
static inline void comm_nccl_finalize(CommNccl* n) {
    if (!n->comm) { return; }
    void* ctx = NULL;
    if (dev_get_wait_watchdog(&ctx) == comm_nccl_watchdog && ctx == (void*)n) { dev_set_wait_watchdog(NULL, NULL); }
    dev_stream_synchronize(n->stream);
    COMM_NCCL_CHECK(ncclCommDestroy(n->comm));
    n->comm = NULL;
    dev_stream_destroy(n->stream);
    dev_event_destroy(n->ev_compute);
    dev_event_destroy(n->ev_comm);
    for (int k = 0; k < COMM_FENCES; k++) { dev_event_destroy(n->ev_fence[k]); }
    dev_free(n->dscratch);
    n->dscratch = NULL;
    host_free_pinned(n->hstage);
    n->hstage = NULL;
    n->hstage_bytes = 0;
}

#endif /* LLMC_COMM_NCCL_H */
