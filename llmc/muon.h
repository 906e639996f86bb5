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
 * (qkvw, attprojw, fcw, fcprojw), one matrix (rows = out, cols = in) per layer slice, and a mixture-of-experts model's
 * router (per MoE block) and experts' fc and fcproj weights (one matrix per expert, each expert orthogonalised on its
 * own, as its own linear map; --ep's second ZeRO group is not covered and refused); embeddings, the untied head,
 * norms and biases stay on AdamW.
 *
 * State: the momentum buffer lives in AdamWState.m of the same flat elements (v of those elements stays 0, unused),
 * so checkpoints, their re-sharding and the state files keep one format and a resume is bit-identical.
 * Arithmetic: the backend's muon_* ops (llmc/cpu/muon.h, llmc/cuda/muon.cuh): the iteration in floatX (fp32 on the
 * CPU, BF16 on the GPU as the reference) with fp32 GEMM accumulation; deterministic.
 * Units: element counts and flat indices of the model's parameter buffer (size_t); rows/cols (int).
 * Layouts (llmc/README.md, "The Muon optimizer"): data parallelism gathers the matrices a shard boundary cuts
 * (llmc/zero.h, zero_muon_update); tensor parallelism runs the iteration on each rank's slice with the Gram matrix
 * summed over tp (muon_orthogonalize); a pipeline stage does its own layers.
 * Errors: muon_init exits with one line when a Muon tensor's slices are not whole matrices of its tp shape.
 */
#ifndef LLMC_MUON_H
#define LLMC_MUON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"
#include "llmc/sharding.h"

#define MUON_NS_A 3.4445f  /* the reference implementation's quintic coefficients (Jordan et al. 2024) */
#define MUON_NS_B -4.7750f
#define MUON_NS_C 2.0315f
#define MUON_RMS_SCALE 0.2f /* Liu et al. 2025: 0.2 sqrt(max(rows, cols)) matches AdamW's update RMS */

typedef struct {
    float beta;                 /* momentum (--muon-momentum) */
    int ns_steps;               /* Newton-Schulz iterations (--muon-ns-steps) */
    uint32_t tensors;           /* bit i: parameter tensor i is Muon's (muon_is_matrix) */
    int rows[NUM_PARAMETER_TENSORS], cols[NUM_PARAMETER_TENSORS]; /* this rank's matrix of tensor i (a tp slice) */
    int gram_rows[NUM_PARAMETER_TENSORS]; /* 1: the iteration's Gram matrix is A = X X^T (rows x rows), 0: X^T X */
    int tp_split[NUM_PARAMETER_TENSORS];  /* 1: the matrix is cut over tp (its Gram matrix and norm are tp sums) */
    float scale[NUM_PARAMETER_TENSORS];   /* 0.2 sqrt(max(rows, cols)) of the whole (unsplit) matrix */
    int matrices;               /* Muon matrices this rank holds (tensors x layer slices) */
    size_t muon_params;         /* their elements on this rank */
    size_t work_elems;          /* floatX workspace: X, Y (rows x cols), A, AA (s x s), then G (rows x cols) */
    size_t gather_at;           /* offset of G in the workspace: a matrix gathered over dp (muon_gather_buffer) */
    floatX* work;
    float* normsq;              /* one fp32 on the device: ||u||_F^2 */
} Muon;

/* 1 when tensor i of model c is optimised by Muon: a decayed 2-D weight of every block (the parameter table's
 * SLICES_LAYERS / SLICES_DENSE rows with a 2-D slice), and in a mixture-of-experts model the router (one E x C
 * matrix per MoE block) and the experts' fc and fcproj weights (one matrix per expert: a slice (E, rows, cols)),
 * present in c */
static inline int muon_is_matrix(const GPT2Config* c, int i) {
    const GPT2ParamSpec* p = &GPT2_PARAMS[i];
    if (!p->decay || !gpt2_tensor_present(c, i)) { return 0; }
    if (p->slices == SLICES_MOE) { return c->moe.experts > 0; } /* routerw (E, C); efcw, efcprojw (E, rows, cols) */
    return (p->slices == SLICES_LAYERS || p->slices == SLICES_DENSE) && p->dims[2] == DIM_1 && p->dims[1] != DIM_1;
}

/* the matrix shape of one Muon matrix of tensor i of the whole model: rows (out) x cols (in); an expert tensor's
 * slice (E, rows, cols) holds E of them */
static inline void muon_matrix_shape(const GPT2Config* c, int i, int* rows, int* cols) {
    const GPT2Dim* d = GPT2_PARAMS[i].dims;
    int per_expert = d[2] != DIM_1;
    *rows = (int)gpt2_dim(c, per_expert ? d[1] : d[0]);
    *cols = (int)gpt2_dim(c, per_expert ? d[2] : d[1]);
}

/* the Muon matrices of tensor i in the whole model: one per layer (or dense block, or MoE block for the router),
 * E per MoE block for an expert tensor */
static inline double muon_matrix_count(const GPT2Config* c, int i) {
    const GPT2ParamSpec* p = &GPT2_PARAMS[i];
    double n = (double)gpt2_tensor_slices(c, i);
    return p->slices == SLICES_MOE && p->dims[2] != DIM_1 ? n * c->moe.experts : n;
}

/* Tensor i's matrix on tp rank of p (llmc/sharding.h's row): column-parallel tensors keep rows/p rows, row-parallel
 * ones cols/p columns. The Gram matrix of the iteration is formed on the side tp does not cut, so that it is the sum
 * over the tp ranks of their slices' Gram matrices (X = [X_0; X_1]: X^T X = sum X_r^T X_r; X = [X_0 X_1]:
 * X X^T = sum X_r X_r^T); without a cut, on the smaller side as the reference. */
static inline void muon_tensor_setup(Muon* mu, const GPT2Config* c, int i, int p) {
    int r, k;
    muon_matrix_shape(c, i, &r, &k);
    ShardTP how = p > 1 ? GPT2_SHARDING[i].tp : TP_REPLICATED;
    mu->scale[i] = MUON_RMS_SCALE * sqrtf((float)(r > k ? r : k));
    mu->tp_split[i] = how == TP_COLUMN || how == TP_ROW;
    mu->rows[i] = how == TP_COLUMN ? r / p : r;
    mu->cols[i] = how == TP_ROW ? k / p : k;
    mu->gram_rows[i] = how == TP_COLUMN ? 0 : how == TP_ROW ? 1 : r <= k;
}

/* Sets up Muon for model m (this rank's part: its tp slices, its pipeline stage's layers) with momentum beta and
 * ns_steps iterations: selects the tensors, sizes and allocates the workspace (device). Exits with one line when a
 * Muon tensor's size is not a whole number of its matrices, or a Muon tensor is cut by tp other than by rows or
 * columns (vocabulary-parallel). */
static inline void muon_init(Muon* mu, const GPT2* m, float beta, int ns_steps) {
    memset(mu, 0, sizeof(*mu));
    mu->beta = beta;
    mu->ns_steps = ns_steps;
    size_t G = 0, XYA = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!muon_is_matrix(&m->config, i) || m->param_sizes[i] == 0) { continue; }
        if (m->tp.size > 1 && GPT2_SHARDING[i].tp == TP_VOCAB) {
            FATAL("--optimizer muon: tensor %s is vocabulary-parallel under --tp %d", parameter_name(i), m->tp.size);
        }
        muon_tensor_setup(mu, &m->config, i, m->tp.size);
        size_t rc = (size_t)mu->rows[i] * mu->cols[i], s = (size_t)(mu->gram_rows[i] ? mu->rows[i] : mu->cols[i]);
        if (m->param_sizes[i] % rc != 0) {
            FATAL("--optimizer muon: tensor %s holds %zu values, not whole %dx%d matrices", parameter_name(i),
                  m->param_sizes[i], mu->rows[i], mu->cols[i]);
        }
        mu->tensors |= 1u << i;
        mu->matrices += (int)(m->param_sizes[i] / rc);
        mu->muon_params += m->param_sizes[i];
        if (2 * rc + 2 * s * s > XYA) { XYA = 2 * rc + 2 * s * s; }
        if (rc > G) { G = rc; }
    }
    if (mu->tensors == 0) { return; }
    mu->gather_at = XYA;
    mu->work_elems = XYA + G;
    mu->work = (floatX*)dev_malloc(mu->work_elems * sizeof(floatX), "Muon Newton-Schulz workspace");
    mu->normsq = (float*)dev_malloc(sizeof(float), "Muon norm");
}

static inline void muon_free(Muon* mu) {
    if (mu->work) { dev_free(mu->work); }
    if (mu->normsq) { dev_free(mu->normsq); }
    memset(mu, 0, sizeof(*mu));
}

/* where a matrix cut by a data-parallel shard boundary is gathered (rows x cols of the largest Muon matrix) */
static inline floatX* muon_gather_buffer(Muon* mu) { return mu->work + mu->gather_at; }

/* The quintic Newton-Schulz iteration (the reference's zeropower_via_newtonschulz5) of G (rows x cols, floatX,
 * device, row-major) for `steps` iterations into mu's workspace; returns the result X (rows x cols, inside the
 * workspace: valid until the next call). gram_rows = 1: A = X X^T (rows x rows), X <- a X + B X; 0: the iteration on
 * the transpose without forming it, A = X^T X (cols x cols), X <- a X + X B^T; the two are the same function of G
 * (X f(X^T X) = f(X X^T) X), so the side is a cost choice (the reference: the smaller one). tp != NULL: G is this
 * rank's slice of a matrix cut over tp's ranks along the side that gram_rows does not pick, and ||G||_F^2 and A are
 * summed over the ranks (tp->all_reduce_f32, tp->all_reduce), the rest is per slice: every rank calls it, in the same
 * order (llmc/README.md, "The Muon optimizer"). */
static inline const floatX* muon_orthogonalize(Muon* mu, const floatX* G, int rows, int cols, int gram_rows,
                                               const TensorParallel* tp, int steps) {
    size_t n = (size_t)rows * cols;
    int s = gram_rows ? rows : cols;
    floatX* X = mu->work;
    floatX* Y = X + n;
    floatX* A = Y + n;
    floatX* AA = A + (size_t)s * s;
    global_norm_squared(mu->normsq, G, n, 0);
    if (tp) { tp->all_reduce_f32(tp->ctx, mu->normsq, 1); }
    muon_normalize(X, G, mu->normsq, n);
    for (int k = 0; k < steps; k++) {
        if (gram_rows) { muon_gemm(A, X, X, rows, rows, cols, 0, 1); }   /* A = X X^T (rows, rows) */
        else { muon_gemm(A, X, X, cols, cols, rows, 1, 0); }             /* A = X^T X (cols, cols) */
        if (tp) { tp->all_reduce(tp->ctx, A, (size_t)s * s); }
        muon_gemm(AA, A, A, s, s, s, 0, 0);                              /* A A */
        muon_axpby(AA, A, AA, MUON_NS_B, MUON_NS_C, (size_t)s * s);      /* B = b A + c A A */
        if (gram_rows) { muon_gemm(Y, AA, X, rows, cols, rows, 0, 0); }  /* B X */
        else { muon_gemm(Y, X, AA, rows, cols, cols, 0, 1); }            /* X B^T */
        muon_axpby(X, X, Y, MUON_NS_A, 1.0f, n);                         /* X = a X + B X */
    }
    return X;
}

/* muon_orthogonalize of a whole matrix on the reference's side (the smaller one) */
static inline const floatX* muon_newton_schulz(Muon* mu, const floatX* G, int rows, int cols, int steps) {
    return muon_orthogonalize(mu, G, rows, cols, rows <= cols, NULL, steps);
}

/* Calls visit(ctx, tensor, s0, a, b) for every Muon matrix [s0, s0 + rows cols) of model m (this rank's matrices)
 * that meets the flat range [lo, hi), with [a, b) the part inside it, in flat order. */
typedef void (*MuonVisit)(void* ctx, int tensor, size_t s0, size_t a, size_t b);
static inline void muon_for_each(const Muon* mu, const GPT2* m, size_t lo, size_t hi, MuonVisit visit, void* ctx) {
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = m->param_sizes[i];
        if (mu->tensors & (1u << i)) {
            size_t rc = (size_t)mu->rows[i] * mu->cols[i];
            for (size_t s0 = off; s0 < off + size; s0 += rc) {
                size_t a = s0 > lo ? s0 : lo, b = s0 + rc < hi ? s0 + rc : hi;
                if (a < b) { visit(ctx, i, s0, a, b); }
            }
        }
        off += size;
    }
}

/* Phase 1 of a Muon step on [a, b) (within the owned range of opt): the momentum of those Muon elements (opt->m) and
 * the Nesterov update u written over their gradients: u[k] is flat element a + k (floatX, device). */
static inline void muon_momentum_part(const Muon* mu, floatX* u, size_t a, size_t b, const AdamWState* opt,
                                      const AdamWStep* s) {
    muon_momentum(u, opt->m + (a - opt->first), u, b - a, mu->beta, s->grad_scale);
}

/* Phase 2 for Muon matrix [s0, s0 + rows cols) of tensor i, once G holds u of the whole matrix (this rank's tp
 * slice): Newton-Schulz (tp-collective when the tensor is cut over tp) and the update of its part [a, b) of the
 * owned range: the parameters (opt->params where the optimizer keeps them, ZeRO-3's shard, else m's buffer) and
 * master weights where opt has them. */
static inline void muon_update_matrix(Muon* mu, GPT2* m, const floatX* G, int i, size_t s0, size_t a, size_t b,
                                      const AdamWState* opt, const AdamWStep* s) {
    const TensorParallel* tp = mu->tp_split[i] ? &m->tp : NULL;
    const floatX* X = muon_orthogonalize(mu, G, mu->rows[i], mu->cols[i], mu->gram_rows[i], tp, mu->ns_steps);
    float wd = parameter_is_decayed(i) ? s->weight_decay : 0.0f;
    size_t k = a - opt->first;
    floatX* dst = opt->params ? opt->params + k : m->params_memory + a;
    muon_apply(dst, opt->master ? opt->master + k : NULL, X + (a - s0), b - a, a, s->learning_rate, mu->scale[i], wd,
               s->t, s->seed);
}

#endif /* LLMC_MUON_H */
