/*
 * llmc/cpu/blas_core.h -- OpenBLAS's kernel choice, checked once when the CPU trainer starts.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's and most distributions' libopenblas0) picks its kernels when the library
 * loads, from the CPU's family and model number. A CPU its version does not know (a virtual machine's "Intel Xeon
 * Processor", a model newer than the library) gets the generic x86-64 kernels, "Prescott" (SSE3), whatever the CPU
 * can do. Measured 2026-12-04 on such a machine (2-core virtual Intel Xeon with AVX-512, OpenBLAS 0.3.21, one
 * thread, d2 B=8 T=64, where the LM head's GEMMs are 80% of the step): 1,100-1,600 ms per step with Prescott's
 * kernels, 389 ms with SkylakeX's, 493 ms with Haswell's; the same losses (dev/bench/README.md).
 *
 * blas_core_check(argv): when OPENBLAS_CORETYPE is not set, OpenBLAS chose one of its SSE-only cores (Prescott, Core2,
 * Penryn, Dunnington, Nehalem) and the CPU has AVX-512 (F, CD, BW, DQ, VL: OpenBLAS's SkylakeX kernels) or AVX2 + FMA
 * (Haswell's), it sets OPENBLAS_CORETYPE to that core and re-executes the program (/proc/self/exe, the same argv and
 * environment but that variable), so that the library loads with it; call it first in main, before any thread,
 * file or MPI start-up. OpenBLAS reads the variable only at load time, so there is no other way to switch. A
 * user's own OPENBLAS_CORETYPE is never overridden. If the exec fails the program goes on with the slow kernels
 * and one "warning:" line on stderr. blas_core_name() names the core in use for the header's device line, with
 * "(set by the trainer)" when this check chose it. Linux only (elsewhere the check does nothing).
 */
#ifndef LLMC_CPU_BLAS_CORE_H
#define LLMC_CPU_BLAS_CORE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#if defined(__linux__)
#include <unistd.h>
#endif

/* marks a process this check re-executed (so its device line can say so, and it never re-executes again) */
#define BLAS_CORE_SET_ENV "LLMC_OPENBLAS_CORETYPE_SET"

/* the core OpenBLAS should use on this CPU when it chose an SSE-only one: "SkylakeX", "Haswell" or NULL (none better) */
static inline const char* blas_core_better(const char* chosen) {
    static const char* sse_only[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem"};
    int weak = 0;
    for (size_t i = 0; i < sizeof(sse_only) / sizeof(sse_only[0]); i++) { weak |= chosen && !strcmp(chosen, sse_only[i]); }
    if (!weak) { return NULL; }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
        return "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) { return "Haswell"; }
#endif
    return NULL;
}

static inline void blas_core_check(char** argv) {
#if defined(__linux__)
    const char* user = getenv("OPENBLAS_CORETYPE");
    if ((user && user[0]) || getenv(BLAS_CORE_SET_ENV)) { return; }
    const char* better = blas_core_better(openblas_get_corename());
    if (!better) { return; }
    if (setenv("OPENBLAS_CORETYPE", better, 1) != 0 || setenv(BLAS_CORE_SET_ENV, openblas_get_corename(), 1) != 0) { return; }
    fflush(NULL);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "warning: OpenBLAS chose its %s kernels on a CPU that runs its %s ones, and restarting with "
            "OPENBLAS_CORETYPE=%s failed; set it yourself for faster matmuls\n", openblas_get_corename(), better, better);
    unsetenv("OPENBLAS_CORETYPE");
#else
    (void)argv;
#endif
}

/* "SkylakeX" or, when blas_core_check chose it, "SkylakeX (set by the trainer: OpenBLAS chose Prescott)" */
static inline const char* blas_core_name(void) {
    static char name[96];
    const char* was = getenv(BLAS_CORE_SET_ENV);
    if (was && was[0]) {
        snprintf(name, sizeof(name), "%s (set by the trainer: OpenBLAS chose %.20s)", openblas_get_corename(), was);
    } else {
        snprintf(name, sizeof(name), "%s", openblas_get_corename());
    }
    return name;
}

#endif /* LLMC_CPU_BLAS_CORE_H */
