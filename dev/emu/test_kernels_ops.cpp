/*
 * dev/emu/test_kernels_ops.cpp -- every llmc/cuda kernel module, forward and backward, run through the
 * CPU execution layer (dev/emu/) and compared with the CPU backend (dev/emu/cpu_reference.c).
 *
 * - Fresh random seed per run (printed; EMU_SEED=<n> reproduces a run).
 * - Inputs are rounded to floatX first, so both backends see identical values.
 * - Outputs that an op overwrites are poisoned (0xFF bytes = NaN) before the run, so an element the
 *   kernels never write fails the check; accumulated outputs start from the same random values.
 * - Shapes: the fixture config (B=4,T=32,C=64,NH=4,V=100,Vp=128) and awkward ones: C not a multiple
 *   of the 128-bit vector width (bf16: 8, fp32: 4), T and N not multiples of any block size, N=1,
 *   T=1, head sizes 16/32/64/128 (tensor-core attention in bf16) and 6/12 (fallback), odd element
 *   counts for elementwise ops. Both attention paths are forced where both apply.
 * - Every __global__ kernel in llmc/cuda/ headers (except the cuDNN file) must have been launched at
 *   least once (tensor-core kernels only in 16-bit builds), and the distinct instantiations are listed.
 * - Determinism: the backward ops run twice and must be bit-identical.
 * - Schedules: everything runs with warps first-to-last; the block-level kernels run again with warps
 *   last-to-first (rows marked in the table by repetition), so a race hidden by one order shows in the other.
 * - Error measure: max_i |got_i - ref_i| / max_i |ref_i| (NaN counts as infinite).
 * Tolerances (argued from the arithmetic, not fitted):
 *   FP32 build: forward 1e-5 (fp32 epsilon 6e-8 times sums of at most a few hundred terms, and
 *   libm/fast-math differences of a few ulp); backward 1e-4 (longer reductions: up to N*... terms with
 *   cancellation in dinp/dw/dqkv).
 *   BF16 build: the result is rounded to bf16 (half an ulp: 2^-9 = 2.0e-3 relative) after fp32 math;
 *   ops with bf16 intermediates (pre-GELU, attention probabilities in the MMA path, stochastic rounding)
 *   add a few more such roundings: forward 8 * 2^-9 = 1.6e-2, backward and attention 16 * 2^-9 = 3.1e-2.
 *   AdamW: the fp32 master weights and m, v are checked at the fp32 tolerance; bf16 params are within one
 *   bf16 ulp (2^-8 relative) of the master weights (stochastic rounding).
 *   Exact (0) where both sides do the same arithmetic on the same rounded inputs: the sharded encoder forward,
 *   row maxima and target logits of the vocabulary-parallel cross-entropy. Its exp sums and losses are fp32 in
 *   both builds (fp32 outputs of identical inputs): TOL_FP32 (argued at test_vocab_parallel).
 */
#include "llmc/backend.h"
#include "dev/emu/cpu_reference.h"
#include "llmc/muon.h"
#include "dev/test/testing.h"

#include <dirent.h>
#include <set>
#include <string>
#include <vector>

#if FLOATX_IS_FLOAT
static const double TOL_FWD = 1e-5, TOL_BWD = 1e-4, TOL_ATT = 1e-4;
#else
static const double TOL_FWD = 8.0 / 512, TOL_BWD = 16.0 / 512, TOL_ATT = 16.0 / 512;
#endif
static const double TOL_FP32 = 1e-5;

/* ---------------------------------------------------------------- random numbers */
static uint64_t rng_s;
static uint64_t rng_next(void) {
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float urand(void) { return (float)((rng_next() >> 40) / 16777216.0) * 2.0f - 1.0f; } /* [-1, 1) */
static std::vector<float> randv(size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = urand() * scale;
    return v;
}

/* ---------------------------------------------------------------- device helpers */
/* exact sizes: a buffer's end abuts the emulator's guard page / canary, so overruns are caught */
static floatX* dX(size_t n) { return (floatX*)dev_malloc(n * sizeof(floatX), "test"); }
static float* dF(size_t n) { return (float*)dev_malloc(n * sizeof(float), "test"); }
/* rounds v to floatX in place (so both sides see identical inputs) and returns a device copy */
static floatX* upX(std::vector<float>& v) {
    floatX* d = dX(v.size());
    if (!v.empty()) {
        dev_upload_floats(d, v.data(), v.size());
        dev_download_floats(v.data(), d, v.size());
    }
    return d;
}
static float* upF(const std::vector<float>& v) {
    float* d = dF(v.size());
    if (!v.empty()) dev_memcpy_h2d(d, v.data(), v.size() * sizeof(float));
    return d;
}
static std::vector<float> downX(const floatX* d, size_t n) {
    std::vector<float> v(n);
    if (n) dev_download_floats(v.data(), d, n);
    return v;
}
static std::vector<float> downF(const float* d, size_t n) {
    std::vector<float> v(n);
    if (n) dev_memcpy_d2h(v.data(), d, n * sizeof(float));
    return v;
}
static int* upI(const std::vector<int>& v) {
    int* d = (int*)dev_malloc(std::max<size_t>(v.size(), 1) * sizeof(int), "ints");
    if (!v.empty()) dev_memcpy_h2d(d, v.data(), v.size() * sizeof(int));
    return d;
}
static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
static void poisonX(floatX* d, size_t n) { dev_memset(d, 0xFF, n * sizeof(floatX)); }
static void poisonF(float* d, size_t n) { dev_memset(d, 0xFF, n * sizeof(float)); }
static std::vector<float> roundX(std::vector<float> v) {
    floatX* d = upX(v);
    dev_free(d);
    return v;
}

/* ---------------------------------------------------------------- comparison table */
struct Row { std::string op, shape; double err, tol; };
static std::vector<Row> table;

static double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
    double mx = 0, num = 0;
    for (size_t i = 0; i < ref.size(); i++) mx = std::max(mx, (double)fabsf(ref[i]));
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(got[i]) && std::isfinite(ref[i])) return INFINITY;
        num = std::max(num, fabs((double)got[i] - (double)ref[i]));
    }
    return mx > 0 ? num / mx : num;
}
static void check(const char* op, const std::string& shape, const std::vector<float>& got,
                  const std::vector<float>& ref, double tol) {
    double e = rel_err(got, ref);
    table.push_back(Row{op, shape, e, tol});
    TEST_CHECK(e <= tol, "%-34s %-26s max rel err %.2e (tol %.1e)", op, shape.c_str(), e, tol);
}
static std::string shp(const char* fmt, ...) {
    char b[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    return b;
}

/* ---------------------------------------------------------------- encoder */
static void test_encoder(int B, int T, int C, int V, int Vp) {
    std::string s = shp("B=%d T=%d C=%d Vp=%d", B, T, C, Vp);
    const int N = B * T;
    std::vector<int> tok(N);
    for (auto& t : tok) t = (int)(rng_next() % (uint64_t)std::min(V, 7)); /* repeats force bucket merging */
    std::vector<float> wte = randv((size_t)Vp * C), wpe = randv((size_t)T * C);
    floatX* d_wte = upX(wte);
    floatX* d_wpe = upX(wpe);
    int* d_tok = (int*)dev_malloc(N * sizeof(int), "tok");
    dev_memcpy_h2d(d_tok, tok.data(), N * sizeof(int));
    floatX* d_out = dX((size_t)N * C);
    poisonX(d_out, (size_t)N * C);
    encoder_forward(d_out, d_tok, d_wte, d_wpe, B, T, C);
    std::vector<float> ref((size_t)N * C);
    ref_encoder_forward(ref.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    check("encoder_forward", s, downX(d_out, ref.size()), roundX(ref), TOL_FWD);

    std::vector<float> dout = randv((size_t)N * C), dwte = randv((size_t)Vp * C), dwpe = randv((size_t)T * C);
    floatX* d_dout = upX(dout);
    floatX* d_dwte = upX(dwte);
    floatX* d_dwpe = upX(dwpe);
    std::vector<float> dwte0 = dwte, dwpe0 = dwpe;
    encoder_backward(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), B, T, C);
    ref_encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    std::vector<float> g_wte = downX(d_dwte, dwte.size()), g_wpe = downX(d_dwpe, dwpe.size());
    check("encoder_backward dwte", s, g_wte, dwte, TOL_BWD);
    check("encoder_backward dwpe", s, g_wpe, dwpe, TOL_BWD);
    /* determinism: same accumulation again from the same start */
    dev_upload_floats(d_dwte, dwte0.data(), dwte0.size());
    dev_upload_floats(d_dwpe, dwpe0.data(), dwpe0.size());
    encoder_backward(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), B, T, C);
    TEST_CHECK(downX(d_dwte, dwte.size()) == g_wte && downX(d_dwpe, dwpe.size()) == g_wpe,
               "encoder_backward bit-identical on a second run (%s)", s.c_str());
    dev_free(d_wte); dev_free(d_wpe); dev_free(d_tok); dev_free(d_out); dev_free(d_dout); dev_free(d_dwte); dev_free(d_dwpe);
}

/* dwte with a skewed token distribution (issue 15, item 8): one token holds ~90% of the positions (GPT-2's newline
 * holds ~12% of a real batch), so its bucket is cut into many chunks of ENCODER_WTE_CHUNK positions summed by
 * separate blocks into fp32 partials and added in chunk order by the second kernel; a token with exactly
 * ENCODER_WTE_CHUNK positions (one block, no chunks) and one with ENCODER_WTE_CHUNK + 1 (two chunks, the last of
 * one position) sit at the boundary. Checked against the CPU backend (TOL_BWD), bit for bit against a host model
 * of the documented order (per chunk: fp32 sum in increasing position order; per token: the chunk sums added in
 * chunk order, then one fp32 add to dwte and one rounding to floatX; unsplit tokens: the old single sum), and
 * bit-identical on a second run. */
static void test_encoder_skewed(int B, int T, int C, int Vp) {
    const int N = B * T, L = ENCODER_WTE_CHUNK;
    const int hot = Vp / 3, at_l = Vp - 1, past_l = Vp - 2; /* other tokens are drawn from [0, Vp/3) */
    if (N < 3 * (L + 1) || Vp < 6) { fprintf(stderr, "test_encoder_skewed: shape too small\n"); exit(1); }
    std::vector<int> tok(N);
    for (auto& t : tok) t = rng_next() % 10 == 0 ? (int)(rng_next() % (uint64_t)hot) : hot;
    for (int k = 0; k < L; k++) tok[3 * k + 1] = at_l;
    for (int k = 0; k <= L; k++) tok[3 * k + 2] = past_l;
    int n_hot = 0;
    for (int t : tok) n_hot += t == hot;
    std::string s = shp("B=%d T=%d C=%d hot %d/%d", B, T, C, n_hot, N);
    std::vector<float> dout = randv((size_t)N * C), dwte = randv((size_t)Vp * C), dwpe = randv((size_t)T * C);
    floatX* d_dout = upX(dout); /* rounds dout, dwte, dwpe to floatX in place */
    floatX* d_dwte = upX(dwte);
    floatX* d_dwpe = upX(dwpe);
    int* d_tok = upI(tok);
    const std::vector<float> dwte0 = dwte, dwpe0 = dwpe;
    encoder_backward(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), B, T, C);
    const std::vector<float> g_wte = downX(d_dwte, dwte.size()), g_wpe = downX(d_dwpe, dwpe.size());
    ref_encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    check("encoder_backward dwte (skewed)", s, g_wte, dwte, TOL_BWD);
    check("encoder_backward dwpe (skewed)", s, g_wpe, dwpe, TOL_BWD);
    /* the host model of the order with chunks of `len` positions (len >= the bucket: the single sum) */
    std::vector<std::vector<int>> where(Vp);
    for (int i = 0; i < N; i++) where[tok[i]].push_back(i);
    int split_tokens = 0;
    auto model_of = [&](size_t len) {
        std::vector<float> model = dwte0;
        split_tokens = 0;
        for (int v = 0; v < Vp; v++) {
            const std::vector<int>& P = where[v];
            if (P.empty()) continue;
            split_tokens += P.size() > len;
            for (int c = 0; c < C; c++) {
                float tot = 0.0f;
                for (size_t j0 = 0; j0 < P.size(); j0 += len) {
                    float part = 0.0f;
                    for (size_t j = j0; j < std::min(P.size(), j0 + len); j++) part += dout[(size_t)P[j] * C + c];
                    if (P.size() > len) tot += part; else tot = part;
                }
                model[(size_t)v * C + c] = dwte0[(size_t)v * C + c] + tot;
            }
        }
        return roundX(model);
    };
    std::vector<float> model = model_of((size_t)L);
    TEST_CHECK(same_bits(g_wte, model) && split_tokens == 2 && (int)where[at_l].size() == L,
               "encoder_backward dwte (%s) equals the host model of the chunked order bit for bit (%d tokens split into "
               "chunks of %d; a token of exactly %d positions not split)", s.c_str(), split_tokens, L, L);
    /* encoder_set_wte_chunk(INT_MAX) (the benchmarks' baseline): one block per token, the single-sum order */
    encoder_set_wte_chunk(INT_MAX);
    dev_upload_floats(d_dwte, dwte0.data(), dwte0.size());
    dev_upload_floats(d_dwpe, dwpe0.data(), dwpe0.size());
    encoder_backward(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), B, T, C);
    encoder_set_wte_chunk(ENCODER_WTE_CHUNK);
    model = model_of((size_t)N);
    TEST_CHECK(same_bits(downX(d_dwte, dwte.size()), model) && split_tokens == 0,
               "encoder_backward dwte (%s) with encoder_set_wte_chunk(INT_MAX) equals the single-sum host model bit for "
               "bit", s.c_str());
    dev_upload_floats(d_dwte, dwte0.data(), dwte0.size());
    dev_upload_floats(d_dwpe, dwpe0.data(), dwpe0.size());
    encoder_backward(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), B, T, C);
    TEST_CHECK(same_bits(downX(d_dwte, dwte.size()), g_wte) && same_bits(downX(d_dwpe, dwpe.size()), g_wpe),
               "encoder_backward (skewed) bit-identical on a second run (%s)", s.c_str());
    dev_free(d_dout); dev_free(d_dwte); dev_free(d_dwpe); dev_free(d_tok);
}

/* the vocabulary-sharded encoder (tensor parallelism): the vocabulary rows [0, Vp) split into tp shards of
 * ceil(Vp/tp) rows (the last one shorter), plus a shard past every token. Each shard against the CPU reference
 * (forward: one fp32 add and one rounding on both sides, so exactly equal; backward: TOL_BWD as above, and
 * bit-identical on a second run); then the shards against the unsharded kernels, bit for bit: the outputs summed
 * over the shards (one non-zero term per element, so the float sum is exact) equal encoder_forward's, each
 * shard's dwte rows equal those rows of encoder_backward's dwte, and dwpe is the same from every shard. Tokens
 * repeat inside shards and some shards get no token. */
static void test_encoder_shards(int B, int T, int C, int Vp, int tp) {
    const int N = B * T, rows = (Vp + tp - 1) / tp;
    std::vector<int> tok(N);
    const int hot[3] = {0, Vp / 2, Vp - 1};
    for (auto& t : tok) t = (rng_next() & 1) ? hot[rng_next() % 3] : (int)(rng_next() % (uint64_t)Vp);
    std::vector<float> wte = randv((size_t)Vp * C), wpe = randv((size_t)T * C), dout = randv((size_t)N * C);
    std::vector<float> dwte0 = randv((size_t)Vp * C), dwpe0 = randv((size_t)T * C);
    floatX* d_wte = upX(wte);
    floatX* d_wpe = upX(wpe);
    floatX* d_dout = upX(dout);
    floatX* d_dwte = upX(dwte0);
    floatX* d_dwpe = upX(dwpe0);
    int* d_tok = upI(tok);
    floatX* d_out = dX((size_t)N * C);
    /* the unsharded kernels */
    poisonX(d_out, (size_t)N * C);
    encoder_forward(d_out, d_tok, d_wte, d_wpe, B, T, C);
    const std::vector<float> full_out = downX(d_out, (size_t)N * C);
    encoder_backward(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), B, T, C);
    const std::vector<float> full_dwte = downX(d_dwte, dwte0.size()), full_dwpe = downX(d_dwpe, dwpe0.size());
    std::vector<float> out_sum((size_t)N * C, 0.0f);
    int rows_same = 1, dwpe_same = 1;
    for (int r = 0; r <= tp; r++) {
        const int v0 = r < tp ? r * rows : Vp + 5; /* r == tp: a shard past every token */
        const int Vs = r < tp ? std::min(rows, Vp - v0) : 3;
        if (Vs <= 0) continue;
        std::string s = shp("B=%d T=%d C=%d [%d,+%d)", B, T, C, v0, Vs);
        std::vector<float> wte_s(Vs * (size_t)C), dwte_s(Vs * (size_t)C);
        for (size_t k = 0; k < wte_s.size(); k++) {
            wte_s[k] = r < tp ? wte[(size_t)v0 * C + k] : urand();
            dwte_s[k] = r < tp ? dwte0[(size_t)v0 * C + k] : urand();
        }
        floatX* d_wte_s = upX(wte_s); /* separate allocations: the emulator's guard pages catch overruns */
        floatX* d_dwte_s = upX(dwte_s);
        std::vector<float> dwpe_s = dwpe0;
        floatX* d_dwpe_s = upX(dwpe_s);
        poisonX(d_out, (size_t)N * C);
        encoder_forward_vocab_shard(d_out, d_tok, d_wte_s, d_wpe, v0, Vs, B, T, C);
        std::vector<float> got = downX(d_out, (size_t)N * C), ref((size_t)N * C);
        ref_encoder_forward_vocab_shard(ref.data(), tok.data(), wte_s.data(), wpe.data(), v0, Vs, B, T, C);
        check("encoder_forward_vocab_shard", s, got, roundX(ref), 0.0);
        for (size_t k = 0; k < got.size(); k++) out_sum[k] += got[k];

        encoder_backward_vocab_shard(d_dwte_s, d_dwpe_s, d_dout, d_tok, tok.data(), v0, Vs, B, T, C);
        std::vector<float> g_wte = downX(d_dwte_s, dwte_s.size()), g_wpe = downX(d_dwpe_s, dwpe_s.size());
        std::vector<float> r_wte = dwte_s, r_wpe = dwpe_s;
        ref_encoder_backward_vocab_shard(r_wte.data(), r_wpe.data(), dout.data(), tok.data(), v0, Vs, B, T, C);
        check("encoder_backward_vocab_shard dwte", s, g_wte, r_wte, TOL_BWD);
        check("encoder_backward_vocab_shard dwpe", s, g_wpe, r_wpe, TOL_BWD);
        dev_upload_floats(d_dwte_s, dwte_s.data(), dwte_s.size());
        dev_upload_floats(d_dwpe_s, dwpe_s.data(), dwpe_s.size());
        encoder_backward_vocab_shard(d_dwte_s, d_dwpe_s, d_dout, d_tok, tok.data(), v0, Vs, B, T, C);
        TEST_CHECK(same_bits(downX(d_dwte_s, dwte_s.size()), g_wte) && same_bits(downX(d_dwpe_s, dwpe_s.size()), g_wpe),
                   "encoder_backward_vocab_shard bit-identical on a second run (%s)", s.c_str());
        if (r < tp) {
            rows_same &= memcmp(g_wte.data(), full_dwte.data() + (size_t)v0 * C, g_wte.size() * sizeof(float)) == 0;
        } else {
            rows_same &= same_bits(g_wte, roundX(dwte_s)); /* no token in the shard: dwte untouched */
        }
        dwpe_same &= same_bits(g_wpe, full_dwpe);
        dev_free(d_wte_s); dev_free(d_dwte_s); dev_free(d_dwpe_s);
    }
    TEST_CHECK(same_bits(out_sum, full_out) && rows_same && dwpe_same,
               "encoder shards (B=%d T=%d C=%d Vp=%d tp=%d) vs the unsharded kernels, bit for bit: summed outputs %s, "
               "dwte rows %s, dwpe %s", B, T, C, Vp, tp, same_bits(out_sum, full_out) ? "equal" : "DIFFER",
               rows_same ? "equal" : "DIFFER", dwpe_same ? "equal" : "DIFFER");
    dev_free(d_wte); dev_free(d_wpe); dev_free(d_dout); dev_free(d_dwte); dev_free(d_dwpe); dev_free(d_tok);
    dev_free(d_out);
}

/* graph mode: encoder_backward_vocab_shard captured after encoder_backward_stage (which stages every token; the
 * kernel skips the buckets outside the shard) replays to the eager result bit for bit, also after new tokens are
 * staged into the same buffer */
static void test_encoder_shard_graph(int B, int T, int C, int Vp, int v0, int Vs, int skewed = 0) {
    const int N = B * T;
    std::vector<int> tok(N);
    std::vector<float> dout = randv((size_t)N * C), dwte = randv((size_t)Vs * C), dwpe = randv((size_t)T * C);
    floatX* d_dout = upX(dout);
    floatX* d_dwte = upX(dwte);
    floatX* d_dwpe = upX(dwpe);
    int* d_tok = upI(tok);
    bool same = true;
    DevGraph g = 0;
    for (int round = 0; round < 2; round++) {
        for (auto& t : tok) t = (int)(rng_next() % (uint64_t)Vp);
        if (skewed) { /* token v0 at ~90% of the positions: its bucket is split into chunks (a second kernel) */
            for (auto& t : tok) t = rng_next() % 10 == 0 ? t : v0;
        }
        tok[0] = v0; /* at least one token in the shard */
        dev_upload_floats(d_dwte, dwte.data(), dwte.size());
        dev_upload_floats(d_dwpe, dwpe.data(), dwpe.size());
        encoder_backward_vocab_shard(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), v0, Vs, B, T, C);
        std::vector<float> e_wte = downX(d_dwte, dwte.size()), e_wpe = downX(d_dwpe, dwpe.size());
        dev_upload_floats(d_dwte, dwte.data(), dwte.size());
        dev_upload_floats(d_dwpe, dwpe.data(), dwpe.size());
        encoder_backward_stage(0, tok.data(), B, T);
        if (round == 0) {
            dev_graph_begin_capture();
            encoder_backward_vocab_shard(d_dwte, d_dwpe, d_dout, d_tok, tok.data(), v0, Vs, B, T, C);
            g = dev_graph_end_capture();
        }
        dev_graph_launch(g);
        same = same && same_bits(downX(d_dwte, dwte.size()), e_wte) && same_bits(downX(d_dwpe, dwpe.size()), e_wpe);
    }
    dev_graph_destroy(g);
    TEST_CHECK(same, "encoder_backward_vocab_shard [%d,+%d) B=%d T=%d C=%d%s captured after encoder_backward_stage: two "
               "replays (new tokens staged) equal the eager calls bit for bit", v0, Vs, B, T, C,
               skewed ? " (one token at ~90%)" : "");
    dev_free(d_dout); dev_free(d_dwte); dev_free(d_dwpe); dev_free(d_tok);
}

/* ---------------------------------------------------------------- layernorm */
static void test_layernorm(int N, int C) {
    std::string s = shp("N=%d C=%d", N, C);
    std::vector<float> inp = randv((size_t)N * C, 2.0f), inp2 = randv((size_t)N * C), w = randv(C), b = randv(C);
    for (auto& x : inp) x += 0.5f; /* nonzero mean */
    floatX* d_inp = upX(inp);
    floatX* d_inp2 = upX(inp2);
    floatX* d_w = upX(w);
    floatX* d_b = upX(b);
    floatX* d_out = dX((size_t)N * C);
    floatX* d_res = dX((size_t)N * C);
    float* d_mean = dF(N);
    float* d_rstd = dF(N);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N), res((size_t)N * C);

    poisonX(d_out, out.size()); poisonF(d_mean, N); poisonF(d_rstd, N);
    layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    check("layernorm_forward out", s, downX(d_out, out.size()), roundX(out), TOL_FWD);
    check("layernorm_forward mean", s, downF(d_mean, N), mean, TOL_FP32);
    check("layernorm_forward rstd", s, downF(d_rstd, N), rstd, TOL_FP32 * 10);

    poisonX(d_out, out.size()); poisonX(d_res, res.size()); poisonF(d_mean, N); poisonF(d_rstd, N);
    fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_inp, d_inp2, d_w, d_b, N, C);
    std::vector<float> g_res = downX(d_res, res.size());
    /* the reference normalises the residual as stored in floatX (what the GPU code normalises too) */
    ref_fused_residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), inp.data(), inp2.data(),
                                         w.data(), b.data(), N, C);
    check("fused_residual_layernorm residual", s, g_res, roundX(res), TOL_FWD);
    std::vector<float> resX = roundX(res);
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), resX.data(), w.data(), b.data(), N, C);
    check("fused_residual_layernorm out", s, downX(d_out, out.size()), roundX(out), TOL_FWD);
    check("fused_residual_layernorm rstd", s, downF(d_rstd, N), rstd, TOL_FP32 * 10);

    /* backward from the reference's mean/rstd of inp */
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    std::vector<float> dout = randv((size_t)N * C), dinp = randv((size_t)N * C), dw = randv(C), db = randv(C);
    floatX* d_dout = upX(dout);
    floatX* d_dinp = upX(dinp);
    floatX* d_dw = upX(dw);
    floatX* d_db = upX(db);
    std::vector<float> dinp0 = dinp, dw0 = dw, db0 = db;
    dev_memcpy_h2d(d_mean, mean.data(), N * sizeof(float));
    dev_memcpy_h2d(d_rstd, rstd.data(), N * sizeof(float));
    size_t ns = layernorm_scratch_floats(N, C);
    float* d_scratch = dF(ns);
    poisonF(d_scratch, ns);
    layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    ref_layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
    std::vector<float> g1 = downX(d_dinp, dinp.size()), g2 = downX(d_dw, C), g3 = downX(d_db, C);
    check("layernorm_backward dinp", s, g1, dinp, TOL_BWD);
    check("layernorm_backward dw", s, g2, dw, TOL_BWD);
    check("layernorm_backward db", s, g3, db, TOL_BWD);
    dev_upload_floats(d_dinp, dinp0.data(), dinp0.size());
    dev_upload_floats(d_dw, dw0.data(), C);
    dev_upload_floats(d_db, db0.data(), C);
    poisonF(d_scratch, ns);
    layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    TEST_CHECK(downX(d_dinp, dinp.size()) == g1 && downX(d_dw, C) == g2 && downX(d_db, C) == g3,
               "layernorm_backward bit-identical on a second run (%s)", s.c_str());
    if (C <= LAYERNORM_BWD_REG_C) {
        /* the register path (dw/db partial sums of a lane in registers, written to shared memory once) against the
         * shared-memory path on the same inputs: the same sums in the same order, so the per-chunk partials and
         * dinp must agree bit for bit */
        const int nchunks = layernorm_backward_chunks(N), rows_per_chunk = CEIL_DIV(N, nchunks);
        const size_t smem = (size_t)LAYERNORM_BWD_WARPS * 2 * (size_t)C * sizeof(float);
        const int vec = layernorm_vec_ok(C, d_dinp, d_inp, d_w, d_dout, NULL);
        std::vector<float> part[2], dx[2];
        for (int reg = 0; reg < 2; reg++) {
            dev_upload_floats(d_dinp, dinp0.data(), dinp0.size());
            poisonF(d_scratch, ns);
            layernorm_backward_launch(vec, reg, nchunks, smem, d_dinp, d_scratch, d_dout, d_inp, d_w, d_mean, d_rstd, N, C,
                                      rows_per_chunk);
            part[reg] = downF(d_scratch, ns);
            dx[reg] = downX(d_dinp, dinp.size());
        }
        TEST_CHECK(memcmp(part[0].data(), part[1].data(), ns * sizeof(float)) == 0 && dx[0] == dx[1],
                   "layernorm_backward %s: dw/db partial sums in registers == in shared memory, bit for bit (%zu "
                   "partials)", s.c_str(), ns);
    }
    dev_free(d_inp); dev_free(d_inp2); dev_free(d_w); dev_free(d_b); dev_free(d_out); dev_free(d_res);
    dev_free(d_mean); dev_free(d_rstd); dev_free(d_dout); dev_free(d_dinp); dev_free(d_dw); dev_free(d_db);
    dev_free(d_scratch);
}

/* ---------------------------------------------------------------- qknorm */
/* QK-norm (llmc/cuda/qknorm.cuh) against the CPU twin: RMSNorm rows of hs values, so RMSNorm's tolerances (out TOL_FWD,
 * rstd TOL_FP32 * 10, backward TOL_BWD); pre is a copy of the input heads (exact); v and its gradient untouched;
 * the weight gradients' chunked sums are deterministic (a second run is bit-identical). */
static void test_qknorm(int N, int NH, int NKV, int hs) {
    std::string s = shp("N=%d NH=%d NKV=%d hs=%d", N, NH, NKV, hs);
    const int H = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hs, nq = (size_t)N * R, np = (size_t)N * H * hs;
    std::vector<float> qkv = randv(nq, 2.0f), qw = randv(hs), kw = randv(hs), pre(np), rstd((size_t)N * H);
    floatX* d_qkv = upX(qkv);
    floatX* d_qw = upX(qw);
    floatX* d_kw = upX(kw);
    floatX* d_pre = dX(np);
    float* d_rstd = dF((size_t)N * H);
    poisonX(d_pre, np); poisonF(d_rstd, (size_t)N * H);
    qknorm_forward(d_qkv, d_pre, d_rstd, d_qw, d_kw, N, NH, NKV, hs);
    ref_qknorm_forward(qkv.data(), pre.data(), rstd.data(), qw.data(), kw.data(), N, NH, NKV, hs);
    check("qknorm_forward qkv", s, downX(d_qkv, nq), roundX(qkv), TOL_FWD);
    check("qknorm_forward rstd", s, downF(d_rstd, rstd.size()), rstd, TOL_FP32 * 10);
    TEST_CHECK(same_bits(downX(d_pre, np), pre), "qknorm_forward pre holds the input heads exactly (%s)", s.c_str());
    /* backward from the reference's pre and rstd, accumulating into random weight gradients */
    std::vector<float> dqkv = randv(nq), dqw = randv(hs), dkw = randv(hs);
    floatX* d_dqkv = upX(dqkv);
    floatX* d_dqw = upX(dqw);
    floatX* d_dkw = upX(dkw);
    std::vector<float> dqkv0 = dqkv, dqw0 = dqw, dkw0 = dkw;
    dev_memcpy_h2d(d_rstd, rstd.data(), rstd.size() * sizeof(float));
    size_t ns = qknorm_scratch_floats(N, NH, NKV, hs);
    float* d_scratch = dF(ns);
    poisonF(d_scratch, ns);
    qknorm_backward(d_dqkv, d_dqw, d_dkw, d_scratch, d_pre, d_qw, d_kw, d_rstd, N, NH, NKV, hs);
    ref_qknorm_backward(dqkv.data(), dqw.data(), dkw.data(), pre.data(), qw.data(), kw.data(), rstd.data(), N, NH,
                        NKV, hs);
    std::vector<float> g = downX(d_dqkv, nq), gq = downX(d_dqw, hs), gk = downX(d_dkw, hs);
    check("qknorm_backward dqkv", s, g, dqkv, TOL_BWD);
    check("qknorm_backward dqw", s, gq, dqw, TOL_BWD);
    check("qknorm_backward dkw", s, gk, dkw, TOL_BWD);
    dev_upload_floats(d_dqkv, dqkv0.data(), nq);
    dev_upload_floats(d_dqw, dqw0.data(), hs);
    dev_upload_floats(d_dkw, dkw0.data(), hs);
    qknorm_backward(d_dqkv, d_dqw, d_dkw, d_scratch, d_pre, d_qw, d_kw, d_rstd, N, NH, NKV, hs);
    TEST_CHECK(same_bits(downX(d_dqkv, nq), g) && same_bits(downX(d_dqw, hs), gq) && same_bits(downX(d_dkw, hs), gk),
               "qknorm_backward bit-identical on a second run (%s)", s.c_str());
    dev_free(d_qkv); dev_free(d_qw); dev_free(d_kw); dev_free(d_pre); dev_free(d_rstd); dev_free(d_dqkv);
    dev_free(d_dqw); dev_free(d_dkw); dev_free(d_scratch);
}

/* ---------------------------------------------------------------- rmsnorm */
/* RMSNorm (Zhang & Sennrich 2019): the same kernels as LayerNorm's with RMS = true, against the CPU twin.
 * Tolerances as LayerNorm's (same arithmetic minus the mean): out TOL_FWD, rstd TOL_FP32 * 10 (fp32 both sides,
 * sums of C squares in different orders, then rsqrtf against 1/sqrtf: a few ulp), backward TOL_BWD. */
static void test_rmsnorm(int N, int C) {
    std::string s = shp("N=%d C=%d", N, C);
    std::vector<float> inp = randv((size_t)N * C, 2.0f), inp2 = randv((size_t)N * C), w = randv(C);
    for (auto& x : inp) x += 0.5f; /* nonzero mean: RMSNorm must not subtract it */
    floatX* d_inp = upX(inp);
    floatX* d_inp2 = upX(inp2);
    floatX* d_w = upX(w);
    floatX* d_out = dX((size_t)N * C);
    floatX* d_res = dX((size_t)N * C);
    float* d_rstd = dF(N);
    std::vector<float> out((size_t)N * C), rstd(N), res((size_t)N * C);

    poisonX(d_out, out.size()); poisonF(d_rstd, N);
    rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C);
    ref_rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C);
    check("rmsnorm_forward out", s, downX(d_out, out.size()), roundX(out), TOL_FWD);
    check("rmsnorm_forward rstd", s, downF(d_rstd, N), rstd, TOL_FP32 * 10);
    poisonX(d_out, out.size());
    rmsnorm_forward(d_out, NULL, d_inp, d_w, N, C); /* inference: no rstd */
    check("rmsnorm_forward out (rstd NULL)", s, downX(d_out, out.size()), roundX(out), TOL_FWD);

    poisonX(d_out, out.size()); poisonX(d_res, res.size()); poisonF(d_rstd, N);
    fused_residual_rmsnorm_forward(d_res, d_out, d_rstd, d_inp, d_inp2, d_w, N, C);
    std::vector<float> g_res = downX(d_res, res.size());
    ref_fused_residual_rmsnorm_forward(res.data(), out.data(), rstd.data(), inp.data(), inp2.data(), w.data(), N, C);
    check("fused_residual_rmsnorm residual", s, g_res, roundX(res), TOL_FWD);
    /* the reference normalises the residual as stored in floatX (what the GPU code normalises too) */
    std::vector<float> resX = roundX(res);
    ref_rmsnorm_forward(out.data(), rstd.data(), resX.data(), w.data(), N, C);
    check("fused_residual_rmsnorm out", s, downX(d_out, out.size()), roundX(out), TOL_FWD);
    check("fused_residual_rmsnorm rstd", s, downF(d_rstd, N), rstd, TOL_FP32 * 10);

    /* backward from the reference's rstd of inp, accumulating into random values */
    ref_rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C);
    std::vector<float> dout = randv((size_t)N * C), dinp = randv((size_t)N * C), dw = randv(C);
    floatX* d_dout = upX(dout);
    floatX* d_dinp = upX(dinp);
    floatX* d_dw = upX(dw);
    std::vector<float> dinp0 = dinp, dw0 = dw;
    dev_memcpy_h2d(d_rstd, rstd.data(), N * sizeof(float));
    size_t ns = rmsnorm_scratch_floats(N, C);
    float* d_scratch = dF(ns); /* exact size: a kernel that wrote LayerNorm's 2C per chunk would overrun it */
    poisonF(d_scratch, ns);
    rmsnorm_backward(d_dinp, d_dw, d_scratch, d_dout, d_inp, d_w, d_rstd, N, C);
    ref_rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    std::vector<float> g1 = downX(d_dinp, dinp.size()), g2 = downX(d_dw, C);
    check("rmsnorm_backward dinp", s, g1, dinp, TOL_BWD);
    check("rmsnorm_backward dw", s, g2, dw, TOL_BWD);
    dev_upload_floats(d_dinp, dinp0.data(), dinp0.size());
    dev_upload_floats(d_dw, dw0.data(), C);
    poisonF(d_scratch, ns);
    rmsnorm_backward(d_dinp, d_dw, d_scratch, d_dout, d_inp, d_w, d_rstd, N, C);
    TEST_CHECK(downX(d_dinp, dinp.size()) == g1 && downX(d_dw, C) == g2,
               "rmsnorm_backward bit-identical on a second run (%s)", s.c_str());
    if (C <= LAYERNORM_BWD_REG_C) { /* register path == shared-memory path, bit for bit (as LayerNorm's) */
        const int nchunks = layernorm_backward_chunks(N), rows_per_chunk = CEIL_DIV(N, nchunks);
        const size_t smem = (size_t)LAYERNORM_BWD_WARPS * (size_t)C * sizeof(float);
        const int vec = layernorm_vec_ok(C, d_dinp, d_inp, d_w, d_dout, NULL);
        std::vector<float> part[2], dx[2];
        for (int reg = 0; reg < 2; reg++) {
            dev_upload_floats(d_dinp, dinp0.data(), dinp0.size());
            poisonF(d_scratch, ns);
            norm_backward_launch<true>(vec, reg, nchunks, smem, d_dinp, d_scratch, d_dout, d_inp, d_w, NULL, d_rstd, N,
                                       C, rows_per_chunk);
            part[reg] = downF(d_scratch, ns);
            dx[reg] = downX(d_dinp, dinp.size());
        }
        TEST_CHECK(memcmp(part[0].data(), part[1].data(), ns * sizeof(float)) == 0 && dx[0] == dx[1],
                   "rmsnorm_backward %s: dw partial sums in registers == in shared memory, bit for bit (%zu partials)",
                   s.c_str(), ns);
    }
    dev_free(d_inp); dev_free(d_inp2); dev_free(d_w); dev_free(d_out); dev_free(d_res); dev_free(d_rstd);
    dev_free(d_dout); dev_free(d_dinp); dev_free(d_dw); dev_free(d_scratch);
}

/* ---------------------------------------------------------------- matmul (+ bias / GELU epilogues) */
static void test_matmul(int N, int C, int OC, int use_bias, int use_gelu) {
    std::string s = shp("N=%d C=%d OC=%d%s%s", N, C, OC, use_bias ? " bias" : "", use_gelu ? " gelu" : "");
    std::vector<float> inp = randv((size_t)N * C), w = randv((size_t)OC * C, 0.5f), b = randv(OC);
    floatX* d_inp = upX(inp);
    floatX* d_w = upX(w);
    floatX* d_b = upX(b);
    floatX* d_out = dX((size_t)N * OC);
    floatX* d_pre = dX((size_t)N * OC);
    poisonX(d_out, (size_t)N * OC);
    poisonX(d_pre, (size_t)N * OC);
    std::vector<float> out((size_t)N * OC), pre((size_t)N * OC);
    matmul_forward(d_out, d_inp, d_w, use_bias ? d_b : NULL, N, C, OC, use_gelu ? d_pre : NULL);
    ref_matmul_forward(out.data(), inp.data(), w.data(), use_bias ? b.data() : NULL, N, C, OC,
                       use_gelu ? pre.data() : NULL);
    check("matmul_forward out", s, downX(d_out, out.size()), roundX(out), TOL_FWD);
    std::vector<float> preX = use_gelu ? downX(d_pre, pre.size()) : std::vector<float>();
    if (use_gelu) check("matmul_forward pre_gelu", s, preX, roundX(pre), TOL_FWD);

    std::vector<float> dout = randv((size_t)N * OC), dw = randv((size_t)OC * C), db = randv(OC);
    floatX* d_dout = upX(dout);
    floatX* d_dinp = dX((size_t)N * C);
    floatX* d_dw = upX(dw);
    floatX* d_db = upX(db);
    poisonX(d_dinp, (size_t)N * C);
    size_t ns = matmul_scratch_floats(N, C, OC);
    float* d_scratch = dF(ns);
    poisonF(d_scratch, ns);
    if (use_gelu) dev_upload_floats(d_pre, preX.data(), preX.size()); /* both sides use the same pre_gelu */
    matmul_backward(d_dinp, d_dw, use_bias ? d_db : NULL, d_dout, d_inp, d_w, d_scratch, N, C, OC,
                    use_gelu ? d_pre : NULL);
    std::vector<float> dinp((size_t)N * C);
    ref_matmul_backward(dinp.data(), dw.data(), use_bias ? db.data() : NULL, dout.data(), inp.data(), w.data(), N, C,
                        OC, use_gelu ? preX.data() : NULL);
    check("matmul_backward dinp", s, downX(d_dinp, dinp.size()), dinp, TOL_BWD);
    check("matmul_backward dweight", s, downX(d_dw, dw.size()), dw, TOL_BWD);
    if (use_bias) check("matmul_backward dbias", s, downX(d_db, OC), db, TOL_BWD);
    dev_free(d_inp); dev_free(d_w); dev_free(d_b); dev_free(d_out); dev_free(d_pre); dev_free(d_dout);
    dev_free(d_dinp); dev_free(d_dw); dev_free(d_db); dev_free(d_scratch);
}

/* ---------------------------------------------------------------- gelu / residual / casts */
/* The GELU checks' tolerance relative to max |ref|. The kernel's tanh and the CPU reference's differ by an absolute
 * amount eps near |tanh u| = 1: with --use_fast_math (the BF16 builds, EMU_FAST_MATH) tanhf is tanh.approx.f32,
 * 2^-11 relative error (dev/emu/emu.h models it at that maximum), eps = 2^-11; in the FP32 build the kernel's libm
 * tanhf (up to 2 ulp) against the CPU's tanh_vec ((1 - e)/(1 + e), llmc/cpu/gelu.h: the subtraction and division
 * round to ulps of 1), together at most 4 ulp of values just under 1, eps = 2^-22. GELU's factor (1 + tanh u) does
 * not shrink that error where tanh u -> -1 (x < 0), so the output errs by up to 0.5 |x| eps however small gelu(x)
 * is, and the derivative 0.5 (1 + th) + 0.5 x k (1 + 3c x^2) (1 - th^2) by up to (0.5 + |x| k (1 + 3c x^2)) eps
 * (|d(1 - th^2)| <= 2 |d th|), times the incoming gradient |d|. That absolute term, over max |ref|, is added to
 * TOL_FWD; it matters when every output is small (n = 1 at x near -2.7: 6e-2 with fast math, 3.6e-5 in FP32, where
 * a seed's 1.02e-5 failed the bare TOL_FWD). */
static double gelu_tol(const std::vector<float>& x, const std::vector<float>* d, const std::vector<float>& ref) {
#ifdef EMU_FAST_MATH
    const double eps = exp2(-11.0);
#else
    const double eps = exp2(-22.0);
#endif
    double mx = 0.0, abs_err = 0.0;
    for (float r : ref) { mx = std::max(mx, (double)fabsf(r)); }
    for (size_t i = 0; i < x.size(); i++) {
        double ax = fabs((double)x[i]);
        double e = d ? fabs((double)(*d)[i]) * (0.5 + ax * 0.7978845608 * (1.0 + 3.0 * 0.044715 * ax * ax))
                     : 0.5 * ax;
        abs_err = std::max(abs_err, e * eps);
    }
    return TOL_FWD + (mx > 0.0 ? abs_err / mx : abs_err);
}

/* matmul_backward_dgelu (issue 15, item 9b): dinp = (dout @ W) * gelu'(pre) with cuBLASLt's DGELU epilogue (C % 8 ==
 * 0) or a plain GEMM + gelu_backward_inplace (otherwise), against the CPU backend. dinp's tolerance is TOL_BWD plus
 * the tanh term of gelu_tol (tanh.approx under fast math, libm against the CPU's tanh in FP32), the incoming gradient
 * being the plain GEMM's.
 * FP32 build: the epilogue path equals the two-step path (matmul_backward without GELU, then gelu_backward_inplace)
 * bit for bit, which shows the emulator's DGELU uses the derivative of llmc/cuda/gelu.cuh. */
static void test_matmul_dgelu(int N, int C, int OC) {
    std::string s = shp("N=%d C=%d OC=%d", N, C, OC);
    std::vector<float> inp = randv((size_t)N * C), pre = randv((size_t)N * C, 3.0f), w = randv((size_t)OC * C, 0.5f);
    std::vector<float> dout = randv((size_t)N * OC), dw = randv((size_t)OC * C), db = randv(OC);
    floatX* d_inp = upX(inp);
    floatX* d_pre = upX(pre);
    floatX* d_w = upX(w);
    floatX* d_dout = upX(dout);
    floatX* d_dw = upX(dw);
    floatX* d_db = upX(db);
    floatX* d_dinp = dX((size_t)N * C);
    poisonX(d_dinp, (size_t)N * C);
    size_t ns = matmul_scratch_floats(N, C, OC);
    float* d_scratch = dF(ns);
    poisonF(d_scratch, ns);
    const size_t launches0 = emu::launch_log().size();
    matmul_backward_dgelu(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_scratch, N, C, OC, d_pre);
    int gelu_kernels = 0; /* the fallback's gelu_backward_inplace; none when the epilogue did the work */
    for (size_t i = launches0; i < emu::launch_log().size(); i++) {
        gelu_kernels += emu::launch_log()[i].name.find("gelu") != std::string::npos;
    }
    TEST_CHECK(gelu_kernels == (C % 8 == 0 ? 0 : 1), "matmul_backward_dgelu (%s): %s (%d GELU kernels launched)",
               s.c_str(), C % 8 == 0 ? "cuBLASLt's DGELU epilogue applied gelu'" : "plain GEMM + gelu_backward_inplace",
               gelu_kernels);
    std::vector<float> g_dinp = downX(d_dinp, (size_t)N * C);
    std::vector<float> dinp((size_t)N * C), g0((size_t)N * C), dw0 = dw, db0 = db, dout0 = dout;
    ref_matmul_backward_dgelu(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC, pre.data());
    ref_matmul_backward(g0.data(), dw0.data(), db0.data(), dout0.data(), inp.data(), w.data(), N, C, OC, NULL);
    check("matmul_backward_dgelu dinp", s, g_dinp, dinp, TOL_BWD + (gelu_tol(pre, &g0, dinp) - TOL_FWD));
    check("matmul_backward_dgelu dweight", s, downX(d_dw, dw.size()), dw, TOL_BWD);
    check("matmul_backward_dgelu dbias", s, downX(d_db, OC), db, TOL_BWD);
#if FLOATX_IS_FLOAT
    floatX* d_dw2 = dX(dw.size());
    floatX* d_db2 = dX(OC);
    floatX* d_dinp2 = dX((size_t)N * C);
    dev_memset(d_dw2, 0, dw.size() * sizeof(floatX));
    dev_memset(d_db2, 0, OC * sizeof(floatX));
    matmul_backward(d_dinp2, d_dw2, d_db2, d_dout, d_inp, d_w, d_scratch, N, C, OC, NULL);
    gelu_backward_inplace(d_dinp2, d_pre, (size_t)N * C);
    TEST_CHECK(same_bits(downX(d_dinp2, (size_t)N * C), g_dinp),
               "matmul_backward_dgelu dinp (%s) == matmul_backward + gelu_backward_inplace, bit for bit", s.c_str());
    dev_free(d_dw2); dev_free(d_db2); dev_free(d_dinp2);
#endif
    dev_free(d_inp); dev_free(d_pre); dev_free(d_w); dev_free(d_dout); dev_free(d_dw); dev_free(d_db); dev_free(d_dinp);
    dev_free(d_scratch);
}

static void test_elementwise(size_t n) {
    std::string s = shp("n=%zu", n);
    std::vector<float> a = randv(n, 3.0f), b = randv(n), d = randv(n);
    floatX* d_a = upX(a);
    floatX* d_b = upX(b);
    floatX* d_o = dX(n);
    std::vector<float> ref(n);
    poisonX(d_o, n);
    gelu_forward(d_o, d_a, n);
    ref_gelu_forward(ref.data(), a.data(), n);
    check("gelu_forward", s, downX(d_o, n), roundX(ref), gelu_tol(a, NULL, ref));
    floatX* d_d = upX(d);
    std::vector<float> d_in = d;
    gelu_backward_inplace(d_d, d_a, n);
    ref_gelu_backward_inplace(d.data(), a.data(), n);
    check("gelu_backward_inplace", s, downX(d_d, n), roundX(d), gelu_tol(a, &d_in, d));
    poisonX(d_o, n);
    residual_forward(d_o, d_a, d_b, n);
    ref_residual_forward(ref.data(), a.data(), b.data(), n);
    check("residual_forward", s, downX(d_o, n), roundX(ref), TOL_FWD);
    /* cast.cuh: fp32 -> floatX on the device and back */
    std::vector<float> f = randv(n, 10.0f);
    float* d_f = upF(f);
    float* d_f2 = dF(n);
    poisonX(d_o, n);
    poisonF(d_f2, n);
    dev_copy_floats_to_floatX(d_o, d_f, n);
    dev_copy_floatX_to_floats(d_f2, d_o, n);
    check("cast fp32->floatX->fp32", s, downF(d_f2, n), roundX(f), 0.0);
    dev_free(d_a); dev_free(d_b); dev_free(d_o); dev_free(d_d); dev_free(d_f); dev_free(d_f2);
}

/* ---------------------------------------------------------------- rotary position embedding */
/* rope_forward / rope_backward (llmc/cuda/rope.cuh) against the CPU twin (llmc/cpu/rope.h) on the same floatX-rounded
 * input and the same fp32 table (llmc/rope_table.h, built on the host; no transcendental on either side).
 * Tolerance: each side computes a c -+ b s in fp32 with at most 3 roundings (fewer with a fused multiply-add), so
 * each is within 1.5u (|a| + |b|) <= 3u M of the exact value (u = 2^-24, M = max |input|), the two within 6u M; the
 * largest output is >= M / sqrt(2) (a rotation keeps the norm of the pair holding M), so the relative error is
 * <= 6 sqrt(2) u = 5.1e-7: FP32 tol 1e-6. BF16: both fp32 results are rounded to bf16 once (the CPU's by roundX);
 * values that close round to the same or to adjacent bf16 numbers: one ulp, <= 2^-7 |out| <= 2^-7 sqrt(2) M, i.e.
 * relative to the largest output <= 2^-6: tol 1/64. The value heads must come back bit for bit (tol 0).
 * Paths: 128-bit packets when (hs/2) % X128_SIZE == 0 and qkv is 16-byte aligned (misalign = 1 shifts qkv by one
 * element to force the element path at a packed head size). */
static void test_rope(int B, int T, int NH, int KV, int hs, int pos0, int llama3, int misalign) {
    const double tol = FLOATX_IS_FLOAT ? 1e-6 : 1.0 / 64;
    const RopeScaling l3 = {8.0f, 1.0f, 4.0f, 8192};
    const int maxT = pos0 + T, row = (NH + 2 * KV) * hs;
    const size_t n = (size_t)B * T * row;
    std::string s = shp("B%d T%d NH%d KV%d hs%d p%d%s%s", B, T, NH, KV, hs, pos0, llama3 ? " l3" : "",
                        misalign ? " misal" : "");
    std::vector<float> tab((size_t)maxT * hs);
    rope_table(tab.data(), maxT, hs, llama3 ? 500000.0f : 10000.0f, llama3 ? &l3 : NULL);
    float* d_tab = upF(tab);
    floatX* d_buf = dX(n + misalign);
    floatX* d_x = d_buf + misalign;
    for (int dir = 0; dir < 2; dir++) {
        std::vector<float> x = randv(n, 2.0f);
        std::vector<float> tmp = x;
        floatX* d_r = upX(tmp); /* rounds tmp to floatX */
        x = tmp;
        dev_memcpy_d2d(d_x, d_r, n * sizeof(floatX));
        dev_free(d_r);
        std::vector<float> ref = x;
        if (dir == 0) {
            rope_forward(d_x, d_tab, B, T, NH, KV, hs, pos0);
            ref_rope_forward(ref.data(), tab.data(), B, T, NH, KV, hs, pos0);
        } else {
            rope_backward(d_x, d_tab, B, T, NH, KV, hs, pos0);
            ref_rope_backward(ref.data(), tab.data(), B, T, NH, KV, hs, pos0);
        }
        std::vector<float> got = downX(d_x, n);
        std::vector<float> gv, xv;
        for (int r = 0; r < B * T; r++) {
            const size_t v0 = (size_t)r * row + (size_t)(NH + KV) * hs;
            gv.insert(gv.end(), got.begin() + v0, got.begin() + v0 + (size_t)KV * hs);
            xv.insert(xv.end(), x.begin() + v0, x.begin() + v0 + (size_t)KV * hs);
        }
        check(dir == 0 ? "rope_forward" : "rope_backward", s, got, roundX(ref), tol);
        check(dir == 0 ? "rope_forward value heads" : "rope_backward value heads", s, gv, xv, 0.0);
    }
    dev_free(d_tab); dev_free(d_buf);
}

/* ---------------------------------------------------------------- SwiGLU / ReLU^2 */
/* The name of the kernel launched last ("..._kernel<X128_SIZE>" on the 128-bit path, "..._kernel<1>" otherwise) */
static std::string last_launch(void) { return emu::launch_log().empty() ? "" : emu::launch_log().back().name; }

/* SwiGLU (Shazeer 2020) forward and backward against llmc/cpu/gelu.h's twins. Inputs: gate and up uniform in
 * [-4, 4), plus, when `extremes`, gates of +-100, +-90, +-20 and 0 planted in the first row (sigmoid saturation:
 * __expf(100) is +inf, so s = 0 exactly; no NaN may appear). `misalign` offsets every buffer by one element, which
 * must force the element path. Tolerances: both sides do the same fp32 operations in the same order on the same
 * rounded inputs, except the exponential: cpu_expf (a few ulp) against __expf, which dev/emu/emu.h errs by its
 * documented maximum 2 + floor(1.173 |x|) ulp. The header of llmc/cuda/gelu.cuh bounds the resulting absolute error
 * of silu by 1.1e-7 and of silu' by 6e-8 for every g; times |up| or |dout| <= 4 that is < 5e-7, ~3e-8 relative to
 * max |ref| (~ 4 x 4 here). The sigmoids differing in their last bits, the up to four fp32 roundings after them can
 * land on different sides (one fp32 ulp each, 2^-23 relative: ~5e-7 in all). So TOL_FWD (1e-5) for both directions
 * (elementwise: no reductions); in BF16 the final rounding can flip by one bf16 ulp, 2^-8 relative <= TOL_FWD. A
 * swapped gate/up half, a missing g (1-s) term or an output written to the wrong half gives errors of order 1. */
static void test_swiglu(int N, int F, int extremes, int misalign) {
    std::string s = shp("N=%d F=%d%s%s", N, F, extremes ? " extremes" : "", misalign ? " misaligned" : "");
    const size_t ni = (size_t)N * 2 * F, no = (size_t)N * F, off = misalign ? 1 : 0;
    std::vector<float> inp = randv(ni + off, 4.0f), dout = randv(no + off, 4.0f);
    if (extremes) {
        const float big[] = {100.0f, -100.0f, 90.0f, -90.0f, 20.0f, -20.0f, 0.0f};
        for (int k = 0; k < 7 && k < F; k++) { inp[off + (size_t)k] = big[k]; }
    }
    floatX* d_inp = upX(inp);
    floatX* d_dout = upX(dout);
    floatX* d_out = dX(no + off);
    floatX* d_dinp = dX(ni + off);
    poisonX(d_out, no + off);
    poisonX(d_dinp, ni + off);
    const bool packed = !misalign && F % X128_SIZE == 0;
    swiglu_forward(d_out + off, d_inp + off, N, F);
    const bool fwd_path = (last_launch().find("<X128_SIZE>") != std::string::npos) == packed;
    std::vector<float> ref(no), dref(ni);
    ref_swiglu_forward(ref.data(), inp.data() + off, N, F);
    check("swiglu_forward", s, downX(d_out + off, no), roundX(ref), TOL_FWD);
    swiglu_backward(d_dinp + off, d_dout + off, d_inp + off, N, F);
    const bool bwd_path = (last_launch().find("<X128_SIZE>") != std::string::npos) == packed;
    TEST_CHECK(fwd_path && bwd_path, "swiglu (%s): the %s path was launched", s.c_str(), packed ? "128-bit" : "element");
    ref_swiglu_backward(dref.data(), dout.data() + off, inp.data() + off, N, F);
    std::vector<float> g1 = downX(d_dinp + off, ni);
    check("swiglu_backward", s, g1, roundX(dref), TOL_FWD);
    if (extremes) {
        bool finite = true;
        for (float v : downX(d_out + off, no)) finite &= std::isfinite(v);
        for (float v : g1) finite &= std::isfinite(v);
        TEST_CHECK(finite, "swiglu (%s): gates of +-100, +-90, +-20 give finite outputs and gradients", s.c_str());
    }
    swiglu_backward(d_dinp + off, d_dout + off, d_inp + off, N, F);
    TEST_CHECK(same_bits(downX(d_dinp + off, ni), g1), "swiglu_backward (%s) bit-identical on a second run", s.c_str());
    dev_free(d_inp); dev_free(d_dout); dev_free(d_out); dev_free(d_dinp);
}

/* ReLU^2 (So et al. 2021): exact (tolerance 0) in both builds: max(x, 0)^2 and d (2 max(x, 0)) are the same fp32
 * operations on the same rounded inputs on both sides, then one rounding to floatX. Also checked in place (out =
 * inp, as the contract allows) and with misaligned pointers (element path). */
static void test_relu2(size_t n, int misalign) {
    std::string s = shp("n=%zu%s", n, misalign ? " misaligned" : "");
    const size_t off = misalign ? 1 : 0;
    std::vector<float> a = randv(n + off, 3.0f), d = randv(n + off);
    floatX* d_a = upX(a);
    floatX* d_d = upX(d);
    floatX* d_o = dX(n + off);
    poisonX(d_o, n + off);
    std::vector<float> ref(n);
    relu2_forward(d_o + off, d_a + off, n);
    const bool packed = !misalign && n % X128_SIZE == 0;
    TEST_CHECK((last_launch().find("<X128_SIZE>") != std::string::npos) == packed,
               "relu2_forward (%s): the %s path was launched", s.c_str(), packed ? "128-bit" : "element");
    ref_relu2_forward(ref.data(), a.data() + off, n);
    check("relu2_forward", s, downX(d_o + off, n), roundX(ref), 0.0);
    std::vector<float> dref(d.begin() + (long)off, d.end());
    relu2_backward_inplace(d_d + off, d_a + off, n);
    ref_relu2_backward_inplace(dref.data(), a.data() + off, n);
    check("relu2_backward_inplace", s, downX(d_d + off, n), roundX(dref), 0.0);
    relu2_forward(d_a + off, d_a + off, n); /* in place */
    check("relu2_forward in place", s, downX(d_a + off, n), roundX(ref), 0.0);
    dev_free(d_a); dev_free(d_d); dev_free(d_o);
}

/* ---------------------------------------------------------------- attention */
/* Grouped-query attention (Ainslie et al. 2023) reference helpers, independent of llmc/cuda/attention_gqa.cuh's kernels:
 * the CPU backend runs multi-head attention (NKV = NH) on the explicitly expanded qkv, and the test sums dK/dV over
 * each group itself. N = B*T rows, hs = C/NH, g = NH/NKV, query head h uses kv head h/g. */
/* qkv (N,(NH+2*NKV)*hs) -> (N,3C), each kv head repeated g times */
static std::vector<float> gqa_expand(const std::vector<float>& qkv, int N, int C, int NH, int NKV) {
    const int hs = C / NH, g = NH / NKV, QW = C + 2 * NKV * hs;
    std::vector<float> x((size_t)N * 3 * C);
    for (int n = 0; n < N; n++) {
        const float* src = qkv.data() + (size_t)n * QW;
        float* dst = x.data() + (size_t)n * 3 * C;
        for (int c = 0; c < C; c++) dst[c] = src[c];
        for (int sec = 1; sec <= 2; sec++)
            for (int h = 0; h < NH; h++)
                for (int d = 0; d < hs; d++)
                    dst[sec * C + h * hs + d] = src[C + (sec - 1) * NKV * hs + (h / g) * hs + d];
    }
    return x;
}
/* dqkv (N,3C) of the expanded problem -> (N,(NH+2*NKV)*hs): dQ as is, dK/dV of kv head j = the fp64 sum over query
 * heads j*g .. j*g+g-1, rounded to float once */
static std::vector<float> gqa_reduce(const std::vector<float>& x, int N, int C, int NH, int NKV) {
    const int hs = C / NH, g = NH / NKV, QW = C + 2 * NKV * hs;
    std::vector<float> r((size_t)N * QW);
    for (int n = 0; n < N; n++) {
        const float* src = x.data() + (size_t)n * 3 * C;
        float* dst = r.data() + (size_t)n * QW;
        for (int c = 0; c < C; c++) dst[c] = src[c];
        for (int sec = 1; sec <= 2; sec++)
            for (int j = 0; j < NKV; j++)
                for (int d = 0; d < hs; d++) {
                    double acc = 0.0;
                    for (int q = 0; q < g; q++) acc += src[sec * C + (j * g + q) * hs + d];
                    dst[C + (sec - 1) * NKV * hs + j * hs + d] = (float)acc;
                }
    }
    return r;
}

/* mode: 0 the dispatching entry points (the contract's attention_forward/backward), 1 the CUDA-core fallback forced,
 * 2 the forward as 0 and the one-kernel FlashAttention-2 backward (attention_backward_fa2: 5 matmuls, row-dot fused,
 * dQ summed in key-tile order through an fp32 accumulator and per-tile flags; the ATTN_BWD_FA2=1 build's backward)
 * with its own scratch size. NKV (0: NH) key/value heads: with NKV < NH every mode runs the flash kernels natively
 * (kv head h/g indexed in the K/V loads; dK/dV of a kv head summed over its group inside the dK/dV kernel, in fp32,
 * one rounding), and the contract's scratch is the flash backward's (D only; FA2: its own). Every GQA run is checked
 * against the multi-head CPU reference on the explicitly expanded qkv (gqa_expand, gqa_reduce). Tolerance TOL_ATT
 * for all: the native group sum of dK/dV is g times as many fp32 terms as one head's and one floatX rounding. */
static void test_attention(int B, int T, int C, int NH, int mode, int NKV = 0) {
    if (NKV == 0) NKV = NH;
    const int hs = C / NH, QW = C + 2 * NKV * hs, N = B * T;
    const bool gqa = NKV < NH;
    const int force_fallback = mode == 1;
    std::string s = gqa ? shp("B=%d T=%d C=%d NH=%d NKV=%d hs=%d", B, T, C, NH, NKV, hs)
                        : shp("B=%d T=%d C=%d NH=%d hs=%d", B, T, C, NH, hs);
    const char* path = mode == 1 ? (gqa ? "attention fallback (GQA)" : "attention fallback")
                       : mode == 2 ? "attention (fa2 bwd)"
                       : gqa     ? "attention (GQA native)"
                                 : "attention (dispatch)";
    const size_t nscratch = mode == 2 ? attention_fa2_scratch_floats(B, T, C, NH)
                                      : attention_scratch_floats(B, T, C, NH, NKV);
    /* the contract's scratch is the flash backward's at every NKV: GQA needs nothing more (no expanded copy) */
    TEST_CHECK(mode == 2 || nscratch == attention_flash_scratch_floats(B, T, C, NH),
               "attention_scratch_floats is the flash backward's scratch, nothing more: %zu floats (%s)", nscratch,
               s.c_str());
    std::vector<float> qkv = randv((size_t)N * QW, 1.5f), dout = randv((size_t)N * C);
    floatX* d_qkv = upX(qkv);
    floatX* d_dout = upX(dout);
    floatX* d_out = dX((size_t)N * C);
    floatX* d_dqkv = dX((size_t)N * QW);
    float* d_state = dF(attention_state_floats(B, T, NH));
    float* d_scratch = dF(nscratch);
    poisonX(d_out, (size_t)N * C);
    poisonX(d_dqkv, (size_t)N * QW);
    poisonF(d_state, attention_state_floats(B, T, NH));
    poisonF(d_scratch, nscratch);
    const size_t launches0 = emu::launch_log().size();
    if (force_fallback) {
        attention_forward_cuda_cores(d_out, d_state, d_qkv, B, T, C, NH, NKV);
    } else {
        attention_forward(d_out, d_state, d_scratch, d_qkv, B, T, C, NH, NKV);
    }
    std::vector<float> out((size_t)N * C), xdqkv((size_t)N * 3 * C);
    ref_attention_forward_backward(out.data(), xdqkv.data(), gqa ? gqa_expand(qkv, N, C, NH, NKV).data() : qkv.data(),
                                   dout.data(), B, T, C, NH, NH);
    std::vector<float> dqkv = gqa ? gqa_reduce(xdqkv, N, C, NH, NKV) : xdqkv;
    std::vector<float> g_out = downX(d_out, out.size());
    check((std::string(path) + " forward").c_str(), s, g_out, roundX(out), TOL_ATT);
    /* backward from this side's own forward output and state */
    poisonF(d_scratch, nscratch);
    if (force_fallback) {
        attention_backward_cuda_cores(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_state, B, T, C, NH, NKV);
    } else if (mode == 2) {
        attention_backward_fa2(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_state, B, T, C, NH, NKV);
    } else {
        attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_state, B, T, C, NH, NKV);
    }
    {
        /* mode 2 on the tensor-core path is the one FA2 kernel, one launch at every NKV (not its flash7 fallback) */
        int fa2 = 0;
        for (size_t i = launches0; i < emu::launch_log().size(); i++) {
            fa2 += emu::launch_log()[i].name.find("attention_backward_fa2_mma_kernel") != std::string::npos;
        }
        if (mode == 2) {
            const int want_fa2 = attention_flash_path(hs, C, d_dqkv, d_dout, d_qkv) ? 1 : 0;
            TEST_CHECK(fa2 == want_fa2, "%s: the FA2 kernel launched %d times (want %d) (%s)", path, fa2, want_fa2,
                       s.c_str());
        }
    }
    std::vector<float> g_dqkv = downX(d_dqkv, dqkv.size());
    check((std::string(path) + " backward dqkv").c_str(), s, g_dqkv, dqkv, TOL_ATT);
    if (gqa) { /* the summed part alone (its own max |ref| as the scale) */
        std::vector<float> gk, rk;
        for (int n = 0; n < N; n++) {
            gk.insert(gk.end(), g_dqkv.begin() + (size_t)n * QW + C, g_dqkv.begin() + (size_t)(n + 1) * QW);
            rk.insert(rk.end(), dqkv.begin() + (size_t)n * QW + C, dqkv.begin() + (size_t)(n + 1) * QW);
        }
        check((std::string(path) + " backward dk,dv (group sums)").c_str(), s, gk, rk, TOL_ATT);
    }
    /* the row-dot pass's D = rowsum(dO * O) left in the scratch, against an fp64 sum of the same floatX inputs: an
     * fp32 sum of hs products in any order is within hs 2^-24 sum_d |dO O| of it (products and additions rounded
     * once each), so the tolerance relative to max |D| is hs 2^-24 max_row sum |dO O| / max |D| */
    {
        std::vector<float> D = downF(d_scratch, (size_t)B * NH * T), refD(D.size());
        double max_abs_sum = 0.0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < NH; h++) {
                    double acc = 0.0, abs_sum = 0.0;
                    for (int i = 0; i < hs; i++) {
                        size_t e = ((size_t)b * T + t) * C + (size_t)h * hs + i;
                        acc += (double)g_out[e] * (double)dout[e];
                        abs_sum += fabs((double)g_out[e] * (double)dout[e]);
                    }
                    refD[((size_t)b * NH + h) * T + t] = (float)acc;
                    max_abs_sum = std::max(max_abs_sum, abs_sum);
                }
        double max_d = 0.0;
        for (float x : refD) max_d = std::max(max_d, (double)fabsf(x));
        double tol = hs * exp2(-24.0) * max_abs_sum / std::max(max_d, 1e-30) + exp2(-24.0); /* + the float cast of refD */
        check((std::string(path) + " backward D=rowsum(dO*O)").c_str(), s, D, refD, tol);
    }
    poisonX(d_dqkv, dqkv.size());
    poisonF(d_scratch, nscratch); /* the second run must not lean on what the first left in the accumulator */
    if (force_fallback) {
        attention_backward_cuda_cores(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_state, B, T, C, NH, NKV);
    } else if (mode == 2) {
        attention_backward_fa2(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_state, B, T, C, NH, NKV);
    } else {
        attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_state, B, T, C, NH, NKV);
    }
    TEST_CHECK(downX(d_dqkv, dqkv.size()) == g_dqkv, "%s backward bit-identical on a second run (%s)", path, s.c_str());
    dev_free(d_qkv); dev_free(d_dout); dev_free(d_out); dev_free(d_dqkv); dev_free(d_state); dev_free(d_scratch);
}

/* one new query against t cached keys/values (KV-cache sampling): the kernel against the CPU backend's, and the
 * CPU decode of position t-1 against row t-1 of the CPU's full causal attention over the same t positions. NKV (0: NH)
 * kv heads: the cache rows hold NKV heads (t, NKV*hs); the reference is the CPU's multi-head decode on the cache with
 * each kv head repeated g times (gqa_expand), so the kernel's native kv indexing is checked against an explicit
 * expansion */
static void test_attention_decode(int t, int C, int NH, int NKV = 0) {
    if (NKV == 0) NKV = NH;
    const int hs = C / NH, KVC = NKV * hs, QW = C + 2 * KVC;
    std::string s = NKV < NH ? shp("t=%d C=%d NH=%d NKV=%d hs=%d", t, C, NH, NKV, hs)
                             : shp("t=%d C=%d NH=%d hs=%d", t, C, NH, hs);
    std::vector<float> qkv = roundX(randv((size_t)t * QW, 1.5f)); /* floatX values, so both sides see the same */
    std::vector<float> q(qkv.end() - QW, qkv.end() - 2 * KVC), k((size_t)t * KVC), v((size_t)t * KVC);
    for (int j = 0; j < t; j++) {
        std::copy(qkv.begin() + (size_t)j * QW + C, qkv.begin() + (size_t)j * QW + C + KVC, k.begin() + (size_t)j * KVC);
        std::copy(qkv.begin() + (size_t)j * QW + C + KVC, qkv.begin() + (size_t)(j + 1) * QW, v.begin() + (size_t)j * KVC);
    }
    floatX* d_q = upX(q);
    floatX* d_k = upX(k);
    floatX* d_v = upX(v);
    floatX* d_out = dX(C);
    poisonX(d_out, C);
    attention_decode(d_out, d_q, d_k, d_v, NULL, t, C, NH, NKV);
    /* the expanded problem: qkv (t, 3C), k and v (t, C) */
    std::vector<float> xqkv = gqa_expand(qkv, t, C, NH, NKV), xk((size_t)t * C), xv((size_t)t * C);
    for (int j = 0; j < t; j++) {
        std::copy(xqkv.begin() + (size_t)j * 3 * C + C, xqkv.begin() + (size_t)j * 3 * C + 2 * C, xk.begin() + (size_t)j * C);
        std::copy(xqkv.begin() + (size_t)j * 3 * C + 2 * C, xqkv.begin() + (size_t)(j + 1) * 3 * C, xv.begin() + (size_t)j * C);
    }
    std::vector<float> ref(C), full((size_t)t * C);
    ref_attention_decode(ref.data(), q.data(), xk.data(), xv.data(), t, C, NH, NH);
    check(NKV < NH ? "attention_decode (GQA)" : "attention_decode", s, downX(d_out, C), roundX(ref), TOL_ATT);
    ref_attention_forward_backward(full.data(), NULL, xqkv.data(), NULL, 1, t, C, NH, NH);
    std::vector<float> last(full.end() - C, full.end());
    check("attention_decode (CPU) vs full attention's last row (CPU)", s, ref, last, 1e-5);
    dev_free(d_q); dev_free(d_k); dev_free(d_v); dev_free(d_out);
}

/* ---------------------------------------------------------------- fused classifier */
static void test_classifier(int N, int V, int Vp, int write_dlogits) {
    std::string s = shp("N=%d V=%d Vp=%d%s", N, V, Vp, write_dlogits ? " dlogits" : "");
    std::vector<float> logits = randv((size_t)N * Vp, 4.0f);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 30.0f; /* padded columns must be ignored */
    std::vector<int> tgt(N);
    for (int i = 0; i < N; i++) tgt[i] = (i % 5 == 3) ? -1 : (int)(rng_next() % (uint64_t)V);
    floatX* d_logits = upX(logits);
    float* d_losses = dF(N);
    int* d_tgt = (int*)dev_malloc(N * sizeof(int), "tgt");
    dev_memcpy_h2d(d_tgt, tgt.data(), N * sizeof(int));
    poisonF(d_losses, N);
    const float dloss = 1.0f / N;
    fused_classifier(d_logits, d_losses, dloss, d_tgt, N, V, Vp, write_dlogits);
    std::vector<float> ref = logits, losses(N);
    ref_fused_classifier(ref.data(), losses.data(), dloss, tgt.data(), N, V, Vp, write_dlogits);
    check("fused_classifier losses", s, downF(d_losses, N), losses, TOL_FWD);
    check(write_dlogits ? "fused_classifier dlogits" : "fused_classifier logits untouched", s,
          downX(d_logits, logits.size()), roundX(ref), write_dlogits ? TOL_FWD : 0.0);
    dev_free(d_logits); dev_free(d_losses); dev_free(d_tgt);
}

/* ---------------------------------------------------------------- vocabulary-parallel cross-entropy */
/* One shard: logits(N,Vs) of columns [v0, v0+Vs), `valid` of them real (padding holds 30, which must be ignored),
 * targets: every 5th row ignored (-1), the others inside the shard's real columns, in its padding, or in another
 * shard. maxes(tp,N): this rank's row (r = rank) is its row_max, the other ranks' rows are random, so M_i comes
 * from this shard or from another; sums(2,N) for finish: this shard's sums plus a random positive part for the
 * other ranks. The same fp32 maxes and sums go to both backends, so every op is compared on identical inputs.
 * Tolerances: row_max and the target logit are exact (a max and a copy). The exp sums and the losses are fp32
 * arithmetic on identical inputs in both builds: the GPU sums in fp32 in a fixed tree (per-thread sums of at most
 * ceil(valid/256) terms, then 8 levels), the CPU in double, and the exps differ by a few ulp, so 1e-5 (TOL_FP32:
 * 150 ulp) covers the at most (valid/256 + 8) + a few ulp of relative error here. dlogits: the same fp32 math,
 * then one rounding to floatX, so TOL_FWD (one floatX ulp where the two straddle a rounding boundary). Padding
 * columns and ignored rows must be exactly 0. `misalign` offsets logits by one element (element path). */
static void test_vocab_parallel(int N, int Vs, int valid, int v0, int tp, int rank, int write_dlogits, int misalign) {
    std::string s = shp("N=%d Vs=%d valid=%d v0=%d tp=%d%s%s", N, Vs, valid, v0, tp, write_dlogits ? " dl" : "",
                        misalign ? " misal" : "");
    std::vector<float> logits = randv((size_t)N * Vs + misalign, 4.0f);
    for (int i = 0; i < N; i++)
        for (int j = valid; j < Vs; j++) logits[misalign + (size_t)i * Vs + j] = 30.0f;
    std::vector<int> tgt(N);
    for (int i = 0; i < N; i++) {
        const int kind = (int)(rng_next() % 4);
        if (i % 5 == 3) tgt[i] = -1;
        else if (kind <= 1 && valid > 0) tgt[i] = v0 + (int)(rng_next() % (uint64_t)valid); /* in this shard */
        else if (kind == 2 && valid < Vs) tgt[i] = v0 + valid + (int)(rng_next() % (uint64_t)(Vs - valid)); /* padding */
        else tgt[i] = (v0 > 0 && (rng_next() & 1)) ? (int)(rng_next() % (uint64_t)v0) : v0 + Vs + 7; /* elsewhere */
    }
    floatX* d_all = upX(logits);
    floatX* d_logits = d_all + misalign;
    const std::vector<float> lg(logits.begin() + misalign, logits.end()); /* rounded */
    int* d_tgt = upI(tgt);
    float* d_max = dF(N);
    float* d_maxes = dF((size_t)tp * N);
    float* d_sums = dF(2 * (size_t)N);
    float* d_losses = dF(N);

    /* 1. row maxima */
    poisonF(d_max, N);
    vocab_parallel_row_max(d_max, d_logits, N, Vs, valid);
    std::vector<float> g_max = downF(d_max, N), r_max(N);
    ref_vocab_parallel_row_max(r_max.data(), lg.data(), N, Vs, valid);
    check("vocab_parallel_row_max", s, g_max, r_max, 0.0);
    vocab_parallel_row_max(d_max, d_logits, N, Vs, valid);
    const bool max_det = same_bits(downF(d_max, N), g_max);
    bool empty_ok = true;
    if (valid == 0) for (float m : g_max) empty_ok &= m == -FLT_MAX;

    /* 2. exp sums against the maxima of every rank */
    std::vector<float> maxes((size_t)tp * N);
    for (int r = 0; r < tp; r++)
        for (int i = 0; i < N; i++)
            maxes[(size_t)r * N + i] = r == rank ? r_max[i] : (rng_next() % 3 == 0 ? -FLT_MAX : 4.0f * urand() + 1.0f);
    dev_memcpy_h2d(d_maxes, maxes.data(), maxes.size() * sizeof(float));
    poisonF(d_sums, 2 * (size_t)N);
    vocab_parallel_row_sums(d_sums, d_logits, d_maxes, tp, d_tgt, v0, N, Vs, valid);
    std::vector<float> g_sums = downF(d_sums, 2 * (size_t)N), r_sums(2 * (size_t)N);
    ref_vocab_parallel_row_sums(r_sums.data(), lg.data(), maxes.data(), tp, tgt.data(), v0, N, Vs, valid);
    check("vocab_parallel_row_sums exp sums", s, std::vector<float>(g_sums.begin(), g_sums.begin() + N),
          std::vector<float>(r_sums.begin(), r_sums.begin() + N), TOL_FP32);
    check("vocab_parallel_row_sums target logit", s, std::vector<float>(g_sums.begin() + N, g_sums.end()),
          std::vector<float>(r_sums.begin() + N, r_sums.end()), 0.0);
    vocab_parallel_row_sums(d_sums, d_logits, d_maxes, tp, d_tgt, v0, N, Vs, valid);
    const bool sums_det = same_bits(downF(d_sums, 2 * (size_t)N), g_sums);
    if (valid == 0) for (float x : g_sums) empty_ok &= x == 0.0f;

    /* 3. losses and dlogits from the "all-reduced" sums (this shard's + the other ranks') */
    std::vector<float> sums = r_sums;
    for (int i = 0; i < N; i++) {
        if (tgt[i] < 0) continue;
        float M = maxes[i];
        for (int r = 1; r < tp; r++) M = std::max(M, maxes[(size_t)r * N + i]);
        sums[i] += (tp > 1 || sums[i] == 0.0f ? 1.0f : 0.0f) + 3.0f * fabsf(urand()); /* S > 0, the max's term 1 */
        if (sums[N + i] == 0.0f) sums[N + i] = M - 2.0f * fabsf(urand()); /* the target logit from its shard */
    }
    dev_memcpy_h2d(d_sums, sums.data(), sums.size() * sizeof(float));
    const float dloss = 1.0f / N;
    poisonF(d_losses, N);
    vocab_parallel_finish(d_logits, d_losses, d_maxes, tp, d_sums, d_tgt, v0, N, Vs, valid, dloss, write_dlogits);
    std::vector<float> g_loss = downF(d_losses, N), g_d = downX(d_logits, lg.size());
    std::vector<float> r_loss(N), r_d = lg;
    ref_vocab_parallel_finish(r_d.data(), r_loss.data(), maxes.data(), tp, sums.data(), tgt.data(), v0, N, Vs, valid,
                              dloss, write_dlogits);
    check("vocab_parallel_finish losses", s, g_loss, r_loss, TOL_FP32);
    bool zeros = true;
    if (write_dlogits) {
        check("vocab_parallel_finish dlogits", s, g_d, roundX(r_d), TOL_FWD);
        for (int i = 0; i < N; i++)
            for (int j = tgt[i] < 0 ? 0 : valid; j < Vs; j++) zeros &= g_d[(size_t)i * Vs + j] == 0.0f;
        dev_upload_floats(d_logits, lg.data(), lg.size());
        vocab_parallel_finish(d_logits, d_losses, d_maxes, tp, d_sums, d_tgt, v0, N, Vs, valid, dloss, 1);
    } else {
        check("vocab_parallel_finish logits untouched", s, g_d, lg, 0.0);
        vocab_parallel_finish(d_logits, d_losses, d_maxes, tp, d_sums, d_tgt, v0, N, Vs, valid, dloss, 0);
    }
    const bool fin_det = same_bits(downF(d_losses, N), g_loss) && same_bits(downX(d_logits, lg.size()), g_d);
    TEST_CHECK(max_det && sums_det && fin_det && zeros && empty_ok,
               "vocab_parallel (%s): bit-identical on a second run (max %d, sums %d, finish %d); padding and ignored "
               "rows exactly 0 (%d); valid = 0 gives -FLT_MAX and zero sums (%d)", s.c_str(), max_det, sums_det,
               fin_det, zeros, empty_ok);
    dev_free(d_all); dev_free(d_tgt); dev_free(d_max); dev_free(d_maxes); dev_free(d_sums); dev_free(d_losses);
}

/* The three steps over tp shards of a (N,Vp) logits matrix (columns [r*Vp/tp, (r+1)*Vp/tp), V real: the last
 * shards hold the padding, possibly only padding), with the all-reduces done on the host in fp32 in rank order,
 * against fused_classifier of the CPU backend on the whole matrix: losses within TOL_FP32 (fp32 sums of identical
 * inputs; see test_vocab_parallel), dlogits within TOL_FWD. */
static void test_vocab_parallel_composition(int N, int V, int Vp, int tp) {
    std::string s = shp("N=%d V=%d Vp=%d tp=%d", N, V, Vp, tp);
    const int Vs = Vp / tp;
    std::vector<float> logits = randv((size_t)N * Vp, 4.0f);
    std::vector<int> tgt(N);
    for (int i = 0; i < N; i++) tgt[i] = (i % 7 == 2) ? -1 : (int)(rng_next() % (uint64_t)V);
    logits = roundX(logits);
    int* d_tgt = upI(tgt);
    std::vector<floatX*> d_shard(tp);
    std::vector<float> maxes((size_t)tp * N), sums(2 * (size_t)N, 0.0f), part(2 * (size_t)N), mx(N);
    float* d_max = dF(N);
    float* d_maxes = dF((size_t)tp * N);
    float* d_sums = dF(2 * (size_t)N);
    float* d_losses = dF(N);
    for (int r = 0; r < tp; r++) {
        std::vector<float> sh((size_t)N * Vs);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vs; j++) sh[(size_t)i * Vs + j] = logits[(size_t)i * Vp + r * Vs + j];
        d_shard[r] = upX(sh);
        const int valid = std::max(0, std::min(Vs, V - r * Vs));
        vocab_parallel_row_max(d_max, d_shard[r], N, Vs, valid);
        dev_memcpy_d2h(mx.data(), d_max, N * sizeof(float));
        std::copy(mx.begin(), mx.end(), maxes.begin() + (size_t)r * N); /* the all-reduce of one-hot rows */
    }
    dev_memcpy_h2d(d_maxes, maxes.data(), maxes.size() * sizeof(float));
    for (int r = 0; r < tp; r++) {
        const int valid = std::max(0, std::min(Vs, V - r * Vs));
        vocab_parallel_row_sums(d_sums, d_shard[r], d_maxes, tp, d_tgt, r * Vs, N, Vs, valid);
        dev_memcpy_d2h(part.data(), d_sums, part.size() * sizeof(float));
        for (size_t k = 0; k < part.size(); k++) sums[k] += part[k];
    }
    dev_memcpy_h2d(d_sums, sums.data(), sums.size() * sizeof(float));
    std::vector<float> got_d((size_t)N * Vp), loss0;
    bool same_loss = true;
    for (int r = 0; r < tp; r++) {
        const int valid = std::max(0, std::min(Vs, V - r * Vs));
        poisonF(d_losses, N);
        vocab_parallel_finish(d_shard[r], d_losses, d_maxes, tp, d_sums, d_tgt, r * Vs, N, Vs, valid, 1.0f / N, 1);
        std::vector<float> l = downF(d_losses, N), d = downX(d_shard[r], (size_t)N * Vs);
        if (r == 0) loss0 = l;
        same_loss &= same_bits(l, loss0);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vs; j++) got_d[(size_t)i * Vp + r * Vs + j] = d[(size_t)i * Vs + j];
        dev_free(d_shard[r]);
    }
    std::vector<float> ref = logits, losses(N);
    ref_fused_classifier(ref.data(), losses.data(), 1.0f / N, tgt.data(), N, V, Vp, 1);
    check("vocab_parallel x tp vs fused losses", s, loss0, losses, TOL_FP32);
    check("vocab_parallel x tp vs fused dlogits", s, got_d, roundX(ref), TOL_FWD);
    TEST_CHECK(same_loss, "vocab_parallel (%s): every rank computes the same losses, bit for bit", s.c_str());
    dev_free(d_tgt); dev_free(d_max); dev_free(d_maxes); dev_free(d_sums); dev_free(d_losses);
}

/* loss_mean_accumulate: the fp32 mean of the fp64 tree sum is within one ulp of the CPU backend's sequential
 * fp64 sum (the two fp64 sums differ by ~N * 2^-53 relative, so the fp32 means are almost always equal), and the
 * fp64 accumulator adds exactly the fp32 means, over two calls */
static void test_loss_mean(int N) {
    std::vector<float> losses = randv((size_t)N, 5.0f);
    for (float& x : losses) { x = 5.0f + x; } /* token losses are >= 0 */
    float* d_losses = upF(losses);
    double* d_acc = (double*)dev_malloc(2 * sizeof(double), "loss accumulators");
    float* d_mean = (float*)(d_acc + 1);
    float got[2], ref_mean = 0.0f;
    double ref_sum = 0.0;
    for (int k = 0; k < 2; k++) {
        loss_mean_accumulate(d_mean, d_acc, d_losses, N);
        dev_memcpy_d2h(&got[k], d_mean, sizeof(float));
        ref_loss_mean_accumulate(&ref_mean, &ref_sum, losses.data(), N);
    }
    double sum = 0.0;
    dev_memcpy_d2h(&sum, d_acc, sizeof(double));
    float ulp = nextafterf(ref_mean, INFINITY) - ref_mean;
    TEST_CHECK(fabsf(got[0] - ref_mean) <= ulp && got[0] == got[1] && sum == (double)got[0] + (double)got[1],
               "loss_mean_accumulate N=%d: mean %.9g vs CPU %.9g (1 ulp %.1e), deterministic, sum %.17g = 2 x mean", N,
               got[0], ref_mean, ulp, sum);
    dev_free(d_losses); dev_free(d_acc);
}

/* ---------------------------------------------------------------- optimizer and norms */
static void test_adamw(size_t n, int use_master) {
    std::string s = shp("n=%zu%s", n, use_master ? " master" : "");
    std::vector<float> p = randv(n), g = randv(n), m = randv(n, 0.1f), v = randv(n, 0.01f);
    for (auto& x : v) x = fabsf(x);
    floatX* d_p = upX(p); /* p now floatX-exact */
    floatX* d_g = upX(g);
    float* d_m = upF(m);
    float* d_v = upF(v);
    float* d_master = use_master ? upF(p) : NULL;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    const int t = 3;
    adamw_update(d_p, d_master, d_g, d_m, d_v, n, 1000, lr, b1, b2, eps, wd, gs, t, 1234u);
    ref_adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, gs, t);
    check("adamw m", s, downF(d_m, n), m, TOL_FP32);
    check("adamw v", s, downF(d_v, n), v, TOL_FP32);
    std::vector<float> gp = downX(d_p, n);
    if (use_master) {
        std::vector<float> gm = downF(d_master, n);
        check("adamw master (fp32)", s, gm, p, TOL_FP32);
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double ulp = FLOATX_IS_FLOAT ? 0.0 : fabs(gm[i]) / 128.0; /* bf16: 8 significant bits */
            double d = fabs(gp[i] - gm[i]);
            worst = std::max(worst, ulp > 0 ? d / ulp : (d > 0 ? INFINITY : 0));
        }
        TEST_CHECK(worst <= 1.0, "adamw params within one ulp of the master weights (%s): worst %.2f ulp", s.c_str(), worst);
    } else {
        check("adamw params", s, gp, roundX(p), FLOATX_IS_FLOAT ? TOL_FP32 : TOL_FWD);
    }
    dev_free(d_p); dev_free(d_g); dev_free(d_m); dev_free(d_v);
    if (d_master) dev_free(d_master);
}

/* Muon's element ops (llmc/cuda/muon.cuh) against the CPU twins (llmc/cpu/muon.h) on floatX-rounded inputs: fp32
 * state (buf, master) bit for bit (the same _rn operations in the same order); floatX outputs one rounding of the
 * same fp32 value (exact in FP32; bf16: u and params within one bf16 ulp, TOL_FWD covers it); stochastic rounding of
 * the params within one ulp of the master weights as adamw's. */
static void test_muon_ops(size_t n) {
    std::string s = shp("n=%zu", n);
    std::vector<float> g = randv(n), buf = randv(n, 0.3f), p = randv(n);
    floatX* d_g = upX(g);
    floatX* d_u = dX(n);
    poisonX(d_u, n);
    float* d_buf = upF(buf);
    const float beta = 0.95f, gs = 0.75f;
    muon_momentum(d_u, d_buf, d_g, n, beta, gs);
    std::vector<float> u(n);
    ref_muon_momentum(u.data(), buf.data(), g.data(), n, beta, gs);
    check("muon_momentum buf (fp32)", s, downF(d_buf, n), buf, 0.0);
    check("muon_momentum u", s, downX(d_u, n), roundX(u), FLOATX_IS_FLOAT ? 0.0 : TOL_FWD);
    std::vector<float> uX = downX(d_u, n); /* the update as the device holds it: both sides apply the same values */
    floatX* d_p = upX(p);
    float* d_master = upF(p);
    const float lr = 0.02f, scale = 0.2f * sqrtf(192.0f), wd = 0.1f;
    muon_apply(d_p, d_master, d_u, n, 77, lr, scale, wd, 4, 99u);
    ref_muon_apply(p.data(), uX.data(), n, lr, scale, wd);
    std::vector<float> gm = downF(d_master, n), gp = downX(d_p, n);
    check("muon_apply master (fp32)", s, gm, p, 0.0);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ulp = FLOATX_IS_FLOAT ? 0.0 : fabs(gm[i]) / 128.0;
        double d = fabs(gp[i] - gm[i]);
        worst = std::max(worst, ulp > 0 ? d / ulp : (d > 0 ? INFINITY : 0));
    }
    TEST_CHECK(worst <= 1.0, "muon_apply params within one ulp of the master weights (%s): worst %.2f ulp", s.c_str(),
               worst);
    dev_free(d_g); dev_free(d_u); dev_free(d_buf); dev_free(d_p); dev_free(d_master);
}

/* how much the iteration amplifies errors injected before the first step and after each (test_muon.c's
 * ns_amplification): sum over j of max over x in [lo, hi] of |(p^(steps-j))'(p^j(x))|, p the quintic */
static double muon_amplification(double lo, double hi, int steps) {
    const double a = MUON_NS_A, b = MUON_NS_B, c = MUON_NS_C;
    double total = 0;
    for (int j = 0; j <= steps; j++) {
        double worst = 0;
        for (int i = 0; i <= 2000; i++) {
            double y = lo + (hi - lo) * i / 2000.0, d = 1.0;
            for (int k = 0; k < steps; k++) {
                if (k >= j) { d *= a + 3 * b * y * y + 5 * c * y * y * y * y; }
                y = a * y + b * y * y * y + c * y * y * y * y * y;
            }
            worst = std::max(worst, fabs(d));
        }
        total += worst;
    }
    return total;
}

/* Muon's Newton-Schulz iteration (llmc/muon.h over muon_gemm = cuBLASLt, muon_normalize, muon_axpby) against the
 * CPU's (sgemm) on a random k x n (or n x k) G, k < n. Its normalised singular values lie near the Marchenko-Pastur
 * edges (1 +- sqrt(k/n)) / sqrt(k); with margins (x 0.5 and x 1.5 for these small sizes) the iteration amplifies an
 * error injected before or after any step by at most A = muon_amplification(lo, hi, steps) in total (15 to 70 here).
 * FP32: the two sides differ only in the GEMMs' summation order, about 30 sqrt(n) u per injection (test_muon.c's
 * argument): tol = 30 sqrt(n) u A (1e-3 .. 2e-3). BF16: the device rounds X, A, B and B X to bf16 at every step (the
 * reference implementation's precision) where the CPU keeps fp32: two roundings' worth (2 x 2^-9 relative) per
 * injection, tol = 2^-8 A (0.06 .. 0.26): a coarse check that catches only O(1) mistakes in the bf16 path (a wrong
 * transpose or branch); the FP32 build is the tight twin check. Also: two runs give the same bits. */
static void test_muon_newton_schulz(int rows, int cols, int steps) {
    std::string s = shp("%dx%d steps=%d", rows, cols, steps);
    size_t n = (size_t)rows * cols, k = (size_t)std::min(rows, cols);
    std::vector<float> G = randv(n);
    floatX* d_G = upX(G);
    Muon mu;
    memset(&mu, 0, sizeof(mu));
    mu.work = dX(2 * n + 2 * k * k);
    mu.normsq = dF(1);
    std::vector<float> got = downX(muon_newton_schulz(&mu, d_G, rows, cols, steps), n);
    std::vector<float> again = downX(muon_newton_schulz(&mu, d_G, rows, cols, steps), n);
    std::vector<float> ref(n);
    ref_muon_newton_schulz(ref.data(), G.data(), rows, cols, steps);
    double r = sqrt((double)k / (double)(rows + cols - k)), lo = 0.5 * (1 - r) / sqrt((double)k);
    double A = muon_amplification(lo, 1.5 * (1 + r) / sqrt((double)k), steps);
    double tol = FLOATX_IS_FLOAT ? 30.0 * sqrt((double)(rows + cols - k)) * ldexp(1.0, -24) * A : ldexp(1.0, -8) * A;
    check("muon_newton_schulz", s, got, ref, tol);
    TEST_CHECK(same_bits(got, again), "muon_newton_schulz %s: two runs bit-identical", s.c_str());
    dev_free(d_G); dev_free(mu.work); dev_free(mu.normsq);
}

/* the 128-bit path (whole aligned range, n % 8 == 0) and the element path (the same range in two calls split at
 * an odd index: neither length a multiple of 8, the second misaligned) must give the same bits: same per-element
 * arithmetic, same rounding stream index global_offset + i */
static void test_adamw_paths(size_t n, int use_master) {
    std::string s = shp("n=%zu%s", n, use_master ? " master" : "");
    std::vector<float> p = randv(n), g = randv(n), m = randv(n, 0.1f), v = randv(n, 0.01f);
    for (auto& x : v) x = fabsf(x);
    floatX* d_p[2]; float* d_m[2]; float* d_v[2]; float* d_master[2] = {NULL, NULL};
    floatX* d_g = upX(g);
    for (int k = 0; k < 2; k++) {
        d_p[k] = upX(p); d_m[k] = upF(m); d_v[k] = upF(v);
        if (use_master) { d_master[k] = upF(p); }
    }
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    const size_t cut = 5, off = 77;
    adamw_update(d_p[0], d_master[0], d_g, d_m[0], d_v[0], n, off, lr, b1, b2, eps, wd, gs, 2, 99u);
    adamw_update(d_p[1], d_master[1], d_g, d_m[1], d_v[1], cut, off, lr, b1, b2, eps, wd, gs, 2, 99u);
    adamw_update(d_p[1] + cut, d_master[1] ? d_master[1] + cut : NULL, d_g + cut, d_m[1] + cut, d_v[1] + cut, n - cut,
                 off + cut, lr, b1, b2, eps, wd, gs, 2, 99u);
    std::vector<float> a = downX(d_p[0], n), b = downX(d_p[1], n);
    std::vector<float> ma = downF(d_m[0], n), mb = downF(d_m[1], n), va = downF(d_v[0], n), vb = downF(d_v[1], n);
    int same = memcmp(a.data(), b.data(), n * sizeof(float)) == 0 && memcmp(ma.data(), mb.data(), n * sizeof(float)) == 0 &&
               memcmp(va.data(), vb.data(), n * sizeof(float)) == 0;
    if (use_master) {
        std::vector<float> wa = downF(d_master[0], n), wb = downF(d_master[1], n);
        same = same && memcmp(wa.data(), wb.data(), n * sizeof(float)) == 0;
    }
    size_t changed = 0;
    for (size_t i = 0; i < n; i++) { changed += a[i] != p[i]; }
    TEST_CHECK(same && changed > n / 2, "adamw 128-bit path == element path, bit for bit (%s; %zu of %zu params changed)",
               s.c_str(), changed, n);
    for (int k = 0; k < 2; k++) {
        dev_free(d_p[k]); dev_free(d_m[k]); dev_free(d_v[k]);
        if (d_master[k]) dev_free(d_master[k]);
    }
    dev_free(d_g);
}

static void test_norm_scale_inf(size_t n) {
    std::string s = shp("n=%zu", n);
    std::vector<float> g = randv(n);
    floatX* d_g = upX(g);
    float* d_out = dF(1);
    float prior = 3.25f, got = 0, ref = 0;
    for (int acc = 0; acc < 2; acc++) {
        dev_memcpy_h2d(d_out, &prior, sizeof(float));
        global_norm_squared(d_out, d_g, n, acc);
        dev_memcpy_d2h(&got, d_out, sizeof(float));
        ref = prior;
        ref_global_norm_squared(&ref, g.data(), n, acc);
        check(acc ? "global_norm_squared accumulate" : "global_norm_squared", s, std::vector<float>{got},
              std::vector<float>{ref}, 1e-5);
    }
    scale_floats(d_g, 0.375f, n);
    ref_scale_floats(g.data(), 0.375f, n);
    check("scale_floats", s, downX(d_g, n), roundX(g), FLOATX_IS_FLOAT ? 0.0 : TOL_FWD);
    {
        /* dst += src as residual_forward(dst, dst, src) (ZeRO-2's shard accumulation, llmc/zero.h): in place, fp32
         * sum of the two stored values, rounded once (exact match with the CPU on rounded inputs) */
        std::vector<float> h = randv(n), sum = downX(d_g, n);
        floatX* d_h = upX(h);
        residual_forward(d_g, d_g, d_h, n);
        ref_residual_forward(sum.data(), sum.data(), roundX(h).data(), n);
        check("residual_forward in place (dst += src)", s, downX(d_g, n), roundX(sum), 0.0);
        g = downX(d_g, n);
        dev_free(d_h);
    }
    int clean = has_inf_or_nan(d_g, n);
    size_t pos[3] = {0, n / 2, n - 1};
    int found = 0;
    for (int k = 0; k < 3; k++) {
        std::vector<float> bad = g;
        bad[pos[k]] = (k == 1) ? NAN : INFINITY;
        dev_upload_floats(d_g, bad.data(), n);
        found += has_inf_or_nan(d_g, n) == 1;
    }
    TEST_CHECK(clean == 0 && found == 3 && ref_has_inf_or_nan(g.data(), n) == 0,
               "has_inf_or_nan: clean %d, found %d/3 (first, middle NaN, last) (%s)", clean, found, s.c_str());
    dev_free(d_g); dev_free(d_out);
}

/* gradient compression (llmc/cuda/compress.cuh vs llmc/cpu/compress.h): the same fp32 inputs give the same bits,
 * since both use IEEE division and unfused _rn arithmetic (exact, tolerance 0): pack (floatX + residual), INT8
 * quantise (nearest and stochastic) and dequantise with accumulation, top-k indices and values (ties included),
 * zeroing and scatter-add. Shapes: n not a multiple of the 2048-value block or the 4096-value top-k tile. */
static void test_compress(size_t n, size_t k, int ties) {
    std::string s = shp("n=%zu k=%zu%s", n, k, ties ? " ties" : "");
    std::vector<float> g = randv(n), r = randv(n, 0.01f);
    if (ties) for (auto& x : g) x = floorf(x * 4.0f) * 0.25f;
    floatX* d_g = upX(g);
    float* d_r = upF(r);
    float* d_x = dF(n);
    poisonF(d_x, n);
    compress_pack(d_x, d_g, d_r, 0.9f, n);
    std::vector<float> x(n);
    ref_compress_pack(x.data(), g.data(), r.data(), 0.9f, n);
    std::vector<float> gx = downF(d_x, n);
    TEST_CHECK(same_bits(gx, x), "compress_pack (residual decay 0.9) bit-identical to the CPU (%s)", s.c_str());
    compress_pack(d_x, d_g, d_r, 1.0f, n);
    ref_compress_pack(x.data(), g.data(), r.data(), 1.0f, n);
    gx = downF(d_x, n);
    TEST_CHECK(same_bits(gx, x), "compress_pack bit-identical to the CPU (%s)", s.c_str());
    size_t nb = (n + COMPRESS_INT8_BLOCK - 1) / COMPRESS_INT8_BLOCK;
    for (int st = 0; st < 2; st++) {
        int8_t* d_q = (int8_t*)dev_malloc(n, "q");
        float* d_s = dF(nb);
        compress_quantize_int8(d_q, d_s, d_x, n, st, 11, 5, 77);
        std::vector<signed char> q(n), gq(n);
        std::vector<float> sc(nb);
        ref_compress_quantize_int8(q.data(), sc.data(), x.data(), n, st, 11, 5, 77);
        dev_memcpy_d2h(gq.data(), d_q, n);
        std::vector<float> gs = downF(d_s, nb);
        std::vector<float> out = randv(n), gout;
        float* d_out = upF(out);
        compress_dequantize_int8(d_out, d_q, d_s, n, -1.0f, 1);
        ref_compress_dequantize_int8(out.data(), q.data(), sc.data(), n, -1.0f, 1);
        gout = downF(d_out, n);
        TEST_CHECK(gq == q && same_bits(gs, sc) && same_bits(gout, out),
                   "compress int8 %s quantise + dequantise-accumulate bit-identical to the CPU (%s)",
                   st ? "stochastic" : "nearest", s.c_str());
        dev_free(d_q); dev_free(d_s); dev_free(d_out);
    }
    uint32_t* d_idx = (uint32_t*)dev_malloc(k * sizeof(uint32_t), "idx");
    float* d_val = dF(k);
    void* scratch = dev_malloc(compress_topk_scratch_bytes(n), "topk scratch");
    compress_topk_select(d_idx, d_val, d_x, n, k, scratch);
    std::vector<unsigned int> idx(k), gidx(k);
    std::vector<float> val(k);
    ref_compress_topk_select(idx.data(), val.data(), x.data(), n, k);
    dev_memcpy_d2h(gidx.data(), d_idx, k * sizeof(uint32_t));
    std::vector<float> gval = downF(d_val, k);
    compress_zero_at(d_x, d_idx, k);
    float* d_sum = upF(r);
    compress_scatter_add(d_sum, d_idx, d_val, k);
    std::vector<float> sum = r;
    ref_compress_scatter_add(sum.data(), idx.data(), val.data(), k);
    std::vector<float> zx = x;
    for (size_t j = 0; j < k; j++) zx[idx[j]] = 0.0f;
    TEST_CHECK(gidx == idx && same_bits(gval, val) && same_bits(downF(d_x, n), zx) && same_bits(downF(d_sum, n), sum),
               "compress top-k select, zero_at, scatter_add bit-identical to the CPU (%s)", s.c_str());
    dev_free(d_g); dev_free(d_r); dev_free(d_x); dev_free(d_idx); dev_free(d_val); dev_free(scratch); dev_free(d_sum);
}

/* ---------------------------------------------------------------- kernel coverage */
static std::set<std::string> kernels_in_sources(void) {
    std::set<std::string> names;
    DIR* dir = opendir("llmc/cuda");
    if (!dir) return names;
    struct dirent* e;
    while ((e = readdir(dir)) != NULL) {
        std::string f = e->d_name;
        if (f.size() < 4 || f.substr(f.size() - 4) != ".cuh" || f.find("cudnn") != std::string::npos) continue;
        FILE* fp = fopen(("llmc/cuda/" + f).c_str(), "r");
        if (!fp) continue;
        std::string text;
        char buf[4096];
        size_t r;
        while ((r = fread(buf, 1, sizeof buf, fp)) > 0) text.append(buf, r);
        fclose(fp);
        size_t at = 0;
        while ((at = text.find("__global__ void", at)) != std::string::npos) {
            size_t paren = text.find('(', at);
            size_t lb = text.find("__launch_bounds__", at);
            if (lb != std::string::npos && lb < paren) paren = text.find('(', text.find(')', lb) + 1);
            size_t end = paren;
            while (end > at && isspace((unsigned char)text[end - 1])) end--;
            size_t start = end;
            while (start > at && (isalnum((unsigned char)text[start - 1]) || text[start - 1] == '_')) start--;
            names.insert(text.substr(start, end - start));
            at = paren;
        }
    }
    closedir(dir);
    return names;
}

/* ---------------------------------------------------------------- mixture of experts */
/* The MoE kernels (llmc/cuda/moe.cuh) against the CPU backend's (llmc/cpu/moe.h) on identical inputs. Router: fp32
 * probabilities and log-sum-exp at the fp32 tolerance (both accumulate the C products in the same order from the
 * same floatX inputs; only expf/logf differ), the top-k choices exactly (random data has no near-ties at that
 * precision). Every later step gets the CPU's choices (`choice_in`, or the router's) so that the discrete plan is
 * compared exactly: rows and counts equal, the grouped input equal bit for bit, the combine and its backward at the
 * forward tolerance, the router backward at the backward tolerance. Awkward cases: E not a power of two, k = 3, an
 * expert receiving no token (hand-made choices), capacity 0 (every choice dropped: zero output, zero gradient). */
static void test_moe(int N, int C, int E, int k, int cap, const std::vector<int>& choice_in) {
    std::string s = shp("N=%d C=%d E=%d k=%d cap=%d%s", N, C, E, k, cap, choice_in.empty() ? "" : " fixed");
    size_t NC = (size_t)N * C, NK = (size_t)N * k, NE = (size_t)N * E, R = NK;
    std::vector<float> x = randv(NC), w = randv((size_t)E * C, 0.5f), out = randv(R * C), dy = randv(NC);
    std::vector<float> dx0 = randv(NC), dw0 = randv((size_t)E * C);
    floatX *d_x = upX(x), *d_w = upX(w), *d_out = upX(out), *d_dy = upX(dy), *d_dx = upX(dx0), *d_dw = upX(dw0);
    float *d_probs = dF(NE), *d_lse = dF(N), *d_gate = dF(NK), *d_stats = dF(2 * E + 3), *d_dgate = dF(NK);
    float* d_dlogits = dF(NE);
    int* d_choice = upI(std::vector<int>(NK, 0));
    std::vector<float> probs(NE), lse(N), gate(NK), stats(2 * E + 3), dgate(NK), dlogits(NE);
    std::vector<int> choice(NK), row(NK), plan(3 * E);
    moe_router_forward(d_probs, d_lse, d_choice, d_gate, d_x, d_w, N, C, E, k);
    ref_moe_router_forward(probs.data(), lse.data(), choice.data(), gate.data(), x.data(), w.data(), N, C, E, k);
    check("moe_router_forward probs", s, downF(d_probs, NE), probs, TOL_FP32);
    check("moe_router_forward lse", s, downF(d_lse, N), lse, TOL_FP32);
    check("moe_router_forward gates", s, downF(d_gate, NK), gate, TOL_FP32);
    std::vector<int> g_choice(NK);
    dev_memcpy_d2h(g_choice.data(), d_choice, NK * sizeof(int));
    TEST_CHECK(g_choice == choice, "moe_router_forward choices %-26s equal the CPU's", s.c_str());
    if (!choice_in.empty()) { choice = choice_in; }
    dev_memcpy_h2d(d_choice, choice.data(), NK * sizeof(int));
    int* d_row = upI(std::vector<int>(NK, 7));
    int* d_plan = upI(std::vector<int>(3 * E, 7));
    moe_dispatch_plan(d_row, d_plan, d_choice, N, E, k, cap);
    ref_moe_dispatch_plan(row.data(), plan.data(), choice.data(), N, E, k, cap);
    std::vector<int> g_row(NK), g_plan(3 * E);
    dev_memcpy_d2h(g_row.data(), d_row, NK * sizeof(int));
    dev_memcpy_d2h(g_plan.data(), d_plan, 3 * E * sizeof(int));
    int kept = 0, empty = 0;
    for (int e = 0; e < E; e++) { kept += plan[E + e]; empty += plan[e] == 0; }
    TEST_CHECK(g_row == row && g_plan == plan, "moe_dispatch_plan %-26s rows and counts equal the CPU's (%d of %zu "
               "choices kept, %d experts without tokens)", s.c_str(), kept, NK, empty);
    moe_route_stats(d_stats, d_probs, d_lse, d_plan, N, E, k, 0.01f, 0.001f);
    ref_moe_route_stats(stats.data(), probs.data(), lse.data(), plan.data(), N, E, k, 0.01f, 0.001f);
    check("moe_route_stats", s, downF(d_stats, 2 * E + 3), stats, TOL_FP32);
    floatX* d_xe = dX(R * C);
    dev_memset(d_xe, 0, R * C * sizeof(floatX));
    std::vector<float> xe(R * C, 0.0f), y(NC), dout(R * C, 0.0f), dxe(NC);
    moe_permute(d_xe, d_x, d_row, N, C, k);
    ref_moe_permute(xe.data(), x.data(), row.data(), N, C, k);
    check("moe_permute", s, downX(d_xe, R * C), xe, 0.0);
    floatX* d_y = dX(NC);
    poisonX(d_y, NC);
    moe_combine(d_y, d_out, d_row, d_gate, N, C, k);
    ref_moe_combine(y.data(), out.data(), row.data(), gate.data(), N, C, k);
    check("moe_combine", s, downX(d_y, NC), roundX(y), TOL_FWD);
    floatX* d_dout = dX(R * C);
    dev_memset(d_dout, 0, R * C * sizeof(floatX));
    moe_combine_backward(d_dout, d_dgate, d_dy, d_out, d_row, d_gate, N, C, k);
    ref_moe_combine_backward(dout.data(), dgate.data(), dy.data(), out.data(), row.data(), gate.data(), N, C, k);
    check("moe_combine_backward dout", s, downX(d_dout, R * C), roundX(dout), TOL_FWD);
    check("moe_combine_backward dgate", s, downF(d_dgate, NK), dgate, TOL_FP32);
    floatX* d_dxe = dX(NC);
    poisonX(d_dxe, NC);
    moe_permute_backward(d_dxe, d_out, d_row, N, C, k);
    ref_moe_permute_backward(dxe.data(), out.data(), row.data(), N, C, k);
    check("moe_permute_backward", s, downX(d_dxe, NC), roundX(dxe), TOL_FWD);
    if (kept == 0) {
        std::vector<float> gy = downX(d_y, NC), gd = downX(d_dxe, NC), gg = downF(d_dgate, NK);
        bool zero = true;
        for (float v : gy) zero &= v == 0.0f;
        for (float v : gd) zero &= v == 0.0f;
        for (float v : gg) zero &= v == 0.0f;
        TEST_CHECK(zero, "every choice dropped %-26s: expert output, input gradient and gate gradients exactly 0", s.c_str());
    }
    std::vector<float> rdx = dx0, rdw = dw0;
    moe_router_backward(d_dx, d_dw, d_dlogits, d_dgate, d_probs, d_lse, d_choice, d_gate, d_stats, d_x, d_w, N, C, E, k,
                        0.01f, 0.01f, 0.001f);
    ref_moe_router_backward(rdx.data(), rdw.data(), dlogits.data(), dgate.data(), probs.data(), lse.data(),
                            choice.data(), gate.data(), stats.data(), x.data(), w.data(), N, C, E, k, 0.01f, 0.01f,
                            0.001f);
    check("moe_router_backward dx", s, downX(d_dx, NC), roundX(rdx), TOL_BWD);
    check("moe_router_backward dw", s, downX(d_dw, (size_t)E * C), roundX(rdw), TOL_BWD);
    dev_free(d_x); dev_free(d_w); dev_free(d_out); dev_free(d_dy); dev_free(d_dx); dev_free(d_dw);
    dev_free(d_probs); dev_free(d_lse); dev_free(d_gate); dev_free(d_stats); dev_free(d_dgate); dev_free(d_dlogits);
    dev_free(d_choice); dev_free(d_row); dev_free(d_plan); dev_free(d_xe); dev_free(d_y); dev_free(d_dout);
    dev_free(d_dxe);
}

int main(void) {
    const char* es = getenv("EMU_SEED");
    uint64_t seed = es ? strtoull(es, NULL, 10) : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20));
    rng_s = seed;
    printf("# seed %llu (EMU_SEED=%llu reproduces), precision %s\n", (unsigned long long)seed,
           (unsigned long long)seed, PRECISION_NAME);
    backend_init(0, 1);
    double t0 = emu::now_ms();

    test_encoder(4, 32, 64, 100, 128); /* fixture */
    test_encoder(3, 7, 36, 100, 128);
    test_encoder(1, 1, 30, 10, 128);
    test_encoder_shards(4, 32, 64, 128, 2);  /* fixture shape, 128-bit path */
    test_encoder_shards(3, 7, 36, 100, 3);   /* C not a multiple of the vector width, Vp not a multiple of tp */
    test_encoder_shards(2, 5, 64, 37, 4);    /* shards of 10 rows, the last one 7 */
    test_encoder_shards(8, 64, 64, 128, 2);  /* hot tokens of ~85 positions: split into chunks in every shard */
    test_encoder_shard_graph(4, 32, 64, 128, 64, 64);
    test_encoder_shard_graph(3, 7, 36, 100, 34, 33);
    test_encoder_skewed(4, 96, 64, 128);  /* 128-bit path: the hot token in ~4 chunks */
    test_encoder_skewed(8, 160, 36, 100); /* C = 36 (element path in bf16): ~17 chunks */
    test_encoder_shard_graph(4, 64, 64, 128, 64, 64, 1); /* graph replay with chunks and the second kernel */

    test_layernorm(128, 64);
    test_layernorm(21, 36);
    test_layernorm(1, 30);
    test_layernorm(300, 768); /* many rows, several backward chunks, C > block */
    test_layernorm(20, 1056); /* C > LAYERNORM_BWD_REG_C: the backward's shared-memory path */
    test_qknorm(1, 1, 1, 16);
    test_qknorm(63, 4, 2, 64);   /* grouped-query, T 63 */
    test_qknorm(65, 4, 4, 128);  /* head size 128 */
    test_qknorm(300, 4, 1, 16);  /* multi-query; more tokens than QKNORM_CHUNKS: several tokens a chunk */
    test_qknorm(5, 3, 3, 6);     /* head size below a warp */
    test_rmsnorm(1, 64);
    test_rmsnorm(63, 128);
    test_rmsnorm(65, 768);   /* several backward chunks */
    test_rmsnorm(63, 36);    /* C not a multiple of the vector width: the element path */
    test_rmsnorm(20, 1056);  /* C > LAYERNORM_BWD_REG_C: the shared-memory path */

    test_matmul(128, 64, 192, 1, 0);
    test_matmul(128, 64, 256, 1, 1);
    test_matmul(21, 36, 100, 0, 0);
    test_matmul(21, 36, 100, 1, 1);
    test_matmul(1, 30, 7, 1, 0);
    test_matmul(130, 20, 13, 0, 1);
    test_matmul(70, 20, 13, 1, 1);
    test_matmul_dgelu(128, 256, 64);  /* the MLP's fcproj shape (C = 4 OC): the DGELU epilogue */
    test_matmul_dgelu(21, 36, 100);   /* C % 8 != 0: plain GEMM + gelu_backward_inplace */

    test_elementwise(4 * 32 * 64);
    test_elementwise(1003);
    test_elementwise(1);
    /* SwiGLU: F a multiple of both vector widths (the d12 MLP's 4C = 3072 at a smaller scale), F = 36 (a multiple of
     * 4 but not of 8: fp32 packed, bf16 element path), odd F (63, 65, 1), 3 * 64, odd N, misaligned buffers */
    test_swiglu(128, 64, 0, 0);
    test_swiglu(21, 36, 0, 0);
    test_swiglu(7, 63, 1, 0);
    test_swiglu(5, 65, 0, 0);
    test_swiglu(3, 192, 1, 0);
    test_swiglu(9, 1, 1, 0);
    test_swiglu(1, 64, 0, 1);
    test_relu2(4 * 32 * 64, 0);
    test_relu2(4 * 32 * 64, 1);
    test_relu2(1003, 0);
    test_relu2(1, 0);

    /* B, T, NH, KV, hs, pos0, llama3, misalign */
    test_rope(2, 33, 4, 2, 64, 5, 1, 0);   /* hs 64: 128-bit path in both builds, GQA KV = NH/2 */
    test_rope(1, 65, 2, 1, 128, 0, 1, 0);  /* hs 128, KV = 1 */
    test_rope(1, 1, 2, 2, 128, 300, 0, 0); /* T = 1 (a decode step), pos0 = 300 */
    test_rope(3, 7, 3, 1, 12, 0, 0, 0);    /* hs/2 = 6: element path */
    test_rope(1, 5, 2, 1, 8, 3, 0, 0);     /* hs/2 = 4: packets of 4 in fp32, element path in bf16 */
    test_rope(2, 63, 4, 4, 64, 2, 0, 1);   /* misaligned qkv: element path at a packed head size */
    test_rope(1, 3, 1, 1, 2, 1, 0, 0);     /* hs = 2: one pair */

    test_attention(4, 32, 64, 4, 0); /* fixture: hs=16 */
    test_attention(4, 32, 64, 4, 1);
    test_attention(2, 45, 64, 2, 0); /* hs=32, T not a multiple of the tile */
    test_attention(1, 33, 128, 2, 0); /* hs=64 */
    test_attention(1, 20, 128, 1, 0); /* hs=128 */
    test_attention(3, 7, 36, 3, 0);   /* hs=12: fallback */
    test_attention(2, 1, 30, 5, 0);   /* T=1, hs=6 */
    /* several 64-row query / 64-key tiles: double buffering, diagonal-tile skips, 32-row tiles at hs=128 */
    test_attention(1, 150, 128, 2, 0); /* hs=64, 3 tiles, partial last */
    test_attention(1, 97, 256, 2, 0);  /* hs=128 */
    test_attention_decode(1, 30, 5);    /* the first position */
    test_attention_decode(45, 64, 2);   /* hs=32 */
    test_attention_decode(150, 128, 2); /* hs=64, more positions than threads */
    test_attention_decode(300, 36, 3);  /* hs=12 */
    test_attention(1, 130, 64, 4, 0);  /* hs=16 */
    test_attention(1, 129, 64, 2, 0);  /* hs=32, one row past two tiles */
    /* grouped-query attention (B, T, C, NH, mode, NKV). Mode 0: the native flash kernels (kv head h/g in the K/V
     * loads, dK/dV summed over the group inside the dK/dV kernel) */
    test_attention(2, 45, 64, 4, 0, 2);  /* hs=16 (MMA path in bf16), g=2, partial tile */
    test_attention(2, 45, 64, 4, 0, 1);  /* hs=16, NKV=1 (multi-query), g=4 */
    test_attention(2, 70, 128, 4, 0, 2); /* hs=32, g=2, two tiles */
    test_attention(1, 33, 128, 4, 0, 1); /* hs=32, g=4 */
    test_attention(3, 7, 48, 4, 0, 2);   /* hs=12: attention fallback */
    test_attention(2, 5, 24, 4, 0, 1);   /* hs=6: fallback */
    test_attention(2, 1, 64, 4, 0, 2);   /* T=1 */
    test_attention(1, 63, 256, 4, 0, 1); /* hs=64, T=63: one partial tile, multi-query */
    test_attention(1, 65, 256, 4, 0, 2); /* hs=64, T=65: one row into the second tile */
    test_attention(1, 65, 512, 4, 0, 1); /* hs=128 (32-row query tiles), multi-query */
    test_attention(2, 63, 64, 4, 0, 4);  /* NKV = NH through the contract: the multi-head path */
    /* the CUDA-core kernels forced, natively at NKV < NH */
    test_attention(2, 45, 64, 4, 1, 2);
    test_attention(1, 65, 128, 4, 1, 1);
    test_attention_decode(45, 64, 4, 2);  /* hs=16, g=2 */
    test_attention_decode(150, 128, 4, 1); /* hs=32, multi-query */
    test_attention_decode(9, 36, 6, 3);   /* hs=6, g=2 */
    /* the one-kernel FA2 backward: awkward T, every MMA head size, B*NH > 1, up to 4 key tiles adding to one dQ tile */
    test_attention(4, 32, 64, 4, 2);   /* hs=16, one tile */
    test_attention(2, 45, 64, 2, 2);   /* hs=32, partial tile */
    test_attention(3, 200, 128, 2, 2); /* hs=64, 4 tiles (last partial), B*NH = 6 */
    test_attention(2, 97, 256, 2, 2);  /* hs=128: 32-row query tiles, two per key tile */
    test_attention(1, 130, 64, 4, 2);  /* hs=16, one row into the third tile */
    /* ... natively at NKV < NH: one block per (key tile, kv head) over the group's query heads, dQ flags per head */
    test_attention(2, 45, 64, 4, 2, 2);   /* hs=16, g=2, partial tile */
    test_attention(3, 200, 128, 4, 2, 2); /* hs=32, g=2, 4 tiles (last partial): dQ of each head from 4 key tiles */
    test_attention(2, 1, 64, 4, 2, 1);    /* T=1, multi-query */
    test_attention(1, 63, 256, 4, 2, 1);  /* hs=64, T=63, multi-query */
    test_attention(1, 65, 256, 4, 2, 2);  /* hs=64, T=65: one row into the second tile */
    test_attention(1, 97, 512, 4, 2, 1);  /* hs=128 (32-row query tiles, two per key tile), multi-query */

    test_classifier(128, 100, 128, 1); /* fixture */
    test_classifier(128, 100, 128, 0);
    test_classifier(7, 37, 40, 1);
    test_classifier(7, 30, 37, 1); /* Vp not a multiple of the vector width: scalar kernel */
    test_classifier(1, 100, 128, 1);
    /* vocabulary-parallel cross-entropy: N, Vs, valid, v0, tp, rank, write_dlogits, misalign */
    test_vocab_parallel(128, 64, 64, 64, 2, 1, 1, 0);    /* fixture rows, a full shard, 128-bit path */
    test_vocab_parallel(37, 64, 36, 64, 2, 1, 1, 0);     /* the last shard: padding inside a packet */
    test_vocab_parallel(37, 64, 36, 64, 2, 1, 0, 0);     /* losses only: logits untouched */
    test_vocab_parallel(9, 64, 0, 128, 3, 2, 1, 0);      /* an all-padding shard: valid = 0 */
    test_vocab_parallel(7, 30, 25, 30, 4, 1, 1, 0);      /* Vs not a multiple of 8: element path */
    test_vocab_parallel(5, 64, 61, 0, 2, 0, 1, 1);       /* misaligned logits: element path */
    test_vocab_parallel(5, 4104, 4099, 4104, 2, 1, 1, 0);/* rows longer than a block's first sweep (256*8) */
    test_vocab_parallel(1, 13, 13, 0, 1, 0, 1, 0);       /* N = 1, tp = 1 */
    test_compress(1, 1, 0);
    test_compress(5000, 50, 0);    /* 3 INT8 blocks (the last partial), 2 top-k tiles */
    test_compress(9001, 900, 1);   /* many equal magnitudes: the tie rule decides */
    test_compress(4096, 4096, 0);  /* k = n */
    test_moe(7, 13, 5, 2, 2, {});            /* E not a power of two, capacity 2: drops */
    test_moe(64, 96, 3, 1, 64, {});          /* Switch top-1, no dropping */
    test_moe(9, 5, 6, 3, 0, {});             /* capacity 0: every choice dropped */
    test_moe(6, 8, 5, 2, 2, {0, 1, 0, 2, 0, 1, 1, 4, 4, 0, 2, 0}); /* expert 3 gets no token, token 2 all dropped */
    test_vocab_parallel_composition(64, 100, 128, 1);
    test_vocab_parallel_composition(64, 100, 128, 2);
    test_vocab_parallel_composition(21, 100, 160, 4);    /* shards of 40: the last one all padding */
    test_loss_mean(128);
    test_loss_mean(1);
    test_loss_mean(1000);

    test_adamw(4 * 64 * 64 + 5, 0);
    test_adamw(4 * 64 * 64 + 5, 1);
    test_adamw(1, 1);
    test_adamw(4 * 64 * 64, 0); /* n % 8 == 0: the 128-bit path */
    test_adamw(4 * 64 * 64, 1);
    test_adamw_paths(4 * 64 * 64, 0);
    test_adamw_paths(4 * 64 * 64, 1);

    test_norm_scale_inf(64 * 64);
    test_norm_scale_inf(1003);
    test_norm_scale_inf(1);
    test_muon_ops(1);
    test_muon_ops(1003);
    test_muon_newton_schulz(32, 96, 5);   /* wide (attproj-like aspect) */
    test_muon_newton_schulz(128, 32, 5);  /* tall: the transposed branch (fc 4C x C) */
    test_muon_newton_schulz(20, 45, 2);   /* odd sizes: unaligned GEMM operands */

    /* the block-level kernels again under the second legal schedule (warps last-to-first) */
    emu::g.reverse_warps = 1;
    test_layernorm(128, 64);
    test_rmsnorm(65, 128);
    test_qknorm(63, 4, 2, 64);
    test_attention(4, 32, 64, 4, 0);
    test_attention(3, 7, 36, 3, 0);
    test_attention(1, 150, 128, 2, 2);
    test_attention(2, 45, 64, 4, 0, 2);
    test_attention(1, 65, 128, 4, 0, 1);
    test_attention(3, 7, 48, 4, 0, 2);
    test_attention(2, 45, 64, 4, 3, 2);
    test_classifier(128, 100, 128, 1);
    test_vocab_parallel(37, 64, 36, 64, 2, 1, 1, 0);
    test_vocab_parallel(7, 30, 25, 30, 4, 1, 1, 0);
    test_loss_mean(1000);
    test_matmul(21, 36, 100, 1, 1);
    test_encoder(4, 32, 64, 100, 128);
    test_encoder_shards(3, 7, 36, 100, 3);
    test_norm_scale_inf(1003);
    emu::g.reverse_warps = 0;

    /* every kernel of llmc/cuda launched at least once */
    std::set<std::string> launched, instances;
    for (const auto& r : emu::launch_log()) {
        launched.insert(emu::base_name(r.name));
        instances.insert(r.name);
    }
    std::set<std::string> src = kernels_in_sources();
    int missing = 0;
    std::string miss;
    for (const auto& k : src) {
        if (FLOATX_IS_FLOAT && k.find("mma") != std::string::npos) continue; /* tensor cores: 16-bit builds */
        if (k == "add_bias_kernel") continue; /* only when cuBLASLt has no algorithm for the bias epilogue (gpu_check.sh) */
        if (!launched.count(k)) { missing++; miss += " " + k; }
    }
    TEST_CHECK(!src.empty() && missing == 0, "all %zu kernels in llmc/cuda were launched (%zu distinct instantiations)%s%s",
               src.size(), instances.size(), missing ? "; never launched:" : "", miss.c_str());
    printf("# instantiations launched:");
    for (const auto& k : instances) printf(" %s", k.c_str());
    printf("\n");
    TEST_CHECK(emu::error_count() == 0 && cudaDeviceSynchronize() == cudaSuccess, "no emulator error (%d)", emu::error_count());

    printf("#\n# %-34s | %-26s | %-12s | %s\n", "kernel (" PRECISION_NAME ")", "shape", "max rel err", "tol");
    for (const auto& r : table) printf("# %-34s | %-26s | %-12.2e | %.1e\n", r.op.c_str(), r.shape.c_str(), r.err, r.tol);
    printf("# emulated time %.1f s\n", (emu::now_ms() - t0) / 1000.0);
    backend_shutdown();
    return testing_finish();
}
