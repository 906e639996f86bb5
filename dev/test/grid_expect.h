/*
 * dev/test/grid_expect.h -- the process-grid tests' own statement of the rank order, written independently of
 * llmc/process_grid.h's helpers (the tests compare the grid against it; sharing the grid's functions would
 * test them against themselves). Used by dev/test/test_process_grid.c and dev/test/mpi_grid.c.
 *
 * world rank r of a tp x dp x pp layout (tp fastest, then dp, then pp; Narayanan et al. 2021):
 *   t = r % tp, d = (r / tp) % dp, p = r / (tp * dp)
 * groups: tp = same (d, p); dp = same (t, p); pp = same (t, d); ep = same (t, p, d / ep), position d % ep;
 * expert-dp = same (t, p, d % ep), position d / ep.
 */
#ifndef LLMC_TEST_GRID_EXPECT_H
#define LLMC_TEST_GRID_EXPECT_H
#include "llmc/process_grid.h"

/* coordinates (t, d, p) of world rank r */
static inline void expect_decompose(const Layout* L, int r, int* t, int* d, int* p) {
    *t = r % L->tp;
    *d = (r / L->tp) % L->dp;
    *p = r / (L->tp * L->dp);
}

/* whether world rank b is in world rank a's group of kind k; *pos = b's rank in that group */
static inline int expect_member(const Layout* L, GridGroup k, int a, int b, int* pos) {
    int ta, da, pa, tb, db, pb;
    expect_decompose(L, a, &ta, &da, &pa);
    expect_decompose(L, b, &tb, &db, &pb);
    switch (k) {
    case GRID_TP: *pos = tb; return da == db && pa == pb;
    case GRID_DP: *pos = db; return ta == tb && pa == pb;
    case GRID_PP: *pos = pb; return ta == tb && da == db;
    case GRID_EP: *pos = db % L->ep; return ta == tb && pa == pb && da / L->ep == db / L->ep;
    case GRID_EXPERT_DP: *pos = db / L->ep; return ta == tb && pa == pb && da % L->ep == db % L->ep;
    default: *pos = -1; return 0;
    }
}

#endif /* LLMC_TEST_GRID_EXPECT_H */
