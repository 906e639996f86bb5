/*
 * llmc/process_grid.h -- the N-D process grid: every process's coordinates on the layout's axes (llmc/layout.h)
 * and the sub-communicators of each group, built once (Megatron-LM's layout). Architecture: llmc/README.md,
 * section "Collectives and the process grid".
 *
 * Rank order: the layout's axes, fastest first (tp, cp, ep, expert-dp, pp; dp = ep x expert-dp):
 *     world_rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)),  dp_rank = ep_rank + ep * expert_dp_rank
 * A tensor-parallel group (tp consecutive ranks) sits on one node's NVLink; pipeline stages, the slowest
 * dimension, may cross nodes (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM", section 3; tensor parallelism: Shoeybi et al. 2019, "Megatron-LM"). Expert
 * parallelism takes its ranks from inside dp (ep divides dp; GShard, Lepikhin et al. 2020; Switch Transformer,
 * Fedus et al. 2021).
 *
 * Groups are data: GRID_GROUPS lists each group kind with the set of axes its members differ in (tp: {tp}; dp:
 * {ep, expert-dp}; pp: {pp}; ep: {ep}; expert-dp: {expert-dp}). A rank's group is the ranks that share its
 * coordinates on every other axis; its Comm rank is its mixed-radix index over the group's axes (so
 * grid.tp->rank == grid.coord.tp, grid.dp->rank == grid.coord.dp, ...). A new axis is a row of LAYOUT_AXES
 * (llmc/layout.h) and its group a row of GRID_GROUPS; no grid function names an axis.
 * Pipeline neighbours: the world ranks of the same (tp, dp) at pp_rank - 1 and pp_rank + 1 (-1 at the ends); in the
 * pp communicator the same peers are ranks coord.pp - 1 and coord.pp + 1.
 *
 * Communicators (grid_init, collective over the world, every rank in the same order; on CUDA builds after
 * comm_init_device). For each group kind, in the order of GRID_GROUPS:
 *   - a group as large as the world points at the world communicator (a data-parallel run with tp = pp = ep = 1
 *     creates no communicator at all: grid.dp is the world Comm);
 *   - a group of one process is a single-process Comm made without a split (rank 0, world 1, no MPI or NCCL
 *     communicator; every collective on it is a no-op; it holds no resources, and comm_finalize is never called on
 *     it);
 *   - a group whose members equal an earlier group's (the same axes of size > 1: ep = dp makes the ep group the dp
 *     group, ep = 1 the expert-dp group) points at that one;
 *   - any other group is a comm_split of the world (color: the index over the other axes; key: the index over the
 *     group's axes).
 * grid_free (collective) calls comm_finalize only on the communicators that comm_split created, never on the
 * world. The Comm structs live on the heap: a ProcessGrid may be copied, but freed once.
 *
 * Errors: the layout is checked by the caller (layout_check, llmc/layout.h); grid_init checks once more, with one
 * all-reduce, that every process has the same layout and that it fits the world (layout_check_axes), and if not
 * world rank 0 prints ONE "error: process grid: ..." line and every rank exits with status 1. A failed comm_split
 * aborts inside llmc/comm.h.
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_PROCESS_GRID_H
#define LLMC_PROCESS_GRID_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/comm.h"
#include "llmc/layout.h"

/* ---------------------------------------------------------------- types */

/* one process's position: tp, dp, pp coordinates, and inside dp the ep and expert-dp coordinates */
typedef struct {
    int tp, dp, pp, ep, expert_dp;
} GridCoords;

/* the group kinds, in the order grid_init builds them */
typedef enum { GRID_TP = 0, GRID_DP, GRID_PP, GRID_EP, GRID_EXPERT_DP, GRID_NGROUPS } GridGroup;

/* each group kind: its name and the axes its members differ in (bit a = LayoutAxis a) */
static const struct { const char* name; unsigned axes; } GRID_GROUPS[GRID_NGROUPS] = {
    {"tp", 1u << AXIS_TP},
    {"dp", (1u << AXIS_EP) | (1u << AXIS_EDP)},
    {"pp", 1u << AXIS_PP},
    {"ep", 1u << AXIS_EP},
    {"expert-dp", 1u << AXIS_EDP},
};

/* how grid_init obtained a group's Comm */
typedef enum {
    GRID_FROM_WORLD = 0, /* the world communicator itself (group = world) */
    GRID_FROM_SELF,      /* single-process Comm, no split, no resources */
    GRID_FROM_GROUP,     /* another group of this grid with the same members */
    GRID_FROM_SPLIT      /* comm_split of the world; grid_free finalizes it */
} GridOrigin;

typedef struct {
    Layout layout;
    int world_rank, world_size;
    GridCoords coord;             /* this process's coordinates */
    Comm* world;                  /* the world communicator (not owned) */
    Comm* group[GRID_NGROUPS];    /* each group kind's Comm; the named pointers below are the same */
    Comm* tp;                     /* tensor-parallel group, size tp */
    Comm* dp;                     /* data-parallel group, size dp (the trainer's gradient collectives) */
    Comm* pp;                     /* pipeline group, size pp (this rank's pipeline, stage = rank) */
    Comm* ep;                     /* expert-parallel group, size ep */
    Comm* expert_dp;              /* expert-data-parallel group, size dp / ep */
    int prev_stage_rank;          /* world rank of the previous pipeline stage, -1 on the first stage */
    int next_stage_rank;          /* world rank of the next pipeline stage, -1 on the last stage */
    int is_first_stage, is_last_stage;
    GridOrigin origin[GRID_NGROUPS]; /* how each group was obtained */
    int n_split;                  /* communicators created by comm_split (0 for a pure dp or one-process run) */
} ProcessGrid;

/* ---------------------------------------------------------------- pure functions */

/* "tp", "dp", "pp", "ep", "expert-dp" */
static inline const char* grid_group_name(GridGroup k) {
    return (int)k >= 0 && k < GRID_NGROUPS ? GRID_GROUPS[k].name : "?";
}

/* coordinates of world rank `rank` (0 <= rank < layout_world(l)) */
static inline GridCoords grid_coords_of(const Layout* l, int rank) {
    GridCoords c;
    c.tp = layout_coord(l, rank, AXIS_TP);
    c.ep = layout_coord(l, rank, AXIS_EP);
    c.expert_dp = layout_coord(l, rank, AXIS_EDP);
    c.dp = c.ep + l->ep * c.expert_dp;
    c.pp = layout_coord(l, rank, AXIS_PP);
    return c;
}

/* world rank of the process at (tp_rank, dp_rank, pp_rank) (cp 0); coordinates must be in range */
static inline int grid_world_rank(const Layout* l, int tp_rank, int dp_rank, int pp_rank) {
    int coord[LAYOUT_NUM_AXES] = {0};
    coord[AXIS_TP] = tp_rank;
    coord[AXIS_EP] = dp_rank % l->ep;
    coord[AXIS_EDP] = dp_rank / l->ep;
    coord[AXIS_PP] = pp_rank;
    return layout_rank_at(l, coord);
}

/* the axes of group kind k that have more than one process (two groups with the same such axes have the same
 * members) */
static inline unsigned grid_group_live_axes(const Layout* l, GridGroup k) {
    unsigned live = 0;
    for (int a = 0; a < LAYOUT_NUM_AXES; a++) {
        if ((GRID_GROUPS[k].axes & (1u << a)) && layout_axis_size(l, (LayoutAxis)a) > 1) { live |= 1u << a; }
    }
    return live;
}

/* number of processes in a group of kind k */
static inline int grid_group_size(const Layout* l, GridGroup k) {
    int n = 1;
    for (int a = 0; a < LAYOUT_NUM_AXES; a++) {
        if (GRID_GROUPS[k].axes & (1u << a)) { n *= layout_axis_size(l, (LayoutAxis)a); }
    }
    return n;
}

/* The comm_split arguments of rank `rank`'s group of kind k: color numbers the group (its index over the other
 * axes, >= 0), key is the rank's index over the group's axes (= its rank in the group's Comm). */
static inline void grid_group_color_key(const Layout* l, int rank, GridGroup k, int* color, int* key) {
    unsigned all = (1u << LAYOUT_NUM_AXES) - 1u;
    *key = layout_index_over(l, rank, GRID_GROUPS[k].axes);
    *color = layout_index_over(l, rank, all & ~GRID_GROUPS[k].axes);
}

/* world rank of the same (tp, dp) position `delta` pipeline stages away from `rank`, or -1 outside [0, pp) */
static inline int grid_stage_peer(const Layout* l, int rank, int delta) {
    int coord[LAYOUT_NUM_AXES];
    for (int a = 0; a < LAYOUT_NUM_AXES; a++) { coord[a] = layout_coord(l, rank, (LayoutAxis)a); }
    coord[AXIS_PP] += delta;
    return coord[AXIS_PP] >= 0 && coord[AXIS_PP] < l->pp ? layout_rank_at(l, coord) : -1;
}

/* One line: "rank R of W: tp a/A, dp b/B, pp c/C, ep d/D, expert-dp e/E | layout tp A x dp B x pp C, ep D
 * (tp fastest)" for world rank `rank` of a valid layout; written to buf (cap bytes), which is returned. */
static inline char* grid_describe(const Layout* l, int rank, char* buf, size_t cap) {
    GridCoords c = grid_coords_of(l, rank);
    snprintf(buf, cap, "rank %d of %d: tp %d/%d, dp %d/%d, pp %d/%d, ep %d/%d, expert-dp %d/%d | layout tp %d x "
             "dp %d x pp %d, ep %d (tp fastest)", rank, layout_world(l), c.tp, l->tp, c.dp, l->dp, c.pp, l->pp,
             c.ep, l->ep, c.expert_dp, l->dp / l->ep, l->tp, l->dp, l->pp, l->ep);
    return buf;
}

/* ---------------------------------------------------------------- collective functions */

/* Collective over `world`: checks that the layout's axes fit the world (layout_check_axes) on every rank and that
 * every rank has the same axes; if not, world rank 0 prints one "error: process grid: ..." line and every rank
 * exits with status 1. On CUDA builds with several processes call after comm_init_device. */
static inline void grid_validate(Comm* world, const Layout* l) {
    char err[512];
    int bad = layout_check_axes(l, world->world, err, sizeof(err)) != LAYOUT_BUILDABLE;
    if (world->world == 1) {
        if (bad) { FATAL("%s", err); }
        return;
    }
    /* [invalid ranks, then sum and sum of squares of tp, dp, pp, ep]: the values agree on every rank exactly
     * when sum^2 == N * sum of squares (small integers: exact in fp64), so all ranks decide alike */
    int val[4] = {l->tp, l->dp, l->pp, l->ep};
    double s[9];
    s[0] = bad ? 1.0 : 0.0;
    for (int i = 0; i < 4; i++) { s[1 + 2 * i] = val[i]; s[2 + 2 * i] = (double)val[i] * val[i]; }
    comm_all_reduce_host_f64(world, s, 9);
    int differ = 0;
    for (int i = 0; i < 4; i++) { differ |= s[1 + 2 * i] * s[1 + 2 * i] != (double)world->world * s[2 + 2 * i]; }
    if (s[0] == 0.0 && !differ) { return; }
    if (world->rank == 0) {
        fflush(stdout);
        if (differ) {
            fprintf(stderr, "error: process grid: the layout differs between processes (rank 0 has tp %d x dp %d x "
                    "pp %d, ep %d); expected the same --tp, --pp and --ep on every process  [%s:%d]\n", l->tp, l->dp,
                    l->pp, l->ep, __FILE__, __LINE__);
        } else if (bad) {
            fprintf(stderr, "error: %s  [%s:%d]\n", err, __FILE__, __LINE__);
        } else {
            fprintf(stderr, "error: process grid: the layout is invalid on %.0f of %d processes (not on rank 0); "
                    "expected the same flags on every process  [%s:%d]\n", s[0], world->world, __FILE__, __LINE__);
        }
        fflush(stderr);
    }
    comm_barrier(world); /* nobody exits (and lets the launcher kill rank 0) before the line is out */
    exit(EXIT_FAILURE);
}

/* the group of kind k */
static inline Comm* grid_group(const ProcessGrid* g, GridGroup k) {
    return (int)k >= 0 && k < GRID_NGROUPS ? g->group[k] : NULL;
}

/* the Comm of group kind k for this rank (see the header comment for the four ways it is obtained) */
static inline Comm* grid_make_group(ProcessGrid* g, GridGroup k) {
    const Layout* l = &g->layout;
    Comm* world = g->world;
    int size = grid_group_size(l, k), color = 0, key = 0;
    grid_group_color_key(l, world->rank, k, &color, &key);
    if (size == world->world) {
        g->origin[k] = GRID_FROM_WORLD;
        return world;
    }
    if (size == 1) {
        Comm* c = (Comm*)calloc_check(1, sizeof(Comm), "process grid: single-process group");
        c->rank = 0; c->world = 1;
        c->local_rank = world->local_rank;
        c->backend = world->backend;
        c->timeout_s = world->timeout_s;
        c->is_subgroup = 1;
        g->origin[k] = GRID_FROM_SELF;
        return c;
    }
    for (int j = 0; j < (int)k; j++) { /* the same members in the same order as an earlier group */
        if (grid_group_live_axes(l, (GridGroup)j) == grid_group_live_axes(l, k)) {
            g->origin[k] = GRID_FROM_GROUP;
            return g->group[j];
        }
    }
    Comm* c = (Comm*)calloc_check(1, sizeof(Comm), "process grid: group communicator");
    comm_split(world, color, key, c);
    if (c->world != size || c->rank != key) {
        FATAL("process grid: the %s group came out with %d processes (rank %d); expected %d (rank %d)",
              grid_group_name(k), c->world, c->rank, size, key);
    }
    g->origin[k] = GRID_FROM_SPLIT;
    g->n_split++;
    return c;
}

/* Builds the grid of `world` for layout l's axes (collective): validates them (grid_validate: one error line and
 * exit), derives this rank's coordinates and pipeline neighbours, and creates the sub-communicators. */
static inline void grid_init(ProcessGrid* g, Comm* world, const Layout* l) {
    grid_validate(world, l);
    memset(g, 0, sizeof(*g));
    g->layout = *l;
    g->world = world;
    g->world_rank = world->rank;
    g->world_size = world->world;
    g->coord = grid_coords_of(l, world->rank);
    g->prev_stage_rank = grid_stage_peer(l, world->rank, -1);
    g->next_stage_rank = grid_stage_peer(l, world->rank, +1);
    g->is_first_stage = g->coord.pp == 0;
    g->is_last_stage = g->coord.pp == l->pp - 1;
    for (int k = 0; k < GRID_NGROUPS; k++) { g->group[k] = grid_make_group(g, (GridGroup)k); }
    g->tp = g->group[GRID_TP];
    g->dp = g->group[GRID_DP];
    g->pp = g->group[GRID_PP];
    g->ep = g->group[GRID_EP];
    g->expert_dp = g->group[GRID_EXPERT_DP];
}

/* Frees what grid_init created (collective): comm_finalize on every comm_split communicator, the heap Comm
 * structs; the world communicator is left to its owner. */
static inline void grid_free(ProcessGrid* g) {
    for (int k = 0; k < GRID_NGROUPS; k++) {
        Comm* c = grid_group(g, (GridGroup)k);
        if (g->origin[k] == GRID_FROM_SPLIT) { comm_finalize(c); }
        if (g->origin[k] == GRID_FROM_SPLIT || g->origin[k] == GRID_FROM_SELF) { free(c); }
    }
    memset(g, 0, sizeof(*g));
}

/* a layout of the axes only (the grid's tests and tools): tp x (world / (tp pp)) x pp with ep, cp 1, everything else
 * off; dp 0 when tp * pp does not divide the world (layout_check_axes then names the problem) */
static inline Layout grid_layout_for_world(int world, int tp, int pp, int ep) {
    Layout l;
    memset(&l, 0, sizeof(l));
    l.tp = tp; l.cp = 1; l.pp = pp; l.ep = ep; l.v = 1; l.schedule = PIPE_1F1B; l.recompute_every = 1; l.m = 1;
    l.dp = (tp >= 1 && pp >= 1 && world >= 1 && world % (tp * pp) == 0) ? world / (tp * pp) : 0;
    return l;
}

#endif /* LLMC_PROCESS_GRID_H */
