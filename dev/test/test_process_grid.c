/*
 * dev/test/test_process_grid.c -- the pure parts of llmc/process_grid.h, without MPI:
 *   - coordinates <-> world rank round trips for several layouts: every rank maps to in-range coordinates,
 *     back to itself, and to the tp-fastest order of dev/test/grid_expect.h (rank = t + tp*(d + dp*p));
 *   - the comm_split colors and keys: two ranks share a color exactly when dev/test/grid_expect.h's
 *     membership rule says they are in the same group, the key is the member's position, and every group
 *     has its size;
 *   - pipeline neighbours and first/last stage;
 *   (the layout's validation, layout_check, is dev/test/test_layout.c's)
 *   - the one-process grid: every group is the world Comm, nothing split; a bad layout stops a forked
 *     process with exactly one "error:" line and status 1.
 */
#include <sys/wait.h>
#include "dev/test/testing.h"
#include "dev/test/grid_expect.h"

static void test_layout(int tp, int dp, int pp, int ep) {
    int W = tp * dp * pp;
    Layout L = grid_layout_for_world(W, tp, pp, ep);
    char err[512] = ""; /* layout_check_axes writes it only on a refusal */
    TEST_CHECK(layout_check_axes(&L, W, err, sizeof(err)) == LAYOUT_BUILDABLE && err[0] == '\0',
               "tp%d dp%d pp%d ep%d: the layout of %d processes is accepted", tp, dp, pp, ep, W);
    Layout D = grid_layout_for_world(W, tp, pp, ep);
    TEST_CHECK(D.tp == tp && D.dp == dp && D.pp == pp && D.ep == ep,
               "tp%d dp%d pp%d ep%d: grid_layout_for_world(%d) derives dp = %d", tp, dp, pp, ep, W, D.dp);
    int ok = 1;
    char* seen = (char*)calloc_check((size_t)W, 1, "seen");
    for (int r = 0; r < W; r++) {
        GridCoords c = grid_coords_of(&L, r);
        int t, d, p;
        expect_decompose(&L, r, &t, &d, &p);
        if (c.tp != t || c.dp != d || c.pp != p || c.ep != d % ep || c.expert_dp != d / ep) { ok = 0; }
        if (grid_world_rank(&L, c.tp, c.dp, c.pp) != r) { ok = 0; }
        if (c.tp + tp * (c.dp + dp * c.pp) != r) { ok = 0; }
        if (c.ep < 0 || c.ep >= ep || c.expert_dp < 0 || c.expert_dp >= dp / ep) { ok = 0; }
    }
    for (int p = 0; p < pp; p++) {
        for (int d = 0; d < dp; d++) {
            for (int t = 0; t < tp; t++) {
                int r = grid_world_rank(&L, t, d, p);
                if (r < 0 || r >= W || seen[r]) { ok = 0; } else { seen[r] = 1; }
            }
        }
    }
    free(seen);
    TEST_CHECK(ok, "tp%d dp%d pp%d ep%d: rank -> coordinates -> rank round trips, tp fastest, bijective", tp, dp, pp, ep);
    for (int k = 0; k < GRID_NGROUPS; k++) {
        GridGroup kind = (GridGroup)k;
        int gok = 1, size = grid_group_size(&L, kind);
        for (int a = 0; a < W; a++) {
            int ca, ka, members = 0;
            grid_group_color_key(&L, a, kind, &ca, &ka);
            if (ca < 0) { gok = 0; }
            for (int b = 0; b < W; b++) {
                int cb, kb, pos;
                grid_group_color_key(&L, b, kind, &cb, &kb);
                int same = expect_member(&L, kind, a, b, &pos);
                if ((ca == cb) != same || kb != pos) { gok = 0; }
                members += same;
            }
            if (members != size) { gok = 0; }
        }
        TEST_CHECK(gok, "tp%d dp%d pp%d ep%d: %s groups of %d (split colors and keys match the membership rule)",
                   tp, dp, pp, ep, grid_group_name(kind), size);
    }
    ok = 1;
    for (int r = 0; r < W; r++) {
        int t, d, p;
        expect_decompose(&L, r, &t, &d, &p);
        int prev = p > 0 ? r - tp * dp : -1, next = p < pp - 1 ? r + tp * dp : -1;
        if (grid_stage_peer(&L, r, -1) != prev || grid_stage_peer(&L, r, +1) != next) { ok = 0; }
    }
    TEST_CHECK(ok, "tp%d dp%d pp%d ep%d: pipeline neighbours are tp*dp = %d world ranks apart, -1 at the ends",
               tp, dp, pp, ep, tp * dp);
}

static void test_describe(void) {
    Layout L = grid_layout_for_world(8, 2, 2, 1);
    char buf[256];
    grid_describe(&L, 5, buf, sizeof(buf));
    TEST_CHECK(strcmp(buf, "rank 5 of 8: tp 1/2, dp 0/2, pp 1/2, ep 0/1, expert-dp 0/2 | layout tp 2 x dp 2 x pp 2, "
                           "ep 1 (tp fastest)") == 0, "grid_describe(tp2 dp2 pp2, rank 5): '%s'", buf);
    Layout E = grid_layout_for_world(8, 1, 1, 4);
    grid_describe(&E, 6, buf, sizeof(buf));
    TEST_CHECK(strstr(buf, "dp 6/8") && strstr(buf, "ep 2/4") && strstr(buf, "expert-dp 1/2"),
               "grid_describe(dp8 ep4, rank 6): '%s'", buf);
}

/* a one-process world: every group is the world Comm itself */
static void test_single_process(void) {
    Comm world;
    comm_init(&world, NULL, NULL, "", 10.0);
    ProcessGrid g;
    Layout L = grid_layout_for_world(world.world, 1, 1, 1);
    grid_init(&g, &world, &L);
    int ok = g.tp == &world && g.dp == &world && g.pp == &world && g.ep == &world && g.expert_dp == &world &&
             g.n_split == 0 && g.prev_stage_rank == -1 && g.next_stage_rank == -1 && g.is_first_stage &&
             g.is_last_stage && g.world_rank == 0 && g.world_size == 1;
    for (int k = 0; k < GRID_NGROUPS; k++) { ok = ok && g.origin[k] == GRID_FROM_WORLD; }
    TEST_CHECK(ok, "one process: every group is the world Comm, nothing split, first and last stage");
    grid_free(&g);
    comm_finalize(&world);
}

/* grid_init with a bad layout in a forked child: one "error:" line on stderr, exit status 1 */
static void test_fatal(void) {
    int fds[2];
    if (pipe(fds) != 0) { TEST_CHECK(0, "pipe()"); return; }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        Comm world;
        comm_init(&world, NULL, NULL, "", 10.0);
        Layout L = grid_layout_for_world(1, 1, 1, 1);
        L.tp = 2; /* tp 2 in a world of 1 */
        ProcessGrid g;
        grid_init(&g, &world, &L);
        _exit(0);
    }
    close(fds[1]);
    char out[2048];
    size_t n = 0;
    ssize_t k;
    while (n + 1 < sizeof(out) && (k = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0) { n += (size_t)k; }
    out[n] = '\0';
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    int lines = 0;
    for (size_t i = 0; i < n; i++) { lines += out[i] == '\n'; }
    TEST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && lines == 1 && strncmp(out, "error: process grid: ", 21) == 0 &&
               strstr(out, "--tp 2"), "grid_init(tp 2) in a world of 1 exits 1 with one line: %.*s", (int)(n ? n - 1 : 0), out);
}

int main(void) {
    test_layout(2, 2, 2, 1);
    test_layout(4, 1, 2, 1);
    test_layout(2, 4, 1, 2);
    test_layout(1, 8, 1, 4);
    test_layout(8, 1, 1, 1);
    test_layout(1, 1, 8, 1);
    test_layout(1, 8, 1, 1);
    test_layout(3, 4, 5, 2);
    test_layout(2, 6, 3, 3);
    test_describe();
    test_single_process();
    test_fatal();
    return testing_finish();
}
