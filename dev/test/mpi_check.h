/*
 * dev/test/mpi_check.h -- "ok" / "not ok" lines for the tests that run under mpirun (build/mpi_comm, mpi_grid,
 * mpi_pipe_bubble). check_all(ok, fmt, ...) is collective over mpi_checks.comm (set it after comm_init): the check
 * passes only if `ok` holds on every rank (the failure flags are all-reduced; the group's byte counters are left as
 * they were, so a check does not disturb a byte count under test); rank 0 prints one line, prefixed by
 * mpi_checks.prefix, with the number of ranks it failed on; every rank returns the same verdict.
 * mpi_check_summary() prints "# N passed, M failed" on rank 0 and returns the exit status (1 if any failed).
 */
#ifndef DEV_TEST_MPI_CHECK_H
#define DEV_TEST_MPI_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include "llmc/comm.h"

typedef struct {
    Comm* comm;          /* the group every check is collective over */
    char prefix[32];     /* printed after "ok - " (e.g. "[N=4] "), "" for none */
    int n_pass, n_fail;
} MpiChecks;
static MpiChecks mpi_checks;

static inline int check_all(int ok, const char* fmt, ...) {
    Comm* c = mpi_checks.comm;
    double bad = ok ? 0.0 : 1.0;
    CommCounters saved = c->counters;
    comm_all_reduce_host_f64(c, &bad, 1);
    c->counters = saved;
    if (c->rank == 0) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        printf("%s - %s%s", bad == 0.0 ? "ok" : "not ok", mpi_checks.prefix, msg);
        if (bad != 0.0) { printf(" (failed on %.0f of %d ranks)", bad, c->world); }
        printf("\n");
        fflush(stdout);
    }
    if (bad == 0.0) { mpi_checks.n_pass++; } else { mpi_checks.n_fail++; }
    return bad == 0.0;
}

static inline int mpi_check_summary(void) {
    if (mpi_checks.comm->rank == 0) { printf("# %d passed, %d failed\n", mpi_checks.n_pass, mpi_checks.n_fail); }
    return mpi_checks.n_fail ? 1 : 0;
}

#endif /* DEV_TEST_MPI_CHECK_H */
