/*
 * dev/cuda/classifier.cu -- checks and times fused_classifier (llmc/cuda/classifier.cuh) at the GPT-2
 * 124M head shape: N = B*T = 4*1024 rows, V = 50257, Vp = 50304.
 * Some targets are -1 (ignored: loss 0, dlogits 0). Padded columns V..Vp-1 hold garbage on input and
 * must come out 0. Reference: fp64 log-softmax on the same rounded logits, on a sample of 128 rows.
 * Tolerance: loss: fp32 sum of exp over V terms with __expf (FAST_MATH_REL relative each) -> 1e-3 abs.
 * dlogits = dloss*(p - onehot): one rounding (UNIT_ROUNDOFF*|ref|) + __expf error (FAST_MATH_REL * p * dloss).
 * Vocabulary-parallel cross-entropy (tensor parallelism; llmc/cuda/classifier.cuh): the same logits as tp = 1, 2, 4
 * shards of Vp/tp columns (one GPU plays every rank, the all-reduces are done on the host: each rank writes its
 * row of maxes(tp,N), the sums(2,N) are added in fp32 in rank order), checked against the same fp64 reference
 * with the same tolerances (the only extra rounding, the fp32 sum of tp partial exp sums, is (tp-1)*2^-24
 * relative: far inside them); every rank's losses must be the same bits, and the chain bit-identical on a second
 * run. Rank 0 is timed (each rank runs on its own GPU; the last one has the padding).
 * fused_classifier is also timed at the training shape B=64 T=1024 (N = 65,536 rows: 6.6 GB of bf16 logits, as the
 * trainer's one call per micro-step), logits tiled from the checked ones.
 */
#include "common.h"

#include <string>

/* the three steps over tp shards of logits(N,Vp) (rows `rows` sampled for the reference rloss, rd(rows, Vp)) */
static void check_vocab_parallel(int tp, const floatX* logits, const int* dtg, int N, int V, int Vp, float dloss,
                                 const std::vector<size_t>& rows, const std::vector<double>& rloss,
                                 const std::vector<double>& rd, double d_atol, double d_rtol) {
    const int Vs = Vp / tp;
    const size_t ns = (size_t)N * Vs, SR = rows.size();
    const std::string tag = "vocab_parallel tp=" + std::to_string(tp);
    std::vector<floatX*> shard((size_t)tp);
    for (int r = 0; r < tp; r++) { shard[(size_t)r] = (floatX*)dev_malloc(ns * sizeof(floatX), "logits shard"); }
    float* maxes = (float*)dev_malloc((size_t)tp * N * sizeof(float), "maxes");
    float* part = (float*)dev_malloc(2 * (size_t)N * sizeof(float), "partial sums");
    float* sums = (float*)dev_malloc(2 * (size_t)N * sizeof(float), "sums");
    float* losses = (float*)dev_malloc((size_t)tp * N * sizeof(float), "losses of every rank");
    auto valid = [&](int r) { return std::max(0, std::min(Vs, V - r * Vs)); };
    auto chain = [&]() {
        for (int r = 0; r < tp; r++) {
            CUDA_CHECK(cudaMemcpy2DAsync(shard[(size_t)r], Vs * sizeof(floatX), logits + (size_t)r * Vs,
                                         Vp * sizeof(floatX), Vs * sizeof(floatX), N, cudaMemcpyDeviceToDevice,
                                         main_stream()));
        }
        poison(maxes, (size_t)tp * N * sizeof(float));
        for (int r = 0; r < tp; r++) { vocab_parallel_row_max(maxes + (size_t)r * N, shard[(size_t)r], N, Vs, valid(r)); }
        std::vector<float> total(2 * (size_t)N, 0.0f);
        for (int r = 0; r < tp; r++) {
            poison(part, 2 * (size_t)N * sizeof(float));
            vocab_parallel_row_sums(part, shard[(size_t)r], maxes, tp, dtg, r * Vs, N, Vs, valid(r));
            std::vector<float> h = download_f32(part, 2 * (size_t)N);
            for (size_t k = 0; k < h.size(); k++) { total[k] += h[k]; }
        }
        dev_memcpy_h2d(sums, total.data(), total.size() * sizeof(float));
        poison(losses, (size_t)tp * N * sizeof(float));
        for (int r = 0; r < tp; r++) {
            vocab_parallel_finish(shard[(size_t)r], losses + (size_t)r * N, maxes, tp, sums, dtg, r * Vs, N, Vs,
                                  valid(r), dloss, 1);
        }
    };
    chain();
    std::vector<float> gl = download_f32(losses, (size_t)tp * N);
    int same = 1;
    for (int r = 1; r < tp; r++) { same &= memcmp(gl.data() + (size_t)r * N, gl.data(), N * sizeof(float)) == 0; }
    check_true((tag + ": every rank's losses are the same bits").c_str(), same);
    check_close_idx((tag + " losses").c_str(), gl.data(), rloss.data(), rows.data(), SR, 1e-3, 1e-4);
    std::vector<float> gd(SR * Vp);
    for (size_t k = 0; k < SR; k++) {
        for (int r = 0; r < tp; r++) { dev_download_floats(&gd[k * Vp + (size_t)r * Vs], shard[(size_t)r] + rows[k] * Vs, Vs); }
    }
    check_close((tag + " dlogits").c_str(), gd.data(), rd.data(), gd.size(), d_atol, d_rtol);
    /* determinism: the whole chain again, rank 0's dlogits and the losses bit for bit */
    floatX* keep = (floatX*)dev_malloc(ns * sizeof(floatX), "rank 0 dlogits");
    dev_memcpy_d2d(keep, shard[0], ns * sizeof(floatX));
    chain();
    check_bitwise((tag + ": rank 0's dlogits bit-identical on a second run").c_str(), keep, shard[0], ns * sizeof(floatX));
    std::vector<float> gl2 = download_f32(losses, (size_t)tp * N);
    check_true((tag + ": losses bit-identical on a second run").c_str(),
               memcmp(gl.data(), gl2.data(), gl.size() * sizeof(float)) == 0);

    const double eb = sizeof(floatX);
    report_bw((tag + " row_max (rank 0)").c_str(),
              bench_ms([&] { vocab_parallel_row_max(maxes, shard[0], N, Vs, valid(0)); }), eb * ns + 4.0 * N);
    report_bw((tag + " row_sums (rank 0)").c_str(),
              bench_ms([&] { vocab_parallel_row_sums(part, shard[0], maxes, tp, dtg, 0, N, Vs, valid(0)); }),
              eb * ns + 4.0 * N * (tp + 3));
    report_bw((tag + " finish, dlogits (rank 0)").c_str(),
              bench_ms([&] { vocab_parallel_finish(shard[0], losses, maxes, tp, sums, dtg, 0, N, Vs, valid(0), dloss, 1); }),
              2.0 * eb * ns + 4.0 * N * (tp + 4));
    for (int r = 0; r < tp; r++) { dev_free(shard[(size_t)r]); }
    dev_free(maxes); dev_free(part); dev_free(sums); dev_free(losses); dev_free(keep);
}

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

    for (int tp = 1; tp <= 4; tp *= 2) {
        check_vocab_parallel(tp, logits, dtg, N, V, Vp, dloss, idxl, rloss, rd, dloss * FAST_MATH_REL * 1e-2 + 1e-12,
                             UNIT_ROUNDOFF + FAST_MATH_REL);
    }

    const double eb = sizeof(floatX);
    /* floor: read the row once, write it once (the second read is served by L2 in the best case) */
    report_bw("fused_classifier (dlogits)", bench_ms([&] { fused_classifier(work, losses, dloss, dtg, N, V, Vp, 1); }),
              2.0 * NV * eb + 8.0 * N);
    report_bw("fused_classifier (loss only)", bench_ms([&] { fused_classifier(logits, losses, dloss, dtg, N, V, Vp, 0); }),
              1.0 * NV * eb + 8.0 * N);
    {
        const int NT = TRAIN_B * TRAIN_T;
        const size_t NTV = (size_t)NT * Vp;
        note_shapes("N=4096 rows", "B=64 T=1024 (N=65536 rows)");
        floatX* tl = tiled_copy(logits, NV, NTV, "logits (training shape)");
        int* ttg = tiled_copy(dtg, (size_t)N, (size_t)NT, "targets (training shape)");
        float* tlosses = (float*)dev_malloc((size_t)NT * sizeof(float), "losses (training shape)");
        const float tdloss = 1.0f / NT;
        report_bw("fused_classifier (loss only) B=64 T=1024",
                  bench_ms([&] { fused_classifier(tl, tlosses, tdloss, ttg, NT, V, Vp, 0); }), 1.0 * NTV * eb + 8.0 * NT);
        report_bw("fused_classifier (dlogits) B=64 T=1024",
                  bench_ms([&] { fused_classifier(tl, tlosses, tdloss, ttg, NT, V, Vp, 1); }), 2.0 * NTV * eb + 8.0 * NT);
        dev_free(tl); dev_free(ttg); dev_free(tlosses);
    }
    dev_free(logits); dev_free(work); dev_free(dtg); dev_free(losses);
    backend_shutdown();
    return finish("classifier");
}
