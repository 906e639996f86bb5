/*
 * dev/emu/emu_nccl.h -- the subset of NCCL's API that llmc/comm_nccl.h uses, implemented over MPI, so that the
 * NCCL code path of comm.h and of the trainer's data-parallel schedule (bucketed reductions from the
 * backward hook, ZeRO-1/2 chunk mapping, ZeRO-2 layer slots and fences, the parameter all-gather) runs on
 * CPUs under `mpirun` with the CUDA kernels on the emulator (dev/emu/emu.h). A test tool, not a backend.
 *
 * Build: g++ -DLLMC_BACKEND_CUDA -DUSE_MPI -Idev/emu/nccl (llmc/comm_nccl.h's <nccl.h> is then
 * dev/emu/nccl/nccl.h, which includes this file); see `train_gpt_emu_mpi` in dev/emu/emu.mk and
 * dev/test/cli_dp_nccl_emu.sh.
 *
 * Semantics (NCCL 2.x, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html):
 *   ncclAllReduce / ncclReduce (result at root only) / ncclBroadcast / ncclReduceScatter (recvcount per
 *   rank, rank r receives block r) / ncclAllGather (sendcount per rank, block r from rank r) /
 *   ncclSend / ncclRecv; in-place use as NCCL defines it (sendbuff == recvbuff for all-reduce, reduce,
 *   broadcast; sendbuff == recvbuff + rank*count for reduce-scatter / all-gather).
 *   Every call completes before it returns (the emulator runs streams synchronously, so stream order holds
 *   trivially). ncclGroupStart/End nest: collectives inside a group run immediately, which is correct because
 *   every rank issues the same collectives in the same order; ncclSend / ncclRecv inside a group are queued and
 *   the outermost ncclGroupEnd posts them all (MPI_Isend / MPI_Irecv) and completes them with one MPI_Waitall,
 *   so a group may send and receive in any order without deadlock (NCCL's batched point-to-point). Outside a
 *   group they are blocking (MPI_Send / MPI_Recv). Matching is NCCL's: every message uses one MPI tag, so by
 *   MPI's non-overtaking order the k-th send from a to b matches b's k-th receive from a, in or out of groups.
 *   Sums: fp32/fp64/int32 with MPI_SUM; bf16/fp16 converted to fp32, summed, rounded back to nearest.
 *   Communicators: ncclCommInitRank duplicates MPI_COMM_WORLD (nranks and rank must match it);
 *   ncclCommSplit uses MPI_Comm_split. ncclCommGetAsyncError always reports success (MPI errors abort).
 * Errors: invalid arguments return the NCCL error codes; counts above INT_MAX elements (send/recv: bytes) and
 *   peers outside the communicator are refused (ncclInvalidArgument); a failed MPI point-to-point call returns
 *   ncclSystemError (its queued group is dropped).
 */
#ifndef LLMC_EMU_NCCL_H
#define LLMC_EMU_NCCL_H

#ifndef USE_MPI
#error "dev/emu/emu_nccl.h implements NCCL over MPI: build with -DUSE_MPI"
#endif
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7
} ncclResult_t;
typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
    ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct EmuNcclComm { MPI_Comm mpi; int rank, world; } EmuNcclComm;
typedef EmuNcclComm* ncclComm_t;

static int emu_nccl_group_depth = 0;

/* a send / receive queued inside a group, posted by the outermost ncclGroupEnd */
typedef struct {
    int send, peer, bytes;
    void* buf;
    MPI_Comm mpi;
} EmuNcclP2P;
static EmuNcclP2P* emu_nccl_p2p_queue = NULL; /* (emu_nccl_p2p_cap) of which emu_nccl_p2p_n are queued */
static int emu_nccl_p2p_n = 0, emu_nccl_p2p_cap = 0;
#define EMU_NCCL_P2P_TAG 23 /* every point-to-point message: MPI's order on one tag is NCCL's order */

static inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    default: return "emulated NCCL error";
    }
}

static inline size_t emu_nccl_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, "emu-nccl", 8);
    return ncclSuccess;
}

static inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    EmuNcclComm* c = (EmuNcclComm*)calloc(1, sizeof(EmuNcclComm));
    if (!c) { return ncclSystemError; }
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->world);
    if (c->world != nranks || c->rank != rank) {
        MPI_Comm_free(&c->mpi);
        free(c);
        return ncclInvalidArgument;
    }
    *comm = c;
    return ncclSuccess;
}

static inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out, void* config) {
    (void)config;
    EmuNcclComm* c = (EmuNcclComm*)calloc(1, sizeof(EmuNcclComm));
    if (!c) { return ncclSystemError; }
    MPI_Comm_split(comm->mpi, color, key, &c->mpi);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->world);
    *out = c;
    return ncclSuccess;
}

static inline ncclResult_t ncclCommCount(ncclComm_t comm, int* count) { *count = comm->world; return ncclSuccess; }
static inline ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank) { *rank = comm->rank; return ncclSuccess; }
static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    MPI_Comm_free(&comm->mpi);
    free(comm);
    return ncclSuccess;
}
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
    (void)comm;
    *err = ncclSuccess;
    return ncclSuccess;
}
static inline ncclResult_t ncclGroupStart(void) { emu_nccl_group_depth++; return ncclSuccess; }

/* posts every queued send / receive at once and waits for all of them; empties the queue */
static inline ncclResult_t emu_nccl_p2p_flush(void) {
    int n = emu_nccl_p2p_n, rc = MPI_SUCCESS;
    emu_nccl_p2p_n = 0;
    if (n == 0) { return ncclSuccess; }
    MPI_Request* req = (MPI_Request*)malloc((size_t)n * sizeof(MPI_Request));
    if (!req) { return ncclSystemError; }
    int posted = 0;
    for (; posted < n && rc == MPI_SUCCESS; posted++) {
        const EmuNcclP2P* o = &emu_nccl_p2p_queue[posted];
        rc = o->send ? MPI_Isend(o->buf, o->bytes, MPI_BYTE, o->peer, EMU_NCCL_P2P_TAG, o->mpi, &req[posted])
                     : MPI_Irecv(o->buf, o->bytes, MPI_BYTE, o->peer, EMU_NCCL_P2P_TAG, o->mpi, &req[posted]);
    }
    if (rc == MPI_SUCCESS) { rc = MPI_Waitall(posted, req, MPI_STATUSES_IGNORE); }
    free(req);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

static inline ncclResult_t ncclGroupEnd(void) {
    if (emu_nccl_group_depth <= 0) { return ncclInvalidUsage; }
    emu_nccl_group_depth--;
    return emu_nccl_group_depth == 0 ? emu_nccl_p2p_flush() : ncclSuccess;
}

/* sum of count elements over the communicator into recv, at every rank (root < 0) or at root only */
static inline ncclResult_t emu_nccl_sum(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                        ncclComm_t comm) {
    if (count > (size_t)INT_MAX) { return ncclInvalidArgument; }
    int n = (int)count;
    if (t == ncclFloat32 || t == ncclFloat64 || t == ncclInt32) {
        MPI_Datatype mt = t == ncclFloat32 ? MPI_FLOAT : (t == ncclFloat64 ? MPI_DOUBLE : MPI_INT);
        if (root < 0) {
            MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, mt, MPI_SUM, comm->mpi);
        } else if (comm->rank == root) {
            MPI_Reduce(send == recv ? MPI_IN_PLACE : send, recv, n, mt, MPI_SUM, root, comm->mpi);
        } else {
            MPI_Reduce(send, NULL, n, mt, MPI_SUM, root, comm->mpi);
        }
        return ncclSuccess;
    }
    if (t != ncclBfloat16 && t != ncclFloat16) { return ncclInvalidArgument; }
    float* tmp = (float*)malloc((count ? count : 1) * sizeof(float));
    if (!tmp) { return ncclSystemError; }
    for (size_t i = 0; i < count; i++) {
        tmp[i] = t == ncclBfloat16 ? __bfloat162float(((const __nv_bfloat16*)send)[i])
                                   : __half2float(((const __half*)send)[i]);
    }
    if (root < 0) {
        MPI_Allreduce(MPI_IN_PLACE, tmp, n, MPI_FLOAT, MPI_SUM, comm->mpi);
    } else {
        MPI_Reduce(comm->rank == root ? MPI_IN_PLACE : tmp, comm->rank == root ? tmp : NULL, n, MPI_FLOAT, MPI_SUM,
                   root, comm->mpi);
    }
    if (root < 0 || comm->rank == root) {
        for (size_t i = 0; i < count; i++) {
            if (t == ncclBfloat16) {
                ((__nv_bfloat16*)recv)[i] = __float2bfloat16(tmp[i]);
            } else {
                ((__half*)recv)[i] = __float2half(tmp[i]);
            }
        }
    }
    free(tmp);
    return ncclSuccess;
}

template <class Stream>
static inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                         ncclComm_t comm, Stream) {
    (void)op;
    return emu_nccl_sum(send, recv, count, t, -1, comm);
}

template <class Stream>
static inline ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                      int root, ncclComm_t comm, Stream) {
    (void)op;
    if (root < 0 || root >= comm->world) { return ncclInvalidArgument; }
    return emu_nccl_sum(send, recv, count, t, root, comm);
}

template <class Stream>
static inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                         ncclComm_t comm, Stream) {
    size_t bytes = count * emu_nccl_size(t);
    if (root < 0 || root >= comm->world || bytes > (size_t)INT_MAX) { return ncclInvalidArgument; }
    if (comm->rank == root && send != recv) { memmove(recv, send, bytes); }
    MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, comm->mpi);
    return ncclSuccess;
}

template <class Stream>
static inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t,
                                             ncclRedOp_t op, ncclComm_t comm, Stream) {
    (void)op;
    size_t es = emu_nccl_size(t), total = recvcount * (size_t)comm->world;
    void* full = malloc(total * es + 1);
    if (!full) { return ncclSystemError; }
    memcpy(full, send, total * es); /* recv may alias block `rank` of send */
    ncclResult_t r = emu_nccl_sum(full, full, total, t, -1, comm);
    if (r == ncclSuccess) { memcpy(recv, (char*)full + (size_t)comm->rank * recvcount * es, recvcount * es); }
    free(full);
    return r;
}

template <class Stream>
static inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t,
                                         ncclComm_t comm, Stream) {
    size_t bytes = sendcount * emu_nccl_size(t);
    if (bytes > (size_t)INT_MAX) { return ncclInvalidArgument; }
    char* own = (char*)recv + (size_t)comm->rank * bytes;
    if (send != own) { memmove(own, send, bytes); }
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm->mpi);
    return ncclSuccess;
}

/* ncclSend (send = 1) / ncclRecv (send = 0) of count elements of t: queued inside a group, blocking outside */
static inline ncclResult_t emu_nccl_p2p(int send, void* buf, size_t count, ncclDataType_t t, int peer,
                                        ncclComm_t comm) {
    size_t bytes = count * emu_nccl_size(t);
    if (bytes > (size_t)INT_MAX || peer < 0 || peer >= comm->world) { return ncclInvalidArgument; }
    if (emu_nccl_group_depth == 0) {
        int rc = send ? MPI_Send(buf, (int)bytes, MPI_BYTE, peer, EMU_NCCL_P2P_TAG, comm->mpi)
                      : MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, EMU_NCCL_P2P_TAG, comm->mpi, MPI_STATUS_IGNORE);
        return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
    }
    if (emu_nccl_p2p_n == emu_nccl_p2p_cap) {
        int cap = emu_nccl_p2p_cap ? 2 * emu_nccl_p2p_cap : 16;
        EmuNcclP2P* q = (EmuNcclP2P*)realloc(emu_nccl_p2p_queue, (size_t)cap * sizeof(EmuNcclP2P));
        if (!q) { return ncclSystemError; }
        emu_nccl_p2p_queue = q;
        emu_nccl_p2p_cap = cap;
    }
    EmuNcclP2P* o = &emu_nccl_p2p_queue[emu_nccl_p2p_n++];
    o->send = send; o->peer = peer; o->bytes = (int)bytes; o->buf = buf; o->mpi = comm->mpi;
    return ncclSuccess;
}

template <class Stream>
static inline ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, Stream) {
    return emu_nccl_p2p(1, (void*)send, count, t, peer, comm);
}

template <class Stream>
static inline ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, Stream) {
    return emu_nccl_p2p(0, recv, count, t, peer, comm);
}

#endif /* LLMC_EMU_NCCL_H */
