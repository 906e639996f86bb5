/*
 * llmc/gpt2_pair.h -- DualPipe's overlapped forward & backward chunk pair (Liu et al. 2024, "DeepSeek-V3 Technical
 * Report", section 3.2.1 and Figure 4): the forward of one micro-batch through one model chunk and the backward of
 * another micro-batch through another chunk, run interleaved on one process so that each pass's communication
 * flies while the other computes (llmc/README.md, "Pipeline parallelism", overlapped pairs).
 *
 * A pass (GPT2Pass) is gpt2_forward or gpt2_backward cut into steps at the points where it would wait for a
 * collective it has posted: the begin (embedding / head backward), one step per dense block, three per MoE block
 * (llmc/moe.h's phases: the dispatch all-to-all is posted at the end of the first, the combine at the end of the
 * second; each phase waits for its own all-to-all first), the end. gpt2_pair alternates one step of each pass until
 * both are done: while the forward's dispatch flies the backward computes a block, and so on (under expert
 * parallelism; without it, or in a dense model, nothing is posted and the pair is the two passes interleaved).
 * The steps are gpt2_forward's and gpt2_backward's own parts (llmc/gpt2.h), so a pass run in steps computes what
 * the one-piece call computes, bit for bit: the two passes use two chunk models (their own activations and
 * scratch) and only the backward writes gradients.
 * Shapes and dtypes: those of gpt2_forward / gpt2_backward (tokens (B,T) int32 on the device, activations floatX).
 * The two models must be different chunk instances (FATAL otherwise: they would share scratch). Collective
 * ordering: every rank of a tp or ep group runs the same pair (the same schedule), so the posts match.
 * Errors: internal misuse FATALs.
 */
#ifndef LLMC_GPT2_PAIR_H
#define LLMC_GPT2_PAIR_H

#include "llmc/utils.h"
#include "llmc/gpt2.h"
#include "llmc/profile.h"

typedef struct {
    GPT2* m;
    int backward;                /* 0: gpt2_forward's steps, 1: gpt2_backward's */
    int B, T, gelu_fusion, write_dlogits;
    float dloss;
    const int *inputs, *targets, *host_inputs;
    const GPT2GradTarget* g;
    int l, phase;                /* the next block (-1 before the begin, n_layers after the blocks: the end) and its
                                  * next MoE phase */
    int done;
    GPT2MoEBlock moe;            /* the MoE block in progress */
} GPT2Pass;

/* a forward pass in steps, with gpt2_forward's arguments */
static inline GPT2Pass gpt2_pass_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, int gelu_fusion,
                                         float dloss, int write_dlogits) {
    GPT2Pass p;
    memset(&p, 0, sizeof(p));
    p.m = m; p.inputs = inputs; p.targets = targets; p.B = B; p.T = T; p.gelu_fusion = gelu_fusion; p.dloss = dloss;
    p.write_dlogits = write_dlogits; p.l = -1;
    return p;
}

/* a backward pass in steps, with gpt2_backward's arguments */
static inline GPT2Pass gpt2_pass_backward(GPT2* m, const GPT2GradTarget* g, const int* inputs, const int* host_inputs,
                                          int B, int T) {
    GPT2Pass p;
    memset(&p, 0, sizeof(p));
    p.m = m; p.backward = 1; p.g = g; p.inputs = inputs; p.host_inputs = host_inputs; p.B = B; p.T = T;
    p.l = m->n_layers;
    return p;
}

/* one step of a forward pass: the begin, a dense block, a MoE block's phase, or the end */
static inline void gpt2_pass_forward_step(GPT2Pass* p) {
    GPT2* m = p->m;
    if (p->l < 0) {
        gpt2_forward_begin(m, p->inputs, p->targets, p->B, p->T, p->gelu_fusion, p->dloss, p->write_dlogits);
        p->l = 0;
    } else if (p->l == m->n_layers) {
        gpt2_forward_end(m, p->targets, p->B, p->T, p->dloss, p->write_dlogits);
        p->done = 1;
    } else if (!gpt2_stage_is_moe(&m->config.moe, &m->stage, p->l)) {
        gpt2_block_forward(m, p->l++, p->B, p->T, p->gelu_fusion, 1);
    } else {
        gpt2_moe_block_forward(m, &p->moe, p->l, p->B, p->T, p->phase, 1);
        if (++p->phase == 3) { p->phase = 0; p->l++; }
    }
}

/* one step of a backward pass: the begin, a dense block, a MoE block's phase, or the end */
static inline void gpt2_pass_backward_step(GPT2Pass* p) {
    GPT2* m = p->m;
    if (p->l == m->n_layers) {
        gpt2_backward_begin(m, p->g, p->B, p->T);
        p->l--;
    } else if (p->l < 0) {
        gpt2_backward_end(m, p->g, p->inputs, p->host_inputs, p->B, p->T);
        p->done = 1;
    } else if (!gpt2_stage_is_moe(&m->config.moe, &m->stage, p->l)) {
        gpt2_backward_layer_begin(m, p->g, p->l, p->B, p->T);
        gpt2_block_backward(m, p->g, p->l, p->B, p->T);
        gpt2_backward_layer_end(m, p->g, p->l--);
    } else {
        if (p->phase == 0) { gpt2_backward_layer_begin(m, p->g, p->l, p->B, p->T); }
        gpt2_moe_block_backward(m, p->g, &p->moe, p->l, p->B, p->T, p->phase);
        if (++p->phase == 3) { p->phase = 0; gpt2_backward_layer_end(m, p->g, p->l--); }
    }
}

/* runs the next step of pass p (each step in its own profile pass); 0 once p is done */
static inline int gpt2_pass_step(GPT2Pass* p) {
    if (p->done) { return 0; }
    profile_begin_pass(p->backward ? PROFILE_BWD : PROFILE_FWD, p->backward ? PROFILE_LM_HEAD : PROFILE_EMBEDDING);
    if (p->backward) { gpt2_pass_backward_step(p); } else { gpt2_pass_forward_step(p); }
    profile_end();
    return !p->done;
}

/* Runs forward pass f and backward pass b as one overlapped pair: a step of f, a step of b, ... until both are done
 * (the forward first: its dispatch is posted before the backward's first block computes). */
static inline void gpt2_pair(GPT2Pass* f, GPT2Pass* b) {
    if (f->m == b->m) { FATAL("internal: an overlapped pair on one model chunk (its passes would share scratch)"); }
    int more_f = 1, more_b = 1;
    while (more_f || more_b) {
        if (more_f) { more_f = gpt2_pass_step(f); }
        if (more_b) { more_b = gpt2_pass_step(b); }
    }
}

#endif /* LLMC_GPT2_PAIR_H */
