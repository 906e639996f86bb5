/*
 * llmc/pipeline.h -- pipeline-parallel schedules as data (llmc/README.md, "Pipeline parallelism"): a generator
 * that lists, for every stage, the ordered actions of one optimizer step, and a simulator that checks any such
 * set of lists (data dependencies, deadlock freedom, peak live activations) before anything runs.
 *
 * Layout: p pipeline ranks, each holding v model chunks (v = 1 except for the interleaved schedule); virtual stage
 * k = chunk * p + rank holds the k-th of the p*v contiguous layer ranges (Narayanan et al. 2021, "Efficient
 * Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", section 2.2). m micro-batches per step
 * (the gradient-accumulation count). Activations flow from virtual stage k to k+1, gradients back from k+1 to k;
 * stage k+1 of virtual stage k lives on rank (rank + 1) % p (the last rank passes to rank 0's next chunk).
 * Schedules:
 *   gpipe        all m forwards, then all m backwards (Huang et al. 2019, "GPipe"); peak live activation sets m.
 *   1f1b         p - 1 - s warm-up forwards on rank s, then one forward and one backward alternately, then the
 *                remaining backwards (PipeDream-Flush; Narayanan et al. 2019/2021); peak min(m, p - s).
 *   interleaved  1F1B over v chunks per rank (Narayanan et al. 2021, section 2.2): warm-up (p - s - 1) * 2 +
 *                (v - 1) * p forwards, micro-batches in groups of p; p >= 2 and m a multiple of p; bubble
 *                (p - 1) / (v m + p - 1) instead of (p - 1) / (m + p - 1).
 * Actions: F(i, c) / B(i, c): forward / backward of micro-batch i through chunk c; SEND_ACT / RECV_ACT of the
 * activation (B,T,C) of micro-batch i leaving / entering chunk c; SEND_GRAD / RECV_GRAD of its gradient. Transfers
 * with the same `group` number, adjacent in the list, are posted together and complete together (MPI: non-blocking
 * sends and receives and one wait; NCCL: one ncclGroupStart/End), as Megatron-LM's batched p2p calls: that is what
 * makes the neighbours' orders compatible (a rank may post "send my activation, receive my gradient" while its
 * neighbour posts "receive that activation, send that gradient").
 * Errors: the generator exits with one line for impossible parameters; the simulator returns a message.
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_PIPELINE_H
#define LLMC_PIPELINE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"

typedef enum { PIPE_GPIPE = 0, PIPE_1F1B, PIPE_INTERLEAVED } PipeScheduleKind;

typedef enum {
    PIPE_F = 0, PIPE_B, PIPE_SEND_ACT, PIPE_RECV_ACT, PIPE_SEND_GRAD, PIPE_RECV_GRAD
} PipeActionKind;

typedef struct {
    PipeActionKind kind;
    int micro;        /* micro-batch 0..m-1 */
    int chunk;        /* model chunk on this rank 0..v-1 */
    int group;        /* transfers: adjacent ones with the same group are posted together; -1 for F and B */
} PipeAction;

typedef struct {
    PipeScheduleKind kind;
    int p, m, v;      /* pipeline ranks, micro-batches, chunks per rank */
    int* count;       /* (p) actions of each rank */
    PipeAction** act; /* (p) each rank's actions */
} PipeSchedule;

static inline const char* pipe_schedule_name(PipeScheduleKind k) {
    return k == PIPE_GPIPE ? "gpipe" : k == PIPE_1F1B ? "1f1b" : "interleaved";
}
static inline const char* pipe_action_name(PipeActionKind k) {
    static const char* const names[] = {"F", "B", "send-act", "recv-act", "send-grad", "recv-grad"};
    return names[k];
}

/* 1 and *kind set if `name` is gpipe, 1f1b or interleaved */
static inline int pipe_schedule_from_name(const char* name, PipeScheduleKind* kind) {
    for (int k = 0; k < 3; k++) {
        if (strcmp(name, pipe_schedule_name((PipeScheduleKind)k)) == 0) { *kind = (PipeScheduleKind)k; return 1; }
    }
    return 0;
}

/* the bubble of a schedule with equal stage costs: idle share of every rank's step */
static inline double pipe_bubble_theory(PipeScheduleKind kind, int p, int m, int v) {
    if (kind == PIPE_INTERLEAVED) { return (double)(p - 1) / (double)(v * m + p - 1); }
    return (double)(p - 1) / (double)(m + p - 1);
}

/* the peak number of activation sets (micro-batch x chunk) rank s keeps alive at once */
static inline int pipe_peak_theory(PipeScheduleKind kind, int p, int m, int v, int s) {
    if (kind == PIPE_GPIPE) { return m * v; }
    if (kind == PIPE_1F1B) { return m < p - s ? m : p - s; }
    int warm = (p - s - 1) * 2 + (v - 1) * p + 1;
    return warm < m * v ? warm : m * v;
}

/* ---------------------------------------------------------------- generator */

typedef struct {
    PipeAction* a;
    int n, cap, group;
} PipeList;

static inline void pipe_push(PipeList* l, PipeActionKind kind, int micro, int chunk, int group) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->a = (PipeAction*)realloc(l->a, (size_t)l->cap * sizeof(PipeAction));
        if (!l->a) { FATAL("out of host memory building a pipeline schedule"); }
    }
    PipeAction x = {kind, micro, chunk, group};
    l->a[l->n++] = x;
}

/* virtual stage of chunk c on rank s, and whether it is the first / last of the p*v */
static inline int pipe_vstage(int p, int s, int c) { return c * p + s; }

/* appends F(i, c) with its receive before it (a group of its own unless merged by the caller) */
static inline void pipe_forward(PipeList* l, int p, int v, int s, int i, int c) {
    (void)v;
    if (pipe_vstage(p, s, c) > 0) { pipe_push(l, PIPE_RECV_ACT, i, c, l->group++); }
    pipe_push(l, PIPE_F, i, c, -1);
}
/* appends B(i, c) with its receive before it */
static inline void pipe_backward(PipeList* l, int p, int v, int s, int i, int c) {
    if (pipe_vstage(p, s, c) < p * v - 1) { pipe_push(l, PIPE_RECV_GRAD, i, c, l->group++); }
    pipe_push(l, PIPE_B, i, c, -1);
}
/* the sends after F(i, c) / B(i, c), each a group of its own; pipe_merge_transfers pairs them later */
static inline void pipe_send_act(PipeList* l, int p, int v, int s, int i, int c) {
    if (pipe_vstage(p, s, c) < p * v - 1) { pipe_push(l, PIPE_SEND_ACT, i, c, l->group++); }
}
static inline void pipe_send_grad(PipeList* l, int p, int s, int i, int c) {
    if (pipe_vstage(p, s, c) > 0) { pipe_push(l, PIPE_SEND_GRAD, i, c, l->group++); }
}

/* Megatron's batching: a send immediately followed by a receive (no compute between) is posted as one group */
static inline void pipe_merge_transfers(PipeList* l) {
    for (int k = 0; k + 1 < l->n; k++) {
        PipeActionKind a = l->a[k].kind, b = l->a[k + 1].kind;
        int a_send = a == PIPE_SEND_ACT || a == PIPE_SEND_GRAD, b_recv = b == PIPE_RECV_ACT || b == PIPE_RECV_GRAD;
        if (a_send && b_recv) { l->a[k + 1].group = l->a[k].group; }
    }
}

/* the k-th forward (or backward) of rank s in the interleaved order: micro-batches in groups of p, chunks in
 * order (backwards: in reverse) */
static inline void pipe_interleaved_index(int p, int v, int k, int backward, int* micro, int* chunk) {
    int c = (k / p) % v;
    *chunk = backward ? v - 1 - c : c;
    *micro = (k / (p * v)) * p + k % p;
}

/* Rank s of the interleaved schedule, with Megatron-LM's grouping of transfers (one group after each step, which
 * sends what the step produced and receives what the next steps consume, so that neighbouring ranks' groups meet):
 * warm-up forwards, then steady iterations of one forward and one backward followed by one group of up to four
 * transfers, then the cool-down backwards. */
static inline void pipe_interleaved_rank(PipeList* l, int p, int m, int v, int s) {
    int total = m * v, nv = p * v;
    int warm = (p - s - 1) * 2 + (v - 1) * p;
    if (warm > total) { warm = total; }
    int rest = total - warm, fi, fc, bi, bc, ni, nc;
#define PIPE_VS(c) pipe_vstage(p, s, c)
    pipe_interleaved_index(p, v, 0, 0, &fi, &fc);
    if (PIPE_VS(fc) > 0) { pipe_push(l, PIPE_RECV_ACT, fi, fc, l->group++); }
    for (int k = 0; k < warm; k++) {
        pipe_interleaved_index(p, v, k, 0, &fi, &fc);
        pipe_push(l, PIPE_F, fi, fc, -1);
        int g = l->group++;
        if (PIPE_VS(fc) < nv - 1) { pipe_push(l, PIPE_SEND_ACT, fi, fc, g); }
        if (k + 1 < total) {
            pipe_interleaved_index(p, v, k + 1, 0, &ni, &nc);
            if (PIPE_VS(nc) > 0) { pipe_push(l, PIPE_RECV_ACT, ni, nc, g); }
        }
        if (k == warm - 1 && rest > 0) {
            pipe_interleaved_index(p, v, 0, 1, &bi, &bc);
            if (PIPE_VS(bc) < nv - 1) { pipe_push(l, PIPE_RECV_GRAD, bi, bc, g); }
        }
    }
    for (int k = 0; k < rest; k++) {
        pipe_interleaved_index(p, v, warm + k, 0, &fi, &fc);
        pipe_interleaved_index(p, v, k, 1, &bi, &bc);
        pipe_push(l, PIPE_F, fi, fc, -1);
        pipe_push(l, PIPE_B, bi, bc, -1);
        int g = l->group++;
        if (PIPE_VS(fc) < nv - 1) { pipe_push(l, PIPE_SEND_ACT, fi, fc, g); }
        if (PIPE_VS(bc) > 0) { pipe_push(l, PIPE_SEND_GRAD, bi, bc, g); }
        if (warm + k + 1 < total) {
            pipe_interleaved_index(p, v, warm + k + 1, 0, &ni, &nc);
            if (PIPE_VS(nc) > 0) { pipe_push(l, PIPE_RECV_ACT, ni, nc, g); }
        }
        pipe_interleaved_index(p, v, k + 1, 1, &ni, &nc);
        if (PIPE_VS(nc) < nv - 1) { pipe_push(l, PIPE_RECV_GRAD, ni, nc, g); }
    }
    for (int k = rest; k < total; k++) {
        pipe_interleaved_index(p, v, k, 1, &bi, &bc);
        if (k == rest && rest == 0 && PIPE_VS(bc) < nv - 1) { pipe_push(l, PIPE_RECV_GRAD, bi, bc, l->group++); }
        pipe_push(l, PIPE_B, bi, bc, -1);
        int g = l->group++;
        if (PIPE_VS(bc) > 0) { pipe_push(l, PIPE_SEND_GRAD, bi, bc, g); }
        if (k + 1 < total) {
            pipe_interleaved_index(p, v, k + 1, 1, &ni, &nc);
            if (PIPE_VS(nc) < nv - 1) { pipe_push(l, PIPE_RECV_GRAD, ni, nc, g); }
        }
    }
#undef PIPE_VS
}

/* Builds the schedule of `kind` for p ranks, m micro-batches, v chunks per rank (1 unless interleaved). Exits with
 * one line naming the flag for impossible parameters: interleaved needs m a multiple of p and v >= 2; 1f1b and
 * interleaved need m >= p. Free with pipe_schedule_free. */
static inline PipeSchedule pipe_schedule_build(PipeScheduleKind kind, int p, int m, int v) {
    if (p < 1 || m < 1 || v < 1) { FATAL("pipeline schedule: p=%d, m=%d, v=%d must be positive", p, m, v); }
    if (kind != PIPE_INTERLEAVED && v != 1) { FATAL("--pp-virtual %d needs --pp-schedule interleaved", v); }
    if (kind == PIPE_INTERLEAVED && (v < 2 || p < 2 || m % p != 0)) {
        FATAL("--pp-schedule interleaved needs --pp >= 2 (got %d), --pp-virtual >= 2 (got %d) and micro-batches per step "
              "(%d) a multiple of --pp", p, v, m);
    }
    if (kind != PIPE_GPIPE && m < p) {
        FATAL("--pp-schedule %s needs at least as many micro-batches per step as --pp stages: %d < %d (raise -d or use "
              "--pp-schedule gpipe)", pipe_schedule_name(kind), m, p);
    }
    PipeSchedule sc;
    sc.kind = kind; sc.p = p; sc.m = m; sc.v = v;
    sc.count = (int*)calloc_check((size_t)p, sizeof(int), "pipeline schedule counts");
    sc.act = (PipeAction**)calloc_check((size_t)p, sizeof(PipeAction*), "pipeline schedule");
    for (int s = 0; s < p; s++) {
        PipeList l;
        memset(&l, 0, sizeof(l));
        if (kind == PIPE_GPIPE) {
            for (int i = 0; i < m; i++) { pipe_forward(&l, p, 1, s, i, 0); pipe_send_act(&l, p, 1, s, i, 0); }
            for (int i = 0; i < m; i++) { pipe_backward(&l, p, 1, s, i, 0); pipe_send_grad(&l, p, s, i, 0); }
        } else if (kind == PIPE_INTERLEAVED) {
            pipe_interleaved_rank(&l, p, m, v, s);
        } else { /* 1f1b */
            int warm = p - 1 - s < m ? p - 1 - s : m;
            int f = 0, b = 0;
            for (; f < warm; f++) { pipe_forward(&l, p, 1, s, f, 0); pipe_send_act(&l, p, 1, s, f, 0); }
            for (; f < m; f++, b++) { /* steady state: one forward, one backward */
                pipe_forward(&l, p, 1, s, f, 0);
                pipe_send_act(&l, p, 1, s, f, 0);
                pipe_backward(&l, p, 1, s, b, 0);
                pipe_send_grad(&l, p, s, b, 0);
            }
            for (; b < m; b++) { pipe_backward(&l, p, 1, s, b, 0); pipe_send_grad(&l, p, s, b, 0); } /* cool-down */
        }
        if (kind != PIPE_INTERLEAVED) { pipe_merge_transfers(&l); }
        sc.count[s] = l.n;
        sc.act[s] = l.a;
    }
    return sc;
}

static inline void pipe_schedule_free(PipeSchedule* sc) {
    for (int s = 0; s < sc->p; s++) { free(sc->act[s]); }
    free(sc->act);
    free(sc->count);
    memset(sc, 0, sizeof(*sc));
}

/* ---------------------------------------------------------------- simulator */

/* the rank that holds the next / previous virtual stage of chunk c on rank s, and that stage's chunk there */
static inline void pipe_next(int p, int s, int c, int* rank, int* chunk) {
    *rank = (s + 1) % p;
    *chunk = s == p - 1 ? c + 1 : c;
}
static inline void pipe_prev(int p, int s, int c, int* rank, int* chunk) {
    *rank = (s - 1 + p) % p;
    *chunk = s == 0 ? c - 1 : c;
}

/* the transfer a rank posts that matches x (posted by rank s): its peer, and the peer's action */
static inline void pipe_partner(const PipeSchedule* sc, int s, const PipeAction* x, int* peer, PipeAction* y) {
    int c = x->chunk;
    y->micro = x->micro;
    y->group = 0;
    switch (x->kind) {
    case PIPE_SEND_ACT: pipe_next(sc->p, s, c, peer, &y->chunk); y->kind = PIPE_RECV_ACT; break;
    case PIPE_RECV_ACT: pipe_prev(sc->p, s, c, peer, &y->chunk); y->kind = PIPE_SEND_ACT; break;
    case PIPE_SEND_GRAD: pipe_prev(sc->p, s, c, peer, &y->chunk); y->kind = PIPE_RECV_GRAD; break;
    default: pipe_next(sc->p, s, c, peer, &y->chunk); y->kind = PIPE_SEND_GRAD; break; /* PIPE_RECV_GRAD */
    }
}

typedef struct {
    int ok;                 /* 1: every action ran, in an order the dependencies allow, without deadlock */
    char error[256];
    int peak[64];           /* peak live activation sets per rank (p <= 64) */
    int steps;              /* simulated rounds */
} PipeSimResult;

/* the end of the group of transfers starting at action a of rank s */
static inline int pipe_group_end(const PipeSchedule* sc, int s, int a) {
    int g = sc->act[s][a].group, e = a;
    while (e < sc->count[s] && sc->act[s][e].kind >= PIPE_SEND_ACT && sc->act[s][e].group == g) { e++; }
    return e;
}

/* the simulator's state: per rank the next action, live activation sets and which transfers are matched; per (rank,
 * micro-batch, chunk) cell whether F / B ran and whether the input activation / output gradient has arrived */
typedef struct {
    const PipeSchedule* sc;
    int p, m, v;
    char *fdone, *bdone, *act_in, *grad_in;
    int *pc, *live;
    char** matched;
} PipeSim;

static inline size_t pipe_sim_cell(const PipeSim* S, int s, int i, int c) {
    return ((size_t)s * S->m + (size_t)i) * S->v + (size_t)c;
}

/* the F or B at rank s's next action: returns 1 if it ran, 0 if its input is not there yet, -1 (r->error) if it is
 * malformed or out of order */
static inline int pipe_sim_compute(PipeSim* S, int s, PipeSimResult* r) {
    const PipeAction* x = &S->sc->act[s][S->pc[s]];
    size_t cell = pipe_sim_cell(S, s, x->micro, x->chunk);
    if (x->kind == PIPE_F) {
        if (S->fdone[cell]) { snprintf(r->error, sizeof(r->error), "rank %d: F(%d,%d) twice", s, x->micro, x->chunk); return -1; }
        if (!S->act_in[cell]) { return 0; }
        S->fdone[cell] = 1;
        if (++S->live[s] > r->peak[s]) { r->peak[s] = S->live[s]; }
        if (pipe_vstage(S->p, s, x->chunk) == S->p * S->v - 1) { S->grad_in[cell] = 1; } /* the loss gives the last stage its gradient */
        return 1;
    }
    if (!S->fdone[cell] || S->bdone[cell]) {
        snprintf(r->error, sizeof(r->error), "rank %d: B(%d,%d) %s", s, x->micro, x->chunk,
                 S->bdone[cell] ? "twice" : "before its F");
        return -1;
    }
    if (!S->grad_in[cell]) { return 0; }
    S->bdone[cell] = 1;
    S->live[s]--;
    return 1;
}

/* rank s's transfer group at its next action: pairs each unmatched transfer with the partner in the peer's current
 * group (setting *progressed when one pairs); returns the group's length once every transfer is paired (its
 * receives have landed), 0 while one waits, -1 (r->error) when a send is posted before its data exists */
static inline int pipe_sim_transfers(PipeSim* S, int s, PipeSimResult* r, int* progressed) {
    const PipeSchedule* sc = S->sc;
    int start = S->pc[s], end = pipe_group_end(sc, s, start), all = 1;
    for (int a = start; a < end; a++) {
        if (S->matched[s][a]) { continue; }
        const PipeAction* t = &sc->act[s][a];
        size_t tc = pipe_sim_cell(S, s, t->micro, t->chunk);
        if ((t->kind == PIPE_SEND_ACT && !S->fdone[tc]) || (t->kind == PIPE_SEND_GRAD && !S->bdone[tc])) {
            snprintf(r->error, sizeof(r->error), "rank %d: %s(%d,%d) posted before its data exists", s,
                     pipe_action_name(t->kind), t->micro, t->chunk);
            return -1;
        }
        int peer;
        PipeAction want;
        pipe_partner(sc, s, t, &peer, &want);
        if (S->pc[peer] < sc->count[peer] && sc->act[peer][S->pc[peer]].kind >= PIPE_SEND_ACT) {
            int pe = pipe_group_end(sc, peer, S->pc[peer]);
            for (int b = S->pc[peer]; b < pe; b++) {
                const PipeAction* u = &sc->act[peer][b];
                if (!S->matched[peer][b] && u->kind == want.kind && u->micro == want.micro && u->chunk == want.chunk) {
                    S->matched[s][a] = S->matched[peer][b] = 1;
                    *progressed = 1;
                    break;
                }
            }
        }
        if (!S->matched[s][a]) { all = 0; }
    }
    if (!all) { return 0; }
    for (int a = start; a < end; a++) { /* receives land */
        const PipeAction* t = &sc->act[s][a];
        if (t->kind == PIPE_RECV_ACT) { S->act_in[pipe_sim_cell(S, s, t->micro, t->chunk)] = 1; }
        if (t->kind == PIPE_RECV_GRAD) { S->grad_in[pipe_sim_cell(S, s, t->micro, t->chunk)] = 1; }
    }
    return end - start;
}

/* Runs the schedule on an abstract machine. Each round every rank tries its next action: F(i,c) needs its
 * activation (received, or the model input on virtual stage 0); B(i,c) needs F(i,c) done and its gradient
 * (received, or the loss on the last virtual stage). A group of transfers is posted when the rank reaches it; a
 * transfer matches when its partner (the peer's transfer of the same micro-batch and chunk, the other direction)
 * is posted too (both sides then count it done), a send needing its data to exist; the rank goes past the group
 * when all of its transfers matched (MPI: non-blocking calls and one wait; NCCL: a group). A round in which no rank
 * progresses is a deadlock. Reports the first violation and the peak number of live activation sets (F done, B not
 * yet) per rank. */
static inline PipeSimResult pipe_simulate(const PipeSchedule* sc) {
    PipeSimResult r;
    memset(&r, 0, sizeof(r));
    int p = sc->p, m = sc->m, v = sc->v;
    if (p > 64) { snprintf(r.error, sizeof(r.error), "at most 64 ranks simulated"); return r; }
    size_t cells = (size_t)p * m * v;
    PipeSim S = {sc, p, m, v, (char*)calloc_check(cells, 1, "sim"), (char*)calloc_check(cells, 1, "sim"),
                 (char*)calloc_check(cells, 1, "sim"), (char*)calloc_check(cells, 1, "sim"),
                 (int*)calloc_check((size_t)p, sizeof(int), "sim"), (int*)calloc_check((size_t)p, sizeof(int), "sim"),
                 (char**)calloc_check((size_t)p, sizeof(char*), "sim")};
    for (int s = 0; s < p; s++) { S.matched[s] = (char*)calloc_check((size_t)sc->count[s] + 1, 1, "sim"); }
    for (int i = 0; i < m; i++) { S.act_in[pipe_sim_cell(&S, 0, i, 0)] = 1; }
    int remaining = 0, failed = 0;
    for (int s = 0; s < p; s++) { remaining += sc->count[s]; }
    while (remaining > 0 && !failed) {
        int progressed = 0;
        for (int s = 0; s < p && !failed; s++) {
            if (S.pc[s] >= sc->count[s]) { continue; }
            const PipeAction* x = &sc->act[s][S.pc[s]];
            if (x->micro < 0 || x->micro >= m || x->chunk < 0 || x->chunk >= v) {
                snprintf(r.error, sizeof(r.error), "rank %d action %d: micro-batch %d / chunk %d out of range", s,
                         S.pc[s], x->micro, x->chunk);
                failed = 1;
                break;
            }
            int ran = x->kind == PIPE_F || x->kind == PIPE_B ? pipe_sim_compute(&S, s, &r)
                                                             : pipe_sim_transfers(&S, s, &r, &progressed);
            if (ran < 0) { failed = 1; break; }
            if (ran > 0) { S.pc[s] += ran; remaining -= ran; progressed = 1; }
        }
        r.steps++;
        if (!failed && !progressed) {
            int s = 0;
            while (S.pc[s] >= sc->count[s]) { s++; }
            const PipeAction* x = &sc->act[s][S.pc[s]];
            snprintf(r.error, sizeof(r.error), "deadlock: rank %d waits at action %d (%s micro-batch %d chunk %d)", s,
                     S.pc[s], pipe_action_name(x->kind), x->micro, x->chunk);
            failed = 1;
        }
    }
    for (size_t c = 0; c < cells && !failed; c++) {
        if (!S.fdone[c] || !S.bdone[c]) {
            snprintf(r.error, sizeof(r.error), "micro-batch %zu of chunk %zu on rank %zu: forward or backward missing",
                     (c / v) % m, c % v, c / ((size_t)m * v));
            failed = 1;
        }
    }
    r.ok = !failed;
    for (int s = 0; s < p; s++) { free(S.matched[s]); }
    free(S.matched); free(S.fdone); free(S.bdone); free(S.act_in); free(S.grad_in); free(S.pc); free(S.live);
    return r;
}

/* ---------------------------------------------------------------- executor */

/* One transfer as the executor hands it to the transport: the action, the pipeline rank of its peer, a tag that
 * both sides derive alike (the receiving side's micro-batch and chunk, and activation or gradient: a send and its
 * receive carry the same tag) and the activation slot of (micro, chunk) on this rank that holds the data. */
typedef struct {
    PipeAction a;
    int peer;     /* pipeline rank */
    int tag;      /* ((micro * v + receiving chunk) * 2 + is_gradient) */
    int slot;
} PipeTransfer;

/* What the executor calls. forward / backward run F / B of (micro, chunk) on activation slot `slot` of that chunk;
 * transfer posts the n transfers of one group together and returns when they are complete (on a GPU: when later
 * device work is ordered after them). They are sorted by (peer, tag) so that transports matching messages in order
 * per peer (NCCL) pair them alike on both sides. clock: seconds for the timeline (NULL: none); it must account for
 * queued device work if that is what is timed (the trainer synchronises when it records a timeline). */
typedef struct {
    void* ctx;
    void (*forward)(void* ctx, int micro, int chunk, int slot);
    void (*backward)(void* ctx, int micro, int chunk, int slot);
    void (*transfer)(void* ctx, const PipeTransfer* t, int n);
    double (*clock)(void* ctx);
} PipeExecutor;

/* one timed action: F, B, or a transfer group (kind of its first transfer, n transfers) */
typedef struct {
    PipeActionKind kind;
    int micro, chunk, n;
    double t0, t1;      /* seconds of ex->clock */
} PipeEvent;

typedef struct {
    PipeEvent* ev;
    int n, cap;
    double t0, t1;      /* the whole schedule */
} PipeTimeline;

/* the tag of transfer x of rank s (see PipeTransfer) */
static inline int pipe_tag(const PipeSchedule* sc, int s, const PipeAction* x) {
    int dst_chunk = x->chunk, r;
    if (x->kind == PIPE_SEND_ACT) { pipe_next(sc->p, s, x->chunk, &r, &dst_chunk); }
    if (x->kind == PIPE_SEND_GRAD) { pipe_prev(sc->p, s, x->chunk, &r, &dst_chunk); }
    int grad = x->kind == PIPE_SEND_GRAD || x->kind == PIPE_RECV_GRAD;
    return (x->micro * sc->v + dst_chunk) * 2 + grad;
}

/* Activation slots of one rank: (micro, chunk) gets a slot of its chunk when it is first touched (its activation
 * received, or its forward) and gives it back after its backward and, unless it is virtual stage 0, the send of its
 * gradient. slots[c] is the number each chunk needs (pipe_slots_needed). */
typedef struct {
    int m, v;
    int* of;        /* (v*m) slot of (chunk, micro), -1 = none */
    int* busy;      /* (v*max_slots) 1 = in use */
    int max_slots;
} PipeSlots;

static inline int pipe_slot_get(PipeSlots* ps, int micro, int chunk, int assign) {
    int* of = &ps->of[chunk * ps->m + micro];
    if (*of >= 0 || !assign) { return *of; }
    for (int k = 0; k < ps->max_slots; k++) {
        if (!ps->busy[chunk * ps->max_slots + k]) {
            ps->busy[chunk * ps->max_slots + k] = 1;
            *of = k;
            return k;
        }
    }
    FATAL("internal: pipeline rank ran out of activation slots for chunk %d (%d)", chunk, ps->max_slots);
    return -1;
}
static inline void pipe_slot_release(PipeSlots* ps, int micro, int chunk) {
    int* of = &ps->of[chunk * ps->m + micro];
    if (*of >= 0) { ps->busy[chunk * ps->max_slots + *of] = 0; }
    *of = -1;
}

/* Walks rank s's actions, assigning and releasing slots as the executor (pipe_run) does: a transfer group holds the
 * slots of all its transfers while it runs (a receive must not land in a slot a send of the same group still
 * reads), so its sends' slots are given back after the group; returns in need[c] the most slots chunk c holds at
 * once. */
static inline void pipe_slots_walk(const PipeSchedule* sc, int s, PipeSlots* ps, int* need) {
    int* live = (int*)calloc_check((size_t)sc->v, sizeof(int), "pipeline slots");
    int k = 0;
    while (k < sc->count[s]) {
        int end = sc->act[s][k].kind == PIPE_F || sc->act[s][k].kind == PIPE_B ? k + 1 : pipe_group_end(sc, s, k);
        for (int a = k; a < end; a++) { /* acquire: forwards and every transfer of the group */
            const PipeAction* x = &sc->act[s][a];
            if (x->kind == PIPE_B || pipe_slot_get(ps, x->micro, x->chunk, 0) >= 0) { continue; }
            pipe_slot_get(ps, x->micro, x->chunk, 1);
            if (++live[x->chunk] > need[x->chunk]) { need[x->chunk] = live[x->chunk]; }
        }
        for (int a = k; a < end; a++) { /* release: after the backward of virtual stage 0, after a gradient's send */
            const PipeAction* x = &sc->act[s][a];
            if ((x->kind == PIPE_B && pipe_vstage(sc->p, s, x->chunk) == 0) || x->kind == PIPE_SEND_GRAD) {
                pipe_slot_release(ps, x->micro, x->chunk);
                live[x->chunk]--;
            }
        }
        k = end;
    }
    free(live);
}

static inline PipeSlots pipe_slots_alloc(int m, int v, int max_slots) {
    PipeSlots ps;
    ps.m = m; ps.v = v; ps.max_slots = max_slots;
    ps.of = (int*)malloc_check((size_t)m * v * sizeof(int), "pipeline slots");
    ps.busy = (int*)calloc_check((size_t)v * max_slots, sizeof(int), "pipeline slots");
    for (int k = 0; k < m * v; k++) { ps.of[k] = -1; }
    return ps;
}
static inline void pipe_slots_free(PipeSlots* ps) { free(ps->of); free(ps->busy); memset(ps, 0, sizeof(*ps)); }

/* need[c] (v ints): the activation slots chunk c of rank s needs for schedule sc */
static inline void pipe_slots_needed(const PipeSchedule* sc, int s, int* need) {
    PipeSlots ps = pipe_slots_alloc(sc->m, sc->v, sc->m);
    for (int c = 0; c < sc->v; c++) { need[c] = 0; }
    pipe_slots_walk(sc, s, &ps, need);
    pipe_slots_free(&ps);
}

static inline void pipe_timeline_add(PipeTimeline* tl, PipeActionKind kind, int micro, int chunk, int n, double t0,
                                     double t1) {
    if (!tl) { return; }
    if (tl->n == tl->cap) {
        tl->cap = tl->cap ? 2 * tl->cap : 128;
        tl->ev = (PipeEvent*)realloc(tl->ev, (size_t)tl->cap * sizeof(PipeEvent));
        if (!tl->ev) { FATAL("out of host memory recording the pipeline timeline"); }
    }
    PipeEvent e = {kind, micro, chunk, n, t0, t1};
    tl->ev[tl->n++] = e;
}

static inline int pipe_transfer_cmp(const void* x, const void* y) {
    const PipeTransfer* a = (const PipeTransfer*)x;
    const PipeTransfer* b = (const PipeTransfer*)y;
    if (a->peer != b->peer) { return a->peer < b->peer ? -1 : 1; }
    return a->tag < b->tag ? -1 : a->tag > b->tag;
}

/* Runs rank s's actions of schedule sc through ex, with activation slots ps (pipe_slots_alloc with at least
 * pipe_slots_needed slots per chunk); records every action in tl (when tl and ex->clock are set; tl is reset). */
static inline void pipe_run(const PipeSchedule* sc, int s, const PipeExecutor* ex, PipeSlots* ps, PipeTimeline* tl) {
    int timed = tl && ex->clock;
    if (timed) { tl->n = 0; tl->t0 = ex->clock(ex->ctx); }
    PipeTransfer* group = (PipeTransfer*)malloc_check((size_t)(sc->count[s] + 1) * sizeof(PipeTransfer), "pipeline group");
    int k = 0;
    while (k < sc->count[s]) {
        const PipeAction* x = &sc->act[s][k];
        double t0 = timed ? ex->clock(ex->ctx) : 0.0;
        if (x->kind == PIPE_F || x->kind == PIPE_B) {
            int slot = pipe_slot_get(ps, x->micro, x->chunk, 1);
            if (x->kind == PIPE_F) { ex->forward(ex->ctx, x->micro, x->chunk, slot); }
            else { ex->backward(ex->ctx, x->micro, x->chunk, slot); }
            if (x->kind == PIPE_B && pipe_vstage(sc->p, s, x->chunk) == 0) { pipe_slot_release(ps, x->micro, x->chunk); }
            if (timed) { pipe_timeline_add(tl, x->kind, x->micro, x->chunk, 1, t0, ex->clock(ex->ctx)); }
            k++;
            continue;
        }
        int end = pipe_group_end(sc, s, k), n = 0;
        for (int a = k; a < end; a++) {
            const PipeAction* t = &sc->act[s][a];
            PipeTransfer* g = &group[n++];
            PipeAction partner;
            g->a = *t;
            pipe_partner(sc, s, t, &g->peer, &partner);
            g->tag = pipe_tag(sc, s, t);
            g->slot = pipe_slot_get(ps, t->micro, t->chunk, 1);
        }
        qsort(group, (size_t)n, sizeof(PipeTransfer), pipe_transfer_cmp);
        ex->transfer(ex->ctx, group, n);
        for (int a = 0; a < n; a++) {
            if (group[a].a.kind == PIPE_SEND_GRAD) { pipe_slot_release(ps, group[a].a.micro, group[a].a.chunk); }
        }
        if (timed) { pipe_timeline_add(tl, x->kind, x->micro, x->chunk, n, t0, ex->clock(ex->ctx)); }
        k = end;
    }
    free(group);
    if (timed) { tl->t1 = ex->clock(ex->ctx); }
}

/* seconds a timeline spent in F and B */
static inline double pipe_timeline_busy(const PipeTimeline* tl) {
    double busy = 0.0;
    for (int k = 0; k < tl->n; k++) {
        if (tl->ev[k].kind == PIPE_F || tl->ev[k].kind == PIPE_B) { busy += tl->ev[k].t1 - tl->ev[k].t0; }
    }
    return busy;
}

/* The measured bubble of one step from every rank's busy seconds and schedule seconds (p each): the step lasts as
 * long as its slowest rank, so bubble = 1 - mean(busy) / max(total), the idle share of the step averaged over the
 * ranks. With equal stage costs it is the (p-1)/(m+p-1) of pipe_bubble_theory. 0 for an empty step. */
static inline double pipe_bubble_measured(const double* busy, const double* total, int p) {
    double mean = 0.0, longest = 0.0;
    for (int s = 0; s < p; s++) { mean += busy[s] / p; longest = total[s] > longest ? total[s] : longest; }
    return longest > 0.0 ? 1.0 - mean / longest : 0.0;
}

#endif /* LLMC_PIPELINE_H */
