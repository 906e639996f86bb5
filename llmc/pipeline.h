/*
 * llmc/pipeline.h -- pipeline-parallel schedules as data (llmc/README.md, "Pipeline parallelism"): a generator
 * that lists, for every stage, the ordered actions of one optimizer step, and a simulator that checks any such
 * set of lists (data dependencies, deadlock freedom, peak live activations, and with action costs the step's
 * length) before anything runs.
 *
 * Layout: p pipeline ranks, each holding v model chunks; m micro-batches per step (the gradient-accumulation
 * count). A micro-batch goes through the virtual stages 0, 1, ..., nv-1 of its path (activations from stage k to
 * k+1, gradients back); where virtual stage k lives (rank, chunk) depends on the schedule (pipe_place,
 * pipe_vstage_of):
 *   gpipe, 1f1b, zb-h1, interleaved  virtual stage k = chunk * p + rank (v = 1 except interleaved; Narayanan et
 *                al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
 *                section 2.2): the last rank passes to rank 0's next chunk.
 *   dualpipev    v = 2, a V: chunk 0 of rank s is virtual stage s, chunk 1 is 2p-1-s; a micro-batch goes down
 *                through the chunk 0's, turns on rank p-1 (chunk 0 -> chunk 1 of the same rank: a local hand-over,
 *                no transfer action; the next chunk's input is the previous chunk's output on that rank, the
 *                previous chunk's output gradient the next chunk's input gradient: pipe_local_input) and comes back
 *                up through the chunk 1's to rank 0, which holds the last virtual stage (the loss).
 *   dualpipe     v = 2, two parameter copies: chunk 0 of rank s is stage s of the "down" pipeline, chunk 1 is
 *                stage p-1-s of the "up" pipeline; micro-batches 0 .. m/2-1 enter at rank 0 and flow down through
 *                the chunk 0's, m/2 .. m-1 enter at rank p-1 and flow up through the chunk 1's, so a micro-batch
 *                visits one chunk per rank (pipe_visits) and nv = p.
 * Schedules:
 *   gpipe        all m forwards, then all m backwards (Huang et al. 2019, "GPipe"); peak live activation sets m.
 *   1f1b         p - 1 - s warm-up forwards on rank s, then one forward and one backward alternately, then the
 *                remaining backwards (PipeDream-Flush; Narayanan et al. 2019/2021); peak min(m, p - s).
 *   interleaved  1F1B over v chunks per rank (Narayanan et al. 2021, section 2.2): warm-up (p - s - 1) * 2 +
 *                (v - 1) * p forwards, micro-batches in groups of p; p >= 2 and m a multiple of p; bubble
 *                (p - 1) / (v m + p - 1) instead of (p - 1) / (m + p - 1).
 *   zb-h1        ZB-H1 of Qi et al. 2023/2024 ("Zero Bubble Pipeline Parallelism", section 2.1, ZB1P in the
 *                DeepSeek-V3 report): the backward split into B (input gradient, on the critical path) and W
 *                (weight gradients, free to move); 1F1B's order of F and B (p - 1 - s warm-up forwards on rank s),
 *                and rank s runs W(k - s) after B(k): its first s W's are deferred and run in the cool-down, after
 *                its last B (a W goes before B(k)'s gradient send in the steady state, where that send waits for
 *                the next forward's receive in one group, and after it in the cool-down). Why s: B no longer waits
 *                for W, so the gradient crosses a stage in B instead of B + W, and the later ranks, which start
 *                last and would idle at the end, fill their tail with the deferred W's; every rank then holds at
 *                most p micro-batches between F and W (1F1B's peak, on rank 0; p - s between F and B, as 1F1B),
 *                and every rank idles (p-1)(F+B-W) per step instead of 1F1B's (p-1)(F+B+W) (F, B, W the actions'
 *                costs; the report writes B for B+W: (PP-1)(F+B-2W); exact for F = B = W in the timed simulator,
 *                dev/test/test_pipeline.c). m >= p.
 *   dualpipev    DualPipeV (DeepSeek's dualpipe/dualpipev.py; Sea AI Lab's "cut-in-half" of DualPipe), the V
 *                mapping above, rank s in dualpipev.py's eight phases: (p-1-s)*2 forwards of chunk 0; s+1 pairs
 *                F chunk 0, F chunk 1; p-1-s times B chunk 1 (W deferred), W, F chunk 1; m-2p+s+1 times F chunk 0
 *                + B chunk 1, F chunk 1 + B chunk 0 (the overlapped pairs of DualPipe: the B's `pair` mark);
 *                p-1-s times B chunk 1, F chunk 1 + B chunk 0; s+1 times B chunk 1, B chunk 0 (W deferred from the
 *                middle one on); p-1-s times W, B chunk 0 (deferred); s+1 W's. A backward not deferred is B
 *                followed at once by its W; deferred W's run first in, first out. The transfers between two
 *                compute actions are posted as one group before the next (dualpipev.py's batch_isend_irecv).
 *                m >= 2p (dualpipev.py's assertion).
 *   dualpipe     DualPipe (DeepSeek-V3 report section 3.2.1, dualpipe/dualpipe.py): the same eight phases on
 *                each half of the ranks (rank s counted as min(s, p-1-s) of p/2), phase 0 being the direction
 *                that enters on the rank's side; the turn is between the two middle ranks (a transfer). p even,
 *                m even and m >= 2p (dualpipe.py's assertions).
 * Actions: F(i, c) / B(i, c): forward / backward of micro-batch i through chunk c (for a schedule that splits the
 * backward, pipe_schedule_splits: B is the input gradient only, and W(i, c) the weight gradients, after B(i, c));
 * SEND_ACT / RECV_ACT of the activation (B,T,C) of micro-batch i leaving / entering chunk c; SEND_GRAD / RECV_GRAD
 * of its gradient. Transfers with the same `group` number, adjacent in the list, are posted together and complete
 * together (MPI: non-blocking sends and receives and one wait; NCCL: one ncclGroupStart/End), as Megatron-LM's
 * batched p2p calls: that is what makes the neighbours' orders compatible (a rank may post "send my activation,
 * receive my gradient" while its neighbour posts "receive that activation, send that gradient").
 * Errors: the generator exits with one line for impossible parameters; the simulator returns a message.
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_PIPELINE_H
#define LLMC_PIPELINE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"

typedef enum { PIPE_GPIPE = 0, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_ZBH1, PIPE_DUALPIPEV, PIPE_DUALPIPE } PipeScheduleKind;
#define PIPE_SCHEDULE_KINDS 6

/* transfers after W: `kind >= PIPE_SEND_ACT` is a transfer */
typedef enum {
    PIPE_F = 0, PIPE_B, PIPE_W, PIPE_SEND_ACT, PIPE_RECV_ACT, PIPE_SEND_GRAD, PIPE_RECV_GRAD
} PipeActionKind;
#define PIPE_ACTION_KINDS 7

typedef struct {
    PipeActionKind kind;
    int micro;        /* micro-batch 0..m-1 */
    int chunk;        /* model chunk on this rank 0..v-1 */
    int group;        /* transfers: adjacent ones with the same group are posted together; -1 for F, B and W */
    int pair;         /* B only: 1 = one overlapped pair with the F just before it (DualPipe's F&B chunk pair; the
                       * executor's `pair` callback runs both at once when it has one) */
} PipeAction;

typedef struct {
    PipeScheduleKind kind;
    int p, m, v;      /* pipeline ranks, micro-batches, chunks per rank (2 for dualpipev and dualpipe) */
    int split;        /* 1: the backward is split into B (input gradient) and W (weight gradients) actions */
    int overlap;      /* 1: the executor posts a transfer group and waits for it only before the first later action
                       * that reads one of its receives, or before the next group (pipe_group_feeds): the compute
                       * between runs while the transfers fly. Set for the split schedules (DualPipe's overlap) */
    int* count;       /* (p) actions of each rank */
    PipeAction** act; /* (p) each rank's actions */
} PipeSchedule;

static inline const char* pipe_schedule_name(PipeScheduleKind k) {
    static const char* const names[PIPE_SCHEDULE_KINDS] = {"gpipe", "1f1b", "interleaved", "zb-h1", "dualpipev",
                                                           "dualpipe"};
    return (int)k >= 0 && (int)k < PIPE_SCHEDULE_KINDS ? names[k] : "?";
}
static inline const char* pipe_action_name(PipeActionKind k) {
    static const char* const names[PIPE_ACTION_KINDS] = {"F", "B", "W", "send-act", "recv-act", "send-grad",
                                                         "recv-grad"};
    return names[k];
}

/* 1 and *kind set if `name` is one of gpipe, 1f1b, interleaved, zb-h1, dualpipev, dualpipe */
static inline int pipe_schedule_from_name(const char* name, PipeScheduleKind* kind) {
    for (int k = 0; k < PIPE_SCHEDULE_KINDS; k++) {
        if (strcmp(name, pipe_schedule_name((PipeScheduleKind)k)) == 0) { *kind = (PipeScheduleKind)k; return 1; }
    }
    return 0;
}

/* 1 if the schedule splits every backward into B (input gradient) and W (weight gradients) */
static inline int pipe_schedule_splits(PipeScheduleKind kind) {
    return kind == PIPE_ZBH1 || kind == PIPE_DUALPIPEV || kind == PIPE_DUALPIPE;
}
/* the chunks per rank a schedule builds from the --pp-virtual value v (the V shapes place two chunks themselves) */
static inline int pipe_schedule_chunks(PipeScheduleKind kind, int v) {
    return kind == PIPE_DUALPIPEV || kind == PIPE_DUALPIPE ? 2 : v;
}
/* the copies of the model's parameters the pipeline holds (dualpipe: both directions hold every stage) */
static inline int pipe_schedule_param_copies(PipeScheduleKind kind) { return kind == PIPE_DUALPIPE ? 2 : 1; }
/* the fewest micro-batches per step the schedule runs with p ranks (interleaved: also a multiple of p; dualpipe:
 * also even) */
static inline int pipe_schedule_min_micro(PipeScheduleKind kind, int p) {
    if (kind == PIPE_GPIPE) { return 1; }
    if (kind == PIPE_DUALPIPEV || kind == PIPE_DUALPIPE) { return 2 * p; }
    return p;
}

/* the bubble of a schedule with equal stage costs: idle share of every rank's step (the trainer's header line).
 * gpipe, 1f1b (p-1)/(m+p-1); interleaved (p-1)/(v m+p-1); the split schedules: pipe_bubble_table's idle time with
 * F = B = W = 1 over the step (work + idle) */
static inline double pipe_bubble_table(PipeScheduleKind kind, int p, double f, double b, double w, double fb);
static inline double pipe_work_time(PipeScheduleKind kind, int p, int m, int v, double f, double b, double w);
static inline double pipe_bubble_theory(PipeScheduleKind kind, int p, int m, int v) {
    if (kind == PIPE_INTERLEAVED) { return (double)(p - 1) / (double)(v * m + p - 1); }
    if (!pipe_schedule_splits(kind)) { return (double)(p - 1) / (double)(m + p - 1); }
    double idle = pipe_bubble_table(kind, p, 1.0, 1.0, 1.0, 3.0), work = pipe_work_time(kind, p, m, v, 1.0, 1.0, 1.0);
    return idle / (work + idle);
}

/* The idle time of every rank in one step (the DeepSeek-V3 report's Table 2, and the DualPipe repository's table)
 * from the costs of one chunk's actions: f forward, b the B action (the input gradient of a split schedule), w the W
 * action (weight gradients; for gpipe / 1f1b, whose backward is one action, pass its whole cost as b and w = 0),
 * fb an overlapped forward + backward pair (f + b + w when nothing overlaps; the executor's pairs, --pp-fb-overlap,
 * hide only communication, which these costs leave out, so the callers pass f + b + w). The report's B
 * is the full backward, b + w here:
 *   1f1b, gpipe  (p-1)(F+B)          = (p-1)(f+b+w)
 *   zb-h1        (p-1)(F+B-2W)       = (p-1)(f+b-w)                    (ZB1P)
 *   dualpipe     (p/2-1)(F&B+B-3W)   = (p/2-1)(fb+b-2w)                (p ranks = p stages)
 *   dualpipev    the same with PP = 2p stages on p ranks: (p-1)(fb+b-2w)
 *   interleaved  (p-1)(f+b+w)/v (Narayanan et al. 2021, chunks of 1/v of a stage: pass the chunk's costs times v)
 * Per rank and schedule: pipe_schedule_param_copies (1, 1, 2 for dualpipe, 1 for dualpipev) and
 * pipe_activation_table (activation memory per rank in micro-batch x stage units). The generated schedules idle
 * exactly this in the timed simulator (free transfers) for zb-h1 with w <= f, b, and for dualpipe(v) with f = b >= w;
 * with f != b dualpipe(v)'s simulated idle differs from the table by a few units either way (dev/test/test_pipeline.c). */
static inline double pipe_bubble_table(PipeScheduleKind kind, int p, double f, double b, double w, double fb) {
    switch (kind) {
    case PIPE_ZBH1: return (p - 1) * (f + b - w);
    case PIPE_DUALPIPE: return (p / 2 - 1) * (fb + b - 2 * w);
    case PIPE_DUALPIPEV: return (p - 1) * (fb + b - 2 * w);
    default: return (p - 1) * (f + b + w);
    }
}
/* the compute time of every rank in one step: m micro-batches through its chunks (dualpipe: one chunk each) */
static inline double pipe_work_time(PipeScheduleKind kind, int p, int m, int v, double f, double b, double w) {
    (void)p;
    int cells = kind == PIPE_DUALPIPE ? m : m * pipe_schedule_chunks(kind, v);
    return cells * (f + b + w);
}
/* the report's activation memory per rank, in one micro-batch's activations of one pipeline stage (PP = the stages:
 * p, or 2p for dualpipev, whose rank holds two stages): 1F1B and ZB1P PP, DualPipe PP + 1 */
static inline int pipe_activation_table(PipeScheduleKind kind, int p) {
    if (kind == PIPE_DUALPIPE) { return p + 1; }
    if (kind == PIPE_DUALPIPEV) { return 2 * p + 1; }
    return p;
}

/* the peak number of activation sets (micro-batch x chunk) rank s keeps alive at once: from F to B, or to W for a
 * schedule that splits the backward (pipe_simulate's count; test_pipeline checks every layout of p <= 8, m <= 32) */
static inline int pipe_peak_theory(PipeScheduleKind kind, int p, int m, int v, int s) {
    if (kind == PIPE_GPIPE) { return m * v; }
    if (kind == PIPE_1F1B) { return m < p - s ? m : p - s; }
    if (kind == PIPE_ZBH1) { return m < p ? m : p; } /* every rank: its p - s of 1F1B plus s deferred W's */
    if (kind == PIPE_DUALPIPEV) { return 2 * p + 1; } /* m >= 2p: the report's PP + 1 with PP = 2p stages */
    if (kind == PIPE_DUALPIPE) { return p + 1; }       /* m >= 2p: the report's PP + 1 */
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
    PipeAction x = {kind, micro, chunk, group, 0};
    l->a[l->n++] = x;
}

/* virtual stage of chunk c on rank s in the default mapping (gpipe, 1f1b, zb-h1, interleaved; pipe_vstage_of for any
 * schedule) */
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


/* ---------------------------------------------------------------- mapping */

/* the virtual stages of a micro-batch's path: p*v, except dualpipe (each direction's p stages) */
static inline int pipe_vstages(const PipeSchedule* sc) { return sc->kind == PIPE_DUALPIPE ? sc->p : sc->p * sc->v; }

/* 1 if micro-batch i has cells (F, B, W) on chunk c of every rank: always, except dualpipe, whose first m/2
 * micro-batches use chunk 0 (the down pipeline) and the others chunk 1 (the up pipeline) */
static inline int pipe_visits(const PipeSchedule* sc, int i, int c) {
    if (sc->kind == PIPE_DUALPIPE) { return c == (i >= sc->m / 2); }
    return 1;
}

/* the virtual stage of micro-batch i's cell on chunk c of rank s (see the header) */
static inline int pipe_vstage_of(const PipeSchedule* sc, int s, int i, int c) {
    (void)i;
    if (sc->kind == PIPE_DUALPIPEV) { return c == 0 ? s : 2 * sc->p - 1 - s; }
    if (sc->kind == PIPE_DUALPIPE) { return c == 0 ? s : sc->p - 1 - s; }
    return c * sc->p + s;
}

/* where virtual stage k of micro-batch i's path lives: its rank and chunk there */
static inline void pipe_place(const PipeSchedule* sc, int i, int k, int* rank, int* chunk) {
    int p = sc->p;
    if (sc->kind == PIPE_DUALPIPEV) { *rank = k < p ? k : 2 * p - 1 - k; *chunk = k >= p; return; }
    if (sc->kind == PIPE_DUALPIPE) {
        int up = i >= sc->m / 2;
        *rank = up ? p - 1 - k : k;
        *chunk = up;
        return;
    }
    *rank = k % p;
    *chunk = k / p;
}

/* the rank and chunk of the next / previous virtual stage of micro-batch i's cell on chunk c of rank s; 0 when
 * there is none (the last / first virtual stage) */
static inline int pipe_next_of(const PipeSchedule* sc, int s, int i, int c, int* rank, int* chunk) {
    int k = pipe_vstage_of(sc, s, i, c);
    if (k + 1 >= pipe_vstages(sc)) { return 0; }
    pipe_place(sc, i, k + 1, rank, chunk);
    return 1;
}
static inline int pipe_prev_of(const PipeSchedule* sc, int s, int i, int c, int* rank, int* chunk) {
    int k = pipe_vstage_of(sc, s, i, c);
    if (k == 0) { return 0; }
    pipe_place(sc, i, k - 1, rank, chunk);
    return 1;
}

/* 1 if micro-batch i's input activation on chunk c of rank s is the output of chunk *src of the same rank (a local
 * hand-over: dualpipev's turn on rank p-1); then B(i, *src) takes its output gradient from B(i, c)'s input
 * gradient, and the schedule has no transfer between the two: the model copies (or aliases) the rows, reading
 * the other cell's activation slot (pipe_slot_get(ps, i, *src, 0)), which is held until B(i, *src) has run */
static inline int pipe_local_input(const PipeSchedule* sc, int s, int i, int c, int* src) {
    int r, k;
    if (!pipe_prev_of(sc, s, i, c, &r, &k) || r != s) { return 0; }
    *src = k;
    return 1;
}

/* ---------------------------------------------------------------- the split schedules' generators */

/* every maximal run of adjacent transfers posted as one group (DualPipe's batch_isend_irecv before each compute) */
static inline void pipe_merge_all_transfers(PipeList* l) {
    for (int k = 1; k < l->n; k++) {
        if (l->a[k].kind >= PIPE_SEND_ACT && l->a[k - 1].kind >= PIPE_SEND_ACT) { l->a[k].group = l->a[k - 1].group; }
    }
}

/* Rank s of zb-h1 (header): 1F1B's F / B order with its transfers; after B(k) (and its gradient's send) W(k - s);
 * the s W's left run after the last B. Adjacent transfers are posted together. */
static inline void pipe_zbh1_rank(PipeList* l, int p, int m, int s) {
    int warm = p - 1 - s < m ? p - 1 - s : m, f = 0, w = 0;
    for (; f < warm; f++) { pipe_forward(l, p, 1, s, f, 0); pipe_send_act(l, p, 1, s, f, 0); }
    for (int b = 0; b < m; b++) {
        if (f < m) { pipe_forward(l, p, 1, s, f, 0); pipe_send_act(l, p, 1, s, f, 0); f++; }
        pipe_backward(l, p, 1, s, b, 0);
        if (f < m) { /* steady state: the gradient's send waits for the next forward's receive (one group) */
            if (b >= s) { pipe_push(l, PIPE_W, w++, 0, -1); }
            pipe_send_grad(l, p, s, b, 0);
        } else { /* cool-down: the gradient leaves at once */
            pipe_send_grad(l, p, s, b, 0);
            if (b >= s) { pipe_push(l, PIPE_W, w++, 0, -1); }
        }
    }
    for (; w < m; w++) { pipe_push(l, PIPE_W, w, 0, -1); }
    pipe_merge_all_transfers(l);
}

/* The state of one rank while dualpipe(v).py's step is replayed: per phase (0, 1: the internal phase, = the chunk)
 * the counters of forwards, backwards, activation / gradient sends and receives, and the FIFO of deferred W's. */
typedef struct {
    const PipeSchedule* sc;
    PipeList* l;
    int s, first, last, flip;   /* flip: dualpipe's second half (its local phase 0 is the up direction) */
    int f[2], b[2], sa[2], ra[2], sg[2], rg[2];
    int* wq;                    /* (2m) deferred W's: micro * 2 + chunk */
    int wq_head, wq_tail;
} PipeDual;

/* the micro-batch of the k-th cell of phase ph (dualpipe's up direction is micro-batches m/2 ..) */
static inline int pipe_dual_micro(const PipeDual* d, int ph, int k) {
    return d->sc->kind == PIPE_DUALPIPE && ph == 1 ? d->sc->m / 2 + k : k;
}
/* dualpipe(v).py's is_first_stage / is_last_stage of internal phase ph on this rank (dualpipev's rank p-1: the
 * turn, local) */
static inline int pipe_dual_no_input(const PipeDual* d, int ph) { return (d->first && ph == 0) || (d->last && ph == 1); }
static inline int pipe_dual_no_output(const PipeDual* d, int ph) { return (d->first && ph == 1) || (d->last && ph == 0); }

/* a transfer of phase `phase` (dualpipe(v).py's recv_forward, send_forward, recv_backward, send_backward), skipped
 * where the phase has no previous (RECV_ACT, SEND_GRAD) or next (SEND_ACT, RECV_GRAD) stage; each kind counts its
 * own micro-batches per phase */
static inline void pipe_dual_transfer(PipeDual* d, int phase, PipeActionKind kind) {
    int ph = phase ^ d->flip, prev_side = kind == PIPE_RECV_ACT || kind == PIPE_SEND_GRAD;
    if (prev_side ? pipe_dual_no_input(d, ph) : pipe_dual_no_output(d, ph)) { return; }
    int* n = kind == PIPE_RECV_ACT ? d->ra : kind == PIPE_SEND_ACT ? d->sa : kind == PIPE_RECV_GRAD ? d->rg : d->sg;
    pipe_push(d->l, kind, pipe_dual_micro(d, ph, n[ph]++), ph, d->l->group++);
}
static inline void pipe_dual_recv_forward(PipeDual* d, int phase) { pipe_dual_transfer(d, phase, PIPE_RECV_ACT); }
static inline void pipe_dual_send_forward(PipeDual* d, int phase) { pipe_dual_transfer(d, phase, PIPE_SEND_ACT); }
static inline void pipe_dual_recv_backward(PipeDual* d, int phase) { pipe_dual_transfer(d, phase, PIPE_RECV_GRAD); }
static inline void pipe_dual_send_backward(PipeDual* d, int phase) { pipe_dual_transfer(d, phase, PIPE_SEND_GRAD); }
static inline void pipe_dual_F(PipeDual* d, int phase) {
    int ph = phase ^ d->flip;
    pipe_push(d->l, PIPE_F, pipe_dual_micro(d, ph, d->f[ph]++), ph, -1);
}
/* B, then W at once unless deferred (zb: dualpipe(v).py's enable_zb, the WeightGradStore queue) */
static inline void pipe_dual_B(PipeDual* d, int phase, int zb) {
    int ph = phase ^ d->flip, i = pipe_dual_micro(d, ph, d->b[ph]++);
    pipe_push(d->l, PIPE_B, i, ph, -1);
    if (zb) { d->wq[d->wq_tail++] = i * 2 + ph; }
    else { pipe_push(d->l, PIPE_W, i, ph, -1); }
}
static inline void pipe_dual_W(PipeDual* d) {
    if (d->wq_head == d->wq_tail) { FATAL("internal: dualpipe schedule pops an empty W queue"); }
    int x = d->wq[d->wq_head++];
    pipe_push(d->l, PIPE_W, x / 2, x % 2, -1);
}
/* dualpipe(v).py's _forward_chunk, _backward_chunk, _forward_backward_chunk (their commit is the grouping of
 * adjacent transfers, pipe_merge_all_transfers) */
static inline void pipe_dual_forward_chunk(PipeDual* d, int phase, int recv, int send) {
    if (recv) { pipe_dual_recv_forward(d, phase); }
    pipe_dual_F(d, phase);
    if (send) { pipe_dual_send_forward(d, phase); }
}
static inline void pipe_dual_backward_chunk(PipeDual* d, int phase, int zb, int send) {
    pipe_dual_recv_backward(d, phase);
    pipe_dual_B(d, phase, zb);
    if (send) { pipe_dual_send_backward(d, phase); }
}
static inline void pipe_dual_forward_backward_chunk(PipeDual* d, int phase0, int phase1, int recv0) {
    if (recv0) { pipe_dual_recv_forward(d, phase0); }
    pipe_dual_recv_backward(d, phase1);
    pipe_dual_F(d, phase0);
    pipe_dual_B(d, phase1, 0);
    d->l->a[d->l->n - 2].pair = 1; /* B (before its W): overlapped with the F before it */
    pipe_dual_send_forward(d, phase0);
    pipe_dual_send_backward(d, phase1);
}

/* Rank s of dualpipev / dualpipe: dualpipe(v).py's step, phase by phase (header). The half rank hr and the half
 * size H are the rank and p for dualpipev, min(s, p-1-s) and p/2 for dualpipe; n the micro-batches per
 * direction; `turn` the rank where the direction turns (dualpipev: p-1, dualpipe: the two middle ranks). */
static inline void pipe_dual_rank(PipeList* l, const PipeSchedule* sc, int s) {
    int p = sc->p, dual = sc->kind == PIPE_DUALPIPE;
    PipeDual d;
    memset(&d, 0, sizeof(d));
    d.sc = sc; d.l = l; d.s = s; d.first = s == 0; d.last = s == p - 1;
    d.flip = dual && s >= p / 2;
    d.wq = (int*)calloc_check(2 * (size_t)sc->m + 1, sizeof(int), "dualpipe W queue");
    int H = dual ? p / 2 : p, hr = dual ? (s < p - 1 - s ? s : p - 1 - s) : s, n = dual ? sc->m / 2 : sc->m;
    int turn = dual ? (s == p / 2 - 1 || s == p / 2) : s == p - 1;
    for (int i = 0; i < (H - hr - 1) * 2; i++) { pipe_dual_forward_chunk(&d, 0, 1, 1); } /* 1: nF0 */
    pipe_dual_recv_forward(&d, 0); /* 2: nF0F1 */
    for (int i = 0; i < hr + 1; i++) {
        pipe_dual_forward_chunk(&d, 0, 0, turn);
        pipe_dual_recv_forward(&d, 0);
        pipe_dual_forward_chunk(&d, 1, 1, !turn || i < hr);
        if (!turn) { pipe_dual_send_forward(&d, 0); }
    }
    for (int i = 0; i < H - hr - 1; i++) { /* 3: nB1W1F1 */
        pipe_dual_backward_chunk(&d, 1, 1, 1);
        pipe_dual_recv_forward(&d, 1);
        pipe_dual_W(&d);
        pipe_dual_forward_chunk(&d, 1, 0, 1);
    }
    for (int i = 0; i < n - 2 * H + hr + 1; i++) { /* 4: nF0B1F1B0 */
        if (i == 0 && turn) { /* not overlapped on the turning rank (dualpipe(v).py's note) */
            pipe_dual_forward_chunk(&d, 0, 0, 0);
            pipe_dual_send_forward(&d, 1);
            pipe_dual_backward_chunk(&d, 1, 0, 0);
            pipe_dual_send_forward(&d, 0);
            pipe_dual_send_backward(&d, 1);
        } else {
            pipe_dual_forward_backward_chunk(&d, 0, 1, i > 0);
        }
        pipe_dual_forward_backward_chunk(&d, 1, 0, 1);
    }
    for (int i = 0; i < H - hr - 1; i++) { /* 5: nB1F1B0 */
        pipe_dual_backward_chunk(&d, 1, 0, 1);
        pipe_dual_forward_backward_chunk(&d, 1, 0, 1);
    }
    int zb = 0; /* 6: nB1B0, the second half deferring W */
    for (int i = 0; i < hr + 1; i++) {
        if (i == (hr + 1) / 2 && hr % 2 == 1) { zb = 1; }
        pipe_dual_backward_chunk(&d, 1, zb, 1);
        if (i == (hr + 1) / 2 && hr % 2 == 0) { zb = 1; }
        pipe_dual_backward_chunk(&d, 0, zb, 1);
    }
    for (int i = 0; i < H - hr - 1; i++) { pipe_dual_W(&d); pipe_dual_backward_chunk(&d, 0, 1, 1); } /* 7: nWB0 */
    for (int i = 0; i < hr + 1; i++) { pipe_dual_W(&d); } /* 8: nW */
    if (d.wq_head != d.wq_tail) { FATAL("internal: dualpipe schedule of rank %d leaves %d W's", s, d.wq_tail - d.wq_head); }
    free(d.wq);
    pipe_merge_all_transfers(l);
}

/* Builds the schedule of `kind` for p ranks, m micro-batches, v chunks per rank (the --pp-virtual value: 1 unless
 * interleaved; dualpipev and dualpipe place their two chunks themselves, sc.v = 2). Exits with one line naming the
 * flag for impossible parameters: interleaved needs m a multiple of p and v >= 2; 1f1b, zb-h1 and interleaved need
 * m >= p; dualpipev m >= 2p; dualpipe an even p, m even and m >= 2p. Free with pipe_schedule_free. */
static inline PipeSchedule pipe_schedule_build(PipeScheduleKind kind, int p, int m, int v) {
    const char* name = pipe_schedule_name(kind);
    if ((int)kind < 0 || (int)kind >= PIPE_SCHEDULE_KINDS) { FATAL("pipeline schedule: unknown kind %d", (int)kind); }
    if (p < 1 || m < 1 || v < 1) { FATAL("pipeline schedule: p=%d, m=%d, v=%d must be positive", p, m, v); }
    if (kind != PIPE_INTERLEAVED && v != 1 && v != pipe_schedule_chunks(kind, 1)) { /* the V shapes: 1 or their 2 */
        FATAL("--pp-virtual %d with --pp-schedule %s: only interleaved takes --pp-virtual%s; expected --pp-virtual 1",
              v, name, kind == PIPE_DUALPIPEV || kind == PIPE_DUALPIPE ? " (this one places two chunks per rank itself)" : "");
    }
    if (kind == PIPE_INTERLEAVED && (v < 2 || p < 2 || m % p != 0)) {
        FATAL("--pp-schedule interleaved needs --pp >= 2 (got %d), --pp-virtual >= 2 (got %d) and micro-batches per step "
              "(%d) a multiple of --pp", p, v, m);
    }
    if (kind == PIPE_DUALPIPE && p % 2 != 0) {
        FATAL("--pp-schedule dualpipe needs an even --pp (got %d): its two directions meet between the middle ranks; "
              "use --pp-schedule dualpipev for an odd --pp", p);
    }
    if (kind == PIPE_DUALPIPE && m % 2 != 0) {
        FATAL("--pp-schedule dualpipe needs an even number of micro-batches per step (got %d, from -d): half enter at each "
              "end; raise -d", m);
    }
    if (m < pipe_schedule_min_micro(kind, p)) {
        if (kind == PIPE_DUALPIPEV || kind == PIPE_DUALPIPE) {
            FATAL("--pp-schedule %s needs at least 2 x --pp micro-batches per step: %d < %d (raise -d)", name, m, 2 * p);
        }
        FATAL("--pp-schedule %s needs at least as many micro-batches per step as --pp stages: %d < %d (raise -d or use "
              "--pp-schedule gpipe)", name, m, p);
    }
    PipeSchedule sc;
    sc.kind = kind; sc.p = p; sc.m = m; sc.v = pipe_schedule_chunks(kind, v); sc.split = pipe_schedule_splits(kind);
    sc.overlap = sc.split; /* DualPipe's overlap: compute runs while the transfers fly */
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
        } else if (kind == PIPE_ZBH1) {
            pipe_zbh1_rank(&l, p, m, s);
        } else if (kind == PIPE_DUALPIPEV || kind == PIPE_DUALPIPE) {
            pipe_dual_rank(&l, &sc, s);
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
        if (kind == PIPE_GPIPE || kind == PIPE_1F1B) { pipe_merge_transfers(&l); }
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

/* the transfer a rank posts that matches x (posted by rank s): its peer, and the peer's action; 0 when x has no
 * partner (it leaves the first or the last virtual stage, or its neighbour stage is on the same rank: a local
 * hand-over has no transfer) */
static inline int pipe_partner(const PipeSchedule* sc, int s, const PipeAction* x, int* peer, PipeAction* y) {
    int c = x->chunk, i = x->micro, ok;
    y->micro = x->micro;
    y->group = 0;
    switch (x->kind) {
    case PIPE_SEND_ACT: ok = pipe_next_of(sc, s, i, c, peer, &y->chunk); y->kind = PIPE_RECV_ACT; break;
    case PIPE_RECV_ACT: ok = pipe_prev_of(sc, s, i, c, peer, &y->chunk); y->kind = PIPE_SEND_ACT; break;
    case PIPE_SEND_GRAD: ok = pipe_prev_of(sc, s, i, c, peer, &y->chunk); y->kind = PIPE_RECV_GRAD; break;
    default: ok = pipe_next_of(sc, s, i, c, peer, &y->chunk); y->kind = PIPE_SEND_GRAD; break; /* PIPE_RECV_GRAD */
    }
    if (!ok) { *peer = -1; y->chunk = -1; }
    return ok && *peer != s;
}

typedef struct {
    int ok;                 /* 1: every action ran, in an order the dependencies allow, without deadlock */
    char error[256];
    int peak[64];           /* peak live activation sets per rank (p <= 64): F done, B (split: W) not yet */
    int steps;              /* simulated rounds */
    /* with costs (pipe_simulate_costs; unit costs and free transfers for pipe_simulate): */
    double busy[64];        /* seconds each rank computes (F, B, W) */
    double end[64];         /* when each rank's last action ends */
    double makespan;        /* the step: the latest end */
    double bubble;          /* 1 - mean(busy) / makespan (pipe_bubble_measured's definition) */
} PipeSimResult;

/* the end of the group of transfers starting at action a of rank s */
static inline int pipe_group_end(const PipeSchedule* sc, int s, int a) {
    int g = sc->act[s][a].group, e = a;
    while (e < sc->count[s] && sc->act[s][e].kind >= PIPE_SEND_ACT && sc->act[s][e].group == g) { e++; }
    return e;
}

/* the simulator's state: per rank the next action, live activation sets, its clock and when its current group was
 * posted, which transfers are matched and when they complete; per (rank, micro-batch, chunk) cell whether F / B / W
 * ran and whether the input activation / output gradient has arrived */
typedef struct {
    const PipeSchedule* sc;
    int p, m, v;
    char *fdone, *bdone, *wdone, *act_in, *grad_in;
    int *pc, *live;
    char** matched;
    double *clock, *posted, **done_at;
    double cost[4];         /* F, B, W, one transfer */
} PipeSim;

static inline size_t pipe_sim_cell(const PipeSim* S, int s, int i, int c) {
    return ((size_t)s * S->m + (size_t)i) * S->v + (size_t)c;
}

/* the F, B or W at rank s's next action: returns 1 if it ran, 0 if its input is not there yet, -1 (r->error) if it
 * is malformed or out of order */
static inline int pipe_sim_compute(PipeSim* S, int s, PipeSimResult* r) {
    const PipeSchedule* sc = S->sc;
    const PipeAction* x = &sc->act[s][S->pc[s]];
    size_t cell = pipe_sim_cell(S, s, x->micro, x->chunk);
    const char* nm = pipe_action_name(x->kind);
    int nr, nc;
    if (!pipe_visits(sc, x->micro, x->chunk)) {
        snprintf(r->error, sizeof(r->error), "rank %d: %s(%d,%d): micro-batch %d does not visit chunk %d", s, nm,
                 x->micro, x->chunk, x->micro, x->chunk);
        return -1;
    }
    if (x->kind == PIPE_F) {
        if (S->fdone[cell]) { snprintf(r->error, sizeof(r->error), "rank %d: F(%d,%d) twice", s, x->micro, x->chunk); return -1; }
        if (!S->act_in[cell]) { return 0; }
        S->fdone[cell] = 1;
        if (++S->live[s] > r->peak[s]) { r->peak[s] = S->live[s]; }
        if (!pipe_next_of(sc, s, x->micro, x->chunk, &nr, &nc)) { S->grad_in[cell] = 1; } /* the loss gives the last stage its gradient */
        else if (nr == s) { S->act_in[pipe_sim_cell(S, s, x->micro, nc)] = 1; } /* a local hand-over */
        S->clock[s] += S->cost[0];
        r->busy[s] += S->cost[0];
        return 1;
    }
    if (x->kind == PIPE_W) {
        if (!sc->split) {
            snprintf(r->error, sizeof(r->error), "rank %d: W(%d,%d) in a schedule that does not split its backward", s,
                     x->micro, x->chunk);
            return -1;
        }
        if (!S->bdone[cell] || S->wdone[cell]) {
            snprintf(r->error, sizeof(r->error), "rank %d: W(%d,%d) %s", s, x->micro, x->chunk,
                     S->wdone[cell] ? "twice" : "before its B");
            return -1;
        }
        S->wdone[cell] = 1;
        S->live[s]--;
        S->clock[s] += S->cost[2];
        r->busy[s] += S->cost[2];
        return 1;
    }
    if (!S->fdone[cell] || S->bdone[cell]) {
        snprintf(r->error, sizeof(r->error), "rank %d: B(%d,%d) %s", s, x->micro, x->chunk,
                 S->bdone[cell] ? "twice" : "before its F");
        return -1;
    }
    if (!S->grad_in[cell]) { return 0; }
    S->bdone[cell] = 1;
    if (!sc->split) { S->live[s]--; }
    if (pipe_prev_of(sc, s, x->micro, x->chunk, &nr, &nc) && nr == s) { S->grad_in[pipe_sim_cell(S, s, x->micro, nc)] = 1; }
    S->clock[s] += S->cost[1];
    r->busy[s] += S->cost[1];
    return 1;
}

/* rank s's transfer group at its next action: pairs each unmatched transfer with the partner in the peer's current
 * group (setting *progressed when one pairs; the pair completes a transfer's time after the later of the two
 * groups' posting); returns the group's length once every transfer is paired (its receives have landed; the
 * rank's clock moves to the last completion), 0 while one waits, -1 (r->error) when a send is posted before its
 * data exists or a transfer has no partner */
static inline int pipe_sim_transfers(PipeSim* S, int s, PipeSimResult* r, int* progressed) {
    const PipeSchedule* sc = S->sc;
    int start = S->pc[s], end = pipe_group_end(sc, s, start), all = 1;
    for (int a = start; a < end; a++) {
        if (S->matched[s][a]) { continue; }
        const PipeAction* t = &sc->act[s][a];
        if (!pipe_visits(sc, t->micro, t->chunk)) {
            snprintf(r->error, sizeof(r->error), "rank %d: %s(%d,%d): micro-batch %d does not visit chunk %d", s,
                     pipe_action_name(t->kind), t->micro, t->chunk, t->micro, t->chunk);
            return -1;
        }
        size_t tc = pipe_sim_cell(S, s, t->micro, t->chunk);
        if ((t->kind == PIPE_SEND_ACT && !S->fdone[tc]) || (t->kind == PIPE_SEND_GRAD && !S->bdone[tc])) {
            snprintf(r->error, sizeof(r->error), "rank %d: %s(%d,%d) posted before its data exists", s,
                     pipe_action_name(t->kind), t->micro, t->chunk);
            return -1;
        }
        int peer;
        PipeAction want;
        if (!pipe_partner(sc, s, t, &peer, &want)) {
            snprintf(r->error, sizeof(r->error), "rank %d: %s(%d,%d) has no partner (%s)", s, pipe_action_name(t->kind),
                     t->micro, t->chunk, peer == s ? "the neighbour stage is on this rank: a local hand-over" :
                     "the end of the pipeline");
            return -1;
        }
        if (S->pc[peer] < sc->count[peer] && sc->act[peer][S->pc[peer]].kind >= PIPE_SEND_ACT) {
            int pe = pipe_group_end(sc, peer, S->pc[peer]);
            for (int b = S->pc[peer]; b < pe; b++) {
                const PipeAction* u = &sc->act[peer][b];
                if (!S->matched[peer][b] && u->kind == want.kind && u->micro == want.micro && u->chunk == want.chunk) {
                    S->matched[s][a] = S->matched[peer][b] = 1;
                    double t1 = (S->posted[s] > S->posted[peer] ? S->posted[s] : S->posted[peer]) + S->cost[3];
                    S->done_at[s][a] = S->done_at[peer][b] = t1;
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
        if (S->done_at[s][a] > S->clock[s]) { S->clock[s] = S->done_at[s][a]; }
    }
    return end - start;
}

/* Runs the schedule on an abstract machine with action costs cost[4] = {F, B, W, one transfer} (seconds or any
 * unit). Each round every rank tries its next action: F(i,c) needs its activation (received, the model input on
 * virtual stage 0, or the previous chunk's output on this rank); B(i,c) needs F(i,c) done and its gradient
 * (received, the loss on the last virtual stage, or the next chunk's B on this rank); W(i,c) needs B(i,c) (and a
 * schedule that splits). A group of transfers is posted when the rank reaches it; a transfer matches when its
 * partner (the peer's transfer of the same micro-batch and chunk, the other direction) is posted too (both sides
 * then count it done), a send needing its data to exist; the rank goes past the group when all of its transfers
 * matched (MPI: non-blocking calls and one wait; NCCL: a group). A round in which no rank progresses is a
 * deadlock. Reports the first violation, the peak number of live activation sets (F done, B, or for a split
 * schedule W, not yet) per rank, and the timed step: each rank's clock advances by its compute costs, and a group
 * completes a transfer's cost after the later of its posting and its partner's (list scheduling: every action as
 * early as the rank's order allows). */
static inline PipeSimResult pipe_simulate_costs(const PipeSchedule* sc, const double cost[4]) {
    PipeSimResult r;
    memset(&r, 0, sizeof(r));
    int p = sc->p, m = sc->m, v = sc->v;
    if (p > 64) { snprintf(r.error, sizeof(r.error), "at most 64 ranks simulated"); return r; }
    size_t cells = (size_t)p * m * v;
    PipeSim S;
    memset(&S, 0, sizeof(S));
    S.sc = sc; S.p = p; S.m = m; S.v = v;
    S.fdone = (char*)calloc_check(cells, 1, "sim"); S.bdone = (char*)calloc_check(cells, 1, "sim");
    S.wdone = (char*)calloc_check(cells, 1, "sim"); S.act_in = (char*)calloc_check(cells, 1, "sim");
    S.grad_in = (char*)calloc_check(cells, 1, "sim");
    S.pc = (int*)calloc_check((size_t)p, sizeof(int), "sim"); S.live = (int*)calloc_check((size_t)p, sizeof(int), "sim");
    S.matched = (char**)calloc_check((size_t)p, sizeof(char*), "sim");
    S.clock = (double*)calloc_check((size_t)p, sizeof(double), "sim");
    S.posted = (double*)calloc_check((size_t)p, sizeof(double), "sim");
    S.done_at = (double**)calloc_check((size_t)p, sizeof(double*), "sim");
    for (int k = 0; k < 4; k++) { S.cost[k] = cost[k]; }
    for (int s = 0; s < p; s++) {
        S.matched[s] = (char*)calloc_check((size_t)sc->count[s] + 1, 1, "sim");
        S.done_at[s] = (double*)calloc_check((size_t)sc->count[s] + 1, sizeof(double), "sim");
    }
    for (int i = 0; i < m; i++) { /* the model input: virtual stage 0 of every micro-batch */
        int r0, c0;
        pipe_place(sc, i, 0, &r0, &c0);
        S.act_in[pipe_sim_cell(&S, r0, i, c0)] = 1;
    }
    int remaining = 0, failed = 0;
    for (int s = 0; s < p; s++) { remaining += sc->count[s]; }
    while (remaining > 0 && !failed) {
        int progressed = 0;
        for (int s = 0; s < p && !failed; s++) {
            if (S.pc[s] >= sc->count[s]) { continue; }
            const PipeAction* x = &sc->act[s][S.pc[s]];
            if (x->micro < 0 || x->micro >= m || x->chunk < 0 || x->chunk >= v || (int)x->kind < 0 ||
                (int)x->kind >= PIPE_ACTION_KINDS) {
                snprintf(r.error, sizeof(r.error), "rank %d action %d: micro-batch %d / chunk %d / kind %d out of range",
                         s, S.pc[s], x->micro, x->chunk, (int)x->kind);
                failed = 1;
                break;
            }
            int ran = x->kind < PIPE_SEND_ACT ? pipe_sim_compute(&S, s, &r) : pipe_sim_transfers(&S, s, &r, &progressed);
            if (ran < 0) { failed = 1; break; }
            if (ran > 0) { S.pc[s] += ran; remaining -= ran; progressed = 1; S.posted[s] = S.clock[s]; }
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
        int i = (int)((c / v) % m), k = (int)(c % v);
        if (!pipe_visits(sc, i, k)) { continue; }
        if (!S.fdone[c] || !S.bdone[c] || (sc->split && !S.wdone[c])) {
            snprintf(r.error, sizeof(r.error), "micro-batch %d of chunk %d on rank %zu: %s missing", i, k,
                     c / ((size_t)m * v), !S.fdone[c] ? "forward" : !S.bdone[c] ? "backward" : "weight gradient (W)");
            failed = 1;
        }
    }
    r.ok = !failed;
    double mean = 0.0;
    for (int s = 0; s < p; s++) {
        r.end[s] = S.clock[s];
        r.makespan = S.clock[s] > r.makespan ? S.clock[s] : r.makespan;
        mean += r.busy[s] / p;
    }
    r.bubble = r.makespan > 0.0 ? 1.0 - mean / r.makespan : 0.0;
    for (int s = 0; s < p; s++) { free(S.matched[s]); free(S.done_at[s]); }
    free(S.matched); free(S.done_at); free(S.fdone); free(S.bdone); free(S.wdone); free(S.act_in); free(S.grad_in);
    free(S.pc); free(S.live); free(S.clock); free(S.posted);
    return r;
}

/* pipe_simulate_costs with unit compute costs and free transfers */
static inline PipeSimResult pipe_simulate(const PipeSchedule* sc) {
    const double unit[4] = {1.0, 1.0, 1.0, 0.0};
    return pipe_simulate_costs(sc, unit);
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

/* What the executor calls. forward / backward run F / B of (micro, chunk) on activation slot `slot` of that chunk
 * (for a schedule that splits the backward, pipe_schedule_splits, B is the input gradient only: the executor does
 * not care, the model does); weight runs W of (micro, chunk), its weight gradients, on the same slot (NULL for a
 * schedule without W; pipe_run refuses a schedule with W and no weight); transfer posts the n transfers of one
 * group together and returns when they are complete (on a GPU: when later device work is ordered after them). They
 * are sorted by (peer, tag) so that transports matching messages in order per peer (NCCL) pair them alike on both
 * sides. clock: seconds for the timeline (NULL: none); it must account for queued device work if that is what is
 * timed (the trainer synchronises when it records a timeline). A local hand-over (pipe_local_input) has no
 * transfer: forward reads the other chunk's slot itself. */
typedef struct {
    void* ctx;
    void (*forward)(void* ctx, int micro, int chunk, int slot);
    void (*backward)(void* ctx, int micro, int chunk, int slot);
    void (*transfer)(void* ctx, const PipeTransfer* t, int n);
    double (*clock)(void* ctx);
    void (*weight)(void* ctx, int micro, int chunk, int slot);
    /* optional, for sc->overlap: transfer split in two, post (returns once the group is posted) and wait (completes
     * it); NULL: transfer is called at the post and the group is complete at once (the slots still follow the
     * schedule's overlap, so a run uses what pipe_slots_needed counts either way) */
    void (*post)(void* ctx, const PipeTransfer* t, int n);
    void (*wait)(void* ctx);
    /* optional: F(fm, fc) on slot fs and B(bm, bc) on slot bs as one overlapped pair (an F followed by a B with
     * `pair` set); NULL: the two run one after the other through forward and backward */
    void (*pair)(void* ctx, int fm, int fc, int fs, int bm, int bc, int bs);
} PipeExecutor;

/* one timed action: F, B, W (n = 1; 2: one half of an overlapped F&B pair), or a transfer group (kind of its first
 * transfer, n transfers) */
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
    if (x->kind == PIPE_SEND_ACT) { pipe_next_of(sc, s, x->micro, x->chunk, &r, &dst_chunk); }
    if (x->kind == PIPE_SEND_GRAD) { pipe_prev_of(sc, s, x->micro, x->chunk, &r, &dst_chunk); }
    int grad = x->kind == PIPE_SEND_GRAD || x->kind == PIPE_RECV_GRAD;
    return (x->micro * sc->v + dst_chunk) * 2 + grad;
}

/* Activation slots of one rank: (micro, chunk) gets a slot of its chunk when it is first touched (its activation
 * received, or its forward) and gives it back when its work on this rank is over: its B, its W (a schedule that
 * splits the backward) and the use of its input gradient: the send of it, or on a local hand-over the previous
 * chunk's B (nothing on virtual stage 0). slots[c] is the number each chunk needs (pipe_slots_needed). */
typedef struct {
    int m, v;
    int* of;        /* (v*m) slot of (chunk, micro), -1 = none */
    int* busy;      /* (v*max_slots) 1 = in use */
    char* done;     /* (v*m) PIPE_SLOT_* bits of (chunk, micro) */
    int* held;      /* (v) slots in use per chunk */
    int max_slots;
} PipeSlots;
#define PIPE_SLOT_B 1
#define PIPE_SLOT_W 2
#define PIPE_SLOT_GRAD_USED 4

static inline int pipe_slot_get(PipeSlots* ps, int micro, int chunk, int assign) {
    int* of = &ps->of[chunk * ps->m + micro];
    if (*of >= 0 || !assign) { return *of; }
    for (int k = 0; k < ps->max_slots; k++) {
        if (!ps->busy[chunk * ps->max_slots + k]) {
            ps->busy[chunk * ps->max_slots + k] = 1;
            ps->held[chunk]++;
            ps->done[chunk * ps->m + micro] = 0;
            *of = k;
            return k;
        }
    }
    FATAL("internal: pipeline rank ran out of activation slots for chunk %d (%d)", chunk, ps->max_slots);
    return -1;
}
static inline void pipe_slot_release(PipeSlots* ps, int micro, int chunk) {
    int* of = &ps->of[chunk * ps->m + micro];
    if (*of >= 0) { ps->busy[chunk * ps->max_slots + *of] = 0; ps->held[chunk]--; }
    *of = -1;
}
/* marks `bits` done for (micro, chunk) of rank s and releases its slot once everything it is kept for has run */
static inline void pipe_slot_mark(const PipeSchedule* sc, int s, PipeSlots* ps, int micro, int chunk, int bits) {
    char* d = &ps->done[chunk * ps->m + micro];
    *d = (char)(*d | bits);
    int want = PIPE_SLOT_B | (sc->split ? PIPE_SLOT_W : 0) | (pipe_vstage_of(sc, s, micro, chunk) > 0 ? PIPE_SLOT_GRAD_USED : 0);
    if ((*d & want) == want) { pipe_slot_release(ps, micro, chunk); }
}
/* after action x of rank s ran (a transfer: after its whole group): what it completes for the slots */
static inline void pipe_slots_after(const PipeSchedule* sc, int s, PipeSlots* ps, const PipeAction* x) {
    int r, c;
    if (x->kind == PIPE_B) {
        if (pipe_next_of(sc, s, x->micro, x->chunk, &r, &c) && r == s) { /* it used the next chunk's gradient here */
            pipe_slot_mark(sc, s, ps, x->micro, c, PIPE_SLOT_GRAD_USED);
        }
        pipe_slot_mark(sc, s, ps, x->micro, x->chunk, PIPE_SLOT_B);
    } else if (x->kind == PIPE_W) {
        pipe_slot_mark(sc, s, ps, x->micro, x->chunk, PIPE_SLOT_W);
    } else if (x->kind == PIPE_SEND_GRAD) {
        pipe_slot_mark(sc, s, ps, x->micro, x->chunk, PIPE_SLOT_GRAD_USED);
    }
}

/* 1 if compute action x of rank s reads a receive of the transfer group at actions [g0, g1): F(i, c) its activation
 * (RECV_ACT of (i, c)), B(i, c) its gradient (RECV_GRAD of (i, c)); the overlapping executor waits for the group
 * before such an action (and before the next group, and at the end) */
static inline int pipe_group_feeds(const PipeSchedule* sc, int s, int g0, int g1, const PipeAction* x) {
    for (int a = g0; a < g1; a++) {
        const PipeAction* t = &sc->act[s][a];
        if (t->micro != x->micro || t->chunk != x->chunk) { continue; }
        if ((x->kind == PIPE_F && t->kind == PIPE_RECV_ACT) || (x->kind == PIPE_B && t->kind == PIPE_RECV_GRAD)) {
            return 1;
        }
    }
    return 0;
}

/* Walks rank s's actions, assigning and releasing slots as the executor (pipe_run) does: a transfer group holds the
 * slots of all its transfers while it runs (a receive must not land in a slot a send of the same group still
 * reads), so its sends' slots are given back after the group; returns in need[c] the most slots chunk c holds at
 * once. */
static inline void pipe_slots_walk(const PipeSchedule* sc, int s, PipeSlots* ps, int* need) {
    int k = 0, p0 = -1, p1 = -1; /* [p0, p1): the group posted and not yet waited for (sc->overlap) */
    while (k < sc->count[s]) {
        const PipeAction* y = &sc->act[s][k];
        int end = y->kind < PIPE_SEND_ACT ? k + 1 : pipe_group_end(sc, s, k);
        if (p0 >= 0 && (y->kind >= PIPE_SEND_ACT || pipe_group_feeds(sc, s, p0, p1, y))) { /* the wait */
            for (int a = p0; a < p1; a++) { pipe_slots_after(sc, s, ps, &sc->act[s][a]); }
            p0 = -1;
        }
        for (int a = k; a < end; a++) { /* acquire: forwards and every transfer of the group */
            const PipeAction* x = &sc->act[s][a];
            if (x->kind == PIPE_B || x->kind == PIPE_W) { continue; }
            pipe_slot_get(ps, x->micro, x->chunk, 1);
            if (ps->held[x->chunk] > need[x->chunk]) { need[x->chunk] = ps->held[x->chunk]; }
        }
        if (y->kind >= PIPE_SEND_ACT && sc->overlap) { p0 = k; p1 = end; }
        else { for (int a = k; a < end; a++) { pipe_slots_after(sc, s, ps, &sc->act[s][a]); } } /* release */
        k = end;
    }
    for (int a = p0; p0 >= 0 && a < p1; a++) { pipe_slots_after(sc, s, ps, &sc->act[s][a]); }
}

static inline PipeSlots pipe_slots_alloc(int m, int v, int max_slots) {
    PipeSlots ps;
    ps.m = m; ps.v = v; ps.max_slots = max_slots;
    ps.of = (int*)malloc_check((size_t)m * v * sizeof(int), "pipeline slots");
    ps.busy = (int*)calloc_check((size_t)v * max_slots, sizeof(int), "pipeline slots");
    ps.done = (char*)calloc_check((size_t)m * v, 1, "pipeline slots");
    ps.held = (int*)calloc_check((size_t)v, sizeof(int), "pipeline slots");
    for (int k = 0; k < m * v; k++) { ps.of[k] = -1; }
    return ps;
}
static inline void pipe_slots_free(PipeSlots* ps) {
    free(ps->of); free(ps->busy); free(ps->done); free(ps->held);
    memset(ps, 0, sizeof(*ps));
}

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

/* 1 if every ordered pair of ranks sees its messages in the same order on both sides: the sends of rank a to rank b,
 * in a's list order with each group sorted as pipe_run sorts it, carry the same tags as b's receives from a in b's
 * order. That is what a transport matching messages in order per peer (NCCL) needs to pair them as MPI's tags do.
 * Otherwise 0 and the first mismatch in err. */
static inline int pipe_messages_in_order(const PipeSchedule* sc, char* err, size_t cap) {
    int p = sc->p, total = 0, ok = 1;
    for (int s = 0; s < p; s++) { total += sc->count[s]; }
    int* seq[2];
    seq[0] = (int*)malloc_check(((size_t)total + 1) * sizeof(int), "pipeline message order");
    seq[1] = (int*)malloc_check(((size_t)total + 1) * sizeof(int), "pipeline message order");
    PipeTransfer* g = (PipeTransfer*)malloc_check(((size_t)total + 1) * sizeof(PipeTransfer), "pipeline message order");
    for (int a = 0; a < p && ok; a++) {
        for (int b = 0; b < p && ok; b++) {
            if (a == b) { continue; }
            int n[2] = {0, 0};
            for (int side = 0; side < 2; side++) { /* side 0: a's sends to b; side 1: b's receives from a */
                int s = side ? b : a, peer = side ? a : b;
                for (int k = 0; k < sc->count[s];) {
                    if (sc->act[s][k].kind < PIPE_SEND_ACT) { k++; continue; }
                    int e = pipe_group_end(sc, s, k), len = 0;
                    for (int x = k; x < e; x++) {
                        PipeAction y;
                        g[len].a = sc->act[s][x];
                        pipe_partner(sc, s, &sc->act[s][x], &g[len].peer, &y);
                        g[len].tag = pipe_tag(sc, s, &sc->act[s][x]);
                        len++;
                    }
                    qsort(g, (size_t)len, sizeof(PipeTransfer), pipe_transfer_cmp);
                    for (int x = 0; x < len; x++) {
                        int send = g[x].a.kind == PIPE_SEND_ACT || g[x].a.kind == PIPE_SEND_GRAD;
                        if (g[x].peer == peer && send == !side) { seq[side][n[side]++] = g[x].tag; }
                    }
                    k = e;
                }
            }
            for (int k = 0; ok && k < (n[0] > n[1] ? n[0] : n[1]); k++) {
                if (k >= n[0] || k >= n[1] || seq[0][k] != seq[1][k]) {
                    snprintf(err, cap, "rank %d -> rank %d, message %d: sent with tag %d, received with tag %d", a, b, k,
                             k < n[0] ? seq[0][k] : -1, k < n[1] ? seq[1][k] : -1);
                    ok = 0;
                }
            }
        }
    }
    free(seq[0]); free(seq[1]); free(g);
    return ok;
}

/* the wait of the transfer group at actions [p0, p1) of rank s that pipe_run posted (ex->wait when the executor
 * posts; the group is complete already otherwise), then what it completes for the slots; timed as an event of the
 * group's kind with n = 0 transfers */
static inline void pipe_run_wait(const PipeSchedule* sc, int s, const PipeExecutor* ex, PipeSlots* ps, PipeTimeline* tl,
                                 int p0, int p1, int timed) {
    double t0 = timed ? ex->clock(ex->ctx) : 0.0;
    if (ex->post && ex->wait) { ex->wait(ex->ctx); }
    for (int a = p0; a < p1; a++) { pipe_slots_after(sc, s, ps, &sc->act[s][a]); }
    const PipeAction* x = &sc->act[s][p0];
    if (timed) { pipe_timeline_add(tl, x->kind, x->micro, x->chunk, 0, t0, ex->clock(ex->ctx)); }
}

/* Runs rank s's actions of schedule sc through ex, with activation slots ps (pipe_slots_alloc with at least
 * pipe_slots_needed slots per chunk); records every action in tl (when tl and ex->clock are set; tl is reset). */
static inline void pipe_run(const PipeSchedule* sc, int s, const PipeExecutor* ex, PipeSlots* ps, PipeTimeline* tl) {
    int timed = tl && ex->clock;
    if (sc->split && !ex->weight) {
        FATAL("pipeline schedule %s splits the backward into B and W, but the executor has no weight callback",
              pipe_schedule_name(sc->kind));
    }
    if (timed) { tl->n = 0; tl->t0 = ex->clock(ex->ctx); }
    PipeTransfer* group = (PipeTransfer*)malloc_check((size_t)(sc->count[s] + 1) * sizeof(PipeTransfer), "pipeline group");
    int k = 0, p0 = -1, p1 = -1; /* [p0, p1): the group posted and not yet waited for (sc->overlap; pipe_slots_walk) */
    while (k < sc->count[s]) {
        const PipeAction* x = &sc->act[s][k];
        double t0 = timed ? ex->clock(ex->ctx) : 0.0;
        if (p0 >= 0 && (x->kind >= PIPE_SEND_ACT || pipe_group_feeds(sc, s, p0, p1, x))) {
            pipe_run_wait(sc, s, ex, ps, tl, p0, p1, timed);
            p0 = -1;
            t0 = timed ? ex->clock(ex->ctx) : 0.0;
        }
        const PipeAction* y = k + 1 < sc->count[s] ? &sc->act[s][k + 1] : NULL;
        if (x->kind == PIPE_F && y && y->kind == PIPE_B && y->pair && ex->pair) { /* an overlapped F&B pair */
            if (p0 >= 0 && pipe_group_feeds(sc, s, p0, p1, y)) { /* what the B reads, before the pair starts */
                pipe_run_wait(sc, s, ex, ps, tl, p0, p1, timed);
                p0 = -1;
                t0 = timed ? ex->clock(ex->ctx) : 0.0;
            }
            int fs = pipe_slot_get(ps, x->micro, x->chunk, 1), bs = pipe_slot_get(ps, y->micro, y->chunk, 0);
            if (bs < 0) { FATAL("internal: B(%d,%d) on rank %d has no activation slot", y->micro, y->chunk, s); }
            ex->pair(ex->ctx, x->micro, x->chunk, fs, y->micro, y->chunk, bs);
            pipe_slots_after(sc, s, ps, x);
            pipe_slots_after(sc, s, ps, y);
            if (timed) { /* one slice each, the pair's time halved between them */
                double t1 = ex->clock(ex->ctx), tm = 0.5 * (t0 + t1);
                pipe_timeline_add(tl, PIPE_F, x->micro, x->chunk, 2, t0, tm);
                pipe_timeline_add(tl, PIPE_B, y->micro, y->chunk, 2, tm, t1);
            }
            k += 2;
            continue;
        }
        if (x->kind < PIPE_SEND_ACT) {
            int slot = pipe_slot_get(ps, x->micro, x->chunk, x->kind != PIPE_W);
            if (slot < 0) { FATAL("internal: %s(%d,%d) on rank %d has no activation slot", pipe_action_name(x->kind),
                                  x->micro, x->chunk, s); }
            if (x->kind == PIPE_F) { ex->forward(ex->ctx, x->micro, x->chunk, slot); }
            else if (x->kind == PIPE_B) { ex->backward(ex->ctx, x->micro, x->chunk, slot); }
            else { ex->weight(ex->ctx, x->micro, x->chunk, slot); }
            pipe_slots_after(sc, s, ps, x);
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
        if (sc->overlap && ex->post) { ex->post(ex->ctx, group, n); } else { ex->transfer(ex->ctx, group, n); }
        if (timed) { pipe_timeline_add(tl, x->kind, x->micro, x->chunk, n, t0, ex->clock(ex->ctx)); }
        if (sc->overlap) { p0 = k; p1 = end; } else { for (int a = k; a < end; a++) { pipe_slots_after(sc, s, ps, &sc->act[s][a]); } }
        k = end;
    }
    if (p0 >= 0) { pipe_run_wait(sc, s, ex, ps, tl, p0, p1, timed); }
    free(group);
    if (timed) { tl->t1 = ex->clock(ex->ctx); }
}

/* seconds a timeline spent in F, B and W */
static inline double pipe_timeline_busy(const PipeTimeline* tl) {
    double busy = 0.0;
    for (int k = 0; k < tl->n; k++) {
        if (tl->ev[k].kind < PIPE_SEND_ACT) { busy += tl->ev[k].t1 - tl->ev[k].t0; }
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
