/*
 * llmc/batch_pipeline.h -- training batches double-buffered between a DataLoader and the device, so the next
 * batch is read and uploaded while the current micro-step computes (llmc/README.md, "Layers").
 *
 * Batch k of the run is trained from slot k % 2: a pinned host buffer (inputs then targets, 2*B*T int32) and its
 * device copy. After queueing micro-step k's forward, the trainer loads batch k+1 into the other slot
 * (batch_pipeline_load), whose upload is queued on the copy stream (dev_memcpy_h2d_async), so the host reads the
 * data and the copy runs while the GPU computes; batch_pipeline_take makes the main stream wait for the upload's
 * event before micro-step k+1's kernels. A slot's pinned buffer is refilled only after its previous upload
 * finished (dev_event_synchronize), and its device buffer is overwritten only by an upload that starts after the
 * work already queued on the main stream, which includes micro-step k-1, the last reader of that slot. While a
 * batch is pending the loader is one batch ahead, so a checkpoint saves batch_pipeline_data_state: the loader
 * state from before the pending batch, i.e. the position of the next batch to train on. On the CPU backend the
 * events are no-ops and the copies happen at once. Buffers are allocated on first use. Errors: allocation
 * failures exit with one line; loading while a batch is pending is an internal error (FATAL).
 */
#ifndef LLMC_BATCH_PIPELINE_H
#define LLMC_BATCH_PIPELINE_H

#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/dataloader.h"
#include "llmc/profile.h"

typedef struct {
    DataLoader* loader;        /* the training loader (not owned) */
    int B, T;
    int* host[2];              /* pinned (host_malloc_pinned): inputs (B*T) then targets (B*T) */
    int* dev[2];               /* device copies, same layout */
    DevEvent uploaded[2];      /* recorded when the slot's upload has finished */
    int next;                  /* slot of the next batch to train on */
    int pending;               /* 1 = slot `next` holds a loaded batch that is not trained on yet */
    DataLoaderState before_pending; /* loader state before the pending batch was loaded */
    int allocated;
} BatchPipeline;

static inline void batch_pipeline_init(BatchPipeline* p, DataLoader* loader, int B, int T) {
    memset(p, 0, sizeof(*p));
    p->loader = loader;
    p->B = B;
    p->T = T;
}

/* loads the loader's next batch into the free slot and queues its upload (see the header comment) */
static inline void batch_pipeline_load(BatchPipeline* p) {
    size_t n = (size_t)p->B * p->T;
    if (!p->allocated) {
        for (int i = 0; i < 2; i++) {
            p->host[i] = (int*)host_malloc_pinned(2 * n * sizeof(int), "pinned training batch");
            p->dev[i] = (int*)dev_malloc(2 * n * sizeof(int), "training batch");
            p->uploaded[i] = dev_event_create();
        }
        p->allocated = 1;
    }
    if (p->pending) { FATAL("internal: a training batch is already loaded ahead"); }
    profile_begin(PROFILE_DATA); /* --profile-steps (llmc/profile.h) */
    int slot = p->next;
    dataloader_get_state(p->loader, &p->before_pending);
    dataloader_next_batch(p->loader);
    dev_event_synchronize(p->uploaded[slot]); /* the slot's previous upload has left the pinned buffer */
    memcpy(p->host[slot], p->loader->inputs, n * sizeof(int));
    memcpy(p->host[slot] + n, p->loader->targets, n * sizeof(int));
    dev_memcpy_h2d_async(p->dev[slot], p->host[slot], 2 * n * sizeof(int), p->uploaded[slot]);
    p->pending = 1;
    profile_end();
}

/* the slot of the next batch to train on (loaded now unless loaded ahead); main-stream work queued after this
 * call sees its upload */
static inline int batch_pipeline_take(BatchPipeline* p) {
    profile_begin(PROFILE_DATA);
    if (!p->pending) { batch_pipeline_load(p); }
    int slot = p->next;
    dev_wait_event(p->uploaded[slot]);
    p->pending = 0;
    p->next ^= 1;
    profile_end();
    return slot;
}

/* slot's tokens: inputs (B,T) and targets (B,T) on the device, inputs on the (pinned) host */
static inline const int* batch_pipeline_inputs(const BatchPipeline* p, int slot) { return p->dev[slot]; }
static inline const int* batch_pipeline_targets(const BatchPipeline* p, int slot) {
    return p->dev[slot] + (size_t)p->B * p->T;
}
static inline const int* batch_pipeline_host_inputs(const BatchPipeline* p, int slot) { return p->host[slot]; }

/* the loader state of the next batch to train on (not of a batch already loaded ahead): what a checkpoint saves */
static inline void batch_pipeline_data_state(const BatchPipeline* p, DataLoaderState* ls) {
    if (p->pending) { *ls = p->before_pending; } else { dataloader_get_state(p->loader, ls); }
}

/* forgets a batch loaded ahead (after the loader was moved, e.g. by a resume) */
static inline void batch_pipeline_drop_pending(BatchPipeline* p) { p->pending = 0; }

static inline void batch_pipeline_free(BatchPipeline* p) {
    if (p->allocated) {
        dev_synchronize();
        for (int i = 0; i < 2; i++) {
            dev_event_synchronize(p->uploaded[i]);
            dev_event_destroy(p->uploaded[i]);
            host_free_pinned(p->host[i]);
            dev_free(p->dev[i]);
        }
    }
    DataLoader* loader = p->loader;
    int B = p->B, T = p->T;
    memset(p, 0, sizeof(*p));
    p->loader = loader;
    p->B = B;
    p->T = T;
}

#endif /* LLMC_BATCH_PIPELINE_H */
