/*
 * dev/cuda/adamw.cu -- checks and times adamw_update (llmc/cuda/adamw.cuh) on n = 124,475,904
 * elements (GPT-2 124M with padded vocab).
 * Reference: fp64 AdamW (torch.optim.AdamW formula) on a 1M-element prefix.
 * Checks: master weights and moments (fp32; tolerance 1e-5 relative + 1e-8: fp32 arithmetic with
 * --use_fast_math division/sqrt, a few ulps); params equal a rounding of master to floatX within one
 * floatX ulp (2*UNIT_ROUNDOFF*|master|); sharding independence: updating two halves with global_offset
 * gives bitwise the same params as one update of the whole; stochastic rounding is unbiased:
 * the mean rounding error over 1M elements is below 5 standard errors.
 */
#include "common.h"

int main(void) {
    backend_init(0, 1);
    const size_t n = 124475904, nref = (size_t)1 << 20;
    std::vector<float> hp(n), hg(n), hm(n), hv(n);
    floatX* params = upload_random(hp.data(), n, -0.1f, 0.1f, 1, "params");
    floatX* grads = upload_random(hg.data(), n, -0.01f, 0.01f, 2, "grads");
    rand_floats(hm.data(), n, -1e-3f, 1e-3f, 3);
    rand_floats(hv.data(), n, 0.0f, 1e-5f, 4);
    float* master = upload_floats_dev(hp.data(), n, "master");
    float* m = upload_floats_dev(hm.data(), n, "m");
    float* v = upload_floats_dev(hv.data(), n, "v");
    const float lr = 6e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    const int t = 3;
    const unsigned int seed = 1234;

    /* second copy for the sharded run */
    floatX* params2 = (floatX*)dev_malloc(n * sizeof(floatX), "params2");
    float* master2 = upload_floats_dev(hp.data(), n, "master2");
    float* m2 = upload_floats_dev(hm.data(), n, "m2");
    float* v2 = upload_floats_dev(hv.data(), n, "v2");
    dev_memcpy_d2d(params2, params, n * sizeof(floatX));

    adamw_update(params, master, grads, m, v, n, 0, lr, b1, b2, eps, wd, gs, t, seed);
    const size_t half = n / 2 + 8;
    adamw_update(params2, master2, grads, m2, v2, half, 0, lr, b1, b2, eps, wd, gs, t, seed);
    adamw_update(params2 + half, master2 + half, grads + half, m2 + half, v2 + half, n - half, half, lr, b1, b2, eps, wd, gs, t, seed);

    std::vector<double> rmas(nref), rm(nref), rv(nref);
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (size_t i = 0; i < nref; i++) {
        double g = (double)hg[i] * gs;
        rm[i] = b1 * (double)hm[i] + (1 - b1) * g;
        rv[i] = b2 * (double)hv[i] + (1 - b2) * g * g;
        double p = hp[i];
        rmas[i] = p - lr * ((rm[i] / bc1) / (sqrt(rv[i] / bc2) + eps) + wd * p);
    }
    std::vector<float> gm = download_f32(m, nref), gv = download_f32(v, nref), gmas = download_f32(master, nref);
    check_close("adamw m", gm.data(), rm.data(), nref, 1e-10, 1e-5);
    check_close("adamw v", gv.data(), rv.data(), nref, 1e-14, 1e-5);
    check_close("adamw master", gmas.data(), rmas.data(), nref, 1e-8, 1e-5);
    std::vector<float> gp = download(params, nref);
    std::vector<double> gmas_d(gmas.begin(), gmas.end());
    check_close("adamw params = round(master)", gp.data(), gmas_d.data(), nref, 1e-12, 2.0 * UNIT_ROUNDOFF);
    double mean_err = 0, mean_sq = 0;
    for (size_t i = 0; i < nref; i++) { double e = gp[i] - (double)gmas[i]; mean_err += e; mean_sq += e * e; }
    mean_err /= nref; mean_sq /= nref;
    double se = sqrt(mean_sq / nref);
    printf("     stochastic rounding: mean error %.3e, standard error %.3e\n", mean_err, se);
    check_true("adamw rounding unbiased (|mean error| < 5 standard errors)", FLOATX_IS_FLOAT || fabs(mean_err) < 5.0 * se + 1e-30);
    check_bitwise("adamw sharded (2 x global_offset) == unsharded params", params, params2, n * sizeof(floatX));
    check_bitwise("adamw sharded == unsharded master", master, master2, n * sizeof(float));

    /* floor: read grads, read+write params, master, m, v */
    const double bytes = (double)n * (sizeof(floatX) * 3.0 + 4.0 * 6.0);
    report_bw("adamw_update (master weights)", bench_ms([&] {
        adamw_update(params, master, grads, m, v, n, 0, lr, b1, b2, eps, wd, gs, t, seed); }), bytes);
    report_bw("adamw_update (no master)", bench_ms([&] {
        adamw_update(params, NULL, grads, m, v, n, 0, lr, b1, b2, eps, wd, gs, t, seed); }),
        (double)n * (sizeof(floatX) * 3.0 + 4.0 * 4.0));
    dev_free(params); dev_free(grads); dev_free(master); dev_free(m); dev_free(v);
    dev_free(params2); dev_free(master2); dev_free(m2); dev_free(v2);
    backend_shutdown();
    return finish("adamw");
}
