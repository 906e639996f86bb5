/*
 * llmc/cuda/matmul.cuh -- fully connected layers (nn.Linear layout) on cuBLASLt, with bias / GELU
 * epilogues and a deterministic bias-gradient reduction.
 *
 *   matmul_forward(out(N,OC), inp(N,C), weight(OC,C), bias(OC) or NULL, N, C, OC, pre_gelu(N,OC) or NULL)
 *       out = inp @ weight^T + bias; with pre_gelu: pre_gelu = inp @ weight^T + bias, out = gelu(pre_gelu)
 *       (cuBLASLt CUBLASLT_EPILOGUE_GELU_AUX_BIAS / CUBLASLT_EPILOGUE_BIAS, NVIDIA cuBLAS docs
 *       "cublasLtEpilogue_t"; if no algorithm supports the epilogue for a shape, a plain GEMM plus our
 *       bias / gelu kernels produce the same thing).
 *   matmul_backward(dinp(N,C) overwritten, dweight(OC,C) +=, dbias(OC) += or NULL, dout(N,OC),
 *                   inp(N,C), weight(OC,C), scratch fp32, N, C, OC, pre_gelu(N,OC) or NULL)
 *       with pre_gelu: dout *= gelu'(pre_gelu) in place first (fused into the dbias pass when dbias != NULL);
 *       dbias += column sums of dout (fixed-order two-pass reduction through scratch, no atomics);
 *       dinp = dout @ weight; dweight += dout^T @ inp (cuBLASLt beta = 1; dweight NULL: skipped, for W later).
 *       scratch: matmul_scratch_floats(N, C, OC) floats.
 *   matmul_backward_weight(dweight(OC,C) +=, dout(N,OC), inp(N,C), N, C, OC)
 *       the weight GEMM alone: W of the split backward (Qi et al. 2023, "Zero Bubble Pipeline Parallelism").
 *   matmul_backward_dgelu(dinp, dweight, dbias, dout, inp, weight, scratch, N, C, OC, inp_pre_gelu(N,C))
 *       matmul_backward without pre_gelu, except dinp = (dout @ weight) * gelu'(inp_pre_gelu): the MLP's fcproj
 *       backward handing the fc layer d(pre-GELU) (cuBLASLt CUBLASLT_EPILOGUE_DGELU).
 *
 * Numerics: inputs/outputs floatX, FP32 accumulation (CUBLAS_COMPUTE_32F; in the fp32 build this also
 * means no TF32), alpha/beta fp32. Row-major (N,OC) = (N,C) @ (OC,C)^T is computed as the
 * column-major GEMM out^T(OC,N) = W^T(OC,C) @ inp^T(C,N) (transa = T).
 * Plans (matmul descriptor, matrix layouts, heuristic algorithm) are cached per (shape, transposes,
 * epilogue, beta, pointer-alignment class) in a small static table, so steady-state calls only set the
 * bias/aux pointers and call cublasLtMatmul. Workspace: 32 MiB (backend_init).
 * Error behaviour: cuBLASLt / CUDA errors exit with file:line. Queued on main_stream(); no host sync.
 */
#ifndef LLMC_CUDA_MATMUL_CUH
#define LLMC_CUDA_MATMUL_CUH

#include "common.cuh"
#include "gelu.cuh"

#define MATMUL_WORKSPACE_BYTES ((size_t)32 << 20)
#define DBIAS_MAX_CHUNKS 128
#define DBIAS_MIN_ROWS 64
#define DBIAS_ROW_LANES 8

/* row chunks of the dbias reduction: depends on N only (determinism across devices) */
static inline int matmul_dbias_chunks(int N) {
    int ch = CEIL_DIV(N, DBIAS_MIN_ROWS);
    if (ch > DBIAS_MAX_CHUNKS) { ch = DBIAS_MAX_CHUNKS; }
    return ch < 1 ? 1 : ch;
}
/* fp32 scratch needed by matmul_backward */
static inline size_t matmul_scratch_floats(int N, int C, int OC) {
    (void)C;
    return (size_t)matmul_dbias_chunks(N) * (size_t)OC;
}

/* ---------------------------------------------------------------- bias / gelu / dbias kernels */

/* out[r, c] += bias[c] (fallback when no cuBLASLt algorithm takes the bias epilogue) */
static __global__ void add_bias_kernel(floatX* out, const floatX* bias, size_t n, int OC) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        out[i] = from_float<floatX>(to_float(out[i]) + to_float(bias[i % OC]));
    }
}

/* block (32, DBIAS_ROW_LANES); grid (column tiles of 32*W, chunks). Optionally applies dout *= gelu'(pre)
 * in place first. partials[chunk][c] = sum over the chunk's rows (fixed order: row lanes, then lanes in order). */
template <int W, bool GELU>
static __global__ void dbias_partial_kernel(float* partials, floatX* dout, const floatX* pre_gelu, int N, int OC,
                                            int rows_per_chunk) {
    __shared__ float tile[DBIAS_ROW_LANES][32 * W];
    const int c = (blockIdx.x * 32 + threadIdx.x) * W;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = min(N, r0 + rows_per_chunk);
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; k++) { acc[k] = 0.0f; }
    if (c < OC) {
        for (int r = r0 + threadIdx.y; r < r1; r += DBIAS_ROW_LANES) {
            floatX* p = dout + (size_t)r * OC + c;
            PackedN<floatX, W> g = load_packed<floatX, W>(p);
            if constexpr (GELU) {
                PackedN<floatX, W> x = load_packed_cs<floatX, W>(pre_gelu + (size_t)r * OC + c);
#pragma unroll
                for (int k = 0; k < W; k++) { g[k] = from_float<floatX>(to_float(g[k]) * gelu_derivative(to_float(x[k]))); }
                store_packed<floatX, W>(p, g);
            }
#pragma unroll
            for (int k = 0; k < W; k++) { acc[k] += to_float(g[k]); }
        }
    }
#pragma unroll
    for (int k = 0; k < W; k++) { tile[threadIdx.y][threadIdx.x * W + k] = acc[k]; }
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
#pragma unroll
        for (int k = 0; k < W; k++) {
            float s = 0.0f;
            for (int q = 0; q < DBIAS_ROW_LANES; q++) { s += tile[q][threadIdx.x * W + k]; }
            partials[(size_t)blockIdx.y * OC + c + k] = s;
        }
    }
}

/* block (32, 32): dst[col] += sum over chunks of partials[chunk][col], fixed order */
static __global__ void column_partials_reduce_add_kernel(floatX* dst, const float* partials, int nchunks, int ncols) {
    __shared__ float tile[32][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    float t = 0.0f;
    if (col < ncols) {
        for (int ch = threadIdx.y; ch < nchunks; ch += 32) { t += partials[(size_t)ch * ncols + col]; }
    }
    tile[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && col < ncols) {
        float s = 0.0f;
        for (int q = 0; q < 32; q++) { s += tile[q][threadIdx.x]; }
        dst[col] = from_float<floatX>(to_float(dst[col]) + s);
    }
}

/* dbias += column sums of dout(N,OC); if pre_gelu, dout *= gelu'(pre_gelu) in the same pass */
static inline void matmul_dbias(floatX* dbias, floatX* dout, const floatX* pre_gelu, float* scratch, int N, int OC) {
    const int nchunks = matmul_dbias_chunks(N);
    const int rows_per_chunk = CEIL_DIV(N, nchunks);
    const int vec = OC % X128_SIZE == 0 && ptr_aligned(dout, 16) && (pre_gelu == NULL || ptr_aligned(pre_gelu, 16));
    const int W = vec ? X128_SIZE : 1;
    dim3 block(32, DBIAS_ROW_LANES);
    dim3 grid((unsigned int)CEIL_DIV(OC, 32 * W), (unsigned int)nchunks);
    if (vec && pre_gelu) {
        LAUNCH(grid, block, 0, main_stream(), dbias_partial_kernel<X128_SIZE, true>)(scratch, dout, pre_gelu, N, OC, rows_per_chunk);
    } else if (vec) {
        LAUNCH(grid, block, 0, main_stream(), dbias_partial_kernel<X128_SIZE, false>)(scratch, dout, pre_gelu, N, OC, rows_per_chunk);
    } else if (pre_gelu) {
        LAUNCH(grid, block, 0, main_stream(), dbias_partial_kernel<1, true>)(scratch, dout, pre_gelu, N, OC, rows_per_chunk);
    } else {
        LAUNCH(grid, block, 0, main_stream(), dbias_partial_kernel<1, false>)(scratch, dout, pre_gelu, N, OC, rows_per_chunk);
    }
    CUDA_CHECK_LAUNCH();
    LAUNCH((unsigned int)CEIL_DIV(OC, 32), dim3(32, 32), 0, main_stream(), column_partials_reduce_add_kernel)(dbias, scratch, nchunks, OC);
    CUDA_CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- cuBLASLt plans */

#if defined(ENABLE_FP32)
#define MATMUL_CUDA_TYPE CUDA_R_32F
#elif defined(ENABLE_FP16)
#define MATMUL_CUDA_TYPE CUDA_R_16F
#else
#define MATMUL_CUDA_TYPE CUDA_R_16BF
#endif

#define MATMUL_PLAN_CACHE_SIZE 64

typedef struct {
    int m, n, k, lda, ldb, ldd;
    int transa, transb, epilogue, accumulate;
    int align_a, align_b, align_d, align_bias, align_aux;
} MatmulPlanKey;

typedef struct {
    int used;
    int has_algo; /* 0: no algorithm for this key (epilogue callers fall back) */
    MatmulPlanKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

static MatmulPlan llmc_matmul_plans[MATMUL_PLAN_CACHE_SIZE];

/* largest power of two (<= 256) dividing the address; 256 for NULL */
static inline int pointer_alignment_class(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al) != 0) { al >>= 1; }
    return al;
}

static inline MatmulPlan* matmul_get_plan(const MatmulPlanKey* key, const void* bias, const void* aux) {
    for (int i = 0; i < MATMUL_PLAN_CACHE_SIZE; i++) {
        if (llmc_matmul_plans[i].used && memcmp(&llmc_matmul_plans[i].key, key, sizeof(*key)) == 0) {
            return &llmc_matmul_plans[i];
        }
    }
    MatmulPlan* p = NULL;
    for (int i = 0; i < MATMUL_PLAN_CACHE_SIZE; i++) {
        if (!llmc_matmul_plans[i].used) { p = &llmc_matmul_plans[i]; break; }
    }
    if (p == NULL) { /* table full: recycle slot 0 (models use a handful of shapes; this is a safety net) */
        p = &llmc_matmul_plans[0];
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d));
        p->used = 0;
    }
    memset(p, 0, sizeof(*p));
    p->key = *key;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epilogue;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias) { CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias))); }
    if (aux) {
        int64_t ld = key->ldd;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    /* column-major layouts: A is (m,k) or its transpose stored (k,m), etc. */
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, MATMUL_CUDA_TYPE, key->transa ? key->k : key->m,
                                            key->transa ? key->m : key->k, key->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, MATMUL_CUDA_TYPE, key->transb ? key->n : key->k,
                                            key->transb ? key->k : key->n, key->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, MATMUL_CUDA_TYPE, key->m, key->n, key->ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = cuda_state()->workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    uint32_t al_a = (uint32_t)key->align_a, al_b = (uint32_t)key->align_b, al_d = (uint32_t)key->align_d;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
    cublasLtMatmulHeuristicResult_t result;
    int returned = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cuda_state()->lt, p->desc, p->a, p->b, p->d, p->d, pref, 1,
                                                       &result, &returned);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st == CUBLAS_STATUS_SUCCESS && returned > 0) {
        p->algo = result.algo;
        p->has_algo = 1;
    } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
        CUBLAS_CHECK(st);
    }
    p->used = 1;
    return p;
}

/* Column-major D(m,n) = op(A) @ op(B) (+ beta*D) with the epilogue the pointers select: bias and aux: GELU_AUX_BIAS
 * (aux written: the GELU input); bias: BIAS; aux alone: DGELU (D *= gelu'(aux), aux read: the GELU input of the
 * forward, D's shape and leading dimension); neither: DEFAULT.
 * Returns 1 on success, 0 if no cuBLASLt algorithm exists for an epilogue (caller falls back);
 * exits if even the plain GEMM has no algorithm. */
static inline int matmul_cublaslt(floatX* d, const floatX* a, const floatX* b, const floatX* bias, floatX* aux, int m,
                                  int n, int k, int transa, int transb, int lda, int ldb, int ldd, int accumulate) {
    MatmulPlanKey key;
    memset(&key, 0, sizeof(key));
    key.m = m; key.n = n; key.k = k; key.lda = lda; key.ldb = ldb; key.ldd = ldd;
    key.transa = transa; key.transb = transb; key.accumulate = accumulate;
    key.epilogue = (int)(bias && aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                         : bias    ? CUBLASLT_EPILOGUE_BIAS
                         : aux     ? CUBLASLT_EPILOGUE_DGELU /* aux is then an input: the forward's GELU input */
                                   : CUBLASLT_EPILOGUE_DEFAULT);
    key.align_a = pointer_alignment_class(a);
    key.align_b = pointer_alignment_class(b);
    key.align_d = pointer_alignment_class(d);
    key.align_bias = pointer_alignment_class(bias);
    key.align_aux = pointer_alignment_class(aux);
    MatmulPlan* p = matmul_get_plan(&key, bias, aux);
    if (!p->has_algo) {
        if (key.epilogue != (int)CUBLASLT_EPILOGUE_DEFAULT) { return 0; }
        FATAL("cuBLASLt found no algorithm for GEMM m=%d n=%d k=%d transa=%d transb=%d", m, n, k, transa, transb);
    }
    if (bias) { CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias))); }
    if (aux) { CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux))); }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(cuda_state()->lt, p->desc, &alpha, a, p->a, b, p->b, &beta, d, p->d, d, p->d, &p->algo,
                                cuda_state()->workspace, cuda_state()->workspace_bytes, main_stream()));
    return 1;
}

/* destroys cached plans (backend_shutdown) */
static inline void matmul_plans_destroy(void) {
    for (int i = 0; i < MATMUL_PLAN_CACHE_SIZE; i++) {
        MatmulPlan* p = &llmc_matmul_plans[i];
        if (!p->used) { continue; }
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d));
        p->used = 0;
    }
}

/* ---------------------------------------------------------------- public ops */

static inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                                  int OC, floatX* pre_gelu) {
    if (N == 0 || OC == 0) { return; }
    floatX* gemm_out = pre_gelu ? pre_gelu : out;
    /* out^T(OC,N) = W^T(OC,C) @ inp^T(C,N): A = weight (stored C x OC col-major, transposed), B = inp */
    if (pre_gelu && bias && OC % 8 == 0 &&
        matmul_cublaslt(out, weight, inp, bias, pre_gelu, OC, N, C, 1, 0, C, C, OC, 0)) {
        return;
    }
    if (bias && matmul_cublaslt(gemm_out, weight, inp, bias, NULL, OC, N, C, 1, 0, C, C, OC, 0)) {
        /* bias applied by the epilogue */
    } else {
        matmul_cublaslt(gemm_out, weight, inp, NULL, NULL, OC, N, C, 1, 0, C, C, OC, 0);
        if (bias) {
            size_t n = (size_t)N * OC;
            LAUNCH(grid_for(n, 256), 256, 0, main_stream(), add_bias_kernel)(gemm_out, bias, n, OC);
            CUDA_CHECK_LAUNCH();
        }
    }
    if (pre_gelu) { gelu_forward(out, pre_gelu, (size_t)N * OC); }
}

/* dweight(OC,C) += dout(N,OC)^T @ inp(N,C): matmul_backward's weight GEMM alone (W of the split backward; the same
 * cuBLASLt call, so B then W gives matmul_backward's bits) */
static inline void matmul_backward_weight(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC) {
    if (N == 0 || OC == 0 || C == 0) { return; }
    /* dW^T(C,OC) += inp^T(C,N) @ dout(N,OC): B = dout stored (OC,N) col-major, transposed */
    matmul_cublaslt(dweight, inp, dout, NULL, NULL, C, OC, N, 0, 1, C, OC, C, 1);
}

static inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, floatX* dout, const floatX* inp,
                                   const floatX* weight, float* scratch, int N, int C, int OC, const floatX* pre_gelu) {
    if (N == 0 || OC == 0 || C == 0) { return; }
    if (dbias) {
        matmul_dbias(dbias, dout, pre_gelu, scratch, N, OC);
    } else if (pre_gelu) {
        gelu_backward_inplace(dout, pre_gelu, (size_t)N * OC);
    }
    /* dinp^T(C,N) = W(C,OC col-major) @ dout^T(OC,N) */
    matmul_cublaslt(dinp, weight, dout, NULL, NULL, C, N, OC, 0, 0, C, OC, C, 0);
    if (dweight) { matmul_backward_weight(dweight, dout, inp, N, C, OC); }
}

/* The fcproj input gradient through GELU (issue 15, item 9b): as matmul_backward(..., pre_gelu = NULL), but dinp is
 * d(loss)/d(inp_pre_gelu) where inp = gelu(inp_pre_gelu): dinp = (dout @ weight) * gelu'(inp_pre_gelu), with
 * cuBLASLt's DGELU epilogue on the dinp GEMM (aux = inp_pre_gelu (N,C), ld C), so the GELU derivative costs no pass of
 * its own and the next layer's dbias pass (matmul_backward with pre_gelu = NULL) only reads its dout. Without an
 * algorithm for the epilogue (or C % 8 != 0): a plain GEMM and gelu_backward_inplace. Shapes as matmul_backward. */
static inline void matmul_backward_dgelu(floatX* dinp, floatX* dweight, floatX* dbias, floatX* dout, const floatX* inp,
                                         const floatX* weight, float* scratch, int N, int C, int OC,
                                         const floatX* inp_pre_gelu) {
    if (N == 0 || OC == 0 || C == 0) { return; }
    if (dbias) { matmul_dbias(dbias, dout, NULL, scratch, N, OC); }
    /* dinp^T(C,N) = (W(C,OC col-major) @ dout^T(OC,N)) * gelu'(pre^T(C,N)) */
    if (!(C % 8 == 0 &&
          matmul_cublaslt(dinp, weight, dout, NULL, (floatX*)inp_pre_gelu, C, N, OC, 0, 0, C, OC, C, 0))) {
        matmul_cublaslt(dinp, weight, dout, NULL, NULL, C, N, OC, 0, 0, C, OC, C, 0);
        gelu_backward_inplace(dinp, inp_pre_gelu, (size_t)N * C);
    }
    if (dweight) { matmul_backward_weight(dweight, dout, inp, N, C, OC); }
}

#endif /* LLMC_CUDA_MATMUL_CUH */
