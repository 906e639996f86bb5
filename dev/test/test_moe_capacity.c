/*
 * dev/test/test_moe_capacity.c -- the capacity arithmetic of the mixture-of-experts layer (llmc/moe.h, llmc/cpu/moe.h),
 * against values worked out by hand:
 *   - moe_capacity = ceil(c*k*N/E) rows per expert, at most N, N for c = 0: integral and non-integral products (the
 *     command-line tests' factors 1.0 and 1.1 with k = 2, N = 16, E = 4 give 8 and 9), a product just above an
 *     integer, one above N;
 *   - moe_recv_rows (the receive-side rows of expert parallelism) = min(ep*N*min(k, E/ep), E*cap) with the same
 *     rounding of cap;
 *   - moe_dispatch_plan with a capacity from moe_capacity: the kept counts are min(routed, cap), and the choices
 *     dropped are exactly those past the capacity in GShard's service order (every first choice in token order, then
 *     every second choice), the others get distinct rows grouped by expert.
 * A capacity rounded down (or truncated) instead of up fails the non-integral rows and the dispatch check; a plan that
 * serves second choices first, or counts dropped choices as kept, fails the dispatch check.
 */
#include "llmc/moe.h"
#include "dev/test/testing.h"

static int capacity(float c, int k, int N, int E) {
    MoEConfig mc;
    memset(&mc, 0, sizeof(mc));
    mc.experts = E; mc.top_k = k; mc.every = 1; mc.hidden = 4;
    MoEOptions o;
    memset(&o, 0, sizeof(o));
    o.capacity_factor = c;
    return moe_capacity(&mc, &o, N);
}

static size_t recv_rows(float c, int k, int N, int E, int ep) {
    MoEConfig mc;
    memset(&mc, 0, sizeof(mc));
    mc.experts = E; mc.top_k = k; mc.every = 1; mc.hidden = 4; mc.ep = ep; mc.ep_capacity = c;
    return moe_recv_rows(&mc, (size_t)N);
}

int main(void) {
    /* c, k, N, E and ceil(c*k*N/E) by hand (c as the float the flag parser stores) */
    static const struct { float c; int k, N, E, want; const char* why; } cases[] = {
        {1.0f, 2, 16, 4, 8, "1.0 x 2 x 16 / 4 = 8, integral"},
        {1.1f, 2, 16, 4, 9, "1.1 x 2 x 16 / 4 = 8.8 -> 9"},
        {1.25f, 1, 10, 4, 4, "1.25 x 10 / 4 = 3.125 -> 4"},
        {1.25f, 2, 16, 3, 14, "1.25 x 2 x 16 / 3 = 13.33 -> 14"},
        {0.75f, 2, 12, 3, 6, "0.75 x 2 x 12 / 3 = 6, integral"},
        {0.5f, 1, 7, 2, 2, "0.5 x 7 / 2 = 1.75 -> 2"},
        {1.3f, 2, 5, 3, 5, "1.3 x 2 x 5 / 3 = 4.33 -> 5"},
        {1.2f, 3, 7, 5, 6, "1.2 x 3 x 7 / 5 = 5.04 -> 6"},
        {1.1f, 2, 64, 4, 36, "1.1 x 2 x 64 / 4 = 35.2 -> 36"},
        {4.0f, 2, 16, 4, 16, "4 x 2 x 16 / 4 = 32 -> at most N = 16"},
        {0.0f, 2, 16, 4, 16, "c = 0: no limit, N"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = capacity(cases[i].c, cases[i].k, cases[i].N, cases[i].E);
        TEST_CHECK(got == cases[i].want, "moe_capacity(c=%g, k=%d, N=%d, E=%d) = %d: %s", (double)cases[i].c,
                   cases[i].k, cases[i].N, cases[i].E, got, cases[i].why);
    }

    /* expert parallelism's receive rows: min(ep N min(k, E/ep), E cap) */
    size_t r = recv_rows(1.1f, 2, 16, 4, 2);
    TEST_CHECK(r == 36, "moe_recv_rows(c=1.1, k=2, N=16, E=4, ep=2) = %zu: min(2 x 16 x 2 = 64, 4 x 9 = 36)", r);
    r = recv_rows(1.0f, 2, 16, 4, 2);
    TEST_CHECK(r == 32, "moe_recv_rows(c=1.0, k=2, N=16, E=4, ep=2) = %zu: min(64, 4 x 8 = 32)", r);
    r = recv_rows(0.0f, 2, 16, 4, 4);
    TEST_CHECK(r == 64, "moe_recv_rows(c=0, k=2, N=16, E=4, ep=4) = %zu: 4 x 16 x min(2, 1) = 64, no capacity", r);
    r = recv_rows(1.25f, 2, 10, 4, 4);
    TEST_CHECK(r == 28, "moe_recv_rows(c=1.25, k=2, N=10, E=4, ep=4) = %zu: min(4 x 10 x 1 = 40, 4 x ceil(6.25) = 28)", r);

    /* the plan at a non-integral capacity: N = 10 tokens, E = 3, k = 2, c = 1.1: cap = ceil(7.33) = 8. Expert 0 gets
     * the first choices of tokens 0..5 and the second choices of tokens 6..9 (10 choices; served in that order, so
     * the second choices of tokens 8 and 9 are the ones past the capacity); expert 1 the second choices of tokens
     * 0..2 and the first of 6, 7; expert 2 the second of 3..5 and the first of 8, 9 (5 each) */
    enum { N = 10, E = 3, K = 2 };
    int choice[N * K], row[N * K], plan[3 * E];
    for (int n = 0; n < N; n++) {
        choice[n * K + 0] = n < 6 ? 0 : n < 8 ? 1 : 2;
        choice[n * K + 1] = n < 3 ? 1 : n < 6 ? 2 : 0;
    }
    int cap = capacity(1.1f, K, N, E);
    moe_dispatch_plan(row, plan, choice, N, E, K, cap);
    TEST_CHECK(cap == 8 && plan[0] == 10 && plan[1] == 5 && plan[2] == 5,
               "dispatch plan, c=1.1: capacity %d (want 8), routed %d %d %d (want 10 5 5)", cap, plan[0], plan[1], plan[2]);
    TEST_CHECK(plan[E + 0] == 8 && plan[E + 1] == 5 && plan[E + 2] == 5 && plan[2 * E + 1] == 8 && plan[2 * E + 2] == 13,
               "dispatch plan: kept min(routed, cap) = %d %d %d (want 8 5 5), offsets %d %d %d (want 0 8 13)", plan[E],
               plan[E + 1], plan[E + 2], plan[2 * E], plan[2 * E + 1], plan[2 * E + 2]);
    int dropped_ok = 1, seen[N * K];
    memset(seen, 0, sizeof(seen));
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < K; j++) {
            int x = row[n * K + j], want_drop = j == 1 && n >= 8;
            if (want_drop != (x < 0)) { dropped_ok = 0; }
            if (x >= 0) {
                int e = choice[n * K + j];
                if (x >= 18 || seen[x]++ || x < plan[2 * E + e] || x >= plan[2 * E + e] + plan[E + e]) { dropped_ok = 0; }
            }
        }
    }
    TEST_CHECK(dropped_ok, "dispatch plan: exactly the second choices of tokens 8 and 9 are dropped (past the capacity of "
               "expert 0 in service order); the 18 kept choices get distinct rows inside their expert's group");
    return testing_finish();
}
