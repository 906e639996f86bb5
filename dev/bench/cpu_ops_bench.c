/*
 * dev/bench/cpu_ops_bench.c -- times every CPU backend op (llmc/cpu/) at GPT-2
 * d12 shapes (B=4, T=64, C=768, NH=12, V=50257, Vp=50304) and compares the
 * optimised backend with the -DLLMC_CPU_NAIVE baseline (plain OpenMP loops in the
 * style of llm.c's train_gpt2.c). A benchmark, not a test: it prints a table.
 *
 * Build both variants and run side by side (the optimised binary runs the naive
 * one as a child process with --raw and joins the results):
 *   F="-std=c11 -O3 -march=native -fopenmp -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unknown-pragmas -I."
 *   gcc $F dev/bench/cpu_ops_bench.c -lopenblas -lm -o build/cpu_ops_bench
 *   gcc $F -DLLMC_CPU_NAIVE dev/bench/cpu_ops_bench.c -lopenblas -lm -o build/cpu_ops_bench_naive
 *   ./build/cpu_ops_bench ./build/cpu_ops_bench_naive
 *
 * Times are medians (ms) of up to 7 repetitions after one warm-up. The
 * "step (d12, 12 layers)" row sums forward + backward of every op with its
 * multiplicity in one GPT-2 124M training step at this B, T (plus AdamW on all
 * 124M parameters), i.e. what train_gpt_cpu spends in the backend per step.
 * With --blas-threads the optimised binary also times the lm-head matmul with
 * OpenBLAS's own thread pool instead of per-thread row slabs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmc/backend.h"

#define B_ 4
#define T_ 64
#define C_ 768
#define NH_ 12
#define L_ 12
#define V_ 50257
#define VP_ 50304
#define N_ (B_ * T_)
#define NPARAMS 124475904UL /* GPT-2 124M with Vp = 50304 */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}
static float* buf(size_t n, float scale) {
    float* p = (float*)dev_malloc(n * sizeof(float), "bench");
    unsigned s = 12345u;
    for (size_t i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; p[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f); }
    return p;
}

typedef struct { const char* name; int mult; double ms, min; } Row;
static Row rows[64];
static int nrows = 0;

#define TIME_OP(label, multiplicity, stmt)                                   \
    do {                                                                     \
        double ts_[7]; int r_ = 0; double tot_ = 0;                          \
        stmt; /* warm-up */                                                  \
        while (r_ < 7 && (r_ < 1 || tot_ < 1000.0)) {                        \
            double t0_ = now_ms(); stmt; ts_[r_] = now_ms() - t0_;           \
            tot_ += ts_[r_]; r_++;                                           \
        }                                                                    \
        qsort(ts_, r_, sizeof(double), cmp_double);                          \
        rows[nrows].name = (label); rows[nrows].mult = (multiplicity);       \
        rows[nrows].ms = ts_[r_ / 2]; rows[nrows].min = ts_[0]; nrows++;                               \
    } while (0)

int main(int argc, char** argv) {
    int raw = argc > 1 && strcmp(argv[1], "--raw") == 0;
    int blas_threads = argc > 1 && strcmp(argv[argc - 1], "--blas-threads") == 0;
    const char* naive_bin = (!raw && argc > 1 && argv[1][0] != '-') ? argv[1] : NULL;
    backend_init(0, 0);

    int* tok = (int*)malloc_check(N_ * sizeof(int), "tokens");
    for (int i = 0; i < N_; i++) { tok[i] = (i * 7919) % V_; }
    float *wte = buf((size_t)VP_ * C_, 0.1f), *wpe = buf((size_t)1024 * C_, 0.1f), *x = buf((size_t)N_ * C_, 1);
    float *dwte = buf((size_t)VP_ * C_, 0), *dwpe = buf((size_t)1024 * C_, 0);
    float *lnw = buf(C_, 1), *lnb = buf(C_, 1), *mean = buf(N_, 0), *rstd = buf(N_, 0), *y = buf((size_t)N_ * C_, 0);
    float *dy = buf((size_t)N_ * C_, 1), *dx = buf((size_t)N_ * C_, 0), *dlnw = buf(C_, 0), *dlnb = buf(C_, 0);
    float *W = buf((size_t)4 * C_ * C_, 0.05f), *bias = buf(4 * C_, 0.1f), *dW = buf((size_t)4 * C_ * C_, 0), *db = buf(4 * C_, 0);
    float *h = buf((size_t)N_ * 4 * C_, 1), *pre = buf((size_t)N_ * 4 * C_, 1), *dh = buf((size_t)N_ * 4 * C_, 1);
    float *qkv = buf((size_t)N_ * 3 * C_, 1), *dqkv = buf((size_t)N_ * 3 * C_, 0), *att = buf((size_t)N_ * C_, 0);
    float* state = buf(attention_state_floats(B_, T_, NH_), 0);
    float* ascr = buf(attention_scratch_floats(B_, T_, C_, NH_, NH_), 0);
    float *logits = buf((size_t)N_ * VP_, 1), *dlog = buf((size_t)N_ * VP_, 1), *losses = buf(N_, 0);
    float *p = buf(NPARAMS, 0.1f), *g = buf(NPARAMS, 0.01f), *m = buf(NPARAMS, 0), *v = buf(NPARAMS, 0);

    TIME_OP("encoder fwd", 1, encoder_forward(x, tok, wte, wpe, B_, T_, C_));
    TIME_OP("encoder bwd", 1, encoder_backward(dwte, dwpe, dy, tok, tok, B_, T_, C_));
    TIME_OP("layernorm fwd (fused residual)", 2 * L_ + 1, fused_residual_layernorm_forward(dx, y, mean, rstd, x, dy, lnw, lnb, N_, C_));
    TIME_OP("layernorm bwd", 2 * L_ + 1, layernorm_backward(dx, dlnw, dlnb, NULL, dy, x, lnw, mean, rstd, N_, C_));
    TIME_OP("matmul fwd qkv   C->3C", L_, matmul_forward(qkv, x, W, bias, N_, C_, 3 * C_, NULL));
    TIME_OP("matmul bwd qkv", L_, matmul_backward(dx, dW, db, qkv, x, W, NULL, N_, C_, 3 * C_, NULL));
    TIME_OP("matmul fwd proj  C->C", L_, matmul_forward(y, x, W, bias, N_, C_, C_, NULL));
    TIME_OP("matmul bwd proj", L_, matmul_backward(dx, dW, db, dy, x, W, NULL, N_, C_, C_, NULL));
    TIME_OP("matmul fwd fc    C->4C +gelu", L_, matmul_forward(h, x, W, bias, N_, C_, 4 * C_, pre));
    TIME_OP("matmul bwd fc +gelu", L_, matmul_backward(dx, dW, db, dh, x, W, NULL, N_, C_, 4 * C_, pre));
    TIME_OP("matmul fwd fcproj 4C->C", L_, matmul_forward(y, h, W, bias, N_, 4 * C_, C_, NULL));
    TIME_OP("matmul bwd fcproj", L_, matmul_backward(h, dW, db, dy, pre, W, NULL, N_, 4 * C_, C_, NULL));
    TIME_OP("matmul fwd lm head C->Vp", 1, matmul_forward(logits, x, wte, NULL, N_, C_, VP_, NULL));
    TIME_OP("matmul bwd lm head", 1, matmul_backward(dx, dwte, NULL, dlog, x, wte, NULL, N_, C_, VP_, NULL));
    TIME_OP("attention fwd", L_, attention_forward(att, state, ascr, qkv, B_, T_, C_, NH_, NH_));
    TIME_OP("attention bwd", L_, attention_backward(dqkv, ascr, dy, qkv, att, state, B_, T_, C_, NH_, NH_));
    TIME_OP("gelu fwd (n=N*4C)", 0, gelu_forward(h, pre, (size_t)N_ * 4 * C_));
    TIME_OP("residual fwd", L_, residual_forward(y, x, dy, (size_t)N_ * C_));
    memcpy(dlog, logits, (size_t)N_ * VP_ * sizeof(float));
    TIME_OP("fused classifier", 1, fused_classifier(dlog, losses, 1.0f / N_, tok, N_, V_, VP_, 1));
    TIME_OP("adamw (124M params)", 1, adamw_update(p, NULL, g, m, v, NPARAMS, 0, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 0));
    float norm = 0;
    TIME_OP("global norm (124M)", 1, global_norm_squared(&norm, g, NPARAMS, 0));
    if (blas_threads) {
        openblas_set_num_threads(cpu_num_threads());
        TIME_OP("lm head fwd, OpenBLAS-threaded sgemm", 0,
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N_, VP_, C_, 1.0f, x, C_, wte, C_, 0.0f, logits, VP_));
        TIME_OP("lm head dW, OpenBLAS-threaded sgemm", 0,
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, VP_, C_, N_, 1.0f, dlog, VP_, x, C_, 1.0f, dwte, C_));
        openblas_set_num_threads(1);
        TIME_OP("lm head dW, row-split sgemm (ours)", 0,
                cpu_sgemm_rows(1, 0, VP_, C_, N_, dlog, VP_, x, C_, 1.0f, dwte, C_));
    }

    if (raw) {
        for (int i = 0; i < nrows; i++) { printf("%.6f %.6f\n", rows[i].ms, rows[i].min); }
        return 0;
    }
    double naive[64], naive_min[64];
    int have_naive = 0;
    if (naive_bin) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "%s --raw", naive_bin);
        FILE* f = popen(cmd, "r");
        if (f == NULL) { FATAL("cannot run '%s'", cmd); }
        while (have_naive < 64 && fscanf(f, "%lf %lf", &naive[have_naive], &naive_min[have_naive]) == 2) { have_naive++; }
        pclose(f);
    }
    printf("CPU backend ops at d12 shapes B=%d T=%d C=%d NH=%d Vp=%d, %s\n", B_, T_, C_, NH_, VP_, backend_device_name());
    printf("(median and min over repetitions, ms; speedup = naive/opt of the medians)\n");
    printf("%-38s %6s %10s %10s %10s %10s %8s\n", "op", "x/step", "opt med", "opt min", "naive med", "naive min", "speedup");
    double so = 0, som = 0, sn = 0, snm = 0;
    for (int i = 0; i < nrows; i++) {
        so += rows[i].mult * rows[i].ms;
        som += rows[i].mult * rows[i].min;
        if (i < have_naive) {
            sn += rows[i].mult * naive[i];
            snm += rows[i].mult * naive_min[i];
            printf("%-38s %6d %10.3f %10.3f %10.3f %10.3f %7.2fx\n", rows[i].name, rows[i].mult, rows[i].ms, rows[i].min,
                   naive[i], naive_min[i], naive[i] / rows[i].ms);
        } else {
            printf("%-38s %6d %10.3f %10.3f %10s %10s %8s\n", rows[i].name, rows[i].mult, rows[i].ms, rows[i].min, "-", "-", "-");
        }
    }
    if (have_naive) {
        printf("%-38s %6s %10.1f %10.1f %10.1f %10.1f %7.2fx  (min-based %.2fx)\n", "step (d12, 12 layers, sum)", "", so, som,
               sn, snm, sn / so, snm / som);
    } else {
        printf("%-38s %6s %10.1f %10.1f\n", "step (d12, 12 layers, sum)", "", so, som);
    }
    return 0;
}
