/*
 * llmc/cuda/backend.cuh -- the CUDA backend of llmc/backend.h (llmc/README.md, "The backend contract"): device selection,
 * memory, copies, conversions, and every op module. The contract (shapes, dtypes, accumulate vs
 * overwrite) is documented in llmc/backend.h; each module header documents its kernels.
 *
 * One main stream (main_stream(), common.cuh) carries every kernel, copy and cuBLASLt call, so ops
 * never synchronise the host; dev_synchronize() and the device->host copies do. A second stream,
 * copy_stream, carries only dev_memcpy_h2d_async (ordered against the main stream with events), so the
 * next training batch uploads while the current micro-step computes.
 * Host synchronisation points that remain in a training step (train_gpt.cu, CUDA path):
 *   - the loss read (gpt2_loss_sum_read, one fp64 per optimizer step, where the loss is printed);
 *   - the gradient-norm read (step_stats, llmc/step_stats.h: the per-shard sums of squares copied to the host; the clip
 *     factor and the printed norm need it) and,
 *     in FP16 builds, has_inf_or_nan (the loss scaler decides on the host whether to skip the update);
 *   - comm_all_reduce_host_f64 (multi-process: the reduced loss/norm on the host);
 *   - bounded run-ahead waits that only block when the host is two micro-steps ahead of the GPU: the
 *     encoder bucket upload buffers (encoder.cuh) and the batch upload buffers (dev_event_synchronize);
 *   - one-time allocations on the first step (encoder bucket buffers; cuDNN workspace growth);
 *   - with --profile-steps, on the profiled steps only: one wait before the step and one for its last timer after
 *     it (llmc/profile.h).
 * Error behaviour: every CUDA/cuBLAS call is checked; failures print one line with file:line and
 * exit(EXIT_FAILURE). No CUDA device: prints
 *   "error: no CUDA device found; use ./train_gpt_cpu for the CPU build"
 * and exits with status 1.
 * Compiled by a host C++ compiler with -DLLMC_BACKEND_CUDA (llmc/backend.h), the same code runs on whatever
 * CUDA runtime and cuBLASLt the include path provides (the tests' CPU execution layer; llmc/README.md, "Tests").
 */
#ifndef LLMC_CUDA_BACKEND_CUH
#define LLMC_CUDA_BACKEND_CUH

#include "common.cuh"
#include "cast.cuh"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "qknorm.cuh"
#include "gelu.cuh"
#include "rope.cuh"
#include "matmul.cuh"
#include "classifier.cuh"
#include "adamw.cuh"
#include "muon.cuh"
#include "attention.cuh"
#include "attention_decode.cuh"
#include "compress.cuh"
#include "moe.cuh"
#include "attention_gqa.cuh" /* the attention contract: cuDNN's SDPA first under USE_CUDNN, else the flash kernels */

/* ---------------------------------------------------------------- lifetime */

/* nothing to do before start-up on the GPU (the CPU backend checks OpenBLAS's kernels here) */
static inline void backend_process_start(char** argv) { (void)argv; }

/* selects device local_rank % device_count, creates the main stream, cuBLASLt handle and workspace,
 * and the small scratch buffers; prints one device line when verbose */
static inline void backend_init(int local_rank, int verbose) {
    CudaBackendState* s = cuda_state();
    if (s->initialized) { return; }
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        fflush(stdout);
        fprintf(stderr, "error: no CUDA device found; use ./train_gpt_cpu for the CPU build\n");
        exit(1);
    }
    s->device = (local_rank < 0 ? 0 : local_rank) % count;
    CUDA_CHECK(cudaSetDevice(s->device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, s->device));
    snprintf(s->name, sizeof(s->name), "%s", prop.name);
    s->num_sms = prop.multiProcessorCount;
    s->smem_optin = prop.sharedMemPerBlockOptin;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->copy_fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->wait_event, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc((void**)&s->norm_partials, NORM_PARTIALS * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void**)&s->flag, sizeof(int)));
    CUBLAS_CHECK(cublasLtCreate(&s->lt));
    s->workspace_bytes = MATMUL_WORKSPACE_BYTES;
    CUDA_CHECK(cudaMalloc(&s->workspace, s->workspace_bytes));
    s->initialized = 1;
    if (verbose) {
        printf("device: %s (rank-local index %d of %d, cc %d.%d, %d SMs, %.1f GiB), precision %s\n", s->name,
               s->device, count, prop.major, prop.minor, prop.multiProcessorCount,
               (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), PRECISION_NAME);
    }
}

static inline void backend_shutdown(void) {
    CudaBackendState* s = cuda_state();
    if (!s->initialized) { return; }
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    matmul_plans_destroy();
    CUDA_CHECK(cudaFree(s->workspace));
    CUBLAS_CHECK(cublasLtDestroy(s->lt));
    CUDA_CHECK(cudaStreamSynchronize(s->copy_stream));
    encoder_buckets_free();
    CUDA_CHECK(cudaFree(s->norm_partials));
    CUDA_CHECK(cudaFree(s->flag));
    CUDA_CHECK(cudaEventDestroy(s->copy_fork));
    CUDA_CHECK(cudaEventDestroy(s->wait_event));
    CUDA_CHECK(cudaStreamDestroy(s->copy_stream));
    CUDA_CHECK(cudaStreamDestroy(s->stream));
    memset(s, 0, sizeof(*s));
}

/* e.g. "NVIDIA H200"; "CUDA (not initialised)" before backend_init */
static inline const char* backend_device_name(void) {
    return cuda_state()->initialized ? cuda_state()->name : "CUDA (not initialised)";
}

/* ---------------------------------------------------------------- memory */

/* zeroed device allocation; exits naming `what` and the byte count on failure */
static inline void* dev_malloc(size_t bytes, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError(); /* clear the sticky-free allocation error */
        (void)cudaMemGetInfo(&free_b, &total_b);
        FATAL("out of device memory allocating %s (%zu bytes; %zu of %zu bytes free)", what ? what : "buffer", bytes,
              free_b, total_b);
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, main_stream()));
    return p;
}

static inline void dev_free(void* p) {
    if (p) { CUDA_CHECK(cudaFree(p)); }
}

/* host -> device; the host buffer may be reused as soon as this returns */
static inline void dev_memcpy_h2d(void* dst, const void* host_src, size_t bytes) {
    if (bytes == 0) { return; }
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, main_stream()));
}
/* device -> host; waits for all queued work and the copy. host_dst is usually pageable, and a device-to-host
 * cudaMemcpyAsync into pageable memory returns only when the copy is done (CUDA Runtime API, "API synchronization
 * behavior"): queued behind main-stream work that waits on a collective, it would block inside the driver, where
 * no watchdog runs. So the host first waits for the queued work through the watched wait (cuda_host_wait_stream:
 * a dead peer ends the job within --comm-timeout), and the copy then waits for nothing but itself. */
static inline void dev_memcpy_d2h(void* host_dst, const void* src, size_t bytes) {
    if (bytes == 0) { return; }
    if (cuda_state()->watchdog) { cuda_host_wait_stream(main_stream()); }
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, main_stream()));
    cuda_host_wait_stream(main_stream());
}
static inline void dev_memcpy_d2d(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) { return; }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, main_stream()));
}
static inline void dev_memset(void* dst, int value, size_t bytes) {
    if (bytes == 0) { return; }
    CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, main_stream()));
}
static inline void dev_synchronize(void) { cuda_host_wait_stream(main_stream()); }

/* free and total memory of the current device in bytes (cudaMemGetInfo) */
static inline void dev_memory_info(size_t* free_bytes, size_t* total_bytes) {
    CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

/* ---------------------------------------------------------------- pinned memory, events, async uploads */

typedef cudaEvent_t DevEvent;

/* page-locked host memory (zeroed); exits naming `what` on failure */
static inline void* host_malloc_pinned(size_t bytes, const char* what) {
    void* p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess || p == NULL) {
        FATAL("out of pinned host memory allocating %s (%zu bytes)", what ? what : "buffer", bytes);
    }
    memset(p, 0, bytes ? bytes : 1);
    return p;
}
static inline void host_free_pinned(void* p) {
    if (p) { CUDA_CHECK(cudaFreeHost(p)); }
}
/* an event without timing (cheaper to record and wait on) */
static inline DevEvent dev_event_create(void) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}
static inline void dev_event_destroy(DevEvent e) { CUDA_CHECK(cudaEventDestroy(e)); }
/* pinned host -> device on the copy stream, after the main stream's queued work; records `done` (see backend.h) */
static inline void dev_memcpy_h2d_async(void* dst, const void* host_src, size_t bytes, DevEvent done) {
    CudaBackendState* s = cuda_state();
    CUDA_CHECK(cudaEventRecord(s->copy_fork, s->stream));
    CUDA_CHECK(cudaStreamWaitEvent(s->copy_stream, s->copy_fork, 0));
    if (bytes) { CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s->copy_stream)); }
    CUDA_CHECK(cudaEventRecord(done, s->copy_stream));
}
/* the main stream waits for e; the host does not */
static inline void dev_wait_event(DevEvent e) { CUDA_CHECK(cudaStreamWaitEvent(main_stream(), e, 0)); }
/* the host waits for e */
static inline void dev_event_synchronize(DevEvent e) { cuda_host_wait_event(e); }
/* records e on the main stream */
static inline void dev_event_record(DevEvent e) { CUDA_CHECK(cudaEventRecord(e, main_stream())); }

/* timers (--profile-steps, llmc/profile.h): events with timing, recorded on the main stream */
typedef cudaEvent_t DevTimer;
static inline DevTimer dev_timer_create(void) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    return e;
}
static inline void dev_timer_destroy(DevTimer t) { CUDA_CHECK(cudaEventDestroy(t)); }
static inline void dev_timer_record(DevTimer t) { CUDA_CHECK(cudaEventRecord(t, main_stream())); }
static inline void dev_timer_synchronize(DevTimer t) { cuda_host_wait_event(t); }
/* ms between two recorded timers, both complete */
static inline double dev_timer_elapsed_ms(DevTimer a, DevTimer b) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return (double)ms;
}

/* ---------------------------------------------------------------- streams (llmc/backend.h) */

typedef cudaStream_t DevStream;
static inline DevStream dev_main_stream(void) { return main_stream(); }
/* a stream that does not synchronise with the main stream by itself */
static inline DevStream dev_stream_create(void) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}
static inline void dev_stream_destroy(DevStream s) { CUDA_CHECK(cudaStreamDestroy(s)); }
static inline void dev_event_record_on(DevEvent e, DevStream s) { CUDA_CHECK(cudaEventRecord(e, s)); }
static inline void dev_stream_wait_event(DevStream s, DevEvent e) { CUDA_CHECK(cudaStreamWaitEvent(s, e, 0)); }
/* 1 if e is complete, 0 if not yet; any other CUDA error exits */
static inline int dev_event_query(DevEvent e) {
    cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) { return 0; }
    CUDA_CHECK(q);
    return 1;
}
/* the host waits for s (through the watchdog when one is installed) */
static inline void dev_stream_synchronize(DevStream s) { cuda_host_wait_stream(s); }
static inline void dev_memcpy_h2d_on(void* dst, const void* host_src, size_t bytes, DevStream s) {
    if (bytes) { CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s)); }
}
static inline void dev_memcpy_d2h_on(void* host_dst, const void* src, size_t bytes, DevStream s) {
    if (bytes) { CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s)); }
}

/* host-wait watchdog (llmc/backend.h; the polling is cuda_host_wait_event in common.cuh) */
typedef void (*DevWaitWatchdog)(void* ctx, double waited_s);
static inline void dev_set_wait_watchdog(DevWaitWatchdog fn, void* ctx) {
    cuda_state()->watchdog = fn;
    cuda_state()->watchdog_ctx = ctx;
}
static inline DevWaitWatchdog dev_get_wait_watchdog(void** ctx) {
    if (ctx) { *ctx = cuda_state()->watchdog_ctx; }
    return cuda_state()->watchdog;
}

/* ---------------------------------------------------------------- graphs */

typedef cudaGraphExec_t DevGraph;
static inline int dev_graphs_supported(void) { return 1; }
/* main-stream work from now on is recorded (thread-local mode: this thread's unsafe calls are refused) */
static inline void dev_graph_begin_capture(void) {
    CUDA_CHECK(cudaStreamBeginCapture(main_stream(), cudaStreamCaptureModeThreadLocal));
}
/* ends the capture, instantiates it and frees the template graph */
static inline DevGraph dev_graph_end_capture(void) {
    cudaGraph_t graph = NULL;
    CUDA_CHECK(cudaStreamEndCapture(main_stream(), &graph));
    cudaGraphExec_t exec = NULL;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return exec;
}
static inline void dev_graph_launch(DevGraph g) { CUDA_CHECK(cudaGraphLaunch(g, main_stream())); }
static inline void dev_graph_destroy(DevGraph g) { CUDA_CHECK(cudaGraphExecDestroy(g)); }

/* ---------------------------------------------------------------- conversions */

/* host fp32 (n) -> device floatX (n), round to nearest-even (converted on the host in chunks) */
static inline void dev_upload_floats(floatX* dst, const float* host_src, size_t n) {
#if FLOATX_IS_FLOAT
    dev_memcpy_h2d(dst, host_src, n * sizeof(float));
#else
    const size_t chunk = (size_t)1 << 22;
    floatX* tmp = (floatX*)malloc_check((n < chunk ? n : chunk) * sizeof(floatX) + 1, "upload conversion buffer");
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        for (size_t i = 0; i < m; i++) { tmp[i] = from_float<floatX>(host_src[off + i]); }
        CUDA_CHECK(cudaMemcpyAsync(dst + off, tmp, m * sizeof(floatX), cudaMemcpyHostToDevice, main_stream()));
        CUDA_CHECK(cudaStreamSynchronize(main_stream())); /* tmp is reused by the next chunk */
    }
    free(tmp);
#endif
}

/* device floatX (n) -> host fp32 (n), exact; synchronises */
static inline void dev_download_floats(float* host_dst, const floatX* src, size_t n) {
#if FLOATX_IS_FLOAT
    dev_memcpy_d2h(host_dst, src, n * sizeof(float));
#else
    const size_t chunk = (size_t)1 << 22;
    floatX* tmp = (floatX*)malloc_check((n < chunk ? n : chunk) * sizeof(floatX) + 1, "download conversion buffer");
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        dev_memcpy_d2h(tmp, src + off, m * sizeof(floatX));
        for (size_t i = 0; i < m; i++) { host_dst[off + i] = to_float(tmp[i]); }
    }
    free(tmp);
#endif
}

#endif /* LLMC_CUDA_BACKEND_CUH */
