/*
 * dev/cuda/global_norm.cu -- checks and times global_norm_squared, scale_floats and has_inf_or_nan
 * (llmc/cuda/adamw.cuh) on n = 124,475,904 gradients (GPT-2 124M).
 * Reference: fp64 sum of squares. Tolerance: fp32 accumulation in a fixed tree of ~n/(1024*512)
 * sequential terms per thread then two tree levels: relative error ~ (n/524288 + 20) * 2^-24 -> 1e-4.
 * Determinism: two runs bitwise equal; accumulate=1 adds to the previous value.
 * scale_floats: one rounding. has_inf_or_nan: 0 on finite data, 1 after planting one Inf and one NaN.
 */
#include "common.h"

int main(void) {
    backend_init(0, 1);
    const size_t n = 124475904;
    std::vector<float> hg(n);
    floatX* g = upload_random(hg.data(), n, -1e-2f, 1e-2f, 1, "grads");
    float* out = (float*)dev_malloc(2 * sizeof(float), "norm");
    double ref = 0;
    for (size_t i = 0; i < n; i++) { ref += (double)hg[i] * hg[i]; }

    poison(out, 2 * sizeof(float));
    global_norm_squared(out, g, n, 0);
    global_norm_squared(out + 1, g, n, 0);
    std::vector<float> r = download_f32(out, 2);
    check_close("global_norm_squared", &r[0], &ref, 1, 0.0, 1e-4);
    check_true("global_norm_squared deterministic", memcmp(&r[0], &r[1], sizeof(float)) == 0);
    global_norm_squared(out, g, n, 1);
    r = download_f32(out, 1);
    double ref2 = 2.0 * ref;
    check_close("global_norm_squared accumulate", &r[0], &ref2, 1, 0.0, 1e-4);
    /* odd length exercises the scalar path */
    double ref3 = 0;
    for (size_t i = 0; i < 1000003; i++) { ref3 += (double)hg[i] * hg[i]; }
    global_norm_squared(out, g, 1000003, 0);
    r = download_f32(out, 1);
    check_close("global_norm_squared n=1000003", &r[0], &ref3, 1, 0.0, 1e-4);

    check_true("has_inf_or_nan(finite) == 0", has_inf_or_nan(g, n) == 0);
    floatX* g2 = (floatX*)dev_malloc(n * sizeof(floatX), "grads copy");
    dev_memcpy_d2d(g2, g, n * sizeof(floatX));
    scale_floats(g2, 0.25f, n);
    std::vector<float> gs = download(g2, n);
    std::vector<double> rs(n);
    for (size_t i = 0; i < n; i++) { rs[i] = 0.25 * hg[i]; }
    check_close("scale_floats", gs.data(), rs.data(), n, 0.0, UNIT_ROUNDOFF);
    float bad[2] = {INFINITY, NAN};
    dev_upload_floats(g2 + n - 1, &bad[0], 1);
    check_true("has_inf_or_nan(Inf at the end) == 1", has_inf_or_nan(g2, n) == 1);
    dev_upload_floats(g2 + n - 1, &hg[n - 1], 1);
    dev_upload_floats(g2 + 12345, &bad[1], 1);
    check_true("has_inf_or_nan(NaN inside) == 1", has_inf_or_nan(g2, n) == 1);

    const double eb = sizeof(floatX);
    report_bw("global_norm_squared", bench_ms([&] { global_norm_squared(out, g, n, 0); }), n * eb);
    report_bw("scale_floats", bench_ms([&] { scale_floats(g2, 1.0f, n); }), 2.0 * n * eb);
    report_bw("has_inf_or_nan (incl. sync)", bench_ms([&] { (void)has_inf_or_nan(g, n); }), n * eb);
    dev_free(g); dev_free(g2); dev_free(out);
    backend_shutdown();
    return finish("global_norm");
}
