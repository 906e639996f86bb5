/*
 * dev/test/test_grad_compress.c -- unit tests of the gradient-compression codecs of the CPU backend
 * (llmc/cpu/compress.h) and of the flag parser (llmc/grad_compress.h):
 *   INT8: every value within s/2 of its decoded value with round-to-nearest (s = the block's absmax / 127), within s
 *         with stochastic rounding, and stochastic rounding unbiased on average; all-zero blocks; NaN input.
 *   top-k: exactly the k largest magnitudes against a sort-based reference (ties: lower index first), in index
 *          order, at awkward sizes and with many ties; the error-feedback identity residual + sent == input, bit
 *          for bit; scatter-add of several ranks' lists.
 *   error-feedback decay (--grad-compress-ef-decay): compress_pack = g + decay * r bit for bit, and over 8 steps of
 *          top-k an element never sent accumulates c (1 - decay^t)/(1 - decay) of a constant gradient c.
 * The multi-process exchange is tested through the trainer (dev/test/cli_grad_compress.sh).
 */
#include "llmc/backend.h"
#include "llmc/grad_compress.h"
#include "dev/test/testing.h"

static uint64_t rs = 42;
static float urand(void) { /* [-1, 1) */
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) / 16777216.0) * 2.0f - 1.0f;
}

/* x with magnitudes spread over 2^-20 .. 1 so that every block has its own scale */
static void fill(float* x, size_t n) {
    for (size_t i = 0; i < n; i++) { x[i] = urand() * ldexpf(1.0f, -(int)((i / 700) % 21)); }
}

static void test_int8(size_t n, int stochastic) {
    float* x = (float*)malloc(n * sizeof(float));
    float* d = (float*)malloc(n * sizeof(float));
    int8_t* q = (int8_t*)malloc(n);
    size_t nb = grad_compress_blocks(n);
    float* s = (float*)malloc(nb * sizeof(float));
    fill(x, n);
    compress_quantize_int8(q, s, x, n, stochastic, 7, 3, 1000);
    compress_dequantize_int8(d, q, s, n, 1.0f, 0);
    double worst = 0.0; /* max |x - d| / s over the values, in units of the block's scale */
    int scale_ok = 1;
    for (size_t j = 0; j < nb; j++) {
        float amax = 0.0f;
        for (size_t i = j * COMPRESS_INT8_BLOCK; i < n && i < (j + 1) * COMPRESS_INT8_BLOCK; i++) { amax = fmaxf(amax, fabsf(x[i])); }
        scale_ok &= s[j] == amax / 127.0f;
    }
    for (size_t i = 0; i < n; i++) {
        float sc = s[i / COMPRESS_INT8_BLOCK];
        double e = sc > 0 ? fabs((double)x[i] - (double)d[i]) / sc : fabs(d[i]);
        worst = e > worst ? e : worst;
    }
    /* nearest: |x/s - round(x/s)| <= 1/2, plus the fp32 roundings of x/s and q*s (a few ulp of 127: < 1e-4) */
    double bound = stochastic ? 1.0 : 0.5 + 1e-4;
    TEST_CHECK(scale_ok && worst <= bound, "int8 %s n=%zu (%zu blocks of %d): scales = block absmax/127, max |x - "
               "decoded| = %.4f s (bound %.4f s)", stochastic ? "stochastic" : "nearest", n, nb, COMPRESS_INT8_BLOCK,
               worst, bound);
    free(x); free(d); free(q); free(s);
}

/* stochastic rounding is unbiased: the mean of 400 decodes (different steps) of one block is within 4 standard
 * errors of x (the rounding error of one decode is at most s, so its standard deviation is at most s/2) */
static void test_int8_unbiased(void) {
    const size_t n = 512;
    const int R = 400;
    float x[512], d[512];
    double mean[512] = {0};
    int8_t q[512];
    float s[1];
    for (size_t i = 0; i < n; i++) { x[i] = urand(); }
    for (int r = 0; r < R; r++) {
        compress_quantize_int8(q, s, x, n, 1, 9, (uint32_t)r, 0);
        compress_dequantize_int8(d, q, s, n, 1.0f, 0);
        for (size_t i = 0; i < n; i++) { mean[i] += d[i] / R; }
    }
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) { double e = fabs(mean[i] - x[i]) / s[0]; worst = e > worst ? e : worst; }
    double bound = 4.0 * 0.5 / sqrt((double)R) * 1.5; /* 4 sigma; x 1.5 for the max over 512 values */
    TEST_CHECK(worst <= bound, "int8 stochastic rounding is unbiased: max |mean of %d decodes - x| = %.4f s (bound %.4f s)",
               R, worst, bound);
}

static void test_int8_edges(void) {
    float x[3000], d[3000];
    int8_t q[3000];
    float s[2];
    for (int i = 0; i < 3000; i++) { x[i] = i < 2048 ? 0.0f : (i == 2500 ? NAN : 1.0f); }
    compress_quantize_int8(q, s, x, 3000, 0, 0, 0, 0);
    compress_dequantize_int8(d, q, s, 3000, 1.0f, 0);
    int zero_ok = s[0] == 0.0f, nan_ok = q[2500] == 0 && d[2499] == 1.0f;
    for (int i = 0; i < 2048; i++) { zero_ok &= q[i] == 0 && d[i] == 0.0f; }
    TEST_CHECK(zero_ok && nan_ok, "int8: an all-zero block has scale 0 and decodes to 0; a NaN input becomes 0 and leaves "
               "its block's other values exact");
    /* accumulate and alpha = -1: x - decode(x) */
    float r[3000];
    memcpy(r, x, sizeof(r));
    compress_dequantize_int8(r, q, s, 3000, -1.0f, 1);
    TEST_CHECK(r[0] == 0.0f && r[2049] == 0.0f, "int8 residual x - decode(x) is 0 for exactly representable values");
}

/* reference: sort indices by (|x| desc, index asc), take k, sort by index */
static const float* ref_x;
static int cmp_mag(const void* a, const void* b) {
    uint32_t i = *(const uint32_t*)a, j = *(const uint32_t*)b;
    uint32_t ki, kj;
    memcpy(&ki, &ref_x[i], 4); memcpy(&kj, &ref_x[j], 4);
    ki &= 0x7fffffffu; kj &= 0x7fffffffu;
    if (ki != kj) { return ki > kj ? -1 : 1; }
    return i < j ? -1 : 1;
}
static int cmp_u32(const void* a, const void* b) {
    uint32_t i = *(const uint32_t*)a, j = *(const uint32_t*)b;
    return (i > j) - (i < j);
}

/* the checks of a top-k selection (idx, val: k entries) of x (n values) by the scores `score` (x itself for plain
 * top-k): *same = idx are exactly the k largest |score| (lower index wins ties) in index order and val[j] ==
 * x[idx[j]]; *ef = error feedback's identity: the residual (x with the sent entries zeroed) + scatter(sent) == x bit
 * for bit, each element in exactly one of them */
static void topk_check(const float* score, const float* x, size_t n, size_t k, const uint32_t* idx, const float* val,
                       int* same, int* ef) {
    uint32_t* ref = (uint32_t*)malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) { ref[i] = (uint32_t)i; }
    ref_x = score;
    qsort(ref, n, sizeof(uint32_t), cmp_mag);
    qsort(ref, k, sizeof(uint32_t), cmp_u32);
    *same = 1;
    for (size_t j = 0; j < k; j++) { *same &= idx[j] == ref[j] && val[j] == x[ref[j]]; }
    float* res = (float*)malloc(n * sizeof(float));
    float* back = (float*)calloc(n, sizeof(float));
    memcpy(res, x, n * sizeof(float));
    compress_zero_at(res, idx, k);
    compress_scatter_add(back, idx, val, k);
    *ef = 1;
    for (size_t i = 0; i < n; i++) { *ef &= res[i] + back[i] == x[i] && (res[i] == 0.0f || back[i] == 0.0f); }
    free(ref); free(res); free(back);
}

static void test_topk(size_t n, size_t k, int ties) {
    float* x = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = ties ? (float)((int)(urand() * 4.0f)) * 0.25f : urand() * ldexpf(1.0f, -(int)(i % 30));
    }
    uint32_t* idx = (uint32_t*)malloc(k * sizeof(uint32_t));
    float* val = (float*)malloc(k * sizeof(float));
    compress_topk_select(idx, val, x, n, k, NULL);
    int same = 0, ef = 0;
    topk_check(x, x, n, k, idx, val, &same, &ef);
    TEST_CHECK(same && ef, "top-k n=%zu k=%zu%s: exactly the k largest |x| (lower index wins ties) in index order; "
               "residual + sent == input bit for bit", n, k, ties ? " (values from 9 levels: many ties)" : "");
    free(x); free(idx); free(val);
}

/* --grad-compress-ef-decay: compress_pack = g + (decay * r rounded) bit for bit (decay 1: g + r); then 8 steps of
 * top-k with error feedback where element 0 has a tiny constant gradient c (never selected): its residual follows
 * r_t = c (1 - decay^t) / (1 - decay) (relative 1e-5), and every step keeps residual + sent == packed input */
static void test_ef_decay(size_t n, size_t k, float decay) {
    float* g = (float*)malloc(n * sizeof(float));
    float* r = (float*)malloc(n * sizeof(float));
    float* x = (float*)malloc(n * sizeof(float));
    uint32_t* idx = (uint32_t*)malloc(k * sizeof(uint32_t));
    float* val = (float*)malloc(k * sizeof(float));
    for (size_t i = 0; i < n; i++) { g[i] = urand(); r[i] = urand(); }
    compress_pack(x, g, r, decay, n);
    int formula = 1;
    for (size_t i = 0; i < n; i++) {
        float dr = decay * r[i];
        formula &= x[i] == g[i] + dr;
    }
    compress_pack(x, g, r, 1.0f, n);
    for (size_t i = 0; i < n; i++) { formula &= x[i] == g[i] + r[i]; }
    const float c = 1e-6f;
    memset(r, 0, n * sizeof(float));
    int ef = 1, geometric = 1;
    for (int t = 1; t <= 8; t++) {
        for (size_t i = 1; i < n; i++) { g[i] = 0.5f + 0.5f * fabsf(urand()); }
        g[0] = c;
        compress_pack(x, g, r, decay, n);
        memcpy(r, x, n * sizeof(float));
        compress_topk_select(idx, val, x, n, k, NULL);
        compress_zero_at(r, idx, k);
        int same = 0, ok = 0;
        topk_check(x, x, n, k, idx, val, &same, &ok);
        ef &= same && ok;
        double want = (double)c * (decay == 1.0f ? t : (1.0 - pow(decay, t)) / (1.0 - decay));
        geometric &= fabs((double)r[0] - want) <= 1e-5 * want;
    }
    TEST_CHECK(formula && ef && geometric, "error-feedback decay %g, n=%zu k=%zu: packed = g + decay*r bit for bit "
               "(decay 1: g + r); 8 steps: residual + sent == packed input, and an element never sent keeps "
               "c (1 - decay^t)/(1 - decay) of its gradient c", (double)decay, n, k);
    free(g); free(r); free(x); free(idx); free(val);
}

static void test_parse(void) {
    GradCompressSpec s;
    char err[256];
    int ok = grad_compress_parse("int8", &s, err, sizeof(err)) == 0 && s.kind == GRAD_COMPRESS_INT8;
    ok &= grad_compress_parse("topk:0.01", &s, err, sizeof(err)) == 0 && s.kind == GRAD_COMPRESS_TOPK && s.ratio == 0.01;
    ok &= grad_compress_parse("none", &s, err, sizeof(err)) == 0 && s.kind == GRAD_COMPRESS_NONE;
    ok &= grad_compress_parse("topk:1", &s, err, sizeof(err)) == 0 && s.ratio == 1.0;
    const char* bad[] = {"topk:0", "topk:1.5", "topk:", "topk:x", "topk:0.1x", "int4", "TOPK:0.1"};
    for (int i = 0; i < 7; i++) { ok &= grad_compress_parse(bad[i], &s, err, sizeof(err)) == -1 && strstr(err, "--grad-compress"); }
    TEST_CHECK(ok, "--grad-compress parser: none, int8, topk:RATIO accepted; 7 malformed values refused with a message "
               "naming the flag");
}

int main(void) {
    test_int8(1, 0);
    test_int8(2047, 0);
    test_int8(2048 * 3 + 5, 0);
    test_int8(100003, 0);
    test_int8(100003, 1);
    test_int8_unbiased();
    test_int8_edges();
    test_topk(1, 1, 0);
    test_topk(1000, 1, 0);
    test_topk(1000, 1000, 0);
    test_topk(4099, 41, 0);
    test_topk(100003, 1000, 0);
    test_topk(5000, 700, 1);
    test_topk(5000, 1, 1);
    test_ef_decay(1000, 10, 0.9f);
    test_ef_decay(1000, 10, 1.0f);
    test_parse();
    return testing_finish();
}
