/*
 * dev/test/test_sampler.c -- unit tests of llmc/sampler.h: greedy, inverse-CDF sampling,
 * top-k truncation against a sort-based reference, padded columns never sampled, RNG range.
 */
#include "llmc/sampler.h"
#include "dev/test/testing.h"

static int cmp_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x < y) - (x > y);
}

int main(void) {
    float l1[5] = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
    TEST_CHECK(sample_token(l1, 5, 0.0f, 0, 0.99f) == 1, "temperature 0 -> argmax, lowest index on ties");
    TEST_CHECK(sample_token(l1, 5, -1.0f, 3, 0.5f) == 1, "negative temperature is greedy too");
    /* padded columns: huge logits beyond V must never be chosen */
    float lp[8] = {1.0f, 0.0f, 0.5f, 0.2f, 100.0f, 100.0f, 100.0f, 100.0f};
    int pad_ok = 1;
    for (int i = 0; i < 100; i++) {
        int t = sample_token(lp, 4, 1.0f, 0, (float)i / 100.0f);
        if (t < 0 || t >= 4) { pad_ok = 0; }
    }
    TEST_CHECK(pad_ok && sample_token(lp, 4, 0.0f, 0, 0.0f) == 0, "only the first V entries are ever sampled (padded columns ignored)");
    /* inverse CDF: two equal logits -> coin < 0.5 picks 0, >= 0.5 picks 1 */
    float l2[2] = {3.0f, 3.0f};
    TEST_CHECK(sample_token(l2, 2, 1.0f, 0, 0.49f) == 0 && sample_token(l2, 2, 1.0f, 0, 0.51f) == 1,
               "inverse CDF split at 0.5 for two equal logits");
    TEST_CHECK(sample_token(l2, 2, 1.0f, 0, 0.0f) == 0 && sample_token(l2, 2, 1.0f, 0, 0.99999994f) == 1, "coin 0 and coin just below 1");
    /* exact probabilities: logits log(1), log(2), log(7) -> p = 0.1, 0.2, 0.7 */
    float l3[3] = {0.0f, logf(2.0f), logf(7.0f)};
    TEST_CHECK(sample_token(l3, 3, 1.0f, 0, 0.09f) == 0 && sample_token(l3, 3, 1.0f, 0, 0.11f) == 1 &&
               sample_token(l3, 3, 1.0f, 0, 0.29f) == 1 && sample_token(l3, 3, 1.0f, 0, 0.31f) == 2,
               "CDF boundaries at 0.1 and 0.3 for p = (0.1, 0.2, 0.7)");
    /* temperature 2 flattens: p ~ sqrt(1,2,7) normalised = (0.1896, 0.2681, 0.5017)/... */
    double z = 1.0 + sqrt(2.0) + sqrt(7.0);
    double c1 = 1.0 / z, c2 = (1.0 + sqrt(2.0)) / z;
    TEST_CHECK(sample_token(l3, 3, 2.0f, 0, (float)(c1 - 0.01)) == 0 && sample_token(l3, 3, 2.0f, 0, (float)(c1 + 0.01)) == 1 &&
               sample_token(l3, 3, 2.0f, 0, (float)(c2 + 0.01)) == 2,
               "temperature 2 uses p ~ exp(logit/2): boundaries %.4f, %.4f", c1, c2);
    /* top-k: with k=1 always the argmax */
    int k1 = 1;
    for (int i = 0; i < 50; i++) { if (sample_token(l3, 3, 1.0f, 1, (float)i / 50.0f) != 2) { k1 = 0; } }
    TEST_CHECK(k1, "top_k = 1 always returns the argmax");
    /* top-k = 2 on l3: renormalised p = (0, 2/9, 7/9) */
    TEST_CHECK(sample_token(l3, 3, 1.0f, 2, 0.2f) == 1 && sample_token(l3, 3, 1.0f, 2, 0.24f) == 2 && sample_token(l3, 3, 1.0f, 2, 0.0f) == 1,
               "top_k = 2 drops the smallest logit and renormalises (boundary 2/9)");
    TEST_CHECK(sample_token(l3, 3, 1.0f, 3, 0.05f) == 0 && sample_token(l3, 3, 1.0f, -1, 0.05f) == 0 && sample_token(l3, 3, 1.0f, 99, 0.05f) == 0,
               "top_k >= V, <= 0 mean no truncation");
    /* top-k against a sort reference on random logits: sampled tokens are always among the k largest */
    uint64_t rng = 12345;
    int topk_ok = 1, hist_ok = 1;
    float logits[257], sorted[257];
    for (int trial = 0; trial < 200; trial++) {
        int V = 1 + (int)(random_u32(&rng) % 257);
        for (int i = 0; i < V; i++) { logits[i] = (random_f32(&rng) - 0.5f) * 8.0f; }
        memcpy(sorted, logits, (size_t)V * sizeof(float));
        qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
        int k = 1 + (int)(random_u32(&rng) % (unsigned)V);
        float kth = sorted[k - 1];
        for (int s = 0; s < 20; s++) {
            int t = sample_token(logits, V, 0.7f, k, random_f32(&rng));
            if (t < 0 || t >= V || logits[t] < kth) { topk_ok = 0; }
        }
    }
    TEST_CHECK(topk_ok, "top-k (quickselect) on 200 random vocabularies: every sample is among the k largest logits");
    /* empirical frequencies match softmax within 5 sigma */
    float l4[4] = {0.0f, 1.0f, 2.0f, -1.0f};
    int counts[4] = {0, 0, 0, 0};
    int N = 100000;
    for (int i = 0; i < N; i++) { counts[sample_token(l4, 4, 1.0f, 0, random_f32(&rng))]++; }
    double zz = 0.0;
    for (int i = 0; i < 4; i++) { zz += exp((double)l4[i]); }
    for (int i = 0; i < 4; i++) {
        double p = exp((double)l4[i]) / zz;
        double sigma = sqrt(p * (1 - p) / N);
        if (fabs((double)counts[i] / N - p) > 5 * sigma) { hist_ok = 0; }
    }
    TEST_CHECK(hist_ok, "100k samples match the softmax probabilities within 5 sigma");
    /* NaN logits never chosen */
    float l5[3] = {NAN, 0.0f, NAN};
    TEST_CHECK(sample_token(l5, 3, 1.0f, 0, 0.9f) == 1 && sample_token(l5, 3, 0.0f, 0, 0.9f) == 1, "NaN logits are never sampled");
    /* RNG */
    uint64_t s1 = 42, s2 = 42, s3 = 43;
    int same = 1, diff = 0, range_ok = 1;
    double mean = 0.0;
    for (int i = 0; i < 10000; i++) {
        unsigned a = random_u32(&s1), b = random_u32(&s2), c = random_u32(&s3);
        if (a != b) { same = 0; }
        if (a != c) { diff = 1; }
        float f = random_f32(&s1); (void)random_f32(&s2);
        if (!(f >= 0.0f && f < 1.0f)) { range_ok = 0; }
        mean += f;
    }
    mean /= 10000;
    TEST_CHECK(same && diff, "random_u32 is deterministic in the seed and differs across seeds");
    TEST_CHECK(range_ok && fabs(mean - 0.5) < 0.01, "random_f32 in [0,1), mean %.4f", mean);
    uint64_t zero = 0;
    unsigned z1 = random_u32(&zero), z2 = random_u32(&zero);
    TEST_CHECK(zero != 0 && z1 != z2, "a zero state is replaced by a non-zero one (no stuck generator)");
    return testing_finish();
}
