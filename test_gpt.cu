/*
 * test_gpt.cu -- numerical test of the whole model against the PyTorch reference
 * fixture (llmc/README.md, "Tests"). Same source for every backend:
 *   test_gpt_cpu  (gcc, fp32)   test_gpt (nvcc, BF16 or FP32 build)   test_gpt_emu (CUDA kernels on the CPU layer)
 *
 * Fixture (written by `python3 train_gpt.py --write-fixture`, PyTorch autograd as the oracle):
 *   dev/test/fixtures/gpt2_fixture_model.bin  initial weights (model file v3, L=2 C=64 NH=4 V=100 Vp=128 maxT=64)
 *   dev/test/fixtures/gpt2_fixture_state.bin  debug state (magic 20240327 v2): header B, T, n_steps and the
 *       AdamW hyperparameters (fp32 bit patterns in header[5..10]); body inputs (B*T int32), targets (B*T int32),
 *       logits (B,T,V) fp32, loss fp32, grads (all params, file layout) fp32, step_losses (n_steps) fp32.
 *
 * Checks: init from seed == fixture weights; logits; loss; every parameter gradient (max abs error and
 * error relative to the tensor's largest magnitude, printed per tensor); the losses of 10 AdamW steps
 * with weight decay and clipping; two identical runs are bit-identical; a checkpoint round trip (model
 * file + training state) restores bit-identical weights and optimizer state; train_step (batches uploaded
 * ahead, and with --cuda-graphs 1 on the CUDA backend) bit-identical to the synchronous eager loop; sampling's
 * fixed-length (padded) forward gives the logits of the growing-length one (test_sample_fixed_length); a skipped
 * (non-finite) step advances neither AdamW's t nor the schedule, also across a resume (test_skipped_step); weight-decay
 * grouping of d12. Under mpirun (an MPI build, build/mpi_test_gpt_tp): the fixture model split over the processes by
 * tensor parallelism, with and without sequence parallelism (test_tensor_parallel). The mixture-of-experts fixture
 * (test_moe_fixture) and the decoder family's (test_family_fixture: dev/test/fixtures/family_fixture_*.bin, written by
 * `python3 train_gpt.py --write-family-fixture`, model file v9 with norm=rms, pos=rope, bias=0, tied=0, mlp=swiglu)
 * get the same checks at the same tolerances.
 *
 * Tolerances by precision (error measured as max|ours - ref| / max|ref| per tensor):
 *   fp32: reference and ours both accumulate in fp32 but in different orders. A dot product of K terms
 *         carries a relative rounding error of about sqrt(K) * 2^-24 ~ 1e-6 for K <= 256; through the two
 *         layers and the softmax this grows by a small factor. We allow 1e-5 for logits/loss/gradients and
 *         the step losses (10x margin over what we measure, still 1000x tighter than a real bug). FP32 GPU
 *         builds use precise math (no --use_fast_math: __tanhf's 2^-11 would not fit); the explicit
 *         intrinsics that remain (__expf in the classifier, rsqrtf in LayerNorm) err by a few ulp. On the
 *         emulator with those intrinsics at their documented maximum error (dev/emu/emu.h): logits 4.3e-7,
 *         loss 3.1e-7, gradients <= 2.7e-6, step losses <= 5.9e-7 (3.7x margin at the worst gradient).
 *   bf16: every stored activation, weight and gradient is rounded to 8 mantissa bits (relative error
 *         u = 2^-9 ~ 2e-3 per rounding; matmuls and reductions accumulate in fp32). About 5 roundings lie on
 *         the path from the embeddings to a logit: 5u ~ 1e-2 for logits. The loss is a mean over B*T tokens
 *         of log-softmax values whose rounding errors are independent, so it keeps about one rounding: 2e-3.
 *         Gradients pass through about 15 roundings (forward activations, then every backward product):
 *         15u ~ 3e-2. Step losses: each AdamW step moves weights by ~lr, and bf16 weight storage (with
 *         stochastic rounding from fp32 master weights) perturbs them by u*|w|; 5e-3 over 10 steps.
 *         Measured on the CPU execution layer (dev/emu, BF16 build, with the fast-math intrinsics' documented
 *         maximum error modelled): logits 3.6e-3, loss 4e-6, gradients <= 1.1e-2, step losses <= 1.5e-4.
 */
#define TESTING
#include "train_gpt.cu"
#include "dev/test/testing.h"

typedef struct {
    double logits, loss, grads, step_losses;
} Tolerances;

/* GELU in the fixture's forwards: fused into the fc matmul's epilogue, except in FP32 CUDA builds, where the 1e-5
 * tolerances would measure cuBLASLt's own GELU epilogue (an approximation whose precision NVIDIA does not document)
 * instead of our code; there our GELU kernel (precise tanhf in FP32 builds) runs, and the fused path is compared to
 * it as a printed diagnostic only (test_fused_gelu_diagnostic). The backward's GELU derivative likewise: the Makefile
 * builds test_gpt_fp32 with LLMC_GELU_BWD_EPILOGUE=0 (our fc dbias pass, not cuBLASLt's DGELU epilogue); the first
 * line printed says which one a build has. */
#if (defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)) && defined(ENABLE_FP32)
#define FIXTURE_GELU_FUSION 0
#else
#define FIXTURE_GELU_FUSION 1
#endif
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
#define TEST_GELU_BWD (LLMC_GELU_BWD_EPILOGUE ? ", GELU backward in cuBLASLt's DGELU epilogue" : ", GELU backward in our dbias pass")
#else
#define TEST_GELU_BWD ""
#endif

static Tolerances tolerances_for_precision(void) {
    Tolerances t;
    if (FLOATX_IS_FLOAT) {
        t.logits = 1e-5; t.loss = 1e-5; t.grads = 1e-5; t.step_losses = 1e-5;
    } else {
        t.logits = 1e-2; t.loss = 2e-3; t.grads = 3e-2; t.step_losses = 5e-3;
    }
    return t;
}

#include "dev/test/fixture.h"  /* Fixture, fixture_load, fixture_free */

/* max|a-b| and max|b| over n values */
static void compare_arrays(const float* a, const float* b, size_t n, double* max_abs_err, double* max_ref) {
    double e = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) { e = d; } /* NaN propagates as a failure */
        if (fabs((double)b[i]) > r) { r = fabs((double)b[i]); }
    }
    *max_abs_err = e;
    *max_ref = r;
}

static double relative_to_max(double err, double ref) { return ref > 0 ? err / ref : err; }

/* The model on its own (llmc/gpt2.h): one full gradient buffer and the AdamW state of every parameter, as a
 * single process without ZeRO holds them. */
typedef struct {
    GPT2 m;
    floatX* grads;           /* (P) device */
    GPT2GradTarget target;   /* backward writes into grads */
    AdamWState opt;          /* fp32 m, v (and master in mixed precision) of [0, P) */
    float* norm;             /* (1) device */
} FixtureModel;

/* the mixture-of-experts settings the fixture models get (zero for the dense fixture; test_moe_fixture sets the MoE
 * fixture's from its state header) */
static MoEOptions fixture_moe_opt;
/* the expert tensors' gradients are not compared when the fixture's router is within rounding of a tie (see
 * test_moe_fixture); the reason is printed with the skip */
static const char* fixture_expert_grads_skip;
/* the activations the fixture models get: recompute (-r) and the split backward (test_split_backward sets them) */
static int fixture_recompute, fixture_split_backward;

static void build_fixture_model_tp(FixtureModel* fm, const char* model_path, int B, int T, const TensorParallel* tp) {
    GPT2* m = &fm->m;
    gpt2_build_from_file(m, model_path, tp);
    m->moe_opt = fixture_moe_opt;
    size_t P = m->num_parameters;
    fm->grads = (floatX*)dev_malloc(P * sizeof(floatX), "fixture gradients");
    fm->target = gpt2_grad_target_full(m, fm->grads);
    memset(&fm->opt, 0, sizeof(fm->opt));
    fm->opt.n = P;
    fm->opt.m = (float*)dev_malloc(P * sizeof(float), "fixture m");
    fm->opt.v = (float*)dev_malloc(P * sizeof(float), "fixture v");
    if (!FLOATX_IS_FLOAT) {
        fm->opt.master = (float*)dev_malloc(P * sizeof(float), "fixture master weights");
        float* host = (float*)malloc_check(P * sizeof(float), "host master init");
        dev_download_floats(host, m->params_memory, P);
        dev_memcpy_h2d(fm->opt.master, host, P * sizeof(float));
        free(host);
    }
    fm->norm = (float*)dev_malloc(sizeof(float), "fixture norm");
    m->split_backward = fixture_split_backward;
    gpt2_allocate_activations(m, B, T, fixture_recompute, 1);
}
static void build_fixture_model(FixtureModel* fm, const char* model_path, int B, int T) {
    build_fixture_model_tp(fm, model_path, B, T, NULL);
}

static void free_fixture_model(FixtureModel* fm) {
    dev_free(fm->grads);
    dev_free(fm->opt.m);
    dev_free(fm->opt.v);
    if (fm->opt.master) { dev_free(fm->opt.master); }
    dev_free(fm->norm);
    gpt2_free(&fm->m);
}

/* one forward+backward on the fixture batch (fresh gradients); returns the loss */
static float run_forward_backward(FixtureModel* fm, const Fixture* fx) {
    GPT2* m = &fm->m;
    size_t BT = (size_t)fx->B * fx->T;
    dev_memcpy_h2d(m->inputs, fx->inputs, BT * sizeof(int));
    dev_memcpy_h2d(m->targets, fx->targets, BT * sizeof(int));
    dev_memset(fm->grads, 0, m->num_parameters * sizeof(floatX));
    gpt2_forward(m, m->inputs, m->targets, fx->B, fx->T, FIXTURE_GELU_FUSION, 1.0f / (float)BT, 1);
    gpt2_backward(m, &fm->target, m->inputs, fx->inputs, fx->B, fx->T);
    return gpt2_mean_loss(m);
}

/* The split backward of the zero-bubble pipeline schedules (llmc/gpt2.h, gpt2_backward_weights): B (gpt2_backward with
 * split_backward) then W give the unsplit backward's gradients bit for bit, with recompute -r 0 (W reads its inputs
 * in the activations) and -r 3 (W's inputs copied, as every recompute level makes it: gpt2_wstash_inputs; -r 3
 * re-forms the most). Also: B alone leaves every weight GEMM's gradient
 * zero (W, not B, forms them; a B that still formed them would be doubled by W). Catches a GEMM W forgets, an
 * operand copied before B's last in-place change (the pre-GELU dbias pass), a stash offset overlapping another. */
static int device_equal(const void* a, const void* b, size_t bytes);
static void test_split_backward(const char* model_path, const Fixture* fx, const char* what) {
    static const int recomputes[2] = {0, 3};
    for (int r = 0; r < 2; r++) {
        FixtureModel a, b;
        fixture_recompute = recomputes[r];
        build_fixture_model(&a, model_path, fx->B, fx->T);
        fixture_split_backward = 1;
        build_fixture_model(&b, model_path, fx->B, fx->T);
        fixture_split_backward = 0;
        fixture_recompute = 0;
        run_forward_backward(&a, fx);
        run_forward_backward(&b, fx); /* B only */
        GPT2* m = &b.m;
        size_t zero_after_b = 1, gemm_values = 0;
        static const int gemms[4] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};
        for (int k = 0; k < 4; k++) {
            size_t n = m->param_sizes[gemms[k]];
            float* h = (float*)malloc_check(n * sizeof(float) + 1, "split backward check");
            dev_download_floats(h, b.target.base.t[gemms[k]], n);
            for (size_t j = 0; j < n; j++) { zero_after_b &= h[j] == 0.0f; }
            gemm_values += n;
            free(h);
        }
        TEST_CHECK(zero_after_b && gemm_values > 0, "%s, -r %d: B leaves the %zu weight-GEMM gradient values zero",
                   what, recomputes[r], gemm_values);
        gpt2_backward_weights(m, &b.target);
        size_t P = m->num_parameters;
        TEST_CHECK(device_equal(a.grads, b.grads, P * sizeof(floatX)),
                   "%s, -r %d: B then W give the unsplit backward's %zu gradients bit for bit", what, recomputes[r], P);
        free_fixture_model(&a);
        free_fixture_model(&b);
    }
}

/* sampling's fixed-shape forward (llmc/generate.h): the logits of row r from a batch-1 forward of the r + 1 fixture
 * tokens padded with <|endoftext|> to the full T equal those of a forward at length r + 1. Attention is causal, so
 * they agree exactly in arithmetic; a library may sum in another order for another shape, which the logits
 * tolerance (that already covers summation-order differences against PyTorch) bounds. The greedy token must be
 * the same. Prints whether the rows are bit-identical. */
static void test_sample_fixed_length(GPT2* m, const Fixture* fx, const Tolerances* tol) {
    const int T = fx->T, Vp = m->config.padded_vocab_size, V = m->config.vocab_size;
    GenerateConfig g;
    memset(&g, 0, sizeof(g));
    g.prompt = "";
    g.gen_tokens = T;
    g.gelu_fusion = FIXTURE_GELU_FUSION;
    int len_full = generate_forward_len(m, &g, 1), len_crop = generate_forward_len(m, &g, T + 5);
    g.gen_tokens = 8;
    int len_short = generate_forward_len(m, &g, 3);
    TEST_CHECK(len_full == T && len_crop == T && len_short == 10,
               "sampling forward length min(T, prompt + gen_tokens - 1): %d, %d, %d (expected %d, %d, 10)", len_full,
               len_crop, len_short, T, T);
    float* a = (float*)malloc_check((size_t)Vp * sizeof(float), "test logits");
    float* b = (float*)malloc_check((size_t)Vp * sizeof(float), "test logits");
    const int rows[] = {0, 1, T / 2, T - 2};
    for (int k = 0; k < 4; k++) {
        int r = rows[k];
        generate_logits(m, &g, fx->inputs, r + 1, r + 1, a);
        generate_logits(m, &g, fx->inputs, r + 1, T, b);
        double err, ref;
        compare_arrays(b, a, (size_t)V, &err, &ref);
        int same_greedy = sample_token(a, V, 0.0f, 0, 0.5f) == sample_token(b, V, 0.0f, 0, 0.5f);
        TEST_CHECK(relative_to_max(err, ref) <= tol->logits && same_greedy,
                   "sampling row %2d: forward at length T=%d (padded) vs length %d: rel diff %.2e (tol %.0e, %s), "
                   "greedy token the same", r, T, r + 1, relative_to_max(err, ref), tol->logits,
                   err == 0.0 ? "bit-identical" : "not bit-identical");
    }
    free(a);
    free(b);
}

/* sampling with the KV cache (llmc/kv_cache.h): from the fixture's first token, T greedy steps, each position run
 * once against the cached keys and values; its logits equal those of a full forward over the tokens so far (row i
 * of a length-(i+1) forward) within the logits tolerance (one-row matmuls and attention_decode's dot products sum
 * in another order than the batched forward), and the greedy token is the same at every step unless the full
 * forward's logits of the two picks lie within twice that step's largest logit difference (then the pick is a tie
 * at the precision both compute in: if |a - b| <= e elementwise, argmax a can differ from argmax b only where
 * b[argmax b] - b[argmax a] <= 2e; a random-init model's near-uniform logits meet such ties in BF16) */
static void test_kv_cache_sampling(GPT2* m, const Fixture* fx, const Tolerances* tol) {
    const int T = fx->T, Vp = m->config.padded_vocab_size, V = m->config.vocab_size;
    TEST_CHECK(kv_cache_supported(m), "the fixture model is whole on this process: KV-cache sampling applies");
    GenerateConfig g;
    memset(&g, 0, sizeof(g));
    g.prompt = "";
    g.gelu_fusion = FIXTURE_GELU_FUSION;
    KVCache kv;
    kv_cache_create(&kv, m, FIXTURE_GELU_FUSION);
    float* a = (float*)malloc_check((size_t)Vp * sizeof(float), "test logits");
    float* b = (float*)malloc_check((size_t)Vp * sizeof(float), "test logits");
    int* tokens = (int*)malloc_check((size_t)T * sizeof(int), "test tokens");
    tokens[0] = fx->inputs[0];
    double worst = 0.0;
    int same = 1, bitwise = 1, first_diff = -1, ties = 0;
    for (int i = 0; i < T; i++) {
        kv_cache_step(m, &kv, tokens[i], a);
        generate_logits(m, &g, tokens, i + 1, i + 1, b);
        double err, ref;
        compare_arrays(a, b, (size_t)V, &err, &ref);
        if (relative_to_max(err, ref) > worst) { worst = relative_to_max(err, ref); }
        if (err != 0.0) { bitwise = 0; }
        int ta = sample_token(a, V, 0.0f, 0, 0.5f), tb = sample_token(b, V, 0.0f, 0, 0.5f);
        if (ta != tb && (double)b[tb] - (double)b[ta] <= 2.0 * err) {
            ties++;
        } else if (ta != tb && first_diff < 0) {
            first_diff = i; same = 0;
        }
        if (i + 1 < T) { tokens[i + 1] = ta; }
    }
    TEST_CHECK(kv.len == T, "the cache holds the %d positions fed (%d)", T, kv.len);
    TEST_CHECK(worst <= tol->logits, "KV-cache logits vs full forward over %d greedy positions: worst rel diff %.2e "
               "(tol %.0e, %s)", T, worst, tol->logits, bitwise ? "bit-identical" : "not bit-identical");
    TEST_CHECK(same, "KV-cache greedy tokens equal the recomputed ones at all %d steps but %d ties within 2x the logit "
               "difference (first difference beyond: %d)", T, ties, first_diff);
    kv_cache_free(&kv);
    free(a); free(b); free(tokens);
}

/* squared L2 norm of the full gradient (fp32, deterministic) */
static float fixture_grad_norm_squared(FixtureModel* fm) {
    float host = 0.0f;
    global_norm_squared(fm->norm, fm->grads, fm->m.num_parameters, 0);
    dev_memcpy_d2h(&host, fm->norm, sizeof(float));
    return host;
}

/* the fixture's AdamW sequence: n_steps of (forward/backward, clip, update); losses[] receives each loss */
static void run_adamw_steps(FixtureModel* fm, const Fixture* fx, float* losses) {
    for (int step = 0; step < fx->n_steps; step++) {
        losses[step] = run_forward_backward(fm, fx);
        float norm = sqrtf(fixture_grad_norm_squared(fm));
        AdamWStep st;
        st.learning_rate = fx->lr; st.beta1 = fx->beta1; st.beta2 = fx->beta2; st.eps = fx->eps;
        st.weight_decay = fx->weight_decay; st.grad_scale = clip_scale(norm, fx->grad_clip);
        st.t = step + 1; st.seed = 42;
        gpt2_update_range(&fm->m, 0, fm->m.num_parameters, fm->grads, &fm->opt, &st);
    }
}

static void test_init_matches_reference(const GPT2* ref) {
    GPT2 m;
    shard_allocate_weights(&m, &ref->config, NULL, NULL);
    shard_init_random(&m, 1337);
    float* a = (float*)malloc_check(m.num_parameters * sizeof(float), "init a");
    float* b = (float*)malloc_check(m.num_parameters * sizeof(float), "init b");
    dev_download_floats(a, m.params_memory, m.num_parameters);
    dev_download_floats(b, ref->params_memory, m.num_parameters);
    size_t mismatches = 0;
    for (size_t i = 0; i < m.num_parameters; i++) { if (memcmp(&a[i], &b[i], sizeof(float)) != 0) { mismatches++; } }
    TEST_CHECK(mismatches == 0, "init from seed 1337 equals PyTorch's init bit for bit (%zu of %zu values differ)",
               mismatches, m.num_parameters);
    free(a); free(b);
    gpt2_free(&m);
}

static void test_forward_backward(FixtureModel* fm, const Fixture* fx, const Tolerances* tol) {
    GPT2* m = &fm->m;
    const GPT2Config* c = &m->config;
    size_t BT = (size_t)fx->B * fx->T, V = (size_t)c->vocab_size, Vp = (size_t)c->padded_vocab_size;
    /* logits: forward without targets keeps the logits buffer */
    dev_memcpy_h2d(m->inputs, fx->inputs, BT * sizeof(int));
    gpt2_forward(m, m->inputs, NULL, fx->B, fx->T, FIXTURE_GELU_FUSION, 0.0f, 0);
    float* padded = (float*)malloc_check(BT * Vp * sizeof(float), "logits");
    float* logits = (float*)malloc_check(BT * V * sizeof(float), "logits");
    dev_download_floats(padded, (floatX*)m->acts.t[A_LOGITS], BT * Vp);
    for (size_t i = 0; i < BT; i++) { memcpy(logits + i * V, padded + i * Vp, V * sizeof(float)); }
    double err, ref;
    compare_arrays(logits, fx->logits, BT * V, &err, &ref);
    TEST_CHECK(relative_to_max(err, ref) <= tol->logits, "logits (%zu,%zu): max abs err %.3e, rel to max %.3e (tol %.0e)",
               BT, V, err, relative_to_max(err, ref), tol->logits);
    if (FIXTURE_GELU_FUSION == 0) { /* diagnostic: the fused epilogue's logits against the ones just checked */
        float* fused = (float*)malloc_check(BT * Vp * sizeof(float), "fused logits");
        gpt2_forward(m, m->inputs, NULL, fx->B, fx->T, 1, 0.0f, 0);
        dev_download_floats(fused, (floatX*)m->acts.t[A_LOGITS], BT * Vp);
        for (size_t i = 0; i < BT; i++) { memcpy(fused + i * V, fused + i * Vp, V * sizeof(float)); }
        compare_arrays(fused, logits, BT * V, &err, &ref);
        printf("# logits with GELU fused into the matmul epilogue vs our GELU kernel: max abs diff %.3e, rel to max %.3e "
               "(not a check: the epilogue's precision is the library's)\n", err, relative_to_max(err, ref));
        free(fused);
    }
    free(padded); free(logits);
    float loss = run_forward_backward(fm, fx);
    double lerr = fabs((double)loss - fx->loss) / fabs((double)fx->loss);
    TEST_CHECK(lerr <= tol->loss, "loss %.7f vs reference %.7f (rel err %.2e, tol %.0e)", loss, fx->loss, lerr, tol->loss);
    float* grads = (float*)malloc_check(m->num_parameters * sizeof(float), "grads");
    dev_download_floats(grads, fm->grads, m->num_parameters);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = m->param_sizes[i];
        if (n == 0) { continue; } /* the expert tensors of a dense model, the MLP tensors of an all-MoE one */
        if (fixture_expert_grads_skip && GPT2_PARAMS[i].slices == SLICES_MOE && i != P_ROUTERW) {
            TEST_CHECK(1, "grad %-8s # SKIP %s", parameter_name(i), fixture_expert_grads_skip);
            off += n;
            continue;
        }
        compare_arrays(grads + off, fx->grads + off, n, &err, &ref);
        TEST_CHECK(relative_to_max(err, ref) <= tol->grads, "grad %-8s (%8zu values): max abs err %.3e, max |ref| %.3e, rel %.3e (tol %.0e)",
                   parameter_name(i), n, err, ref, relative_to_max(err, ref), tol->grads);
        off += n;
    }
    /* padded vocabulary rows of dwte must be exactly zero */
    size_t C = (size_t)c->channels, nonzero = 0;
    for (size_t r = V; r < Vp; r++) { for (size_t k = 0; k < C; k++) { if (grads[r * C + k] != 0.0f) { nonzero++; } } }
    TEST_CHECK(nonzero == 0, "padded vocabulary rows of the wte gradient are exactly zero (%zu non-zero)", nonzero);
    free(grads);
}

/* the loss is reduced on the device (no host sync per micro-step): the mean must equal the host-side fp64 sum
 * of the per-token losses that the trainer used to do (CPU: the same sequential sum; CUDA: a fixed fp64 tree,
 * whose last-bit differences from the sequential sum lie far below the fp32 rounding of the mean; the inputs
 * are the fixed fixture, so this is not a matter of luck from run to run), and the accumulator must hold the
 * exact fp64 sum of the means of the forwards since the reset */
static void test_loss_accumulator(GPT2* m, const Fixture* fx) {
    size_t BT = (size_t)fx->B * fx->T;
    float* tok = (float*)malloc_check(BT * sizeof(float), "token losses");
    float means[3];
    double expected = 0.0;
    gpt2_loss_sum_reset(m);
    for (int k = 0; k < 3; k++) {
        dev_memcpy_h2d(m->inputs, fx->inputs, BT * sizeof(int));
        dev_memcpy_h2d(m->targets, fx->targets, BT * sizeof(int));
        gpt2_forward(m, m->inputs, m->targets, fx->B, fx->T, FIXTURE_GELU_FUSION, 0.0f, 0);
        means[k] = gpt2_mean_loss(m);
        expected += (double)means[k];
        if (k == 0) {
            dev_memcpy_d2h(tok, m->acts.t[A_LOSSES], BT * sizeof(float));
            double sum = 0.0;
            for (size_t i = 0; i < BT; i++) { sum += tok[i]; }
            float host_mean = (float)(sum / (double)BT);
            TEST_CHECK(memcmp(&host_mean, &means[0], sizeof(float)) == 0,
                       "device loss mean %.9g equals the host fp64 sum of the %zu token losses %.9g bit for bit",
                       means[0], BT, host_mean);
        }
    }
    double sum = gpt2_loss_sum_read(m);
    TEST_CHECK(memcmp(&sum, &expected, sizeof(double)) == 0 && memcmp(&means[0], &means[2], sizeof(float)) == 0,
               "loss accumulator over 3 forwards = %.17g (expected %.17g, the fp64 sum of the 3 means)", sum, expected);
    gpt2_loss_sum_reset(m);
    sum = gpt2_loss_sum_read(m);
    TEST_CHECK(sum == 0.0, "gpt2_loss_sum_reset zeroes the accumulator (%g)", sum);
    free(tok);
}

static void test_adamw_steps(const char* model_path, const Fixture* fx, const Tolerances* tol) {
    float* losses = (float*)malloc_check((size_t)fx->n_steps * sizeof(float), "losses");
    float* losses2 = (float*)malloc_check((size_t)fx->n_steps * sizeof(float), "losses2");
    FixtureModel fm;
    build_fixture_model(&fm, model_path, fx->B, fx->T);
    run_adamw_steps(&fm, fx, losses);
    double worst = 0.0;
    for (int s = 0; s < fx->n_steps; s++) {
        double e = fabs((double)losses[s] - fx->step_losses[s]) / fabs((double)fx->step_losses[s]);
        printf("#   step %d: loss %.7f reference %.7f rel err %.2e\n", s, losses[s], fx->step_losses[s], e);
        if (!(e <= worst)) { worst = e; }
    }
    TEST_CHECK(worst <= tol->step_losses, "%d AdamW steps (lr %.0e, wd %.2f, clip %.2f): worst loss rel err %.2e (tol %.0e)",
               fx->n_steps, fx->lr, fx->weight_decay, fx->grad_clip, worst, tol->step_losses);
    TEST_CHECK(losses[fx->n_steps - 1] < losses[0] - 0.01f, "training lowers the loss (%.4f -> %.4f)", losses[0],
               losses[fx->n_steps - 1]);
    /* determinism: a second identical run gives bit-identical losses and weights */
    size_t P = fm.m.num_parameters;
    float* w1 = (float*)malloc_check(P * sizeof(float), "w1");
    float* w2 = (float*)malloc_check(P * sizeof(float), "w2");
    dev_download_floats(w1, fm.m.params_memory, P);
    FixtureModel fm2;
    build_fixture_model(&fm2, model_path, fx->B, fx->T);
    run_adamw_steps(&fm2, fx, losses2);
    dev_download_floats(w2, fm2.m.params_memory, P);
    TEST_CHECK(memcmp(losses, losses2, (size_t)fx->n_steps * sizeof(float)) == 0, "two identical runs give bit-identical losses");
    TEST_CHECK(memcmp(w1, w2, P * sizeof(float)) == 0, "two identical runs give bit-identical weights");
    free(w1); free(w2);
    free_fixture_model(&fm);
    free_fixture_model(&fm2);
    free(losses); free(losses2);
}

/* ---------------------------------------------------------------- the trainer's step and checkpoints */

/* a token shard of ntok pseudo-random tokens < 100 */
static void write_test_shard(const char* path, int ntok) {
    int h[FILE_HEADER_INTS];
    memset(h, 0, sizeof(h));
    h[0] = 20240520; h[1] = 1; h[2] = ntok;
    FILE* f = fopen_check(path, "wb");
    fwrite(h, sizeof(int), FILE_HEADER_INTS, f);
    for (int i = 0; i < ntok; i++) { uint16_t t = (uint16_t)((i * 7919u + 13u) % 100u); fwrite(&t, 2, 1, f); }
    fclose(f);
}

/* a single-process ZeRO-0 session on the fixture model with `accum` micro-steps per optimizer step (cosine
 * schedule, clipping at 1, master weights), reading `shard` shuffled, checkpoints into `output_dir` */
static TrainSession* test_session_open(const char* model_path, const Fixture* fx, const char* shard, int accum,
                                       int max_steps, const char* output_dir) {
    TrainSession* s = (TrainSession*)calloc_check(1, sizeof(TrainSession), "test session");
    train_config_defaults(&s->cfg);
    s->cfg.gelu_fusion = FIXTURE_GELU_FUSION;
    s->cfg.B = fx->B; s->cfg.T = fx->T; s->cfg.total_batch_size = accum * fx->B * fx->T;
    s->cfg.output_dir = output_dir;
    s->cfg.train_data = shard;
    comm_init(&s->world, NULL, NULL, "auto", 600.0); /* one process, ZeRO-0: NCCL not started (as the trainer) */
    s->layout = grid_layout_for_world(1, 1, 1, 1);
    s->layout.B = fx->B; s->layout.T = fx->T; s->layout.m = accum;
    grid_init(&s->grid, &s->world, &s->layout);
    s->dp = s->grid.dp;
    gpt2_build_from_file(&s->model, model_path, NULL);
    s->max_steps = max_steps;
    s->tp = s->grid.tp;
    s->pp = s->grid.pp;
    zero_init(&s->zero, 0, &s->model, s->dp, 1);
    step_stats_init(&s->stats, &s->zero, s->tp, s->pp, NULL);
    gpt2_allocate_activations(&s->model, fx->B, fx->T, 0, 1);
    dataloader_init(&s->train_loader, shard, fx->B, fx->T, 0, 1, 1, 7);
    batch_pipeline_init(&s->batches, &s->train_loader, fx->B, fx->T);
    lr_scheduler_init(&s->scheduler, "cosine", 1e-3f, 1, max_steps, 0.1f, 0.2f);
    loss_scaler_init(&s->scaler, 65536.0f, 1000);
    return s;
}

static void test_session_close(TrainSession* s) {
    graphs_free(&s->graphs);
    batch_pipeline_free(&s->batches);
    step_stats_free(&s->stats);
    zero_free(&s->zero);
    gpt2_free(&s->model);
    dataloader_free(&s->train_loader);
    grid_free(&s->grid);
    comm_finalize(&s->world);
    free(s);
}

/* 1 if the device buffers a and b (bytes) are equal */
static int device_equal(const void* a, const void* b, size_t bytes) {
    char* x = (char*)malloc_check(bytes, "compare x");
    char* y = (char*)malloc_check(bytes, "compare y");
    dev_memcpy_d2h(x, a, bytes);
    dev_memcpy_d2h(y, b, bytes);
    int same = memcmp(x, y, bytes) == 0;
    free(x); free(y);
    return same;
}

/* 1 if two sessions hold bit-identical weights and AdamW m, v */
static int sessions_equal(const TrainSession* a, const TrainSession* b) {
    size_t P = a->model.num_parameters;
    return device_equal(a->model.params_memory, b->model.params_memory, P * sizeof(floatX)) &&
           device_equal(a->zero.opt.m, b->zero.opt.m, P * sizeof(float)) &&
           device_equal(a->zero.opt.v, b->zero.opt.v, P * sizeof(float));
}

/* a fresh temporary directory from the template `dir` (overwritten with its name) holding a test shard of ntok
 * tokens, whose path goes to shard */
static void test_dir_with_shard(char* dir, char* shard, size_t cap, int ntok) {
    if (mkdtemp(dir) == NULL) { FATAL("mkdtemp failed"); }
    snprintf(shard, cap, "%s/shard.bin", dir);
    write_test_shard(shard, ntok);
}

static void remove_test_dir(const char* dir) {
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) { printf("# warning: could not remove %s\n", dir); }
}

/* checkpoint round trip through the trainer's own functions: 3 steps, write_checkpoint, then a fresh session
 * resumes it (resume_from_checkpoint) and must hold everything bit-identical and read the same next batches */
static void test_checkpoint_round_trip(const char* model_path, const Fixture* fx) {
    char dir[] = "/tmp/llmc_test_ckpt_XXXXXX", shard[1100];
    test_dir_with_shard(dir, shard, sizeof(shard), 4 * fx->B * fx->T + 1);
    TrainSession* a = test_session_open(model_path, fx, shard, 1, 10, dir);
    for (int k = 0; k < 3; k++) { train_step(a); }
    a->sample_rng = 12345;
    write_checkpoint(a);
    char path[1100];
    checkpoint_done_path(path, sizeof(path), dir, 3);
    TEST_CHECK(file_exists(path), "checkpoint writes the DONE marker last");
    TEST_CHECK(checkpoint_latest_step(dir, "DONE_", NULL) == 3, "latest complete checkpoint is found (step 3)");
    TrainSession* b = test_session_open(model_path, fx, shard, 1, 10, dir);
    resume_from_checkpoint(b, 3, 0);
    TEST_CHECK(sessions_equal(a, b), "checkpoint round trip: weights and AdamW m, v bit-identical");
    TEST_CHECK(b->step == 3 && b->sample_rng == 12345, "checkpoint round trip: step and sampling RNG restored");
    /* the next 6 batches (across the end of the epoch) must be the same: the shard's 4 windows are distinct within an
     * epoch, so a resume one batch early or late differs in at least 3 of them (one batch alone matched by chance 1
     * time in 4: the next epoch's shuffled order may start with the window a would read) */
    int same = 0;
    for (int k = 0; k < 6; k++) {
        int ia = batch_pipeline_take(&a->batches), ib = batch_pipeline_take(&b->batches);
        same += memcmp(batch_pipeline_host_inputs(&a->batches, ia), batch_pipeline_host_inputs(&b->batches, ib),
                       (size_t)fx->B * fx->T * sizeof(int)) == 0;
    }
    TEST_CHECK(same == 6, "checkpoint round trip: data loader continues with the same batches (%d of the next 6 equal)",
               same);
    test_session_close(a);
    test_session_close(b);
    remove_test_dir(dir);
}

/* the trainer's step as it was before batches were uploaded ahead and the loss reduced on the device: load,
 * blocking upload, forward, backward, per-micro-step loss read; then norm, clip and AdamW as train_step */
static StepResult reference_train_step(TrainSession* s) {
    GPT2* m = &s->model;
    ZeroOptimizer* z = &s->zero;
    int B = s->cfg.B, T = s->cfg.T;
    size_t n = (size_t)B * T, P = m->num_parameters;
    float dloss = 1.0f / ((float)B * (float)T * (float)s->layout.m);
    GPT2GradTarget target = gpt2_grad_target_full(m, z->grads);
    dev_memset(z->grads, 0, P * sizeof(floatX));
    double loss_sum = 0.0;
    for (int micro = 0; micro < s->layout.m; micro++) {
        dataloader_next_batch(&s->train_loader);
        dev_memcpy_h2d(m->inputs, s->train_loader.inputs, n * sizeof(int));
        dev_memcpy_h2d(m->targets, s->train_loader.targets, n * sizeof(int));
        gpt2_forward(m, m->inputs, m->targets, B, T, s->cfg.gelu_fusion, dloss, 1);
        gpt2_backward(m, &target, m->inputs, s->train_loader.inputs, B, T);
        loss_sum += gpt2_mean_loss(m);
    }
    StepResult r;
    memset(&r, 0, sizeof(r)); /* fields this loop does not use (skipped, compression bytes) stay 0, as in train_step */
    r.loss = (float)(loss_sum / s->layout.m);
    r.bubble = -1.0f; /* no pipeline */
    float norm_sq = 0.0f;
    global_norm_squared(s->stats.partials, z->grads, P, 0);
    dev_memcpy_d2h(&norm_sq, s->stats.partials, sizeof(float));
    r.grad_norm = (float)sqrt((double)norm_sq);
    r.lr = lr_scheduler_get(&s->scheduler, s->step);
    AdamWStep st;
    st.learning_rate = r.lr; st.beta1 = s->cfg.beta1; st.beta2 = s->cfg.beta2; st.eps = s->cfg.eps;
    st.weight_decay = s->cfg.weight_decay; st.grad_scale = clip_scale(r.grad_norm, s->cfg.grad_clip);
    st.t = s->step + 1; st.seed = (unsigned int)s->cfg.seed;
    gpt2_update_range(m, 0, P, z->grads, &z->opt, &st);
    s->step++;
    return r;
}

/* every field of two step results bit for bit (a whole-struct memcmp would also compare the padding after
 * `skipped`, which a struct returned by value need not keep: C11 6.2.6.1p6) */
#define STEP_FIELD_SAME(f) (memcmp(&a->f, &b->f, sizeof(a->f)) == 0)
static int step_results_same(const StepResult* a, const StepResult* b) {
    return STEP_FIELD_SAME(loss) && STEP_FIELD_SAME(grad_norm) && STEP_FIELD_SAME(lr) && STEP_FIELD_SAME(bubble) &&
           STEP_FIELD_SAME(skipped) && STEP_FIELD_SAME(grad_sent) && STEP_FIELD_SAME(grad_fp32) &&
           STEP_FIELD_SAME(off_d2h) && STEP_FIELD_SAME(off_h2d) && STEP_FIELD_SAME(off_d2h_theory) &&
           STEP_FIELD_SAME(off_h2d_theory) && STEP_FIELD_SAME(nvme_read) && STEP_FIELD_SAME(nvme_write) &&
           STEP_FIELD_SAME(nvme_seconds) && STEP_FIELD_SAME(off_seconds) && STEP_FIELD_SAME(off_d2h_streamed);
}
#undef STEP_FIELD_SAME

/* train_step (batches uploaded ahead on the copy stream, loss read once per step) gives bit-identical losses,
 * norms, weights and optimizer state to the old synchronous loop, over 3 steps of 2 micro-steps that cross an
 * epoch boundary of a 5-window shard; while the next step's batch is loaded ahead, the data position a checkpoint
 * saves is that of the next batch to train on; nothing is loaded beyond the last step.
 * cuda_graphs = 1 (CUDA backend, also under the CPU execution layer): the same with --cuda-graphs 1, i.e. one eager
 * warm-up micro-step, then each batch slot's forward+backward captured once and replayed (5 replays). */
static void test_train_step_pipeline(const char* model_path, const Fixture* fx, int cuda_graphs) {
    char dir[] = "/tmp/llmc_test_pipe_XXXXXX", shard[1100];
    test_dir_with_shard(dir, shard, sizeof(shard), 5 * fx->B * fx->T + 1);
    const int steps = 3, accum = 2;
    TrainSession* a = test_session_open(model_path, fx, shard, accum, steps, "");
    TrainSession* ref = test_session_open(model_path, fx, shard, accum, steps, "");
    a->cfg.cuda_graphs = cuda_graphs;
    const char* how = cuda_graphs ? "with --cuda-graphs 1" : "batches uploaded ahead, loss read once per step";
    int same_results = 1, same_position = 1, pending_ahead = 1;
    for (int k = 0; k < steps; k++) {
        StepResult ra = train_step(a);
        StepResult rr = reference_train_step(ref);
        printf("#   step %d: loss %.7f norm %.6f (reference %.7f %.6f)\n", k + 1, ra.loss, ra.grad_norm, rr.loss, rr.grad_norm);
        same_results &= step_results_same(&ra, &rr);
        DataLoaderState sa, sr;
        batch_pipeline_data_state(&a->batches, &sa);
        dataloader_get_state(&ref->train_loader, &sr);
        same_position &= sa.epoch == sr.epoch && sa.position == sr.position;
        pending_ahead &= a->batches.pending == (k + 1 < steps);
    }
    TEST_CHECK(same_results, "train_step (%s): %d steps x %d micro-steps give bit-identical loss, norm and lr "
               "to the synchronous eager loop", how, steps, accum);
    if (cuda_graphs) {
        TEST_CHECK(a->graphs.replays == steps * accum - 1 && a->graphs.captured[0] && a->graphs.captured[1],
                   "--cuda-graphs 1: 1 eager warm-up micro-step, then %ld graph replays (expected %d) of the 2 captured "
                   "slot graphs", a->graphs.replays, steps * accum - 1);
    }
    TEST_CHECK(same_position && pending_ahead, "the next step's batch is loaded ahead (not after the last step), and "
               "the checkpoint data position is that of the next batch to train on");
    TEST_CHECK(sessions_equal(a, ref),
               "train_step (%s): weights and AdamW m, v bit-identical to the synchronous loop after %d steps",
               how, steps);
    test_session_close(a);
    test_session_close(ref);
    remove_test_dir(dir);
}

/* the first element of the final LayerNorm's weight, which every logit reads: poison = 1 saves it into *saved and
 * writes NaN (all bits set: NaN in fp32, bf16 and fp16), poison = 0 writes *saved back */
static void poison_lnfw(TrainSession* s, floatX* saved, int poison) {
    floatX* w = s->model.params.t[P_LNFW];
    if (poison) {
        unsigned char nan[sizeof(floatX)]; /* the bytes of a floatX NaN (a byte array: floatX may be a class) */
        memset(nan, 0xff, sizeof(nan));
        dev_memcpy_d2h(saved, w, sizeof(floatX));
        dev_memcpy_h2d(w, nan, sizeof(floatX));
    } else {
        dev_memcpy_h2d(w, saved, sizeof(floatX));
    }
}

/* A skipped step advances neither AdamW's t nor the learning-rate schedule (llmc/README.md, "Skipped steps: the
 * update count"). Run a: step 1 applied; step 2 made non-finite (one weight NaN during it, restored after: the skip
 * leaves the weights and m, v as they were); step 3 applied. Reference: step 1, the skipped step's batch consumed
 * without an update, then its second update (t = 2, lr of schedule step 1). Step 3 of a must report that lr and give
 * bit-identical weights and m, v: with t = 3 (bias correction of the step count) or lr(2) (the cosine schedule moves
 * between steps 1 and 2) they differ. Then a checkpoint after step 3 resumed by a fresh session: the skipped count is
 * restored and step 4 is bit-identical on both (a checkpoint that lost the count would resume with t = 4). */
static void test_skipped_step(const char* model_path, const Fixture* fx) {
    char dir[] = "/tmp/llmc_test_skip_XXXXXX", shard[1100];
    test_dir_with_shard(dir, shard, sizeof(shard), 5 * fx->B * fx->T + 1);
    TrainSession* a = test_session_open(model_path, fx, shard, 1, 10, dir);
    TrainSession* ref = test_session_open(model_path, fx, shard, 1, 10, "");
    train_step(a);
    reference_train_step(ref);
    floatX saved;
    poison_lnfw(a, &saved, 1);
    StepResult skip = train_step(a);
    poison_lnfw(a, &saved, 0);
    dataloader_next_batch(&ref->train_loader); /* the reference skips the batch, not an update */
    StepResult ra = train_step(a), rr = reference_train_step(ref);
    TEST_CHECK(skip.skipped && !ra.skipped && a->step == 3 && a->skipped_steps == 1, "skipped step: step 2 with a NaN "
               "weight is skipped (loss %g), step 3 is applied", (double)skip.loss);
    TEST_CHECK(ra.lr == rr.lr && ra.lr != lr_scheduler_get(&a->scheduler, 2), "skipped step: the next update's lr %.9g "
               "is the schedule's value after 1 update (%.9g), not after 2 steps (%.9g)", (double)ra.lr, (double)rr.lr,
               (double)lr_scheduler_get(&a->scheduler, 2));
    TEST_CHECK(sessions_equal(a, ref), "skipped step: weights and AdamW m, v after it and one more update are "
               "bit-identical to 2 updates without it (t = 2, lr of update 2)");
    write_checkpoint(a);
    TrainSession* b = test_session_open(model_path, fx, shard, 1, 10, dir);
    resume_from_checkpoint(b, 3, 0);
    StepResult r4a = train_step(a), r4b = train_step(b);
    TEST_CHECK(b->skipped_steps == 1 && r4a.lr == r4b.lr && sessions_equal(a, b), "skipped step: a checkpoint keeps "
               "the count (1 skipped of 3); the resumed step 4 is bit-identical (lr, weights, m, v)");
    test_session_close(a);
    test_session_close(ref);
    test_session_close(b);
    remove_test_dir(dir);
}

/* ---------------------------------------------------------------- tensor parallelism (under mpirun) */

/* the fixture's logits over the real vocabulary (N,V) from this tensor-parallel rank's columns (N,Vs) of the last
 * forward: all-gathered over the group into host (rank 0; NULL elsewhere) */
static void gather_tp_logits(GPT2* m, Comm* group, int N, float* host) {
    int p = m->tp.size, V = m->config.vocab_size, Vs = m->config.padded_vocab_size / p;
    size_t block = (size_t)N * Vs;
    floatX* all = (floatX*)dev_malloc((size_t)p * block * sizeof(floatX), "gathered logits");
    dev_memcpy_d2d(all + (size_t)m->tp.rank * block, m->acts.t[A_LOGITS], block * sizeof(floatX));
    comm_all_gather(group, all, floatx_comm_dtype(), block);
    comm_wait(group);
    if (host) {
        float* tmp = (float*)malloc_check((size_t)p * block * sizeof(float), "host gathered logits");
        dev_download_floats(tmp, all, (size_t)p * block);
        for (int n = 0; n < N; n++) {
            for (int v = 0; v < V; v++) { host[(size_t)n * V + v] = tmp[(size_t)(v / Vs) * block + (size_t)n * Vs + v % Vs]; }
        }
        free(tmp);
    }
    dev_free(all);
}

/* the difference of two full-model buffers (gradients or weights) of two models, the tp one gathered, the other
 * downloaded: max|a - b| / max|b|, or with rms RMS(a - b) / RMS(b) (for weights after AdamW steps, where a single
 * element's difference is not bounded: dev/test/dp_lib.sh); rank 0 gets the value, the others 0 */
static double gathered_rel_diff(GPT2* tp_model, const floatX* tp_buf, const floatX* ref_buf, int rank0, int rms) {
    size_t P = tp_model->num_parameters_full;
    float* a = rank0 ? (float*)malloc_check(P * sizeof(float), "gathered") : NULL;
    shard_gather_full_from(tp_model, tp_buf, a);
    double err = 0.0, ref = 0.0;
    if (rank0) {
        float* b = (float*)malloc_check(P * sizeof(float), "reference");
        dev_download_floats(b, ref_buf, P);
        if (rms) {
            double d2 = 0.0, b2 = 0.0;
            for (size_t i = 0; i < P; i++) { d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); b2 += (double)b[i] * b[i]; }
            err = sqrt(d2);
            ref = sqrt(b2);
        } else {
            compare_arrays(a, b, P, &err, &ref);
        }
        free(b);
    }
    free(a);
    return relative_to_max(err, ref);
}

/* The fixture model split over every process of the job as one tensor-parallel group (llmc/tensor_parallel.h;
 * run as `mpirun -np 2|4 build/mpi_test_gpt_tp`, dev/test/cli_tp.sh), with and without sequence parallelism:
 *   - at the fixture's weights: the logits gathered over the vocabulary shards, the loss and every parameter
 *     gradient gathered into the full layout equal the PyTorch fixture within the single-process tolerances
 *     (tensor parallelism changes only how fp32 sums are split: the K dimension of the row-parallel GEMMs over the
 *     ranks, the softmax sums over the vocabulary shards);
 *   - after 3 AdamW steps (clipping off, so no norm enters), which make the biases non-zero (the fixture's are 0,
 *     so a bias added by every rank instead of once would pass the first check): losses, gradients and weights
 *     equal a single-process model trained the same way on each rank, within the same tolerances.
 * Rank 0 prints the checks. */
static void test_tensor_parallel(Comm* world, const char* model_path, const Fixture* fx, const Tolerances* tol) {
    int p = world->world, rank0 = world->rank == 0;
    size_t BT = (size_t)fx->B * fx->T;
    Fixture noclip = *fx;
    noclip.n_steps = 3;
    noclip.grad_clip = 0.0f;
    for (int sp = 0; sp <= 1; sp++) {
        TensorParallelComm binding;
        TensorParallel tp = tensor_parallel_on_comm(&binding, world, floatx_comm_dtype(), sp, 0);
        FixtureModel fm, ref;
        build_fixture_model_tp(&fm, model_path, fx->B, fx->T, &tp);
        build_fixture_model(&ref, model_path, fx->B, fx->T);
        GPT2* m = &fm.m;
        const char* how = sp ? "sequence parallel" : "tensor parallel";
        size_t V = (size_t)m->config.vocab_size;
        float* logits = rank0 ? (float*)malloc_check(BT * V * sizeof(float), "tp logits") : NULL;
        dev_memcpy_h2d(m->inputs, fx->inputs, BT * sizeof(int));
        gpt2_forward(m, m->inputs, NULL, fx->B, fx->T, FIXTURE_GELU_FUSION, 0.0f, 0);
        gather_tp_logits(m, world, (int)BT, logits);
        float loss = run_forward_backward(&fm, fx);
        float* grads = rank0 ? (float*)malloc_check(m->num_parameters_full * sizeof(float), "tp grads") : NULL;
        shard_gather_full_from(m, fm.grads, grads);
        if (rank0) {
            double err, refmax;
            compare_arrays(logits, fx->logits, BT * V, &err, &refmax);
            TEST_CHECK(relative_to_max(err, refmax) <= tol->logits, "%s over %d ranks: logits gathered over the "
                       "vocabulary shards, rel err %.3e (tol %.0e)", how, p, relative_to_max(err, refmax), tol->logits);
            double lerr = fabs((double)loss - fx->loss) / fabs((double)fx->loss);
            TEST_CHECK(lerr <= tol->loss, "%s over %d ranks: loss %.7f vs reference %.7f (rel err %.2e, tol %.0e)", how, p,
                       loss, fx->loss, lerr, tol->loss);
            size_t sizes[NUM_PARAMETER_TENSORS], off = 0;
            gpt2_parameter_sizes(sizes, &m->config);
            double worst = 0.0;
            int worst_i = 0;
            for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
                compare_arrays(grads + off, fx->grads + off, sizes[i], &err, &refmax);
                if (!(relative_to_max(err, refmax) <= worst)) { worst = relative_to_max(err, refmax); worst_i = i; }
                off += sizes[i];
            }
            TEST_CHECK(worst <= tol->grads, "%s over %d ranks: all 16 gradients gathered into the full layout, worst rel "
                       "err %.3e (%s; tol %.0e)", how, p, worst, parameter_name(worst_i), tol->grads);
        }
        float losses_tp[3], losses_ref[3];
        run_adamw_steps(&fm, &noclip, losses_tp);
        run_adamw_steps(&ref, &noclip, losses_ref);
        double gerr = gathered_rel_diff(m, fm.grads, ref.grads, rank0, 0);
        double werr = gathered_rel_diff(m, m->params_memory, ref.m.params_memory, rank0, 1);
        if (rank0) {
            double lerr = 0.0;
            for (int k = 0; k < 3; k++) { lerr = fmax(lerr, fabs((double)losses_tp[k] - losses_ref[k]) / losses_ref[k]); }
            TEST_CHECK(lerr <= tol->step_losses && gerr <= tol->grads && werr <= tol->grads,
                       "%s over %d ranks, 3 AdamW steps (non-zero biases) vs one process: losses rel %.2e, gradients "
                       "%.2e, weights (RMS) %.2e (tol %.0e, %.0e)", how, p, lerr, gerr, werr, tol->step_losses, tol->grads);
        }
        free(logits);
        free(grads);
        free_fixture_model(&fm);
        free_fixture_model(&ref);
    }
}

static void test_weight_decay_groups_d12(void) {
    GPT2 m;
    memset(&m, 0, sizeof(m));
    gpt2_config_from_descriptor(&m.config, "d12");
    gpt2_parameter_sizes(m.param_sizes, &m.config);
    m.stage = gpt2_stage_whole(&m.config);
    m.n_layers = m.config.num_layers;
    int nd, no;
    size_t vd, vo;
    gpt2_weight_decay_groups(&m, &nd, &vd, &no, &vo);
    TEST_CHECK(nd == 50 && vd == 124354560, "d12 decayed group: %d tensors, %zu values (expected 50, 124354560)", nd, vd);
    TEST_CHECK(no == 98 && vo == 121344, "d12 non-decayed group: %d tensors, %zu values (expected 98, 121344)", no, vo);
    TEST_CHECK(vd + vo == 124475904, "d12 parameter count %zu (expected 124475904)", vd + vo);
}

/* the per-token losses (first n) of a forward-only pass over the fixture batch whose last `pad` tokens are padding:
 * not routed (MoEOptions.pad_tokens) unless `routed`, and replaced by other ids when `other` */
static void moe_padded_losses(GPT2* m, const Fixture* fx, int pad, int routed, int other, float* losses, size_t n) {
    size_t N = (size_t)fx->B * fx->T;
    int* in = (int*)malloc_check(N * sizeof(int), "padded inputs");
    for (size_t i = 0; i < N; i++) { in[i] = other && i >= N - (size_t)pad ? (fx->inputs[i] + 7) % m->config.vocab_size : fx->inputs[i]; }
    dev_memcpy_h2d(m->inputs, in, N * sizeof(int));
    dev_memcpy_h2d(m->targets, fx->targets, N * sizeof(int));
    m->moe_opt.pad_tokens = routed ? 0 : pad;
    gpt2_forward(m, m->inputs, m->targets, fx->B, fx->T, FIXTURE_GELU_FUSION, 0.0f, 0);
    m->moe_opt.pad_tokens = 0;
    dev_memcpy_d2h(losses, m->acts.t[A_LOSSES], n * sizeof(float));
    free(in);
}

/* Padding takes no expert capacity (llmc/moe.h, MoEOptions.pad_tokens; a partial validation batch, a sample
 * window's tail): with the last T+5 of the fixture's B*T tokens marked as padding (Nr real tokens; capacity
 * ceil(0.75*2*Nr/3) = 46, not an integer before the ceiling), every MoE block's plan routes exactly Nr*k choices and
 * keeps at most the capacity of Nr (at least one expert full, so the capacity binds), and the real tokens' losses are
 * bit-identical whatever ids the padding holds (same shapes, so the same kernels and orders; attention is causal
 * within a row). Not vacuous: routing the same two paddings gives the real tokens different losses. A forward of
 * padding only leaves the statistics as they were. Bugs caught: padding routed or counted in the capacity (on
 * either backend), the capacity of N instead of Nr, padding rows given expert output, statistics of no tokens. */
static void test_moe_padding(GPT2* m, const Fixture* fx) {
    const MoEConfig* mc = &m->config.moe;
    int N = fx->B * fx->T, pad = fx->T + 5, Nr = N - pad, E = mc->experts, k = mc->top_k;
    int Lm = moe_num_layers(mc, m->config.num_layers), cap = moe_capacity(mc, &m->moe_opt, Nr);
    float* l = (float*)malloc_check(4 * (size_t)Nr * sizeof(float), "padded losses");
    moe_padded_losses(m, fx, pad, 0, 0, l, (size_t)Nr);
    int* plan = (int*)malloc_check((size_t)Lm * 3 * E * sizeof(int), "MoE plans");
    dev_memcpy_d2h(plan, m->acts.t[A_MOE_PLAN], (size_t)Lm * 3 * E * sizeof(int));
    int routed_ok = 1, kept_ok = 1, full = 0;
    for (int j = 0; j < Lm; j++) {
        const int* pj = plan + (size_t)j * 3 * E;
        int routed = 0;
        for (int e = 0; e < E; e++) {
            routed += pj[e];
            kept_ok = kept_ok && pj[E + e] == (pj[e] < cap ? pj[e] : cap);
            full = full || pj[E + e] == cap;
        }
        routed_ok = routed_ok && routed == Nr * k;
    }
    TEST_CHECK(routed_ok && kept_ok && full && cap == 46, "MoE padding: %d of %d tokens padding; every block routes "
               "%d choices and keeps min(routed, %d) per expert (the capacity of the real tokens; one expert full)",
               pad, N, Nr * k, cap);
    moe_padded_losses(m, fx, pad, 0, 1, l + Nr, (size_t)Nr);
    TEST_CHECK(memcmp(l, l + Nr, (size_t)Nr * sizeof(float)) == 0,
               "MoE padding: the %d real tokens' losses are bit-identical for two different paddings", Nr);
    moe_padded_losses(m, fx, pad, 1, 0, l + 2 * (size_t)Nr, (size_t)Nr);
    moe_padded_losses(m, fx, pad, 1, 1, l + 3 * (size_t)Nr, (size_t)Nr);
    TEST_CHECK(memcmp(l + 2 * (size_t)Nr, l + 3 * (size_t)Nr, (size_t)Nr * sizeof(float)) != 0,
               "MoE padding: routed, the same two paddings would change the real tokens' losses (the check above "
               "can fail)");
    size_t S = (size_t)Lm * moe_stats_floats(mc);
    float* stats = (float*)malloc_check(2 * S * sizeof(float), "MoE statistics");
    gpt2_moe_stats(m, stats);
    moe_padded_losses(m, fx, N, 0, 1, l, 1);
    gpt2_moe_stats(m, stats + S);
    TEST_CHECK(memcmp(stats, stats + S, S * sizeof(float)) == 0,
               "MoE padding: a forward of padding only runs and leaves the routing statistics as they were");
    free(stats);
    free(plan);
    free(l);
}

/* The mixture-of-experts fixture (python3 train_gpt.py --write-moe-fixture; llmc/moe.h): L=4 with experts in blocks
 * 1 and 3, E=3 top-2, H=48, capacity factor 0.75 (a quarter of the choices dropped), load-balancing and z-loss on.
 * Checks init from the seed, logits, the language loss, the MoE loss (load-balancing + z) and every gradient (the
 * router's and each expert tensor's, dense blocks' too) against PyTorch, then 3 AdamW steps and their determinism.
 * Tolerances: those of the dense model (see the top of this file). The MoE layer adds, per token, a C-term router
 * dot product (fp32 accumulation in both), a softmax and at most k gate products; the expert MLPs are the dense
 * MLP's matmuls on fewer rows. None of this lengthens the chains of roundings the dense argument counts by more
 * than a few operations, and the top-k choice and the capacity are discrete functions of the probabilities: the
 * test is only meaningful if no token's choice is within rounding of a tie, which a random init makes vanishingly
 * unlikely in fp32 (and the bit-identical init makes the check reproducible). In BF16 a rounded activation can move
 * a logit by ~1e-3 relative, so a near-tie can flip a choice: the fixture records its smallest router gap, and where
 * that gap is within the build's logits rounding the expert gradients are skipped with the reason (both fixtures'
 * gaps, 1.3e-4 and 2.4e-5 at max |logit| 0.3, are checked in FP32 and skipped in BF16; the family's fixture did flip a
 * first and second choice in BF16 on the emulator: expert gradients 12% off, everything else within tolerance). The MoE loss
 * has the loss tolerance. Measured: CPU fp32 logits 1.9e-7, gradients <= 4.3e-7; emulator FP32 gradients
 * <= 1.6e-6; emulator BF16 logits 5.0e-3, loss 2.2e-5, MoE loss 1.3e-5, gradients <= 8.7e-3, step losses <= 3.7e-5. */
static void test_moe_fixture(const char* model_path, const char* state_path, const Tolerances* tol) {
    int h[FILE_HEADER_INTS];
    FILE* f = checkpoint_open_checked(state_path, h, DEBUG_STATE_MAGIC, DEBUG_STATE_VERSION, DEBUG_STATE_VERSION,
                                      "debug state fixture", "regenerate with `make fixture`");
    fclose(f);
    float ref_moe_loss = float_from_bits(h[11]);
    /* A token's expert choices, and their ranks (which order the capacity), are discrete functions of its router
     * logits. If two of its k + 1 largest logits lie within the logits' rounding (each off by at most tol->logits x
     * max |logit|, so a swap needs a gap <= 2 tol->logits max |logit|), the build may route that token otherwise than
     * PyTorch and move whole rows between experts: then the experts' weight gradients are not comparable (the
     * router's, the loss and the logits still are). The fixture records the smallest gap and the largest |logit|. */
    const double gap = float_from_bits(h[15]), scale = float_from_bits(h[16]);
    static char skip[160];
    snprintf(skip, sizeof(skip), "(router near-tie: smallest top-(k+1) logit gap %.2e <= 2 x tol %.0e x max|logit| %.2e)",
             gap, tol->logits, scale);
    fixture_expert_grads_skip = gap <= 2.0 * tol->logits * scale ? skip : NULL;
    fixture_moe_opt.capacity_factor = float_from_bits(h[12]);
    fixture_moe_opt.aux_coef = float_from_bits(h[13]);
    fixture_moe_opt.z_coef = float_from_bits(h[14]);
    GPT2 header_model;
    gpt2_build_from_file(&header_model, model_path, NULL);
    Fixture fx;
    fixture_load(&fx, state_path, &header_model);
    const MoEConfig* mc = &header_model.config.moe;
    printf("# MoE fixture: L=%d E=%d k=%d every=%d H=%d capacity factor %.2f aux %.3f z %.3f\n",
           header_model.config.num_layers, mc->experts, mc->top_k, mc->every, mc->hidden,
           (double)fixture_moe_opt.capacity_factor, (double)fixture_moe_opt.aux_coef, (double)fixture_moe_opt.z_coef);
    gpt2_free(&header_model);
    FixtureModel fm;
    build_fixture_model(&fm, model_path, fx.B, fx.T);
    test_init_matches_reference(&fm.m);
    test_forward_backward(&fm, &fx, tol);
    float moe_loss = gpt2_moe_aux_loss(&fm.m);
    double err = fabs((double)moe_loss - ref_moe_loss) / fabs((double)ref_moe_loss);
    TEST_CHECK(err <= tol->loss, "MoE loss (load-balancing + z, both MoE blocks) %.7f vs reference %.7f (rel err "
               "%.2e, tol %.0e)", moe_loss, ref_moe_loss, err, tol->loss);
    mc = &fm.m.config.moe; /* header_model's is gone */
    float stats[2 * (2 * 3 + 3)];
    int Lm = gpt2_moe_stats(&fm.m, stats), S = moe_stats_floats(mc);
    for (int j = 0; j < Lm && S * Lm <= (int)(sizeof(stats) / sizeof(stats[0])); j++) {
        TEST_CHECK(stats[j * S + 2 * mc->experts + 2] > 0.0f, "MoE block %d drops some choices (%.1f%%), so the "
                   "capacity path is exercised", j, 100.0 * stats[j * S + 2 * mc->experts + 2]);
    }
    test_moe_padding(&fm.m, &fx);
    free_fixture_model(&fm);
    test_split_backward(model_path, &fx, "MoE fixture");
    test_adamw_steps(model_path, &fx, tol);
    fixture_free(&fx);
    memset(&fixture_moe_opt, 0, sizeof(fixture_moe_opt));
    fixture_expert_grads_skip = NULL;
}

/* The decoder family's fixture (python3 train_gpt.py --write-family-fixture; llmc/README.md, "The model's
 * architecture as data"): the dense fixture's sizes, batch and optimizer with the family's knobs built so far
 * (RMSNorm: rstd only; bias=0: no bias in any linear layer or norm; tied=0: the head lmheadw; SwiGLU of the default
 * width; rotary positions with theta 500000: no wpe; grouped-query attention with 2 key/value heads for 4 query heads,
 * PyTorch's repeat_interleave of k and v as the reference; QK-norm), a version-9 model file. Checks, at the dense fixture's tolerances: the file's
 * knobs; init from the seed; logits, loss and every gradient against PyTorch; KV-cache sampling (RMSNorm in the
 * decode path); the AdamW steps; the checkpoint round trip (the family's file written and read back). */
static void test_family_fixture(const char* model_path, const char* state_path, const Tolerances* tol) {
    GPT2 header_model;
    gpt2_build_from_file(&header_model, model_path, NULL);
    const GPT2Arch* a = &header_model.config.arch;
    TEST_CHECK(a->norm == NORM_RMSNORM && a->pos == POS_ROPE && a->rope_theta == 500000.0f && a->mlp == MLP_SWIGLU &&
               a->bias == 0 && a->tied_head == 0 && a->ffn_hidden == 192 && header_model.param_sizes[P_WPE] == 0 &&
               a->n_kv_head == 2 && header_model.param_sizes[P_QKVW] == 2 * 128 * 64 && a->qk_norm == 1 &&
               header_model.param_sizes[P_QNORMW] == 2 * 16 && header_model.param_sizes[P_KNORMW] == 2 * 16,
               "family fixture: the model file (version 9) carries norm=rms, pos=rope with theta 500000 (no wpe), "
               "bias=0, tied=0, mlp=swiglu with F = 192 (8C/3 rounded up to 64), KV 2 (qkvw L (C + 2 KV hs) C = 2 x 128 "
               "x 64), qknorm=1 (qnormw, knormw L hs = 2 x 16) (norm %d pos %d theta %g mlp %d bias %d tied %d F %d wpe %zu KV "
               "%d qkvw %zu qknorm %d qnormw %zu)", (int)a->norm, (int)a->pos, (double)a->rope_theta, (int)a->mlp,
               a->bias, a->tied_head, a->ffn_hidden, header_model.param_sizes[P_WPE], a->n_kv_head,
               header_model.param_sizes[P_QKVW], a->qk_norm, header_model.param_sizes[P_QNORMW]);
    TEST_CHECK(header_model.param_sizes[P_LN1B] == 0 && header_model.param_sizes[P_LNFB] == 0 &&
               header_model.param_sizes[P_QKVB] == 0 && header_model.param_sizes[P_FCPROJB] == 0,
               "family fixture: no bias tensors (ln1b %zu, lnfb %zu, qkvb %zu, fcprojb %zu values)",
               header_model.param_sizes[P_LN1B], header_model.param_sizes[P_LNFB], header_model.param_sizes[P_QKVB],
               header_model.param_sizes[P_FCPROJB]);
    printf("# family fixture: L=%d C=%d NH=%d KV=%d, norm=rms, pos=rope, bias=0, tied=0, mlp=swiglu, qknorm=1, %zu parameters\n",
           header_model.config.num_layers, header_model.config.channels, header_model.config.num_heads, a->n_kv_head,
           header_model.num_parameters);
    Fixture fx;
    fixture_load(&fx, state_path, &header_model);
    gpt2_free(&header_model);
    FixtureModel fm;
    build_fixture_model(&fm, model_path, fx.B, fx.T);
    test_init_matches_reference(&fm.m);
    test_forward_backward(&fm, &fx, tol);
    test_kv_cache_sampling(&fm.m, &fx, tol);
    free_fixture_model(&fm);
    test_split_backward(model_path, &fx, "family fixture");
    test_adamw_steps(model_path, &fx, tol);
    test_checkpoint_round_trip(model_path, &fx);
    fixture_free(&fx);
}

int main(int argc, char** argv) {
    const char* model_path = argc > 1 ? argv[1] : "dev/test/fixtures/gpt2_fixture_model.bin";
    const char* state_path = argc > 2 ? argv[2] : "dev/test/fixtures/gpt2_fixture_state.bin";
    Comm world; /* several processes (an MPI build under mpirun): the tensor-parallel test alone */
    comm_init(&world, &argc, &argv, "auto", 600.0);
    backend_init(world.local_rank, world.rank == 0);
    Tolerances tol = tolerances_for_precision();
    if (world.rank == 0) { printf("# test_gpt: precision %s, device %s%s\n", PRECISION_NAME, backend_device_name(), TEST_GELU_BWD); }
    GPT2 header_model; /* the fixture's sizes come from the model file */
    gpt2_build_from_file(&header_model, model_path, NULL);
    Fixture fx;
    fixture_load(&fx, state_path, &header_model);
    gpt2_free(&header_model);
    if (world.world > 1) {
        test_tensor_parallel(&world, model_path, &fx, &tol);
        fixture_free(&fx);
        comm_finalize(&world);
        backend_shutdown();
        return world.rank == 0 ? testing_finish() : 0;
    }
    FixtureModel fm;
    build_fixture_model(&fm, model_path, fx.B, fx.T);
    test_init_matches_reference(&fm.m);
    test_forward_backward(&fm, &fx, &tol);
    test_loss_accumulator(&fm.m, &fx);
    test_sample_fixed_length(&fm.m, &fx, &tol);
    test_kv_cache_sampling(&fm.m, &fx, &tol);
    free_fixture_model(&fm);
    test_split_backward(model_path, &fx, "dense fixture");
    test_adamw_steps(model_path, &fx, &tol);
    test_checkpoint_round_trip(model_path, &fx);
    test_train_step_pipeline(model_path, &fx, 0);
    if (dev_graphs_supported()) { test_train_step_pipeline(model_path, &fx, 1); }
    test_skipped_step(model_path, &fx);
    test_weight_decay_groups_d12();
    fixture_free(&fx);
    if (argc <= 1) {
        test_moe_fixture("dev/test/fixtures/gpt2_moe_fixture_model.bin", "dev/test/fixtures/gpt2_moe_fixture_state.bin",
                         &tol);
        test_family_fixture("dev/test/fixtures/family_fixture_model.bin", "dev/test/fixtures/family_fixture_state.bin",
                            &tol);
        /* the family's experts: SwiGLU (fc rows [gate | up]), with RMSNorm, rotary positions, GQA, QK-norm */
        test_moe_fixture("dev/test/fixtures/family_moe_fixture_model.bin",
                         "dev/test/fixtures/family_moe_fixture_state.bin", &tol);
    }
    comm_finalize(&world);
    backend_shutdown();
    return testing_finish();
}
