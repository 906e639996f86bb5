/*
 * llmc/cuda/common.cuh -- shared pieces of the CUDA backend (llmc/README.md, "The backend contract").
 *
 * - Precision: floatX is __nv_bfloat16 by default (-DENABLE_BF16 or nothing), float with
 *   -DENABLE_FP32, __half with -DENABLE_FP16. PRECISION_NAME is "bf16"/"fp32"/"fp16" and
 *   FLOATX_IS_FLOAT is 1 only for the fp32 build (llmc/backend.h contract).
 * - Error checks: CUDA_CHECK(call), CUBLAS_CHECK(call), CUDA_CHECK_LAUNCH(). On failure they print
 *   one line "error: ... [file:line]" (via llmc/utils.h FATAL) and exit(EXIT_FAILURE).
 * - Launch/shared-memory macros: LAUNCH(grid, block, smem, stream, kernel)(args...) and
 *   DYNAMIC_SHARED(type, name), defined here as <<<...>>> / extern __shared__ unless the CUDA runtime
 *   header already defined them (a runtime that runs kernels without nvcc, e.g. the tests' CPU execution
 *   layer, provides both; see llmc/README.md, "Tests").
 * - PackedN<T, N> / Packed128<T>: N elements loaded/stored as one aligned access (128-bit for
 *   Packed128), the llm.c idiom (llm.c llmc/cuda_common.h). load128/store128;
 *   the "cs" variants use the streaming cache hint (__ldcs/__stcs, CUDA C Programming Guide,
 *   "Load Functions Using Cache Hints") for data touched once.
 * - Warp/block reductions with __shfl_xor_sync (no cooperative groups).
 * - Counter-based random numbers (splitmix64 finalizer, Steele et al. 2014) and stochastic
 *   rounding fp32 -> bf16 (unbiased: rounds up with probability equal to the discarded fraction).
 *
 * Header-only: static inline / static __device__ functions only.
 */
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../utils.h"

#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* ---------------------------------------------------------------- precision */

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#define FLOATX_IS_FLOAT 1
#elif defined(ENABLE_FP16)
typedef __half floatX;
#define PRECISION_NAME "fp16"
#define FLOATX_IS_FLOAT 0
#else
#ifndef ENABLE_BF16
#define ENABLE_BF16
#endif
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#define FLOATX_IS_FLOAT 0
#endif

/* conversions usable on host and device; from_float rounds to nearest-even */
static __host__ __device__ __forceinline__ float to_float(float x) { return x; }
static __host__ __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
static __host__ __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <class T> __host__ __device__ __forceinline__ T from_float(float x);
template <> __host__ __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __host__ __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

/* ---------------------------------------------------------------- error checks */

static inline void cuda_check_at(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        fatal_error_at(file, line, "CUDA call failed: %s: %s (%s)", what, cudaGetErrorString(err),
                       cudaGetErrorName(err));
    }
}
static inline void cublas_check_at(cublasStatus_t st, const char* what, const char* file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fatal_error_at(file, line, "cuBLAS call failed: %s: status %d (%s)", what, (int)st, cublasGetStatusString(st));
    }
}
#define CUBLAS_CHECK(call) cublas_check_at((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK(call) cuda_check_at((call), #call, __FILE__, __LINE__)
/* after every launch: catches launch-configuration errors without synchronising */
#define CUDA_CHECK_LAUNCH() cuda_check_at(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* ---------------------------------------------------------------- launch / shared memory */

#ifndef LAUNCH
#define LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#endif
#ifndef DYNAMIC_SHARED
#define DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

#define WARP_SIZE 32
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* ---------------------------------------------------------------- packed loads/stores */

/* N elements of T in one naturally aligned access (sizeof(T)*N bytes, at most 16) */
template <class T, int N>
struct alignas(sizeof(T) * N) PackedN {
    static constexpr int size = N;
    T payload[N];
    __host__ __device__ __forceinline__ T& operator[](int i) { return payload[i]; }
    __host__ __device__ __forceinline__ const T& operator[](int i) const { return payload[i]; }
};
/* 128-bit packet: 8 bf16/fp16 or 4 fp32 */
template <class T>
using Packed128 = PackedN<T, 16 / sizeof(T)>;
typedef Packed128<float> f128;
typedef Packed128<floatX> x128;

/* p must be aligned to sizeof(T)*N bytes */
template <class T, int N>
static __device__ __forceinline__ PackedN<T, N> load_packed(const T* p) {
    return *reinterpret_cast<const PackedN<T, N>*>(p);
}
/* a 16-byte packet is stored through int4 bits: a struct assignment of eight bf16 may be split by the compiler
 * into eight 16-bit stores (it did in swiglu_backward_kernel<8>; dev/test/check_sass.sh) */
template <class T, int N>
static __device__ __forceinline__ void store_packed(T* p, const PackedN<T, N>& v) {
    if constexpr (sizeof(T) * N == 16) {
        int4 bits;
        memcpy(&bits, &v, 16);
        *reinterpret_cast<int4*>(p) = bits;
    } else {
        *reinterpret_cast<PackedN<T, N>*>(p) = v;
    }
}
/* streaming ("evict first") variants: 128-bit packets use __ldcs/__stcs, narrower ones plain accesses */
template <class T, int N>
static __device__ __forceinline__ PackedN<T, N> load_packed_cs(const T* p) {
    if constexpr (sizeof(T) * N == 16) {
        int4 bits = __ldcs(reinterpret_cast<const int4*>(p));
        PackedN<T, N> r;
        memcpy(&r, &bits, 16);
        return r;
    } else {
        return *reinterpret_cast<const PackedN<T, N>*>(p);
    }
}
template <class T, int N>
static __device__ __forceinline__ void store_packed_cs(T* p, const PackedN<T, N>& v) {
    if constexpr (sizeof(T) * N == 16) {
        int4 bits;
        memcpy(&bits, &v, 16);
        __stcs(reinterpret_cast<int4*>(p), bits);
    } else {
        *reinterpret_cast<PackedN<T, N>*>(p) = v;
    }
}
template <class T>
static __device__ __forceinline__ Packed128<T> load128(const T* p) { return load_packed<T, 16 / sizeof(T)>(p); }
template <class T>
static __device__ __forceinline__ void store128(T* p, const Packed128<T>& v) { store_packed<T, 16 / sizeof(T)>(p, v); }

/* 1 if every pointer is aligned to `bytes` */
static inline int ptr_aligned(const void* p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }

/* elements of floatX per 128-bit packet */
#define X128_SIZE ((int)(16 / sizeof(floatX)))

/* ---------------------------------------------------------------- reductions */

static __device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, off); }
    return v;
}
static __device__ __forceinline__ float warp_reduce_max(float v) {
    for (int off = 16; off > 0; off >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off)); }
    return v;
}

/* Sum (MAX = false) or max (MAX = true, fmaxf: a number wins over a NaN) over the block; every thread gets the
 * result. blockDim.x must be a multiple of 32 (<= 1024). `shared` is a caller-provided __shared__ float[32].
 * Deterministic (fixed tree: warp shuffles, then one value per warp through `shared`). Contains __syncthreads, so
 * all threads of the block must call it; safe to call repeatedly with the same buffer. */
template <bool MAX>
static __device__ __forceinline__ float block_reduce(float v, float* shared) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int nwarps = blockDim.x / WARP_SIZE;
    v = MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
    __syncthreads(); /* protect `shared` from a previous call */
    if (lane == 0) { shared[warp] = v; }
    __syncthreads();
    v = (lane < nwarps) ? shared[lane] : (MAX ? -FLT_MAX : 0.0f);
    return MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
}
static __device__ __forceinline__ float block_reduce_sum(float v, float* shared) { return block_reduce<false>(v, shared); }
static __device__ __forceinline__ float block_reduce_max(float v, float* shared) { return block_reduce<true>(v, shared); }

/* ---------------------------------------------------------------- random numbers, rounding */

/* splitmix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix */
static __host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* 32 random bits that depend only on (seed, t, index): element i of a tensor gets the same bits
 * no matter how the tensor is sharded (index = global offset of the element) */
static __host__ __device__ __forceinline__ uint32_t random_u32_counter(uint32_t seed, uint32_t t, uint64_t index) {
    uint64_t key = mix64(((uint64_t)seed << 32) ^ (uint64_t)t ^ 0x9e3779b97f4a7c15ull);
    return (uint32_t)(mix64(key + index * 0x9e3779b97f4a7c15ull) >> 32);
}

/* fp32 -> bf16 with stochastic rounding: rounds away from truncation with probability
 * (discarded low 16 bits)/2^16, so E[result] = x. NaN/Inf convert normally. */
static __device__ __forceinline__ __nv_bfloat16 stochastic_round_bf16(float x, uint32_t random) {
    uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) == 0x7f800000u) { return __float2bfloat16_rn(x); }
    bits += (random & 0xffffu);
    bits &= 0xffff0000u;
    return __float2bfloat16_rz(__uint_as_float(bits)); /* exact: low bits are zero */
}
/* round fp32 to floatX: stochastic for bf16, nearest for fp16, identity for fp32 */
static __device__ __forceinline__ void round_to_floatX(float* dst, float x, uint32_t random) { (void)random; *dst = x; }
static __device__ __forceinline__ void round_to_floatX(__half* dst, float x, uint32_t random) {
    (void)random;
    *dst = __float2half_rn(x);
}
static __device__ __forceinline__ void round_to_floatX(__nv_bfloat16* dst, float x, uint32_t random) {
    *dst = stochastic_round_bf16(x, random);
}

/* ---------------------------------------------------------------- backend state */

/* Process-wide state of the CUDA backend, filled by backend_init (backend.cuh). One main stream:
 * every kernel, copy and library call of the backend is queued on it, so ops need no host sync. */
typedef struct {
    int initialized;
    int device;
    int num_sms;
    size_t smem_optin;        /* max dynamic shared memory per block after opt-in (bytes) */
    char name[256];
    cudaStream_t stream;
    cudaStream_t copy_stream; /* dev_memcpy_h2d_async: host->device uploads that overlap main-stream work */
    cudaEvent_t copy_fork;    /* recorded on the main stream before each async upload, waited on by copy_stream */
    cudaEvent_t wait_event;   /* cuda_host_wait_stream: recorded on the stream waited for */
    void (*watchdog)(void* ctx, double waited_s); /* dev_set_wait_watchdog; NULL = plain blocking waits */
    void* watchdog_ctx;
    float* norm_partials;     /* global_norm_squared partial sums (NORM_PARTIALS floats) */
    int* flag;                /* has_inf_or_nan result (1 int) */
    cublasLtHandle_t lt;
    void* workspace;          /* cuBLASLt workspace */
    size_t workspace_bytes;
} CudaBackendState;

static CudaBackendState llmc_cuda_state;

static inline CudaBackendState* cuda_state(void) { return &llmc_cuda_state; }
/* the single stream every launch of this backend uses */
static inline cudaStream_t main_stream(void) { return llmc_cuda_state.stream; }

/* ---------------------------------------------------------------- host waits */

/* Every host wait on device work goes through these two. Without a watchdog they block
 * (cudaEventSynchronize / cudaStreamSynchronize). With one (dev_set_wait_watchdog in backend.cuh;
 * llmc/comm_nccl.h installs the NCCL watchdog), they poll every 100 us and call watchdog(ctx, seconds waited),
 * which may abort the job: a wait that is stuck behind a collective whose peer died (e.g. ZeRO-2's compute
 * stream waiting on a bucket's fence) then still ends within --comm-timeout instead of hanging. */
static inline void cuda_host_wait_event(cudaEvent_t e) {
    CudaBackendState* s = cuda_state();
    if (!s->watchdog) {
        CUDA_CHECK(cudaEventSynchronize(e));
        return;
    }
    time_t start = time(NULL);
    for (;;) {
        cudaError_t q = cudaEventQuery(e);
        if (q == cudaSuccess) { return; }
        if (q != cudaErrorNotReady) { CUDA_CHECK(q); }
        s->watchdog(s->watchdog_ctx, difftime(time(NULL), start));
        usleep(100);
    }
}
static inline void cuda_host_wait_stream(cudaStream_t stream) {
    CudaBackendState* s = cuda_state();
    if (!s->watchdog) {
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return;
    }
    CUDA_CHECK(cudaEventRecord(s->wait_event, stream));
    cuda_host_wait_event(s->wait_event);
}

/* ---------------------------------------------------------------- launch sizing */

/* blocks for a grid-stride elementwise kernel over n items; capped so a launch stays cheap */
static inline unsigned int grid_for(size_t n, int block) {
    size_t g = (n + (size_t)block - 1) / (size_t)block;
    if (g < 1) { g = 1; }
    if (g > 65535u * 16u) { g = 65535u * 16u; }
    return (unsigned int)g;
}

#endif /* LLMC_CUDA_COMMON_CUH */
