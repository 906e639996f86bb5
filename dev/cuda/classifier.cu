/*
 * dev/cuda/classifier.cu -- checks and times fused_classifier (llmc/cuda/classifier.cuh) at the GPT-2
 * 124M head shape: N = B*T = 4*1024 rows, V = 50257, Vp = 50304.
 * Some targets are -1 (ignored: loss 0, dlogits 0). Padded columns V..Vp-1 hold garbage on input and
 * must come out 0. Reference: fp64 log-softmax on the same rounded logits, on a sample of 128 rows.
 * Tolerance: loss: fp32 sum of exp over V terms with __expf (FAST_MATH_REL relative each) -> 1e-3 abs.
 * dlogits = dloss*(p - onehot): one rounding (UNIT_ROUNDOFF*|ref|) + __expf error (FAST_MATH_REL * p * dloss).
 */
#include "common.h"

int main(void) {
    backend_init(0, 1);
    const int N = 4 * 1024, V = 50257, Vp = 50304;
    const size_t NV = (size_t)N * Vp;
    std::vector<float> hl(NV);
    floatX* logits = upload_random(hl.data(), NV, -8.0f, 8.0f, 1, "logits");
    floatX* work = (floatX*)dev_malloc(NV * sizeof(floatX), "logits work");
    std::vector<int> tg(N);
    uint64_t s = 3;
    for (int i = 0; i < N; i++) { tg[i] = (i % 97 == 5) ? -1 : (int)(rng_next(&s) % V); }
    int* dtg = (int*)dev_malloc(N * sizeof(int), "targets");
    dev_memcpy_h2d(dtg, tg.data(), N * sizeof(int));
    float* losses = (float*)dev_malloc(N * sizeof(float), "losses");
    const float dloss = 1.0f / N;

    dev_memcpy_d2d(work, logits, NV * sizeof(floatX));
    poison(losses, N * sizeof(float));
    fused_classifier(work, losses, dloss, dtg, N, V, Vp, 1);
    std::vector<float> gl = download_f32(losses, N);
    std::vector<float> gd = download(work, NV);

    const int SR = 128;
    std::vector<double> rloss(SR), rd((size_t)SR * Vp);
    std::vector<size_t> idxl(SR), idxd((size_t)SR * Vp);
    for (int k = 0; k < SR; k++) {
        int i = (k * 31 + (k == 0 ? 5 : 0)) % N; /* row 5 has an ignored target */
        const float* x = &hl[(size_t)i * Vp];
        double m = -1e300, sum = 0;
        for (int j = 0; j < V; j++) { m = std::max(m, (double)x[j]); }
        for (int j = 0; j < V; j++) { sum += exp(x[j] - m); }
        idxl[k] = (size_t)i;
        rloss[k] = tg[i] < 0 ? 0.0 : (log(sum) + m - x[tg[i]]);
        for (int j = 0; j < Vp; j++) {
            double p = j < V ? exp(x[j] - m) / sum : 0.0;
            double d = (tg[i] < 0 || j >= V) ? 0.0 : dloss * (p - (j == tg[i] ? 1.0 : 0.0));
            rd[(size_t)k * Vp + j] = d;
            idxd[(size_t)k * Vp + j] = (size_t)i * Vp + j;
        }
    }
    check_close_idx("fused_classifier losses", gl.data(), rloss.data(), idxl.data(), SR, 1e-3, 1e-4);
    check_close_idx("fused_classifier dlogits", gd.data(), rd.data(), idxd.data(), idxd.size(),
                    dloss * FAST_MATH_REL * 1e-2 + 1e-12, UNIT_ROUNDOFF + FAST_MATH_REL);
    {
        size_t bad = 0;
        for (int i = 0; i < N; i++) {
            for (int j = V; j < Vp; j++) { bad += gd[(size_t)i * Vp + j] != 0.0f; }
            if (tg[i] < 0) { for (int j = 0; j < Vp; j++) { bad += gd[(size_t)i * Vp + j] != 0.0f; } }
        }
        check_true("padded columns and ignored rows have dlogits exactly 0", bad == 0);
        size_t nan = 0;
        for (int i = 0; i < N; i++) { nan += gl[i] != gl[i]; }
        check_true("every loss written", nan == 0);
    }
    /* loss-only mode leaves logits untouched */
    dev_memcpy_d2d(work, logits, NV * sizeof(floatX));
    fused_classifier(work, losses, dloss, dtg, N, V, Vp, 0);
    check_bitwise("write_dlogits=0 leaves logits unchanged", work, logits, NV * sizeof(floatX));
    std::vector<float> gl2 = download_f32(losses, N);
    check_true("write_dlogits=0 gives the same losses", memcmp(gl.data(), gl2.data(), N * sizeof(float)) == 0);

    const double eb = sizeof(floatX);
    /* floor: read the row once, write it once (the second read is served by L2 in the best case) */
    report_bw("fused_classifier (dlogits)", bench_ms([&] { fused_classifier(work, losses, dloss, dtg, N, V, Vp, 1); }),
              2.0 * NV * eb + 8.0 * N);
    report_bw("fused_classifier (loss only)", bench_ms([&] { fused_classifier(logits, losses, dloss, dtg, N, V, Vp, 0); }),
              1.0 * NV * eb + 8.0 * N);
    dev_free(logits); dev_free(work); dev_free(dtg); dev_free(losses);
    backend_shutdown();
    return finish("classifier");
}
