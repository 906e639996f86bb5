/*
 * llmc/tensor_parallel_comm.h -- the model's tensor-parallel collectives (llmc/tensor_parallel.h) on a group of
 * llmc/comm.h: the trainer binds them to the process grid's tp group, the model test to its world.
 *
 * Every collective is in place on device floatX (or fp32) buffers of `count` elements per rank (all_gather /
 * reduce_scatter: the group's blocks of `count`), and later device work waits for it while the host goes on
 * queueing (comm_wait). Timed mode (the trainer's --comm-stats 1) times each collective alone: the device
 * drains before it and the host waits for it, so `seconds` accumulates the wall time spent in tp collectives
 * (giving up their overlap with queued work, so only diagnostic runs should use it).
 * Errors: the collectives check their own calls (llmc/comm.h). Method: Shoeybi et al. 2019 (Megatron-LM).
 */
#ifndef LLMC_TENSOR_PARALLEL_COMM_H
#define LLMC_TENSOR_PARALLEL_COMM_H

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/tensor_parallel.h"
#include "llmc/profile.h"

typedef struct {
    Comm* comm;       /* the tensor-parallel group */
    CommDtype dtype;  /* floatX's dtype on the wire (COMM_F32, COMM_BF16 or COMM_F16) */
    int timed;        /* 1: time each collective alone into `seconds` */
    double seconds;   /* wall time in the collectives since the caller last zeroed it */
} TensorParallelComm;

typedef enum { TP_COMM_ALL_REDUCE, TP_COMM_ALL_GATHER, TP_COMM_REDUCE_SCATTER } TensorParallelCommOp;

static inline void tp_comm_run(TensorParallelComm* b, TensorParallelCommOp op, void* buf, CommDtype t, size_t count) {
    double t0 = 0.0;
    profile_begin(PROFILE_COMM_TP); /* --profile-steps (llmc/profile.h) */
    if (b->timed) { dev_synchronize(); t0 = wall_seconds(); }
    if (op == TP_COMM_ALL_REDUCE) { comm_all_reduce(b->comm, buf, t, count); }
    else if (op == TP_COMM_ALL_GATHER) { comm_all_gather(b->comm, buf, t, count); }
    else { comm_reduce_scatter(b->comm, buf, t, count); }
    if (!b->timed) {
        comm_wait(b->comm);
    } else {
        comm_join(b->comm);
        b->seconds += wall_seconds() - t0;
    }
    profile_end();
}
static inline void tp_comm_all_reduce(void* ctx, floatX* buf, size_t count) {
    tp_comm_run((TensorParallelComm*)ctx, TP_COMM_ALL_REDUCE, buf, ((TensorParallelComm*)ctx)->dtype, count);
}
static inline void tp_comm_all_reduce_f32(void* ctx, float* buf, size_t count) {
    tp_comm_run((TensorParallelComm*)ctx, TP_COMM_ALL_REDUCE, buf, COMM_F32, count);
}
static inline void tp_comm_all_gather(void* ctx, floatX* buf, size_t count) {
    tp_comm_run((TensorParallelComm*)ctx, TP_COMM_ALL_GATHER, buf, ((TensorParallelComm*)ctx)->dtype, count);
}
static inline void tp_comm_reduce_scatter(void* ctx, floatX* buf, size_t count) {
    tp_comm_run((TensorParallelComm*)ctx, TP_COMM_REDUCE_SCATTER, buf, ((TensorParallelComm*)ctx)->dtype, count);
}

/* the model's view of tensor parallelism over `comm` (this process is rank comm->rank of comm->world), floatX
 * moved as `dtype`, timed or not; b holds the binding and must outlive the returned struct. A group of one gives
 * tensor_parallel_none(). */
static inline TensorParallel tensor_parallel_on_comm(TensorParallelComm* b, Comm* comm, CommDtype dtype,
                                                     int sequence_parallel, int timed) {
    b->comm = comm;
    b->dtype = dtype;
    b->timed = timed;
    b->seconds = 0.0;
    TensorParallel tp = tensor_parallel_none();
    if (b->comm->world == 1) { return tp; }
    tp.rank = b->comm->rank;
    tp.size = b->comm->world;
    tp.sequence_parallel = sequence_parallel;
    tp.ctx = b;
    tp.all_reduce = tp_comm_all_reduce;
    tp.all_reduce_f32 = tp_comm_all_reduce_f32;
    tp.all_gather = tp_comm_all_gather;
    tp.reduce_scatter = tp_comm_reduce_scatter;
    return tp;
}

#endif /* LLMC_TENSOR_PARALLEL_COMM_H */
