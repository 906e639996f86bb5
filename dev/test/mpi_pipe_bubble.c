/*
 * dev/test/mpi_pipe_bubble.c -- the pipeline bubble measured through the real executor (llmc/pipeline.h pipe_run,
 * comm_p2p_batch transfers between the processes, the trainer's measurement pipe_bubble_measured) with stages of
 * known cost: every forward sleeps tf, every backward tb and every weight-gradient pass tw (no computation, so the
 * 2 CPU cores of CI do not distort the costs). Run by dev/test/cli_pp_bubble.sh as `mpirun -np 4
 * build/mpi_pipe_bubble`.
 *
 * For p = world ranks and m = 8 micro-batches, rank 0 prints a table (schedule, p, m, theory, measured) and one line
 * per check (failure flags all-reduced first). Every measured bubble is the median of 3 steps after a warm-up step:
 * the machine is shared and a preempted process only ever lengthens a step, so one disturbed step must not decide
 * (requiring all three would fail on any preemption; the median needs two of three clean):
 *   - gpipe and 1f1b (tf = 20 ms, tb = 40 ms): within 25% (relative) of (p-1)/(m+p-1) (Narayanan et al. 2021,
 *     section 2.2; the 25% covers process wake-up and message latency, about 1 ms per action here);
 *   - interleaved with v = 2 chunks per rank, each chunk half a stage (tf/2, tb/2): smaller than 1f1b's, as
 *     (p-1)/(v m+p-1) < (p-1)/(m+p-1) says;
 *   - the split schedules in a real layer's ratios, F = B = W = u = 10 ms per stage (B and W each cost about a
 *     forward in a matmul-dominated layer; 1f1b's backward is B + W = 2u), transfers the real small messages: zb-h1
 *     (F, B, W = u), dualpipev (two chunks of half a stage per rank: u/2 each, the same work per rank) and dualpipe
 *     (a stage per chunk, one chunk per micro-batch: u each, the same work per rank) within 25% (relative) or 5
 *     points of their theory (pipe_bubble_table, the DeepSeek-V3 report's Table 2: ZB1P (p-1)(F+B-2W),
 *     DualPipe (p/2-1)(F&B+B-3W), over the step = work + idle; the 5 points: at 10 ms per action the wake-up and
 *     message latency on a shared 2-core machine at load average 4 measured up to +4.9 points for zb-h1, while an
 *     order that loses the split's gain, zb-h1 with its W before every gradient send, idles 2(p-1) units, 20% here),
 *     and zb-h1 and dualpipev below 1f1b's measured bubble
 *     at the same m (1f1b's run above: tf : tb = 1 : 2 = F : B + W; a bubble share does not depend on the unit, and
 *     the longer actions there make its overheads relatively smaller, so the comparison is not flattered);
 *   - the overlap (sc->overlap, the executor's post / wait): dualpipev with a slow link, every transfer group taking
 *     u = 10 ms from its post (the wait sleeps what is left), steps faster with post / wait than with each group
 *     blocking (the compute between a post and its wait hides up to one action's time per group; measured 497 vs
 *     538 ms at p 4, m 8 on 2 loaded cores, so the check is an ordering, like the one above);
 *   - every step's boundary messages arrived with their sender's values (a transfer paired with the wrong peer or
 *     micro-batch fails; with the overlap, a send buffer reused before its wait fails too).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include "llmc/utils.h"
#include "llmc/comm.h"
#include "llmc/pipeline.h"
#include "dev/test/mpi_check.h"

static Comm g;
#define MSG 64 /* floats per boundary message */
typedef struct {
    double tf, tb, tw;    /* seconds per forward / backward (input gradient) / weight gradients of one chunk */
    float* buf;           /* (v * max_slots, MSG) one message buffer per activation slot of each chunk */
    int max_slots, v, wrong;
    double tx;            /* seconds a transfer group takes on the link (0: the real small messages only) */
    double posted_at;     /* the posted group: when, its transfers and messages (checked at the wait) */
    PipeTransfer t[8];
    CommP2P ops[8];
    int n;
} Sleeper;

static void sleep_for(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}
static void fwd(void* ctx, int micro, int chunk, int slot) { (void)micro; (void)chunk; (void)slot; sleep_for(((Sleeper*)ctx)->tf); }
static void bwd(void* ctx, int micro, int chunk, int slot) { (void)micro; (void)chunk; (void)slot; sleep_for(((Sleeper*)ctx)->tb); }
static void wgt(void* ctx, int micro, int chunk, int slot) { (void)micro; (void)chunk; (void)slot; sleep_for(((Sleeper*)ctx)->tw); }
static double clk(void* ctx) { (void)ctx; return wall_seconds(); }

/* a message's contents: who sent it, for which micro-batch and whether it is a gradient */
static float msg_value(int sender, int micro, int grad, int i) { return (float)(sender * 100000 + micro * 100 + grad * 10 + i % 7); }

/* posts a group (the executor's post): fills the send buffers with their sender's values */
static void post(void* ctx, const PipeTransfer* t, int n) {
    Sleeper* sl = (Sleeper*)ctx;
    CommP2P* ops = sl->ops;
    for (int a = 0; a < n; a++) {
        int send = t[a].a.kind == PIPE_SEND_ACT || t[a].a.kind == PIPE_SEND_GRAD;
        int grad = t[a].a.kind == PIPE_SEND_GRAD || t[a].a.kind == PIPE_RECV_GRAD;
        float* b = sl->buf + ((size_t)t[a].a.chunk * sl->max_slots + t[a].slot) * MSG * 2 + (grad ? MSG : 0);
        if (send) { for (int i = 0; i < MSG; i++) { b[i] = msg_value(g.rank, t[a].a.micro, grad, i); } }
        CommP2P o = {send, t[a].peer, b, COMM_F32, MSG, t[a].tag};
        ops[a] = o;
        sl->t[a] = t[a];
    }
    sl->n = n;
    sl->posted_at = wall_seconds();
    comm_p2p_post(&g, ops, n);
}
/* completes it (the executor's wait): the link time tx from the post, then every received message checked */
static void wait(void* ctx) {
    Sleeper* sl = (Sleeper*)ctx;
    comm_p2p_wait(&g);
    double left = sl->posted_at + sl->tx - wall_seconds();
    if (left > 0) { sleep_for(left); }
    for (int a = 0; a < sl->n; a++) {
        if (sl->ops[a].send) { continue; }
        int grad = sl->t[a].a.kind == PIPE_RECV_GRAD;
        for (int i = 0; i < MSG; i++) {
            if (((float*)sl->ops[a].buf)[i] != msg_value(sl->t[a].peer, sl->t[a].a.micro, grad, i)) { sl->wrong++; break; }
        }
    }
    sl->n = 0;
}
static void transfer(void* ctx, const PipeTransfer* t, int n) { post(ctx, t, n); wait(ctx); }

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* the median bubble of `steps` measured steps (after one warm-up step) of schedule kind, transfers taking tx on the
 * link; overlap 0: the executor has no post / wait (each group blocks); *step (if set): the median step seconds */
static double measure_x(PipeScheduleKind kind, int m, int v, double tf, double tb, double tw, double tx, int overlap,
                        int steps, int* wrong, double* step) {
    int p = g.world;
    PipeSchedule sc = pipe_schedule_build(kind, p, m, v);
    int need[64];
    v = sc.v; /* dualpipev and dualpipe: 2 chunks */
    pipe_slots_needed(&sc, g.rank, need);
    int most = 1;
    for (int k = 0; k < v; k++) { most = need[k] > most ? need[k] : most; }
    Sleeper sl;
    memset(&sl, 0, sizeof(sl));
    sl.tf = tf; sl.tb = tb; sl.tw = tw; sl.max_slots = most; sl.v = v; sl.tx = tx;
    sl.buf = (float*)calloc_check((size_t)v * most * MSG * 2, sizeof(float), "messages");
    PipeSlots ps = pipe_slots_alloc(m, v, most);
    PipeExecutor ex = {&sl, fwd, bwd, transfer, clk, wgt, overlap ? post : NULL, overlap ? wait : NULL, NULL};
    PipeTimeline tl;
    memset(&tl, 0, sizeof(tl));
    double b[16], t[16];
    for (int k = 0; k <= steps; k++) {
        comm_barrier(&g);
        pipe_run(&sc, g.rank, &ex, &ps, &tl);
        double* x = (double*)calloc_check(2 * (size_t)p, sizeof(double), "bubble");
        x[g.rank] = pipe_timeline_busy(&tl);
        x[p + g.rank] = tl.t1 - tl.t0;
        comm_all_reduce_host_f64(&g, x, 2 * p);
        if (k > 0) {
            b[k - 1] = pipe_bubble_measured(x, x + p, p);
            t[k - 1] = 0.0;
            for (int r = 0; r < p; r++) { t[k - 1] = x[p + r] > t[k - 1] ? x[p + r] : t[k - 1]; }
        }
        free(x);
    }
    qsort(b, (size_t)steps, sizeof(double), cmp_double);
    qsort(t, (size_t)steps, sizeof(double), cmp_double);
    if (step) { *step = t[steps / 2]; }
    *wrong += sl.wrong;
    free(tl.ev);
    free(sl.buf);
    pipe_slots_free(&ps);
    pipe_schedule_free(&sc);
    return b[steps / 2];
}

static double measure(PipeScheduleKind kind, int m, int v, double tf, double tb, double tw, int steps, int* wrong) {
    return measure_x(kind, m, v, tf, tb, tw, 0.0, 1, steps, wrong, NULL);
}

/* the theory of a split schedule: pipe_bubble_table's idle over the step (work + idle), f, b, w one chunk's costs */
static double split_theory(PipeScheduleKind kind, int p, int m, double f, double b, double w) {
    double idle = pipe_bubble_table(kind, p, f, b, w, f + b + w), work = pipe_work_time(kind, p, m, 1, f, b, w);
    return idle / (work + idle);
}

int main(int argc, char** argv) {
    comm_init(&g, &argc, &argv, "", 60.0);
    mpi_checks.comm = &g;
    int p = g.world, m = 8, wrong = 0;
    if (p < 2) {
        if (g.rank == 0) { printf("not ok - run under mpirun with 2 or more processes (this has %d)\n", p); }
        comm_finalize(&g);
        return 1;
    }
    const double tf = 0.020, tb = 0.040, u = 0.010;
    double gp = measure(PIPE_GPIPE, m, 1, tf, tb, 0, 3, &wrong);
    double of = measure(PIPE_1F1B, m, 1, tf, tb, 0, 3, &wrong);
    double il = measure(PIPE_INTERLEAVED, m, 2, tf / 2, tb / 2, 0, 3, &wrong);
    double zb = measure(PIPE_ZBH1, m, 1, u, u, u, 3, &wrong);
    double dv = measure(PIPE_DUALPIPEV, m, 1, u / 2, u / 2, u / 2, 3, &wrong);
    int even = p % 2 == 0;
    double dp = even ? measure(PIPE_DUALPIPE, m, 1, u, u, u, 3, &wrong) : 0.0;
    double th = pipe_bubble_theory(PIPE_1F1B, p, m, 1), thi = pipe_bubble_theory(PIPE_INTERLEAVED, p, m, 2);
    double thz = split_theory(PIPE_ZBH1, p, m, u, u, u), thv = split_theory(PIPE_DUALPIPEV, p, m, u / 2, u / 2, u / 2);
    double thd = even ? split_theory(PIPE_DUALPIPE, p, m, u, u, u) : 0.0;
    if (g.rank == 0) {
        printf("# schedule     p  m  v  theory  measured (median of 3 steps)  costs per chunk\n");
        printf("# gpipe        %d  %d  1  %5.1f%%  %5.1f%%  F %.0f ms, B %.0f ms\n", p, m, 100 * th, 100 * gp, tf * 1e3, tb * 1e3);
        printf("# 1f1b         %d  %d  1  %5.1f%%  %5.1f%%  F %.0f ms, B %.0f ms\n", p, m, 100 * th, 100 * of, tf * 1e3, tb * 1e3);
        printf("# interleaved  %d  %d  2  %5.1f%%  %5.1f%%  F %.0f ms, B %.0f ms\n", p, m, 100 * thi, 100 * il, tf * 5e2, tb * 5e2);
        printf("# zb-h1        %d  %d  1  %5.1f%%  %5.1f%%  F, B, W %.0f ms\n", p, m, 100 * thz, 100 * zb, u * 1e3);
        printf("# dualpipev    %d  %d  2  %5.1f%%  %5.1f%%  F, B, W %.0f ms (two half stages per rank)\n", p, m, 100 * thv, 100 * dv, u * 5e2);
        if (even) { printf("# dualpipe     %d  %d  2  %5.1f%%  %5.1f%%  F, B, W %.0f ms (two copies, one chunk per micro-batch)\n", p, m, 100 * thd, 100 * dp, u * 1e3); }
    }
    check_all(gp > 0.75 * th && gp < 1.25 * th, "gpipe at p %d, m %d: measured bubble %.1f%% within 25%% of "
              "(p-1)/(m+p-1) = %.1f%%", p, m, 100 * gp, 100 * th);
    check_all(of > 0.75 * th && of < 1.25 * th, "1f1b at p %d, m %d: measured bubble %.1f%% within 25%% of "
              "(p-1)/(m+p-1) = %.1f%%", p, m, 100 * of, 100 * th);
    check_all(il < of, "interleaved (v = 2) at p %d, m %d: measured bubble %.1f%% below 1f1b's %.1f%% (theory %.1f%%)",
              p, m, 100 * il, 100 * of, 100 * thi);
#define NEAR(x, t) (fabs((x) - (t)) <= 0.25 * (t) || fabs((x) - (t)) <= 0.05)
    check_all(NEAR(zb, thz), "zb-h1 at p %d, m %d (F = B = W): measured bubble %.1f%% within 25%% or 5 points of "
              "(p-1)(F+B-W) over the step = %.1f%%", p, m, 100 * zb, 100 * thz);
    check_all(NEAR(dv, thv), "dualpipev at p %d, m %d (F = B = W): measured bubble %.1f%% within 25%% or 5 points of "
              "(p-1)(F&B+B-2W) over the step = %.1f%%", p, m, 100 * dv, 100 * thv);
    check_all(!even || NEAR(dp, thd), "dualpipe at p %d, m %d (F = B = W): measured bubble %.1f%% within 25%% or 5 "
              "points of (p/2-1)(F&B+B-2W) over the step = %.1f%%", p, m, 100 * dp, 100 * thd);
    check_all(zb < of && dv < of, "zb-h1 (%.1f%%) and dualpipev (%.1f%%) below 1f1b (%.1f%%) at p %d, m %d, the same "
              "cost ratio (1f1b's backward = B + W)", 100 * zb, 100 * dv, 100 * of, p, m);
    /* the overlap: a slow link (each group tx = u on the wire) under dualpipev with and without post / wait */
    double so = 0.0, sb = 0.0;
    measure_x(PIPE_DUALPIPEV, m, 1, u / 2, u / 2, u / 2, u, 1, 3, &wrong, &so);
    measure_x(PIPE_DUALPIPEV, m, 1, u / 2, u / 2, u / 2, u, 0, 3, &wrong, &sb);
    if (g.rank == 0) { printf("# dualpipev with %.0f ms per transfer group: step %.1f ms overlapped, %.1f ms blocking\n", u * 1e3, so * 1e3, sb * 1e3); }
    check_all(so < sb, "dualpipev at p %d, m %d with %.0f ms per transfer group: the overlapped executor (post, compute, "
              "wait) steps in %.1f ms, below the blocking one's %.1f ms", p, m, u * 1e3, so * 1e3, sb * 1e3);
    check_all(wrong == 0, "every boundary message came from the expected stage for the expected micro-batch (%d wrong)",
              wrong);
    int rc = mpi_check_summary();
    comm_finalize(&g);
    return rc;
}
