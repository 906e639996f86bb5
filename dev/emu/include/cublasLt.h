/*
 * dev/emu/include/cublasLt.h -- stand-in for the subset of cuBLASLt that llmc/cuda/matmul.cuh uses, on the CPU
 * execution layer (tests only; found before the toolkit's header through -Idev/emu/include, see dev/emu/emu.mk).
 *
 * What it models (NVIDIA cuBLAS documentation, "Using the cuBLASLt API"; enum values as in the real header):
 *   cublasLtCreate/Destroy; cublasLtMatmulDescCreate(CUBLAS_COMPUTE_32F, CUDA_R_32F)/Destroy/SetAttribute with
 *   TRANSA, TRANSB (cublasOperation_t), EPILOGUE (uint32_t), BIAS_POINTER, EPILOGUE_AUX_POINTER (pointers),
 *   EPILOGUE_AUX_LD (int64_t); cublasLtMatrixLayoutCreate(type, rows, cols, ld)/Destroy (column-major, one batch);
 *   cublasLtMatmulPreferenceCreate/Destroy/SetAttribute (MAX_WORKSPACE_BYTES, MIN_ALIGNMENT_{A,B,C,D}_BYTES:
 *   recorded, not used); cublasLtMatmulAlgoGetHeuristic, which validates the problem and returns one algorithm;
 *   cublasLtMatmul; cublasGetStatusString.
 * cublasLtMatmul computes D(m,n) = op(A)(m,k) @ op(B)(k,n) + beta*C with the epilogue, on the host, queued on the
 * stream with emu::host_task (so a stream capture records it and a graph replay runs it, like a kernel).
 * Pointers, alpha and beta are read when cublasLtMatmul is called (host pointer mode), as cuBLASLt does.
 * Numerics (fixed, so results are reproducible and comparable with the CPU backend):
 *   for every output element: acc (fp32) = beta*C (not read when beta = 0), then + op(A)[i][k]*op(B)[k][j] for
 *   k = 0, 1, ..., K-1 (each product of the fp32 values of the operands, no FMA), then epilogue:
 *     DEFAULT        D = round(acc)
 *     BIAS           D = round(acc + bias[i])                        (bias: m values of D's type)
 *     GELU_AUX_BIAS  v = acc + bias[i]; aux = round(v); D = round(gelu(v)), gelu the tanh approximation
 *                    0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) on the fp32 value, as cuBLASLt does
 *                    (aux has D's shape and type, leading dimension EPILOGUE_AUX_LD)
 *     DGELU          D = round(acc * gelu'(aux)), aux the GELU input of the forward (read; D's shape and type,
 *                    leading dimension EPILOGUE_AUX_LD), gelu' the derivative of the same tanh approximation,
 *                    0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 0.044715 x^2), th = tanh(sqrt(2/pi) (x +
 *                    0.044715 x^3)), in fp32 (the formula of llmc/cuda/gelu.cuh's gelu_derivative; cuBLASLt does
 *                    not document its own)
 *   where round is one rounding to the matrix type (nearest-even; identity for fp32).
 * Supported: A, B, C, D of one type (CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F), alpha = 1, beta = 0 or 1, C of D's
 * shape. Anything else returns CUBLAS_STATUS_NOT_SUPPORTED (an unmodelled attribute or epilogue too, so a library
 * change that needs more fails here instead of computing something else); inconsistent shapes, leading
 * dimensions, missing epilogue pointers and matrices that do not lie inside one device allocation return
 * CUBLAS_STATUS_INVALID_VALUE. Every failure also prints one line "emu: cuBLASLt: <call>: <reason>" on stderr.
 * What it cannot show: the real library's algorithm choice, workspace use, alignment requirements, its
 * summation order and its GELU (which may differ from this one in the last bits). Header-only C++17.
 */
#ifndef LLMC_DEV_EMU_INCLUDE_CUBLASLT_H
#define LLMC_DEV_EMU_INCLUDE_CUBLASLT_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, /* GELU (32) | AUX (128) | BIAS (4) */
    CUBLASLT_EPILOGUE_DGELU = 192          /* 64 | AUX (128) */
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

namespace emu {
namespace lt {

/* the opaque objects carry a magic number, checked on every use and cleared when destroyed */
struct Handle {
    static constexpr int kMagic = 0x4c744801;
    int magic;
};
struct Desc {
    static constexpr int kMagic = 0x4c744802;
    int magic;
    int32_t transa, transb;
    uint32_t epilogue;
    const void* bias;
    void* aux;
    int64_t aux_ld;
};
struct Layout {
    static constexpr int kMagic = 0x4c744803;
    int magic;
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct Pref {
    static constexpr int kMagic = 0x4c744804;
    int magic;
    uint64_t max_workspace;
    uint32_t min_align[4];
};

/* one line on stderr, returns st */
inline cublasStatus_t fail(cublasStatus_t st, const char* call, const char* fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "emu: cuBLASLt: %s: %s\n", call, msg);
    fflush(stderr);
    return st;
}

template <class T> inline bool live(const T* o) { return o && o->magic == T::kMagic; }

/* *out = a new object initialised from init (the cublasLt*Create calls) */
template <class T> inline cublasStatus_t create(T** out, const T& init, const char* call) {
    if (!out) { return fail(CUBLAS_STATUS_INVALID_VALUE, call, "NULL pointer"); }
    *out = new T(init);
    return CUBLAS_STATUS_SUCCESS;
}
/* frees a live object (the cublasLt*Destroy calls); `bad` for anything else */
template <class T> inline cublasStatus_t destroy(T* o, cublasStatus_t bad, const char* call) {
    if (!live(o)) { return fail(bad, call, "not a live object"); }
    o->magic = 0;
    delete o;
    return CUBLAS_STATUS_SUCCESS;
}

/* copies an attribute value of exactly sizeof(T) bytes */
template <class T>
inline cublasStatus_t set_attr(T* dst, const void* buf, size_t bytes, const char* call) {
    if (!buf || bytes != sizeof(T)) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, call, "attribute size %zu, expected %zu", bytes, sizeof(T));
    }
    memcpy(dst, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

inline size_t type_size(cudaDataType_t t) {
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF: return 2;
    case CUDA_R_16F: return 2;
    default: return 0;
    }
}

/* a validated matmul, captured by value: column-major D(m,n) = op(A) op(B) + beta C, then the epilogue */
struct Gemm {
    cudaDataType_t type;
    int transa, transb;
    uint32_t epilogue;
    uint64_t m, n, k;
    int64_t lda, ldb, ldc, ldd, ld_aux;
    const void *A, *B, *C, *bias;
    void *D, *aux;
    float beta;
};

/* problem checks shared by cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul; fills g (pointers excluded) */
inline cublasStatus_t check_problem(const Desc* d, const Layout* a, const Layout* b, const Layout* c, const Layout* dl,
                                    Gemm* g, const char* call) {
    if (!live(d) || !live(a) || !live(b) || !live(c) || !live(dl)) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, call, "a descriptor or layout is not a live handle");
    }
    if (a->type != dl->type || b->type != dl->type || c->type != dl->type || type_size(dl->type) == 0) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "matrix types A %d, B %d, C %d, D %d (supported: one of CUDA_R_32F/16BF/16F for all four)",
                    (int)a->type, (int)b->type, (int)c->type, (int)dl->type);
    }
    memset(g, 0, sizeof(*g));
    g->type = dl->type;
    g->transa = d->transa == CUBLAS_OP_T;
    g->transb = d->transb == CUBLAS_OP_T;
    g->epilogue = d->epilogue;
    g->m = dl->rows;
    g->n = dl->cols;
    g->k = g->transa ? a->rows : a->cols;
    uint64_t am = g->transa ? a->cols : a->rows;
    uint64_t bk = g->transb ? b->cols : b->rows, bn = g->transb ? b->rows : b->cols;
    if (am != g->m || bk != g->k || bn != g->n || c->rows != g->m || c->cols != g->n) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                    "shapes do not chain: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu",
                    (unsigned long long)am, (unsigned long long)g->k, (unsigned long long)bk,
                    (unsigned long long)bn, (unsigned long long)c->rows, (unsigned long long)c->cols,
                    (unsigned long long)g->m, (unsigned long long)g->n);
    }
    const Layout* ls[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++) {
        if (ls[i]->ld < (int64_t)(ls[i]->rows ? ls[i]->rows : 1)) {
            return fail(CUBLAS_STATUS_INVALID_VALUE, call, "matrix %c: leading dimension %lld below its %llu rows",
                        "ABCD"[i], (long long)ls[i]->ld, (unsigned long long)ls[i]->rows);
        }
    }
    g->lda = a->ld; g->ldb = b->ld; g->ldc = c->ld; g->ldd = dl->ld;
    switch (d->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_BIAS:
        if (!d->bias) { return fail(CUBLAS_STATUS_INVALID_VALUE, call, "BIAS epilogue without BIAS_POINTER"); }
        g->bias = d->bias;
        break;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
        if (!d->bias || !d->aux || d->aux_ld < (int64_t)(g->m ? g->m : 1)) {
            return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                        "GELU_AUX_BIAS epilogue needs BIAS_POINTER, EPILOGUE_AUX_POINTER and EPILOGUE_AUX_LD >= %llu "
                        "(got %p, %p, %lld)", (unsigned long long)g->m, d->bias, (void*)d->aux, (long long)d->aux_ld);
        }
        g->bias = d->bias; g->aux = d->aux; g->ld_aux = d->aux_ld;
        break;
    case CUBLASLT_EPILOGUE_DGELU:
        if (!d->aux || d->aux_ld < (int64_t)(g->m ? g->m : 1)) {
            return fail(CUBLAS_STATUS_INVALID_VALUE, call,
                        "DGELU epilogue needs EPILOGUE_AUX_POINTER and EPILOGUE_AUX_LD >= %llu (got %p, %lld)",
                        (unsigned long long)g->m, (void*)d->aux, (long long)d->aux_ld);
        }
        g->aux = d->aux; g->ld_aux = d->aux_ld;
        break;
    default:
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "epilogue %u is not modelled (DEFAULT, BIAS, GELU_AUX_BIAS, DGELU)", d->epilogue);
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* [p, p + bytes of an (rows x cols, ld) column-major matrix) lies inside one device allocation */
inline bool matrix_in_device(const void* p, uint64_t rows, uint64_t cols, int64_t ld, size_t es) {
    size_t span = rows && cols ? ((size_t)(cols - 1) * (size_t)ld + rows) * es : 0;
    return p && ::emu::device_range(p, span);
}

inline float to_f(float x) { return x; }
inline float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float to_f(__half x) { return __half2float(x); }
template <class T> inline T from_f(float x);
template <> inline float from_f<float>(float x) { return x; }
template <> inline __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> inline __half from_f<__half>(float x) { return __float2half_rn(x); }

/* GELU, tanh approximation (Hendrycks & Gimpel 2016), on the fp32 pre-activation */
inline float gelu(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* its derivative (the DGELU epilogue) */
inline float gelu_grad(float x) {
    const float k = 0.7978845608028654f, c = 0.044715f;
    float th = tanhf(k * (x + c * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3.0f * c * x * x);
}

/* the host GEMM; see the header comment for the operation order. Every output element is summed exactly as
 * "acc = beta*C; acc += op(A)[i][k] * op(B)[k][j] for k = 0, 1, ..., K-1" (a product rounded to fp32, then the
 * add; no FMA): the blocking below only changes which elements are computed side by side, never one element's order.
 * K is cut into blocks of KB (an element's partial sum waits in `part` between blocks, in fp32, as it would in a
 * register); per block, op(A)'s rows i0..i0+MB-1 are packed k-major into fp32 (zero past the matrix), op(B)'s columns
 * j0..j0+NB-1 into broadcast vectors, and 8 vector accumulators (8 rows x NB columns) gain their products for k in
 * order (GCC/Clang vector extensions: 4 fp32 lanes, SSE on any x86-64). */
typedef float f32x4 __attribute__((vector_size(16)));

template <class T>
inline void gemm_host(const Gemm& g) {
    constexpr uint64_t MB = 64, NB = 4, MV = MB / 4, KB = 256;
    const T* A = (const T*)g.A;
    const T* B = (const T*)g.B;
    const T* C = (const T*)g.C;
    const T* bias = (const T*)g.bias;
    T* D = (T*)g.D;
    T* aux = (T*)g.aux;
    std::vector<f32x4> ap(KB * MV), bp(KB * NB);  /* ap[kk*MV + v]: rows i0+4v..+3 of column k0+kk; bp[kk*NB + jj] */
    std::vector<float> part(g.k > KB ? g.m * g.n : 0);  /* partial sums between K blocks, (m, n) column-major */
    for (uint64_t k0 = 0; k0 < g.k || k0 == 0; k0 += KB) {
        const uint64_t kb = g.k - k0 < KB ? g.k - k0 : KB;
        const bool first = k0 == 0, last = k0 + kb >= g.k;
        for (uint64_t i0 = 0; i0 < g.m; i0 += MB) {
            const uint64_t mb = g.m - i0 < MB ? g.m - i0 : MB;
            float* af = (float*)ap.data();
            for (uint64_t kk = 0; kk < kb; kk++) {
                for (uint64_t ii = 0; ii < MB; ii++) {
                    const uint64_t i = i0 + ii, k = k0 + kk;
                    af[kk * MB + ii] = ii < mb ? to_f(g.transa ? A[i * g.lda + k] : A[i + k * g.lda]) : 0.0f;
                }
            }
            for (uint64_t j0 = 0; j0 < g.n; j0 += NB) {
                const uint64_t nb = g.n - j0 < NB ? g.n - j0 : NB;
                for (uint64_t kk = 0; kk < kb; kk++) {
                    for (uint64_t jj = 0; jj < NB; jj++) {
                        const uint64_t j = j0 + jj, k = k0 + kk;
                        const float b = jj < nb ? to_f(g.transb ? B[j + k * g.ldb] : B[k + j * g.ldb]) : 0.0f;
                        bp[kk * NB + jj] = f32x4{b, b, b, b};
                    }
                }
                for (uint64_t v = 0; v < MV; v += 2) {
                    if (4 * v >= mb) { break; }
                    f32x4 acc[2][NB];
                    for (uint64_t jj = 0; jj < NB; jj++) {
                        for (uint64_t r = 0; r < 8; r++) {
                            const uint64_t i = i0 + 4 * v + r, j = j0 + jj;
                            float x = 0.0f;
                            if (i < g.m && jj < nb) {
                                x = !first ? part[i + j * g.m] : g.beta != 0.0f ? to_f(C[i + j * g.ldc]) : 0.0f;
                            }
                            acc[r / 4][jj][r % 4] = x;
                        }
                    }
                    for (uint64_t kk = 0; kk < kb; kk++) {
                        const f32x4 a0 = ap[kk * MV + v], a1 = ap[kk * MV + v + 1];
                        for (uint64_t jj = 0; jj < NB; jj++) {
                            const f32x4 b = bp[kk * NB + jj];
                            const f32x4 p0 = a0 * b, p1 = a1 * b;
                            acc[0][jj] = acc[0][jj] + p0;
                            acc[1][jj] = acc[1][jj] + p1;
                        }
                    }
                    for (uint64_t jj = 0; jj < nb; jj++) {
                        for (uint64_t r = 0; r < 8 && i0 + 4 * v + r < g.m; r++) {
                            const uint64_t i = i0 + 4 * v + r, j = j0 + jj;
                            float x = acc[r / 4][jj][r % 4];
                            if (!last) { part[i + j * g.m] = x; continue; }
                            if (bias) { x += to_f(bias[i]); }
                            if (g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                                aux[i + j * g.ld_aux] = from_f<T>(x);
                                x = gelu(x);
                            } else if (g.epilogue == CUBLASLT_EPILOGUE_DGELU) {
                                x *= gelu_grad(to_f(aux[i + j * g.ld_aux]));
                            }
                            D[i + j * g.ldd] = from_f<T>(x);
                        }
                    }
                }
            }
        }
        if (g.k == 0) { break; }
    }
}

} /* namespace lt */
} /* namespace emu */

typedef ::emu::lt::Handle* cublasLtHandle_t;
typedef ::emu::lt::Desc* cublasLtMatmulDesc_t;
typedef ::emu::lt::Layout* cublasLtMatrixLayout_t;
typedef ::emu::lt::Pref* cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline const char* cublasGetStatusString(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN (emu)";
    }
}

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    return ::emu::lt::create(h, ::emu::lt::Handle{::emu::lt::Handle::kMagic}, "cublasLtCreate");
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    return ::emu::lt::destroy(h, CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy");
}

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) {
        return ::emu::lt::fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescCreate",
                               "compute type %d / scale type %d (modelled: CUBLAS_COMPUTE_32F with CUDA_R_32F)",
                               (int)compute, (int)scale);
    }
    return ::emu::lt::create(d, ::emu::lt::Desc{::emu::lt::Desc::kMagic, CUBLAS_OP_N, CUBLAS_OP_N,
                                                CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0},
                             "cublasLtMatmulDescCreate");
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    return ::emu::lt::destroy(d, CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy");
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, size_t bytes) {
    const char* call = "cublasLtMatmulDescSetAttribute";
    if (!::emu::lt::live(d)) {
        return ::emu::lt::fail(CUBLAS_STATUS_INVALID_VALUE, call, "not a live descriptor");
    }
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return ::emu::lt::set_attr(&d->transa, buf, bytes, call);
    case CUBLASLT_MATMUL_DESC_TRANSB: return ::emu::lt::set_attr(&d->transb, buf, bytes, call);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return ::emu::lt::set_attr(&d->epilogue, buf, bytes, call);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return ::emu::lt::set_attr(&d->bias, buf, bytes, call);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return ::emu::lt::set_attr(&d->aux, buf, bytes, call);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return ::emu::lt::set_attr(&d->aux_ld, buf, bytes, call);
    default: return ::emu::lt::fail(CUBLAS_STATUS_NOT_SUPPORTED, call, "attribute %d is not modelled", (int)attr);
    }
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    return ::emu::lt::create(l, ::emu::lt::Layout{::emu::lt::Layout::kMagic, type, rows, cols, ld},
                             "cublasLtMatrixLayoutCreate");
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    return ::emu::lt::destroy(l, CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy");
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    return ::emu::lt::create(p, ::emu::lt::Pref{::emu::lt::Pref::kMagic, 0, {256, 256, 256, 256}},
                             "cublasLtMatmulPreferenceCreate");
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    return ::emu::lt::destroy(p, CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy");
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                           size_t bytes) {
    const char* call = "cublasLtMatmulPreferenceSetAttribute";
    if (!::emu::lt::live(p)) {
        return ::emu::lt::fail(CUBLAS_STATUS_INVALID_VALUE, call, "not a live preference");
    }
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return ::emu::lt::set_attr(&p->max_workspace, buf, bytes, call);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        return ::emu::lt::set_attr(&p->min_align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes, call);
    default: return ::emu::lt::fail(CUBLAS_STATUS_NOT_SUPPORTED, call, "attribute %d is not modelled", (int)attr);
    }
}

/* validates the problem and returns one algorithm (the host GEMM), needing no workspace */
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t* results, int* returned) {
    const char* call = "cublasLtMatmulAlgoGetHeuristic";
    if (!::emu::lt::live(h)) { return ::emu::lt::fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a live handle"); }
    if (!::emu::lt::live(pref) || requested < 1 || !results || !returned) {
        return ::emu::lt::fail(CUBLAS_STATUS_INVALID_VALUE, call, "bad preference, count or result pointers");
    }
    ::emu::lt::Gemm g;
    cublasStatus_t st = ::emu::lt::check_problem(d, a, b, c, dl, &g, call);
    *returned = 0;
    if (st != CUBLAS_STATUS_SUCCESS) { return st; }
    memset(&results[0], 0, sizeof(results[0]));
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* D = op(A) op(B) + beta C with the epilogue, queued on `stream` (see the header comment) */
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b,
                                     const void* beta, const void* C, cublasLtMatrixLayout_t c, void* D,
                                     cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t* algo, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
    const char* call = "cublasLtMatmul";
    if (!::emu::lt::live(h)) { return ::emu::lt::fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a live handle"); }
    if (!alpha || !beta || !algo) { return ::emu::lt::fail(CUBLAS_STATUS_INVALID_VALUE, call, "NULL alpha, beta or algo"); }
    ::emu::lt::Gemm g;
    cublasStatus_t st = ::emu::lt::check_problem(d, a, b, c, dl, &g, call);
    if (st != CUBLAS_STATUS_SUCCESS) { return st; }
    const float al = *(const float*)alpha, be = *(const float*)beta;
    if (al != 1.0f || (be != 0.0f && be != 1.0f)) {
        return ::emu::lt::fail(CUBLAS_STATUS_NOT_SUPPORTED, call, "alpha %g, beta %g (modelled: alpha 1, beta 0 or 1)",
                               (double)al, (double)be);
    }
    const size_t es = ::emu::lt::type_size(g.type);
    if (!::emu::lt::matrix_in_device(A, a->rows, a->cols, a->ld, es) ||
        !::emu::lt::matrix_in_device(B, b->rows, b->cols, b->ld, es) ||
        (be != 0.0f && !::emu::lt::matrix_in_device(C, c->rows, c->cols, c->ld, es)) ||
        !::emu::lt::matrix_in_device(D, dl->rows, dl->cols, dl->ld, es) ||
        (g.bias && !::emu::lt::matrix_in_device(g.bias, g.m, 1, (int64_t)(g.m ? g.m : 1), es)) ||
        (g.aux && !::emu::lt::matrix_in_device(g.aux, g.m, g.n, g.ld_aux, es)) ||
        (workspace_bytes && !::emu::device_range(workspace, workspace_bytes))) {
        return ::emu::lt::fail(CUBLAS_STATUS_INVALID_VALUE, call,
                               "a matrix, the bias, the aux output or the workspace does not lie inside one device "
                               "allocation (m=%llu n=%llu k=%llu)", (unsigned long long)g.m, (unsigned long long)g.n,
                               (unsigned long long)g.k);
    }
    g.A = A; g.B = B; g.C = C; g.D = D;
    g.beta = be;
    ::emu::host_task(stream, "cublasLtMatmul (emu host GEMM)", [g]() {
        if (g.type == CUDA_R_32F) {
            ::emu::lt::gemm_host<float>(g);
        } else if (g.type == CUDA_R_16BF) {
            ::emu::lt::gemm_host<__nv_bfloat16>(g);
        } else {
            ::emu::lt::gemm_host<__half>(g);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

#endif /* LLMC_DEV_EMU_INCLUDE_CUBLASLT_H */
