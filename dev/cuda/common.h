/*
 * dev/cuda/common.h -- shared helpers for the dev/cuda kernel programs (llmc/README.md, "Tests").
 *
 * Each program includes the real kernels from llmc/cuda (never copies them), runs them on random
 * inputs at GPT-2 124M shapes, compares with a CPU reference in fp64, then times them.
 *
 * - Inputs: rand_floats() fills host arrays (xorshift64*, seeded), upload_random() puts them on the
 *   device as floatX and reads the ROUNDED values back, so the CPU reference sees exactly the
 *   device's inputs and the only differences left are the kernel's own arithmetic and output rounding.
 * - poison(): fills an output with NaN bytes (0xFF..: NaN in fp32, bf16 and fp16) before each run,
 *   so an element the kernel fails to write is caught by the check.
 * - check_close(): |got - ref| <= atol + rtol*|ref| for every element, NaN fails; prints the worst
 *   element and counts failures. Tolerances are stated by each program from the precision:
 *   UNIT_ROUNDOFF is 2^-8 (bf16), 2^-11 (fp16), 2^-24 (fp32); a result rounded once to floatX is within
 *   UNIT_ROUNDOFF*|x| of the exact value. --use_fast_math intrinsics (__expf, tanh.approx) add
 *   FAST_MATH_REL (2^-10, the PTX ISA bound for tanh.approx.f32 is ~2^-10.99) where they are used.
 * - bench_ms(): median of `reps` timed runs (CUDA events on main_stream()) after `warmup` runs.
 *   report_bw() / report_flops() print GB/s or TFLOP/s and the fraction of the H200 peak
 *   (4.8 TB/s HBM3e, 989 TFLOP/s dense BF16; override with env PEAK_GBS / PEAK_TFLOPS).
 * - finish(): prints "<program>: N checks, M failed" and returns the exit status (non-zero on failure). Every
 *   program checks first and times afterwards, and times whether or not a check failed (a failed check's timing
 *   is still the kernel's speed; the exit status says it failed).
 * - Training shapes: TRAIN_B x TRAIN_T (64 x 1024, GPT-2 124M's micro-batch, dev/cuda/NOTES.md's floors). There every
 *   activation tensor (100 MB and up in bf16) is larger than the H100/H200 L2 (50-60 MB), so the time is HBM's, as in
 *   training; at the programs' check shapes (B = 8) some tensors fit in L2 and the time flatters the kernel. Where an
 *   fp64 reference at the training shape would take too long or too much host memory, a program checks at the small
 *   shape, times at both, fills the training-shape inputs with tile_fill() copies of the checked inputs, and says
 *   so in a "note:" line (note_shapes()).
 * Error behaviour: CUDA errors exit via CUDA_CHECK (file:line); no GPU -> the backend's one-line error.
 */
#ifndef DEV_CUDA_COMMON_H
#define DEV_CUDA_COMMON_H

/* llmc/backend.h: the backend-independent constants (MOE_MAX_EXPERTS), then llmc/cuda/backend.cuh under nvcc */
#include "../../llmc/backend.h"

#include <algorithm>
#include <vector>

#if defined(ENABLE_FP32)
#define UNIT_ROUNDOFF (1.0 / 16777216.0)
#elif defined(ENABLE_FP16)
#define UNIT_ROUNDOFF (1.0 / 2048.0)
#else
#define UNIT_ROUNDOFF (1.0 / 256.0)
#endif
#define FAST_MATH_REL (1.0 / 1024.0)

static int dev_checks = 0;
static int dev_failures = 0;

/* ---------------------------------------------------------------- random inputs */

static inline uint64_t rng_next(uint64_t* s) {
    uint64_t x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}
static inline float rng_uniform(uint64_t* s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)); }

static inline void rand_floats(float* h, size_t n, float lo, float hi, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) { h[i] = lo + (hi - lo) * rng_uniform(&s); }
}

/* device floatX(n) with uniform [lo,hi) values; `host` (n) receives the rounded values */
static inline floatX* upload_random(float* host, size_t n, float lo, float hi, uint64_t seed, const char* what) {
    rand_floats(host, n, lo, hi, seed);
    floatX* d = (floatX*)dev_malloc(n * sizeof(floatX), what);
    dev_upload_floats(d, host, n);
    dev_download_floats(host, d, n);
    return d;
}
static inline float* upload_floats_dev(const float* host, size_t n, const char* what) {
    float* d = (float*)dev_malloc(n * sizeof(float), what);
    dev_memcpy_h2d(d, host, n * sizeof(float));
    return d;
}
static inline std::vector<float> download(const floatX* d, size_t n) {
    std::vector<float> h(n);
    dev_download_floats(h.data(), d, n);
    return h;
}
static inline std::vector<float> download_f32(const float* d, size_t n) {
    std::vector<float> h(n);
    dev_memcpy_d2h(h.data(), d, n * sizeof(float));
    return h;
}

/* the training shape's micro-batch (see the header comment) */
#define TRAIN_B 64
#define TRAIN_T 1024
/* dst(n) <- copies of src(n_src) back to back (device to device, doubling the filled part each time): inputs at the
 * training shape with the values of the checked ones, without a host pass over hundreds of MB */
template <class T>
static inline void tile_fill(T* dst, size_t n, const T* src, size_t n_src) {
    size_t done = n < n_src ? n : n_src;
    dev_memcpy_d2d(dst, src, done * sizeof(T));
    while (done < n) {
        size_t k = done < n - done ? done : n - done;
        dev_memcpy_d2d(dst + done, dst, k * sizeof(T));
        done += k;
    }
}
/* a new device buffer of n elements filled by tile_fill from src(n_src) */
template <class T>
static inline T* tiled_copy(const T* src, size_t n_src, size_t n, const char* what) {
    T* d = (T*)dev_malloc(n * sizeof(T), what);
    tile_fill(d, n, src, n_src);
    return d;
}
static inline void note_shapes(const char* checked, const char* timed) {
    printf("note: checked at %s (fp64 CPU reference); timed at %s too, inputs tiled from the checked ones "
           "(tensors larger than the 50-60 MB L2)\n", checked, timed);
}

/* NaN bytes in every element (fp32, bf16 and fp16 all read 0xFF.. as NaN) */
static inline void poison(void* d, size_t bytes) { dev_memset(d, 0xFF, bytes); }

/* ---------------------------------------------------------------- checks */

/* got[idx[i]] vs ref[i] for i < n (idx NULL: identity) */
static inline int check_close_idx(const char* name, const float* got, const double* ref, const size_t* idx, size_t n,
                                  double atol, double rtol) {
    size_t bad = 0, worst = 0;
    double worst_excess = -1.0, max_abs = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = got[idx ? idx[i] : i], r = ref[i];
        double err = fabs(g - r);
        double lim = atol + rtol * fabs(r);
        if (!(err <= lim)) { bad++; }
        double excess = (err != err) ? INFINITY : err / lim;
        if (excess > worst_excess) { worst_excess = excess; worst = i; }
        if (err > max_abs) { max_abs = err; }
    }
    dev_checks++;
    if (bad) { dev_failures++; }
    size_t wi = idx ? idx[worst] : worst;
    printf("%s %-40s n=%zu max|err|=%.3e worst: got %.6g ref %.6g at %zu (err/tol %.2f) atol=%.1e rtol=%.1e%s\n",
           bad ? "FAIL" : "ok  ", name, n, max_abs, n ? got[wi] : 0.0, n ? ref[worst] : 0.0, wi, worst_excess, atol,
           rtol, bad ? " <--" : "");
    if (bad) { printf("     %zu of %zu elements out of tolerance\n", bad, n); }
    return bad == 0;
}
static inline int check_close(const char* name, const float* got, const double* ref, size_t n, double atol, double rtol) {
    return check_close_idx(name, got, ref, NULL, n, atol, rtol);
}
static inline int check_true(const char* name, int cond) {
    dev_checks++;
    if (!cond) { dev_failures++; }
    printf("%s %s\n", cond ? "ok  " : "FAIL", name);
    return cond;
}
/* bitwise equality of two device results (determinism checks) */
static inline int check_bitwise(const char* name, const void* a, const void* b, size_t bytes) {
    std::vector<unsigned char> ha(bytes), hb(bytes);
    dev_memcpy_d2h(ha.data(), a, bytes);
    dev_memcpy_d2h(hb.data(), b, bytes);
    return check_true(name, memcmp(ha.data(), hb.data(), bytes) == 0);
}

static inline int finish(const char* prog) {
    printf("%s: %d checks, %d failed\n", prog, dev_checks, dev_failures);
    return dev_failures ? 1 : 0;
}

/* ---------------------------------------------------------------- timing */

static inline double peak_gbs(void) { const char* e = getenv("PEAK_GBS"); return e ? atof(e) : 4800.0; }
static inline double peak_tflops(void) { const char* e = getenv("PEAK_TFLOPS"); return e ? atof(e) : 989.0; }

/* median milliseconds of fn(ctx) over reps runs after warmup runs, timed with events on main_stream() */
template <class F>
static inline double bench_ms(F fn, int warmup = 3, int reps = 20) {
    for (int i = 0; i < warmup; i++) { fn(); }
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms((size_t)reps);
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0, main_stream()));
        fn();
        CUDA_CHECK(cudaEventRecord(e1, main_stream()));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms[(size_t)i], e0, e1));
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[(size_t)reps / 2];
}
/* bytes: the fewest bytes the kernel must move (the floor); prints achieved GB/s and fraction of peak */
static inline void report_bw(const char* name, double ms, double bytes) {
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("time %-40s %9.4f ms  %8.1f GB/s  %5.1f%% of %.0f GB/s  (floor %.4f ms)\n", name, ms, gbs,
           100.0 * gbs / peak_gbs(), peak_gbs(), bytes / (peak_gbs() * 1e9) * 1e3);
}
static inline void report_flops(const char* name, double ms, double flops) {
    double tf = flops / (ms * 1e-3) / 1e12;
    printf("time %-40s %9.4f ms  %8.1f TFLOP/s  %5.1f%% of %.0f TFLOP/s  (floor %.4f ms)\n", name, ms, tf,
           100.0 * tf / peak_tflops(), peak_tflops(), flops / (peak_tflops() * 1e12) * 1e3);
}

#endif /* DEV_CUDA_COMMON_H */
