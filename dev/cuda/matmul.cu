/*
 * dev/cuda/matmul.cu -- checks and times matmul_forward / matmul_backward (llmc/cuda/matmul.cuh,
 * cuBLASLt) at the GPT-2 124M MLP shape: N = B*T = 8*1024, C = 768, OC = 3072 (fc layer, GELU epilogue).
 * Reference: fp64 dot products on the same rounded inputs, on a sample of 64 rows of out/dinp and
 * 32 rows of dweight (the full fp64 reference would take minutes).
 * Tolerance: |err| <= UNIT_ROUNDOFF*|ref| (one output rounding) + K * 2^-22 * sum_k |a_k b_k|
 * (fp32 accumulation of K products, with margin) + fast-math tanh for the GELU output.
 * dbias: fixed-order fp32 sums of N terms rounded once into floatX. Determinism of dbias checked bitwise.
 * The MLP backward pair is also timed both ways (GELU's derivative in the dbias pass, or cuBLASLt's DGELU epilogue:
 * matmul_backward_dgelu, whose output is checked first).
 * Training shape B=64 T=1024 (N = 65,536; lm_head_and_layers): the LM head (768 -> Vp = 50304, the tied wte, no bias,
 * 5.06 TFLOP forward) checked on 8 sampled rows of logits and of dinp against fp64 with the tolerances above, then
 * timed forward and backward (dinp and dwte); the four layer GEMMs (qkv, attention projection, fc with its GELU
 * epilogue, fc projection) timed forward and backward. Inputs tiled from the checked ones (x repeats every 8192 rows,
 * the weights every 3072 rows), so the sampled references come from the host copies.
 */
#include "common.h"

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

/* the LM head and the layer GEMMs at the training shape; x(Ns, C), w(OCs, C) (OCs = 3072), b(OCs) and their host
 * copies hx, hw are the check's */
static void lm_head_and_layers(const floatX* x, const floatX* w, const floatX* b, const std::vector<float>& hx,
                               const std::vector<float>& hw, int Ns, int C, int OCs) {
    const int N = TRAIN_B * TRAIN_T, Vp = 50304;
    const size_t NC = (size_t)N * C, NV = (size_t)N * Vp, VC = (size_t)Vp * C;
    const double acc_eps = 1.0 / 4194304.0; /* 2^-22, as main's */
    note_shapes("N=8192 (the MLP shape)", "B=64 T=1024 (N=65536), the LM head also checked on sampled rows");
    floatX* tx = tiled_copy(x, (size_t)Ns * C, NC, "lnf (training shape)");
    floatX* wte = tiled_copy(w, (size_t)OCs * C, VC, "wte (training shape)");
    floatX* dwte = (floatX*)dev_malloc(VC * sizeof(floatX), "dwte (training shape)");
    floatX* logits = (floatX*)dev_malloc(NV * sizeof(floatX), "logits (training shape)");
    floatX* dinp = (floatX*)dev_malloc(NC * sizeof(floatX), "dlnf (training shape)");
    /* sampled rows, spread over the whole batch (row r's input is x's row r % Ns, wte's row o is w's row o % OCs) */
    const int SR = 8;
    int rows[SR];
    for (int i = 0; i < SR; i++) { rows[i] = (int)(((size_t)i * 2654435761u + 12345u) % (size_t)N); }
    poison(logits, NV * sizeof(floatX));
    matmul_forward(logits, tx, wte, NULL, N, C, Vp, NULL);
    std::vector<float> got((size_t)SR * Vp);
    for (int i = 0; i < SR; i++) { dev_download_floats(&got[(size_t)i * Vp], logits + (size_t)rows[i] * Vp, Vp); }
    std::vector<double> ref((size_t)SR * Vp);
    double max_absdot = 0;
    for (int i = 0; i < SR; i++) {
        const float* xr = &hx[(size_t)(rows[i] % Ns) * C];
        for (int o = 0; o < Vp; o++) {
            const float* wr = &hw[(size_t)(o % OCs) * C];
            double sum = 0, sa = 0;
            for (int c = 0; c < C; c++) { double p = (double)xr[c] * wr[c]; sum += p; sa += fabs(p); }
            ref[(size_t)i * Vp + o] = sum;
            max_absdot = std::max(max_absdot, sa);
        }
    }
    check_close("lm head forward B=64 (8 sampled rows)", got.data(), ref.data(), ref.size(), C * acc_eps * max_absdot + 1e-6,
                UNIT_ROUNDOFF);
    /* backward with the logits as dlogits: dinp row r = dlogits(r, :) @ wte, from the rounded logits just downloaded */
    poison(dinp, NC * sizeof(floatX));
    matmul_backward(dinp, dwte, NULL, logits, tx, wte, NULL, N, C, Vp, NULL);
    std::vector<float> gotd((size_t)SR * C);
    for (int i = 0; i < SR; i++) { dev_download_floats(&gotd[(size_t)i * C], dinp + (size_t)rows[i] * C, C); }
    std::vector<double> refd((size_t)SR * C, 0.0);
    double max_abs2 = 0;
    for (int i = 0; i < SR; i++) {
        for (int c = 0; c < C; c++) {
            double sum = 0, sa = 0;
            for (int o = 0; o < Vp; o++) { double p = (double)got[(size_t)i * Vp + o] * hw[(size_t)(o % OCs) * C + c]; sum += p; sa += fabs(p); }
            refd[(size_t)i * C + c] = sum;
            max_abs2 = std::max(max_abs2, sa);
        }
    }
    /* K = Vp = 50304 terms: main's worst-case allowance K 2^-22 sum|terms| would be 1.2% of sum|terms|, which the
     * cancelling terms leave near |dinp| itself, so it would check little. With independent rounding errors the fp32
     * sum errs by about sqrt(K) 2^-24 sum|terms| (Higham & Mary 2019, "A New Approach to Probabilistic Rounding Error
     * Analysis"; the argument of dev/test/dp_lib.sh); allowed: 16 times that (products of bf16 inputs are exact) */
    check_close("lm head backward dinp B=64 (8 sampled rows)", gotd.data(), refd.data(), refd.size(),
                16.0 * sqrt((double)Vp) / 16777216.0 * max_abs2 + 1e-6, UNIT_ROUNDOFF);
    const double flops_lm = 2.0 * N * C * Vp;
    report_flops("matmul_forward lm head B=64 T=1024 (768->50304)",
                 bench_ms([&] { matmul_forward(logits, tx, wte, NULL, N, C, Vp, NULL); }), flops_lm);
    report_flops("matmul_backward lm head B=64 T=1024 (dinp, dwte)",
                 bench_ms([&] { matmul_backward(dinp, dwte, NULL, logits, tx, wte, NULL, N, C, Vp, NULL); }), 2.0 * flops_lm);

    /* the layer GEMMs: inputs and outputs are slices of the logits buffer (N x 3072 each, disjoint), weights of wte */
    const size_t N4 = (size_t)N * OCs;
    floatX* act = logits;          /* fc projection input / fc output (N, 3072) */
    floatX* pre = logits + N4;     /* fc pre-GELU (N, 3072) */
    floatX* dout = logits + 2 * N4; /* output gradients (N, <= 3072) */
    tile_fill(dout, N4, x, (size_t)Ns * C);
    float* scratch = (float*)dev_malloc(matmul_scratch_floats(N, C, OCs) * sizeof(float), "scratch (training shape)");
    floatX* db = (floatX*)dev_malloc((size_t)OCs * sizeof(floatX), "dbias (training shape)");
    struct { const char* name; int in, out, gelu; } layers[4] = {
        {"qkv (768->2304)", C, 3 * C, 0}, {"attn proj (768->768)", C, C, 0}, {"fc+gelu (768->3072)", C, OCs, 1},
        {"fc proj (3072->768)", OCs, C, 0}};
    for (int k = 0; k < 4; k++) {
        const int in = layers[k].in, out = layers[k].out;
        const floatX* inp = in == C ? tx : act;
        floatX* o = in == C ? act : dinp;
        floatX* pg = layers[k].gelu ? pre : NULL;
        floatX* di = in == C ? dinp : pre; /* (N, in): not the input itself */
        char name[96];
        snprintf(name, sizeof name, "matmul_forward %s B=64 T=1024", layers[k].name);
        report_flops(name, bench_ms([&] { matmul_forward(o, inp, wte, b, N, in, out, pg); }), 2.0 * N * in * out);
        snprintf(name, sizeof name, "matmul_backward %s B=64 T=1024", layers[k].name);
        report_flops(name, bench_ms([&] { matmul_backward(di, dwte, db, dout, inp, wte, scratch, N, in, out, NULL); }),
                     4.0 * N * in * out);
    }
    dev_free(tx); dev_free(wte); dev_free(dwte); dev_free(logits); dev_free(dinp); dev_free(scratch); dev_free(db);
}

int main(void) {
    backend_init(0, 1);
    const int N = 8 * 1024, C = 768, OC = 3072;
    const size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    std::vector<float> hx(NC), hw(OCC), hb(OC), hdout(NO), hdw(OCC), hdb(OC);
    floatX* x = upload_random(hx.data(), NC, -1.0f, 1.0f, 1, "inp");
    floatX* w = upload_random(hw.data(), OCC, -0.06f, 0.06f, 2, "weight");
    floatX* b = upload_random(hb.data(), OC, -0.1f, 0.1f, 3, "bias");
    floatX* dout = upload_random(hdout.data(), NO, -1.0f, 1.0f, 4, "dout");
    floatX* dw = upload_random(hdw.data(), OCC, -0.1f, 0.1f, 5, "dweight");
    floatX* db = upload_random(hdb.data(), OC, -0.1f, 0.1f, 6, "dbias");
    floatX* out = (floatX*)dev_malloc(NO * sizeof(floatX), "out");
    floatX* pre = (floatX*)dev_malloc(NO * sizeof(floatX), "pre_gelu");
    floatX* dinp = (floatX*)dev_malloc(NC * sizeof(floatX), "dinp");
    floatX* dout2 = (floatX*)dev_malloc(NO * sizeof(floatX), "dout copy");
    float* scratch = (float*)dev_malloc(matmul_scratch_floats(N, C, OC) * sizeof(float), "scratch");
    const double acc_eps = 1.0 / 4194304.0; /* 2^-22 */

    const int SR = 64;
    std::vector<int> rows(SR);
    for (int i = 0; i < SR; i++) { rows[i] = (int)(((size_t)i * 2654435761u) % N); }
    std::vector<size_t> idx((size_t)SR * OC);
    std::vector<double> ref((size_t)SR * OC), tol_abs((size_t)SR * OC);

    /* forward with bias, no GELU */
    poison(out, NO * sizeof(floatX));
    matmul_forward(out, x, w, b, N, C, OC, NULL);
    std::vector<float> got = download(out, NO);
    double max_absdot = 0;
    for (int i = 0; i < SR; i++) {
        for (int o = 0; o < OC; o++) {
            double s = hb[o], sa = fabs(hb[o]);
            for (int c = 0; c < C; c++) {
                double p = (double)hx[(size_t)rows[i] * C + c] * hw[(size_t)o * C + c];
                s += p; sa += fabs(p);
            }
            ref[(size_t)i * OC + o] = s;
            idx[(size_t)i * OC + o] = (size_t)rows[i] * OC + o;
            if (sa > max_absdot) { max_absdot = sa; }
        }
    }
    const double atol_fwd = C * acc_eps * max_absdot + 1e-6;
    check_close_idx("matmul_forward (bias)", got.data(), ref.data(), idx.data(), idx.size(), atol_fwd, UNIT_ROUNDOFF);
    /* all elements written (NaN poison gone) */
    { size_t nan = 0; for (size_t i = 0; i < NO; i++) { nan += got[i] != got[i]; } check_true("matmul_forward wrote every element", nan == 0); }

    /* forward with GELU epilogue: pre_gelu = xW^T+b, out = gelu(pre_gelu) */
    poison(out, NO * sizeof(floatX)); poison(pre, NO * sizeof(floatX));
    matmul_forward(out, x, w, b, N, C, OC, pre);
    std::vector<float> gpre = download(pre, NO);
    got = download(out, NO);
    check_close_idx("matmul_forward pre_gelu", gpre.data(), ref.data(), idx.data(), idx.size(), atol_fwd, UNIT_ROUNDOFF);
    std::vector<double> rg(ref.size());
    for (size_t k = 0; k < ref.size(); k++) { rg[k] = gelu_ref(ref[k]); }
    check_close_idx("matmul_forward gelu(out)", got.data(), rg.data(), idx.data(), idx.size(),
                    atol_fwd + 2.0 * FAST_MATH_REL, UNIT_ROUNDOFF);

    /* backward with pre_gelu: dout *= gelu'(pre); dbias += colsum; dinp = dout W; dW += dout^T x */
    std::vector<float> hpre = gpre;
    dev_memcpy_d2d(dout2, dout, NO * sizeof(floatX));
    floatX* db2 = (floatX*)dev_malloc(OC * sizeof(floatX), "dbias copy");
    dev_memcpy_d2d(db2, db, OC * sizeof(floatX));
    poison(dinp, NC * sizeof(floatX));
    matmul_backward(dinp, dw, db, dout, x, w, scratch, N, C, OC, pre);
    std::vector<float> gdout = download(dout, NO); /* rounded dgelu'd dout the GEMMs used */
    std::vector<double> rdout(NO);
    for (size_t k = 0; k < NO; k++) { rdout[k] = hdout[k] * gelu_grad_ref(hpre[k]); }
    check_close("matmul_backward dout*gelu'(pre)", gdout.data(), rdout.data(), NO, 8.0 * FAST_MATH_REL, UNIT_ROUNDOFF);
    std::vector<double> rdb(hdb.begin(), hdb.end());
    double max_abscol = 0;
    {
        std::vector<double> absc(OC, 0.0);
        for (size_t r = 0; r < (size_t)N; r++) {
            for (int o = 0; o < OC; o++) { rdb[o] += gdout[r * OC + o]; absc[o] += fabs(gdout[r * OC + o]); }
        }
        for (int o = 0; o < OC; o++) { max_abscol = std::max(max_abscol, absc[o]); }
    }
    check_close("matmul_backward dbias", download(db, OC).data(), rdb.data(), OC, N * acc_eps * max_abscol + 1e-6, UNIT_ROUNDOFF);
    /* dinp sample rows */
    got = download(dinp, NC);
    std::vector<size_t> idx2((size_t)SR * C);
    std::vector<double> ref2((size_t)SR * C);
    double max_abs2 = 0;
    for (int i = 0; i < SR; i++) {
        for (int c = 0; c < C; c++) {
            double s = 0, sa = 0;
            for (int o = 0; o < OC; o++) { double p = (double)gdout[(size_t)rows[i] * OC + o] * hw[(size_t)o * C + c]; s += p; sa += fabs(p); }
            ref2[(size_t)i * C + c] = s; idx2[(size_t)i * C + c] = (size_t)rows[i] * C + c;
            max_abs2 = std::max(max_abs2, sa);
        }
    }
    check_close_idx("matmul_backward dinp", got.data(), ref2.data(), idx2.data(), idx2.size(), OC * acc_eps * max_abs2 + 1e-6, UNIT_ROUNDOFF);
    /* dweight sample rows o */
    got = download(dw, OCC);
    const int SO = 32;
    std::vector<size_t> idx3((size_t)SO * C);
    std::vector<double> ref3((size_t)SO * C);
    double max_abs3 = 0;
    for (int j = 0; j < SO; j++) {
        int o = (int)(((size_t)j * 40503u) % OC);
        for (int c = 0; c < C; c++) {
            double s = hdw[(size_t)o * C + c], sa = fabs(s);
            for (int r = 0; r < N; r++) { double p = (double)gdout[(size_t)r * OC + o] * hx[(size_t)r * C + c]; s += p; sa += fabs(p); }
            ref3[(size_t)j * C + c] = s; idx3[(size_t)j * C + c] = (size_t)o * C + c;
            max_abs3 = std::max(max_abs3, sa);
        }
    }
    check_close_idx("matmul_backward dweight (+=)", got.data(), ref3.data(), idx3.data(), idx3.size(), N * acc_eps * max_abs3 + 1e-6, UNIT_ROUNDOFF);
    /* determinism of the fused dgelu + dbias pass */
    matmul_backward(dinp, dw, db2, dout2, x, w, scratch, N, C, OC, pre);
    check_bitwise("matmul_backward dbias deterministic", db, db2, OC * sizeof(floatX));
    check_bitwise("matmul_backward dgelu deterministic", dout, dout2, NO * sizeof(floatX));

    const double flops_f = 2.0 * N * C * OC;
    report_flops("matmul_forward (bias)", bench_ms([&] { matmul_forward(out, x, w, b, N, C, OC, NULL); }), flops_f);
    report_flops("matmul_forward (bias+gelu)", bench_ms([&] { matmul_forward(out, x, w, b, N, C, OC, pre); }), flops_f);
    report_flops("matmul_backward (dbias, no gelu)", bench_ms([&] { matmul_backward(dinp, dw, db, dout, x, w, scratch, N, C, OC, NULL); }), 2.0 * flops_f);
    report_bw("matmul_dbias + dgelu pass alone", bench_ms([&] { matmul_dbias(db, dout2, pre, scratch, N, OC); }),
              3.0 * NO * sizeof(floatX));
    /* the MLP backward pair (issue 15, item 9b): fcproj (N, 4C=3072 -> C=768) then fc (N, 768 -> 3072), with GELU's
     * derivative in the fc dbias pass or in cuBLASLt's DGELU epilogue on the fcproj input-gradient GEMM. w (3072 x 768
     * elements) also serves as fcproj's weight (768 x 3072), out as its input (fch_gelu), pre as fch. First the
     * epilogue's output against fp64 on 64 sampled rows: d fch = (dy @ Wp) * gelu'(fch), tolerance one output rounding
     * + fp32 accumulation + a tanh approximation's 2^-10 relative error in gelu' (cuBLASLt does not document its GELU
     * derivative: this row is what says whether the DGELU path (the default, make GELU_BWD_EPILOGUE=1) is as precise
     * as ours). */
    {
        std::vector<float> hdy(NC), hpre(NO);
        floatX* dy = upload_random(hdy.data(), NC, -1.0f, 1.0f, 7, "dy");
        floatX* pre2 = upload_random(hpre.data(), NO, -3.0f, 3.0f, 8, "fch");
        floatX* dbp = (floatX*)dev_malloc(C * sizeof(floatX), "fcproj dbias");
        dev_memset(dbp, 0, C * sizeof(floatX));
        poison(dout2, NO * sizeof(floatX));
        matmul_backward_dgelu(dout2, dw, dbp, dy, out, w, scratch, N, OC, C, pre2);
        std::vector<float> gd = download(dout2, NO);
        std::vector<double> ref4((size_t)SR * OC);
        double atol4 = 0.0;
        for (int j = 0; j < SR; j++) {
            const int r = rows[j];
            for (int c = 0; c < OC; c++) {
                double s = 0.0, sa = 0.0;
                for (int k = 0; k < C; k++) { double p = (double)hdy[(size_t)r * C + k] * hw[(size_t)k * OC + c]; s += p; sa += fabs(p); }
                const double x = hpre[(size_t)r * OC + c], g = gelu_grad_ref(x);
                ref4[(size_t)j * OC + c] = s * g;
                idx[(size_t)j * OC + c] = (size_t)r * OC + c;
                const double dg = FAST_MATH_REL * (0.5 + fabs(x) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x));
                atol4 = std::max(atol4, C * acc_eps * sa * fabs(g) + fabs(s) * dg);
            }
        }
        check_close_idx("matmul_backward_dgelu d fch (DGELU epilogue)", gd.data(), ref4.data(), idx.data(), idx.size(),
                        atol4 + 1e-6, UNIT_ROUNDOFF);
        const double flops_mlp = 4.0 * flops_f; /* two GEMMs per layer, each twice the forward's FLOPs */
        report_flops("MLP backward, gelu' in the fc dbias pass", bench_ms([&] {
            matmul_backward(dout2, dw, dbp, dy, out, w, scratch, N, OC, C, NULL);
            matmul_backward(dinp, dw, db, dout2, x, w, scratch, N, C, OC, pre2);
        }), flops_mlp);
        report_flops("MLP backward, DGELU epilogue", bench_ms([&] {
            matmul_backward_dgelu(dout2, dw, dbp, dy, out, w, scratch, N, OC, C, pre2);
            matmul_backward(dinp, dw, db, dout2, x, w, scratch, N, C, OC, NULL);
        }), flops_mlp);
        dev_free(dy); dev_free(pre2); dev_free(dbp);
    }
    /* the attention projection and lm-head shapes */
    report_flops("matmul_forward qkv (768->2304)", bench_ms([&] { matmul_forward(out, x, w, b, N, C, 2304, NULL); }), 2.0 * N * C * 2304);
    lm_head_and_layers(x, w, b, hx, hw, N, C, OC);
    dev_free(x); dev_free(w); dev_free(b); dev_free(dout); dev_free(dw); dev_free(db); dev_free(db2);
    dev_free(out); dev_free(pre); dev_free(dinp); dev_free(dout2); dev_free(scratch);
    backend_shutdown();
    return finish("matmul");
}
