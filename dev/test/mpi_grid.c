/*
 * dev/test/mpi_grid.c -- llmc/process_grid.h on the MPI backend, run under `mpirun -np 8 build/mpi_grid
 * LAYOUT...` by dev/test/cli_grid.sh. A LAYOUT is e.g. tp2.dp2.pp2, tp4.pp2 or dp8.ep4 (missing sizes are 1;
 * without dp, dp = world / (tp * pp)); an invalid one stops the job with the grid's one error line.
 *
 * For every layout, rank 0 prints one "ok"/"not ok" line per check after the failure counts of all ranks
 * were all-reduced over the world (so the number of lines does not depend on which rank failed):
 *   - coordinates: the grid's coordinates, world rank/size and first/last stage flags equal the tests' own
 *     decomposition of the world rank (dev/test/grid_expect.h: tp fastest, then dp, then pp; ep = dp % ep,
 *     expert-dp = dp / ep);
 *   - per group (tp, dp, pp, ep, expert-dp), membership: every rank writes (its group rank + 1) at its world
 *     rank in a vector of length world, all-reduced over the group; the result must hold exactly the members
 *     given by dev/test/grid_expect.h's ordering formula, each at its expected group rank (0 elsewhere); group size and
 *     rank are checked too;
 *   - per group, all-reduce: an fp32 all-reduce and comm_all_reduce_host_f64 on the group equal the sums
 *     over the expected members;
 *   - pipeline neighbours: prev/next world ranks equal the expected ones, and a message sent to the next
 *     stage over the world Comm and over the pp Comm arrives from the expected previous stage;
 *   - communicators: a group as large as the world is the world Comm, a group of one is a single-process
 *     Comm, and the number of comm_split communicators is the expected one (0 for dp8).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dev/test/grid_expect.h"
#include "dev/test/mpi_check.h"

static Comm g_world;
/* the layout under test, spelled out independently of the grid */
typedef struct {
    Layout L;
    char name[64];
} Spec;

/* returns whether the membership check passed on every rank */
static int check_group(const ProcessGrid* g, const Spec* s, GridGroup k) {
    int W = g_world.world, me = g_world.rank, pos, size = 0, mypos = -1;
    Comm* c = grid_group(g, k);
    for (int b = 0; b < W; b++) {
        if (expect_member(&s->L, k, me, b, &pos)) {
            size++;
            if (b == me) { mypos = pos; }
        }
    }
    /* membership and order: (group rank + 1) at the world rank, summed over the group */
    float* v = (float*)calloc_check((size_t)W, sizeof(float), "membership vector");
    v[me] = (float)(c->rank + 1);
    comm_all_reduce(c, v, COMM_F32, (size_t)W);
    int ok = c->world == size && c->rank == mypos;
    for (int b = 0; b < W; b++) {
        float want = expect_member(&s->L, k, me, b, &pos) ? (float)(pos + 1) : 0.0f;
        if (v[b] != want) { ok = 0; }
    }
    free(v);
    int members_ok = check_all(ok, "[%s] %s group: members (world ranks), size %d and group ranks as the ordering "
                               "formula says", s->name, grid_group_name(k), size);
    /* sums over the group: fp32 vector and host fp64 */
    float x[5];
    for (int i = 0; i < 5; i++) { x[i] = (float)((me + 1) * (i + 1)); }
    comm_all_reduce(c, x, COMM_F32, 5);
    double h[2] = {(double)me, 1.0};
    comm_all_reduce_host_f64(c, h, 2);
    double rank_sum = 0.0;
    for (int b = 0; b < W; b++) {
        if (expect_member(&s->L, k, me, b, &pos)) { rank_sum += b; }
    }
    ok = h[0] == rank_sum && h[1] == (double)size;
    for (int i = 0; i < 5; i++) {
        if (x[i] != (float)((rank_sum + size) * (i + 1))) { ok = 0; }
    }
    check_all(ok, "[%s] %s group: fp32 all-reduce and host fp64 all-reduce equal the sums over its %d members", s->name,
              grid_group_name(k), size);
    return members_ok;
}

/* pp_ok: the pp group's membership passed everywhere (else the pp Comm exchange could wait forever: skipped,
 * the check fails) */
static void check_pipeline(const ProcessGrid* g, const Spec* s, int pp_ok) {
    int me = g_world.rank, t, d, p;
    expect_decompose(&s->L, me, &t, &d, &p);
    int prev = p > 0 ? t + s->L.tp * (d + s->L.dp * (p - 1)) : -1;
    int next = p + 1 < s->L.pp ? t + s->L.tp * (d + s->L.dp * (p + 1)) : -1;
    int ok = g->prev_stage_rank == prev && g->next_stage_rank == next;
    /* a message down the pipeline over the world Comm (world ranks) and over the pp Comm (stage numbers) */
    int sent = 1000 + me, got = -1, got_pp = -1;
    if (next >= 0) { comm_send(&g_world, &sent, COMM_I32, 1, next); }
    if (prev >= 0) { comm_recv(&g_world, &got, COMM_I32, 1, prev); }
    if (pp_ok && next >= 0) { comm_send(g->pp, &sent, COMM_I32, 1, p + 1); }
    if (pp_ok && prev >= 0) { comm_recv(g->pp, &got_pp, COMM_I32, 1, p - 1); }
    ok = ok && pp_ok;
    if (prev >= 0 && (got != 1000 + prev || got_pp != 1000 + prev)) { ok = 0; }
    check_all(ok, "[%s] pipeline neighbours: previous/next stage world ranks (-1 at the ends); a message to the next "
              "stage arrives over the world and the pp communicator", s->name);
}

static void run_layout(const Spec* s) {
    ProcessGrid g;
    grid_init(&g, &g_world, &s->L);
    int me = g_world.rank, W = g_world.world, t, d, p;
    expect_decompose(&s->L, me, &t, &d, &p);
    int ok = g.world_rank == me && g.world_size == W && g.world == &g_world && g.coord.tp == t && g.coord.dp == d &&
             g.coord.pp == p && g.coord.ep == d % s->L.ep && g.coord.expert_dp == d / s->L.ep &&
             g.is_first_stage == (p == 0) && g.is_last_stage == (p == s->L.pp - 1) && g.layout.tp == s->L.tp &&
             g.layout.dp == s->L.dp && g.layout.pp == s->L.pp && g.layout.ep == s->L.ep;
    char desc[256];
    grid_describe(&g.layout, me, desc, sizeof(desc));
    check_all(ok, "[%s] coordinates of every rank (rank 0: %s)", s->name, desc);
    int pp_ok = 1;
    for (int k = 0; k < GRID_NGROUPS; k++) {
        int members_ok = check_group(&g, s, (GridGroup)k);
        if (k == GRID_PP) { pp_ok = members_ok; }
    }
    check_pipeline(&g, s, pp_ok);
    /* which groups were split: sizes 1 and world never are, nor a group equal to dp (ep = dp, or ep = 1) */
    int size[GRID_NGROUPS] = {s->L.tp, s->L.dp, s->L.pp, s->L.ep, s->L.dp / s->L.ep};
    int want_split = 0;
    ok = 1;
    for (int k = 0; k < GRID_NGROUPS; k++) {
        Comm* c = grid_group(&g, (GridGroup)k);
        int same_as_dp = (k == GRID_EP && s->L.ep == s->L.dp) || (k == GRID_EXPERT_DP && s->L.ep == 1);
        if (size[k] == W) {
            if (c != &g_world) { ok = 0; }
        } else if (size[k] == 1) {
            if (c == &g_world || c->world != 1) { ok = 0; }
        } else if (same_as_dp) {
            if (c != g.dp) { ok = 0; }
        } else {
            want_split++;
            if (c == &g_world) { ok = 0; }
        }
    }
    check_all(ok && g.n_split == want_split, "[%s] communicators: %d split (expected %d); groups of the whole world "
              "are the world Comm, groups of one a single-process Comm", s->name, g.n_split, want_split);
    grid_free(&g);
}

/* "tp2.dp2.pp2" -> sizes (missing = 1; missing dp = world / (tp * pp)) */
static Spec parse_spec(const char* arg, int world) {
    Spec s;
    memset(&s, 0, sizeof(s));
    s.L = grid_layout_for_world(world, 1, 1, 1);
    snprintf(s.name, sizeof(s.name), "%s", arg);
    char buf[64];
    int dp_given = 0;
    snprintf(buf, sizeof(buf), "%s", arg);
    for (char* tok = strtok(buf, ".,"); tok; tok = strtok(NULL, ".,")) {
        int v = atoi(tok + 2);
        if (strncmp(tok, "tp", 2) == 0) { s.L.tp = v; }
        else if (strncmp(tok, "dp", 2) == 0) { s.L.dp = v; dp_given = 1; }
        else if (strncmp(tok, "pp", 2) == 0) { s.L.pp = v; }
        else if (strncmp(tok, "ep", 2) == 0) { s.L.ep = v; }
        else { FATAL("mpi_grid: bad layout '%s' (expected e.g. tp2.dp2.pp2)", arg); }
    }
    if (dp_given == 0) { s.L.dp = grid_layout_for_world(world, s.L.tp, s.L.pp, s.L.ep).dp; }
    return s;
}

int main(int argc, char** argv) {
    comm_init(&g_world, &argc, &argv, "", 60.0);
    mpi_checks.comm = &g_world;
    for (int i = 1; i < argc; i++) {
        Spec s = parse_spec(argv[i], g_world.world);
        run_layout(&s);
    }
    int rc = mpi_check_summary();
    comm_finalize(&g_world);
    return rc;
}
