/*
 * llmc/comm.h -- the one collective interface of the trainer (llmc/README.md, "Collectives and the process grid"):
 * the group (Comm), element types, segment lists, byte counters and the ring byte model, chunk/shard arithmetic,
 * and the public collectives, each dispatching to the transport compiled in:
 *
 *   nvcc, or c++ -DLLMC_BACKEND_CUDA, without -DLLMC_NO_NCCL
 *                              NCCL on device buffers, on a communication stream (llmc/comm_nccl.h).
 *                              Bootstrap: MPI when built with -DUSE_MPI (make CUDA_MPI=1: mpirun / srun + PMIx),
 *                              else the environment (LLMC_RANK/LLMC_WORLD_SIZE/LLMC_LOCAL_RANK, or SLURM_PROCID/
 *                              SLURM_NTASKS/SLURM_LOCALID) plus the NCCL unique id exchanged through a shared
 *                              filesystem ("fs:DIR") or TCP ("tcp:HOST:PORT") (llmc/comm_bootstrap.h).
 *                              A host-compiled CUDA backend (the tests' CPU execution layer) takes this path with
 *                              whatever <nccl.h> its include path provides.
 *   gcc -DUSE_MPI (CPU build)  MPI (OpenMPI) on host buffers (llmc/comm_mpi.h): our own ring algorithms over
 *                              MPI_Sendrecv (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for
 *                              clusters of workstations"; the ring NCCL uses), so the summation order is fixed and
 *                              the byte counters measure what is really sent.
 *   gcc without USE_MPI        a world of one process; every collective is a no-op.
 *   nvcc -DLLMC_NO_NCCL        (make USE_NCCL=0) one GPU, one process, no collectives (as gcc without MPI);
 *                              a process group asked for by the environment is refused with one line.
 *
 * Buffers: "device" pointers (on the CPU build device memory is host memory); host_* functions take host memory.
 * Element types: CommDtype (comm_dtype_size bytes each); counts are in elements, bytes in bytes. Reductions are
 * sums. The MPI transport reduces only F32, F64 and I32 (BF16/F16 need NCCL); any type can be gathered.
 *
 * Collectives over "owned" ranges (the ZeRO layout; llmc/README.md, "ZeRO and the gradient store"). A buffer of
 * elements [0, padded) is cut into world contiguous shards of `shard` elements; rank r owns [r*shard,
 * (r+1)*shard). For a sub-range [begin, end) chunk c is [max(begin, c*shard), min(end, (c+1)*shard)) (possibly
 * empty):
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
 * element is summed in the same ring order as by a single call over the whole buffer (MPI: bucketed and
 * unbucketed reductions agree bit for bit). MPI: one ring pass whose messages pack the pieces of every
 * segment; NCCL: one ncclGroupStart/End of per-segment calls, summed in NCCL's order (which may differ from a
 * whole-buffer call's in the last bits with more than two ranks). Bytes: the sum of the per-segment ring costs.
 *
 * Batched point-to-point (pipeline parallelism; Megatron-LM's batched p2p): comm_p2p_batch posts n CommP2P
 * transfers together and completes them together, so "send to r+1, receive from r-1" on every rank, or two
 * neighbours each sending and receiving, cannot deadlock. MPI: MPI_Isend / MPI_Irecv each, one MPI_Waitall,
 * matched by tag. NCCL: one ncclGroupStart/End on the communication stream, matched in posting order (no tags):
 * callers post the transfers between a pair in the same order on both sides (sorted by (peer, tag)).
 *
 * Fences (GPU): comm_fence_record(c, k) marks the collectives issued so far; comm_fence_wait(c, k) makes
 * the compute stream wait for that mark without blocking the host (double-buffered gradient buckets:
 * a buffer is reused only after its reduction finished). k < COMM_FENCES. No-ops on the CPU build.
 *
 * Counters: every call adds its payload bytes sent/received by this rank to comm->counters and comm->total
 * (comm_counters_reset starts a new interval of comm->counters, e.g. one optimizer step).
 *
 * GPU ordering: a collective first makes the communication stream wait for the work queued so far on the
 * compute stream (event), then runs on the communication stream; comm_join() makes the compute stream wait
 * for every collective issued so far. Backward can therefore continue on the compute stream while earlier
 * buckets are reduced (overlap). On the CPU build both are no-ops and collectives are synchronous.
 *
 * Errors: every MPI/NCCL return code is checked by COMM_MPI_CHECK / COMM_NCCL_CHECK, which print one line
 * "error: <call> failed: <reason>  [file:line]" and end the whole job (comm_fail_at: MPI_Abort when MPI runs,
 * else exit(1)); device calls go through the backend contract, which checks every CUDA return code and exits
 * with file:line. A peer that dies: under mpirun the runtime kills the remaining ranks; on NCCL comm_join polls
 * ncclCommGetAsyncError and aborts the communicator after comm->timeout_s seconds without progress, and so does
 * every host wait of the backend (comm_init_device installs the watchdog with dev_set_wait_watchdog).
 *
 * Header-only: static inline functions, no non-static globals. On CUDA builds the NCCL transport includes
 * llmc/backend.h (it runs on the backend's streams and events).
 */
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"
#include "comm_types.h"
#include "comm_bootstrap.h"

#if defined(LLMC_NO_NCCL) && defined(USE_MPI) && (defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA))
#error "USE_NCCL=0 builds one process on one GPU: it cannot be combined with CUDA_MPI=1 (MPI's rings work on host memory)"
#endif
#if (defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)) && !defined(LLMC_NO_NCCL)
#define COMM_HAVE_NCCL 1
#endif

/* ---------------------------------------------------------------- transports */

#ifdef USE_MPI
#include "comm_mpi.h"
#endif
#ifdef COMM_HAVE_NCCL
#include "comm_nccl.h"
#endif

/* the process group */
typedef struct {
    int rank, world;           /* this process in the group, group size */
    int local_rank;            /* rank on this node (selects the GPU) */
    const char* backend;       /* "single", "mpi" or "nccl" */
    int is_subgroup;           /* made by comm_split */
    double timeout_s;          /* bootstrap wait and NCCL watchdog: seconds without progress before aborting */
    CommCounters counters;     /* since the last comm_counters_reset */
    CommCounters total;        /* since comm_init */
    int p2p_posted;            /* 1 while a comm_p2p_post batch awaits its comm_p2p_wait */
#ifdef USE_MPI
    CommMpi mpi;
#endif
#ifdef COMM_HAVE_NCCL
    CommNccl nccl;             /* nccl.comm == NULL until comm_init_device (or comm_split of a started group) */
#endif
} Comm;

/* ---------------------------------------------------------------- counters and the ring byte model */

/* adds one call of `sent`/`recv` payload bytes of this rank to c->counters and c->total */
static inline void comm_count(Comm* c, size_t sent, size_t recv) {
    c->counters.bytes_sent += sent; c->counters.bytes_recv += recv; c->counters.calls++;
    c->total.bytes_sent += sent; c->total.bytes_recv += recv; c->total.calls++;
}
/* starts a new interval of c->counters (c->total keeps counting) */
static inline void comm_counters_reset(Comm* c) { memset(&c->counters, 0, sizeof(c->counters)); }

/* ring-model bytes one rank sends/receives in a reduce-scatter (gather = 0) or all-gather (gather = 1) over the
 * owned chunks of [begin,end) (elements of es bytes), computed exactly by following the ring schedule of
 * llmc/comm_mpi.h: rank r sends every chunk but one at N-1 steps */
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

/* shard size that splits n elements over the group: ceil(n / world) */
static inline size_t comm_shard_size(const Comm* c, size_t n) { return (n + (size_t)c->world - 1) / (size_t)c->world; }

/* ---------------------------------------------------------------- collectives */

/* whether collectives move data: always in a world of several processes; in a world of one only on NCCL, and
 * only once comm_init_device started the communicator (the trainer does so for ZeRO-1/2, so that a single GPU
 * exercises the NCCL path; a one-GPU ZeRO-0 run never starts NCCL). MPI and the single-process backend skip
 * them in a world of one. */
static inline int comm_collectives_on(const Comm* c) {
#ifdef COMM_HAVE_NCCL
    return c->world > 1 || c->nccl.comm != NULL;
#else
    return c->world > 1;
#endif
}

/* reduce-scatter (gather = 0) or all-gather (gather = 1) over a segment list; see the two wrappers below */
static inline void comm_owned_segments(Comm* c, const CommSegment* seg, int nseg, CommDtype t, size_t shard, int gather) {
    if (nseg <= 0 || !comm_collectives_on(c)) { return; }
    size_t sent, recv, es = comm_dtype_size(t);
    comm_segments_bytes(c, seg, nseg, shard, es, gather, &sent, &recv);
    if (sent + recv == 0 && c->world > 1) { return; }
    comm_count(c, sent, recv);
#if defined(COMM_HAVE_NCCL)
    comm_nccl_owned_segments(&c->nccl, c->rank, c->world, seg, nseg, t, shard, gather);
#elif defined(USE_MPI)
    comm_mpi_ring_segments(&c->mpi, c->rank, c->world, seg, nseg, t, shard, gather);
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
    comm_nccl_all_reduce_segments(&c->nccl, seg, nseg, t);
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

/* sum over ranks of buf(count), result on every rank, in place: ring reduce-scatter + all-gather,
 * 2(N-1)/N * count * es bytes each way per rank (NCCL: one ncclAllReduce, counted with that model) */
static inline void comm_all_reduce(Comm* c, void* buf, CommDtype t, size_t count) {
    size_t shard = comm_shard_size(c, count);
#ifdef COMM_HAVE_NCCL
    if (count == 0 || !comm_collectives_on(c)) { return; }
    size_t s1, r1, s2, r2, es = comm_dtype_size(t);
    comm_ring_bytes(c, 0, count, shard, es, 0, &s1, &r1);
    comm_ring_bytes(c, 0, count, shard, es, 1, &s2, &r2);
    comm_count(c, s1 + s2, r1 + r2);
    comm_nccl_all_reduce(&c->nccl, buf, t, count);
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

/* makes later compute-stream work wait for every collective issued so far; on NCCL also the watchdog:
 * polls until the communication stream is idle, aborting the job (one error line) on an asynchronous
 * NCCL error or after timeout_s seconds without completion. No-op on the CPU build. */
static inline void comm_join(Comm* c) {
#ifdef COMM_HAVE_NCCL
    if (c->nccl.comm) { comm_nccl_join(&c->nccl); } /* else NCCL not started: nothing was issued */
#else
    (void)c;
#endif
}

/* makes later compute-stream work wait for every collective issued so far, without blocking the host (tensor
 * parallelism's in-layer collectives: the next kernel needs the result, the host goes on queueing); a collective
 * whose peer died is caught by the next host wait, which polls the NCCL watchdog. No-op on the CPU build, whose
 * collectives are synchronous. */
static inline void comm_wait(Comm* c) {
#ifdef COMM_HAVE_NCCL
    if (c->nccl.comm) { comm_nccl_wait(&c->nccl); }
#else
    (void)c;
#endif
}

/* marks every collective issued so far as fence k (0 <= k < COMM_FENCES); see comm_fence_wait */
static inline void comm_fence_record(Comm* c, int k) {
#ifdef COMM_HAVE_NCCL
    if (c->nccl.comm) { comm_nccl_fence_record(&c->nccl, k); }
#else
    (void)c; (void)k;
#endif
}

/* later compute-stream work waits for fence k (the host does not block; comm_join still watches for hangs) */
static inline void comm_fence_wait(Comm* c, int k) {
#ifdef COMM_HAVE_NCCL
    if (c->nccl.comm) { comm_nccl_fence_wait(&c->nccl, k); }
#else
    (void)c; (void)k;
#endif
}

/* sum of n host doubles x(n) over ranks, result on every rank (synchronous). Used for losses, token counts and
 * squared gradient norms. MPI: the ring all-reduce (exact byte count). NCCL: staged through pinned host memory and
 * the device scratch (so no copy blocks the host outside the watchdog, llmc/comm_nccl.h) in chunks of the group's
 * scratch (max(64, world + 2) values), one ncclAllReduce each, each counted with the ring model (2 x the
 * reduce-scatter bytes of the chunk). Any n >= 0. */
static inline void comm_all_reduce_host_f64(Comm* c, double* x, int n) {
    if (c->world == 1 || n <= 0) { return; }
#if defined(COMM_HAVE_NCCL)
    const int chunk = c->nccl.dscratch_n;
    for (int off = 0; off < n; off += chunk) {
        int m = n - off < chunk ? n - off : chunk;
        size_t sent, recv;
        comm_ring_bytes(c, 0, (size_t)m, comm_shard_size(c, (size_t)m), 8, 0, &sent, &recv);
        comm_count(c, 2 * sent, 2 * recv);
        comm_nccl_host_collective(&c->nccl, x + off, c->nccl.dscratch, (size_t)m, COMM_F64, -1);
    }
#else
    comm_all_reduce(c, x, COMM_F64, (size_t)n);
#endif
}

/* root's host bytes buf(bytes) to every rank (synchronous; host memory). Counted as bytes sent by the
 * root (bytes * (N-1), flat model) and received by the others. MPI: at most 1 GiB. */
static inline void comm_broadcast_host(Comm* c, void* buf, size_t bytes, int root) {
    if (c->world == 1 || bytes == 0) { return; }
    comm_count(c, c->rank == root ? bytes * (size_t)(c->world - 1) : 0, c->rank == root ? 0 : bytes);
#if defined(USE_MPI)
    comm_mpi_broadcast(&c->mpi, buf, bytes, root);
#elif defined(COMM_HAVE_NCCL)
    comm_nccl_broadcast_host(&c->nccl, buf, bytes, root);
#else
    (void)buf; (void)root;
#endif
}

/* point-to-point on device buffers: count elements of type t to/from rank `peer` (blocking on MPI, at most
 * 1 GiB; on NCCL queued on the communication stream, complete after comm_join). FATAL in a single-process
 * build. */
static inline void comm_send(Comm* c, const void* buf, CommDtype t, size_t count, int peer) {
    size_t bytes = count * comm_dtype_size(t);
    comm_count(c, bytes, 0);
#if defined(COMM_HAVE_NCCL)
    (void)bytes;
    comm_nccl_send(&c->nccl, buf, t, count, peer);
#elif defined(USE_MPI)
    comm_mpi_send(&c->mpi, buf, bytes, peer);
#else
    (void)buf; (void)peer;
    FATAL("comm_send: no peer in a single-process build");
#endif
}
static inline void comm_recv(Comm* c, void* buf, CommDtype t, size_t count, int peer) {
    size_t bytes = count * comm_dtype_size(t);
    comm_count(c, 0, bytes);
#if defined(COMM_HAVE_NCCL)
    (void)bytes;
    comm_nccl_recv(&c->nccl, buf, t, count, peer);
#elif defined(USE_MPI)
    comm_mpi_recv(&c->mpi, buf, bytes, peer);
#else
    (void)buf; (void)peer;
    FATAL("comm_recv: no peer in a single-process build");
#endif
}

/* Batched, non-blocking point-to-point: the transfers ops(n) (CommP2P: send = 1 sends count elements of t from
 * buf to rank `peer` of group c, send = 0 receives them into buf; device buffers, host memory on the CPU build) are
 * posted together and complete together, so every rank may send and receive in one call without deadlock.
 *   MPI (CPU build): MPI_Isend / MPI_Irecv each with MPI tag COMM_MPI_P2P_TAG0 + tag, then one MPI_Waitall;
 *     returns when all are done. At most 1 GiB per transfer.
 *   NCCL: the communication stream waits for the compute work queued so far, then ncclGroupStart, ncclSend /
 *     ncclRecv in the given order, ncclGroupEnd; later compute-stream work waits for the batch without blocking
 *     the host (as comm_wait; the host waits' watchdog and comm_join still catch a dead peer). Until then the
 *     buffers stay allocated and are touched only by compute-stream work queued after this call.
 * Ordering rule: NCCL matches the k-th send from a to b with b's k-th receive from a, whatever the tags, so both
 * sides must post the transfers of a pair, per direction, in the same order (the pipeline executor sorts a batch
 * by (peer, tag)); on MPI the tag decides. The peer's matching transfer must be in a batch the peer posts without
 * waiting for this one, with the same count and element size. A transfer's tag (>= 0) only needs to tell apart
 * the messages between the same pair in the same direction.
 * Counters: one call adding the bytes sent and received. n == 0: no-op (not counted).
 * Errors (one line, the job ends): n < 0, any transfer in a group of one process (or a single-process build: no
 * peers), a peer outside [0, world) or equal to this rank, a negative tag; NCCL before comm_init_device; the
 * transport's own errors (comm_mpi_p2p_post / _wait: above 1 GiB, tag above MPI_TAG_UB, counts that differ between the
 * sides; MPI and NCCL return codes).
 * comm_p2p_post / comm_p2p_wait split the call (the pipeline executor's overlap: llmc/README.md, "Pipeline
 * parallelism"): post returns once the batch is posted, work may run, wait completes it. Between the two, a send's
 * buffer must not be written nor a receive's read. At most one batch is outstanding per group: a post first waits
 * for the previous one. */
static inline void comm_p2p_wait(Comm* c);
static inline void comm_p2p_post(Comm* c, const CommP2P* ops, int n) {
    comm_p2p_wait(c); /* one batch outstanding per group */
    if (n == 0) { return; }
    if (n < 0) { FATAL("comm_p2p_batch: %d transfers", n); }
    if (c->world == 1) { FATAL("comm_p2p_batch: %d transfer(s) but no peer in a group of one process", n); }
#if defined(COMM_HAVE_NCCL)
    if (!c->nccl.comm) { FATAL("comm_p2p_batch: NCCL is not started (call comm_init_device first)"); }
#endif
    size_t sent = 0, recv = 0;
    for (int i = 0; i < n; i++) {
        const CommP2P* o = &ops[i];
        if (o->peer < 0 || o->peer >= c->world || o->peer == c->rank) {
            FATAL("comm_p2p_batch: transfer %d names peer %d, not another rank of this group of %d (rank %d)", i,
                  o->peer, c->world, c->rank);
        }
        if (o->tag < 0) { FATAL("comm_p2p_batch: transfer %d has the negative tag %d", i, o->tag); }
        size_t bytes = o->count * comm_dtype_size(o->t);
        if (o->send) { sent += bytes; } else { recv += bytes; }
    }
    comm_count(c, sent, recv);
#if defined(COMM_HAVE_NCCL)
    comm_nccl_p2p_post(&c->nccl, ops, n);
    c->p2p_posted = 1;
#elif defined(USE_MPI)
    comm_mpi_p2p_post(&c->mpi, ops, n);
    c->p2p_posted = 1;
#endif
}

/* completes the batch comm_p2p_post posted (none outstanding: no-op): MPI, its MPI_Waitall and the receives' byte
 * counts checked; NCCL, later main-stream work waits for it (the host does not block) */
static inline void comm_p2p_wait(Comm* c) {
    if (!c->p2p_posted) { return; }
    c->p2p_posted = 0;
#if defined(COMM_HAVE_NCCL)
    comm_nccl_wait(&c->nccl);
#elif defined(USE_MPI)
    comm_mpi_p2p_wait(&c->mpi);
#endif
}

/* comm_p2p_post, then comm_p2p_wait: the batch complete on return (MPI), or before any later main-stream work (NCCL) */
static inline void comm_p2p_batch(Comm* c, const CommP2P* ops, int n) {
    comm_p2p_post(c, ops, n);
    comm_p2p_wait(c);
}

/* all ranks reach this point (and on NCCL all queued collectives have completed) */
static inline void comm_barrier(Comm* c) {
    if (c->world == 1) { return; }
#if defined(USE_MPI)
    comm_mpi_barrier(&c->mpi);
#elif defined(COMM_HAVE_NCCL)
    double one = 1.0;
    comm_all_reduce_host_f64(c, &one, 1);
#endif
}

/* refuses, with one line printed by rank 0, when any rank's value differs from rank 0's (every rank calls it):
 * "error: K of N processes were started with a different <what> than rank 0 (<value>); <hint>". The other ranks
 * wait for the launcher to end the job, so one line is printed. Used for the configuration hash at start. */
static inline void comm_require_same(Comm* c, uint64_t value, const char* what, const char* hint) {
    if (c->world == 1) { return; }
    uint64_t root = value;
    comm_broadcast_host(c, &root, sizeof(root), 0);
    double differs = root != value ? 1.0 : 0.0;
    comm_all_reduce_host_f64(c, &differs, 1);
    if (differs > 0) {
        if (c->rank == 0) {
            FATAL("%d of %d processes were started with a different %s than rank 0 (%016llx); %s", (int)differs,
                  c->world, what, (unsigned long long)root, hint);
        }
        comm_barrier(c); /* rank 0 exits and the launcher ends the job; never passes */
        exit(EXIT_FAILURE);
    }
}

/* ---------------------------------------------------------------- lifetime */

/* Starts the process group.
 *   argc/argv: passed to MPI_Init (may be NULL).
 *   init_method (NCCL builds without MPI only; used by comm_init_device): "" or "auto" = world of one unless
 *     LLMC_WORLD_SIZE / SLURM_NTASKS says otherwise (then "fs:$LLMC_NCCL_ID_DIR" or, if unset, "fs:."),
 *     "fs:DIR" shared-filesystem id exchange, "tcp:HOST:PORT" TCP id exchange. Run id for the id file:
 *     $LLMC_RUN_ID, else $SLURM_JOB_ID, else "default". Every build without OpenSSL refuses "tcp:..." here
 *     with one line (comm_bootstrap_require_tcp), whether or not it would use it.
 *   timeout_s: bootstrap wait and NCCL watchdog (seconds; <= 0 means 600).
 * MPI builds: MPI_Init_thread (singleton when not started by mpirun), a private duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN (so our checks print file:line before MPI_Abort), local rank from
 * MPI_Comm_split_type(SHARED). Never returns on error. */
static inline void comm_init(Comm* c, int* argc, char*** argv, const char* init_method, double timeout_s) {
    memset(c, 0, sizeof(*c));
    c->rank = 0; c->world = 1; c->local_rank = 0;
    c->backend = "single";
    c->timeout_s = timeout_s > 0 ? timeout_s : 600.0;
    comm_bootstrap_require_tcp(init_method); /* a build without OpenSSL refuses tcp: before the device starts */
#ifdef USE_MPI
    comm_mpi_init(&c->mpi, argc, argv, &c->rank, &c->world, &c->local_rank);
    c->backend = "mpi";
#else
    (void)argc; (void)argv;
    int r, w, lr;
    comm_env_group(&r, &w, &lr);
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

/* Second half of initialisation for NCCL builds, after backend_init selected the GPU: creates the NCCL
 * communicator (id from MPI_Bcast, the filesystem or TCP; see comm_init), the communication stream, events
 * and scratch, and installs the watchdog on the backend's host waits. No-op on CPU builds. Optional in a world
 * of one: without it every collective is a no-op there (comm_collectives_on), and NCCL is never initialised. */
static inline void comm_init_device(Comm* c, const char* init_method) {
#ifdef COMM_HAVE_NCCL
    ncclUniqueId id;
    comm_nccl_unique_id(&id, c->rank);
    const char* run_id = comm_bootstrap_run_id();
    char fsdir[1024] = "";
    if (c->world > 1) {
#ifdef USE_MPI
        (void)init_method;
        comm_mpi_broadcast(&c->mpi, &id, sizeof(id), 0);
#else
        comm_bootstrap_exchange(init_method, run_id, c->rank, c->world, &id, sizeof(id), c->timeout_s, fsdir,
                                sizeof(fsdir));
#endif
    } else {
        (void)init_method;
    }
    comm_nccl_init(&c->nccl, c->rank, c->world, &id, c->timeout_s);
    c->backend = "nccl";
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
    comm_mpi_split(&parent->mpi, color, key, &out->mpi, &out->rank, &out->world);
#endif
#if defined(COMM_HAVE_NCCL)
    if (parent->nccl.comm) { /* else a one-process group that never started NCCL: so is the subgroup */
        comm_nccl_split(&parent->nccl, color, key, &out->nccl, &out->rank, &out->world);
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
    comm_nccl_finalize(&c->nccl);
#endif
#ifdef USE_MPI
    comm_mpi_finalize(&c->mpi, !c->is_subgroup);
#endif
#if !defined(USE_MPI) && !defined(COMM_HAVE_NCCL)
    (void)c;
#endif
}

#endif /* LLMC_COMM_H */
