/*
 * dev/cuda/gelu.cu -- checks and times gelu_forward, gelu_backward_inplace, residual_forward
 * (llmc/cuda/gelu.cuh) at the GPT-2 124M MLP shape B=8, T=1024, 4C=3072 (25.2M elements).
 * Reference: fp64 tanh-approximation GELU on the same (rounded) inputs.
 * Tolerance: one output rounding (UNIT_ROUNDOFF*|ref|) + fast-math tanh (FAST_MATH_REL*|x| for gelu,
 * which is x*(1+tanh)/2; the derivative adds a |x|*sech^2 term, bounded the same way) + 1e-6 absolute.
 * Timed at the check shape and at the training shape B=64 T=1024 (GELU on 4C = 3072 columns: 201M elements, 403 MB per
 * bf16 tensor; the residual on C = 768 columns: 50.3M elements, 100 MB), inputs tiled from the checked ones.
 */
#include "common.h"

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

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

    const double eb = sizeof(floatX);
    report_bw("gelu_forward", bench_ms([&] { gelu_forward(out, x, n); }), 2.0 * n * eb);
    report_bw("gelu_backward_inplace", bench_ms([&] { gelu_backward_inplace(out, x, n); }), 3.0 * n * eb);
    report_bw("residual_forward", bench_ms([&] { residual_forward(out, x, y, n); }), 3.0 * n * eb);

    const size_t nt = (size_t)TRAIN_B * TRAIN_T * 3072, nr = (size_t)TRAIN_B * TRAIN_T * 768;
    note_shapes("B=8 T=1024 4C=3072", "B=64 T=1024 (GELU 4C=3072, residual C=768)");
    floatX* tx = tiled_copy(x, n, nt, "x (training shape)");
    floatX* tout = tiled_copy(d, n, nt, "out (training shape)");
    floatX* ty = tiled_copy(y, n, nr, "y (training shape)");
    report_bw("gelu_forward B=64 T=1024", bench_ms([&] { gelu_forward(tout, tx, nt); }), 2.0 * nt * eb);
    report_bw("gelu_backward_inplace B=64 T=1024", bench_ms([&] { gelu_backward_inplace(tout, tx, nt); }), 3.0 * nt * eb);
    report_bw("residual_forward B=64 T=1024 C=768", bench_ms([&] { residual_forward(tout, tx, ty, nr); }), 3.0 * nr * eb);
    dev_free(tx); dev_free(tout); dev_free(ty);
    dev_free(x); dev_free(d); dev_free(y); dev_free(out);
    backend_shutdown();
    return finish("gelu");
}
