/*
 * dev/test/test_cpu_ops.c -- unit tests of the CPU backend ops (llmc/cpu/ headers)
 * against double-precision references written here, at normal and awkward shapes
 * (N = 1, T = 1, C not a multiple of 8, hs not a multiple of 4, Vp > V).
 *
 * The double references of every backward are themselves validated against
 * central finite differences of the double forward (fd_* checks), so the op
 * tests do not merely compare one formula with itself.
 *
 * Error metric printed in each check: "abs" = max |got - ref|, "rel" = abs /
 * max |ref| (error relative to the tensor's scale, robust to entries near 0).
 *
 * Tolerances (fp32, unit roundoff u = 2^-24 ~ 6e-8): an op whose outputs are sums
 * of K products accumulates rounding error of about sqrt(K)*u relative to the
 * output scale for random data (worst case K*u). With K <= 2304 here that is
 * ~3e-6 typical; exp/tanh/sqrt add a few ulp. So REL_TOL = 2e-5 leaves margin for
 * rounding while any indexing/formula bug gives errors of order 1. Elementwise
 * ops with at most a few roundings use TIGHT_TOL = 1e-6. Finite-difference checks
 * of the double references use h = 1e-5 (truncation ~h^2, cancellation ~1e-16/h,
 * both < 1e-9) and FD_TOL = 1e-6.
 *
 * Build: make build/test_cpu_ops && ./build/test_cpu_ops  (prints ok/not ok lines)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/backend.h"
#include "dev/test/testing.h"

#define REL_TOL 2e-5
#define TIGHT_TOL 1e-6
#define FD_TOL 1e-6

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static double rnd(void) { /* uniform in [-1, 1), xorshift64* */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static float* frand(size_t n, double scale) {
    float* p = (float*)dev_malloc(n * sizeof(float), "test");
    for (size_t i = 0; i < n; i++) { p[i] = (float)(rnd() * scale); }
    return p;
}
static double* todouble(const float* x, size_t n) {
    double* d = (double*)malloc_check((n ? n : 1) * sizeof(double), "test");
    for (size_t i = 0; i < n; i++) { d[i] = x[i]; }
    return d;
}
static float* fcopy(const float* x, size_t n) {
    float* p = (float*)dev_malloc(n * sizeof(float), "test");
    memcpy(p, x, n * sizeof(float));
    return p;
}
static double* dzeros(size_t n) { return (double*)calloc_check(n ? n : 1, sizeof(double), "test"); }

typedef struct { double abs, rel; } Err;
static Err cmp(const float* got, const double* ref, size_t n) {
    double ma = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= ma)) { ma = d; } /* NaN propagates */
        if (fabs(ref[i]) > mr) { mr = fabs(ref[i]); }
    }
    Err e = {ma, mr > 0 ? ma / mr : ma};
    return e;
}
static Err cmpd(const double* got, const double* ref, size_t n) {
    double ma = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (!(d <= ma)) { ma = d; }
        if (fabs(ref[i]) > mr) { mr = fabs(ref[i]); }
    }
    Err e = {ma, mr > 0 ? ma / mr : ma};
    return e;
}
#define CHECK_ERR(e, tol, ...)                                                               \
    do {                                                                                     \
        char msg_[200];                                                                      \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                            \
        TEST_CHECK((e).rel <= (tol), "%s: abs %.2e rel %.2e (tol %.0e)", msg_, (e).abs, (e).rel, (double)(tol)); \
    } while (0)

/* central finite differences of loss() w.r.t. every x[i]; returns error vs analytic grad */
typedef double (*LossFn)(void* ctx);
static Err fd_grad(LossFn loss, void* ctx, double* x, size_t n, const double* analytic) {
    const double h = 1e-5;
    double* fd = dzeros(n);
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h; double lp = loss(ctx);
        x[i] = x0 - h; double lm = loss(ctx);
        x[i] = x0;
        fd[i] = (lp - lm) / (2 * h);
    }
    Err e = cmpd(analytic, fd, n);
    free(fd);
    return e;
}

/* ---------------------------------------------------------------- double references */

static double ref_gelu(double x) {
    const double s = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(s * (x + 0.044715 * x * x * x)));
}
static double ref_gelu_grad(double x) {
    const double s = sqrt(2.0 / M_PI);
    double th = tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

/* SwiGLU (Shazeer 2020): out(N,F) = silu(gate) up, inp rows [gate (F) | up (F)]; backward: dinp rows
 * [dout up silu'(gate) | dout silu(gate)], silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). In double: for |g| <= 100
 * exp(-g) stays finite and s is exact to ~1e-16 relative. */
static double ref_sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }
static double ref_silu(double g) { return g * ref_sigmoid(g); }
static double ref_silu_grad(double g) { double sg = ref_sigmoid(g); return sg * (1.0 + g * (1.0 - sg)); }
static void ref_swiglu_fwd(double* out, const double* inp, int N, int F) {
    for (int n = 0; n < N; n++) {
        for (int f = 0; f < F; f++) {
            out[(size_t)n * F + f] = ref_silu(inp[(size_t)n * 2 * F + f]) * inp[(size_t)n * 2 * F + F + f];
        }
    }
}
static void ref_swiglu_bwd(double* dinp, const double* dout, const double* inp, int N, int F) {
    for (int n = 0; n < N; n++) {
        for (int f = 0; f < F; f++) {
            double g = inp[(size_t)n * 2 * F + f], u = inp[(size_t)n * 2 * F + F + f], d = dout[(size_t)n * F + f];
            dinp[(size_t)n * 2 * F + f] = d * u * ref_silu_grad(g);
            dinp[(size_t)n * 2 * F + F + f] = d * ref_silu(g);
        }
    }
}
/* ReLU^2 (So et al. 2021): max(x, 0)^2, derivative 2 max(x, 0) */
static double ref_relu2(double x) { return x > 0 ? x * x : 0.0; }
static double ref_relu2_grad(double x) { return x > 0 ? 2.0 * x : 0.0; }

static void ref_layernorm_fwd(double* out, double* mean, double* rstd, const double* x, const double* w,
                              const double* b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xr = x + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) { m += xr[c]; }
        m /= C;
        for (int c = 0; c < C; c++) { v += (xr[c] - m) * (xr[c] - m); }
        double r = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = (xr[c] - m) * r * w[c] + b[c]; }
        if (mean) { mean[n] = m; rstd[n] = r; }
    }
}
/* dx, dw, db accumulate */
static void ref_layernorm_bwd(double* dx, double* dw, double* db, const double* dout, const double* x,
                              const double* w, int N, int C) {
    double* out = dzeros((size_t)N * C); double* mean = dzeros(N); double* rstd = dzeros(N);
    double* zb = dzeros(C);
    ref_layernorm_fwd(out, mean, rstd, x, w, zb, N, C);
    for (int n = 0; n < N; n++) {
        const double* d = dout + (size_t)n * C; const double* xr = x + (size_t)n * C;
        double s1 = 0, s2 = 0;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - mean[n]) * rstd[n];
            s1 += d[c] * w[c]; s2 += d[c] * w[c] * xh;
            dw[c] += d[c] * xh; db[c] += d[c];
        }
        s1 /= C; s2 /= C;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - mean[n]) * rstd[n];
            dx[(size_t)n * C + c] += (d[c] * w[c] - s1 - xh * s2) * rstd[n];
        }
    }
    free(out); free(mean); free(rstd); free(zb);
}

/* RMSNorm (Zhang & Sennrich 2019): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + 1e-5). eps_outside = 1 is a
 * deliberately wrong variant, rstd = 1/(sqrt(mean(x^2)) + eps), used only to show the tests can tell the two apart. */
static void ref_rmsnorm_fwd_v(double* out, double* rstd, const double* x, const double* w, int N, int C,
                              int eps_outside) {
    for (int n = 0; n < N; n++) {
        const double* xr = x + (size_t)n * C;
        double ms = 0;
        for (int c = 0; c < C; c++) { ms += xr[c] * xr[c]; }
        ms /= C;
        double r = eps_outside ? 1.0 / (sqrt(ms) + 1e-5) : 1.0 / sqrt(ms + 1e-5);
        for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = xr[c] * r * w[c]; }
        if (rstd) { rstd[n] = r; }
    }
}
static void ref_rmsnorm_fwd(double* out, double* rstd, const double* x, const double* w, int N, int C) {
    ref_rmsnorm_fwd_v(out, rstd, x, w, N, C, 0);
}
/* dx, dw accumulate: dx += rstd (dxhat - xhat mean(dxhat xhat)), dxhat = dout w, xhat = x rstd; dw += sum dout xhat.
 * drop_term = 1 is a deliberately wrong variant without the mean(dxhat xhat) term (see test_rmsnorm). */
static void ref_rmsnorm_bwd_v(double* dx, double* dw, const double* dout, const double* x, const double* w, int N,
                              int C, int drop_term) {
    double* out = dzeros((size_t)N * C); double* rstd = dzeros(N);
    ref_rmsnorm_fwd(out, rstd, x, w, N, C);
    for (int n = 0; n < N; n++) {
        const double* d = dout + (size_t)n * C; const double* xr = x + (size_t)n * C;
        double s2 = 0;
        for (int c = 0; c < C; c++) {
            double xh = xr[c] * rstd[n];
            s2 += d[c] * w[c] * xh;
            dw[c] += d[c] * xh;
        }
        s2 = drop_term ? 0.0 : s2 / C;
        for (int c = 0; c < C; c++) {
            double xh = xr[c] * rstd[n];
            dx[(size_t)n * C + c] += (d[c] * w[c] - xh * s2) * rstd[n];
        }
    }
    free(out); free(rstd);
}
static void ref_rmsnorm_bwd(double* dx, double* dw, const double* dout, const double* x, const double* w, int N,
                            int C) {
    ref_rmsnorm_bwd_v(dx, dw, dout, x, w, N, C, 0);
}

/* pre = x W^T + b; out = gelu ? gelu(pre) : pre */
static void ref_matmul_fwd(double* out, double* pre, const double* x, const double* W, const double* b,
                           int N, int C, int OC, int gelu) {
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < C; i++) { s += x[(size_t)n * C + i] * W[(size_t)o * C + i]; }
            if (pre) { pre[(size_t)n * OC + o] = s; }
            out[(size_t)n * OC + o] = gelu ? ref_gelu(s) : s;
        }
    }
}
/* dx overwritten, dW/db accumulate; dout is d(out) (before the gelu chain rule) */
static void ref_matmul_bwd(double* dx, double* dW, double* db, const double* dout, const double* x,
                           const double* W, const double* pre, int N, int C, int OC) {
    memset(dx, 0, (size_t)N * C * sizeof(double));
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double g = dout[(size_t)n * OC + o];
            if (pre) { g *= ref_gelu_grad(pre[(size_t)n * OC + o]); }
            for (int i = 0; i < C; i++) {
                dx[(size_t)n * C + i] += g * W[(size_t)o * C + i];
                dW[(size_t)o * C + i] += g * x[(size_t)n * C + i];
            }
            if (db) { db[o] += g; }
        }
    }
}

static void ref_attention_fwd(double* out, double* P, const double* qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        double* row = P + (((size_t)b * NH + h) * T + t) * T;
        const double* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
        double mx = -1e300, s = 0;
        for (int j = 0; j < T; j++) {
            if (j > t) { row[j] = 0; continue; }
            const double* k = qkv + ((size_t)b * T + j) * C3 + C + h * hs;
            double d = 0;
            for (int i = 0; i < hs; i++) { d += q[i] * k[i]; }
            row[j] = d * scale;
            if (row[j] > mx) { mx = row[j]; }
        }
        for (int j = 0; j <= t; j++) { row[j] = exp(row[j] - mx); s += row[j]; }
        for (int j = 0; j <= t; j++) { row[j] /= s; }
        double* o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) {
            double a = 0;
            for (int j = 0; j <= t; j++) { a += row[j] * qkv[((size_t)b * T + j) * C3 + 2 * C + h * hs + i]; }
            o[i] = a;
        }
    }
}
/* dqkv overwritten */
static void ref_attention_bwd(double* dqkv, const double* dout, const double* qkv, const double* P,
                              int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs);
    memset(dqkv, 0, (size_t)B * T * C3 * sizeof(double));
    double* dp = dzeros(T);
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        const double* row = P + (((size_t)b * NH + h) * T + t) * T;
        const double* dO = dout + ((size_t)b * T + t) * C + h * hs;
        const double* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
        double s = 0;
        for (int j = 0; j <= t; j++) {
            const double* v = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * hs;
            double d = 0;
            for (int i = 0; i < hs; i++) { d += dO[i] * v[i]; }
            dp[j] = d; s += row[j] * d;
        }
        for (int j = 0; j <= t; j++) {
            double ds = row[j] * (dp[j] - s) * scale;
            for (int i = 0; i < hs; i++) {
                dqkv[((size_t)b * T + t) * C3 + h * hs + i] += ds * qkv[((size_t)b * T + j) * C3 + C + h * hs + i];
                dqkv[((size_t)b * T + j) * C3 + C + h * hs + i] += ds * q[i];
                dqkv[((size_t)b * T + j) * C3 + 2 * C + h * hs + i] += row[j] * dO[i];
            }
        }
    }
    free(dp);
}

/* losses(N); dlogits(N,Vp) (0 in padded columns and ignored rows) */
static void ref_classifier(double* losses, double* dlogits, const double* logits, const int* tg, double dloss,
                           int N, int V, int Vp) {
    for (int n = 0; n < N; n++) {
        const double* r = logits + (size_t)n * Vp;
        double* d = dlogits + (size_t)n * Vp;
        for (int j = 0; j < Vp; j++) { d[j] = 0; }
        if (tg[n] < 0) { losses[n] = 0; continue; }
        double mx = r[0], s = 0;
        for (int j = 1; j < V; j++) { if (r[j] > mx) mx = r[j]; }
        for (int j = 0; j < V; j++) { s += exp(r[j] - mx); }
        losses[n] = log(s) + mx - r[tg[n]];
        for (int j = 0; j < V; j++) { d[j] = dloss * (exp(r[j] - mx) / s - (j == tg[n])); }
    }
}

/* ---------------------------------------------------------------- finite-difference validation of the references */

typedef struct { double *x, *w, *b, *R, *out; int N, C; } LnCtx;
static double ln_loss(void* p) {
    LnCtx* c = (LnCtx*)p; double L = 0;
    ref_layernorm_fwd(c->out, NULL, NULL, c->x, c->w, c->b, c->N, c->C);
    for (int i = 0; i < c->N * c->C; i++) { L += c->out[i] * c->R[i]; }
    return L;
}
typedef struct { double *x, *W, *b, *R, *out; int N, C, OC; } MmCtx;
static double rms_loss(void* p) { /* LnCtx without b */
    LnCtx* c = (LnCtx*)p; double L = 0;
    ref_rmsnorm_fwd(c->out, NULL, c->x, c->w, c->N, c->C);
    for (int i = 0; i < c->N * c->C; i++) { L += c->out[i] * c->R[i]; }
    return L;
}
static double mm_loss(void* p) {
    MmCtx* c = (MmCtx*)p; double L = 0;
    ref_matmul_fwd(c->out, NULL, c->x, c->W, c->b, c->N, c->C, c->OC, 1);
    for (int i = 0; i < c->N * c->OC; i++) { L += c->out[i] * c->R[i]; }
    return L;
}
typedef struct { double *qkv, *R, *out, *P; int B, T, C, NH; } AttCtx;
static double att_loss(void* p) {
    AttCtx* c = (AttCtx*)p; double L = 0;
    ref_attention_fwd(c->out, c->P, c->qkv, c->B, c->T, c->C, c->NH);
    for (int i = 0; i < c->B * c->T * c->C; i++) { L += c->out[i] * c->R[i]; }
    return L;
}
typedef struct { double *logits, *losses, *dl; const int* tg; double dloss; int N, V, Vp; } ClsCtx;
static double cls_loss(void* p) {
    ClsCtx* c = (ClsCtx*)p; double L = 0;
    ref_classifier(c->losses, c->dl, c->logits, c->tg, c->dloss, c->N, c->V, c->Vp);
    for (int i = 0; i < c->N; i++) { L += c->dloss * c->losses[i]; }
    return L;
}

typedef struct { double *x, *R, *out; int N, F; } GluCtx;
static double glu_loss(void* p) {
    GluCtx* c = (GluCtx*)p; double L = 0;
    ref_swiglu_fwd(c->out, c->x, c->N, c->F);
    for (int i = 0; i < c->N * c->F; i++) { L += c->out[i] * c->R[i]; }
    return L;
}
typedef struct { double *x, *R; int n; } Relu2Ctx;
static double relu2_loss(void* p) {
    Relu2Ctx* c = (Relu2Ctx*)p; double L = 0;
    for (int i = 0; i < c->n; i++) { L += ref_relu2(c->x[i]) * c->R[i]; }
    return L;
}

static void test_references_fd(void) {
    { /* layernorm */
        int N = 3, C = 7; size_t nc = (size_t)N * C;
        double *x = dzeros(nc), *w = dzeros(C), *b = dzeros(C), *R = dzeros(nc), *out = dzeros(nc);
        for (size_t i = 0; i < nc; i++) { x[i] = rnd(); R[i] = rnd(); }
        for (int i = 0; i < C; i++) { w[i] = 1 + 0.5 * rnd(); b[i] = rnd(); }
        double *dx = dzeros(nc), *dw = dzeros(C), *db = dzeros(C);
        ref_layernorm_bwd(dx, dw, db, R, x, w, N, C);
        LnCtx c = {x, w, b, R, out, N, C};
        Err ex = fd_grad(ln_loss, &c, x, nc, dx), ew = fd_grad(ln_loss, &c, w, C, dw), eb = fd_grad(ln_loss, &c, b, C, db);
        CHECK_ERR(ex, FD_TOL, "fd: layernorm reference dinp (N=3,C=7)");
        CHECK_ERR(ew, FD_TOL, "fd: layernorm reference dw");
        CHECK_ERR(eb, FD_TOL, "fd: layernorm reference db");
        free(x); free(w); free(b); free(R); free(out); free(dx); free(dw); free(db);
    }
    { /* rmsnorm: one row of small values (mean(x^2) ~ 1e-4, so eps matters to the derivative too). The RMSNorm
       * tests put the random stream back as they found it, so the tests after them draw the inputs they drew
       * before RMSNorm was added (gelu n=1 at TIGHT_TOL depends on its one value). */
        const uint64_t rng_saved = rng_state;
        int N = 3, C = 7; size_t nc = (size_t)N * C;
        double *x = dzeros(nc), *w = dzeros(C), *R = dzeros(nc), *out = dzeros(nc);
        for (size_t i = 0; i < nc; i++) { x[i] = rnd() * (i < (size_t)C ? 0.02 : 1.0); R[i] = rnd(); }
        for (int i = 0; i < C; i++) { w[i] = 1 + 0.5 * rnd(); }
        double *dx = dzeros(nc), *dw = dzeros(C);
        ref_rmsnorm_bwd(dx, dw, R, x, w, N, C);
        LnCtx c = {x, w, NULL, R, out, N, C};
        Err ex = fd_grad(rms_loss, &c, x, nc, dx), ew = fd_grad(rms_loss, &c, w, C, dw);
        CHECK_ERR(ex, FD_TOL, "fd: rmsnorm reference dinp (N=3,C=7)");
        CHECK_ERR(ew, FD_TOL, "fd: rmsnorm reference dw");
        free(x); free(w); free(R); free(out); free(dx); free(dw);
        rng_state = rng_saved;
    }
    { /* SwiGLU: gates in [-6, 6] (both tails of the sigmoid), ups in [-1, 1] */
        int N = 3, F = 5; size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
        double *x = dzeros(ni), *R = dzeros(no), *out = dzeros(no), *dx = dzeros(ni);
        for (size_t i = 0; i < ni; i++) { x[i] = (i % (2 * (size_t)F)) < (size_t)F ? 6 * rnd() : rnd(); }
        for (size_t i = 0; i < no; i++) { R[i] = rnd(); }
        ref_swiglu_bwd(dx, R, x, N, F);
        GluCtx c = {x, R, out, N, F};
        Err e = fd_grad(glu_loss, &c, x, ni, dx);
        CHECK_ERR(e, FD_TOL, "fd: swiglu reference dinp, gate and up halves (N=3,F=5)");
        free(x); free(R); free(out); free(dx);
    }
    { /* ReLU^2: |x| >= 0.05, away from the kink at 0 (h = 1e-5) */
        int n = 16;
        double *x = dzeros(n), *R = dzeros(n), *dx = dzeros(n);
        for (int i = 0; i < n; i++) { double r = rnd(); x[i] = r < 0 ? r - 0.05 : r + 0.05; R[i] = rnd(); }
        for (int i = 0; i < n; i++) { dx[i] = R[i] * ref_relu2_grad(x[i]); }
        Relu2Ctx c = {x, R, n};
        Err e = fd_grad(relu2_loss, &c, x, n, dx);
        CHECK_ERR(e, FD_TOL, "fd: relu2 reference gradient (n=16)");
        free(x); free(R); free(dx);
    }
    { /* matmul + gelu */
        int N = 3, C = 5, OC = 6;
        double *x = dzeros(N * C), *W = dzeros(OC * C), *b = dzeros(OC), *R = dzeros(N * OC), *out = dzeros(N * OC), *pre = dzeros(N * OC);
        for (int i = 0; i < N * C; i++) { x[i] = rnd(); }
        for (int i = 0; i < OC * C; i++) { W[i] = rnd(); }
        for (int i = 0; i < OC; i++) { b[i] = rnd(); }
        for (int i = 0; i < N * OC; i++) { R[i] = rnd(); }
        ref_matmul_fwd(out, pre, x, W, b, N, C, OC, 1);
        double *dx = dzeros(N * C), *dW = dzeros(OC * C), *db = dzeros(OC);
        ref_matmul_bwd(dx, dW, db, R, x, W, pre, N, C, OC);
        MmCtx c = {x, W, b, R, out, N, C, OC};
        Err ex = fd_grad(mm_loss, &c, x, N * C, dx), ew = fd_grad(mm_loss, &c, W, OC * C, dW), eb = fd_grad(mm_loss, &c, b, OC, db);
        CHECK_ERR(ex, FD_TOL, "fd: matmul+gelu reference dinp (N=3,C=5,OC=6)");
        CHECK_ERR(ew, FD_TOL, "fd: matmul+gelu reference dweight");
        CHECK_ERR(eb, FD_TOL, "fd: matmul+gelu reference dbias");
        free(x); free(W); free(b); free(R); free(out); free(pre); free(dx); free(dW); free(db);
    }
    { /* attention */
        int B = 2, T = 4, C = 6, NH = 2; size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
        double *qkv = dzeros(nq), *R = dzeros(no), *out = dzeros(no), *P = dzeros((size_t)B * NH * T * T), *dq = dzeros(nq);
        for (size_t i = 0; i < nq; i++) { qkv[i] = 2 * rnd(); }
        for (size_t i = 0; i < no; i++) { R[i] = rnd(); }
        ref_attention_fwd(out, P, qkv, B, T, C, NH);
        ref_attention_bwd(dq, R, qkv, P, B, T, C, NH);
        AttCtx c = {qkv, R, out, P, B, T, C, NH};
        Err e = fd_grad(att_loss, &c, qkv, nq, dq);
        CHECK_ERR(e, FD_TOL, "fd: attention reference dqkv (B=2,T=4,C=6,NH=2)");
        free(qkv); free(R); free(out); free(P); free(dq);
    }
    { /* classifier */
        int N = 3, V = 5, Vp = 8; int tg[3] = {2, -1, 4};
        double *lg = dzeros(N * Vp), *ls = dzeros(N), *dl = dzeros(N * Vp), *dref = dzeros(N * Vp);
        for (int i = 0; i < N * Vp; i++) { lg[i] = 3 * rnd(); }
        ref_classifier(ls, dref, lg, tg, 0.7, N, V, Vp);
        ClsCtx c = {lg, ls, dl, tg, 0.7, N, V, Vp};
        Err e = fd_grad(cls_loss, &c, lg, N * Vp, dref);
        CHECK_ERR(e, FD_TOL, "fd: classifier reference dlogits (N=3,V=5,Vp=8, one ignored row)");
        free(lg); free(ls); free(dl); free(dref);
    }
}

/* ---------------------------------------------------------------- op tests */

static void test_encoder(int B, int T, int C, int Vp) {
    int N = B * T;
    int* inp = (int*)malloc_check(N * sizeof(int), "inp");
    for (int i = 0; i < N; i++) { inp[i] = (int)((rnd() + 1) * 0.5 * Vp) % Vp; }
    float *wte = frand((size_t)Vp * C, 1), *wpe = frand((size_t)T * C, 1), *out = frand((size_t)N * C, 1);
    encoder_forward(out, inp, wte, wpe, B, T, C);
    double* ref = dzeros((size_t)N * C);
    for (int n = 0; n < N; n++) for (int c = 0; c < C; c++) {
        ref[(size_t)n * C + c] = (double)wte[(size_t)inp[n] * C + c] + wpe[(size_t)(n % T) * C + c];
    }
    Err e = cmp(out, ref, (size_t)N * C);
    CHECK_ERR(e, TIGHT_TOL, "encoder_forward B=%d T=%d C=%d Vp=%d", B, T, C, Vp);
    float *dout = frand((size_t)N * C, 1), *dwte = frand((size_t)Vp * C, 1), *dwpe = frand((size_t)T * C, 1);
    double *rwte = todouble(dwte, (size_t)Vp * C), *rwpe = todouble(dwpe, (size_t)T * C);
    for (int n = 0; n < N; n++) for (int c = 0; c < C; c++) {
        rwte[(size_t)inp[n] * C + c] += dout[(size_t)n * C + c];
        rwpe[(size_t)(n % T) * C + c] += dout[(size_t)n * C + c];
    }
    encoder_backward(dwte, dwpe, dout, inp, inp, B, T, C);
    Err e1 = cmp(dwte, rwte, (size_t)Vp * C), e2 = cmp(dwpe, rwpe, (size_t)T * C);
    /* each entry is a sum of up to N values: error ~ sqrt(N) u */
    CHECK_ERR(e1, REL_TOL, "encoder_backward dwte (accumulated, repeated tokens) B=%d T=%d C=%d", B, T, C);
    CHECK_ERR(e2, REL_TOL, "encoder_backward dwpe (accumulated) B=%d T=%d C=%d", B, T, C);
    free(inp); dev_free(wte); dev_free(wpe); dev_free(out); dev_free(dout); dev_free(dwte); dev_free(dwpe);
    free(ref); free(rwte); free(rwpe);
}

/* The vocabulary-sharded encoder (tensor parallelism): Vp rows split into tp shards of ceil(Vp/tp) rows (the last
 * shorter), plus a shard [Vp + 3, +2) that holds no token. Each shard against a double reference (forward: one
 * fp32 add, TIGHT_TOL; backward: sums of up to N values, REL_TOL); then against the unsharded ops, bit for bit:
 * the shards' outputs summed (one non-zero term per element: exact) equal encoder_forward's, the shards' dwte rows
 * concatenated equal encoder_backward's dwte, and every shard's dwpe equals encoder_backward's dwpe. */
static void test_encoder_shards(int B, int T, int C, int Vp, int tp) {
    const int N = B * T, rows = (Vp + tp - 1) / tp;
    int* inp = (int*)malloc_check(N * sizeof(int), "inp");
    for (int i = 0; i < N; i++) { inp[i] = (i % 3 == 0) ? Vp - 1 : (int)((rnd() + 1) * 0.5 * Vp) % Vp; } /* repeats */
    const size_t nw = (size_t)Vp * C, nc = (size_t)N * C, np = (size_t)T * C;
    float *wte = frand(nw, 1), *wpe = frand(np, 1), *dout = frand(nc, 1), *dwte0 = frand(nw, 1), *dwpe0 = frand(np, 1);
    float *full = frand(nc, 1), *sum = frand(nc, 1), *fwte = fcopy(dwte0, nw), *fwpe = fcopy(dwpe0, np);
    encoder_forward(full, inp, wte, wpe, B, T, C);
    encoder_backward(fwte, fwpe, dout, inp, inp, B, T, C);
    memset(sum, 0, nc * sizeof(float));
    int same_rows = 1, same_wpe = 1, untouched = 1;
    for (int r = 0; r <= tp; r++) {
        const int v0 = r < tp ? r * rows : Vp + 3, Vs = r < tp ? (Vp - v0 < rows ? Vp - v0 : rows) : 2;
        if (Vs <= 0) { continue; }
        float* ws = r < tp ? fcopy(wte + (size_t)v0 * C, (size_t)Vs * C) : frand((size_t)Vs * C, 1);
        float* gs = r < tp ? fcopy(dwte0 + (size_t)v0 * C, (size_t)Vs * C) : frand((size_t)Vs * C, 1);
        float *gp = fcopy(dwpe0, np), *out = frand(nc, 1);
        double *ref = dzeros(nc), *rws = todouble(gs, (size_t)Vs * C), *rwp = todouble(gp, np);
        float* gs0 = fcopy(gs, (size_t)Vs * C);
        for (int n = 0; n < N; n++) {
            const int in = inp[n] >= v0 && inp[n] < v0 + Vs;
            for (int c = 0; c < C; c++) {
                const double d = dout[(size_t)n * C + c];
                if (in) {
                    ref[(size_t)n * C + c] = (double)ws[(size_t)(inp[n] - v0) * C + c] + wpe[(size_t)(n % T) * C + c];
                    rws[(size_t)(inp[n] - v0) * C + c] += d;
                }
                rwp[(size_t)(n % T) * C + c] += d;
            }
        }
        encoder_forward_vocab_shard(out, inp, ws, wpe, v0, Vs, B, T, C);
        encoder_backward_vocab_shard(gs, gp, dout, inp, inp, v0, Vs, B, T, C);
        Err e = cmp(out, ref, nc), e1 = cmp(gs, rws, (size_t)Vs * C), e2 = cmp(gp, rwp, np);
        CHECK_ERR(e, TIGHT_TOL, "encoder_forward_vocab_shard [%d, +%d) B=%d T=%d C=%d", v0, Vs, B, T, C);
        CHECK_ERR(e1, REL_TOL, "encoder_backward_vocab_shard dwte [%d, +%d) B=%d T=%d C=%d", v0, Vs, B, T, C);
        CHECK_ERR(e2, REL_TOL, "encoder_backward_vocab_shard dwpe [%d, +%d) B=%d T=%d C=%d", v0, Vs, B, T, C);
        for (size_t k = 0; k < nc; k++) { sum[k] += out[k]; }
        if (r < tp) {
            same_rows &= memcmp(gs, fwte + (size_t)v0 * C, (size_t)Vs * C * sizeof(float)) == 0;
        } else {
            untouched &= memcmp(gs, gs0, (size_t)Vs * C * sizeof(float)) == 0;
        }
        same_wpe &= memcmp(gp, fwpe, np * sizeof(float)) == 0;
        dev_free(ws); dev_free(gs); dev_free(gs0); dev_free(gp); dev_free(out); free(ref); free(rws); free(rwp);
    }
    TEST_CHECK(memcmp(sum, full, nc * sizeof(float)) == 0 && same_rows && same_wpe && untouched,
               "encoder over %d vocabulary shards (B=%d T=%d C=%d Vp=%d) == unsharded, bit for bit: summed outputs %d, "
               "concatenated dwte rows %d, dwpe %d; a shard without tokens keeps its dwte %d", tp, B, T, C, Vp,
               memcmp(sum, full, nc * sizeof(float)) == 0, same_rows, same_wpe, untouched);
    free(inp);
    float* bufs[] = {wte, wpe, dout, dwte0, dwpe0, full, sum, fwte, fwpe};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) { dev_free(bufs[i]); }
}

static void test_layernorm(int N, int C) {
    size_t nc = (size_t)N * C;
    float *x = frand(nc, 2), *x2 = frand(nc, 1), *w = frand(C, 1), *b = frand(C, 1);
    float *out = frand(nc, 1), *mean = frand(N, 1), *rstd = frand(N, 1), *res = frand(nc, 1);
    double *dx = todouble(x, nc), *dw = todouble(w, C), *db = todouble(b, C);
    double *rout = dzeros(nc), *rmean = dzeros(N), *rrstd = dzeros(N);
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    ref_layernorm_fwd(rout, rmean, rrstd, dx, dw, db, N, C);
    Err e = cmp(out, rout, nc), em = cmp(mean, rmean, N), er = cmp(rstd, rrstd, N);
    CHECK_ERR(e, REL_TOL, "layernorm_forward out N=%d C=%d", N, C);
    CHECK_ERR(em, REL_TOL, "layernorm_forward mean N=%d C=%d", N, C);
    CHECK_ERR(er, REL_TOL, "layernorm_forward rstd N=%d C=%d", N, C);
    /* fused residual: residual = x + x2 then layernorm */
    fused_residual_layernorm_forward(res, out, mean, rstd, x, x2, w, b, N, C);
    double* rres = dzeros(nc);
    for (size_t i = 0; i < nc; i++) { rres[i] = (double)x[i] + x2[i]; }
    /* the reference normalises the fp32-rounded residual, as the op does */
    double* rres32 = dzeros(nc);
    for (size_t i = 0; i < nc; i++) { rres32[i] = (float)rres[i]; }
    ref_layernorm_fwd(rout, rmean, rrstd, rres32, dw, db, N, C);
    Err ef = cmp(res, rres, nc), eo = cmp(out, rout, nc);
    CHECK_ERR(ef, TIGHT_TOL, "fused_residual_layernorm_forward residual N=%d C=%d", N, C);
    CHECK_ERR(eo, REL_TOL, "fused_residual_layernorm_forward out N=%d C=%d", N, C);
    /* backward, accumulating into random initial values */
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    float *dout = frand(nc, 1), *gx = frand(nc, 1), *gw = frand(C, 1), *gb = frand(C, 1);
    double *rgx = todouble(gx, nc), *rgw = todouble(gw, C), *rgb = todouble(gb, C), *rdout = todouble(dout, nc);
    ref_layernorm_bwd(rgx, rgw, rgb, rdout, dx, dw, N, C);
    float* scratch = (float*)dev_malloc(layernorm_scratch_floats(N, C) * sizeof(float), "scratch");
    layernorm_backward(gx, gw, gb, scratch, dout, x, w, mean, rstd, N, C);
    Err g1 = cmp(gx, rgx, nc), g2 = cmp(gw, rgw, C), g3 = cmp(gb, rgb, C);
    CHECK_ERR(g1, REL_TOL, "layernorm_backward dinp (accumulated) N=%d C=%d", N, C);
    CHECK_ERR(g2, REL_TOL, "layernorm_backward dw (accumulated) N=%d C=%d", N, C);
    CHECK_ERR(g3, REL_TOL, "layernorm_backward db (accumulated) N=%d C=%d", N, C);
    dev_free(x); dev_free(x2); dev_free(w); dev_free(b); dev_free(out); dev_free(mean); dev_free(rstd); dev_free(res);
    dev_free(dout); dev_free(gx); dev_free(gw); dev_free(gb); dev_free(scratch);
    free(dx); free(dw); free(db); free(rout); free(rmean); free(rrstd); free(rres); free(rres32);
    free(rgx); free(rgw); free(rgb); free(rdout);
}

/* RMSNorm against the double reference. Tolerances as the header argues: the row statistic is a sum of C <= 768
 * squares (~sqrt(C) u relative), rstd one sqrt and a division, out three more roundings; the backward's row sum
 * mean(dxhat xhat) has C terms and dw sums N <= 65 rows, each error relative to the tensor's scale, so REL_TOL
 * (2e-5, ~100x the expected ~2e-7..3e-6) holds. `scale` sets the inputs' magnitude: at 1e-2, mean(x^2) ~ 3e-5 is
 * of the order of eps = 1e-5, so where eps sits changes rstd by percents, not by the 4e-6 it does at scale 2.
 * Power: at every shape the test also checks that two wrong formulas (the backward without mean(dxhat xhat),
 * eps outside the sqrt at small scale) are more than 10 REL_TOL from the reference, i.e. that this test
 * would fail an implementation of either. */
static void test_rmsnorm(int N, int C, double scale) {
    size_t nc = (size_t)N * C;
    float *x = frand(nc, 2 * scale), *x2 = frand(nc, scale), *w = frand(C, 1);
    float *out = frand(nc, 1), *rstd = frand(N, 1), *res = frand(nc, 1);
    double *dx = todouble(x, nc), *dw = todouble(w, C);
    double *rout = dzeros(nc), *rrstd = dzeros(N);
    rmsnorm_forward(out, rstd, x, w, N, C);
    ref_rmsnorm_fwd(rout, rrstd, dx, dw, N, C);
    Err e = cmp(out, rout, nc), er = cmp(rstd, rrstd, N);
    CHECK_ERR(e, REL_TOL, "rmsnorm_forward out N=%d C=%d scale=%g", N, C, scale);
    CHECK_ERR(er, REL_TOL, "rmsnorm_forward rstd N=%d C=%d scale=%g", N, C, scale);
    if (scale < 0.1) { /* eps placement: the wrong variant is far from the reference at this scale */
        double* wout = dzeros(nc);
        ref_rmsnorm_fwd_v(wout, NULL, dx, dw, N, C, 1);
        Err ew = cmpd(wout, rout, nc);
        TEST_CHECK(ew.rel > 10 * REL_TOL, "rmsnorm_forward test tells eps outside the sqrt apart (rel %.2e) N=%d C=%d",
                   ew.rel, N, C);
        free(wout);
    }
    /* fused residual: residual = x + x2 rounded to fp32, then rmsnorm of the rounded residual */
    fused_residual_rmsnorm_forward(res, out, rstd, x, x2, w, N, C);
    double *rres = dzeros(nc), *rres32 = dzeros(nc);
    for (size_t i = 0; i < nc; i++) { rres[i] = (double)x[i] + x2[i]; rres32[i] = (float)rres[i]; }
    ref_rmsnorm_fwd(rout, rrstd, rres32, dw, N, C);
    Err ef = cmp(res, rres, nc), eo = cmp(out, rout, nc), efr = cmp(rstd, rrstd, N);
    CHECK_ERR(ef, TIGHT_TOL, "fused_residual_rmsnorm_forward residual N=%d C=%d", N, C);
    CHECK_ERR(eo, REL_TOL, "fused_residual_rmsnorm_forward out N=%d C=%d", N, C);
    CHECK_ERR(efr, REL_TOL, "fused_residual_rmsnorm_forward rstd N=%d C=%d", N, C);
    /* backward, accumulating into random initial values */
    rmsnorm_forward(out, rstd, x, w, N, C);
    float *dout = frand(nc, 1), *gx = frand(nc, 1), *gw = frand(C, 1);
    double *rgx = todouble(gx, nc), *rgw = todouble(gw, C), *rdout = todouble(dout, nc);
    double *wgx = todouble(gx, nc), *wgw = todouble(gw, C);
    ref_rmsnorm_bwd(rgx, rgw, rdout, dx, dw, N, C);
    ref_rmsnorm_bwd_v(wgx, wgw, rdout, dx, dw, N, C, 1);
    float* scratch = (float*)dev_malloc(rmsnorm_scratch_floats(N, C) * sizeof(float), "scratch");
    rmsnorm_backward(gx, gw, scratch, dout, x, w, rstd, N, C);
    Err g1 = cmp(gx, rgx, nc), g2 = cmp(gw, rgw, C);
    CHECK_ERR(g1, REL_TOL, "rmsnorm_backward dinp (accumulated) N=%d C=%d scale=%g", N, C, scale);
    CHECK_ERR(g2, REL_TOL, "rmsnorm_backward dw (accumulated) N=%d C=%d scale=%g", N, C, scale);
    /* power: the same accumulation with the mean(dxhat xhat) term dropped is far outside the tolerance */
    Err ep = cmpd(wgx, rgx, nc);
    TEST_CHECK(ep.rel > 10 * REL_TOL, "rmsnorm_backward test tells a dropped mean(dxhat*xhat) apart (rel %.2e) N=%d C=%d",
               ep.rel, N, C);
    dev_free(x); dev_free(x2); dev_free(w); dev_free(out); dev_free(rstd); dev_free(res);
    dev_free(dout); dev_free(gx); dev_free(gw); dev_free(scratch);
    free(dx); free(dw); free(rout); free(rrstd); free(rres); free(rres32);
    free(rgx); free(rgw); free(rdout); free(wgx); free(wgw);
}

/* QK-norm (llmc/cpu/qknorm.h) against the RMSNorm reference applied to each head as a row: the q heads of all tokens
 * with qw, the k heads with kw, gathered from qkv (N, (NH + 2 NKV) hs) by the test (the definition, independent of
 * the op's indexing); v must stay untouched, pre must hold the input, and the backward overwrites d q and d k (from
 * zero in the reference) and accumulates dqw, dkw. Tolerance REL_TOL as test_rmsnorm's (rows of hs values). */
static void test_qknorm(int N, int NH, int NKV, int hs) {
    const int H = NH + NKV, R = (NH + 2 * NKV) * hs;
    const size_t nq = (size_t)N * R, rows_q = (size_t)N * NH, rows_k = (size_t)N * NKV;
    float *qkv = frand(nq, 2), *pre = frand((size_t)N * H * hs, 1), *rstd = frand((size_t)N * H, 1);
    float *qw = frand(hs, 1), *kw = frand(hs, 1), *orig = fcopy(qkv, nq);
    double *xq = dzeros(rows_q * hs), *xk = dzeros(rows_k * hs), *dqw = todouble(qw, hs), *dkw = todouble(kw, hs);
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < H; j++) {
            double* row = j < NH ? xq + ((size_t)n * NH + j) * hs : xk + ((size_t)n * NKV + j - NH) * hs;
            for (int i = 0; i < hs; i++) { row[i] = qkv[(size_t)n * R + (size_t)j * hs + i]; }
        }
    }
    double *rq = dzeros(rows_q * hs), *rk = dzeros(rows_k * hs), *rsq = dzeros(rows_q), *rsk = dzeros(rows_k);
    ref_rmsnorm_fwd(rq, rsq, xq, dqw, (int)rows_q, hs);
    ref_rmsnorm_fwd(rk, rsk, xk, dkw, (int)rows_k, hs);
    qknorm_forward(qkv, pre, rstd, qw, kw, N, NH, NKV, hs);
    double *ref = todouble(orig, nq), *refrs = dzeros((size_t)N * H);
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < H; j++) {
            const double* row = j < NH ? rq + ((size_t)n * NH + j) * hs : rk + ((size_t)n * NKV + j - NH) * hs;
            for (int i = 0; i < hs; i++) { ref[(size_t)n * R + (size_t)j * hs + i] = row[i]; }
            refrs[(size_t)n * H + j] = j < NH ? rsq[(size_t)n * NH + j] : rsk[(size_t)n * NKV + j - NH];
        }
    }
    Err e = cmp(qkv, ref, nq), er = cmp(rstd, refrs, (size_t)N * H);
    CHECK_ERR(e, REL_TOL, "qknorm_forward qkv (q, k normalised; v untouched) N=%d NH=%d NKV=%d hs=%d", N, NH, NKV, hs);
    CHECK_ERR(er, REL_TOL, "qknorm_forward rstd N=%d NH=%d NKV=%d hs=%d", N, NH, NKV, hs);
    int pre_ok = 1;
    for (int n = 0; n < N; n++) {
        for (size_t c = 0; c < (size_t)H * hs; c++) { pre_ok &= pre[(size_t)n * H * hs + c] == orig[(size_t)n * R + c]; }
    }
    TEST_CHECK(pre_ok, "qknorm_forward saves its input heads in pre (N=%d NH=%d NKV=%d hs=%d)", N, NH, NKV, hs);
    /* backward: dy random over the whole row (v's gradient must pass through untouched) */
    float *dqkv = frand(nq, 1), *gqw = frand(hs, 1), *gkw = frand(hs, 1);
    double *dyq = dzeros(rows_q * hs), *dyk = dzeros(rows_k * hs), *rgq = todouble(gqw, hs), *rgk = todouble(gkw, hs);
    double *rdq = dzeros(rows_q * hs), *rdk = dzeros(rows_k * hs), *rd = todouble(dqkv, nq);
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < H; j++) {
            double* row = j < NH ? dyq + ((size_t)n * NH + j) * hs : dyk + ((size_t)n * NKV + j - NH) * hs;
            for (int i = 0; i < hs; i++) { row[i] = dqkv[(size_t)n * R + (size_t)j * hs + i]; }
        }
    }
    ref_rmsnorm_bwd(rdq, rgq, dyq, xq, dqw, (int)rows_q, hs);
    ref_rmsnorm_bwd(rdk, rgk, dyk, xk, dkw, (int)rows_k, hs);
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < H; j++) {
            const double* row = j < NH ? rdq + ((size_t)n * NH + j) * hs : rdk + ((size_t)n * NKV + j - NH) * hs;
            for (int i = 0; i < hs; i++) { rd[(size_t)n * R + (size_t)j * hs + i] = row[i]; }
        }
    }
    float* scratch = (float*)dev_malloc((qknorm_scratch_floats(N, NH, NKV, hs) + 1) * sizeof(float), "scratch");
    qknorm_backward(dqkv, gqw, gkw, scratch, pre, qw, kw, rstd, N, NH, NKV, hs);
    Err g = cmp(dqkv, rd, nq), gq = cmp(gqw, rgq, hs), gk = cmp(gkw, rgk, hs);
    CHECK_ERR(g, REL_TOL, "qknorm_backward dqkv (q, k overwritten; v untouched) N=%d NH=%d NKV=%d hs=%d", N, NH, NKV, hs);
    CHECK_ERR(gq, REL_TOL, "qknorm_backward dqw (accumulated over the query heads) N=%d NH=%d NKV=%d hs=%d", N, NH, NKV,
              hs);
    CHECK_ERR(gk, REL_TOL, "qknorm_backward dkw (accumulated over the key heads) N=%d NH=%d NKV=%d hs=%d", N, NH, NKV,
              hs);
    dev_free(qkv); dev_free(pre); dev_free(rstd); dev_free(qw); dev_free(kw); dev_free(orig); dev_free(dqkv);
    dev_free(gqw); dev_free(gkw); dev_free(scratch);
    free(xq); free(xk); free(dqw); free(dkw); free(rq); free(rk); free(rsq); free(rsk); free(ref); free(refrs);
    free(dyq); free(dyk); free(rgq); free(rgk); free(rdq); free(rdk); free(rd);
}

static void test_matmul(int N, int C, int OC, int use_bias, int gelu) {
    float *x = frand((size_t)N * C, 1), *W = frand((size_t)OC * C, 0.5), *b = use_bias ? frand(OC, 1) : NULL;
    float *out = frand((size_t)N * OC, 1), *pre = gelu ? frand((size_t)N * OC, 1) : NULL;
    double *rx = todouble(x, (size_t)N * C), *rW = todouble(W, (size_t)OC * C), *rb = b ? todouble(b, OC) : NULL;
    double *rout = dzeros((size_t)N * OC), *rpre = dzeros((size_t)N * OC);
    matmul_forward(out, x, W, b, N, C, OC, pre);
    ref_matmul_fwd(rout, rpre, rx, rW, rb, N, C, OC, gelu);
    Err e = cmp(out, rout, (size_t)N * OC);
    CHECK_ERR(e, REL_TOL, "matmul_forward out N=%d C=%d OC=%d bias=%d gelu=%d", N, C, OC, use_bias, gelu);
    if (gelu) {
        Err ep = cmp(pre, rpre, (size_t)N * OC);
        CHECK_ERR(ep, REL_TOL, "matmul_forward pre_gelu N=%d C=%d OC=%d", N, C, OC);
    }
    float *dout = frand((size_t)N * OC, 1), *dx = frand((size_t)N * C, 1), *dW = frand((size_t)OC * C, 1);
    float* db = use_bias ? frand(OC, 1) : NULL;
    double *rdout = todouble(dout, (size_t)N * OC), *rdx = dzeros((size_t)N * C), *rdW = todouble(dW, (size_t)OC * C);
    double* rdb = db ? todouble(db, OC) : NULL;
    /* the op multiplies by gelu'(pre_gelu) of its own fp32 pre_gelu */
    double* rpre32 = gelu ? todouble(pre, (size_t)N * OC) : NULL;
    ref_matmul_bwd(rdx, rdW, rdb, rdout, rx, rW, rpre32, N, C, OC);
    float* scratch = (float*)dev_malloc(matmul_scratch_floats(N, C, OC) * sizeof(float), "scratch");
    matmul_backward(dx, dW, db, dout, x, W, scratch, N, C, OC, pre);
    Err g1 = cmp(dx, rdx, (size_t)N * C), g2 = cmp(dW, rdW, (size_t)OC * C);
    CHECK_ERR(g1, REL_TOL, "matmul_backward dinp N=%d C=%d OC=%d bias=%d gelu=%d", N, C, OC, use_bias, gelu);
    CHECK_ERR(g2, REL_TOL, "matmul_backward dweight (accumulated) N=%d C=%d OC=%d", N, C, OC);
    if (db) {
        Err g3 = cmp(db, rdb, OC);
        CHECK_ERR(g3, REL_TOL, "matmul_backward dbias (accumulated) N=%d C=%d OC=%d", N, C, OC);
    }
    dev_free(x); dev_free(W); dev_free(b); dev_free(out); dev_free(pre); dev_free(dout); dev_free(dx); dev_free(dW);
    dev_free(db); dev_free(scratch);
    free(rx); free(rW); free(rb); free(rout); free(rpre); free(rdout); free(rdx); free(rdW); free(rdb); free(rpre32);
}

/* grouped-query attention against the multi-head reference: qkv (B,T,(NH+2NKV)hs) expanded to (B,T,3C) with key/value
 * head h/g repeated for query head h (g = NH/NKV), the reference run on that, and its dk/dv summed over each group
 * (the definition of GQA, independent of the op's indexing). NKV = NH: the expansion is the identity. */
static void test_attention(int B, int T, int C, int NH, int NKV) {
    const int hs = C / NH, g = NH / NKV, R = C + 2 * NKV * hs;
    size_t rows = (size_t)B * T, nq = rows * R, nq3 = rows * 3 * C, no = rows * C, ns = attention_state_floats(B, T, NH);
    float *qkv = frand(nq, 2), *out = frand(no, 1), *state = frand(ns, 1);
    float* scratch = (float*)dev_malloc(attention_scratch_floats(B, T, C, NH, NKV) * sizeof(float), "scratch");
    double *rqkv = dzeros(nq3), *rout = dzeros(no), *rP = dzeros(ns);
    for (size_t n = 0; n < rows; n++) {
        for (int c = 0; c < C; c++) { rqkv[n * 3 * C + c] = qkv[n * R + c]; }
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < hs; i++) {
                rqkv[n * 3 * C + C + h * hs + i] = qkv[n * R + C + (h / g) * hs + i];
                rqkv[n * 3 * C + 2 * C + h * hs + i] = qkv[n * R + C + NKV * hs + (h / g) * hs + i];
            }
        }
    }
    attention_forward(out, state, scratch, qkv, B, T, C, NH, NKV);
    ref_attention_fwd(rout, rP, rqkv, B, T, C, NH);
    Err e = cmp(out, rout, no), ep = cmp(state, rP, ns);
    CHECK_ERR(e, REL_TOL, "attention_forward out B=%d T=%d C=%d NH=%d NKV=%d", B, T, C, NH, NKV);
    CHECK_ERR(ep, REL_TOL, "attention_forward state (probabilities, 0 above diagonal) B=%d T=%d NH=%d NKV=%d", B, T,
              NH, NKV);
    float *dout = frand(no, 1), *dqkv = frand(nq, 1);
    double *rdout = todouble(dout, no), *rdqkv3 = dzeros(nq3), *rdqkv = dzeros(nq);
    ref_attention_bwd(rdqkv3, rdout, rqkv, rP, B, T, C, NH);
    for (size_t n = 0; n < rows; n++) {
        for (int c = 0; c < C; c++) { rdqkv[n * R + c] = rdqkv3[n * 3 * C + c]; }
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < hs; i++) {
                rdqkv[n * R + C + (h / g) * hs + i] += rdqkv3[n * 3 * C + C + h * hs + i];
                rdqkv[n * R + C + NKV * hs + (h / g) * hs + i] += rdqkv3[n * 3 * C + 2 * C + h * hs + i];
            }
        }
    }
    attention_backward(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, NKV);
    Err gr = cmp(dqkv, rdqkv, nq);
    CHECK_ERR(gr, REL_TOL, "attention_backward dqkv (overwritten; dk, dv summed over the group) B=%d T=%d C=%d NH=%d "
              "NKV=%d", B, T, C, NH, NKV);
    dev_free(qkv); dev_free(out); dev_free(state); dev_free(scratch); dev_free(dout); dev_free(dqkv);
    free(rqkv); free(rout); free(rP); free(rdout); free(rdqkv3); free(rdqkv);
}

static void test_classifier(int N, int V, int Vp, int with_ignored) {
    size_t nv = (size_t)N * Vp;
    float* logits = frand(nv, 4);
    int* tg = (int*)malloc_check(N * sizeof(int), "targets");
    for (int i = 0; i < N; i++) { tg[i] = (int)((rnd() + 1) * 0.5 * V) % V; }
    if (with_ignored) { tg[N / 2] = -1; }
    for (size_t i = 0; i < nv; i++) { if ((int)(i % Vp) >= V) logits[i] = 100.0f; } /* padding must be ignored */
    double *rl = todouble(logits, nv), *rloss = dzeros(N), *rd = dzeros(nv);
    const double dloss = 1.0 / N;
    ref_classifier(rloss, rd, rl, tg, dloss, N, V, Vp);
    float* losses = frand(N, 1);
    float* keep = fcopy(logits, nv);
    fused_classifier(logits, losses, (float)dloss, tg, N, V, Vp, 0);
    Err el0 = cmp(losses, rloss, N);
    TEST_CHECK(memcmp(keep, logits, nv * sizeof(float)) == 0 && el0.rel <= REL_TOL,
               "fused_classifier write_dlogits=0: logits untouched, losses abs %.2e rel %.2e N=%d V=%d Vp=%d",
               el0.abs, el0.rel, N, V, Vp);
    fused_classifier(logits, losses, (float)dloss, tg, N, V, Vp, 1);
    Err el = cmp(losses, rloss, N), ed = cmp(logits, rd, nv);
    CHECK_ERR(el, REL_TOL, "fused_classifier losses N=%d V=%d Vp=%d ignored=%d", N, V, Vp, with_ignored);
    CHECK_ERR(ed, REL_TOL, "fused_classifier dlogits N=%d V=%d Vp=%d ignored=%d", N, V, Vp, with_ignored);
    int pad_zero = 1;
    for (int n = 0; n < N; n++) for (int j = (tg[n] < 0 ? 0 : V); j < Vp; j++) { pad_zero &= logits[(size_t)n * Vp + j] == 0.0f; }
    if (with_ignored) { pad_zero &= losses[N / 2] == 0.0f; }
    TEST_CHECK(pad_zero, "fused_classifier: dlogits exactly 0 in padded columns and ignored rows, loss 0 for ignored (N=%d V=%d Vp=%d)", N, V, Vp);
    dev_free(logits); dev_free(losses); dev_free(keep); free(tg); free(rl); free(rloss); free(rd);
}

/* ---- vocabulary-parallel cross-entropy (llmc/cpu/classifier.h) ----
 * One shard's three steps against double references on the same fp32 inputs: logits(N,Vs), `valid` real columns
 * (the padding holds 100, which must be ignored), targets ignored (-1), in this shard, in its padding or in another
 * shard; maxes(tp,N) with this rank's row = its row_max and random others; sums = this shard's plus a positive part
 * for the other ranks. row_max and the target logit are exact (a max, a copy). The exp sum is double with cpu_expf
 * (<= 5e-7 relative per term, see test_expf), rounded once to fp32; the loss is double from fp32 inputs, rounded
 * once; dlogits are one cpu_expf, two fp32 products and one subtraction: all within TIGHT_TOL = 1e-6. */
static void test_vocab_parallel(int N, int Vs, int valid, int v0, int tp, int rank) {
    const size_t nv = (size_t)N * Vs;
    float* logits = frand(nv, 4);
    for (int i = 0; i < N; i++) { for (int j = valid; j < Vs; j++) { logits[(size_t)i * Vs + j] = 100.0f; } }
    int* tg = (int*)malloc_check(N * sizeof(int), "targets");
    for (int i = 0; i < N; i++) {
        const int kind = i % 4;
        if (i % 5 == 3) { tg[i] = -1; }
        else if (kind <= 1 && valid > 0) { tg[i] = v0 + (int)((rnd() + 1) * 0.5 * valid) % valid; }
        else if (kind == 2 && valid < Vs) { tg[i] = v0 + valid + (int)((rnd() + 1) * 0.5 * (Vs - valid)) % (Vs - valid); }
        else { tg[i] = v0 > 0 ? v0 - 1 : v0 + Vs; }
    }
    float *row_max = frand(N, 1), *maxes = frand((size_t)tp * N, 3), *sums = frand(2 * (size_t)N, 1);
    float* losses = frand(N, 1);
    vocab_parallel_row_max(row_max, logits, N, Vs, valid);
    int max_ok = 1;
    for (int i = 0; i < N; i++) {
        double m = -FLT_MAX;
        for (int j = 0; j < valid; j++) { m = logits[(size_t)i * Vs + j] > m ? logits[(size_t)i * Vs + j] : m; }
        max_ok &= row_max[i] == (float)m;
        maxes[(size_t)rank * N + i] = row_max[i];
    }
    TEST_CHECK(max_ok, "vocab_parallel_row_max exact (N=%d Vs=%d valid=%d)%s", N, Vs, valid,
               valid == 0 ? ": -FLT_MAX for an all-padding shard" : "");
    vocab_parallel_row_sums(sums, logits, maxes, tp, tg, v0, N, Vs, valid);
    double* rs = dzeros(N);
    double* M = dzeros(N);
    int tgt_ok = 1;
    for (int i = 0; i < N; i++) {
        M[i] = maxes[i];
        for (int r = 1; r < tp; r++) { M[i] = fmax(M[i], maxes[(size_t)r * N + i]); }
        const int t = tg[i] - v0;
        if (tg[i] >= 0) { for (int j = 0; j < valid; j++) { rs[i] += exp((double)logits[(size_t)i * Vs + j] - M[i]); } }
        tgt_ok &= sums[N + i] == ((tg[i] >= 0 && t >= 0 && t < valid) ? logits[(size_t)i * Vs + t] : 0.0f);
    }
    Err es = cmp(sums, rs, N);
    CHECK_ERR(es, TIGHT_TOL, "vocab_parallel_row_sums exp sums N=%d Vs=%d valid=%d v0=%d tp=%d", N, Vs, valid, v0, tp);
    TEST_CHECK(tgt_ok, "vocab_parallel_row_sums: the target logit where the target is a real column of the shard, "
               "else 0 (N=%d Vs=%d valid=%d v0=%d)", N, Vs, valid, v0);
    for (int i = 0; i < N; i++) { /* the all-reduce: the other ranks' parts */
        if (tg[i] < 0) { continue; }
        sums[i] += 1.0f + 2.0f * (float)fabs(rnd());
        if (sums[N + i] == 0.0f) { sums[N + i] = (float)(M[i] - fabs(rnd())); }
    }
    double *rl = dzeros(N), *rd = dzeros(nv);
    const float dloss = 1.0f / N;
    for (int i = 0; i < N; i++) {
        if (tg[i] < 0) { continue; }
        const double S = sums[i];
        rl[i] = log(S) - ((double)sums[N + i] - M[i]);
        for (int j = 0; j < valid; j++) {
            rd[(size_t)i * Vs + j] = dloss * (exp((double)logits[(size_t)i * Vs + j] - M[i]) / S - (j == tg[i] - v0));
        }
    }
    float* keep = fcopy(logits, nv);
    vocab_parallel_finish(logits, losses, maxes, tp, sums, tg, v0, N, Vs, valid, dloss, 0);
    Err el0 = cmp(losses, rl, N);
    TEST_CHECK(memcmp(keep, logits, nv * sizeof(float)) == 0 && el0.rel <= TIGHT_TOL,
               "vocab_parallel_finish write_dlogits=0: logits untouched, losses abs %.2e rel %.2e", el0.abs, el0.rel);
    vocab_parallel_finish(logits, losses, maxes, tp, sums, tg, v0, N, Vs, valid, dloss, 1);
    Err el = cmp(losses, rl, N), ed = cmp(logits, rd, nv);
    CHECK_ERR(el, TIGHT_TOL, "vocab_parallel_finish losses N=%d Vs=%d valid=%d v0=%d tp=%d", N, Vs, valid, v0, tp);
    CHECK_ERR(ed, TIGHT_TOL, "vocab_parallel_finish dlogits N=%d Vs=%d valid=%d v0=%d tp=%d", N, Vs, valid, v0, tp);
    int zero = 1;
    for (int i = 0; i < N; i++) {
        for (int j = tg[i] < 0 ? 0 : valid; j < Vs; j++) { zero &= logits[(size_t)i * Vs + j] == 0.0f; }
        if (tg[i] < 0) { zero &= losses[i] == 0.0f && sums[i] == 0.0f && sums[N + i] == 0.0f; }
    }
    TEST_CHECK(zero, "vocab_parallel: padding columns and ignored rows exactly 0 (dlogits, loss, sums) "
               "(N=%d Vs=%d valid=%d)", N, Vs, valid);
    dev_free(logits); dev_free(row_max); dev_free(maxes); dev_free(sums); dev_free(losses); dev_free(keep);
    free(tg); free(rs); free(M); free(rl); free(rd);
}

/* The three steps over tp shards of one (N,Vp) logits matrix (shard r: columns [r*Vp/tp, (r+1)*Vp/tp), real up to
 * V, so the last shards hold the padding, possibly nothing else), with the all-reduces done here (maxes: each rank
 * writes its row, the rest 0, summed; sums: fp32 sum in rank order), against fused_classifier on the whole matrix.
 * Both take the same max and cpu_expf terms; fused_classifier sums them in one double and rounds once, the shards
 * round each shard's double sum to fp32 and add tp of them in fp32: S differs by at most (2tp - 1) * 2^-24
 * relative, so losses differ by that absolute (plus one rounding of the loss) and dlogits by that relative (plus
 * the fp32 roundings of dloss/S, the product and the subtraction): tp <= 4 gives < 1e-6 = TIGHT_TOL of the
 * largest element. Every rank's losses are the same bits. */
static void test_vocab_parallel_composition(int N, int V, int Vp, int tp) {
    const int Vs = Vp / tp;
    const size_t nv = (size_t)N * Vp, ns = (size_t)N * Vs;
    float* logits = frand(nv, 4);
    for (size_t k = 0; k < nv; k++) { if ((int)(k % Vp) >= V) { logits[k] = 50.0f; } } /* padding: ignored */
    int* tg = (int*)malloc_check(N * sizeof(int), "targets");
    for (int i = 0; i < N; i++) { tg[i] = (i % 7 == 4) ? -1 : (int)((rnd() + 1) * 0.5 * V) % V; }
    float *ref = fcopy(logits, nv), *ref_loss = frand(N, 1), *loss0 = frand(N, 1), *losses = frand(N, 1);
    fused_classifier(ref, ref_loss, 1.0f / N, tg, N, V, Vp, 1);
    float** shard = (float**)malloc_check(tp * sizeof(float*), "shards");
    float *maxes = frand((size_t)tp * N, 1), *part = frand((size_t)tp * N, 1), *sums = frand(2 * (size_t)N, 1);
    float* one = frand(2 * (size_t)N, 1);
    memset(maxes, 0, (size_t)tp * N * sizeof(float));
    memset(sums, 0, 2 * (size_t)N * sizeof(float));
    for (int r = 0; r < tp; r++) {
        shard[r] = frand(ns, 1);
        for (int i = 0; i < N; i++) { memcpy(shard[r] + (size_t)i * Vs, logits + (size_t)i * Vp + (size_t)r * Vs, Vs * sizeof(float)); }
        const int valid = V - r * Vs < 0 ? 0 : (V - r * Vs > Vs ? Vs : V - r * Vs);
        memset(part, 0, (size_t)tp * N * sizeof(float));
        vocab_parallel_row_max(part + (size_t)r * N, shard[r], N, Vs, valid);
        for (size_t k = 0; k < (size_t)tp * N; k++) { maxes[k] += part[k]; } /* all-reduce of one-hot rows: exact */
    }
    for (int r = 0; r < tp; r++) {
        const int valid = V - r * Vs < 0 ? 0 : (V - r * Vs > Vs ? Vs : V - r * Vs);
        vocab_parallel_row_sums(one, shard[r], maxes, tp, tg, r * Vs, N, Vs, valid);
        for (size_t k = 0; k < 2 * (size_t)N; k++) { sums[k] += one[k]; }
    }
    int same_loss = 1;
    float* dl = frand(nv, 1);
    for (int r = 0; r < tp; r++) {
        const int valid = V - r * Vs < 0 ? 0 : (V - r * Vs > Vs ? Vs : V - r * Vs);
        vocab_parallel_finish(shard[r], r == 0 ? loss0 : losses, maxes, tp, sums, tg, r * Vs, N, Vs, valid, 1.0f / N, 1);
        if (r > 0) { same_loss &= memcmp(losses, loss0, N * sizeof(float)) == 0; }
        for (int i = 0; i < N; i++) { memcpy(dl + (size_t)i * Vp + (size_t)r * Vs, shard[r] + (size_t)i * Vs, Vs * sizeof(float)); }
        dev_free(shard[r]);
    }
    double *rloss = todouble(ref_loss, N), *rd = todouble(ref, nv);
    Err el = cmp(loss0, rloss, N), ed = cmp(dl, rd, nv);
    CHECK_ERR(el, TIGHT_TOL, "vocabulary-parallel losses over tp=%d shards == fused_classifier (N=%d V=%d Vp=%d)", tp, N, V, Vp);
    CHECK_ERR(ed, TIGHT_TOL, "vocabulary-parallel dlogits over tp=%d shards == fused_classifier (N=%d V=%d Vp=%d)", tp, N, V, Vp);
    TEST_CHECK(same_loss, "vocabulary-parallel losses: the same bits on every one of the %d ranks", tp);
    dev_free(logits); dev_free(ref); dev_free(ref_loss); dev_free(loss0); dev_free(losses); dev_free(maxes);
    dev_free(part); dev_free(sums); dev_free(one); dev_free(dl); free(shard); free(tg); free(rloss); free(rd);
}

/* --cpu-matmul bf16 (llmc/cpu/matmul_bf16.h) through cpu_sgemm_rows (the threaded entry of every layer matmul):
 * C(M,N) = op(A) op(B) + beta C against a double reference, element by element, for one transpose combination.
 * bf16_exact = 1: the inputs are bf16 numbers already (low 16 bits cleared), so only the fp32 sums round:
 * |err| <= K 2^-24 sum_k |a b|, and any packing or indexing mistake is an O(1) error; 0: random fp32 inputs, the
 * bound adds bf16's rounding of both operands (unit roundoff 2^-8 each: 8 significant bits, half an ulp is 2^-8 of
 * a value at the bottom of its binade): |err| <= (2^-7 + 2^-16 + K 2^-24) sum_k |a b|. (It said 2^-9 per operand
 * until a = 0.63176, b = -0.29202 came up: b rounds by 0.32%, 1.7x 2^-9, as round to nearest even must.)
 * beta == 0 with C filled with NaN checks that C is not read. */
static void test_bf16gemm(int M, int N, int K, int transA, int transB, float beta, int bf16_exact) {
    float *A = frand((size_t)M * K, 1), *B = frand((size_t)K * N, 1), *Cm = frand((size_t)M * N, 1);
    if (bf16_exact) {
        for (size_t i = 0; i < (size_t)M * K; i++) { uint32_t u; memcpy(&u, &A[i], 4); u &= 0xffff0000u; memcpy(&A[i], &u, 4); }
        for (size_t i = 0; i < (size_t)K * N; i++) { uint32_t u; memcpy(&u, &B[i], 4); u &= 0xffff0000u; memcpy(&B[i], &u, 4); }
    }
    if (beta == 0.0f) { for (size_t i = 0; i < (size_t)M * N; i++) { Cm[i] = NAN; } }
    const int lda = transA ? M : K, ldb = transB ? K : N;
    double worst = 0.0; /* max over elements of |err| / bound */
    float* C0 = fcopy(Cm, (size_t)M * N);
    cpu_set_matmul_bf16(1);
    cpu_sgemm_rows(transA, transB, M, N, K, A, lda, B, ldb, beta, Cm, N);
    cpu_set_matmul_bf16(0);
    const double tol = bf16_exact ? K * 0x1p-24 : 0x1p-7 + 0x1p-16 + K * 0x1p-24;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double ref = beta == 0.0f ? 0.0 : (double)beta * C0[(size_t)i * N + j], mag = 0.0;
            for (int k = 0; k < K; k++) {
                const double a = transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                const double b = transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                ref += a * b;
                mag += fabs(a * b);
            }
            const double err = fabs(Cm[(size_t)i * N + j] - ref), bound = tol * mag + 1e-30;
            if (!(err <= bound)) { worst = INFINITY; } else if (err / bound > worst) { worst = err / bound; }
        }
    }
    TEST_CHECK(worst <= 1.0, "cpu_sgemm_rows --cpu-matmul bf16 M=%d N=%d K=%d transA=%d transB=%d beta=%g %s: "
               "max |err| / bound %.3f (bound %.2e * sum|a b|)", M, N, K, transA, transB, beta,
               bf16_exact ? "bf16 inputs" : "fp32 inputs", worst, tol);
    dev_free(A); dev_free(B); dev_free(Cm); dev_free(C0);
}

/* --cpu-matmul auto (llmc/cpu/matmul_auto.h): the probe's shape stays within the FLOP budget and the model's shape,
 * the timing is positive and leaves the selected path as it was, and the pick rule takes bf16 only when every process
 * has it and its summed time is smaller (a tie keeps fp32, the reference) */
static void test_matmul_auto(void) {
    int rows, oc;
    cpu_matmul_auto_shape(1024, 256, 1024, &rows, &oc);
    TEST_CHECK(rows == 1024 && oc == 1024, "auto probe d4 B16 T64: the whole (1024x256)x(256x1024) GEMM, got %dx%d", rows, oc);
    cpu_matmul_auto_shape(65536, 768, 3072, &rows, &oc);
    TEST_CHECK(rows == 423 && oc == 3072 && 2.0 * rows * 768 * oc <= CPU_MATMUL_AUTO_FLOPS,
               "auto probe d12 B64 T1024: rows cut to the 2 GFLOP budget (423), all 3072 columns, got %dx%d", rows, oc);
    cpu_matmul_auto_shape(64, 12288, 49152, &rows, &oc);
    TEST_CHECK(rows == 64 && oc % 16 == 0 && oc >= 16 && 2.0 * rows * 12288 * oc <= CPU_MATMUL_AUTO_FLOPS,
               "auto probe C=12288: 64 rows, columns cut to the budget in multiples of 16, got %dx%d", rows, oc);
    cpu_matmul_auto_shape(10, 128, 512, &rows, &oc);
    TEST_CHECK(rows == 10 && oc == 512, "auto probe below 64 rows: the model's 10 rows, got %dx%d", rows, oc);
    int before = cpu_matmul_bf16_on;
    double ms = cpu_matmul_time_ms(0, 64, 128, 512);
    TEST_CHECK(ms > 0 && ms < 1e4 && cpu_matmul_bf16_on == before, "auto probe time %.3f ms > 0, the path left as it was", ms);
    TEST_CHECK(cpu_matmul_auto_pick_bf16(10.0, 8.0, 2, 2) == 1, "auto pick: bf16 when every process has it and it is faster");
    TEST_CHECK(cpu_matmul_auto_pick_bf16(10.0, 12.0, 2, 2) == 0, "auto pick: fp32 when it is faster");
    TEST_CHECK(cpu_matmul_auto_pick_bf16(10.0, 10.0, 1, 1) == 0, "auto pick: fp32 on a tie");
    TEST_CHECK(cpu_matmul_auto_pick_bf16(10.0, 4.0, 1, 2) == 0, "auto pick: fp32 when a process has no AVX512_BF16");
}

static void test_elementwise(size_t n) {
    float *x = frand(n, 3), *y = frand(n, 1), *out = frand(n, 1), *d = frand(n, 1);
    double *r = dzeros(n), *rd = dzeros(n);
    gelu_forward(out, x, n);
    for (size_t i = 0; i < n; i++) { r[i] = ref_gelu(x[i]); rd[i] = d[i] * ref_gelu_grad(x[i]); }
    Err e = cmp(out, r, n);
    /* tanh_vec (llmc/cpu/gelu.h) is accurate to a few ulp; the tanh-gelu is well conditioned for |x| <= 3 */
    CHECK_ERR(e, TIGHT_TOL, "gelu_forward n=%zu", n);
    gelu_backward_inplace(d, x, n);
    Err eb = cmp(d, rd, n);
    CHECK_ERR(eb, TIGHT_TOL, "gelu_backward_inplace n=%zu", n);
    residual_forward(out, x, y, n);
    for (size_t i = 0; i < n; i++) { r[i] = (double)x[i] + y[i]; }
    Err er = cmp(out, r, n);
    CHECK_ERR(er, TIGHT_TOL, "residual_forward n=%zu", n);
    scale_floats(out, 0.25f, n);
    for (size_t i = 0; i < n; i++) { r[i] = (double)(float)r[i] * 0.25; }
    Err es = cmp(out, r, n);
    TEST_CHECK(es.abs == 0.0, "scale_floats by 0.25 exact: abs %.2e", es.abs);
    dev_free(x); dev_free(y); dev_free(out); dev_free(d); free(r); free(rd);
}

/* SwiGLU's CPU twin (llmc/cpu/gelu.h) against the double reference. Gates uniform in [-gscale, gscale), ups in
 * [-2, 2), dout in [-1, 1); with `extremes` the first row's gates are +-100, +-90, +-30, +-20, 0 (sigmoid saturated).
 * Tolerances, from the fp32 arithmetic (u = 2^-24):
 *   out and dup = g s u: s = 1 / (1 + cpu_expf(-g)) errs by (1 - s) 5e-7 (test_expf's bound on cpu_expf) plus two
 *   roundings; the two products add two more: under 5e-7 + 4u = 7.4e-7 relative per element: TIGHT_TOL (1e-6).
 *   dgate = (d u) s (1 + g (1 - s)): besides s's relative error (times |1 + g (1 - 2s)| s (1 - s) + s <= 1.5), the
 *   rounding of s near 1 (half an ulp of 1, u) becomes an absolute error of 1 - s, times |g|; for |g| > 17 s is 1 in
 *   fp32 and 1 - s = 0 against a true value below 1e-7 / |g|, so |g| (error of 1 - s) <= 17 u everywhere. In all
 *   <= 1.5 * 7.4e-7 + 17 u + 4u = 2.4e-6 of silu's derivative (scale ~1), relative to max |ref| = max |d u silu'|
 *   (silu' reaches 1.1): SWIGLU_DGATE_TOL = 4e-6.
 * What each check catches: gate and up halves swapped (out = silu(u) g: errors of order |out|); silu' without its
 * g (1 - s) part (dgate = d u s: wrong by d u s g (1 - s), up to 0.22 |d u| at g = 2.4); dgate and dup written to
 * each other's half; the row stride F instead of 2F. Saturation: at g = +-100 cpu_expf is clamped (llmc/cpu/backend.h)
 * and every output must be finite and match the limits silu(100) = 100, silu'(100) = 1, silu(-100) = silu'(-100) = 0
 * (the absolute errors, < 1e-30, vanish against max |ref|). */
#define SWIGLU_DGATE_TOL 4e-6
static void test_swiglu(int N, int F, double gscale, int extremes) {
    size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
    float *inp = frand(ni, 2), *dout = frand(no, 1), *out = frand(no, 1), *dinp = frand(ni, 1);
    for (int n = 0; n < N; n++) {
        for (int f = 0; f < F; f++) { inp[(size_t)n * 2 * F + f] = (float)(gscale * rnd()); }
    }
    if (extremes) {
        const float big[] = {100.0f, -100.0f, 90.0f, -90.0f, 30.0f, -30.0f, 20.0f, -20.0f, 0.0f};
        for (int k = 0; k < 9 && k < F; k++) { inp[k] = big[k]; }
    }
    double *rx = todouble(inp, ni), *rd = todouble(dout, no), *r = dzeros(no), *rdi = dzeros(ni);
    ref_swiglu_fwd(r, rx, N, F);
    ref_swiglu_bwd(rdi, rd, rx, N, F);
    swiglu_forward(out, inp, N, F);
    swiglu_backward(dinp, dout, inp, N, F);
    Err e = cmp(out, r, no);
    CHECK_ERR(e, TIGHT_TOL, "swiglu_forward N=%d F=%d |g|<%g%s", N, F, gscale, extremes ? " +-100" : "");
    /* the two halves of each dinp row, separately (a bug in one half must not hide behind the other's scale) */
    float* gg = (float*)malloc_check(no * sizeof(float), "test");
    float* gu = (float*)malloc_check(no * sizeof(float), "test");
    double* rg = dzeros(no);
    double* ru = dzeros(no);
    for (int n = 0; n < N; n++) {
        for (int f = 0; f < F; f++) {
            size_t o = (size_t)n * F + f, i = (size_t)n * 2 * F + f;
            gg[o] = dinp[i]; gu[o] = dinp[i + F]; rg[o] = rdi[i]; ru[o] = rdi[i + F];
        }
    }
    Err eg = cmp(gg, rg, no), eu = cmp(gu, ru, no);
    CHECK_ERR(eg, SWIGLU_DGATE_TOL, "swiglu_backward dgate N=%d F=%d |g|<%g%s", N, F, gscale, extremes ? " +-100" : "");
    CHECK_ERR(eu, TIGHT_TOL, "swiglu_backward dup N=%d F=%d |g|<%g%s", N, F, gscale, extremes ? " +-100" : "");
    if (extremes) {
        int finite = 1;
        for (size_t i = 0; i < no; i++) { finite &= isfinite(out[i]) != 0; }
        for (size_t i = 0; i < ni; i++) { finite &= isfinite(dinp[i]) != 0; }
        const float u0 = inp[F], d0 = dout[0];
        int limits = F < 2 || (out[0] == 100.0f * u0 && gu[0] == d0 * 100.0f && gg[0] == d0 * u0 &&
                               fabsf(out[1]) < 1e-30f && fabsf(gg[1]) < 1e-30f && fabsf(gu[1]) < 1e-30f);
        TEST_CHECK(finite && limits, "swiglu N=%d F=%d: gates of +-100, +-90, +-30, +-20: finite, and at +-100 the "
                   "limits silu = g or 0, silu' = 1 or 0 (finite %d, limits %d)", N, F, finite, limits);
    }
    free(gg); free(gu); free(rg); free(ru);
    dev_free(inp); dev_free(dout); dev_free(out); dev_free(dinp); free(rx); free(rd); free(r); free(rdi);
}

/* ReLU^2's CPU twin against double: r = max(x, 0) is exact, r r and d (2r) one rounding each (2r is exact), so
 * <= u = 6e-8 relative per element; tolerance 2u. Catches: the factor 2 missing in the backward (an error of 50%),
 * relu instead of relu^2 (out = x), the negative side not zeroed. Also in place (out = inp). */
static void test_relu2(size_t n) {
    float *x = frand(n, 3), *out = frand(n, 1), *d = frand(n, 1);
    double *r = dzeros(n), *rd = dzeros(n);
    for (size_t i = 0; i < n; i++) { r[i] = ref_relu2(x[i]); rd[i] = d[i] * ref_relu2_grad(x[i]); }
    relu2_forward(out, x, n);
    Err e = cmp(out, r, n);
    CHECK_ERR(e, 2.0 / 16777216.0, "relu2_forward n=%zu", n);
    relu2_backward_inplace(d, x, n);
    Err eb = cmp(d, rd, n);
    CHECK_ERR(eb, 2.0 / 16777216.0, "relu2_backward_inplace n=%zu", n);
    relu2_forward(x, x, n);
    Err ei = cmp(x, r, n);
    CHECK_ERR(ei, 2.0 / 16777216.0, "relu2_forward in place n=%zu", n);
    dev_free(x); dev_free(out); dev_free(d); free(r); free(rd);
}

/* cpu_expf (vectorisable exp used by softmax and the classifier) vs double exp:
 * a degree-7 polynomial (truncation < 5e-9) plus ~4 fp32 roundings gives a few
 * ulp, so 5e-7 relative (about 8 ulp) is the bound; a wrong coefficient or
 * exponent scaling gives errors >= 1e-4. */
static void test_expf(void) {
    double worst = 0, worst_x = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + (float)i * (175.0f / 2000000.0f);
        double ref = exp((double)x), rel = fabs(cpu_expf(x) - ref) / ref;
        if (rel > worst) { worst = rel; worst_x = x; }
    }
    TEST_CHECK(worst <= 5e-7 && cpu_expf(0.0f) == 1.0f,
               "cpu_expf on [-87, 88] (2M points): max rel err %.2e at x=%.4f; exp(0) == 1", worst, worst_x);
}

static void test_norm_and_checks(size_t n) {
    float* g = frand(n, 1);
    double ref = 0;
    for (size_t i = 0; i < n; i++) { ref += (double)g[i] * g[i]; }
    float out = 123.0f;
    global_norm_squared(&out, g, n, 0);
    double rel = fabs(out - ref) / (ref > 0 ? ref : 1);
    /* double accumulation: only the final fp32 rounding, ~u */
    TEST_CHECK(rel <= TIGHT_TOL, "global_norm_squared n=%zu: rel %.2e", n, rel);
    float acc = 5.0f;
    global_norm_squared(&acc, g, n, 1);
    double rel2 = fabs(acc - (ref + 5.0)) / (ref + 5.0);
    TEST_CHECK(rel2 <= TIGHT_TOL, "global_norm_squared accumulate=1 n=%zu: rel %.2e", n, rel2);
    TEST_CHECK(has_inf_or_nan(g, n) == 0, "has_inf_or_nan = 0 on finite data n=%zu", n);
    if (n > 0) {
        float keep = g[n - 1];
        g[n - 1] = NAN; int a = has_inf_or_nan(g, n);
        g[n - 1] = -INFINITY; int b = has_inf_or_nan(g, n);
        g[n - 1] = keep;
        TEST_CHECK(a == 1 && b == 1, "has_inf_or_nan detects NaN and -inf at the last element n=%zu", n);
    }
    dev_free(g);
}

static void test_adamw(int use_master) {
    const size_t n = 1003;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *p = frand(n, 1), *m = (float*)dev_malloc(n * 4, "m"), *v = (float*)dev_malloc(n * 4, "v");
    float* master = use_master ? fcopy(p, n) : NULL;
    double *rp = todouble(p, n), *rm = dzeros(n), *rv = dzeros(n);
    float* g = frand(n, 1);
    double worst = 0;
    for (int t = 1; t <= 5; t++) {
        for (size_t i = 0; i < n; i++) { g[i] = (float)rnd(); }
        adamw_update(p, master, g, m, v, n, 0, lr, b1, b2, eps, wd, gs, t, 42u);
        for (size_t i = 0; i < n; i++) { /* hand-written torch.optim.AdamW step in double */
            double gg = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * gg;
            rv[i] = b2 * rv[i] + (1 - (double)b2) * gg * gg;
            double mh = rm[i] / (1 - pow(b1, t)), vh = rv[i] / (1 - pow(b2, t));
            rp[i] = rp[i] * (1 - (double)lr * wd) - lr * mh / (sqrt(vh) + eps);
        }
        Err e = cmp(p, rp, n);
        if (e.rel > worst) { worst = e.rel; }
    }
    int same = !use_master || memcmp(p, master, n * sizeof(float)) == 0;
    { /* vectorised and scalar paths give bit-identical elements: whole array vs one element per call */
        float *p2 = fcopy(p, n), *m2 = fcopy(m, n), *v2 = fcopy(v, n);
        adamw_update(p, master, g, m, v, n, 0, lr, b1, b2, eps, wd, gs, 6, 42u);
        for (size_t i = 0; i < n; i++) {
            adamw_update(p2 + i, NULL, g + i, m2 + i, v2 + i, 1, i, lr, b1, b2, eps, wd, gs, 6, 42u);
        }
        int bit = memcmp(p, p2, n * 4) == 0 && memcmp(m, m2, n * 4) == 0 && memcmp(v, v2, n * 4) == 0;
        TEST_CHECK(bit, "adamw_update: whole-array (vector) and element-by-element (scalar) updates bit-identical (master=%s)",
                   use_master ? "yes" : "NULL");
        dev_free(p2); dev_free(m2); dev_free(v2);
    }
    /* each step adds a few fp32 roundings to p (|p| ~ 1, update ~ lr): ~1e-7 per step */
    TEST_CHECK(worst <= TIGHT_TOL && same, "adamw_update 5 steps (wd=0.1, grad_scale=0.5, master=%s) vs double: worst rel %.2e",
               use_master ? "yes, params == master" : "NULL", worst);
    dev_free(p); dev_free(m); dev_free(v); dev_free(master); dev_free(g); free(rp); free(rm); free(rv);
}

/* ---------------------------------------------------------------- rotary position embedding (llmc/cpu/rope.h) */
/* Rotary position embedding (Su et al. 2021), "rotate_half" pairing (i, i + hs/2), checked against a double
 * reference written here independently of llmc/rope_table.h: the frequency in the mask form of Hugging Face's
 * llama3 scaling (scaled where wavelen > L/low, smoothed where neither wavelen < L/high nor wavelen > L/low), the
 * angle and its cos/sin in double.
 * Tolerances (u = 2^-24, the fp32 unit roundoff; M = max |x| of the input):
 *   table entry: computed in double, rounded once: |err| <= u (values <= 1) plus the angle's double rounding
 *     (t f 2^-53 < 1e-12 for t < 10^4): tol u.
 *   forward / backward vs double: out = fl(fl(a c') -+ fl(b s')) with c', s' the fp32 table (|c' - c| <= u|c|): the
 *     error is <= 2u|a c| + 2u|b s| + u|out| <= 2u (|a| + |b|) + u sqrt(2) M <= 5.5 u M: tol 6 u M. An interleaved
 *     pairing (2i, 2i+1), a wrong sign, a wrong position (pos0 ignored, the row index n instead of t = n % T) or a
 *     wrong frequency gives errors of order M.
 *   backward(forward(x)) = x: the forward's error (5.5 u M per element, at most sqrt(2) times that per pair after
 *     the backward's rotation, which preserves pair norms), the backward's own (5.5 u sqrt(2) M: its inputs are up
 *     to sqrt(2) M) and the table's non-orthogonality (|c'^2 + s'^2 - 1| <= 2u: 2u sqrt(2) M): 18.4 u M: tol 24 u M.
 *     Catches a backward that rotates by +angle (the forward again) or swaps the roles of the pair.
 *   <rope(x), y> = <x, rope_backward(y)> (the backward is the forward's transpose, what autograd needs): both sides
 *     summed in double from fp32 results, so they differ by at most sum |y| 5.5 u M_x + sum |x| 5.5 u M_y: tol
 *     6 u (M_x sum|y| + M_y sum|x|); a backward that is not the transpose misses by O(sqrt(n)) on random data.
 *   value heads: bit for bit unchanged (no arithmetic touches them); with KV < NH this also catches rotating NH
 *     key heads (the extra ones are value heads). */
#define ROPE_U (1.0 / 16777216.0)
static double ref_rope_freq(int i, int hs, double theta, const RopeScaling* s) {
    const double f = 1.0 / pow(theta, (double)(2 * i) / (double)hs);
    if (s == NULL || s->factor == 0.0f) { return f; }
    const double L = s->original_max_pos, wavelen = 2.0 * M_PI / f;
    const double scaled = wavelen > L / s->low_freq_factor ? f / s->factor : f;
    const double sm = (L / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    const int medium = !(wavelen < L / s->high_freq_factor) && !(wavelen > L / s->low_freq_factor);
    return medium ? (1.0 - sm) * scaled / s->factor + sm * scaled : scaled;
}
/* x(B,T,(NH+2KV)*hs) in place, double, rotation by sign * angle of the q and k heads */
static void ref_rope(double* x, int B, int T, int NH, int KV, int hs, int pos0, double theta, const RopeScaling* s,
                     double sign) {
    const int half = hs / 2, row = (NH + 2 * KV) * hs;
    for (int n = 0; n < B * T; n++) {
        for (int h = 0; h < NH + KV; h++) {
            double* v = x + (size_t)n * row + (size_t)h * hs;
            for (int i = 0; i < half; i++) {
                const double ang = (double)(pos0 + n % T) * ref_rope_freq(i, hs, theta, s);
                const double c = cos(ang), sn = sign * sin(ang), a = v[i], b = v[i + half];
                v[i] = a * c - b * sn;
                v[i + half] = b * c + a * sn;
            }
        }
    }
}
static double fmaxabs(const float* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) { m = fabs(x[i]) > m ? fabs(x[i]) : m; }
    return m;
}

/* the table against cos/sin of the reference angle, and pinned Llama-3 frequencies (independent of both formulas) */
static void test_rope_table(void) {
    const RopeScaling l3 = {8.0f, 1.0f, 4.0f, 8192}; /* Llama 3.1 */
    const int maxT = 4100, hs = 128, half = hs / 2;
    float* tab = (float*)malloc_check((size_t)maxT * hs * sizeof(float), "test");
    for (int sc = 0; sc < 2; sc++) {
        const double theta = sc ? 500000.0 : 10000.0;
        rope_table(tab, maxT, hs, (float)theta, sc ? &l3 : NULL);
        double worst = 0.0;
        for (int t = 0; t < maxT; t++) {
            for (int i = 0; i < half; i++) {
                const double a = (double)t * ref_rope_freq(i, hs, theta, sc ? &l3 : NULL);
                const float* e = tab + ((size_t)t * half + i) * 2;
                const double d = fmax(fabs(e[0] - cos(a)), fabs(e[1] - sin(a)));
                worst = d > worst || d != d ? d : worst;
            }
        }
        TEST_CHECK(worst <= ROPE_U, "rope_table maxT=%d hs=%d theta=%g %s: max |table - cos/sin(double)| %.2e "
                   "(tol 2^-24)", maxT, hs, theta, sc ? "llama3 (8, 1, 4, 8192)" : "unscaled", worst);
    }
    /* Llama 3.1 at hs = 128: wavelen 2 pi 500000^(i/64) is < 2048 for i <= 28 (unchanged), > 8192 for i >= 35
     * (divided by 8), in between smoothed strictly between the two */
    const double f20 = pow(500000.0, -20.0 / 64.0), f31 = pow(500000.0, -31.0 / 64.0), f50 = pow(500000.0, -50.0 / 64.0);
    const double g20 = rope_inv_freq(20, hs, 500000.0, &l3), g31 = rope_inv_freq(31, hs, 500000.0, &l3),
                 g50 = rope_inv_freq(50, hs, 500000.0, &l3), g0 = rope_inv_freq(0, hs, 500000.0, &l3);
    TEST_CHECK(fabs(g0 - 1.0) <= 1e-15 && fabs(g20 / f20 - 1.0) <= 1e-14 && fabs(g50 / (f50 / 8.0) - 1.0) <= 1e-14 &&
               g31 > f31 / 8.0 * (1.0 + 1e-3) && g31 < f31 * (1.0 - 1e-3),
               "rope_inv_freq llama3: i=0 -> 1, i=20 unchanged, i=50 divided by 8, i=31 smoothed in between "
               "(%.6g %.6g %.6g %.6g)", g0, g20 / f20, g50 / f50, g31 / f31);
    const double s31 = (8192.0 * f31 / (2.0 * M_PI) - 1.0) / 3.0;
    TEST_CHECK(fabs(g31 / (f31 * ((1.0 - s31) / 8.0 + s31)) - 1.0) <= 1e-14,
               "rope_inv_freq llama3 i=31: (1 - s) f/8 + s f with s = (8192/wavelen - 1)/3 = %.4f", s31);
    free(tab);
}

static void test_rope(int B, int T, int NH, int KV, int hs, int pos0, int llama3) {
    const RopeScaling l3 = {8.0f, 1.0f, 4.0f, 8192};
    const RopeScaling* sc = llama3 ? &l3 : NULL;
    const double theta = llama3 ? 500000.0 : 10000.0;
    const int maxT = pos0 + T, row = (NH + 2 * KV) * hs;
    const size_t n = (size_t)B * T * row;
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d KV=%d hs=%d pos0=%d%s", B, T, NH, KV, hs, pos0,
             llama3 ? " llama3" : "");
    float* tab = (float*)dev_malloc((size_t)maxT * hs * sizeof(float), "test");
    rope_table(tab, maxT, hs, (float)theta, sc); /* CPU: device memory is host memory */
    float* x = frand(n, 2.0);
    float* y = frand(n, 1.5);
    const double Mx = fmaxabs(x, n), My = fmaxabs(y, n);
    /* forward vs double, value heads untouched */
    float* fx = fcopy(x, n);
    rope_forward(fx, tab, B, T, NH, KV, hs, pos0);
    double* ref = todouble(x, n);
    ref_rope(ref, B, T, NH, KV, hs, pos0, theta, sc, 1.0);
    Err ef = cmp(fx, ref, n);
    TEST_CHECK(ef.abs <= 6 * ROPE_U * Mx, "rope_forward vs double %s: abs %.2e (tol 6u max|x| = %.2e)", shape, ef.abs,
               6 * ROPE_U * Mx);
    int vsame = 1;
    for (int r = 0; r < B * T; r++) {
        const size_t v0 = (size_t)r * row + (size_t)(NH + KV) * hs;
        vsame &= memcmp(fx + v0, x + v0, (size_t)KV * hs * sizeof(float)) == 0;
    }
    TEST_CHECK(vsame, "rope_forward %s: value heads bit for bit unchanged", shape);
    /* backward vs double */
    float* gy = fcopy(y, n);
    rope_backward(gy, tab, B, T, NH, KV, hs, pos0);
    double* refb = todouble(y, n);
    ref_rope(refb, B, T, NH, KV, hs, pos0, theta, sc, -1.0);
    Err eb = cmp(gy, refb, n);
    TEST_CHECK(eb.abs <= 6 * ROPE_U * My, "rope_backward vs double (rotation by -angle) %s: abs %.2e (tol %.2e)", shape,
               eb.abs, 6 * ROPE_U * My);
    /* backward(forward(x)) = x */
    float* inv = fcopy(fx, n);
    rope_backward(inv, tab, B, T, NH, KV, hs, pos0);
    double* xd = todouble(x, n);
    Err ei = cmp(inv, xd, n);
    TEST_CHECK(ei.abs <= 24 * ROPE_U * Mx, "rope_backward(rope_forward(x)) = x %s: abs %.2e (tol 24u max|x| = %.2e)",
               shape, ei.abs, 24 * ROPE_U * Mx);
    /* <rope(x), y> = <x, rope_backward(y)> */
    double l = 0.0, r = 0.0, sx = 0.0, sy = 0.0;
    for (size_t i = 0; i < n; i++) {
        l += (double)fx[i] * y[i];
        r += (double)x[i] * gy[i];
        sx += fabs(x[i]);
        sy += fabs(y[i]);
    }
    const double tadj = 6 * ROPE_U * (Mx * sy + My * sx);
    TEST_CHECK(fabs(l - r) <= tadj, "<rope(x), y> = <x, rope_backward(y)> %s: %.9g vs %.9g, diff %.2e (tol %.2e)", shape,
               l, r, fabs(l - r), tadj);
    dev_free(tab); dev_free(x); dev_free(y); dev_free(fx); dev_free(gy); dev_free(inv);
    free(ref); free(refb); free(xd);
}

/* runs a chain of ops that contain reductions on fresh copies of the same inputs; returns a hash */
static uint64_t run_chain(int B, int T, int C, int NH, int Vp) {
    uint64_t saved = rng_state;
    rng_state = 1234567;
    int N = B * T; size_t nc = (size_t)N * C, nq = nc * 3;
    int* inp = (int*)malloc_check(N * sizeof(int), "inp");
    for (int i = 0; i < N; i++) { inp[i] = (int)((rnd() + 1) * 0.5 * 7) % 7; } /* many repeats */
    float *wte = frand((size_t)Vp * C, 1), *wpe = frand((size_t)T * C, 1), *x = frand(nc, 1);
    float *W = frand((size_t)3 * C * C, 0.1), *bias = frand(3 * C, 1), *qkv = frand(nq, 1);
    float *att = frand(nc, 1), *state = frand(attention_state_floats(B, T, NH), 1);
    float* scr = (float*)dev_malloc(attention_scratch_floats(B, T, C, NH, NH) * 4, "s");
    float *dqkv = frand(nq, 1), *dx = frand(nc, 1), *dW = frand((size_t)3 * C * C, 1), *db = frand(3 * C, 1);
    float *mean = frand(N, 1), *rstd = frand(N, 1), *lnw = frand(C, 1), *lnb = frand(C, 1), *ln = frand(nc, 1);
    float *dwte = frand((size_t)Vp * C, 1), *dwpe = frand((size_t)T * C, 1), *dlnw = frand(C, 1), *dlnb = frand(C, 1);
    float *dln = frand(nc, 1), norm = 0;
    encoder_forward(x, inp, wte, wpe, B, T, C);
    layernorm_forward(ln, mean, rstd, x, lnw, lnb, N, C);
    matmul_forward(qkv, ln, W, bias, N, C, 3 * C, NULL);
    attention_forward(att, state, scr, qkv, B, T, C, NH, NH);
    attention_backward(dqkv, scr, att, qkv, att, state, B, T, C, NH, NH);
    matmul_backward(dln, dW, db, dqkv, ln, W, NULL, N, C, 3 * C, NULL);
    layernorm_backward(dx, dlnw, dlnb, NULL, dln, x, lnw, mean, rstd, N, C);
    encoder_backward(dwte, dwpe, dx, inp, inp, B, T, C);
    global_norm_squared(&norm, dW, (size_t)3 * C * C, 0);
    uint64_t h = 14695981039346656037ULL;
    h = fnv1a64(h, att, nc * 4); h = fnv1a64(h, dqkv, nq * 4); h = fnv1a64(h, dW, (size_t)3 * C * C * 4);
    h = fnv1a64(h, db, 3 * C * 4); h = fnv1a64(h, dx, nc * 4); h = fnv1a64(h, dlnw, C * 4);
    h = fnv1a64(h, dwte, (size_t)Vp * C * 4); h = fnv1a64(h, dwpe, (size_t)T * C * 4); h = fnv1a64(h, &norm, 4);
    free(inp);
    float* bufs[] = {wte, wpe, x, W, bias, qkv, att, state, scr, dqkv, dx, dW, db, mean, rstd, lnw, lnb, ln,
                     dwte, dwpe, dlnw, dlnb, dln};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) { dev_free(bufs[i]); }
    rng_state = saved;
    return h;
}

/* mixture-of-experts routing (llmc/cpu/moe.h) at awkward shapes, against hand-worked expectations: E = 5 (not a
 * power of two), k = 2, N = 6 tokens, capacity 2; expert 3 receives no token, token 2 has both choices dropped,
 * first choices are served before second choices. Then the gate-weighted combine and both backward permutations
 * against double references (a dropped token gets exactly 0), the statistics, and the router's tie rule (all
 * logits equal: experts 0 and 1, gates 1/2). The router's gradients are checked against PyTorch in test_gpt. */
static void test_moe_routing(void) {
    enum { N = 6, E = 5, K = 2, C = 3, CAP = 2 };
    const int choice[N * K] = {0, 1, 0, 2, 0, 1, 1, 4, 4, 0, 2, 0};
    const int want_row[N * K] = {0, 3, 1, 5, -1, -1, 2, 7, 6, -1, 4, -1};
    const int want_plan[3 * E] = {5, 3, 2, 0, 2, /* kept */ 2, 2, 2, 0, 2, /* offsets */ 0, 2, 4, 6, 6};
    int row[N * K], plan[3 * E];
    moe_dispatch_plan(row, plan, choice, N, E, K, CAP);
    TEST_CHECK(memcmp(row, want_row, sizeof(row)) == 0 && memcmp(plan, want_plan, sizeof(plan)) == 0,
               "moe_dispatch_plan E=5 k=2 cap=2: rows, routed/kept counts and offsets as worked by hand (expert 3 "
               "empty, token 2 fully dropped, first choices served first)");
    int R = 8;
    float* x = frand((size_t)N * C, 1.0);
    float* out = frand((size_t)R * C, 1.0);
    float* gate = frand((size_t)N * K, 1.0);
    float* dy = frand((size_t)N * C, 1.0);
    float* xe = (float*)dev_malloc((size_t)R * C * sizeof(float), "test");
    float* y = (float*)dev_malloc((size_t)N * C * sizeof(float), "test");
    float* dout = (float*)dev_malloc((size_t)R * C * sizeof(float), "test");
    float* dgate = (float*)dev_malloc((size_t)N * K * sizeof(float), "test");
    float* dx = (float*)dev_malloc((size_t)N * C * sizeof(float), "test");
    moe_permute(xe, x, row, N, C, K);
    moe_combine(y, out, row, gate, N, C, K);
    moe_combine_backward(dout, dgate, dy, out, row, gate, N, C, K);
    moe_permute_backward(dx, out, row, N, C, K);
    double *rxe = dzeros((size_t)R * C), *ry = dzeros((size_t)N * C), *rdout = dzeros((size_t)R * C);
    double *rdgate = dzeros((size_t)N * K), *rdx = dzeros((size_t)N * C);
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < K; j++) {
            int r = want_row[n * K + j];
            if (r < 0) { continue; }
            for (int c = 0; c < C; c++) {
                rxe[r * C + c] = x[n * C + c];
                ry[n * C + c] += (double)gate[n * K + j] * out[r * C + c];
                rdout[r * C + c] = (double)gate[n * K + j] * dy[n * C + c];
                rdgate[n * K + j] += (double)dy[n * C + c] * out[r * C + c];
                rdx[n * C + c] += out[r * C + c];
            }
        }
    }
    Err e1 = cmp(xe, rxe, (size_t)R * C), e2 = cmp(y, ry, (size_t)N * C), e3 = cmp(dout, rdout, (size_t)R * C);
    Err e4 = cmp(dgate, rdgate, (size_t)N * K), e5 = cmp(dx, rdx, (size_t)N * C);
    TEST_CHECK(e1.abs == 0 && e2.rel <= TIGHT_TOL && e3.rel <= TIGHT_TOL && e4.rel <= TIGHT_TOL && e5.rel <= TIGHT_TOL,
               "moe_permute / moe_combine / their backwards vs double: rel %.1e %.1e %.1e %.1e %.1e", e1.rel, e2.rel,
               e3.rel, e4.rel, e5.rel);
    TEST_CHECK(y[2 * C] == 0.0f && y[2 * C + 1] == 0.0f && y[2 * C + 2] == 0.0f && dx[2 * C] == 0.0f &&
               dgate[2 * K] == 0.0f && dgate[2 * K + 1] == 0.0f,
               "a token with every choice dropped: expert output 0 (the residual carries it), no gradient");
    float probs[N * E], lse[N], stats[2 * E + 3];
    for (int i = 0; i < N * E; i++) { probs[i] = (float)(0.5 + 0.4 * rnd()); }
    for (int n = 0; n < N; n++) { lse[n] = (float)rnd(); }
    moe_route_stats(stats, probs, lse, plan, N, E, K, 0.01f, 0.001f);
    double aux = 0.0, z = 0.0, fsum = 0.0;
    for (int e = 0; e < E; e++) {
        double P = 0.0;
        for (int n = 0; n < N; n++) { P += probs[n * E + e] / (double)N; }
        aux += 0.01 * E * (want_plan[e] / (double)(N * K)) * P;
        fsum += stats[e];
    }
    for (int n = 0; n < N; n++) { z += 0.001 * lse[n] * lse[n] / N; }
    TEST_CHECK(fabs(stats[2 * E] - aux) <= 1e-6 * aux && fabs(stats[2 * E + 1] - z) <= 1e-6 * z &&
               fabs(fsum - 1.0) <= 1e-6 && fabs(stats[2 * E + 2] - 4.0 / 12.0) <= 1e-6,
               "moe_route_stats: load-balancing loss %.6g (ref %.6g), z-loss %.6g (ref %.6g), f sums to 1, dropped "
               "%.4f (4 of 12)", stats[2 * E], aux, stats[2 * E + 1], z, stats[2 * E + 2]);
    float* w0 = (float*)dev_malloc((size_t)E * C * sizeof(float), "test"); /* zero router: all logits equal */
    int ch[N * K];
    float pr[N * E], ls[N], gt[N * K];
    moe_router_forward(pr, ls, ch, gt, x, w0, N, C, E, K);
    TEST_CHECK(ch[0] == 0 && ch[1] == 1 && fabsf(gt[0] - 0.5f) <= 1e-7f && fabsf(pr[3] - 0.2f) <= 1e-7f &&
               fabsf(ls[0] - logf(5.0f)) <= 1e-6f,
               "moe_router_forward with equal logits: experts 0 and 1 (ties to the lower index), gates 1/2, probs 1/5");
    free(rxe); free(ry); free(rdout); free(rdgate); free(rdx);
    dev_free(x); dev_free(out); dev_free(gate); dev_free(dy); dev_free(xe); dev_free(y); dev_free(dout);
    dev_free(dgate); dev_free(dx); dev_free(w0);
}

int main(void) {
    backend_init(0, 1);
    printf("# test_cpu_ops: %s, precision %s\n", backend_device_name(), PRECISION_NAME);
    TEST_CHECK(FLOATX_IS_FLOAT == 1 && sizeof(floatX) == 4, "floatX is fp32 on the CPU backend");
    {
        void* p = dev_malloc(1000, "probe");
        int zero = 1;
        for (int i = 0; i < 1000; i++) { zero &= ((unsigned char*)p)[i] == 0; }
        TEST_CHECK(((uintptr_t)p % 64) == 0 && zero, "dev_malloc: 64-byte aligned and zeroed");
        dev_free(p);
    }
    test_references_fd();

    test_encoder(1, 1, 1, 1);
    test_encoder(2, 3, 13, 5);
    test_encoder(4, 64, 768, 50);
    test_encoder_shards(2, 3, 13, 5, 2);     /* shards of 3 and 2 rows */
    test_encoder_shards(4, 64, 768, 50, 4);  /* shards of 13 rows, the last 11 */
    test_encoder_shards(3, 5, 7, 9, 3);

    test_layernorm(1, 1);
    test_layernorm(1, 13);
    test_layernorm(5, 37);
    test_layernorm(64, 768);
    const uint64_t rng_saved = rng_state; /* put back below (see test_references_fd) */
    test_qknorm(1, 1, 1, 2);
    test_qknorm(7, 4, 2, 16);  /* grouped-query: 2 key heads */
    test_qknorm(33, 6, 6, 8);
    test_qknorm(5, 4, 1, 64);  /* multi-query, head size 64 */
    test_rmsnorm(1, 1, 1.0);
    test_rmsnorm(1, 13, 1.0);
    test_rmsnorm(5, 37, 1.0);
    test_rmsnorm(63, 65, 1.0);
    test_rmsnorm(65, 768, 1.0);
    test_rmsnorm(64, 768, 0.01); /* mean(x^2) ~ eps */
    test_rmsnorm(7, 129, 0.01);
    rng_state = rng_saved;

    test_matmul(1, 1, 1, 1, 0);
    test_matmul(1, 13, 7, 1, 1);
    test_matmul(37, 29, 51, 0, 0);
    test_matmul(37, 29, 51, 1, 1);
    test_matmul(100, 768, 2304, 1, 0);
    test_matmul(64, 768, 3072, 1, 1);
    test_matmul(64, 3072, 768, 1, 0);

    test_attention(1, 1, 8, 2, 2);
    test_attention(2, 5, 12, 3, 3);  /* hs = 4 */
    test_attention(2, 17, 30, 5, 5); /* hs = 6: not a multiple of 4 (tail loop) */
    test_attention(2, 64, 768, 12, 12);
    test_attention(1, 150, 40, 2, 2); /* T > 64: several query tiles, last one partial */
    test_attention(2, 17, 48, 6, 2);  /* grouped-query attention: 3 query heads per key/value head */
    test_attention(1, 150, 64, 4, 1); /* multi-query (one key/value head), several query tiles */
    test_attention(2, 9, 32, 4, 2);

    test_rope_table();
    /* B, T, NH, KV, hs, pos0, llama3: GQA KV = 1, NH, NH/2; hs 64, 128 (and 2, 6); T 1, 63, 65; pos0 != 0 */
    test_rope(2, 63, 4, 1, 64, 0, 0);
    test_rope(2, 65, 4, 4, 64, 7, 0);
    test_rope(3, 65, 8, 4, 128, 3, 1);
    test_rope(2, 63, 2, 1, 128, 100, 1);
    test_rope(1, 1, 4, 2, 128, 4000, 1);  /* one decode token (a KV-cache step) at position 4000 */
    test_rope(4, 1, 4, 1, 64, 1000, 0);
    test_rope(1, 5, 3, 3, 6, 2, 0);       /* hs/2 odd */
    test_rope(1, 2, 1, 1, 2, 0, 0);       /* hs = 2: one pair */

    test_classifier(1, 1, 1, 0);
    test_classifier(3, 5, 8, 1);
    test_classifier(7, 100, 128, 1);
    test_classifier(4, 50257, 50304, 1);
    /* N, Vs, valid, v0, tp, rank */
    test_vocab_parallel(7, 64, 64, 64, 2, 1);
    test_vocab_parallel(7, 64, 36, 64, 2, 1);   /* the last shard: padding */
    test_vocab_parallel(5, 40, 0, 120, 4, 3);   /* an all-padding shard */
    test_vocab_parallel(1, 1, 1, 0, 1, 0);
    test_vocab_parallel(6, 12576, 12529, 37728, 4, 3); /* GPT-2's last shard at tp = 4 */
    test_vocab_parallel_composition(9, 100, 128, 1);
    test_moe_routing();
    test_vocab_parallel_composition(9, 100, 160, 2);
    test_vocab_parallel_composition(9, 100, 160, 4);  /* shards of 40: valid 40, 40, 20, 0 */
    test_vocab_parallel_composition(4, 50257, 50304, 4);

    if (cpu_bf16_matmul_supported()) {
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                test_bf16gemm(37, 45, 33, ta, tb, 0.0f, 1);    /* partial 12x32 tiles, odd K */
                test_bf16gemm(29, 70, 1100, ta, tb, 1.0f, 1);  /* K over the 512 block: accumulation across blocks */
                test_bf16gemm(64, 530, 96, ta, tb, 0.5f, 0);   /* N over the 512 column block, random fp32 inputs */
            }
        }
        test_bf16gemm(1, 1, 1, 0, 1, 0.0f, 0);
    } else {
        printf("# skip: cpu_bf16gemm (--cpu-matmul bf16): this CPU has no AVX512_BF16\n");
    }
    test_matmul_auto();
    test_expf();
    test_elementwise(1);
    test_elementwise(1000003);
    /* SwiGLU: F = 1, 63, 65 (odd), 3 * 64, the d12 MLP's 4C = 3072 on a few rows; odd N; gates up to |8| and |20|
     * (the |g| (1 - s) rounding term), and the saturated +-100 */
    test_swiglu(1, 1, 8, 0);
    test_swiglu(7, 63, 8, 1);
    test_swiglu(5, 65, 8, 0);
    test_swiglu(3, 192, 8, 1);
    test_swiglu(9, 65, 20, 1);
    test_swiglu(33, 3072, 8, 0);
    test_relu2(1);
    test_relu2(63);
    test_relu2(1000003);
    test_norm_and_checks(0);
    test_norm_and_checks(1);
    test_norm_and_checks(1000003);
    test_adamw(0);
    test_adamw(1);

    uint64_t h1 = run_chain(2, 33, 96, 4, 11), h2 = run_chain(2, 33, 96, 4, 11);
    TEST_CHECK(h1 == h2, "determinism: op chain bit-identical across two runs (hash %016llx vs %016llx)",
               (unsigned long long)h1, (unsigned long long)h2);
    uint64_t h3 = run_chain(4, 64, 768, 12, 50), h4 = run_chain(4, 64, 768, 12, 50);
    TEST_CHECK(h3 == h4, "determinism: d12-shaped op chain (B=4,T=64,C=768) bit-identical across two runs");
    backend_shutdown();
    return testing_finish();
}
