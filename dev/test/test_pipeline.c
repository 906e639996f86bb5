/* dev/test/test_pipeline.c -- the pipeline schedules of llmc/pipeline.h on the simulator: for p <= 8 ranks and
 * m <= 32 micro-batches, gpipe, 1f1b, interleaved (v = 2, 3), zb-h1, dualpipev and dualpipe (even p) are
 * deadlock-free, every (micro-batch, chunk) cell that exists gets one forward, one backward and, for the schedules
 * that split the backward, one W (after its B, after its F), and the peak number of live activation sets of each
 * rank (F to B, or to W) equals the formula (gpipe m*v; 1f1b min(m, p - s); interleaved min(m v, 2 (p - s - 1) +
 * (v - 1) p + 1); zb-h1 p; dualpipev 2p + 1; dualpipe p + 1); the timed simulator gives every rank of the split
 * schedules the idle time of the DeepSeek-V3 report's Table 2 (pipe_bubble_table) where its assumptions hold
 * (test_bubble_table); the executor
 * (pipe_run, no-op callbacks) runs every rank's list within pipe_slots_needed slots, B and W on F's slot, a local
 * hand-over's source slot still held; deliberately broken schedules are rejected: a backward before its forward,
 * transfers reordered into a deadlock, a missing backward, a W before its B, a missing W, a W in a schedule that
 * does not split, a transfer across dualpipev's local hand-over, a cell dualpipe's micro-batch does not visit;
 * every pair of ranks posts its messages in the same order on both ends (NCCL's in-order matching);
 * impossible parameters are refused by the generator with one line naming the flag (checked in a child process). */
#include "llmc/pipeline.h"
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>
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

/* the layouts of p <= 8, m <= 32 (v = 2, 3 for interleaved, 1 otherwise) that `kind` allows */
static int layout_allowed(int kind, int p, int m, int v) {
    if ((kind == PIPE_INTERLEAVED) != (v > 1)) { return 0; }
    if (m < pipe_schedule_min_micro((PipeScheduleKind)kind, p)) { return 0; }
    if (kind == PIPE_INTERLEAVED && (m % p != 0 || p < 2)) { return 0; }
    if (kind == PIPE_DUALPIPE && (p % 2 != 0 || m % 2 != 0)) { return 0; }
    return 1;
}

static void test_all_schedules(void) {
    for (int kind = 0; kind < PIPE_SCHEDULE_KINDS; kind++) {
        int tried = 0, passed = 0;
        char why[512] = "";
        for (int p = 1; p <= 8; p++) {
            for (int m = 1; m <= 32; m++) {
                for (int v = 1; v <= 3; v++) {
                    if (!layout_allowed(kind, p, m, v)) { continue; }
                    tried++;
                    char w[512];
                    if (schedule_ok((PipeScheduleKind)kind, p, m, v, w, sizeof(w))) { passed++; } else if (!why[0]) { strcpy(why, w); }
                }
            }
        }
        TEST_CHECK(passed == tried && tried > 0, "%s: %d of %d layouts (p <= 8, m <= 32%s) deadlock-free, complete%s, peak "
                   "live activations = formula%s%s", pipe_schedule_name((PipeScheduleKind)kind), passed, tried,
                   kind == PIPE_INTERLEAVED ? ", v = 2, 3" : kind == PIPE_DUALPIPE ? ", even p and m" : "",
                   pipe_schedule_splits((PipeScheduleKind)kind) ? " (F, B, W once per cell, W after B)" : "",
                   why[0] ? "; first failure: " : "", why);
    }
}

/* the timed simulator against pipe_bubble_table (free transfers): every rank of a split schedule idles exactly the
 * table's time per step where the table's assumptions hold: zb-h1 with W <= F, B (the paper's condition; checked at
 * F = B = W, W = F/2, B = 2F, F = 2B), dualpipev and dualpipe with F = B >= W (checked at W = F and W = F/2; with
 * F != B their simulated idle differs from the table by up to a few units either way, the table being the report's
 * estimate) */
static void test_bubble_table(void) {
    const double costs[4][3] = {{1.0, 1.0, 1.0}, {1.0, 1.0, 0.5}, {1.0, 2.0, 1.0}, {2.0, 1.0, 1.0}};
    for (int kind = PIPE_ZBH1; kind <= PIPE_DUALPIPE; kind++) {
        int tried = 0, passed = 0, sets = kind == PIPE_ZBH1 ? 4 : 2;
        char why[256] = "";
        for (int k = 0; k < sets; k++) {
            double f = costs[k][0], b = costs[k][1], w = costs[k][2], cost[4] = {f, b, w, 0.0};
            for (int p = 1; p <= 8; p++) {
                for (int m = 1; m <= 32; m++) {
                    if (!layout_allowed(kind, p, m, 1)) { continue; }
                    PipeSchedule sc = pipe_schedule_build((PipeScheduleKind)kind, p, m, 1);
                    PipeSimResult r = pipe_simulate_costs(&sc, cost);
                    double want = pipe_bubble_table((PipeScheduleKind)kind, p, f, b, w, f + b + w);
                    double work = pipe_work_time((PipeScheduleKind)kind, p, m, 1, f, b, w);
                    int ok = r.ok;
                    for (int s = 0; s < p; s++) {
                        double idle = r.makespan - r.busy[s];
                        if (fabs(idle - want) > 1e-9 || fabs(r.busy[s] - work) > 1e-9) {
                            if (ok && !why[0]) {
                                snprintf(why, sizeof(why), "F %.1f B %.1f W %.1f p=%d m=%d rank %d: idle %.2f, table %.2f",
                                         f, b, w, p, m, s, idle, want);
                            }
                            ok = 0;
                        }
                    }
                    tried++;
                    passed += ok;
                    pipe_schedule_free(&sc);
                }
            }
        }
        const char* formula = kind == PIPE_ZBH1 ? "(p-1)(F+B-W) at F = B = W, W = F/2, B = 2F, F = 2B"
                            : kind == PIPE_DUALPIPEV ? "(p-1)(F&B+B-2W) at F = B = W and W = F/2"
                                                     : "(p/2-1)(F&B+B-2W) at F = B = W and W = F/2";
        TEST_CHECK(passed == tried && tried > 0, "%s: timed simulation (free transfers, F&B = F+B+W) idles %s on every "
                   "rank in %d of %d cases%s%s", pipe_schedule_name((PipeScheduleKind)kind), formula, passed, tried,
                   why[0] ? "; first failure: " : "", why);
    }
}

/* an executor that runs no model: checks what pipe_run hands it (B and W of a cell on its F's slot; a local
 * hand-over's source cell still holding its slot when its consumer runs) */
typedef struct {
    const PipeSchedule* sc;
    PipeSlots* ps;
    int s, bad;
    int* slot_of;     /* (m*v) the slot F gave each cell */
    int pairs;        /* overlapped F&B pairs run */
} CheckExec;

static void chk_forward(void* ctx, int micro, int chunk, int slot) {
    CheckExec* e = (CheckExec*)ctx;
    e->slot_of[micro * e->sc->v + chunk] = slot;
    int src;
    if (pipe_local_input(e->sc, e->s, micro, chunk, &src) && pipe_slot_get(e->ps, micro, src, 0) < 0) { e->bad++; }
}
static void chk_backward(void* ctx, int micro, int chunk, int slot) {
    CheckExec* e = (CheckExec*)ctx;
    if (e->slot_of[micro * e->sc->v + chunk] != slot) { e->bad++; }
    int r, c; /* the gradient of a local hand-over: the next chunk's cell must still hold its slot */
    if (pipe_next_of(e->sc, e->s, micro, chunk, &r, &c) && r == e->s && pipe_slot_get(e->ps, micro, c, 0) < 0) { e->bad++; }
}
static void chk_weight(void* ctx, int micro, int chunk, int slot) {
    CheckExec* e = (CheckExec*)ctx;
    if (e->slot_of[micro * e->sc->v + chunk] != slot) { e->bad++; }
}
static void chk_transfer(void* ctx, const PipeTransfer* t, int n) { (void)ctx; (void)t; (void)n; }
/* an overlapped pair: the F's and the B's own checks, on two different chunks (the model runs them interleaved) */
static void chk_pair(void* ctx, int fm, int fc, int fs, int bm, int bc, int bs) {
    CheckExec* e = (CheckExec*)ctx;
    if (fc == bc) { e->bad++; }
    chk_forward(ctx, fm, fc, fs);
    chk_backward(ctx, bm, bc, bs);
    e->pairs++;
}

static void test_executor_slots(void) {
    int tried = 0, passed = 0;
    char why[256] = "";
    for (int kind = 0; kind < PIPE_SCHEDULE_KINDS; kind++) {
        for (int p = 1; p <= 8; p++) {
            for (int m = 1; m <= 32; m += 3) {
                int v = kind == PIPE_INTERLEAVED ? 2 : 1;
                if (!layout_allowed(kind, p, m, v)) { continue; }
                PipeSchedule sc = pipe_schedule_build((PipeScheduleKind)kind, p, m, v);
                for (int s = 0; s < p; s++) {
                    int need[8], most = 1;
                    pipe_slots_needed(&sc, s, need);
                    for (int c = 0; c < sc.v; c++) { most = need[c] > most ? need[c] : most; }
                    PipeSlots ps = pipe_slots_alloc(m, sc.v, most);
                    int* slot_of = (int*)calloc((size_t)m * sc.v, sizeof(int));
                    CheckExec e = {&sc, &ps, s, 0, slot_of, 0};
                    PipeExecutor ex = {&e, chk_forward, chk_backward, chk_transfer, NULL, chk_weight, NULL, NULL,
                                       chk_pair};
                    pipe_run(&sc, s, &ex, &ps, NULL); /* FATAL if a chunk runs out of its slots */
                    int held = 0, dual = kind == PIPE_DUALPIPEV || kind == PIPE_DUALPIPE;
                    for (int c = 0; c < sc.v; c++) { held += ps.held[c]; }
                    tried++;
                    if (e.bad == 0 && held == 0 && (dual ? e.pairs >= 1 : e.pairs == 0)) { passed++; }
                    else if (!why[0]) { snprintf(why, sizeof(why), "%s p=%d m=%d rank %d: %d wrong slots, %d held at the "
                                                 "end, %d overlapped pairs", pipe_schedule_name((PipeScheduleKind)kind),
                                                 p, m, s, e.bad, held, e.pairs); }
                    free(slot_of);
                    pipe_slots_free(&ps);
                }
                pipe_schedule_free(&sc);
            }
        }
    }
    TEST_CHECK(passed == tried && tried > 0, "executor: %d of %d ranks (every schedule, p <= 8, m = 1, 4, .., 31) run "
               "within pipe_slots_needed slots, B and W on F's slot, a local hand-over's source slot held, every slot "
               "given back; dualpipe(v)'s ranks run at least one overlapped F&B pair (two chunks), the others none%s%s",
               passed, tried, why[0] ? "; first failure: " : "", why);
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
    /* zb-h1, p = 2, m = 4: on rank 1 the first W moved before its B */
    sc = pipe_schedule_build(PIPE_ZBH1, 2, 4, 1);
    int w = -1;
    b = -1;
    for (int k = 0; k < sc.count[1]; k++) {
        if (sc.act[1][k].kind == PIPE_W && w < 0) { w = k; }
    }
    for (int k = 0; k < sc.count[1]; k++) {
        if (sc.act[1][k].kind == PIPE_B && sc.act[1][k].micro == sc.act[1][w].micro) { b = k; }
    }
    swap_actions(&sc, 1, b, w);
    r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "W(0,0) before its B"), "a W before its B is rejected: %s", r.error);
    swap_actions(&sc, 1, b, w);
    r = pipe_simulate(&sc);
    TEST_CHECK(r.ok, "the same list in its order runs (%s)", r.ok ? "ok" : r.error);
    /* the last W of rank 0 dropped */
    sc.count[0]--;
    r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "weight gradient (W) missing"), "a missing W is rejected: %s", r.error);
    sc.count[0]++;
    /* the same list as a schedule that does not split its backward */
    sc.split = 0;
    r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "does not split"), "a W in a schedule without the B / W split is rejected: %s",
               r.error);
    pipe_schedule_free(&sc);
    /* dualpipev, p = 2, m = 4: rank 1's first F of chunk 1 preceded by a receive (its input is local) */
    sc = pipe_schedule_build(PIPE_DUALPIPEV, 2, 4, 1);
    for (int k = 0; k < sc.count[1]; k++) {
        if (sc.act[1][k].kind == PIPE_F && sc.act[1][k].chunk == 1) {
            sc.act[1][k].kind = PIPE_RECV_ACT;
            sc.act[1][k].group = 1 << 20;
            break;
        }
    }
    r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "local hand-over"), "a transfer across dualpipev's local hand-over is rejected: %s",
               r.error);
    pipe_schedule_free(&sc);
    /* dualpipe, p = 2, m = 4: micro-batch 0 (down) given a forward on chunk 1 (up) */
    sc = pipe_schedule_build(PIPE_DUALPIPE, 2, 4, 1);
    for (int k = 0; k < sc.count[0]; k++) {
        if (sc.act[0][k].kind == PIPE_F && sc.act[0][k].micro == 0) { sc.act[0][k].chunk = 1; break; }
    }
    r = pipe_simulate(&sc);
    TEST_CHECK(!r.ok && strstr(r.error, "does not visit"), "a cell a dualpipe micro-batch does not visit is rejected: %s",
               r.error);
    pipe_schedule_free(&sc);
}

/* pipe_schedule_build in a child: its exit status and first line on stderr */
static int build_refused(PipeScheduleKind kind, int p, int m, int v, char* line, size_t cap) {
    int fd[2];
    line[0] = 0;
    if (pipe(fd) != 0) { return 0; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        PipeSchedule sc = pipe_schedule_build(kind, p, m, v);
        pipe_schedule_free(&sc);
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(fd[0], line + n, cap - 1 - n)) > 0) { n += (size_t)got; }
    line[n] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    char* nl = strchr(line, '\n');
    int lines = nl && nl[1] == 0;
    if (nl) { *nl = 0; }
    return WIFEXITED(status) && WEXITSTATUS(status) != 0 && lines;
}

/* NCCL pairs a peer's messages in order: both ends of every pair see the same sequence (pipe_messages_in_order) */
static void test_message_order(void) {
    int tried = 0, passed = 0;
    char why[256] = "";
    for (int kind = 0; kind < PIPE_SCHEDULE_KINDS; kind++) {
        for (int p = 2; p <= 8; p++) {
            for (int m = 1; m <= 32; m++) {
                int v = kind == PIPE_INTERLEAVED ? 2 : 1;
                if (!layout_allowed(kind, p, m, v)) { continue; }
                PipeSchedule sc = pipe_schedule_build((PipeScheduleKind)kind, p, m, v);
                char w[200];
                tried++;
                if (pipe_messages_in_order(&sc, w, sizeof(w))) { passed++; }
                else if (!why[0]) { snprintf(why, sizeof(why), "%s p=%d m=%d: %s", pipe_schedule_name((PipeScheduleKind)kind), p, m, w); }
                pipe_schedule_free(&sc);
            }
        }
    }
    TEST_CHECK(passed == tried && tried > 0, "every schedule (p 2..8, m <= 32, interleaved v = 2): each pair of ranks "
               "posts its messages in the same order on both ends, as NCCL's in-order matching needs (%d of %d)%s%s",
               passed, tried, why[0] ? "; first failure: " : "", why);
    /* swapped: rank 0 of gpipe p = 2, m = 2 sends micro-batch 1's activation before micro-batch 0's */
    PipeSchedule sc = pipe_schedule_build(PIPE_GPIPE, 2, 2, 1);
    int first = -1, second = -1;
    for (int k = 0; k < sc.count[0]; k++) {
        if (sc.act[0][k].kind == PIPE_SEND_ACT) { if (first < 0) { first = k; } else if (second < 0) { second = k; } }
    }
    int t = sc.act[0][first].micro;
    sc.act[0][first].micro = sc.act[0][second].micro;
    sc.act[0][second].micro = t;
    char w[200] = "";
    TEST_CHECK(!pipe_messages_in_order(&sc, w, sizeof(w)), "two sends swapped are found: %s", w);
    pipe_schedule_free(&sc);
}

static void test_refusals(void) {
    struct { PipeScheduleKind kind; int p, m, v; const char* flag; const char* what; } cases[] = {
        {PIPE_DUALPIPE, 3, 6, 1, "--pp", "dualpipe with an odd --pp"},
        {PIPE_DUALPIPE, 2, 5, 1, "-d", "dualpipe with an odd m"},
        {PIPE_DUALPIPE, 4, 6, 1, "-d", "dualpipe with m < 2p"},
        {PIPE_DUALPIPEV, 4, 7, 1, "-d", "dualpipev with m < 2p"},
        {PIPE_ZBH1, 4, 3, 1, "-d", "zb-h1 with m < p"},
        {PIPE_ZBH1, 2, 4, 2, "--pp-virtual", "zb-h1 with --pp-virtual 2"},
        {PIPE_DUALPIPEV, 2, 4, 3, "--pp-virtual", "dualpipev with v 3 (its V is 2 chunks; the trainer refuses --pp-virtual)"},
        {PIPE_DUALPIPE, 2, 4, 3, "--pp-virtual", "dualpipe with v 3"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char line[512];
        int ok = build_refused(cases[k].kind, cases[k].p, cases[k].m, cases[k].v, line, sizeof(line));
        TEST_CHECK(ok && strstr(line, cases[k].flag) && strstr(line, pipe_schedule_name(cases[k].kind)),
                   "%s (p %d, m %d, v %d) refused in one line naming %s: %s", cases[k].what, cases[k].p, cases[k].m,
                   cases[k].v, cases[k].flag, line);
    }
}

static void test_bubble_formulas(void) {
    TEST_CHECK(fabs(pipe_bubble_theory(PIPE_1F1B, 4, 8, 1) - 3.0 / 11.0) < 1e-12 &&
               fabs(pipe_bubble_theory(PIPE_INTERLEAVED, 4, 8, 2) - 3.0 / 19.0) < 1e-12,
               "bubble (p-1)/(m+p-1) = 3/11 at p 4, m 8; interleaved (p-1)/(v m+p-1) = 3/19 at v 2");
}

/* the DeepSeek-V3 report's Table 2 (b the input gradient, w the weight gradients: the report's B is b + w) */
static void test_bubble_table_formulas(void) {
    double f = 1.0, b = 0.8, w = 0.6, fb = 2.1; /* an overlapped pair shorter than f + b + w */
    int p = 8;
    TEST_CHECK(fabs(pipe_bubble_table(PIPE_1F1B, p, f, b, w, fb) - 7 * (f + b + w)) < 1e-12 &&
               fabs(pipe_bubble_table(PIPE_ZBH1, p, f, b, w, fb) - 7 * (f + (b + w) - 2 * w)) < 1e-12 &&
               fabs(pipe_bubble_table(PIPE_DUALPIPE, p, f, b, w, fb) - 3 * (fb + (b + w) - 3 * w)) < 1e-12 &&
               fabs(pipe_bubble_table(PIPE_DUALPIPEV, p / 2, f, b, w, fb) - 3 * (fb + (b + w) - 3 * w)) < 1e-12,
               "Table 2 at PP = 8: 1F1B (PP-1)(F+B), ZB1P (PP-1)(F+B-2W), DualPipe (PP/2-1)(F&B+B-3W), DualPipeV the same "
               "on PP/2 ranks (B = the full backward)");
    TEST_CHECK(pipe_schedule_param_copies(PIPE_1F1B) == 1 && pipe_schedule_param_copies(PIPE_ZBH1) == 1 &&
               pipe_schedule_param_copies(PIPE_DUALPIPE) == 2 && pipe_schedule_param_copies(PIPE_DUALPIPEV) == 1 &&
               pipe_activation_table(PIPE_1F1B, 8) == 8 && pipe_activation_table(PIPE_ZBH1, 8) == 8 &&
               pipe_activation_table(PIPE_DUALPIPE, 8) == 9 && pipe_activation_table(PIPE_DUALPIPEV, 4) == 9,
               "parameter copies 1, 1, 2 (dualpipev 1) and activations PP, PP, PP + 1 per rank");
    int ok = 1;
    for (int p = 2; p <= 8; p += 2) { /* the table's activation memory is the simulator's peak (pipe_peak_theory) */
        ok &= pipe_peak_theory(PIPE_ZBH1, p, 2 * p, 1, 0) == pipe_activation_table(PIPE_ZBH1, p);
        ok &= pipe_peak_theory(PIPE_DUALPIPE, p, 2 * p, 1, 0) == pipe_activation_table(PIPE_DUALPIPE, p);
        ok &= pipe_peak_theory(PIPE_DUALPIPEV, p, 2 * p, 1, 0) == pipe_activation_table(PIPE_DUALPIPEV, p);
    }
    TEST_CHECK(ok, "the simulator's peak live activation sets (one set = a micro-batch on one stage) equal the table's "
               "activation memory: zb-h1 p, dualpipe p + 1, dualpipev 2p + 1 (PP + 1, PP = 2p stages)");
}

int main(void) {
    test_all_schedules();
    test_broken_schedules();
    test_bubble_table();
    test_executor_slots();
    test_message_order();
    test_refusals();
    test_bubble_formulas();
    test_bubble_table_formulas();
    return testing_finish();
}
