/*
 * dev/test/mpi_pipe_bubble.c -- the pipeline bubble measured through the real executor (llmc/pipeline.h pipe_run,
 * comm_p2p_batch transfers between the processes, the trainer's measurement pipe_bubble_measured) with stages of
 * equal, known cost: every forward sleeps tf and every backward tb (no computation, so the 2 CPU cores of CI do
 * not distort the costs). Run by dev/test/cli_pp_bubble.sh as `mpirun -np 4 build/mpi_pipe_bubble`.
 *
 * For p = world ranks and m = 8 micro-batches, rank 0 prints one line per check (failure flags all-reduced first):
 *   - gpipe and 1f1b (tf = 10 ms, tb = 20 ms): the measured bubble, the median of 3 steps after a warm-up step, is
 *     within 25% (relative) of (p-1)/(m+p-1) (Narayanan et al. 2021, section 2.2; the 25% covers process wake-up
 *     and message latency, about 1 ms per action here);
 *   - interleaved with v = 2 chunks per rank, each chunk half a stage (tf/2, tb/2): the measured bubble is smaller
 *     than 1f1b's, as (p-1)/(v m+p-1) < (p-1)/(m+p-1) says;
 *   - every step's boundary messages arrived with their sender's values (a transfer paired with the wrong peer or
 *     micro-batch fails).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llmc/utils.h"
#include "llmc/comm.h"
#include "llmc/pipeline.h"
#include "dev/test/mpi_check.h"

static Comm g;
#define MSG 64 /* floats per boundary message */
typedef struct {
    double tf, tb;        /* seconds per forward / backward of one chunk */
    float* buf;           /* (v * max_slots, MSG) one message buffer per activation slot of each chunk */
    int max_slots, v, wrong;
} Sleeper;

static void sleep_for(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}
static void fwd(void* ctx, int micro, int chunk, int slot) { (void)micro; (void)chunk; (void)slot; sleep_for(((Sleeper*)ctx)->tf); }
static void bwd(void* ctx, int micro, int chunk, int slot) { (void)micro; (void)chunk; (void)slot; sleep_for(((Sleeper*)ctx)->tb); }
static double clk(void* ctx) { (void)ctx; return wall_seconds(); }

/* a message's contents: who sent it, for which micro-batch and whether it is a gradient */
static float msg_value(int sender, int micro, int grad, int i) { return (float)(sender * 100000 + micro * 100 + grad * 10 + i % 7); }

static void transfer(void* ctx, const PipeTransfer* t, int n) {
    Sleeper* sl = (Sleeper*)ctx;
    CommP2P ops[8];
    for (int a = 0; a < n; a++) {
        int send = t[a].a.kind == PIPE_SEND_ACT || t[a].a.kind == PIPE_SEND_GRAD;
        int grad = t[a].a.kind == PIPE_SEND_GRAD || t[a].a.kind == PIPE_RECV_GRAD;
        float* b = sl->buf + ((size_t)t[a].a.chunk * sl->max_slots + t[a].slot) * MSG * 2 + (grad ? MSG : 0);
        if (send) { for (int i = 0; i < MSG; i++) { b[i] = msg_value(g.rank, t[a].a.micro, grad, i); } }
        CommP2P o = {send, t[a].peer, b, COMM_F32, MSG, t[a].tag};
        ops[a] = o;
    }
    comm_p2p_batch(&g, ops, n);
    for (int a = 0; a < n; a++) {
        if (ops[a].send) { continue; }
        int grad = t[a].a.kind == PIPE_RECV_GRAD;
        for (int i = 0; i < MSG; i++) {
            if (((float*)ops[a].buf)[i] != msg_value(t[a].peer, t[a].a.micro, grad, i)) { sl->wrong++; break; }
        }
    }
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* the median bubble of `steps` measured steps (after one warm-up step) of schedule kind */
static double measure(PipeScheduleKind kind, int m, int v, double tf, double tb, int steps, int* wrong) {
    int p = g.world;
    PipeSchedule sc = pipe_schedule_build(kind, p, m, v);
    int need[64];
    pipe_slots_needed(&sc, g.rank, need);
    int most = 1;
    for (int k = 0; k < v; k++) { most = need[k] > most ? need[k] : most; }
    Sleeper sl = {tf, tb, NULL, most, v, 0};
    sl.buf = (float*)calloc_check((size_t)v * most * MSG * 2, sizeof(float), "messages");
    PipeSlots ps = pipe_slots_alloc(m, v, most);
    PipeExecutor ex = {&sl, fwd, bwd, transfer, clk};
    PipeTimeline tl;
    memset(&tl, 0, sizeof(tl));
    double b[16];
    for (int k = 0; k <= steps; k++) {
        comm_barrier(&g);
        pipe_run(&sc, g.rank, &ex, &ps, &tl);
        double* x = (double*)calloc_check(2 * (size_t)p, sizeof(double), "bubble");
        x[g.rank] = pipe_timeline_busy(&tl);
        x[p + g.rank] = tl.t1 - tl.t0;
        comm_all_reduce_host_f64(&g, x, 2 * p);
        if (k > 0) { b[k - 1] = pipe_bubble_measured(x, x + p, p); }
        free(x);
    }
    qsort(b, (size_t)steps, sizeof(double), cmp_double);
    *wrong += sl.wrong;
    free(tl.ev);
    free(sl.buf);
    pipe_slots_free(&ps);
    pipe_schedule_free(&sc);
    return b[steps / 2];
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
    const double tf = 0.020, tb = 0.040;
    double gp = measure(PIPE_GPIPE, m, 1, tf, tb, 3, &wrong);
    double of = measure(PIPE_1F1B, m, 1, tf, tb, 3, &wrong);
    double il = measure(PIPE_INTERLEAVED, m, 2, tf / 2, tb / 2, 3, &wrong);
    double th = pipe_bubble_theory(PIPE_1F1B, p, m, 1), thi = pipe_bubble_theory(PIPE_INTERLEAVED, p, m, 2);
    if (g.rank == 0) {
        printf("# schedule     p  m  v  theory  measured (median of 3 steps; F %.0f ms, B %.0f ms per stage)\n",
               tf * 1e3, tb * 1e3);
        printf("# gpipe        %d  %d  1  %5.1f%%  %5.1f%%\n", p, m, 100 * th, 100 * gp);
        printf("# 1f1b         %d  %d  1  %5.1f%%  %5.1f%%\n", p, m, 100 * th, 100 * of);
        printf("# interleaved  %d  %d  2  %5.1f%%  %5.1f%%\n", p, m, 100 * thi, 100 * il);
    }
    check_all(gp > 0.75 * th && gp < 1.25 * th, "gpipe at p %d, m %d: measured bubble %.1f%% within 25%% of "
              "(p-1)/(m+p-1) = %.1f%%", p, m, 100 * gp, 100 * th);
    check_all(of > 0.75 * th && of < 1.25 * th, "1f1b at p %d, m %d: measured bubble %.1f%% within 25%% of "
              "(p-1)/(m+p-1) = %.1f%%", p, m, 100 * of, 100 * th);
    check_all(il < of, "interleaved (v = 2) at p %d, m %d: measured bubble %.1f%% below 1f1b's %.1f%% (theory %.1f%%)",
              p, m, 100 * il, 100 * of, 100 * thi);
    check_all(wrong == 0, "every boundary message came from the expected stage for the expected micro-batch (%d wrong)",
              wrong);
    int rc = mpi_check_summary();
    comm_finalize(&g);
    return rc;
}
