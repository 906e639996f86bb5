/*
 * llmc/preempt.h -- stopping a run cleanly on a signal (`--signal-checkpoint`; llmc/README.md, "Preemption").
 * Schedulers warn a job before they kill it: Slurm sends SIGTERM at the time limit or on scancel (then SIGKILL after
 * KillWait, 30 s by default) and, with `#SBATCH --signal=B:USR1@120`, SIGUSR1 two minutes earlier; Kubernetes
 * sends SIGTERM. The handler installed here only records the signal (async-signal-safe); the training loop asks
 * preempt_agree after every optimizer step, which ORs the flag over every process with one host all-reduce, so all
 * ranks finish the same step, write the same checkpoint and exit 0 together.
 *   - preempt_parse: the flag's value ("term,usr1" by default, "term", "usr1" or "none") into a signal list;
 *   - preempt_install: handlers for those signals (SA_RESETHAND: a second signal of the same kind has its default
 *     effect, so a user who insists still stops the process at once; never re-armed once a signal has arrived);
 *   - preempt_install_early: the same from the raw flag values, as soon as the flags are parsed, so a signal during
 *     start-up (MPI, data, model, a resume's reads) is recorded too instead of ending the run with status 143: the
 *     loop stops after its first step with a checkpoint, as for a signal during training;
 *   - preempt_pending / preempt_signal: whether / which signal arrived in this process;
 *   - preempt_agree: the OR over the group (units: none; 1 = stop after this step).
 * Host-only C11 + POSIX sigaction. Errors: preempt_parse returns -1 with a message naming the flag and the accepted
 * values; nothing here exits. Header-only; one process-wide flag (a signal handler can reach nothing else).
 */
#ifndef LLMC_PREEMPT_H
#define LLMC_PREEMPT_H

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"

static volatile sig_atomic_t preempt_received = 0; /* the signal number that arrived, 0 for none */

static void preempt_handler(int sig) { preempt_received = sig; }

/* Parses spec (comma-separated "term", "usr1"; or "none") into sigs (cap >= 2 entries); returns how many, or -1
 * with a one-line message in err (naming --signal-checkpoint, the bad word and the accepted values). */
static inline int preempt_parse(const char* spec, int* sigs, int cap, char* err, size_t errcap) {
    int n = 0;
    if (strcmp(spec, "none") == 0) { return 0; }
    const char* p = spec;
    while (*p) {
        const char* comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int sig = len == 4 && strncmp(p, "term", 4) == 0 ? SIGTERM : len == 4 && strncmp(p, "usr1", 4) == 0 ? SIGUSR1 : 0;
        int dup = 0;
        for (int i = 0; i < n; i++) { dup |= sigs[i] == sig; }
        if (sig == 0 || dup || n == cap) {
            snprintf(err, errcap, "flag --signal-checkpoint is '%s'; expected none or a comma-separated list of term "
                     "and usr1 (each once), e.g. term,usr1", spec);
            return -1;
        }
        sigs[n++] = sig;
        p += len;
        if (*p == ',') {
            p++;
            if (!*p) { snprintf(err, errcap, "flag --signal-checkpoint is '%s': ends with a comma", spec); return -1; }
        }
    }
    if (n == 0) { snprintf(err, errcap, "flag --signal-checkpoint is empty; expected none, term, usr1 or term,usr1"); return -1; }
    return n;
}

/* installs the recording handler for sigs[0..n) (system calls restart; the handler resets after one delivery); a
 * no-op once a signal has arrived, so a handler reset by its delivery is not re-armed (the second signal keeps its
 * default effect). Calling it again (preempt_install_early, then the training loop's call) is harmless. */
static inline void preempt_install(const int* sigs, int n) {
    if (preempt_received) { return; }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = preempt_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    for (int i = 0; i < n; i++) { sigaction(sigs[i], &sa, NULL); }
}

/* Start-up's install: call it right after the flags are parsed, before any start-up work, with the raw values of
 * --signal-checkpoint (spec) and -o (output_dir). Installs what preempt_install would install for them: nothing
 * without an output directory (nothing to save: the default effect) or for "none", and nothing for a spec
 * preempt_parse refuses (the session's own check reports it with one line). Returns the number of signals handled. */
static inline int preempt_install_early(const char* spec, const char* output_dir) {
    int sigs[2];
    char err[256];
    if (!spec || !output_dir || !output_dir[0]) { return 0; }
    int n = preempt_parse(spec, sigs, 2, err, sizeof(err));
    if (n <= 0) { return 0; }
    preempt_install(sigs, n);
    return n;
}

static inline int preempt_pending(void) { return preempt_received != 0; }
static inline int preempt_signal(void) { return (int)preempt_received; }

/* the name of a signal preempt_parse accepts ("SIGTERM", "SIGUSR1"), else "a signal" */
static inline const char* preempt_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* 1 on every process of c when any of them has received a signal (a host all-reduce of one double: the same
 * answer on every rank, so all stop after the same step); collective: every rank must call it at the same point */
static inline int preempt_agree(Comm* c) {
    double flag = preempt_pending() ? 1.0 : 0.0;
    if (c->world > 1) { comm_all_reduce_host_f64(c, &flag, 1); }
    return flag > 0.0;
}

#endif /* LLMC_PREEMPT_H */
