/*
 * llmc/moe_ep_comm.h -- the mixture-of-experts layer's all-to-all (llmc/moe.h, MoEExpertParallel) on a group of
 * llmc/comm.h: the trainer binds it to a private duplicate of the process grid's ep group, so that the group's
 * byte counters hold the all-to-all traffic alone (the ep group may be the dp group itself when ep = dp).
 *
 * All-to-all with variable counts as one batch of point-to-point transfers (comm_p2p_batch): to every other rank
 * of the group one send, from every other rank one receive, posted in rank order on every rank (so NCCL's
 * in-order matching pairs them; MPI matches by tag 0 on the private communicator); the own block is a device
 * copy; transfers of zero elements are not posted (both sides know the count: the receiver's count is the
 * sender's, exchanged first). CPU build: MPI_Isend/MPI_Irecv + MPI_Waitall; NCCL: ncclGroupStart, ncclSend /
 * ncclRecv, ncclGroupEnd on the communication stream, which the compute stream then waits for; a deferred call
 * (defer = 1: the layer's phases, llmc/moe.h) returns after the post (comm_p2p_post) and moe_ep_comm_wait completes
 * it (comm_p2p_wait; a later post on the group completes it first). Units: counts and
 * displacements in elements of floatX (`dtype` on the wire) or int32.
 * Counters: the Comm's (bytes sent/received by this rank, all transfers); data_bytes_sent/recv count the floatX
 * transfers only (token rows), count_bytes_sent the int32 count exchanges; the caller zeroes them.
 * Errors: the transport checks its calls (llmc/comm.h: one line, the job ends); more ranks than MOE_MAX_EXPERTS is
 * an internal error (ep divides E <= MOE_MAX_EXPERTS). Method: GShard (Lepikhin et al. 2020) dispatch/combine.
 */
#ifndef LLMC_MOE_EP_COMM_H
#define LLMC_MOE_EP_COMM_H

#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/moe.h"
#include "llmc/profile.h"

typedef struct {
    Comm comm;                      /* private duplicate of the ep group (comm_split) */
    int active;                     /* 1 when comm was made (ep > 1) */
    CommDtype dtype;                /* floatX on the wire */
    unsigned long long data_bytes_sent, data_bytes_recv, count_bytes_sent;
    MoEExpertParallel ep;           /* the model's view; ep.ctx points at this struct */
} MoEEpComm;

static inline void moe_ep_comm_all_to_all(void* ctx, const void* send, const size_t* scount, const size_t* sdispl,
                                          void* recv, const size_t* rcount, const size_t* rdispl, int is_int,
                                          int defer) {
    MoEEpComm* b = (MoEEpComm*)ctx;
    Comm* c = &b->comm;
    CommDtype t = is_int ? COMM_I32 : b->dtype;
    size_t es = comm_dtype_size(t);
    if (c->world > MOE_MAX_EXPERTS) { FATAL("internal: moe_ep_comm_all_to_all over %d ranks", c->world); }
    CommP2P ops[2 * MOE_MAX_EXPERTS];
    int n = 0;
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank) {
            if (scount[q] != rcount[q]) {
                FATAL("internal: moe all-to-all sends %zu elements to itself but receives %zu", scount[q], rcount[q]);
            }
            if (scount[q] > 0) {
                dev_memcpy_d2d((char*)recv + rdispl[q] * es, (const char*)send + sdispl[q] * es, scount[q] * es);
            }
            continue;
        }
        if (scount[q] > 0) {
            CommP2P o;
            memset(&o, 0, sizeof(o));
            o.send = 1; o.peer = q; o.tag = 0; o.t = t; o.count = scount[q];
            o.buf = (void*)((const char*)send + sdispl[q] * es);
            ops[n++] = o;
        }
        if (rcount[q] > 0) {
            CommP2P o;
            memset(&o, 0, sizeof(o));
            o.send = 0; o.peer = q; o.tag = 0; o.t = t; o.count = rcount[q];
            o.buf = (char*)recv + rdispl[q] * es;
            ops[n++] = o;
        }
        if (is_int) { b->count_bytes_sent += scount[q] * es; }
        else { b->data_bytes_sent += scount[q] * es; b->data_bytes_recv += rcount[q] * es; }
    }
    profile_begin(PROFILE_COMM_EP); /* --profile-steps (llmc/profile.h) */
    comm_p2p_post(c, ops, n); /* defer: completed by moe_ep_comm_wait (or by the next post on this group) */
    if (!defer) { comm_p2p_wait(c); }
    profile_end();
}
static inline void moe_ep_comm_wait(void* ctx) {
    MoEEpComm* b = (MoEEpComm*)ctx;
    profile_begin(PROFILE_COMM_EP);
    comm_p2p_wait(&b->comm);
    profile_end();
}

/* binds b to a private duplicate of `group` (collective over the group; a group of one binds nothing) and returns
 * the model's view in b->ep (size 1 when the group has one process); floatX moves as `dtype` */
static inline MoEExpertParallel* moe_ep_comm_init(MoEEpComm* b, Comm* group, CommDtype dtype) {
    memset(b, 0, sizeof(*b));
    b->dtype = dtype;
    b->ep.rank = 0;
    b->ep.size = 1;
    if (group->world > 1) {
        comm_split(group, 0, group->rank, &b->comm);
        b->active = 1;
        b->ep.rank = b->comm.rank;
        b->ep.size = b->comm.world;
        b->ep.ctx = b;
        b->ep.all_to_all = moe_ep_comm_all_to_all;
        b->ep.wait = moe_ep_comm_wait;
    }
    return &b->ep;
}

/* zeroes the counters (the Comm's, the byte and the row counters) */
static inline void moe_ep_comm_reset(MoEEpComm* b) {
    if (b->active) { comm_counters_reset(&b->comm); }
    b->data_bytes_sent = b->data_bytes_recv = b->count_bytes_sent = 0;
    b->ep.rows_sent = b->ep.rows_recv = 0;
}

/* the all-to-all bytes one rank sends per optimizer step under perfectly balanced routing without drops: Lm MoE
 * blocks x `micro` micro-steps x 4 exchanges (forward dispatch and combine, backward dispatch and combine) x the
 * N*k rows of a micro-batch of N tokens, of which (p-1)/p leave the rank, x C values of `value_bytes` each (the
 * count exchanges, (p-1) x E/p int32 per block and micro-step, not included) */
static inline double moe_ep_balanced_bytes(int Lm, int micro, size_t N, int k, int p, int C, size_t value_bytes) {
    return (double)Lm * micro * 4.0 * (double)N * k * (p - 1) / p * C * (double)value_bytes;
}

/* ends the private group (collective) */
static inline void moe_ep_comm_free(MoEEpComm* b) {
    if (b->active) { comm_finalize(&b->comm); b->active = 0; }
}

#endif /* LLMC_MOE_EP_COMM_H */
