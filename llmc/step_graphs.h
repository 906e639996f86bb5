/*
 * llmc/step_graphs.h -- --cuda-graphs: one micro-step's forward and backward captured as a device graph and
 * replayed (llmc/backend.h's dev_graph_*; a no-op backend on the CPU, where the trainer refuses the flag). Shapes:
 * the batch slots of llmc/batch_pipeline.h, (B,T) int32 tokens; the model's own buffers. Errors: the backend's
 * checked calls (file:line). The trainer decides which micro-steps may replay (never one that issues gradient
 * buckets: collectives are not captured; llmc/zero.h).
 */
#ifndef LLMC_STEP_GRAPHS_H
#define LLMC_STEP_GRAPHS_H

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"
#include "llmc/batch_pipeline.h"

/* --cuda-graphs 1: after one eager warm-up micro-step (cuBLASLt plans, kernel attributes and buffers set up), the
 * forward+backward of a micro-step on batch slot i is captured once into exec[i] (it bakes in the slot's device
 * buffers, every model buffer, the gradient target and dloss) and replayed for every later micro-step on that
 * slot. Host work of a micro-step happens before its replay: the batch upload (llmc/batch_pipeline.h) and the
 * encoder-backward token bucketing into pinned staging buffer i (encoder_backward_stage), which the graph's first
 * copy reads; the staging waits for the previous replay of exec[i] (two micro-steps back). A new dloss (FP16 loss
 * scaling) recaptures. Micro-steps whose backward issues gradient buckets are never captured (llmc/zero.h). */
typedef struct {
    int warm;                  /* the eager warm-up micro-step has run */
    int captured[2];
    DevGraph exec[2];
    float dloss[2];            /* dloss baked into exec[i] */
    DevEvent replayed[2];      /* recorded after each replay of exec[i] */
    int events;                /* replayed[] created */
    long replays;              /* graph replays so far (tests) */
} MicroStepGraphs;

/* --cuda-graphs 1: runs forward+backward on batch slot `slot` as a graph replay (capturing it first if needed;
 * the captured backward writes where `grads` says, which must have no reducing hook), loads the next batch if
 * `load_next` (its upload overlaps the replay) and returns 1; returns 0 when the caller must run the micro-step
 * eagerly and load the next batch itself (the warm-up micro-step) */
static inline int graph_micro_step(MicroStepGraphs* g, GPT2* m, BatchPipeline* batches, const GPT2GradTarget* grads,
                            int slot, float dloss, int load_next, int gelu_fusion) {
    int B = batches->B, T = batches->T;
    if (!g->warm) { g->warm = 1; return 0; }
    if (!g->events) {
        for (int i = 0; i < 2; i++) { g->replayed[i] = dev_event_create(); }
        g->events = 1;
    }
    const int* inputs = batch_pipeline_inputs(batches, slot);
    const int* host_inputs = batch_pipeline_host_inputs(batches, slot);
    dev_event_synchronize(g->replayed[slot]); /* the previous replay of this graph is done with its staging buffer */
    encoder_backward_stage(slot, host_inputs, B, T);
    if (!g->captured[slot] || g->dloss[slot] != dloss) {
        if (g->captured[slot]) { dev_graph_destroy(g->exec[slot]); }
        dev_graph_begin_capture();
        gpt2_forward(m, inputs, batch_pipeline_targets(batches, slot), B, T, gelu_fusion, dloss, 1);
        gpt2_backward(m, grads, inputs, host_inputs, B, T);
        g->exec[slot] = dev_graph_end_capture();
        g->captured[slot] = 1;
        g->dloss[slot] = dloss;
    }
    /* queued before the replay: the upload into the other slot waits only for the work before it (the previous
     * micro-step, that slot's last reader) and then overlaps this replay */
    if (load_next) { batch_pipeline_load(batches); }
    dev_graph_launch(g->exec[slot]);
    dev_event_record(g->replayed[slot]);
    g->replays++;
    return 1;
}

static inline void graphs_free(MicroStepGraphs* g) {
    for (int i = 0; i < 2; i++) {
        if (g->events) { dev_event_synchronize(g->replayed[i]); dev_event_destroy(g->replayed[i]); }
        if (g->captured[i]) { dev_graph_destroy(g->exec[i]); }
    }
    memset(g, 0, sizeof(*g));
}

#endif /* LLMC_STEP_GRAPHS_H */
