/*
 * dev/cuda/layernorm.cu -- checks and times layernorm_forward, fused_residual_layernorm_forward and
 * layernorm_backward (llmc/cuda/layernorm.cuh) at GPT-2 124M shapes: N = B*T = 8*1024, C = 768.
 * Reference: fp64 on the same rounded inputs (for the fused version, on the rounded residual).
 * Tolerances: outputs are rounded once to floatX (UNIT_ROUNDOFF*|ref|); the fp32 statistics over
 * C=768 terms and rsqrtf add ~1e-6 relative, covered by the absolute terms below (outputs are O(1)).
 * mean/rstd are fp32: 1e-5 relative. Backward dw/db sum N=8192 rows in fp32 (error ~ sqrt(N) 2^-24
 * relative to sum|terms|), then one rounding when accumulated into floatX.
 * Determinism: two backward runs are bitwise identical.
 * RMSNorm (Zhang & Sennrich 2019; rmsnorm_forward, fused_residual_rmsnorm_forward, rmsnorm_backward, the same kernels
 * with RMS = true) is checked and timed the same way, against fp64 with rstd = 1/sqrt(mean(x^2) + 1e-5), at the same
 * tolerances (the same arithmetic without the mean).
 * Timed at the check shape and at the training shape B=64 T=1024 (N = 65,536 rows, 100 MB per bf16 tensor: larger than
 * L2), with inputs tiled from the checked ones (the fp64 reference at N = 65,536 would be 8x the host work).
 */
#include "common.h"

int main(void) {
    backend_init(0, 1);
    const int N = 8 * 1024, C = 768;
    const size_t NC = (size_t)N * C;
    std::vector<float> hx(NC), hx2(NC), hw(C), hb(C), hdout(NC), hdinp(NC), hdw(C), hdb(C);
    floatX* x = upload_random(hx.data(), NC, -2.0f, 2.0f, 1, "x");
    floatX* x2 = upload_random(hx2.data(), NC, -2.0f, 2.0f, 2, "x2");
    floatX* w = upload_random(hw.data(), C, 0.5f, 1.5f, 3, "w");
    floatX* b = upload_random(hb.data(), C, -0.5f, 0.5f, 4, "b");
    floatX* dout = upload_random(hdout.data(), NC, -1.0f, 1.0f, 5, "dout");
    floatX* dinp = upload_random(hdinp.data(), NC, -1.0f, 1.0f, 6, "dinp");
    floatX* dw = upload_random(hdw.data(), C, -1.0f, 1.0f, 7, "dw");
    floatX* db = upload_random(hdb.data(), C, -1.0f, 1.0f, 8, "db");
    floatX* out = (floatX*)dev_malloc(NC * sizeof(floatX), "out");
    floatX* resid = (floatX*)dev_malloc(NC * sizeof(floatX), "resid");
    float* mean = (float*)dev_malloc(N * sizeof(float), "mean");
    float* rstd = (float*)dev_malloc(N * sizeof(float), "rstd");
    float* scratch = (float*)dev_malloc(layernorm_scratch_floats(N, C) * sizeof(float), "scratch");

    std::vector<double> rout(NC), rmean(N), rrstd(N);
    auto reference_forward = [&](const std::vector<float>& in) {
        for (int i = 0; i < N; i++) {
            const float* r = &in[(size_t)i * C];
            double m = 0, v = 0;
            for (int c = 0; c < C; c++) { m += r[c]; }
            m /= C;
            for (int c = 0; c < C; c++) { v += (r[c] - m) * (r[c] - m); }
            double s = 1.0 / sqrt(v / C + 1e-5);
            rmean[i] = m; rrstd[i] = s;
            for (int c = 0; c < C; c++) { rout[(size_t)i * C + c] = (r[c] - m) * s * hw[c] + hb[c]; }
        }
    };
    poison(out, NC * sizeof(floatX)); poison(mean, N * sizeof(float)); poison(rstd, N * sizeof(float));
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    reference_forward(hx);
    check_close("layernorm_forward out", download(out, NC).data(), rout.data(), NC, 1e-5, UNIT_ROUNDOFF);
    check_close("layernorm_forward mean", download_f32(mean, N).data(), rmean.data(), N, 1e-6, 1e-5);
    check_close("layernorm_forward rstd", download_f32(rstd, N).data(), rrstd.data(), N, 1e-6, 1e-5);

    poison(out, NC * sizeof(floatX)); poison(resid, NC * sizeof(floatX));
    fused_residual_layernorm_forward(resid, out, mean, rstd, x, x2, w, b, N, C);
    std::vector<float> hres = download(resid, NC);
    std::vector<double> rres(NC);
    for (size_t i = 0; i < NC; i++) { rres[i] = (double)hx[i] + hx2[i]; }
    check_close("fused residual", hres.data(), rres.data(), NC, 1e-7, UNIT_ROUNDOFF);
    reference_forward(hres); /* layernorm of the rounded residual */
    check_close("fused layernorm out", download(out, NC).data(), rout.data(), NC, 1e-5, UNIT_ROUNDOFF);

    /* backward on x with the statistics from layernorm_forward */
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    reference_forward(hx);
    std::vector<float> gmean = download_f32(mean, N), grstd = download_f32(rstd, N);
    floatX* dinp2 = (floatX*)dev_malloc(NC * sizeof(floatX), "dinp2");
    floatX* dw2 = (floatX*)dev_malloc(C * sizeof(floatX), "dw2");
    floatX* db2 = (floatX*)dev_malloc(C * sizeof(floatX), "db2");
    dev_memcpy_d2d(dinp2, dinp, NC * sizeof(floatX));
    dev_memcpy_d2d(dw2, dw, C * sizeof(floatX));
    dev_memcpy_d2d(db2, db, C * sizeof(floatX));
    layernorm_backward(dinp, dw, db, scratch, dout, x, w, mean, rstd, N, C);
    layernorm_backward(dinp2, dw2, db2, scratch, dout, x, w, mean, rstd, N, C);
    std::vector<double> rdinp(NC), rdw(hdw.begin(), hdw.end()), rdb(hdb.begin(), hdb.end());
    for (int i = 0; i < N; i++) {
        double m = gmean[i], s = grstd[i], s1 = 0, s2 = 0;
        for (int c = 0; c < C; c++) {
            double xh = (hx[(size_t)i * C + c] - m) * s, dn = hw[c] * (double)hdout[(size_t)i * C + c];
            s1 += dn; s2 += dn * xh;
        }
        s1 /= C; s2 /= C;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            double xh = (hx[k] - m) * s, g = hdout[k], dn = hw[c] * g;
            rdinp[k] = hdinp[k] + (dn - s1 - xh * s2) * s;
            rdw[c] += g * xh;
            rdb[c] += g;
        }
    }
    check_close("layernorm_backward dinp", download(dinp, NC).data(), rdinp.data(), NC, 1e-4, UNIT_ROUNDOFF);
    check_close("layernorm_backward dw", download(dw, C).data(), rdw.data(), C, 1e-3, UNIT_ROUNDOFF);
    check_close("layernorm_backward db", download(db, C).data(), rdb.data(), C, 1e-3, UNIT_ROUNDOFF);
    check_bitwise("layernorm_backward deterministic (dw)", dw, dw2, C * sizeof(floatX));
    check_bitwise("layernorm_backward deterministic (dinp)", dinp, dinp2, NC * sizeof(floatX));

    /* RMSNorm: forward, fused residual, backward (accumulating into dinp/dw as they are now) */
    std::vector<double> rrms(N);
    auto reference_rms = [&](const std::vector<float>& in) {
        for (int i = 0; i < N; i++) {
            const float* r = &in[(size_t)i * C];
            double ms = 0;
            for (int c = 0; c < C; c++) { ms += (double)r[c] * r[c]; }
            double s = 1.0 / sqrt(ms / C + 1e-5);
            rrms[i] = s;
            for (int c = 0; c < C; c++) { rout[(size_t)i * C + c] = r[c] * s * hw[c]; }
        }
    };
    poison(out, NC * sizeof(floatX)); poison(rstd, N * sizeof(float));
    rmsnorm_forward(out, rstd, x, w, N, C);
    reference_rms(hx);
    check_close("rmsnorm_forward out", download(out, NC).data(), rout.data(), NC, 1e-5, UNIT_ROUNDOFF);
    check_close("rmsnorm_forward rstd", download_f32(rstd, N).data(), rrms.data(), N, 1e-6, 1e-5);
    poison(out, NC * sizeof(floatX)); poison(resid, NC * sizeof(floatX));
    fused_residual_rmsnorm_forward(resid, out, rstd, x, x2, w, N, C);
    hres = download(resid, NC);
    check_close("fused residual (rmsnorm)", hres.data(), rres.data(), NC, 1e-7, UNIT_ROUNDOFF);
    reference_rms(hres);
    check_close("fused rmsnorm out", download(out, NC).data(), rout.data(), NC, 1e-5, UNIT_ROUNDOFF);
    rmsnorm_forward(out, rstd, x, w, N, C);
    std::vector<float> hdinp_rms = download(dinp, NC), hdw_rms = download(dw, C), grms = download_f32(rstd, N);
    dev_memcpy_d2d(dinp2, dinp, NC * sizeof(floatX));
    dev_memcpy_d2d(dw2, dw, C * sizeof(floatX));
    rmsnorm_backward(dinp, dw, scratch, dout, x, w, rstd, N, C);
    rmsnorm_backward(dinp2, dw2, scratch, dout, x, w, rstd, N, C);
    std::vector<double> rdw_rms(hdw_rms.begin(), hdw_rms.end());
    for (int i = 0; i < N; i++) {
        double s = grms[i], s2 = 0;
        for (int c = 0; c < C; c++) { s2 += hw[c] * (double)hdout[(size_t)i * C + c] * hx[(size_t)i * C + c] * s; }
        s2 /= C;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            double xh = hx[k] * s, g = hdout[k];
            rdinp[k] = hdinp_rms[k] + (hw[c] * g - xh * s2) * s;
            rdw_rms[c] += g * xh;
        }
    }
    check_close("rmsnorm_backward dinp", download(dinp, NC).data(), rdinp.data(), NC, 1e-4, UNIT_ROUNDOFF);
    check_close("rmsnorm_backward dw", download(dw, C).data(), rdw_rms.data(), C, 1e-3, UNIT_ROUNDOFF);
    check_bitwise("rmsnorm_backward deterministic (dw)", dw, dw2, C * sizeof(floatX));
    check_bitwise("rmsnorm_backward deterministic (dinp)", dinp, dinp2, NC * sizeof(floatX));

    const double eb = sizeof(floatX);
    report_bw("layernorm_forward", bench_ms([&] { layernorm_forward(out, mean, rstd, x, w, b, N, C); }),
              2.0 * NC * eb + 8.0 * N);
    report_bw("fused_residual_layernorm_forward",
              bench_ms([&] { fused_residual_layernorm_forward(resid, out, mean, rstd, x, x2, w, b, N, C); }),
              4.0 * NC * eb + 8.0 * N);
    report_bw("layernorm_backward", bench_ms([&] { layernorm_backward(dinp, dw, db, scratch, dout, x, w, mean, rstd, N, C); }),
              4.0 * NC * eb + 8.0 * N);
    report_bw("rmsnorm_forward", bench_ms([&] { rmsnorm_forward(out, rstd, x, w, N, C); }), 2.0 * NC * eb + 4.0 * N);
    report_bw("fused_residual_rmsnorm_forward",
              bench_ms([&] { fused_residual_rmsnorm_forward(resid, out, rstd, x, x2, w, N, C); }), 4.0 * NC * eb + 4.0 * N);
    rmsnorm_forward(out, rstd, x, w, N, C);
    report_bw("rmsnorm_backward", bench_ms([&] { rmsnorm_backward(dinp, dw, scratch, dout, x, w, rstd, N, C); }),
              4.0 * NC * eb + 4.0 * N);

    /* the training shape: forward first, so that mean/rstd are those of the tiled x */
    const int NT = TRAIN_B * TRAIN_T;
    const size_t NTC = (size_t)NT * C;
    note_shapes("N=8192 rows", "B=64 T=1024 (N=65536)");
    floatX* tx = tiled_copy(x, NC, NTC, "x (training shape)");
    floatX* tx2 = tiled_copy(x2, NC, NTC, "x2 (training shape)");
    floatX* tdout = tiled_copy(dout, NC, NTC, "dout (training shape)");
    floatX* tdinp = tiled_copy(dinp, NC, NTC, "dinp (training shape)");
    floatX* tout = (floatX*)dev_malloc(NTC * sizeof(floatX), "out (training shape)");
    floatX* tresid = (floatX*)dev_malloc(NTC * sizeof(floatX), "resid (training shape)");
    float* tmean = (float*)dev_malloc((size_t)NT * sizeof(float), "mean (training shape)");
    float* trstd = (float*)dev_malloc((size_t)NT * sizeof(float), "rstd (training shape)");
    float* tscratch = (float*)dev_malloc(layernorm_scratch_floats(NT, C) * sizeof(float), "scratch (training shape)");
    report_bw("layernorm_forward B=64 T=1024", bench_ms([&] { layernorm_forward(tout, tmean, trstd, tx, w, b, NT, C); }),
              2.0 * NTC * eb + 8.0 * NT);
    report_bw("fused_residual_layernorm_forward B=64 T=1024",
              bench_ms([&] { fused_residual_layernorm_forward(tresid, tout, tmean, trstd, tx, tx2, w, b, NT, C); }),
              4.0 * NTC * eb + 8.0 * NT);
    layernorm_forward(tout, tmean, trstd, tx, w, b, NT, C);
    report_bw("layernorm_backward B=64 T=1024",
              bench_ms([&] { layernorm_backward(tdinp, dw2, db2, tscratch, tdout, tx, w, tmean, trstd, NT, C); }),
              4.0 * NTC * eb + 8.0 * NT);
    report_bw("rmsnorm_forward B=64 T=1024", bench_ms([&] { rmsnorm_forward(tout, trstd, tx, w, NT, C); }),
              2.0 * NTC * eb + 4.0 * NT);
    report_bw("fused_residual_rmsnorm_forward B=64 T=1024",
              bench_ms([&] { fused_residual_rmsnorm_forward(tresid, tout, trstd, tx, tx2, w, NT, C); }),
              4.0 * NTC * eb + 4.0 * NT);
    rmsnorm_forward(tout, trstd, tx, w, NT, C);
    report_bw("rmsnorm_backward B=64 T=1024",
              bench_ms([&] { rmsnorm_backward(tdinp, dw2, tscratch, tdout, tx, w, trstd, NT, C); }),
              4.0 * NTC * eb + 4.0 * NT);
    dev_free(tx); dev_free(tx2); dev_free(tdout); dev_free(tdinp); dev_free(tout); dev_free(tresid);
    dev_free(tmean); dev_free(trstd); dev_free(tscratch);
    dev_free(x); dev_free(x2); dev_free(w); dev_free(b); dev_free(dout); dev_free(dinp); dev_free(dw); dev_free(db);
    dev_free(out); dev_free(resid); dev_free(mean); dev_free(rstd); dev_free(scratch);
    dev_free(dinp2); dev_free(dw2); dev_free(db2);
    backend_shutdown();
    return finish("layernorm");
}
