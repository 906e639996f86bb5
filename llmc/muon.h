/*
 * llmc/muon.h -- the Muon optimizer for the 2-D hidden weights of the transformer blocks (llmc/README.md, "The Muon
 * optimizer"). Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks" (momentum, then the
 * update orthogonalised by a quintic Newton-Schulz iteration); the scaled form of Liu et al. 2025, "Muon is Scalable
 * for LLM Training" (Moonlight), whose update RMS matches AdamW's so one learning rate and one weight decay serve both:
 *
 *   buf = beta buf + g;  u = g + beta buf                  (Nesterov momentum; g = gradient x clip / loss scale)
 *   X0 = u / (||u||_F + 1e-7);  X_{k+1} = a X_k + (b A + c A A) X_k,  A = X_k X_k^T    (rows <= cols; else on X^T)
 *   p -= lr (0.2 sqrt(max(rows, cols)) X_steps + wd p)       (AdamW's decoupled weight decay)
 *
 * with the reference's quintic coefficients (a, b, c) = (3.4445, -4.7750, 2.0315), which push every singular value
 * of X0 (in (0, 1]) into about [0.7, 1.2] in five steps rather than to exactly 1 (dev/test/test_muon.c measures it).
 * Which tensors: those of the parameter table (GPT2_PARAMS) that are decayed 2-D weights stacked per block
 * (qkvw, attprojw, fcw, fcprojw), one matrix (rows = out, cols = in) per layer slice; embeddings, the untied head,
 * norms, biases and (refused for now) expert tensors stay on AdamW.
 *
 * State: the momentum buffer lives in AdamWState.m of the same flat elements (v of those elements stays 0, unused),
 * so checkpoints, their re-sharding and the state files keep one format and a resume is bit-identical.
 * Arithmetic: the backend's muon_* ops (llmc/cpu/muon.h, llmc/cuda/muon.cuh): the iteration in floatX (fp32 on the
 * CPU, BF16 on the GPU as the reference) with fp32 GEMM accumulation; deterministic.
 * Units: element counts and flat indices of the model's parameter buffer (size_t); rows/cols (int).
 * Errors: muon_init exits with one line when the model has a Muon tensor whose slices are not whole matrices (a
 * tensor-parallel slice: the caller refuses tp first).
 */
#ifndef LLMC_MUON_H
#define LLMC_MUON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"

#define MUON_NS_A 3.4445f  /* the reference implementation's quintic coefficients (Jordan et al. 2024) */
#define MUON_NS_B -4.7750f
#define MUON_NS_C 2.0315f
#define MUON_RMS_SCALE 0.2f /* Liu et al. 2025: 0.2 sqrt(max(rows, cols)) matches AdamW's update RMS */

typedef struct {
    float beta;                 /* momentum (--muon-momentum) */
    int ns_steps;               /* Newton-Schulz iterations (--muon-ns-steps) */
    uint32_t tensors;           /* bit i: parameter tensor i is Muon's (muon_is_matrix) */
    size_t span_lo, span_hi;    /* the flat range holding every Muon matrix (ZeRO-1's all-gather of the updates) */
    int matrices;               /* Muon matrices of the model (tensors x layer slices) */
    size_t muon_params;         /* their elements */
    size_t work_elems;          /* floatX workspace: X, Y (rows x cols), A, AA (s x s, s = min(rows, cols)) */
    floatX* work;
    float* normsq;              /* one fp32 on the device: ||u||_F^2 */
} Muon;

/* 1 when tensor i of model c is optimised by Muon: a decayed 2-D weight of every block (the parameter table's
 * SLICES_LAYERS / SLICES_DENSE rows with a 2-D slice), present in c */
static inline int muon_is_matrix(const GPT2Config* c, int i) {
    const GPT2ParamSpec* p = &GPT2_PARAMS[i];
    return p->decay && (p->slices == SLICES_LAYERS || p->slices == SLICES_DENSE) && p->dims[2] == DIM_1 &&
           p->dims[1] != DIM_1 && gpt2_tensor_present(c, i);
}

/* the matrix shape of one slice of Muon tensor i: rows (out) x cols (in) */
static inline void muon_matrix_shape(const GPT2Config* c, int i, int* rows, int* cols) {
    *rows = (int)gpt2_dim(c, GPT2_PARAMS[i].dims[0]);
    *cols = (int)gpt2_dim(c, GPT2_PARAMS[i].dims[1]);
}

/* the flat offset of tensor i in model m's parameter buffer */
static inline size_t muon_tensor_offset(const GPT2* m, int i) {
    size_t off = 0;
    for (int k = 0; k < i; k++) { off += m->param_sizes[k]; }
    return off;
}

/* Sets up Muon for model m (the whole model: no tensor or pipeline split) with momentum beta and ns_steps iterations:
 * selects the tensors, sizes and allocates the workspace (device), finds the span. Exits with one line when a Muon
 * tensor's size is not a whole number of its matrices. */
static inline void muon_init(Muon* mu, const GPT2* m, float beta, int ns_steps) {
    memset(mu, 0, sizeof(*mu));
    mu->beta = beta;
    mu->ns_steps = ns_steps;
    mu->span_lo = (size_t)-1;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!muon_is_matrix(&m->config, i) || m->param_sizes[i] == 0) { continue; }
        int r, c;
        muon_matrix_shape(&m->config, i, &r, &c);
        size_t rc = (size_t)r * c, s = (size_t)(r < c ? r : c);
        if (m->param_sizes[i] % rc != 0) {
            FATAL("--optimizer muon: tensor %s holds %zu values, not whole %dx%d matrices (a split model: Muon needs "
                  "--tp 1 --pp 1)", parameter_name(i), m->param_sizes[i], r, c);
        }
        mu->tensors |= 1u << i;
        mu->matrices += (int)(m->param_sizes[i] / rc);
        mu->muon_params += m->param_sizes[i];
        size_t need = 2 * rc + 2 * s * s;
        if (need > mu->work_elems) { mu->work_elems = need; }
        size_t off = muon_tensor_offset(m, i);
        if (off < mu->span_lo) { mu->span_lo = off; }
        if (off + m->param_sizes[i] > mu->span_hi) { mu->span_hi = off + m->param_sizes[i]; }
    }
    if (mu->tensors == 0) { mu->span_lo = 0; return; }
    mu->work = (floatX*)dev_malloc(mu->work_elems * sizeof(floatX), "Muon Newton-Schulz workspace");
    mu->normsq = (float*)dev_malloc(sizeof(float), "Muon norm");
}

static inline void muon_free(Muon* mu) {
    if (mu->work) { dev_free(mu->work); }
    if (mu->normsq) { dev_free(mu->normsq); }
    memset(mu, 0, sizeof(*mu));
}

/* The quintic Newton-Schulz iteration (the reference's zeropower_via_newtonschulz5) of G (rows x cols, floatX,
 * device, row-major) for `steps` iterations into mu's workspace; returns the result X (rows x cols, inside the
 * workspace: valid until the next call). rows > cols runs on the transpose without forming it: A = X^T X and
 * X <- a X + X B^T, which is the reference's (X^T)'s iteration transposed back. */
static inline const floatX* muon_newton_schulz(Muon* mu, const floatX* G, int rows, int cols, int steps) {
    size_t n = (size_t)rows * cols;
    int s = rows <= cols ? rows : cols;
    floatX* X = mu->work;
    floatX* Y = X + n;
    floatX* A = Y + n;
    floatX* AA = A + (size_t)s * s;
    global_norm_squared(mu->normsq, G, n, 0);
    muon_normalize(X, G, mu->normsq, n);
    for (int k = 0; k < steps; k++) {
        if (rows <= cols) {
            muon_gemm(A, X, X, rows, rows, cols, 0, 1);    /* A = X X^T (rows, rows) */
            muon_gemm(AA, A, A, rows, rows, rows, 0, 0);   /* A A */
            muon_axpby(AA, A, AA, MUON_NS_B, MUON_NS_C, (size_t)s * s); /* B = b A + c A A */
            muon_gemm(Y, AA, X, rows, cols, rows, 0, 0);   /* B X */
        } else {
            muon_gemm(A, X, X, cols, cols, rows, 1, 0);    /* A = X^T X (cols, cols) */
            muon_gemm(AA, A, A, cols, cols, cols, 0, 0);
            muon_axpby(AA, A, AA, MUON_NS_B, MUON_NS_C, (size_t)s * s);
            muon_gemm(Y, X, AA, rows, cols, cols, 0, 1);   /* X B^T */
        }
        muon_axpby(X, X, Y, MUON_NS_A, 1.0f, n);          /* X = a X + B X */
    }
    return X;
}

/* Calls visit(ctx, tensor, rows, cols, s0, a, b) for every Muon matrix [s0, s0 + rows cols) of model m that meets the
 * flat range [lo, hi), with [a, b) the part inside it. */
typedef void (*MuonVisit)(void* ctx, int tensor, int rows, int cols, size_t s0, size_t a, size_t b);
static inline void muon_for_each(const Muon* mu, const GPT2* m, size_t lo, size_t hi, MuonVisit visit, void* ctx) {
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = m->param_sizes[i];
        if (mu->tensors & (1u << i)) {
            int r, c;
            muon_matrix_shape(&m->config, i, &r, &c);
            size_t rc = (size_t)r * c;
            for (size_t s0 = off; s0 < off + size; s0 += rc) {
                size_t a = s0 > lo ? s0 : lo, b = s0 + rc < hi ? s0 + rc : hi;
                if (a < b) { visit(ctx, i, r, c, s0, a, b); }
            }
        }
        off += size;
    }
}

typedef struct {
    Muon* mu;
    GPT2* m;
    floatX* grads;              /* the flat gradient buffer (index 0 = flat parameter 0) */
    const AdamWState* opt;
    const AdamWStep* s;
} MuonPass;

static inline void muon_visit_momentum(void* ctx, int tensor, int rows, int cols, size_t s0, size_t a, size_t b) {
    (void)tensor; (void)rows; (void)cols; (void)s0;
    MuonPass* p = (MuonPass*)ctx;
    muon_momentum(p->grads + a, p->opt->m + (a - p->opt->first), p->grads + a, b - a, p->mu->beta, p->s->grad_scale);
}

static inline void muon_visit_apply(void* ctx, int tensor, int rows, int cols, size_t s0, size_t a, size_t b) {
    MuonPass* p = (MuonPass*)ctx;
    const floatX* X = muon_newton_schulz(p->mu, p->grads + s0, rows, cols, p->mu->ns_steps);
    float scale = MUON_RMS_SCALE * sqrtf((float)(rows > cols ? rows : cols));
    float wd = parameter_is_decayed(tensor) ? p->s->weight_decay : 0.0f;
    size_t k = a - p->opt->first;
    muon_apply(p->m->params_memory + a, p->opt->master ? p->opt->master + k : NULL, X + (a - s0), b - a, a,
               p->s->learning_rate, scale, wd, p->s->t, p->s->seed);
}

/* Phase 1 of a Muon step on the owned flat range [lo, hi): the momentum of every Muon element in it (opt->m), and the
 * Nesterov update u written over its gradient in grads (the flat buffer, reduced values in [lo, hi)). */
static inline void muon_momentum_range(Muon* mu, GPT2* m, size_t lo, size_t hi, floatX* grads, const AdamWState* opt,
                                       const AdamWStep* s) {
    MuonPass p = {mu, m, grads, opt, s};
    muon_for_each(mu, m, lo, hi, muon_visit_momentum, &p);
}

/* Phase 2, once grads holds u for the whole of every Muon matrix that meets [lo, hi): Newton-Schulz of each such
 * matrix and the update of its part inside [lo, hi) (parameters, and master weights where opt has them). */
static inline void muon_apply_range(Muon* mu, GPT2* m, size_t lo, size_t hi, floatX* grads, const AdamWState* opt,
                                    const AdamWStep* s) {
    MuonPass p = {mu, m, grads, opt, s};
    muon_for_each(mu, m, lo, hi, muon_visit_apply, &p);
}

#endif /* LLMC_MUON_H */
