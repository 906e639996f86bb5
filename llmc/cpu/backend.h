/*
 * llmc/cpu/backend.h -- the CPU backend (llmc/README.md, "The backend contract"): C11 + OpenMP,
 * matmuls through CBLAS (OpenBLAS). Implements every function documented in
 * llmc/backend.h with floatX = float (fp32 everywhere).
 *
 * "Device" memory is ordinary host memory (64-byte aligned, zeroed on
 * allocation); copies are memcpy; dev_synchronize is a no-op.
 *
 * Threading model: one OpenMP thread pool does all the work. OpenBLAS is set to
 * one thread and every sgemm is split by rows of its output over the OpenMP
 * threads (llmc/cpu/matmul.h), so the two libraries never oversubscribe the
 * cores and no spinning BLAS pool competes with OpenMP loops.
 *
 * Determinism: every reduction uses a static partition and a fixed combination
 * order; results are bit-identical run to run for a given OpenMP thread count
 * (most ops are even independent of the thread count; the sgemm row/column slabs
 * of matmul are not guaranteed to be). Loops over fewer than LLMC_CPU_PAR_MIN
 * elements run on one thread.
 *
 * Compile-time options:
 *   -DLLMC_CPU_NAIVE   matmul and attention use plain OpenMP loops in the style
 *                      of llm.c's train_gpt2.c (the speed baseline; same results
 *                      up to fp32 rounding).
 *
 * Errors: allocation failures print one line naming the buffer and exit
 * (llmc/utils.h). Header-only: static inline functions; one static variable (the
 * host-wait watchdog that dev_set_wait_watchdog records).
 */
#ifndef LLMC_CPU_BACKEND_H
#define LLMC_CPU_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "blas_core.h"

typedef float floatX;
#define PRECISION_NAME "fp32"
#define FLOATX_IS_FLOAT 1

/* ---------------------------------------------------------------- threads */

/* number of OpenMP threads a parallel region will use (1 without OpenMP) */
static inline int cpu_num_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* index of the calling thread inside a parallel region (0 without OpenMP) */
static inline int cpu_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* number of threads in the current team (1 outside a parallel region). Partitions
 * inside a parallel region use this, never the requested count, so every index is
 * covered even if the runtime grants fewer threads. */
static inline int cpu_team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* loops over fewer elements than this run on one thread: a fork/join costs more
 * than the work, and on a loaded machine a barrier can wait a whole time slice */
#define LLMC_CPU_PAR_MIN 32768

/* static partition of [0, total) into `parts` contiguous ranges; range `idx` is
 * [*start, *end). Range boundaries are rounded to multiples of `align` (>= 1)
 * so vector loops start aligned. Pure function of its arguments (deterministic). */
static inline void cpu_partition(long total, int parts, int idx, int align, long* start, long* end) {
    long units = (total + align - 1) / align;
    long per = units / parts, rem = units % parts;
    long u0 = idx * per + (idx < rem ? idx : rem);
    long u1 = u0 + per + (idx < rem ? 1 : 0);
    long s = u0 * align, e = u1 * align;
    *start = s < total ? s : total;
    *end = e < total ? e : total;
}

/* makes OpenBLAS single-threaded (all parallelism comes from OpenMP). Idempotent. */
static inline void cpu_blas_single_threaded(void) {
    if (openblas_get_num_threads() != 1) { openblas_set_num_threads(1); }
}

/* exp(x) in fp32 without a libm call, so loops over it vectorise (glibc's expf
 * only vectorises under -ffast-math). Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2/2, degree-7 Taylor polynomial for e^r (truncation < 5e-9 relative),
 * then scaling by 2^n through the exponent bits: max error ~2 ulp for
 * x in [-87, 88] (tested). The exponent is clamped in integer arithmetic (float
 * compares would block vectorisation): -2^21 < x < -87 returns a value below
 * ~2^-125 instead of the true tiny one, x > 88 a finite huge value; |x| >= 2^21
 * and non-finite x are not supported (callers pass x - rowmax <= 0 of finite,
 * sane logits; a diverged model gives a non-finite loss either way). */
static inline float cpu_expf(float x) {
    /* round to nearest by adding and subtracting 1.5*2^23 (floorf does not vectorise
     * under the default -ftrapping-math); valid for |x| < 2^21 */
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f; /* ln2 = 0.693359375 - 2.12194440e-4 */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = (int32_t)n;
    e = e < -126 ? -126 : e;
    e = e > 127 ? 127 : e;
    union { int32_t i; float f; } scale; /* type punning through a union (defined in C, GCC/Clang in C++) */
    scale.i = (e + 127) << 23;
    return p * scale.f;
}

/* ---------------------------------------------------------------- lifetime / memory */

/* Human-readable device description, e.g. "CPU (2 OpenMP threads, OpenBLAS Haswell)" (llmc/cpu/blas_core.h).
 * Returns a pointer to a static buffer (per translation unit). */
static inline const char* backend_device_name(void) {
    static char name[192];
    snprintf(name, sizeof(name), "CPU (%d OpenMP thread%s, OpenBLAS %s%s)", cpu_num_threads(),
             cpu_num_threads() == 1 ? "" : "s", blas_core_name(),
#ifdef LLMC_CPU_NAIVE
             ", naive matmul/attention"
#else
             ""
#endif
    );
    return name;
}

/* OpenBLAS's kernel check (llmc/cpu/blas_core.h): may re-execute the program with OPENBLAS_CORETYPE set */
static inline void backend_process_start(char** argv) { blas_core_check(argv); }

/* Initialises the backend: pins OpenBLAS to one thread (see threading model
 * above) and, if verbose, prints "device: <name>". local_rank is unused on the CPU. */
static inline void backend_init(int local_rank, int verbose) {
    (void)local_rank;
    cpu_blas_single_threaded();
    if (verbose) { printf("device: %s\n", backend_device_name()); }
}

/* Nothing to release on the CPU. */
static inline void backend_shutdown(void) {}

/* Allocates `bytes` (64-byte aligned, zeroed). Exits naming `what` on failure. */
static inline void* dev_malloc(size_t bytes, const char* what) {
    void* p = NULL;
    size_t rounded = ((bytes ? bytes : 1) + 63) / 64 * 64;
    if (posix_memalign(&p, 64, rounded) != 0 || p == NULL) {
        FATAL("out of memory allocating %s (%zu bytes)", what, bytes);
    }
    memset(p, 0, rounded);
    return p;
}

static inline void dev_free(void* p) { free(p); }

static inline void dev_memcpy_h2d(void* dst, const void* host_src, size_t bytes) { if (bytes) memcpy(dst, host_src, bytes); }
static inline void dev_memcpy_d2h(void* host_dst, const void* src, size_t bytes) { if (bytes) memcpy(host_dst, src, bytes); }
static inline void dev_memcpy_d2d(void* dst, const void* src, size_t bytes) { if (bytes) memmove(dst, src, bytes); }
static inline void dev_memset(void* dst, int value, size_t bytes) { if (bytes) memset(dst, value, bytes); }

/* all CPU work is synchronous */
static inline void dev_synchronize(void) {}

/* "device" memory = host RAM: available and total physical bytes (sysconf) */
static inline void dev_memory_info(size_t* free_bytes, size_t* total_bytes) {
    long page = sysconf(_SC_PAGESIZE);
    *free_bytes = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)page;
    *total_bytes = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)page;
}

/* fp32 -> floatX (identity on the CPU), n floats */
static inline void dev_upload_floats(floatX* dst, const float* host_src, size_t n) { dev_memcpy_h2d(dst, host_src, n * sizeof(float)); }
/* floatX -> fp32 (identity on the CPU), n floats */
static inline void dev_download_floats(float* host_dst, const floatX* src, size_t n) { dev_memcpy_d2h(host_dst, src, n * sizeof(float)); }
/* device fp32 -> floatX (identity on the CPU), n floats; may overlap */
static inline void dev_copy_floats_to_floatX(floatX* dst, const float* src, size_t n) { dev_memcpy_d2d(dst, src, n * sizeof(float)); }

/* ---------------------------------------------------------------- pinned memory, events, async uploads */

/* every "event" is complete at once: all CPU work is synchronous */
typedef int DevEvent;

/* "pinned" host memory is plain host memory on the CPU (64-byte aligned, zeroed) */
static inline void* host_malloc_pinned(size_t bytes, const char* what) { return dev_malloc(bytes, what); }
static inline void host_free_pinned(void* p) { free(p); }
static inline DevEvent dev_event_create(void) { return 0; }
static inline void dev_event_destroy(DevEvent e) { (void)e; }
/* copies at once; `done` is complete on return */
static inline void dev_memcpy_h2d_async(void* dst, const void* host_src, size_t bytes, DevEvent done) {
    (void)done;
    dev_memcpy_h2d(dst, host_src, bytes);
}
static inline void dev_wait_event(DevEvent e) { (void)e; }
static inline void dev_event_synchronize(DevEvent e) { (void)e; }
static inline void dev_event_record(DevEvent e) { (void)e; }

/* a timer is the wall clock (seconds) taken when it is recorded: the work queued before it is done by then */
typedef double* DevTimer;
static inline DevTimer dev_timer_create(void) { return (double*)calloc_check(1, sizeof(double), "timer"); }
static inline void dev_timer_destroy(DevTimer t) { free(t); }
static inline void dev_timer_record(DevTimer t) { *t = wall_seconds(); }
static inline void dev_timer_synchronize(DevTimer t) { (void)t; }
static inline double dev_timer_elapsed_ms(DevTimer a, DevTimer b) { return (*b - *a) * 1000.0; }

/* ---------------------------------------------------------------- streams: one synchronous queue */

/* every stream is the same queue, and work on it is done when the call returns */
typedef int DevStream;
static inline DevStream dev_main_stream(void) { return 0; }
static inline DevStream dev_stream_create(void) { return 0; }
static inline void dev_stream_destroy(DevStream s) { (void)s; }
static inline void dev_event_record_on(DevEvent e, DevStream s) { (void)e; (void)s; }
static inline void dev_stream_wait_event(DevStream s, DevEvent e) { (void)s; (void)e; }
/* every event is complete */
static inline int dev_event_query(DevEvent e) { (void)e; return 1; }
static inline void dev_stream_synchronize(DevStream s) { (void)s; }
/* copies at once */
static inline void dev_memcpy_h2d_on(void* dst, const void* host_src, size_t bytes, DevStream s) {
    (void)s;
    dev_memcpy_h2d(dst, host_src, bytes);
}
static inline void dev_memcpy_d2h_on(void* host_dst, const void* src, size_t bytes, DevStream s) {
    (void)s;
    dev_memcpy_d2h(host_dst, src, bytes);
}

/* host-wait watchdog (see llmc/backend.h): recorded so that the getter answers; no CPU wait blocks, so it is
 * never called */
typedef void (*DevWaitWatchdog)(void* ctx, double waited_s);
typedef struct {
    DevWaitWatchdog fn;
    void* ctx;
} CpuWaitWatchdog;
static CpuWaitWatchdog llmc_cpu_wait_watchdog;
static inline void dev_set_wait_watchdog(DevWaitWatchdog fn, void* ctx) {
    llmc_cpu_wait_watchdog.fn = fn;
    llmc_cpu_wait_watchdog.ctx = ctx;
}
static inline DevWaitWatchdog dev_get_wait_watchdog(void** ctx) {
    if (ctx) { *ctx = llmc_cpu_wait_watchdog.ctx; }
    return llmc_cpu_wait_watchdog.fn;
}

/* ---------------------------------------------------------------- graphs: none on the CPU */

typedef int DevGraph;
static inline int dev_graphs_supported(void) { return 0; }
static inline void dev_graph_begin_capture(void) { FATAL("internal: CUDA graphs are not available in the CPU build"); }
static inline DevGraph dev_graph_end_capture(void) {
    FATAL("internal: CUDA graphs are not available in the CPU build");
    return 0;
}
static inline void dev_graph_launch(DevGraph g) { (void)g; FATAL("internal: CUDA graphs are not available in the CPU build"); }
static inline void dev_graph_destroy(DevGraph g) { (void)g; }

/* ---------------------------------------------------------------- ops */
#include "encoder.h"
#include "layernorm.h"
#include "qknorm.h"
#include "gelu.h"
#include "rope.h"
#include "matmul.h"
#include "matmul_auto.h"
#include "attention.h"
#include "attention_decode.h"
#include "classifier.h"
#include "adamw.h"
#include "muon.h"
#include "compress.h"
#include "moe.h"

#endif /* LLMC_CPU_BACKEND_H */
