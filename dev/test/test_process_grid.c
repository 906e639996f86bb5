/*
 * dev/test/test_process_grid.c -- the pure parts of llmc/process_grid.h, without MPI:
 *   - coordinates <-> world rank round trips for several layouts: every rank maps to in-range coordinates,
 *     back to itself, and to the tp-fastest order of dev/test/grid_expect.h (rank = t + tp*(d + dp*p));
 *   - the comm_split colors and keys: two ranks share a color exactly when dev/test/grid_expect.h's
 *     membership rule says they are in the same group, the key is the member's position, and every group
 *     has its size;
 *   - pipeline neighbours and first/last stage;
 *   - every validation error: the message names the flag and the numbers; valid layouts are accepted;
 *   - the one-process grid: every group is the world Comm, nothing split; a bad layout stops a forked
 *     process with exactly one "error:" line and status 1.
 */
#include <sys/wait.h>
#include "dev/test/testing.h"
#include "dev/test/grid_expect.h"

static void test_layout(int tp, int dp, int pp, int ep) {
    GridLayout L = {tp, dp, pp, ep};
    int W = tp * dp * pp;
    char err[512];
    TEST_CHECK(grid_check(&L, W, NULL, 0, err, sizeof(err)) == 0 && err[0] == '\0',
               "tp%d dp%d pp%d ep%d: the layout of %d processes is accepted", tp, dp, pp, ep, W);
    GridLayout D = grid_layout_for_world(W, tp, pp, ep);
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

/* grid_check fails and its message contains every needle (NULL-terminated) */
static void expect_invalid(GridLayout L, int world, const GridModelShape* shape, int m, const char* const* needles,
                           const char* what) {
    char err[512];
    int bad = grid_check(&L, world, shape, m, err, sizeof(err));
    int ok = bad == 1 && strncmp(err, "process grid: ", 14) == 0 && strchr(err, '\n') == NULL;
    for (int i = 0; needles[i]; i++) {
        if (!strstr(err, needles[i])) { ok = 0; }
    }
    TEST_CHECK(ok, "%s is refused: '%s'", what, err);
}

static void test_validation(void) {
    GridModelShape d4 = {4, 256, 50304, 4}; /* NH, C, Vp, L */
    {
        const char* n[] = {"--tp 0", "--tp >= 1", NULL};
        expect_invalid((GridLayout){0, 8, 1, 1}, 8, NULL, 0, n, "tp 0");
    }
    {
        const char* n[] = {"--pp -2", "--pp >= 1", NULL};
        expect_invalid((GridLayout){1, 8, -2, 1}, 8, NULL, 0, n, "pp -2");
    }
    {
        const char* n[] = {"--ep 0", "--ep >= 1", NULL};
        expect_invalid((GridLayout){1, 8, 1, 0}, 8, NULL, 0, n, "ep 0");
    }
    {
        const char* n[] = {"--tp 3", "--pp 1", "world size 8", "divide 8", NULL};
        expect_invalid(grid_layout_for_world(8, 3, 1, 1), 8, NULL, 0, n, "world 8 with tp 3");
    }
    {
        const char* n[] = {"--tp 2", "--pp 4", "= 8", "divide 6", NULL};
        expect_invalid(grid_layout_for_world(6, 2, 4, 1), 6, NULL, 0, n, "world 6 with tp 2 x pp 4");
    }
    {
        const char* n[] = {"dp 2", "= 8 processes", "has 16", "dp = 16 / (tp x pp) = 4", NULL};
        expect_invalid((GridLayout){2, 2, 2, 1}, 16, NULL, 0, n, "tp2 dp2 pp2 in a world of 16");
    }
    {
        const char* n[] = {"dp 0", "has 8", NULL};
        expect_invalid((GridLayout){2, 0, 1, 1}, 8, NULL, 0, n, "dp 0");
    }
    {
        const char* n[] = {"--ep 3", "dp = 4", "divide 4", NULL};
        expect_invalid((GridLayout){2, 4, 1, 3}, 8, NULL, 0, n, "ep 3 with dp 4");
    }
    {
        const char* n[] = {"--ep 8", "dp = 4", NULL};
        expect_invalid((GridLayout){2, 4, 1, 8}, 8, NULL, 0, n, "ep 8 with dp 4");
    }
    {
        GridModelShape s = {6, 384, 50304, 6};
        const char* n[] = {"--tp 4", "6 attention heads", "divide 6", NULL};
        expect_invalid((GridLayout){4, 2, 1, 1}, 8, &s, 0, n, "tp 4 with NH 6");
    }
    {
        GridModelShape s = {4, 258, 0, 0};
        const char* n[] = {"--tp 4", "258 channels", "3C = 774", "4C = 1032", NULL};
        expect_invalid((GridLayout){4, 1, 1, 1}, 4, &s, 0, n, "tp 4 with C 258");
    }
    {
        GridModelShape s = {8, 512, 50257, 0};
        const char* n[] = {"--tp 8", "Vp = 50257", NULL};
        expect_invalid((GridLayout){8, 1, 1, 1}, 8, &s, 0, n, "tp 8 with an unpadded vocabulary 50257");
    }
    {
        const char* n[] = {"--pp 8", "4 layers", "--pp <= 4", NULL};
        expect_invalid((GridLayout){1, 1, 8, 1}, 8, &d4, 0, n, "pp 8 with L 4");
    }
    {
        const char* n[] = {"--pp 4", "3 micro-batches", "at least 4", NULL};
        expect_invalid((GridLayout){1, 2, 4, 1}, 8, &d4, 3, n, "pp 4 with 3 micro-batches (1F1B)");
    }
    char err[512];
    GridLayout ok1 = {4, 1, 2, 1};
    TEST_CHECK(grid_check(&ok1, 8, &d4, 2, err, sizeof(err)) == 0,
               "tp4 pp2 on d4 (NH 4, C 256, Vp 50304, L 4) with 2 micro-batches is accepted");
    GridLayout ok2 = {1, 1, 4, 1};
    TEST_CHECK(grid_check(&ok2, 4, &d4, 4, err, sizeof(err)) == 0, "pp = L = micro-batches = 4 is accepted");
    GridModelShape unknown = {0, 0, 0, 0};
    GridLayout ok3 = {8, 1, 1, 1};
    TEST_CHECK(grid_check(&ok3, 8, &unknown, 0, err, sizeof(err)) == 0, "an unknown model shape (all 0) skips the model checks");
    GridLayout ok4 = {1, 8, 1, 8};
    TEST_CHECK(grid_check(&ok4, 8, NULL, 0, err, sizeof(err)) == 0, "ep = dp = 8 is accepted");
}

static void test_describe(void) {
    GridLayout L = {2, 2, 2, 1};
    char buf[256];
    grid_describe(&L, 5, buf, sizeof(buf));
    TEST_CHECK(strcmp(buf, "rank 5 of 8: tp 1/2, dp 0/2, pp 1/2, ep 0/1, expert-dp 0/2 | layout tp 2 x dp 2 x pp 2, "
                           "ep 1 (tp fastest)") == 0, "grid_describe(tp2 dp2 pp2, rank 5): '%s'", buf);
    GridLayout E = {1, 8, 1, 4};
    grid_describe(&E, 6, buf, sizeof(buf));
    TEST_CHECK(strstr(buf, "dp 6/8") && strstr(buf, "ep 2/4") && strstr(buf, "expert-dp 1/2"),
               "grid_describe(dp8 ep4, rank 6): '%s'", buf);
}

/* a one-process world: every group is the world Comm itself */
static void test_single_process(void) {
    Comm world;
    comm_init(&world, NULL, NULL, "", 10.0);
    ProcessGrid g;
    GridLayout L = grid_layout_for_world(world.world, 1, 1, 1);
    grid_init(&g, &world, L, NULL, 0);
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
        GridLayout L = {2, 1, 1, 1}; /* tp 2 in a world of 1 */
        ProcessGrid g;
        grid_init(&g, &world, L, NULL, 0);
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
    test_validation();
    test_describe();
    test_single_process();
    test_fatal();
    return testing_finish();
}
