/*
 * dev/cuda/attention.cu -- checks and times the causal attention kernels of llmc/cuda/attention.cuh
 * (and cuDNN's SDPA, llmc/cuda/attention_cudnn.h, when built with USE_CUDNN=1: make -C dev/cuda USE_CUDNN=1).
 *
 *   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90 -DENABLE_BF16 dev/cuda/attention.cu -o attention
 *   ./attention            # checks at several shapes, then timing at GPT-2 shapes
 *   ./attention check      # checks only
 *
 * Check: random qkv and dout (uniform [-1,1]), rounded to floatX; a CPU reference in FP64 (naive causal
 * attention forward and backward, Vaswani et al. 2017) on exactly the rounded values; every GPU output
 * buffer is poisoned with NaN before each run, so unwritten elements fail. Flash MMA path (backward: the
 * three-pass attention_backward_flash7, "flash", and the one-kernel FlashAttention-2 attention_backward_fa2,
 * "fa2"), the CUDA-core fallback path (forced), and cuDNN (if built) are checked; the backward is also run
 * twice (scratch poisoned in between) and compared bit for bit (determinism).
 * Grouped-query attention (Ainslie et al. 2023; llmc/cuda/attention_gqa.cuh) is checked through the contract's
 * attention_forward / attention_backward with NKV < NH (qkv (B,T,(NH+2*NKV)*hs)): the reference is the FP64 one on
 * the host-expanded qkv (kv head h/g for query head h), dK/dV summed over each group in FP64. The flash kernels
 * natively (kv head h/g in their K/V loads, dK/dV summed over the group inside the dK/dV kernel, or the one FA2
 * backward kernel with ATTN_BWD_FA2=1), or, when built with cuDNN, cuDNN's SDPA with NKV key/value heads (both
 * directions; dK/dV summed by cuDNN); "gqa" timing lines time the contract at NKV < NH, next to its NKV = NH ("mha")
 * run.
 *
 * Tolerances (argued from the numerics, not tuned): let u be the unit roundoff of floatX (2^-8 for
 * bf16 taken conservatively, 2^-11 for fp16; for fp32 the fp32 accumulation error, ~1e-5). Every
 * floatX output is rounded once (<= u relative); P (or dS) is rounded to floatX before its matmul
 * (each term <= u relative, so the sum errs by <= u * sum|term| <= u * max|ref|-scale); Q.K and dO.V are
 * accumulated in fp32 from exact inputs. Hence |gpu - ref| <= 8 u * max|ref| per tensor (a factor 2-4
 * margin over the sum of these bounds). dq and dk add an absolute floor: dS = P (dP - D) subtracts two fp32 dot
 * products of hs terms (dP_ij = dO_i.V_j, D_i = dO_i.O_i), each up to hs max|dO| max|qkv|, which cancel where the
 * exact gradient is 0 (T = 1: one key, P = 1, O = V): their fp32 rounding, <= 2 hs 2^-24 of that size, reaches dq
 * and dk through scale * sum_j P_ij k_j (sum_j P_ij = 1), so the floor is 2 hs 2^-24 max|dO| max|qkv|^2 scale (the
 * first GPU run, 2026-12-04, saw 2.9e-8 at T = 1 against a tolerance of 0; the floor is 4.8e-7 at hs 16). lse is fp32 from exact inputs: |err| <= 1e-3 * max(1,|ref|)
 * (exp2 approximation ~2 ulp, fp32 accumulation over <= T terms).
 * GQA dk, dv: each of the g summed multi-head gradients is within the bound above of its own (rounded to floatX
 * before the sum), and the fp32 sum is rounded once more: |err| <= g (9 u max|per-head ref| + floor).
 *
 * Timing: cudaEvents around each launch, median of 50 runs after 5 warm-ups. FLOPs counted as
 * forward 4*B*NH*T*T*hs/2 (two matmuls, causal half), backward 2.5x forward; fraction of 989 TFLOP/s,
 * the dense BF16 peak of an H100/H200 SXM. The flash backward's row-dot pass (D = rowsum(dO*O)) is also timed
 * alone, in GB/s against 4.8 TB/s. Each backward also prints "time attention_backward IMPL B= T= C= NH= X ms"
 * (median), which scripts/gpu_check.sh puts in its table (three-pass vs FA2). Timing shapes: the training shape
 * B=64 T=1024 C=768 first (dO and O 100 MB each, larger than L2: the row-dot pass reads them from HBM as in
 * training), then B=16 (a quarter of it), T=2048 and hs=128. The timings are printed even when a check failed
 * (with a note saying so), and the exit status still says it failed.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../llmc/cuda/common.cuh"
#include "../../llmc/cuda/attention.cuh"
#include "../../llmc/cuda/attention_gqa.cuh" /* and, with USE_CUDNN, llmc/cuda/attention_cudnn.h */

#define PEAK_TFLOPS 989.0

/* ------------------------------------------------------------------ helpers */

static unsigned long long rng_state = 0x2545F4914F6CDD1Dull;
static float urand_pm1(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* unit roundoff used by the tolerances (see header comment) */
static double floatx_u(void) {
#if defined(ENABLE_FP32)
    return 1e-5;
#elif defined(ENABLE_FP16)
    return 1.0 / 2048.0;
#else
    return 1.0 / 256.0;
#endif
}

/* fills host floats with random values already rounded to floatX; uploads them */
static void random_floatx(float* host, floatX* dev, size_t n) {
    floatX* tmp = (floatX*)malloc(n * sizeof(floatX));
    if (!tmp) { FATAL("out of host memory"); }
    for (size_t i = 0; i < n; i++) {
        tmp[i] = from_float<floatX>(urand_pm1());
        host[i] = to_float(tmp[i]);
    }
    CUDA_CHECK(cudaMemcpy(dev, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
}
static void download_floatx(float* host, const floatX* dev, size_t n) {
    floatX* tmp = (floatX*)malloc(n * sizeof(floatX));
    if (!tmp) { FATAL("out of host memory"); }
    CUDA_CHECK(cudaMemcpy(tmp, dev, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) { host[i] = to_float(tmp[i]); }
    free(tmp);
}
/* all-ones bytes: NaN in fp32, bf16 and fp16 */
static void poison(void* dev, size_t bytes) { CUDA_CHECK(cudaMemset(dev, 0xFF, bytes)); }

/* ------------------------------------------------------------------ FP64 reference */

/* out (B,T,C), lse (B,NH,T) from qkv (B,T,3C) */
static void ref_forward(double* out, double* lse, const float* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double* s = (double*)malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float* q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                double m = -DBL_MAX;
                for (int j = 0; j <= i; j++) {
                    const float* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int x = 0; x < hs; x++) { d += (double)q[x] * k[x]; }
                    s[j] = d * scale;
                    if (s[j] > m) { m = s[j]; }
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) { sum += exp(s[j] - m); }
                const double l = m + log(sum);
                lse[((size_t)b * NH + h) * T + i] = l;
                double* o = out + ((size_t)b * T + i) * C + h * hs;
                for (int x = 0; x < hs; x++) { o[x] = 0; }
                for (int j = 0; j <= i; j++) {
                    const double p = exp(s[j] - l);
                    const float* v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int x = 0; x < hs; x++) { o[x] += p * v[x]; }
                }
            }
    free(s);
}

/* dqkv (B,T,3C) from dout (B,T,C) and qkv */
static void ref_backward(double* dqkv, const float* dout, const float* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double* p = (double*)malloc((size_t)T * sizeof(double));
    double* dp = (double*)malloc((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float* q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                const float* dO = dout + ((size_t)b * T + i) * C + h * hs;
                double m = -DBL_MAX;
                for (int j = 0; j <= i; j++) {
                    const float* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int x = 0; x < hs; x++) { d += (double)q[x] * k[x]; }
                    p[j] = d * scale;
                    if (p[j] > m) { m = p[j]; }
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) { p[j] = exp(p[j] - m); sum += p[j]; }
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    p[j] /= sum;
                    const float* v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    double d = 0;
                    for (int x = 0; x < hs; x++) { d += (double)dO[x] * v[x]; }
                    dp[j] = d;
                    D += p[j] * d;
                }
                double* dq = dqkv + ((size_t)b * T + i) * 3 * C + h * hs;
                for (int j = 0; j <= i; j++) {
                    const double ds = p[j] * (dp[j] - D) * scale;
                    const float* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double* dk = dqkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double* dv = dqkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int x = 0; x < hs; x++) {
                        dq[x] += ds * k[x];
                        dk[x] += ds * q[x];
                        dv[x] += p[j] * dO[x];
                    }
                }
            }
    free(p);
    free(dp);
}

/* ------------------------------------------------------------------ comparison */

/* returns 1 if every |got-ref| <= tol_rel*max|ref| (+ tol_abs) and nothing is NaN; prints a summary */
static int compare(const char* what, const float* got, const double* ref, size_t n, double tol_rel_to_max,
                   double tol_abs) {
    double maxref = 0;
    for (size_t i = 0; i < n; i++) { maxref = fmax(maxref, fabs(ref[i])); }
    const double tol = tol_rel_to_max * maxref + tol_abs;
    double maxerr = 0;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]);
        if (!(e <= tol)) {
            if (bad == 0) { first_bad = i; }
            bad++;
        }
        if (e > maxerr || e != e) { maxerr = e; }
    }
    printf("    %-22s max|ref| %.3e  max err %.3e  tol %.3e  %s", what, maxref, maxerr, tol, bad ? "FAIL" : "ok");
    if (bad) { printf("  (%zu bad, first at %zu: got %g want %g)", bad, first_bad, got[first_bad], ref[first_bad]); }
    printf("\n");
    return bad == 0;
}

typedef struct {
    int B, T, C, NH;
    int NKV; /* key/value heads of IMPL_CONTRACT (0: NH); the other implementations are multi-head */
} Shape;

/* IMPL_FLASH: forward + the three-pass backward (attention_backward_flash7); IMPL_FA2: the same forward + the
 * one-kernel FlashAttention-2 backward (attention_backward_fa2); IMPL_CONTRACT: the backend contract's
 * attention_forward / attention_backward at s.NKV key/value heads (llmc/cuda/attention_gqa.cuh: the flash kernels
 * with NKV heads natively, or under USE_CUDNN cuDNN's SDPA with NKV heads first); IMPL_CUDNN: cuDNN's SDPA alone
 * (attention_cudnn_forward / _backward at s.NKV heads; a shape cuDNN declines is reported as declined and skipped:
 * the contract runs the flash kernels there) */
typedef enum { IMPL_FLASH, IMPL_FA2, IMPL_FALLBACK, IMPL_CUDNN, IMPL_CONTRACT } Impl;
#define NIMPLS 4 /* the multi-head implementations checked and timed at every shape */
static const char* impl_name(Impl im) {
    return im == IMPL_FLASH ? "flash" : im == IMPL_FA2 ? "fa2" : im == IMPL_FALLBACK ? "fallback"
         : im == IMPL_CUDNN ? "cudnn" : "contract";
}
static int shape_nkv(Shape s) { return s.NKV ? s.NKV : s.NH; }
/* scratch floats each implementation's backward needs */
static size_t scratch_floats(Impl im, Shape s) {
    if (im == IMPL_CONTRACT) { return attention_scratch_floats(s.B, s.T, s.C, s.NH, shape_nkv(s)); }
    return im == IMPL_FA2 ? attention_fa2_scratch_floats(s.B, s.T, s.C, s.NH) : (size_t)s.B * s.NH * s.T;
}

/* scratch: the flash backward's (unused by the forwards and by cuDNN). Both return 1 when they ran, 0 when cuDNN
 * declined the shape (IMPL_CUDNN only; its stderr line says why) */
static int run_forward(Impl im, floatX* out, float* lse, float* scratch, const floatX* qkv, Shape s) {
    switch (im) {
        case IMPL_FLASH:
        case IMPL_FA2: attention_forward_flash(out, lse, qkv, s.B, s.T, s.C, s.NH, s.NH); break;
        case IMPL_FALLBACK: attention_forward_cuda_cores(out, lse, qkv, s.B, s.T, s.C, s.NH, s.NH); break;
        case IMPL_CONTRACT: attention_forward(out, lse, scratch, qkv, s.B, s.T, s.C, s.NH, shape_nkv(s)); break;
        case IMPL_CUDNN:
#ifdef USE_CUDNN
            return attention_cudnn_forward(out, lse, qkv, s.B, s.T, s.NH, shape_nkv(s), s.C / s.NH,
                                           attention_cudnn_dtype(), main_stream());
#endif
            break;
    }
    return 1;
}
static int run_backward(Impl im, floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                         const floatX* out, const float* lse, Shape s) {
    switch (im) {
        case IMPL_FLASH: attention_backward_flash7(dqkv, scratch, dout, qkv, out, lse, s.B, s.T, s.C, s.NH, s.NH); break;
        case IMPL_FA2: attention_backward_fa2(dqkv, scratch, dout, qkv, out, lse, s.B, s.T, s.C, s.NH, s.NH); break;
        case IMPL_FALLBACK:
            attention_backward_cuda_cores(dqkv, scratch, dout, qkv, out, lse, s.B, s.T, s.C, s.NH, s.NH);
            break;
        case IMPL_CONTRACT:
            attention_backward(dqkv, scratch, dout, qkv, out, lse, s.B, s.T, s.C, s.NH, shape_nkv(s));
            break;
        case IMPL_CUDNN:
#ifdef USE_CUDNN
            return attention_cudnn_backward(dqkv, dout, qkv, out, lse, s.B, s.T, s.NH, shape_nkv(s), s.C / s.NH,
                                            attention_cudnn_dtype(), main_stream());
#endif
            break;
    }
    return 1;
}
static int impl_applies(Impl im, Shape s) {
#ifdef USE_CUDNN
    if (im == IMPL_CUDNN) { return attention_cudnn_supported(s.C / s.NH); }
#else
    (void)s;
    if (im == IMPL_CUDNN) { return 0; }
#endif
    return 1;
}

/* the device buffers of one check or timing: qkv and dqkv of nq, out and dout of nout floatX; lse of nl and the
 * scratch of nscr fp32 */
typedef struct {
    floatX *qkv, *dout, *out, *dqkv;
    float *lse, *scratch;
} Bufs;
static Bufs bufs_alloc(size_t nq, size_t nout, size_t nl, size_t nscr) {
    Bufs b;
    CUDA_CHECK(cudaMalloc(&b.qkv, nq * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&b.dout, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&b.out, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&b.dqkv, nq * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&b.lse, nl * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&b.scratch, nscr * sizeof(float)));
    return b;
}
static void bufs_free(Bufs* b) {
    CUDA_CHECK(cudaFree(b->qkv));
    CUDA_CHECK(cudaFree(b->dout));
    CUDA_CHECK(cudaFree(b->out));
    CUDA_CHECK(cudaFree(b->dqkv));
    CUDA_CHECK(cudaFree(b->lse));
    CUDA_CHECK(cudaFree(b->scratch));
}

/* checks one implementation at one shape; returns 1 on pass */
static int check_shape(Impl im, Shape s) {
    const size_t nqkv = (size_t)s.B * s.T * 3 * s.C, nout = (size_t)s.B * s.T * s.C, nl = (size_t)s.B * s.NH * s.T;
    float* h_qkv = (float*)malloc(nqkv * sizeof(float));
    float* h_dout = (float*)malloc(nout * sizeof(float));
    float* h_out = (float*)malloc(nout * sizeof(float));
    float* h_lse = (float*)malloc(nl * sizeof(float));
    float* h_dqkv = (float*)malloc(nqkv * sizeof(float));
    float* h_dqkv2 = (float*)malloc(nqkv * sizeof(float));
    double* r_out = (double*)malloc(nout * sizeof(double));
    double* r_lse = (double*)malloc(nl * sizeof(double));
    double* r_dqkv = (double*)malloc(nqkv * sizeof(double));
    if (!h_qkv || !h_dout || !h_out || !h_lse || !h_dqkv || !h_dqkv2 || !r_out || !r_lse || !r_dqkv) {
        FATAL("out of host memory");
    }
    Bufs b = bufs_alloc(nqkv, nout, nl, scratch_floats(im, s));
    floatX *d_qkv = b.qkv, *d_dout = b.dout, *d_out = b.out, *d_dqkv = b.dqkv;
    float *d_lse = b.lse, *d_scratch = b.scratch;
    random_floatx(h_qkv, d_qkv, nqkv);
    random_floatx(h_dout, d_dout, nout);
    ref_forward(r_out, r_lse, h_qkv, s.B, s.T, s.C, s.NH);
    ref_backward(r_dqkv, h_dout, h_qkv, s.B, s.T, s.C, s.NH);

    printf("  %-8s B=%d T=%d C=%d NH=%d (hs=%d)\n", impl_name(im), s.B, s.T, s.C, s.NH, s.C / s.NH);
    const double u = floatx_u();
    int ok = 1;
    poison(d_out, nout * sizeof(floatX));
    poison(d_lse, nl * sizeof(float));
    const int ran_fwd = run_forward(im, d_out, d_lse, d_scratch, d_qkv, s);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (!ran_fwd) { printf("    %-22s declined by cuDNN (the contract runs the flash kernels)\n", "forward"); }
    download_floatx(h_out, d_out, nout);
    CUDA_CHECK(cudaMemcpy(h_lse, d_lse, nl * sizeof(float), cudaMemcpyDeviceToHost));
    if (ran_fwd) {
        ok &= compare("out", h_out, r_out, nout, 8 * u, 0);
        {
            int lse_ok = 1;
            double maxerr = 0;
            for (size_t i = 0; i < nl; i++) {
                const double e = fabs(h_lse[i] - r_lse[i]);
                if (!(e <= 1e-3 * fmax(1.0, fabs(r_lse[i])))) { lse_ok = 0; }
                if (e > maxerr || e != e) { maxerr = e; }
            }
            printf("    %-22s max err %.3e  %s\n", "lse", maxerr, lse_ok ? "ok" : "FAIL");
            ok &= lse_ok;
        }
    }
    /* where cuDNN declined the forward, the backward reads the flash kernels' out and lse */
    if (!ran_fwd) { run_forward(IMPL_FLASH, d_out, d_lse, d_scratch, d_qkv, s); }
    poison(d_dqkv, nqkv * sizeof(floatX));
    poison(d_scratch, scratch_floats(im, s) * sizeof(float));
    if (!run_backward(im, d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, s)) {
        printf("    %-22s declined by cuDNN (the contract runs the flash kernels)\n", "backward");
        bufs_free(&b);
        free(h_qkv); free(h_dout); free(h_out); free(h_lse); free(h_dqkv); free(h_dqkv2);
        free(r_out); free(r_lse); free(r_dqkv);
        return ok;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    download_floatx(h_dqkv, d_dqkv, nqkv);
    /* compare dq, dk, dv separately (each has its own scale) */
    const char* names[3] = {"dq", "dk", "dv"};
    double max_dout = 0, max_qkv = 0; /* the dq/dk floor of the header's tolerance argument */
    for (size_t i = 0; i < nout; i++) { max_dout = fmax(max_dout, fabs(h_dout[i])); }
    for (size_t i = 0; i < nqkv; i++) { max_qkv = fmax(max_qkv, fabs(h_qkv[i])); }
    const int hs = s.C / s.NH;
    const double cancel_floor = 2.0 * hs * 0x1p-24 * max_dout * max_qkv * max_qkv / sqrt((double)hs);
    for (int part = 0; part < 3; part++) {
        const size_t n = (size_t)s.B * s.T * s.C;
        float* g = (float*)malloc(n * sizeof(float));
        double* r = (double*)malloc(n * sizeof(double));
        for (size_t row = 0; row < (size_t)s.B * s.T; row++)
            for (int c = 0; c < s.C; c++) {
                g[row * s.C + c] = h_dqkv[row * 3 * s.C + part * s.C + c];
                r[row * s.C + c] = r_dqkv[row * 3 * s.C + part * s.C + c];
            }
        ok &= compare(names[part], g, r, n, 8 * u, part < 2 ? cancel_floor : 0.0);
        free(g);
        free(r);
    }
    /* determinism: a second backward must match bit for bit */
    poison(d_dqkv, nqkv * sizeof(floatX));
    poison(d_scratch, scratch_floats(im, s) * sizeof(float));
    run_backward(im, d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, s);
    CUDA_CHECK(cudaDeviceSynchronize());
    download_floatx(h_dqkv2, d_dqkv, nqkv);
    const int same = memcmp(h_dqkv, h_dqkv2, nqkv * sizeof(float)) == 0;
    printf("    %-22s %s\n", "backward deterministic", same ? "ok" : (im == IMPL_CUDNN ? "no (cuDNN)" : "FAIL"));
    if (im != IMPL_CUDNN) { ok &= same; }

    bufs_free(&b);
    free(h_qkv); free(h_dout); free(h_out); free(h_lse); free(h_dqkv); free(h_dqkv2);
    free(r_out); free(r_lse); free(r_dqkv);
    return ok;
}

/* ------------------------------------------------------------------ timing */

static int cmp_float(const void* a, const void* b) {
    const float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

static void time_shape(Impl im, Shape s) {
    const size_t nqkv = (size_t)s.B * s.T * (s.C + 2 * shape_nkv(s) * (s.C / s.NH)), nout = (size_t)s.B * s.T * s.C;
    const size_t nl = (size_t)s.B * s.NH * s.T;
    Bufs b = bufs_alloc(nqkv, nout, nl, scratch_floats(im, s));
    floatX *d_qkv = b.qkv, *d_dout = b.dout, *d_out = b.out, *d_dqkv = b.dqkv;
    float *d_lse = b.lse, *d_scratch = b.scratch;
    float* tmp = (float*)malloc(nqkv * sizeof(float));
    random_floatx(tmp, d_qkv, nqkv);
    random_floatx(tmp, d_dout, nout);
    free(tmp);

    const int warmup = 5, reps = 50;
    float ms_f[50], ms_b[50];
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    if (!run_forward(im, d_out, d_lse, d_scratch, d_qkv, s) ||
        !run_backward(im, d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, s)) {
        printf("  %-8s B=%-3d T=%-5d C=%-5d NH=%-3d NKV=%-3d  declined by cuDNN: not timed\n", impl_name(im), s.B, s.T,
               s.C, s.NH, shape_nkv(s));
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
        bufs_free(&b);
        return;
    }
    for (int r = 0; r < warmup + reps; r++) {
        CUDA_CHECK(cudaEventRecord(e0, main_stream()));
        run_forward(im, d_out, d_lse, d_scratch, d_qkv, s);
        CUDA_CHECK(cudaEventRecord(e1, main_stream()));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (r >= warmup) { CUDA_CHECK(cudaEventElapsedTime(&ms_f[r - warmup], e0, e1)); }
        CUDA_CHECK(cudaEventRecord(e0, main_stream()));
        run_backward(im, d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, s);
        CUDA_CHECK(cudaEventRecord(e1, main_stream()));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (r >= warmup) { CUDA_CHECK(cudaEventElapsedTime(&ms_b[r - warmup], e0, e1)); }
    }
    qsort(ms_f, reps, sizeof(float), cmp_float);
    qsort(ms_b, reps, sizeof(float), cmp_float);
    const double hs = (double)(s.C / s.NH);
    const double flops_f = 4.0 * s.B * s.NH * (double)s.T * s.T * hs / 2.0;
    const double flops_b = 2.5 * flops_f;
    const double mf = ms_f[reps / 2], mb = ms_b[reps / 2];
    const double tf = flops_f / (mf * 1e-3) / 1e12, tb = flops_b / (mb * 1e-3) / 1e12;
    printf("  %-8s B=%-3d T=%-5d C=%-5d NH=%-3d NKV=%-3d hs=%-4d  fwd %8.3f ms %7.1f TFLOP/s (%4.1f%%)  "
           "bwd %8.3f ms %7.1f TFLOP/s (%4.1f%%)\n",
           impl_name(im), s.B, s.T, s.C, s.NH, shape_nkv(s), s.C / s.NH, mf, tf, 100.0 * tf / PEAK_TFLOPS, mb, tb,
           100.0 * tb / PEAK_TFLOPS);
    /* one line per backward for scripts/gpu_check.sh's table (median ms) */
    printf("time attention_backward %s B=%d T=%d C=%d NH=%d %.4f ms\n", impl_name(im), s.B, s.T, s.C, s.NH, mb);
    if (im == IMPL_FLASH) { /* the backward's first pass alone (issue 15, item 9: 128-bit loads) */
        for (int r = 0; r < warmup + reps; r++) {
            CUDA_CHECK(cudaEventRecord(e0, main_stream()));
            attention_backward_rowdot(d_scratch, d_dout, d_out, s.B, s.T, s.C, s.NH);
            CUDA_CHECK(cudaEventRecord(e1, main_stream()));
            CUDA_CHECK(cudaEventSynchronize(e1));
            if (r >= warmup) { CUDA_CHECK(cudaEventElapsedTime(&ms_b[r - warmup], e0, e1)); }
        }
        qsort(ms_b, reps, sizeof(float), cmp_float);
        /* reads dO and O once (2 B T C floatX), writes D (B NH T fp32); HBM3e 4.8 TB/s */
        const double bytes = 2.0 * nout * sizeof(floatX) + nl * sizeof(float), mr = ms_b[reps / 2];
        printf("time attention_backward_rowdot B=%d T=%d C=%d %9.4f ms %8.1f GB/s %5.1f%% of 4800 GB/s (floor %.4f ms)\n",
               s.B, s.T, s.C, mr, bytes / (mr * 1e-3) / 1e9, 100.0 * bytes / (mr * 1e-3) / 4.8e12, bytes / 4.8e12 * 1e3);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    bufs_free(&b);
}

/* ------------------------------------------------------------------ grouped-query attention (contract) */

/* checks attention_forward / attention_backward (llmc/cuda/attention_gqa.cuh; im IMPL_CONTRACT) or cuDNN's SDPA alone
 * (IMPL_CUDNN) at NKV kv heads; returns 1 on pass (a shape cuDNN declines: reported, not a failure) */
static int check_gqa(Impl im, Shape s, int NKV) {
    const int hs = s.C / s.NH, g = s.NH / NKV, QW = s.C + 2 * NKV * hs;
    const size_t N = (size_t)s.B * s.T, nq = N * QW, nx = N * 3 * s.C, nout = N * s.C, nl = (size_t)s.B * s.NH * s.T;
    const size_t nscr = attention_scratch_floats(s.B, s.T, s.C, s.NH, NKV);
    float* h_qkv = (float*)malloc(nq * sizeof(float));
    float* h_x = (float*)malloc(nx * sizeof(float));
    float* h_dout = (float*)malloc(nout * sizeof(float));
    float* h_out = (float*)malloc(nout * sizeof(float));
    float* h_dqkv = (float*)malloc(nq * sizeof(float));
    float* h_dqkv2 = (float*)malloc(nq * sizeof(float));
    double* r_out = (double*)malloc(nout * sizeof(double));
    double* r_lse = (double*)malloc(nl * sizeof(double));
    double* r_xd = (double*)malloc(nx * sizeof(double));
    double* r_dqkv = (double*)malloc(nq * sizeof(double));
    if (!h_qkv || !h_x || !h_dout || !h_out || !h_dqkv || !h_dqkv2 || !r_out || !r_lse || !r_xd || !r_dqkv) {
        FATAL("out of host memory");
    }
    Bufs b = bufs_alloc(nq, nout, nl, nscr);
    floatX *d_qkv = b.qkv, *d_dout = b.dout, *d_out = b.out, *d_dqkv = b.dqkv;
    float *d_lse = b.lse, *d_scratch = b.scratch;
    random_floatx(h_qkv, d_qkv, nq);
    random_floatx(h_dout, d_dout, nout);
    /* the multi-head problem: kv head h/g for query head h */
    for (size_t n = 0; n < N; n++)
        for (int c = 0; c < 3 * s.C; c++) {
            const int sec = c / s.C, h = (c % s.C) / hs, d = c % hs;
            h_x[n * 3 * s.C + c] = sec == 0 ? h_qkv[n * QW + c] : h_qkv[n * QW + s.C + (sec - 1) * NKV * hs + (h / g) * hs + d];
        }
    ref_forward(r_out, r_lse, h_x, s.B, s.T, s.C, s.NH);
    ref_backward(r_xd, h_dout, h_x, s.B, s.T, s.C, s.NH);
    double max_x[3] = {0, 0, 0}; /* max |per-head multi-head gradient| of dq, dk, dv */
    for (size_t n = 0; n < N; n++) {
        for (int c = 0; c < 3 * s.C; c++) { max_x[c / s.C] = fmax(max_x[c / s.C], fabs(r_xd[n * 3 * s.C + c])); }
        for (int c = 0; c < QW; c++) {
            if (c < s.C) { r_dqkv[n * QW + c] = r_xd[n * 3 * s.C + c]; continue; }
            const int sec = c < s.C + NKV * hs ? 1 : 2, j = (c - s.C - (sec - 1) * NKV * hs) / hs, d = c % hs;
            double acc = 0;
            for (int r = 0; r < g; r++) { acc += r_xd[n * 3 * s.C + sec * s.C + (j * g + r) * hs + d]; }
            r_dqkv[n * QW + c] = acc;
        }
    }
    printf("  gqa %-8s B=%d T=%d C=%d NH=%d NKV=%d (hs=%d, g=%d)\n", impl_name(im), s.B, s.T, s.C, s.NH, NKV, hs, g);
    s.NKV = NKV;
    const double u = floatx_u();
    int ok = 1;
    poison(d_out, nout * sizeof(floatX));
    poison(d_lse, nl * sizeof(float));
    poison(d_scratch, nscr * sizeof(float));
    int ran = run_forward(im, d_out, d_lse, d_scratch, d_qkv, s);
    CUDA_CHECK(cudaDeviceSynchronize());
    download_floatx(h_out, d_out, nout);
    if (ran) { ok &= compare("out", h_out, r_out, nout, 8 * u, 0); }
    for (int run = 0; run < 2 && ran; run++) {
        poison(d_dqkv, nq * sizeof(floatX));
        poison(d_scratch, nscr * sizeof(float));
        ran = run_backward(im, d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, s);
        CUDA_CHECK(cudaDeviceSynchronize());
        download_floatx(run ? h_dqkv2 : h_dqkv, d_dqkv, nq);
    }
    if (!ran) { /* only IMPL_CUDNN declines */
        printf("    declined by cuDNN (the contract runs the flash kernels)\n");
        bufs_free(&b);
        free(h_qkv); free(h_x); free(h_dout); free(h_out); free(h_dqkv); free(h_dqkv2);
        free(r_out); free(r_lse); free(r_xd); free(r_dqkv);
        return ok;
    }
    double max_dout = 0, max_qkv = 0;
    for (size_t i = 0; i < nout; i++) { max_dout = fmax(max_dout, fabs(h_dout[i])); }
    for (size_t i = 0; i < nq; i++) { max_qkv = fmax(max_qkv, fabs(h_qkv[i])); }
    const double floor = 2.0 * hs * 0x1p-24 * max_dout * max_qkv * max_qkv / sqrt((double)hs);
    const char* names[3] = {"dq", "dk (group sums)", "dv (group sums)"};
    const int off[3] = {0, s.C, s.C + NKV * hs}, width[3] = {s.C, NKV * hs, NKV * hs};
    for (int part = 0; part < 3; part++) {
        const size_t n = N * width[part];
        float* gp = (float*)malloc(n * sizeof(float));
        double* rp = (double*)malloc(n * sizeof(double));
        for (size_t row = 0; row < N; row++)
            for (int c = 0; c < width[part]; c++) {
                gp[row * width[part] + c] = h_dqkv[row * QW + off[part] + c];
                rp[row * width[part] + c] = r_dqkv[row * QW + off[part] + c];
            }
        if (part == 0) {
            ok &= compare(names[part], gp, rp, n, 8 * u, floor);
        } else { /* the header's GQA bound, as an absolute tolerance */
            ok &= compare(names[part], gp, rp, n, 0.0, g * (9 * u * max_x[part] + (part == 1 ? floor : 0.0)));
        }
        free(gp);
        free(rp);
    }
    const int same = memcmp(h_dqkv, h_dqkv2, nq * sizeof(float)) == 0;
#ifdef USE_CUDNN
    const int cudnn = attention_cudnn_supported(hs); /* the contract ran cuDNN's backward (deterministic or not) */
#else
    const int cudnn = 0;
#endif
    printf("    %-22s %s\n", "backward deterministic", same ? "ok" : (cudnn ? "no (cuDNN)" : "FAIL"));
    if (!cudnn) { ok &= same; }
    bufs_free(&b);
    free(h_qkv); free(h_x); free(h_dout); free(h_out); free(h_dqkv); free(h_dqkv2);
    free(r_out); free(r_lse); free(r_xd); free(r_dqkv);
    return ok;
}

int main(int argc, char** argv) {
    const int check_only = (argc > 1 && strcmp(argv[1], "check") == 0);
    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d), floatX = %s\n", prop.name, prop.major, prop.minor, PRECISION_NAME);

    const Shape shapes[] = {
        {2, 1, 64, 4, 0},     /* T = 1, hs 16 (test fixture config) */
        {2, 17, 64, 4, 0},    /* hs 16, partial tile */
        {2, 64, 64, 2, 0},    /* hs 32, exactly one tile */
        {2, 100, 128, 2, 0},  /* hs 64, partial second tile */
        {1, 129, 256, 2, 0},  /* hs 128, one row into the third tile */
        {1, 300, 768, 12, 0}, /* GPT-2 head size, several tiles */
        {2, 333, 768, 12, 0}, /* GPT-2 head size, 6 key tiles adding to the last dQ tile, B*NH = 24 */
        {1, 77, 96, 2, 0},    /* hs 48: fallback path */
        {1, 65, 24, 3, 0},    /* hs 8: fallback path */
    };
    const int nshapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
    const Impl impls[NIMPLS] = {IMPL_FLASH, IMPL_FA2, IMPL_FALLBACK, IMPL_CUDNN};
    int passed = 0, failed = 0;
    printf("checks (tolerance 8u*max|ref|, u = %g):\n", floatx_u());
    for (int k = 0; k < NIMPLS; k++)
        for (int i = 0; i < nshapes; i++) {
            if (!impl_applies(impls[k], shapes[i])) { continue; }
            if (check_shape(impls[k], shapes[i])) { passed++; } else { failed++; }
        }
    /* grouped-query attention through the contract: B, T, C, NH and NKV */
    const Shape gqa_shapes[] = {
        {2, 100, 128, 4, 2},  /* hs 32, g 2, partial second tile */
        {1, 129, 256, 4, 1},  /* hs 64, multi-query, one row into the third tile */
        {2, 77, 768, 12, 4},  /* GPT-2 head size, g 3 */
        {1, 65, 96, 8, 2},    /* hs 12: the CUDA-core fallback (cuDNN takes hs % 8 == 0 only) */
    };
    for (const Shape& q : gqa_shapes) {
        if (check_gqa(IMPL_CONTRACT, q, q.NKV)) { passed++; } else { failed++; }
    }
    /* and through cuDNN's SDPA alone where this build has it (the contract may fall back to flash silently) */
    for (const Shape& q : gqa_shapes) {
        if (!impl_applies(IMPL_CUDNN, q)) { continue; }
        if (check_gqa(IMPL_CUDNN, q, q.NKV)) { passed++; } else { failed++; }
    }
    printf("attention checks: %d passed, %d failed\n", passed, failed);
    if (!check_only) {
        if (failed) { printf("note: %d check(s) FAILED above; the times below are of kernels with wrong output\n", failed); }
        printf("timing (median of 50 after 5 warm-up; %% of %.0f TFLOP/s dense BF16 H100/H200 SXM):\n", PEAK_TFLOPS);
        const Shape tshapes[] = {
            {64, 1024, 768, 12, 0},  /* GPT-2 124M's training micro-batch, hs 64 */
            {16, 1024, 768, 12, 0},  /* a quarter of it */
            {8, 2048, 768, 12, 0},   /* longer context */
            {16, 1024, 1536, 12, 0}, /* hs 128 */
        };
        const int ntshapes = (int)(sizeof(tshapes) / sizeof(tshapes[0]));
        for (int k = 0; k < NIMPLS; k++)
            for (int i = 0; i < ntshapes; i++) {
                if (impls[k] == IMPL_FALLBACK || !impl_applies(impls[k], tshapes[i])) { continue; }
                time_shape(impls[k], tshapes[i]);
            }
        /* the contract at GPT-2 124M's micro-batch: multi-head, then 4 and 1 kv heads (native GQA's cost: the flash
         * kernels', or cuDNN's under USE_CUDNN) */
        printf("timing of the contract (attention_forward/backward, llmc/cuda/attention_gqa.cuh):\n");
        const Shape cshapes[] = {{64, 1024, 768, 12, 12}, {64, 1024, 768, 12, 4}, {64, 1024, 768, 12, 1}};
        for (const Shape& cs : cshapes) { time_shape(IMPL_CONTRACT, cs); }
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
