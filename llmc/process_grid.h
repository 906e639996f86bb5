/*
 * llmc/process_grid.h -- the N-D process grid: every process's coordinates in the tensor-, data-, pipeline-
 * and expert-parallel dimensions, and the sub-communicators of each group, built once (Megatron-LM's layout).
 * Architecture: llmc/README.md, section "Collectives and the process grid".
 *
 * Layout. world = tp x dp x pp processes, ordered tp fastest, then dp, then pp:
 *     world_rank = tp_rank + tp * (dp_rank + dp * pp_rank)
 *     tp_rank = world_rank % tp,  dp_rank = (world_rank / tp) % dp,  pp_rank = world_rank / (tp * dp)
 * A tensor-parallel group (tp consecutive ranks) sits on one node's NVLink; pipeline stages, the slowest
 * dimension, may cross nodes (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM", section 3; tensor parallelism: Shoeybi et al. 2019, "Megatron-LM").
 * Expert parallelism takes its ranks from inside the dp dimension (ep divides dp; GShard, Lepikhin et al.
 * 2020; Switch Transformer, Fedus et al. 2021):
 *     ep group          the ep consecutive dp ranks dp_rank / ep (same tp and pp coordinates);
 *                       ep_rank = dp_rank % ep
 *     expert-dp group   the dp / ep dp ranks that hold the same experts (same dp_rank % ep, same tp and pp);
 *                       expert_dp_rank = dp_rank / ep
 * Within every group the members are ordered by their coordinate in that group, so a group's Comm rank is
 * the coordinate (grid.tp->rank == grid.coord.tp, grid.pp->rank == grid.coord.pp, ...).
 * Pipeline neighbours: the world ranks of the same (tp, dp) at pp_rank - 1 and pp_rank + 1 (-1 at the ends);
 * in the pp communicator the same peers are ranks coord.pp - 1 and coord.pp + 1.
 *
 * Communicators (grid_init, collective over the world, every rank in the same order; on CUDA builds after
 * comm_init_device). For each group kind, in this order:
 *   - a group as large as the world points at the world communicator (a data-parallel run with
 *     tp = pp = ep = 1 creates no communicator at all: grid.dp is the world Comm, as before the grid);
 *   - a group of one process is a single-process Comm made without a split (rank 0, world 1, no MPI or
 *     NCCL communicator; every collective on it is a no-op; it holds no resources, and comm_finalize is never
 *     called on it);
 *   - a group whose members equal another group's points at that one (ep = dp: the ep group is the dp
 *     group; ep = 1: the expert-dp group is the dp group);
 *   - any other group is a comm_split of the world (color: the coordinates the group shares; key: the
 *     coordinate within the group).
 * grid_free (collective) calls comm_finalize only on the communicators that comm_split created, never on
 * the world. The Comm structs live on the heap: a ProcessGrid may be copied, but freed once.
 *
 * Shapes and units: all sizes are process counts (int); ranks are 0-based. The model shape
 * (GridModelShape) is in the model's units: NH heads, C channels, Vp padded vocabulary, L layers (0 =
 * unknown, that check is skipped); micro_batches is the number of micro-batches per optimizer step.
 *
 * Errors: grid_check is pure and returns the message (for unit tests); grid_validate and grid_init stop the
 * job with ONE line "error: process grid: ...  [file:line]" naming the flag (--tp, --pp, --ep), the value,
 * and what is expected, also when the processes were given different layouts: one all-reduce tells every
 * rank whether any rank's layout is invalid or differs, world rank 0 prints the line, and after a barrier all
 * ranks exit with status 1. A failed comm_split aborts inside llmc/comm.h.
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

/* ---------------------------------------------------------------- types */

/* the process counts of each dimension; world = tp * dp * pp, ep divides dp */
typedef struct {
    int tp, dp, pp, ep;
} GridLayout;

/* the model numbers the layout must divide (0 = unknown: that check is skipped) */
typedef struct {
    int NH;  /* attention heads */
    int C;   /* channels (so also the 3C QKV and 4C MLP widths) */
    int Vp;  /* padded vocabulary */
    int L;   /* transformer layers */
} GridModelShape;

/* one process's position: tp, dp, pp coordinates, and inside dp the ep and expert-dp coordinates */
typedef struct {
    int tp, dp, pp, ep, expert_dp;
} GridCoords;

/* the group kinds, in the order grid_init builds them */
typedef enum { GRID_TP = 0, GRID_DP, GRID_PP, GRID_EP, GRID_EXPERT_DP, GRID_NGROUPS } GridGroup;

/* how grid_init obtained a group's Comm */
typedef enum {
    GRID_FROM_WORLD = 0, /* the world communicator itself (group = world) */
    GRID_FROM_SELF,      /* single-process Comm, no split, no resources */
    GRID_FROM_GROUP,     /* another group of this grid with the same members */
    GRID_FROM_SPLIT      /* comm_split of the world; grid_free finalizes it */
} GridOrigin;

typedef struct {
    GridLayout layout;
    int world_rank, world_size;
    GridCoords coord;             /* this process's coordinates */
    Comm* world;                  /* the world communicator (not owned) */
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
    static const char* const names[GRID_NGROUPS] = {"tp", "dp", "pp", "ep", "expert-dp"};
    return (int)k >= 0 && k < GRID_NGROUPS ? names[k] : "?";
}

/* the layout of `world` processes for the given --tp, --pp, --ep: dp = world / (tp * pp), or 0 when tp * pp
 * does not divide the world or a size is below 1 (grid_check then names the problem) */
static inline GridLayout grid_layout_for_world(int world, int tp, int pp, int ep) {
    GridLayout L;
    L.tp = tp; L.pp = pp; L.ep = ep;
    L.dp = (tp >= 1 && pp >= 1 && world >= 1 && world % (tp * pp) == 0) ? world / (tp * pp) : 0;
    return L;
}

/* world rank of the process at (tp_rank, dp_rank, pp_rank); coordinates must be in range */
static inline int grid_world_rank(const GridLayout* L, int tp_rank, int dp_rank, int pp_rank) {
    return tp_rank + L->tp * (dp_rank + L->dp * pp_rank);
}

/* coordinates of world rank `rank` (0 <= rank < tp*dp*pp) */
static inline GridCoords grid_coords_of(const GridLayout* L, int rank) {
    GridCoords c;
    c.tp = rank % L->tp;
    c.dp = (rank / L->tp) % L->dp;
    c.pp = rank / (L->tp * L->dp);
    c.ep = c.dp % L->ep;
    c.expert_dp = c.dp / L->ep;
    return c;
}

/* number of processes in a group of kind k */
static inline int grid_group_size(const GridLayout* L, GridGroup k) {
    switch (k) {
    case GRID_TP: return L->tp;
    case GRID_DP: return L->dp;
    case GRID_PP: return L->pp;
    case GRID_EP: return L->ep;
    case GRID_EXPERT_DP: return L->dp / L->ep;
    default: return 0;
    }
}

/* The comm_split arguments of rank `rank`'s group of kind k: color numbers the group (the coordinates its
 * members share, >= 0), key is the rank's coordinate inside it (= its rank in the group's Comm). */
static inline void grid_group_color_key(const GridLayout* L, int rank, GridGroup k, int* color, int* key) {
    GridCoords c = grid_coords_of(L, rank);
    int nblk = L->dp / L->ep; /* ep groups per dp group */
    switch (k) {
    case GRID_TP: *color = c.dp + L->dp * c.pp; *key = c.tp; break;
    case GRID_DP: *color = c.tp + L->tp * c.pp; *key = c.dp; break;
    case GRID_PP: *color = c.tp + L->tp * c.dp; *key = c.pp; break;
    case GRID_EP: *color = c.tp + L->tp * (c.expert_dp + nblk * c.pp); *key = c.ep; break;
    case GRID_EXPERT_DP: *color = c.tp + L->tp * (c.ep + L->ep * c.pp); *key = c.expert_dp; break;
    default: *color = 0; *key = 0; break;
    }
}

/* world rank of the same (tp, dp) position `delta` pipeline stages away from `rank`, or -1 outside [0, pp) */
static inline int grid_stage_peer(const GridLayout* L, int rank, int delta) {
    GridCoords c = grid_coords_of(L, rank);
    int s = c.pp + delta;
    return s >= 0 && s < L->pp ? grid_world_rank(L, c.tp, c.dp, s) : -1;
}

/* Checks a layout for `world` processes against the model shape (NULL = no model checks) and the number of
 * micro-batches per step (0 = skip; 1F1B needs at least pp). Returns 0 when valid; otherwise 1 with one
 * sentence in err (cap bytes) naming the flag, its value and what is expected. Pure. */
static inline int grid_check(const GridLayout* L, int world, const GridModelShape* shape, int micro_batches,
                             char* err, size_t cap) {
    const char* flag[3] = {"--tp", "--pp", "--ep"};
    int val[3] = {L->tp, L->pp, L->ep};
    for (int i = 0; i < 3; i++) {
        if (val[i] < 1) {
            snprintf(err, cap, "process grid: %s %d is not a process count; expected %s >= 1", flag[i], val[i], flag[i]);
            return 1;
        }
    }
    if (world < 1) {
        snprintf(err, cap, "process grid: a world of %d processes; expected at least 1", world);
        return 1;
    }
    long long tpp = (long long)L->tp * L->pp;
    if (world % tpp != 0) {
        snprintf(err, cap, "process grid: --tp %d x --pp %d = %lld does not divide the world size %d "
                 "(world = tp x dp x pp); expected --tp x --pp to divide %d", L->tp, L->pp, tpp, world, world);
        return 1;
    }
    if (L->dp < 1 || tpp * L->dp != world) {
        snprintf(err, cap, "process grid: --tp %d x dp %d x --pp %d = %lld processes but the job has %d; "
                 "expected dp = %d / (tp x pp) = %lld", L->tp, L->dp, L->pp, tpp * L->dp, world, world, world / tpp);
        return 1;
    }
    if (L->dp % L->ep != 0) {
        snprintf(err, cap, "process grid: --ep %d does not divide the data-parallel size dp = %d (expert "
                 "parallelism takes its ranks from dp); expected --ep to divide %d", L->ep, L->dp, L->dp);
        return 1;
    }
    if (shape) {
        if (shape->NH > 0 && shape->NH % L->tp != 0) {
            snprintf(err, cap, "process grid: --tp %d does not divide the %d attention heads (NH); expected "
                     "--tp to divide %d", L->tp, shape->NH, shape->NH);
            return 1;
        }
        if (shape->C > 0 && shape->C % L->tp != 0) {
            snprintf(err, cap, "process grid: --tp %d does not divide the %d channels (C, hence 3C = %d and "
                     "4C = %d); expected --tp to divide %d", L->tp, shape->C, 3 * shape->C, 4 * shape->C, shape->C);
            return 1;
        }
        if (shape->Vp > 0 && shape->Vp % L->tp != 0) {
            snprintf(err, cap, "process grid: --tp %d does not divide the padded vocabulary Vp = %d; expected "
                     "--tp to divide %d", L->tp, shape->Vp, shape->Vp);
            return 1;
        }
        if (shape->L > 0 && shape->L < L->pp) {
            snprintf(err, cap, "process grid: --pp %d stages for %d layers (L); every stage needs a layer, "
                     "expected --pp <= %d", L->pp, shape->L, shape->L);
            return 1;
        }
    }
    if (micro_batches > 0 && micro_batches < L->pp) {
        snprintf(err, cap, "process grid: --pp %d with %d micro-batches per step; the 1F1B schedule expects "
                 "at least %d micro-batches (raise -d or lower -b)", L->pp, micro_batches, L->pp);
        return 1;
    }
    if (cap) { err[0] = '\0'; }
    return 0;
}

/* One line: "rank R of W: tp a/A, dp b/B, pp c/C, ep d/D, expert-dp e/E | layout tp A x dp B x pp C, ep D
 * (tp fastest)" for world rank `rank` of a valid layout; written to buf (cap bytes), which is returned. */
static inline char* grid_describe(const GridLayout* L, int rank, char* buf, size_t cap) {
    GridCoords c = grid_coords_of(L, rank);
    snprintf(buf, cap, "rank %d of %d: tp %d/%d, dp %d/%d, pp %d/%d, ep %d/%d, expert-dp %d/%d | layout tp %d x "
             "dp %d x pp %d, ep %d (tp fastest)", rank, L->tp * L->dp * L->pp, c.tp, L->tp, c.dp, L->dp, c.pp, L->pp,
             c.ep, L->ep, c.expert_dp, L->dp / L->ep, L->tp, L->dp, L->pp, L->ep);
    return buf;
}

/* ---------------------------------------------------------------- collective functions */

/* Collective over `world`: checks the layout (grid_check) on every rank, and that every rank has the same
 * layout; if not, world rank 0 prints one "error: process grid: ..." line and every rank exits with status 1.
 * On CUDA builds with several processes call after comm_init_device. */
static inline void grid_validate(Comm* world, const GridLayout* L, const GridModelShape* shape, int micro_batches) {
    char err[512];
    int bad = grid_check(L, world->world, shape, micro_batches, err, sizeof(err));
    if (world->world == 1) {
        if (bad) { FATAL("%s", err); }
        return;
    }
    /* [invalid ranks, then sum and sum of squares of tp, dp, pp, ep]: the values agree on every rank exactly
     * when sum^2 == N * sum of squares (small integers: exact in fp64), so all ranks decide alike */
    int val[4] = {L->tp, L->dp, L->pp, L->ep};
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
                    "pp %d, ep %d); expected the same --tp, --pp and --ep on every process  [%s:%d]\n", L->tp, L->dp,
                    L->pp, L->ep, __FILE__, __LINE__);
        } else if (bad) {
            fprintf(stderr, "error: %s  [%s:%d]\n", err, __FILE__, __LINE__);
        } else { /* same layout, but the model shape or micro-batches differ between processes */
            fprintf(stderr, "error: process grid: the layout is invalid on %.0f of %d processes (not on rank 0); "
                    "expected the same model and batch settings on every process  [%s:%d]\n", s[0], world->world,
                    __FILE__, __LINE__);
        }
        fflush(stderr);
    }
    comm_barrier(world); /* nobody exits (and lets the launcher kill rank 0) before the line is out */
    exit(EXIT_FAILURE);
}

/* the group of kind k (one of the grid's Comm pointers) */
static inline Comm* grid_group(const ProcessGrid* g, GridGroup k) {
    switch (k) {
    case GRID_TP: return g->tp;
    case GRID_DP: return g->dp;
    case GRID_PP: return g->pp;
    case GRID_EP: return g->ep;
    case GRID_EXPERT_DP: return g->expert_dp;
    default: return NULL;
    }
}

/* Builds the grid of `world` (collective; see the header comment for which groups are split): validates
 * the layout (grid_validate: one error line and exit), derives this rank's coordinates and pipeline
 * neighbours, and creates the sub-communicators. shape may be NULL, micro_batches 0 (checks skipped). */
static inline void grid_init(ProcessGrid* g, Comm* world, GridLayout layout, const GridModelShape* shape,
                             int micro_batches) {
    grid_validate(world, &layout, shape, micro_batches);
    memset(g, 0, sizeof(*g));
    g->layout = layout;
    g->world = world;
    g->world_rank = world->rank;
    g->world_size = world->world;
    g->coord = grid_coords_of(&layout, world->rank);
    g->prev_stage_rank = grid_stage_peer(&layout, world->rank, -1);
    g->next_stage_rank = grid_stage_peer(&layout, world->rank, +1);
    g->is_first_stage = g->coord.pp == 0;
    g->is_last_stage = g->coord.pp == layout.pp - 1;
    Comm* groups[GRID_NGROUPS];
    for (int k = 0; k < GRID_NGROUPS; k++) {
        GridGroup kind = (GridGroup)k;
        int size = grid_group_size(&layout, kind), color = 0, key = 0;
        grid_group_color_key(&layout, world->rank, kind, &color, &key);
        if (size == world->world) {
            groups[k] = world;
            g->origin[k] = GRID_FROM_WORLD;
        } else if (size == 1) {
            Comm* c = (Comm*)calloc_check(1, sizeof(Comm), "process grid: single-process group");
            c->rank = 0; c->world = 1;
            c->local_rank = world->local_rank;
            c->backend = world->backend;
            c->timeout_s = world->timeout_s;
            c->is_subgroup = 1;
            groups[k] = c;
            g->origin[k] = GRID_FROM_SELF;
        } else if ((kind == GRID_EP && layout.ep == layout.dp) || (kind == GRID_EXPERT_DP && layout.ep == 1)) {
            groups[k] = groups[GRID_DP]; /* same members in the same order as the dp group */
            g->origin[k] = GRID_FROM_GROUP;
        } else {
            Comm* c = (Comm*)calloc_check(1, sizeof(Comm), "process grid: group communicator");
            comm_split(world, color, key, c);
            if (c->world != size || c->rank != key) {
                FATAL("process grid: the %s group came out with %d processes (rank %d); expected %d (rank %d)",
                      grid_group_name(kind), c->world, c->rank, size, key);
            }
            groups[k] = c;
            g->origin[k] = GRID_FROM_SPLIT;
            g->n_split++;
        }
    }
    g->tp = groups[GRID_TP];
    g->dp = groups[GRID_DP];
    g->pp = groups[GRID_PP];
    g->ep = groups[GRID_EP];
    g->expert_dp = groups[GRID_EXPERT_DP];
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

#endif /* LLMC_PROCESS_GRID_H */
