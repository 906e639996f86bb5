/*
 * llmc/tp_replicas.h -- the tensors every tensor-parallel rank holds whole (the sharding table's TP_REPLICATED rows,
 * llmc/sharding.h: wpe, the norms' weights and biases, the row-parallel biases, QK-norm weights), kept bit-identical
 * over the tp group after the optimizer update where the update could part them (llmc/README.md, "Gradient
 * compression"): with --grad-compress, each tp rank's data-parallel reduction compresses its own buckets, whose
 * other elements (its matrix slices) differ between tp ranks, so the replicated elements are quantised with other
 * block scales or fall in another top-k set, and the copies would drift apart by roundings. tp rank 0's copies are
 * sent to the other tp ranks once per step (a few C per layer floatX: 34,560 values on d2); the others' own
 * updates of them are overwritten, and the checkpoint writes tp rank 0's optimizer state of them
 * (llmc/train_state.h), so a resume continues bit for bit. Uncompressed reductions need none of it: every tp rank's
 * flat buffer has the same tensor sizes, so one element is summed in the same order on every tp rank.
 * Collective over the tp group (every rank calls it); errors: the transfers check their own calls (llmc/comm.h).
 */
#ifndef LLMC_TP_REPLICAS_H
#define LLMC_TP_REPLICAS_H

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/gpt2.h"
#include "llmc/sharding.h"

/* model: this rank's part (parameters on the device, floatX); tp: its tensor-parallel group. No-op for tp = 1. */
static inline void tp_sync_replicas(GPT2* model, Comm* tp) {
    if (tp->world < 2) { return; }
    CommP2P* ops = (CommP2P*)malloc_check((size_t)NUM_PARAMETER_TENSORS * (size_t)tp->world * sizeof(CommP2P),
                                          "tp replica transfers");
    int n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (shard_tp_split(i) || model->param_sizes[i] == 0) { continue; }
        for (int peer = 1; peer < tp->world; peer++) { /* rank 0 sends to every peer; a peer receives once */
            if (tp->rank != 0 && tp->rank != peer) { continue; }
            CommP2P op = {tp->rank == 0, tp->rank == 0 ? peer : 0, model->params.t[i], floatx_comm_dtype(),
                          model->param_sizes[i], i};
            ops[n++] = op;
        }
    }
    profile_begin(PROFILE_COMM_TP);
    if (n > 0) { comm_p2p_batch(tp, ops, n); }
    comm_join(tp); /* the next forward reads the received copies */
    profile_end();
    free(ops);
}

#endif /* LLMC_TP_REPLICAS_H */
