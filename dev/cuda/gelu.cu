/*
 * dev/cuda/gelu.cu -- checks and times the MLP activations and the residual add of llmc/cuda/gelu.cuh:
 * gelu_forward, gelu_backward_inplace, residual_forward at the GPT-2 124M MLP shape B=8, T=1024, 4C=3072 (25.2M
 * elements); relu2_forward, relu2_backward_inplace (ReLU^2, So et al. 2021) at the same shape; swiglu_forward,
 * swiglu_backward (SwiGLU, Shazeer 2020; inp (N,2F) rows [gate | up], out (N,F)) at N=8192 rows, F=2048.
 * Reference: fp64 formulas on the same (rounded) inputs.
 * Tolerance: one output rounding (UNIT_ROUNDOFF*|ref|) + fast-math tanh (FAST_MATH_REL*|x| for gelu,
 * which is x*(1+tanh)/2; the derivative adds a |x|*sech^2 term, bounded the same way) + 1e-6 absolute. ReLU^2: one
 * rounding (r*r and d*2r, 2r exact) + 1e-7 absolute. SwiGLU (gates in [-4, 4], ups in [-2, 2], dout in [-1, 1]):
 * __expf errs by 2 + floor(1.173|g|) <= 6 ulp of e^-g here, so the sigmoid by (1-s) 6 * 2^-23 relative, plus up to four
 * fp32 roundings: rtol UNIT_ROUNDOFF + 1e-6; atol 2e-6 forward, 4e-6 backward (llmc/cuda/gelu.cuh bounds the
 * absolute error of silu' by 6e-8 from __expf plus |g| times the rounding of s near 1, 4 * 6e-8, times |dout up| <= 2).
 * Timed at the check shape and at the training shape B=64 T=1024 (GELU and ReLU^2 on 4C = 3072 columns: 201M
 * elements, 403 MB per bf16 tensor; the residual on C = 768 columns: 50.3M elements, 100 MB; SwiGLU at the d12-like
 * N = 65536 rows, F = 2048: inp 537 MB, out 268 MB in bf16), inputs tiled from the checked ones.
 * Bytes floors (every input read once, every output written once): gelu/relu2 forward 2n, their backward 3n,
 * residual 3n, swiglu_forward 3NF (read 2NF, write NF), swiglu_backward 5NF (read inp 2NF and dout NF, write dinp
 * 2NF), times sizeof(floatX).
 */
#include "common.h"

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}
static double silu_ref(double g) { return g / (1.0 + exp(-g)); }
static double silu_grad_ref(double g) { double s = 1.0 / (1.0 + exp(-g)); return s * (1.0 + g * (1.0 - s)); }

int main(void) {
    backend_init(0, 1);
    const size_t n = (size_t)8 * 1024 * 3072;
    std::vector<float> hx(n), hd(n), hy(n);
    floatX* x = upload_random(hx.data(), n, -4.0f, 4.0f, 1, "x");
    floatX* d = upload_random(hd.data(), n, -1.0f, 1.0f, 2, "d");
    floatX* y = upload_random(hy.data(), n, -1.0f, 1.0f, 3, "y");
    floatX* out = (floatX*)dev_malloc(n * sizeof(floatX), "out");
    std::vector<double> ref(n);

    poison(out, n * sizeof(floatX));
    gelu_forward(out, x, n);
    for (size_t i = 0; i < n; i++) { ref[i] = gelu_ref(hx[i]); }
    std::vector<float> got = download(out, n);
    /* abs term: fast-math tanh error times |x|/2 <= 2*FAST_MATH_REL for |x| <= 4 */
    check_close("gelu_forward", got.data(), ref.data(), n, 4.0 * FAST_MATH_REL + 1e-6, UNIT_ROUNDOFF);

    dev_memcpy_d2d(out, d, n * sizeof(floatX));
    gelu_backward_inplace(out, x, n);
    for (size_t i = 0; i < n; i++) { ref[i] = (double)hd[i] * gelu_grad_ref(hx[i]); }
    got = download(out, n);
    check_close("gelu_backward_inplace", got.data(), ref.data(), n, 8.0 * FAST_MATH_REL + 1e-6, UNIT_ROUNDOFF);

    poison(out, n * sizeof(floatX));
    residual_forward(out, x, y, n);
    for (size_t i = 0; i < n; i++) { ref[i] = (double)hx[i] + hy[i]; }
    got = download(out, n);
    check_close("residual_forward", got.data(), ref.data(), n, 1e-7, UNIT_ROUNDOFF);

    /* odd length: scalar path, last element must be written */
    poison(out, n * sizeof(floatX));
    gelu_forward(out, x, 1001);
    got = download(out, 1001);
    for (size_t i = 0; i < 1001; i++) { ref[i] = gelu_ref(hx[i]); }
    check_close("gelu_forward n=1001 (scalar path)", got.data(), ref.data(), 1001, 4.0 * FAST_MATH_REL + 1e-6, UNIT_ROUNDOFF);

    /* ReLU^2 */
    poison(out, n * sizeof(floatX));
    relu2_forward(out, x, n);
    for (size_t i = 0; i < n; i++) { ref[i] = hx[i] > 0 ? (double)hx[i] * hx[i] : 0.0; }
    got = download(out, n);
    check_close("relu2_forward", got.data(), ref.data(), n, 1e-7, UNIT_ROUNDOFF);
    dev_memcpy_d2d(out, d, n * sizeof(floatX));
    relu2_backward_inplace(out, x, n);
    for (size_t i = 0; i < n; i++) { ref[i] = hx[i] > 0 ? (double)hd[i] * 2.0 * hx[i] : 0.0; }
    got = download(out, n);
    check_close("relu2_backward_inplace", got.data(), ref.data(), n, 1e-7, UNIT_ROUNDOFF);

    /* SwiGLU: N rows of [gate (F) | up (F)] */
    const int SN = 8192, SF = 2048;
    const size_t sno = (size_t)SN * SF, sni = 2 * sno;
    std::vector<float> hs(sni), hsd(sno);
    rand_floats(hs.data(), sni, -2.0f, 2.0f, 4);
    for (int r = 0; r < SN; r++) {
        for (int f = 0; f < SF; f++) { hs[(size_t)r * 2 * SF + f] *= 2.0f; } /* gates in [-4, 4] */
    }
    floatX* sinp = (floatX*)dev_malloc(sni * sizeof(floatX), "swiglu inp");
    dev_upload_floats(sinp, hs.data(), sni);
    dev_download_floats(hs.data(), sinp, sni); /* the rounded values the kernels see */
    floatX* sdout = upload_random(hsd.data(), sno, -1.0f, 1.0f, 5, "swiglu dout");
    floatX* sout = (floatX*)dev_malloc(sno * sizeof(floatX), "swiglu out");
    floatX* sdinp = (floatX*)dev_malloc(sni * sizeof(floatX), "swiglu dinp");
    std::vector<double> sref(sni);
    poison(sout, sno * sizeof(floatX));
    swiglu_forward(sout, sinp, SN, SF);
    for (int r = 0; r < SN; r++) {
        for (int f = 0; f < SF; f++) {
            const float* row = hs.data() + (size_t)r * 2 * SF;
            sref[(size_t)r * SF + f] = silu_ref(row[f]) * row[SF + f];
        }
    }
    got = download(sout, sno);
    check_close("swiglu_forward N=8192 F=2048", got.data(), sref.data(), sno, 2e-6, UNIT_ROUNDOFF + 1e-6);
    poison(sdinp, sni * sizeof(floatX));
    swiglu_backward(sdinp, sdout, sinp, SN, SF);
    for (int r = 0; r < SN; r++) {
        for (int f = 0; f < SF; f++) {
            const float* row = hs.data() + (size_t)r * 2 * SF;
            const double dd = hsd[(size_t)r * SF + f];
            sref[(size_t)r * 2 * SF + f] = dd * row[SF + f] * silu_grad_ref(row[f]);
            sref[(size_t)r * 2 * SF + SF + f] = dd * silu_ref(row[f]);
        }
    }
    got = download(sdinp, sni);
    check_close("swiglu_backward N=8192 F=2048 (dgate | dup)", got.data(), sref.data(), sni, 4e-6, UNIT_ROUNDOFF + 1e-6);
    /* F = 2047: the element path, last element of each row written */
    poison(sout, sno * sizeof(floatX));
    swiglu_forward(sout, sinp, 64, 2047);
    for (int r = 0; r < 64; r++) {
        for (int f = 0; f < 2047; f++) {
            const float* row = hs.data() + (size_t)r * 2 * 2047;
            sref[(size_t)r * 2047 + f] = silu_ref(row[f]) * row[2047 + f];
        }
    }
    got = download(sout, (size_t)64 * 2047);
    check_close("swiglu_forward N=64 F=2047 (element path)", got.data(), sref.data(), (size_t)64 * 2047, 2e-6,
                UNIT_ROUNDOFF + 1e-6);

    const double eb = sizeof(floatX);
    report_bw("gelu_forward", bench_ms([&] { gelu_forward(out, x, n); }), 2.0 * n * eb);
    report_bw("gelu_backward_inplace", bench_ms([&] { gelu_backward_inplace(out, x, n); }), 3.0 * n * eb);
    report_bw("residual_forward", bench_ms([&] { residual_forward(out, x, y, n); }), 3.0 * n * eb);
    report_bw("relu2_forward", bench_ms([&] { relu2_forward(out, x, n); }), 2.0 * n * eb);
    report_bw("relu2_backward_inplace", bench_ms([&] { relu2_backward_inplace(out, x, n); }), 3.0 * n * eb);
    report_bw("swiglu_forward N=8192 F=2048", bench_ms([&] { swiglu_forward(sout, sinp, SN, SF); }), 3.0 * sno * eb);
    report_bw("swiglu_backward N=8192 F=2048", bench_ms([&] { swiglu_backward(sdinp, sdout, sinp, SN, SF); }),
              5.0 * sno * eb);

    const size_t nt = (size_t)TRAIN_B * TRAIN_T * 3072, nr = (size_t)TRAIN_B * TRAIN_T * 768;
    note_shapes("B=8 T=1024 4C=3072; SwiGLU N=8192 F=2048",
                "B=64 T=1024 (GELU, ReLU^2 4C=3072, residual C=768); SwiGLU N=65536 F=2048");
    floatX* tx = tiled_copy(x, n, nt, "x (training shape)");
    floatX* tout = tiled_copy(d, n, nt, "out (training shape)");
    floatX* ty = tiled_copy(y, n, nr, "y (training shape)");
    report_bw("gelu_forward B=64 T=1024", bench_ms([&] { gelu_forward(tout, tx, nt); }), 2.0 * nt * eb);
    report_bw("gelu_backward_inplace B=64 T=1024", bench_ms([&] { gelu_backward_inplace(tout, tx, nt); }), 3.0 * nt * eb);
    report_bw("residual_forward B=64 T=1024 C=768", bench_ms([&] { residual_forward(tout, tx, ty, nr); }), 3.0 * nr * eb);
    report_bw("relu2_forward B=64 T=1024", bench_ms([&] { relu2_forward(tout, tx, nt); }), 2.0 * nt * eb);
    report_bw("relu2_backward_inplace B=64 T=1024", bench_ms([&] { relu2_backward_inplace(tout, tx, nt); }), 3.0 * nt * eb);
    dev_free(tx); dev_free(tout); dev_free(ty);
    /* SwiGLU at the d12-like training shape: N = B*T = 65536 rows, F = 2048 */
    const int TN = TRAIN_B * TRAIN_T;
    const size_t tno = (size_t)TN * SF, tni = 2 * tno;
    floatX* tsinp = tiled_copy(sinp, sni, tni, "swiglu inp (training shape)");
    floatX* tsdout = tiled_copy(sdout, sno, tno, "swiglu dout (training shape)");
    floatX* tsout = (floatX*)dev_malloc(tno * sizeof(floatX), "swiglu out (training shape)");
    floatX* tsdinp = (floatX*)dev_malloc(tni * sizeof(floatX), "swiglu dinp (training shape)");
    report_bw("swiglu_forward N=65536 F=2048", bench_ms([&] { swiglu_forward(tsout, tsinp, TN, SF); }), 3.0 * tno * eb);
    report_bw("swiglu_backward N=65536 F=2048", bench_ms([&] { swiglu_backward(tsdinp, tsdout, tsinp, TN, SF); }),
              5.0 * tno * eb);
    dev_free(tsinp); dev_free(tsdout); dev_free(tsout); dev_free(tsdinp);
    dev_free(sinp); dev_free(sdout); dev_free(sout); dev_free(sdinp);
    dev_free(x); dev_free(d); dev_free(y); dev_free(out);
    backend_shutdown();
    return finish("gelu");
}
