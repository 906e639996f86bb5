/*
 * dev/test/test_muon.c -- the Muon optimizer's Newton-Schulz iteration (llmc/muon.h, muon_newton_schulz on the CPU
 * backend, fp32 through cblas_sgemm) against an SVD-free float64 reference, and its element ops (llmc/cpu/muon.h)
 * against double formulas.
 *
 * The reference. G = U diag(s) V^T is built from orthonormal U (rows x k), V (cols x k) (modified Gram-Schmidt, twice,
 * in double; k = min(rows, cols)) and a chosen spectrum s. Every step X <- a X + b (X X^T) X + c (X X^T)^2 X maps
 * U diag(x) V^T to U diag(p(x)) V^T with p(x) = a x + b x^3 + c x^5, so after `steps` iterations of the normalised
 * X0 = G / (||G||_F + 1e-7) the exact result is U diag(phi(x_i)) V^T, phi = p composed steps times,
 * x_i = s_i / (||G||_F + 1e-7): the double-precision run of the same iteration, in closed form. (Its limit for
 * steps -> infinity would be the polar factor U V^T; the quintic's coefficients trade that convergence for speed:
 * phi does not converge to 1, see below.)
 *
 * Checks:
 *  - the known behaviour of the quintic (Jordan et al. 2024): for x in [2e-3, 1] phi_5(x) lies in [0.6818, 1.2024]
 *    (scanned on a grid of 2e5 points in double here); it is not an orthogonaliser to machine precision;
 *  - the fp32 result equals the closed-form double result within fp32 rounding (bound below), for wide, tall and
 *    square matrices (the tall ones take the transposed branch: A = X^T X, X <- a X + X B^T), the model's shapes
 *    (qkv 3C x C, attproj C x C, fc 4C x C, fcproj C x 4C at C = 32) and steps 1, 5 and 8;
 *  - the output's singular values, measured as ||X v_i|| (v_i the known right singular vectors), lie in
 *    [0.68, 1.21] and the orthogonality error max |sigma_i - 1| is printed (about 0.3: the quintic's, not a bug);
 *  - muon_momentum, muon_normalize, muon_axpby, muon_apply against double formulas, tight (a few roundings).
 * Mistakes each check catches: a wrong coefficient, sign or step count changes phi by O(0.1); the transposed branch
 * computed as the wide one (X X^T for a tall X) gives a wrong shape of A and O(1) errors; a missing normalisation
 * blows up (x_i >> 1 diverges under p); an operand transposed in a GEMM scrambles U/V (O(1)).
 * Tolerance of the fp32 vs double comparison (relative to max |ref|): X0's rounding and each step's GEMMs (inner
 * dimension at most n = max(rows, cols)) and element ops add an error of about 30 sqrt(n) u (u = 2^-24; sums of n
 * products of O(1) terms with random-sign roundings grow like sqrt(n); |a|, |b|, |c| < 5 and three products per step
 * give the factor 30). An error E injected after step j reaches the result through the remaining steps, a matrix
 * function of X acting on the singular values: its diagonal part is scaled by the derivative of p^(steps-j) and its
 * off-diagonal part by the divided differences (psi(x_i) - psi(x_k)) / (x_i - x_k), which by the mean value theorem
 * are derivatives of psi = p^(steps-j) at points of the spectrum's interval. So the bound is
 * 30 sqrt(n) u sum_{j=0..steps} max over y in p^j([x_min, x_max]) of |(p^(steps-j))'(y)|, computed here by the chain
 * rule on a grid of the interval (ns_amplification). It is 5e-5 to 1e-2 for the shapes below (the small singular values
 * grow by a^5 = 487 in five steps, which amplifies the errors along them as much); the measured errors (about 1e-6)
 * are printed; every bug listed above gives errors of order 1.
 *
 * Build: make build/test_muon && ./build/test_muon
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/backend.h"
#include "llmc/muon.h"
#include "dev/test/testing.h"

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static double rnd(void) { /* uniform in [-1, 1), xorshift64* */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* phi: the scalar quintic p applied `steps` times, with the coefficients as the code uses them (fp32 constants) */
static double ns_phi(double x, int steps) {
    const double a = MUON_NS_A, b = MUON_NS_B, c = MUON_NS_C;
    for (int k = 0; k < steps; k++) { x = a * x + b * x * x * x + c * x * x * x * x * x; }
    return x;
}

/* the derivative of p^m (p composed m times) at y, by the chain rule */
static double ns_slope(double y, int m) {
    const double a = MUON_NS_A, b = MUON_NS_B, c = MUON_NS_C;
    double d = 1.0;
    for (int k = 0; k < m; k++) {
        d *= a + 3.0 * b * y * y + 5.0 * c * y * y * y * y;
        y = a * y + b * y * y * y + c * y * y * y * y * y;
    }
    return fabs(d);
}

/* sum over j = 0..steps of max over x in [x_lo, x_hi] of |(p^(steps-j))'(p^j(x))|: how much the errors injected
 * before the first step (j = 0) and after each step grow by the end (see the header); a grid of 4001 points */
static double ns_amplification(double x_lo, double x_hi, int steps) {
    double total = 0;
    for (int j = 0; j <= steps; j++) {
        double worst = 0;
        for (int i = 0; i <= 4000; i++) {
            double x = x_lo + (x_hi - x_lo) * i / 4000.0;
            worst = fmax(worst, ns_slope(ns_phi(x, j), steps - j));
        }
        total += worst;
    }
    return total;
}

/* Q (n x k, row-major): k orthonormal columns from random vectors, modified Gram-Schmidt applied twice */
static void orthonormal_columns(double* Q, int n, int k) {
    for (size_t i = 0; i < (size_t)n * k; i++) { Q[i] = rnd(); }
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < k; j++) {
            for (int q = 0; q < j; q++) {
                double dot = 0;
                for (int i = 0; i < n; i++) { dot += Q[(size_t)i * k + j] * Q[(size_t)i * k + q]; }
                for (int i = 0; i < n; i++) { Q[(size_t)i * k + j] -= dot * Q[(size_t)i * k + q]; }
            }
            double nrm = 0;
            for (int i = 0; i < n; i++) { nrm += Q[(size_t)i * k + j] * Q[(size_t)i * k + j]; }
            nrm = sqrt(nrm);
            for (int i = 0; i < n; i++) { Q[(size_t)i * k + j] /= nrm; }
        }
    }
}

/* out(rows x cols) = U diag(d) V^T */
static void compose(double* out, const double* U, const double* d, const double* V, int rows, int cols, int k) {
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++) {
            double acc = 0;
            for (int q = 0; q < k; q++) { acc += U[(size_t)i * k + q] * d[q] * V[(size_t)j * k + q]; }
            out[(size_t)i * cols + j] = acc;
        }
    }
}

/* the quintic's range on [2e-3, 1] after five steps: the known [0.68, 1.2] band */
static void test_phi_band(void) {
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i <= 200000; i++) {
        double x = 2e-3 * pow(500.0, i / 200000.0); /* log grid from 2e-3 to 1 */
        double y = ns_phi(x, 5);
        lo = y < lo ? y : lo;
        hi = y > hi ? y : hi;
    }
    TEST_CHECK(lo > 0.6818 && lo < 0.6819 && hi > 1.2023 && hi < 1.2025,
               "quintic phi_5 on [2e-3, 1] spans [%.4f, %.4f] (the reference's band about [0.68, 1.2], not 1)", lo, hi);
}

/* G = U diag(s) V^T with singular values geometric from 1 down to smin (times 3.7: the scale must not matter) */
static void test_newton_schulz_side(int rows, int cols, double smin, int steps, int gram_rows) {
    int k = rows < cols ? rows : cols;
    size_t n = (size_t)rows * cols;
    double* U = (double*)malloc_check((size_t)rows * k * sizeof(double), "U");
    double* V = (double*)malloc_check((size_t)cols * k * sizeof(double), "V");
    double* s = (double*)malloc_check(k * sizeof(double), "s");
    double* Gd = (double*)malloc_check(n * sizeof(double), "G");
    double* ref = (double*)malloc_check(n * sizeof(double), "ref");
    orthonormal_columns(U, rows, k);
    orthonormal_columns(V, cols, k);
    for (int q = 0; q < k; q++) { s[q] = 3.7 * pow(smin, k > 1 ? (double)q / (k - 1) : 0.0); }
    compose(Gd, U, s, V, rows, cols, k);
    floatX* G = (floatX*)dev_malloc(n * sizeof(floatX), "G");
    double fro = 0;
    for (size_t i = 0; i < n; i++) { G[i] = (float)Gd[i]; fro += (double)G[i] * (double)G[i]; }
    fro = sqrt(fro); /* of the fp32 G the iteration sees */
    double* ph = (double*)malloc_check(k * sizeof(double), "phi");
    for (int q = 0; q < k; q++) { ph[q] = ns_phi(s[q] / (fro + 1e-7), steps); }
    compose(ref, U, ph, V, rows, cols, k);
    Muon mu;
    memset(&mu, 0, sizeof(mu));
    size_t gs = (size_t)(gram_rows ? rows : cols);
    mu.work = (floatX*)dev_malloc((2 * n + 2 * gs * gs) * sizeof(floatX), "work");
    mu.normsq = (float*)dev_malloc(sizeof(float), "normsq");
    const floatX* X = muon_orthogonalize(&mu, G, rows, cols, gram_rows, NULL, steps);
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)X[i] - ref[i]);
        err = d > err || isnan(d) ? d : err; /* a NaN output fails (fmax would drop it) */
        scale = fmax(scale, fabs(ref[i]));
    }
    double nn = rows > cols ? rows : cols, u = ldexp(1.0, -24);
    double tol = 30.0 * sqrt(nn) * u * ns_amplification(s[k - 1] / (fro + 1e-7), s[0] / (fro + 1e-7), steps);
    TEST_CHECK(err / scale <= tol, "newton_schulz %dx%d (%s, Gram %s) steps=%d smin=%.0e: fp32 vs closed-form "
               "double rel %.2e (tol %.2e)", rows, cols, rows > cols ? "tall" : rows < cols ? "wide" : "square",
               gram_rows ? "X X^T" : "X^T X", steps, smin, err / scale, tol);
    if (steps == 5) { /* the output's singular values ||X v_q|| */
        double smin_out = INFINITY, smax_out = 0, worst_ortho = 0;
        for (int q = 0; q < k; q++) {
            double nrm = 0;
            for (int i = 0; i < rows; i++) {
                double acc = 0;
                for (int j = 0; j < cols; j++) { acc += (double)X[(size_t)i * cols + j] * V[(size_t)j * k + q]; }
                nrm += acc * acc;
            }
            nrm = sqrt(nrm);
            smin_out = nrm < smin_out || isnan(nrm) ? nrm : smin_out;
            smax_out = nrm > smax_out || isnan(nrm) ? nrm : smax_out;
            worst_ortho = fmax(worst_ortho, fabs(nrm - 1.0));
        }
        TEST_CHECK(smin_out >= 0.68 && smax_out <= 1.21, "newton_schulz %dx%d: output singular values in [%.4f, %.4f] "
                   "within the quintic's band [0.68, 1.21]; orthogonality error max|sigma - 1| = %.3f", rows, cols,
                   smin_out, smax_out, worst_ortho);
    }
    dev_free(mu.work); dev_free(mu.normsq); dev_free(G);
    free(U); free(V); free(s); free(Gd); free(ref); free(ph);
}

/* on the reference's side (the smaller Gram matrix) */
static void test_newton_schulz(int rows, int cols, double smin, int steps) {
    test_newton_schulz_side(rows, cols, smin, steps, rows <= cols);
}

/* the element ops against double formulas (each a few fp32 roundings: relative 1e-6) */
static void test_element_ops(size_t n) {
    floatX* g = (floatX*)dev_malloc(n * sizeof(floatX), "g");
    floatX* u = (floatX*)dev_malloc(n * sizeof(floatX), "u");
    float* buf = (float*)dev_malloc(n * sizeof(float), "buf");
    float* buf0 = (float*)malloc_check(n * sizeof(float), "buf0");
    for (size_t i = 0; i < n; i++) { g[i] = (float)rnd(); buf[i] = buf0[i] = (float)rnd() * 0.3f; }
    const float beta = 0.95f, gs = 0.75f;
    muon_momentum(u, buf, g, n, beta, gs);
    double e_buf = 0, e_u = 0;
    for (size_t i = 0; i < n; i++) {
        double gg = (double)g[i] * gs, b = beta * (double)buf0[i] + gg, uu = gg + beta * b;
        e_buf = fmax(e_buf, fabs(buf[i] - b));
        e_u = fmax(e_u, fabs(u[i] - uu));
    }
    TEST_CHECK(e_buf < 1e-6 && e_u < 2e-6, "muon_momentum n=%zu (Nesterov, Liu et al.): buf err %.1e, u err %.1e", n,
               e_buf, e_u);
    memcpy(buf0, g, n * sizeof(float));
    muon_momentum(g, buf, g, n, beta, gs); /* in place over the gradient, as llmc/muon.h runs it */
    double e_alias = 0;
    for (size_t i = 0; i < n; i++) {
        double gg = (double)buf0[i] * gs;
        e_alias = fmax(e_alias, fabs(g[i] - (gg + beta * (double)buf[i])));
    }
    TEST_CHECK(e_alias < 2e-6, "muon_momentum in place (u = g): err %.1e", e_alias);
    float nsq = 0;
    global_norm_squared(&nsq, u, n, 0);
    floatX* x = (floatX*)dev_malloc(n * sizeof(floatX), "x");
    muon_normalize(x, u, &nsq, n);
    double fro = 0, e_norm = 0;
    for (size_t i = 0; i < n; i++) { fro += (double)u[i] * u[i]; }
    for (size_t i = 0; i < n; i++) { e_norm = fmax(e_norm, fabs(x[i] - u[i] / (sqrt(fro) + 1e-7))); }
    TEST_CHECK(e_norm < 1e-6 / sqrt((double)n) * 10, "muon_normalize n=%zu: x = g / (||g||_F + 1e-7), err %.1e", n, e_norm);
    muon_axpby(x, x, u, 1.5f, -0.25f, n); /* aliasing out = x */
    double e_ax = 0;
    for (size_t i = 0; i < n; i++) {
        double want = 1.5 * (double)(float)(u[i] / (sqrt(fro) + 1e-7)) - 0.25 * (double)u[i];
        e_ax = fmax(e_ax, fabs(x[i] - want));
    }
    TEST_CHECK(e_ax < 1e-5, "muon_axpby n=%zu (out aliases x): err %.1e", n, e_ax);
    for (int with_master = 0; with_master < 2; with_master++) {
        floatX* p = (floatX*)dev_malloc(n * sizeof(floatX), "p");
        float* master = with_master ? (float*)dev_malloc(n * sizeof(float), "master") : NULL;
        float* p0 = (float*)malloc_check(n * sizeof(float), "p0");
        for (size_t i = 0; i < n; i++) { p0[i] = (float)rnd(); p[i] = p0[i]; if (master) { master[i] = p0[i]; } }
        const float lr = 0.01f, scale = 0.2f * sqrtf(96.0f), wd = 0.1f;
        muon_apply(p, master, u, n, 17, lr, scale, wd, 3, 1234u);
        double e_p = 0;
        for (size_t i = 0; i < n; i++) {
            double want = p0[i] - lr * (scale * (double)u[i] + wd * p0[i]);
            e_p = fmax(e_p, fabs(p[i] - want));
            if (master) { e_p = fmax(e_p, fabs(master[i] - want)); }
        }
        TEST_CHECK(e_p < 1e-6, "muon_apply n=%zu%s: p -= lr (scale o + wd p), err %.1e", n,
                   with_master ? " (master)" : "", e_p);
        dev_free(p); if (master) { dev_free(master); } free(p0);
    }
    dev_free(g); dev_free(u); dev_free(buf); dev_free(x); free(buf0);
}

/* the tensor selection from the parameter table: GPT-2's qkvw, attprojw, fcw, fcprojw (and with experts the router and
 * each expert's fc and fcproj); never wte/wpe/lmheadw, norms, biases, QK-norm weights */
static void test_selection(void) {
    GPT2Config c;
    memset(&c, 0, sizeof(c));
    c.channels = 32; c.num_heads = 4; c.num_layers = 2; c.padded_vocab_size = 128; c.vocab_size = 100;
    c.max_seq_len = 16;
    c.arch.n_kv_head = 4; c.arch.ffn_hidden = 128; c.arch.bias = 1; c.arch.qk_norm = 1; c.arch.tied_head = 0;
    uint32_t got = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { if (muon_is_matrix(&c, i)) { got |= 1u << i; } }
    uint32_t want = (1u << P_QKVW) | (1u << P_ATTPROJW) | (1u << P_FCW) | (1u << P_FCPROJW);
    TEST_CHECK(got == want, "Muon's tensors from GPT2_PARAMS: qkvw, attprojw, fcw, fcprojw only (mask %#x, want %#x; "
               "wte, wpe, lmheadw, norms, biases and QK-norm weights stay on AdamW; no expert tensor in a dense model)", got, want);
    GPT2Config e = c; /* with 4 experts (hidden 64) in every second block: the router and each expert's two matrices */
    e.moe.experts = 4; e.moe.top_k = 2; e.moe.every = 2; e.moe.hidden = 64;
    uint32_t gote = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { if (muon_is_matrix(&e, i)) { gote |= 1u << i; } }
    int er, ec, fr, fc, pr, pc;
    muon_matrix_shape(&e, P_ROUTERW, &er, &ec);
    muon_matrix_shape(&e, P_EFCW, &fr, &fc);
    muon_matrix_shape(&e, P_EFCPROJW, &pr, &pc);
    TEST_CHECK(gote == (want | (1u << P_ROUTERW) | (1u << P_EFCW) | (1u << P_EFCPROJW)) && er == 4 && ec == 32 &&
               fr == 64 && fc == 32 && pr == 32 && pc == 64 && muon_matrix_count(&e, P_EFCW) == 4.0 &&
               muon_matrix_count(&e, P_ROUTERW) == 1.0 && muon_matrix_count(&e, P_FCW) == 1.0,
               "experts: routerw one (E, C) = (4, 32) matrix per MoE block, efcw (H, C) = (%d, %d) and efcprojw "
               "(C, H) = (%d, %d) one matrix per expert (4 per block), fcw one per dense block; expert biases stay on "
               "AdamW (mask %#x)", fr, fc, pr, pc, gote);
    int r, cc;
    muon_matrix_shape(&c, P_FCPROJW, &r, &cc);
    TEST_CHECK(r == 32 && cc == 128, "fcprojw's matrix is (C, F) = (32, 128): got (%d, %d)", r, cc);
    Muon mu;
    memset(&mu, 0, sizeof(mu));
    muon_tensor_setup(&mu, &c, P_QKVW, 2);
    muon_tensor_setup(&mu, &c, P_FCPROJW, 2);
    muon_tensor_setup(&mu, &c, P_ATTPROJW, 1);
    TEST_CHECK(mu.rows[P_QKVW] == 48 && mu.cols[P_QKVW] == 32 && !mu.gram_rows[P_QKVW] && mu.tp_split[P_QKVW] &&
               mu.rows[P_FCPROJW] == 32 && mu.cols[P_FCPROJW] == 64 && mu.gram_rows[P_FCPROJW] &&
               mu.tp_split[P_FCPROJW] && mu.gram_rows[P_ATTPROJW] && !mu.tp_split[P_ATTPROJW] &&
               fabsf(mu.scale[P_QKVW] - 0.2f * sqrtf(96.0f)) < 1e-6f && fabsf(mu.scale[P_FCPROJW] - 0.2f * sqrtf(128.0f)) < 1e-6f,
               "tp 2: qkvw (column-parallel) keeps 48 of 96 rows with the Gram matrix X^T X (the tp sum of the slices'), "
               "fcprojw (row-parallel) 64 of 128 columns with X X^T; the RMS scale of the whole matrices; tp 1: no sum");
}

int main(void) {
    backend_init(0, 1);
    printf("# test_muon: %s, precision %s\n", backend_device_name(), PRECISION_NAME);
    test_phi_band();
    test_selection();
    test_newton_schulz(16, 48, 1e-2, 5);   /* wide */
    test_newton_schulz(48, 16, 1e-2, 5);   /* tall: the transposed branch */
    test_newton_schulz(32, 32, 1e-2, 5);   /* square */
    test_newton_schulz(96, 32, 1e-2, 5);   /* qkvw at C = 32 (3C x C) */
    test_newton_schulz(128, 32, 1e-2, 5);  /* fcw (4C x C) */
    test_newton_schulz(32, 128, 1e-2, 5);  /* fcprojw (C x 4C) */
    test_newton_schulz(24, 40, 1e-2, 1);   /* one step */
    test_newton_schulz(40, 24, 1e-2, 8);   /* more steps than the default */
    test_newton_schulz(7, 5, 0.5, 5);      /* tiny, odd */
    test_newton_schulz_side(16, 48, 1e-2, 5, 0); /* the larger Gram side, as tp's row split of a wide matrix */
    test_newton_schulz_side(48, 16, 1e-2, 5, 1); /* and of a tall one cut by columns */
    test_element_ops(1);
    test_element_ops(1003);
    test_element_ops(70000); /* above the OpenMP threshold */
    backend_shutdown();
    return testing_finish();
}
