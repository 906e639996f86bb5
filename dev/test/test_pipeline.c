/* dev/test/test_pipeline.c -- the pipeline schedules of llmc/pipeline.h on the simulator: for p <= 8 ranks and
 * m <= 32 micro-batches, gpipe, 1f1b and interleaved (v = 2, 3) are deadlock-free, every (micro-batch, chunk) gets
 * one forward and one backward on every rank, and the peak number of live activation sets of each rank equals the
 * formula (gpipe m*v; 1f1b min(m, p - s); interleaved min(m v, 2 (p - s - 1) + (v - 1) p + 1)); deliberately
 * broken schedules are rejected: a backward before its forward, transfers reordered into a deadlock, a missing
 * backward; impossible parameters are refused by the generator (checked by the trainer's CLI tests). */
#include "llmc/pipeline.h"
#include <math.h>
#include "dev/test/testing.h"

static int schedule_ok(PipeScheduleKind kind, int p, int m, int v, char* why, size_t cap) {
    PipeSchedule sc = pipe_schedule_build(kind, p, m, v);
    PipeSimResult r = pipe_simulate(&sc);
    int ok = r.ok;
    if (!ok) { snprintf(why, cap, "%s p=%d m=%d v=%d: %s", pipe_schedule_name(kind), p, m, v, r.error); }
    for (int s = 0; ok && s < p; s++) {
        int want = pipe_peak_theory(kind, p, m, v, s);
        if (r.peak[s] != want) {
            ok = 0;
            snprintf(why, cap, "%s p=%d m=%d v=%d rank %d: peak %d live activation sets, formula %d",
                     pipe_schedule_name(kind), p, m, v, s, r.peak[s], want);
        }
    }
    pipe_schedule_free(&sc);
    return ok;
}

static void test_all_schedules(void) {
    for (int kind = 0; kind < 3; kind++) {
        int tried = 0, passed = 0;
        char why[512] = "";
        for (int p = 1; p <= 8; p++) {
            for (int m = 1; m <= 32; m++) {
                for (int v = 1; v <= 3; v++) {
                    if ((kind == PIPE_INTERLEAVED) != (v > 1)) { continue; }
                    if (kind != PIPE_GPIPE && m < p) { continue; }
                    if (kind == PIPE_INTERLEAVED && (m % p != 0 || p < 2)) { continue; }
                    tried++;
                    char w[512];
                    if (schedule_ok((PipeScheduleKind)kind, p, m, v, w, sizeof(w))) { passed++; } else if (!why[0]) { strcpy(why, w); }
                }
            }
        }
        TEST_CHECK(passed == tried && tried > 0, "%s: %d of %d layouts (p <= 8, m <= 32%s) deadlock-free, complete, peak "
                   "live activations = formula%s%s", pipe_schedule_name((PipeScheduleKind)kind), passed, tried,
                   kind == PIPE_INTERLEAVED ? ", v = 2, 3" : "", why[0] ? "; first failure: " : "", why);
    }
}

/* a copy of rank s's action list with actions a and b swapped */
static void swap_actions(PipeSchedule* sc, int s, int a, int b) {
    PipeAction t = sc->act[s][a];
    sc->act[s][a] = sc->act[s][b];
    sc->act[s][b] = t;
}

static void test_broken_schedules(void) {
    /* 1f1b, p = 2, m = 4: on rank 1 the first B moved before its F */
    PipeSchedule sc = pipe_schedule_build(PIPE_1F1B, 2, 4, 1);
    int f = -1, b = -1;
    for (int k = 0; k < sc.count[1]; k++) {
        if (sc.act[1][k].kind == PIPE_F && f < 0) { f = k; }
        if (sc.act[1][k].kind == PIPE_B && b < 0) { b = k; }
    }
    swap_actions(&sc, 1, f, b);
    PipeSimResult r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "before its F"), "a backward before its forward is rejected: %s", r.error);
    pipe_schedule_free(&sc);
    /* gpipe, p = 2, m = 2: rank 0 receives micro-batch 0's gradient before sending micro-batch 1's activation,
     * which rank 1 needs before it can produce that gradient: a deadlock */
    sc = pipe_schedule_build(PIPE_GPIPE, 2, 2, 1);
    int send1 = -1, recv0 = -1;
    for (int k = 0; k < sc.count[0]; k++) {
        if (sc.act[0][k].kind == PIPE_SEND_ACT && sc.act[0][k].micro == 1) { send1 = k; }
        if (sc.act[0][k].kind == PIPE_RECV_GRAD && sc.act[0][k].micro == 0 && recv0 < 0) { recv0 = k; }
    }
    PipeAction moved = sc.act[0][recv0];
    moved.group = 1 << 20; /* a group of its own: posted before the activation it waits for is sent */
    for (int k = recv0; k > send1; k--) { sc.act[0][k] = sc.act[0][k - 1]; }
    sc.act[0][send1] = moved;
    r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "deadlock"), "transfers reordered into a deadlock are rejected: %s", r.error);
    pipe_schedule_free(&sc);
    /* a backward dropped from the end of rank 0's list */
    sc = pipe_schedule_build(PIPE_1F1B, 2, 4, 1);
    sc.count[0]--;
    r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "missing"), "a missing backward is rejected: %s", r.error);
    sc.count[0]++;
    pipe_schedule_free(&sc);
}

static void test_bubble_formulas(void) {
    TEST_CHECK(fabs(pipe_bubble_theory(PIPE_1F1B, 4, 8, 1) - 3.0 / 11.0) < 1e-12 &&
               fabs(pipe_bubble_theory(PIPE_INTERLEAVED, 4, 8, 2) - 3.0 / 19.0) < 1e-12,
               "bubble (p-1)/(m+p-1) = 3/11 at p 4, m 8; interleaved (p-1)/(v m+p-1) = 3/19 at v 2");
}

int main(void) {
    test_all_schedules();
    test_broken_schedules();
    test_bubble_formulas();
    return testing_finish();
}
