/*
 * dev/bench/recompute_bench.c -- the cost of activation checkpointing (-r 3 --recompute-every k; llmc/gpt2.h) on
 * the CPU backend, without the trainer around it: one forward + backward of a GPT-2 shape at micro-batch (B,T)
 * for no recompute (-r 0) and every k given, timed as this process's CPU time (CLOCK_PROCESS_CPUTIME_ID; run it on
 * one thread, OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1, so that no thread spins at a barrier: the CPU time is then
 * the work done, which other processes on a shared machine inflate far less than the wall time) and wall time.
 * The configurations are interleaved (rep 1 of every k, then rep 2, ...) so that drift of the machine hits all of
 * them alike; the median over reps is printed. AdamW and the data loader are left out: they do not depend on k.
 * Also checks that every k's gradients equal -r 0's bit for bit in every rep (two gradient buffers of P values)
 * and prints each table's activation bytes (acts_bytes, what gpt2_allocate_activations allocated) and the memory
 * ledger's count (ledger_rank).
 * Build and run (dev/bench/recompute.sh does both):
 *   make build/recompute_bench && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./build/recompute_bench d12 1 256 3 1,2,3,4,6,12
 * Arguments: model (descriptor or shape, as -e), B, T, reps, k list. Output: one line per configuration,
 * "run=r0|k=K acts=BYTES ledger=BYTES cpu_s=S wall_s=S grads=same|DIFFERENT". Errors: one line and exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmc/backend.h"
#include "llmc/gpt2.h"
#include "llmc/ledger.h"

#define MAX_RUNS 16

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
    if (argc != 6) {
        fprintf(stderr, "error: usage: %s MODEL B T REPS K1,K2,... (e.g. d12 1 256 3 1,2,3,4,6,12)\n", argv[0]);
        return 1;
    }
    GPT2Config cfg;
    char err[256];
    if (!gpt2_config_from_descriptor(&cfg, argv[1]) && !gpt2_config_from_shape(&cfg, argv[1], err, sizeof(err))) {
        fprintf(stderr, "error: model '%s' is neither a descriptor (d2, d12, ...) nor a shape L<n>:C<n>:NH<n>\n",
                argv[1]);
        return 1;
    }
    int B = atoi(argv[2]), T = atoi(argv[3]), reps = atoi(argv[4]);
    if (B < 1 || T < 1 || T > cfg.max_seq_len || reps < 1) {
        fprintf(stderr, "error: B=%s T=%s reps=%s: expected B >= 1, 1 <= T <= %d, reps >= 1\n", argv[2], argv[3],
                argv[4], cfg.max_seq_len);
        return 1;
    }
    int every[MAX_RUNS], n = 1; /* every[0] = 0: -r 0 */
    every[0] = 0;
    for (char* tok = strtok(argv[5], ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_RUNS || atoi(tok) < 1) {
            fprintf(stderr, "error: k list: '%s' (at most %d values >= 1)\n", tok, MAX_RUNS - 1);
            return 1;
        }
        every[n++] = atoi(tok);
    }
    /* one set of weights; each configuration is a shallow copy with its own activation table */
    GPT2 base;
    shard_allocate_weights(&base, &cfg, NULL, NULL);
    shard_init_random(&base, 1337);
    size_t P = base.num_parameters, BT = (size_t)B * T;
    int* tokens = (int*)malloc_check(2 * BT * sizeof(int), "tokens");
    srand(7);
    for (size_t i = 0; i < 2 * BT; i++) { tokens[i] = rand() % cfg.vocab_size; }
    GPT2 runs[MAX_RUNS];
    int same[MAX_RUNS];
    floatX* ref = (floatX*)dev_malloc(P * sizeof(floatX), "gradients of -r 0");       /* the last -r 0 backward's */
    floatX* grads = (floatX*)dev_malloc(P * sizeof(floatX), "gradients of the others"); /* 124M: two buffers only */
    LedgerLayout lay;
    memset(&lay, 0, sizeof(lay));
    lay.cfg = cfg; lay.B = B; lay.T = T; lay.m = 1; lay.tp = 1; lay.pp = 1; lay.v = 1; lay.dp = 1;
    lay.pb = (int)sizeof(floatX);
    size_t ledger[MAX_RUNS];
    for (int r = 0; r < n; r++) {
        runs[r] = base;
        gpt2_allocate_activations(&runs[r], B, T, every[r] ? 3 : 0, every[r] ? every[r] : 1);
        dev_memcpy_h2d(runs[r].inputs, tokens, BT * sizeof(int));
        dev_memcpy_h2d(runs[r].targets, tokens + BT, BT * sizeof(int));
        same[r] = 1;
        lay.recompute = every[r] ? 3 : 0;
        lay.recompute_every = every[r];
        ledger[r] = ledger_rank(&lay, 0).acts;
    }
    double* cpu = (double*)calloc_check((size_t)n * reps, sizeof(double), "timings");
    double* wall = (double*)calloc_check((size_t)n * reps, sizeof(double), "timings");
    for (int rep = 0; rep < reps; rep++) {
        for (int r = 0; r < n; r++) {
            GPT2* m = &runs[r];
            floatX* buf = r == 0 ? ref : grads; /* r = 0 (-r 0) runs first in every rep */
            GPT2GradTarget g = gpt2_grad_target_full(m, buf);
            dev_memset(buf, 0, P * sizeof(floatX));
            double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
            gpt2_forward(m, m->inputs, m->targets, B, T, 1, 1.0f / (float)BT, 1);
            gpt2_backward(m, &g, m->inputs, tokens, B, T);
            dev_synchronize();
            cpu[r * reps + rep] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
            wall[r * reps + rep] = clock_s(CLOCK_MONOTONIC) - w0;
            if (r > 0 && memcmp(grads, ref, P * sizeof(floatX)) != 0) { same[r] = 0; }
        }
    }
    for (int r = 0; r < n; r++) {
        qsort(cpu + r * reps, (size_t)reps, sizeof(double), cmp_double);
        qsort(wall + r * reps, (size_t)reps, sizeof(double), cmp_double);
        char name[32];
        if (every[r]) { snprintf(name, sizeof(name), "k=%d", every[r]); } else { snprintf(name, sizeof(name), "r0"); }
        printf("run=%s acts=%zu ledger=%zu cpu_s=%.4f wall_s=%.4f grads=%s\n", name, runs[r].acts_bytes, ledger[r],
               cpu[r * reps + reps / 2], wall[r * reps + reps / 2], same[r] ? "same" : "DIFFERENT");
    }
    return 0;
}
