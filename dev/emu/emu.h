/*
 * dev/emu/emu.h -- a header-only CUDA-on-CPU execution layer, for TESTS ONLY.
 *
 * Compile kernels written for nvcc with  g++ -std=c++17 -DLLMC_BACKEND_CUDA -Idev/emu/include
 * -I/usr/local/cuda/include: llmc/cuda/common.cuh's <cuda_runtime.h> is then dev/emu/include/cuda_runtime.h,
 * which includes this header (and dev/emu/emu_mma.h). Every CUDA thread of
 * a block runs as its own fiber (a user-space coroutine with its own small stack); the blocks of
 * a grid run one after another on the calling OS thread. A fiber runs until it reaches a
 * synchronisation point (__syncthreads, a warp collective, __nanosleep) or exits; the warps of a
 * block run one at a time, each until all its lanes wait at __syncthreads or have exited (so a
 * missing __syncthreads between warps shows up as wrong data). The interleaving is deterministic:
 * two runs of the same program give bit-identical results. EMU_SCHEDULE=reverse runs warps
 * last-to-first (a second legal schedule, to expose races that the first one hides).
 *
 * What it provides (see dev/emu/README.md for the full list and for what it cannot show):
 *  - qualifiers __global__/__device__/__host__/__forceinline__/__launch_bounds__(...)/__shared__
 *    (static __shared__ arrays become function-local statics: one copy shared by the fibers of
 *    the running block; NOT poisoned between blocks, so reads of never-written static shared
 *    memory are not detected);
 *  - threadIdx/blockIdx/blockDim/gridDim (global variables the scheduler sets before resuming a
 *    fiber), warpSize;
 *  - LAUNCH(grid, block, smem, stream, kernel)(args...): validates the launch configuration like
 *    the driver (cudaErrorInvalidConfiguration / cudaErrorInvalidValue), checks that every pointer
 *    argument points into a cudaMalloc/cudaMallocHost allocation (or is NULL), then runs the grid
 *    synchronously. Template kernels may rely on argument deduction, as with <<<>>>.
 *  - DYNAMIC_SHARED(type, name): the block's dynamic shared memory. It ends exactly at a
 *    PROT_NONE guard page, so an access past the launch's smem bytes (rounded up to 16) faults
 *    and is reported naming the kernel; it is filled with 0xFF bytes (NaN for float/bf16/fp16)
 *    before every block, so reads of never-written dynamic shared memory poison the result.
 *  - __syncthreads (+ _count/_and/_or): a block barrier across fibers. Reported as kernel errors:
 *    threads waiting at different __syncthreads call sites (divergent barrier), threads that
 *    exit while others wait at a barrier, and deadlocks (with the state of the waiting threads).
 *  - __syncwarp, __shfl_sync/_up/_down/_xor, __ballot_sync, __any_sync, __all_sync,
 *    __reduce_{add,min,max}_sync, __activemask: warp rendezvous with CUDA Programming Guide
 *    semantics: exactly the lanes named in the mask take part. Reported as errors: the calling
 *    lane not in the mask; the mask naming lanes that do not exist (partial last warp) or that
 *    have exited; a lane reading (shuffling from) a lane that is not in the mask; lanes meeting
 *    with different masks or different intrinsics; width not a power of two.
 *  - atomics (atomicAdd/Sub/Exch/Min/Max/Inc/Dec/CAS/And/Or/Xor, incl. float, double, bf16,
 *    bf16x2, half, half2 atomicAdd), __ldg/__ldcs/__ldcg/__ldca/__ldlu/__ldcv, __stcs/__stcg/
 *    __stwb/__stwt, math intrinsics (__expf, __logf, __fdividef, rsqrtf, __tanhf: with their documented
 *    maximum error, see "math intrinsics"; __frcp_rn, __fmaf_rn, __saturatef, __float_as_uint, ...: the
 *    accurate libm function), min/max; EMU_FAST_MATH: plain tanhf/expf/logf in kernels as --use_fast_math.
 *  - a subset of the runtime API (cudaMalloc, cudaMemcpy*, cudaMemset*, streams, events,
 *    device properties of a fake "CPU emulator" device, cudaFuncSetAttribute, errors).
 *    cudaMalloc places each allocation so that its (16-byte rounded) end abuts a PROT_NONE guard
 *    page and a guard page precedes its first page; the rest of the first page and the up-to-15
 *    bytes of rounding slack are canaries (the 16-bit word 0x7FA5 repeated: a signalling NaN as
 *    fp32/bf16, so arithmetic on it yields different bits). New allocations are filled with the same
 *    pattern, so reads of uninitialised device memory poison results (NaN). Faults on guard pages are reported with
 *    the kernel, block, thread and the offset relative to the allocation; canaries are checked
 *    after every launch and at cudaFree. cudaMemcpy/cudaMemset check their device ranges.
 *  - stream capture and graphs (cudaStreamBeginCapture/EndCapture/IsCapturing, cudaGraphInstantiate,
 *    cudaGraphLaunch, cudaGraphExecDestroy, cudaGraphDestroy): while a stream is captured, kernel
 *    launches, cudaMemcpyAsync, cudaMemsetAsync, event records and emu::host_task on it are recorded
 *    (arguments by value, checked at capture time) instead of run; cudaGraphLaunch replays them in
 *    order. One capture at a time. A call that would synchronise with the capturing stream
 *    (cudaStreamSynchronize/Query of it, cudaDeviceSynchronize, synchronous cudaMemcpy/cudaMemset,
 *    cudaEventSynchronize/Query of an event recorded in the capture) returns
 *    cudaErrorStreamCaptureUnsupported and invalidates the capture, so cudaStreamEndCapture returns
 *    cudaErrorStreamCaptureInvalidated and no graph, as on CUDA. A captured copy must use pinned
 *    (cudaMallocHost) host memory: the graph reads it when replayed.
 *  - Errors detected inside a kernel print one line "emu: kernel ... error: ..." on stderr,
 *    abandon the grid, and make the error sticky (cudaErrorLaunchFailure / cudaErrorIllegalAddress
 *    returned by every later runtime call), like a faulting kernel on a GPU. emu::clear_errors()
 *    lets a test continue; EMU_ABORT_ON_ERROR=1 aborts at the first error (for gdb).
 *    A fault (SIGSEGV) cannot be recovered: it prints "not ok - emu: ..." and exits with status 70.
 *
 * Environment: EMU_STACK_KB (fiber stack size, default 64), EMU_NUM_SMS (reported SM count,
 * default 132), EMU_ABORT_ON_ERROR.
 *
 * Limits: one host thread may launch (no concurrent launches); no dynamic parallelism, no
 * cooperative launches / grid sync, no cross-block spin-waits (blocks run sequentially); no
 * textures/surfaces/constant-memory API; __CUDA_ARCH__ is not defined; address sanitizers do not
 * understand the fiber stacks. Context switches use a small x86-64 assembly routine
 * (-DEMU_USE_UCONTEXT or a non-x86-64 host selects the slower ucontext implementation).
 */
#ifndef LLMC_DEV_EMU_H
#define LLMC_DEV_EMU_H

#ifndef __cplusplus
#error "dev/emu/emu.h is C++17 (compile the kernels with g++ -std=c++17; see dev/emu/emu.mk)"
#endif

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>
#include <vector_functions.h>

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if !defined(__x86_64__) && !defined(EMU_USE_UCONTEXT)
#define EMU_USE_UCONTEXT 1
#endif

/* ---------------------------------------------------------------- qualifiers */
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif

/* ---------------------------------------------------------------- built-in variables */
inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
inline constexpr int warpSize = 32;

/* ---------------------------------------------------------------- context switch */
#ifndef EMU_USE_UCONTEXT
extern "C" void emu_ctx_switch(void** save_sp, void* new_sp);
extern "C" void emu_ctx_trampoline(void);
/* Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores
 * the stack pointer in *save_sp, switches to new_sp and restores the same set from there.
 * Weak so that any number of translation units may include this header. */
__asm__(
    ".text\n"
    ".weak emu_ctx_switch\n"
    ".hidden emu_ctx_switch\n"
    ".type emu_ctx_switch,@function\n"
    "emu_ctx_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_ctx_switch, .-emu_ctx_switch\n"
    ".weak emu_ctx_trampoline\n"
    ".hidden emu_ctx_trampoline\n"
    ".type emu_ctx_trampoline,@function\n"
    "emu_ctx_trampoline:\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size emu_ctx_trampoline, .-emu_ctx_trampoline\n");
#endif

namespace emu {

enum { F_READY = 0, F_BAR, F_WARP, F_DONE };
enum {
    WK_SYNCWARP = 1, WK_SHFL_IDX, WK_SHFL_UP, WK_SHFL_DOWN, WK_SHFL_XOR, WK_BALLOT, WK_ANY, WK_ALL,
    WK_REDUCE_ADD, WK_REDUCE_MIN, WK_REDUCE_MAX, WK_MMA, WK_LDMATRIX, WK_USER
};

struct AsyncCopy { void* dst; const void* src; size_t bytes; };

struct Fiber {
    void* sp = nullptr;                 /* saved stack pointer while suspended */
    char* mem = nullptr;                /* mapping: [guard page][stack] */
    size_t mem_len = 0;
    uint3 tid{0, 0, 0};
    int linear = 0, lane = 0, warp = 0;
    int state = F_DONE;
    /* block barrier */
    const char* bar_file = nullptr;
    int bar_line = 0, bar_kind = 0, bar_pred = 0, bar_result = 0;
    /* warp collective */
    int wkind = 0;
    unsigned wmask = 0;
    const void* win = nullptr;
    void* wout = nullptr;
    const char* wname = nullptr;
    const char* wfile = nullptr;
    int wline = 0;
    /* cp.async emulation (dev/emu/emu_mma.h) */
    std::vector<AsyncCopy> async_pending;
#ifdef EMU_USE_UCONTEXT
    ucontext_t uc;
#endif
};

struct Alloc {
    char* base = nullptr;   /* mapping start (guard page) */
    size_t map_len = 0;
    char* user = nullptr;   /* pointer handed out */
    size_t size = 0;        /* requested bytes */
    char* data_end = nullptr; /* first byte of the trailing guard page */
    unsigned long id = 0;
    bool pinned = false;    /* cudaMallocHost: plain host memory, no guards */
};

struct LaunchRecord { std::string name; dim3 grid, block; size_t smem; };

struct EventRec { double t_ms; bool captured; };

/* a graph from stream capture (cudaGraph_t) or its instantiation (cudaGraphExec_t): the recorded work in
 * capture order, each node a closure holding its arguments by value */
struct GraphObj {
    int magic;
    std::vector<std::string> names;
    std::vector<std::function<void()>> nodes;
};
static constexpr int kGraphMagic = 0x47524150, kGraphExecMagic = 0x47455845;

struct State {
    /* memory */
    std::map<uintptr_t, Alloc> allocs;   /* keyed by user pointer */
    unsigned long next_alloc_id = 1;
    size_t page = 4096;
    /* errors */
    cudaError_t last_error = cudaSuccess;
    cudaError_t sticky = cudaSuccess;
    std::string last_msg;
    int error_count = 0;
    int abort_on_error = -1;
    /* function attributes: kernel address -> max dynamic smem bytes */
    std::map<const void*, int> func_smem;
    /* running launch */
    bool in_launch = false;
    std::string kname;
    const char* kfile = "";
    int kline = 0;
    dim3 grid, block;
    size_t smem = 0;
    std::vector<Fiber*> pool;
    int nthreads = 0;
    Fiber* cur = nullptr;
    void* sched_sp = nullptr;
#ifdef EMU_USE_UCONTEXT
    ucontext_t sched_uc;
#endif
    void (*body)(void*) = nullptr;
    void* body_ctx = nullptr;
    bool block_failed = false;
    /* dynamic shared memory: [region ... smem_ptr .. guard) [guard page] */
    char* smem_region = nullptr;
    size_t smem_region_len = 0;
    char* smem_ptr = nullptr;
    char* smem_guard = nullptr;
    size_t stack_bytes = 0;
    int reverse_warps = -1;   /* EMU_SCHEDULE=reverse */
    bool sig_installed = false;
    std::vector<LaunchRecord> log;
    /* stream capture: work queued on capture_stream is recorded into capture_graph instead of run */
    const void* capture_stream = nullptr;
    GraphObj* capture_graph = nullptr;
    bool capture_invalidated = false;
    long graph_launches = 0;  /* cudaGraphLaunch calls that replayed (tests) */
};
inline State g;

static constexpr size_t kDefaultSmem = 48 * 1024;
static constexpr size_t kMaxSmemOptin = 227 * 1024;
static constexpr int kMaxThreads = 1024;

/* ---------------------------------------------------------------- helpers */
inline double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
inline int env_int(const char* name, int dflt) {
    const char* s = getenv(name);
    return (s && *s) ? atoi(s) : dflt;
}
/* "  &ns::kernel < float , 4 > " -> "ns::kernel<float,4>" */
inline std::string normalize_name(const char* s) {
    std::string r;
    for (; *s; s++) {
        if (*s != ' ' && *s != '\t' && *s != '\n') { r += *s; }
    }
    while (!r.empty() && (r[0] == '&' || r[0] == '(')) { r.erase(0, 1); }
    if (r.compare(0, 2, "::") == 0) { r.erase(0, 2); }
    return r;
}
inline std::string base_name(const std::string& n) { return n.substr(0, n.find('<')); }

/* the allocation containing [p, p+n) (one-past-the-end allowed for n == 0), or nullptr */
inline const Alloc* find_alloc(const void* p, size_t n = 0) {
    uintptr_t a = (uintptr_t)p;
    auto it = g.allocs.upper_bound(a);
    if (it == g.allocs.begin()) { return nullptr; }
    --it;
    const Alloc& al = it->second;
    uintptr_t u = (uintptr_t)al.user;
    if (a >= u && a + n <= u + al.size && a <= u + al.size) { return &al; }
    return nullptr;
}

/* ---------------------------------------------------------------- error reporting */
inline bool abort_on_error() {
    if (g.abort_on_error < 0) { g.abort_on_error = env_int("EMU_ABORT_ON_ERROR", 0); }
    return g.abort_on_error != 0;
}
inline std::string launch_context() {
    char buf[512];
    if (!g.in_launch) { return "host code"; }
    snprintf(buf, sizeof buf, "kernel %s (launched at %s:%d, grid (%u,%u,%u), block (%u,%u,%u), smem %zu)",
             g.kname.c_str(), g.kfile, g.kline, g.grid.x, g.grid.y, g.grid.z, g.block.x, g.block.y, g.block.z,
             g.smem);
    std::string s = buf;
    snprintf(buf, sizeof buf, ": block (%u,%u,%u)", blockIdx.x, blockIdx.y, blockIdx.z);
    s += buf;
    if (g.cur) {
        snprintf(buf, sizeof buf, " thread (%u,%u,%u) [warp %d lane %d]", g.cur->tid.x, g.cur->tid.y, g.cur->tid.z,
                 g.cur->warp, g.cur->lane);
        s += buf;
    }
    return s;
}
/* records an error; sticky errors are returned by every later runtime call */
inline void record_error(cudaError_t code, bool sticky, const char* fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    std::string full = "emu: " + launch_context() + ": error: " + msg;
    fprintf(stderr, "%s\n", full.c_str());
    fflush(stderr);
    g.last_msg = full;
    g.error_count++;
    g.last_error = code;
    if (sticky && g.sticky == cudaSuccess) { g.sticky = code; }
    if (abort_on_error()) { abort(); }
}
inline cudaError_t api_error(cudaError_t code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record_error(code, false, fmt, ap);
    va_end(ap);
    return code;
}
void yield_to_scheduler();
/* an error inside a kernel: abandons the grid. From a fiber it never returns. */
inline void kernel_fail_code(cudaError_t code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record_error(code, true, fmt, ap);
    va_end(ap);
    g.block_failed = true;
    if (g.cur) {
        for (;;) { yield_to_scheduler(); } /* the scheduler never resumes a failed block */
    }
}
#define EMU_FAIL(...) ::emu::kernel_fail_code(cudaErrorLaunchFailure, __VA_ARGS__)

/* ---------------------------------------------------------------- stream capture */
/* true while `stream` is being captured (the legacy NULL stream never is) */
inline bool capturing(const void* stream) { return g.capture_graph && stream && stream == g.capture_stream; }
inline void capture_record(const std::string& what, std::function<void()> fn) {
    g.capture_graph->names.push_back(what);
    g.capture_graph->nodes.push_back(std::move(fn));
}
/* a call that would synchronise with the capturing stream: refused, and the capture is invalidated */
inline cudaError_t capture_violation(const char* call) {
    g.capture_invalidated = true;
    return api_error(cudaErrorStreamCaptureUnsupported,
                     "%s during stream capture would synchronise with the capturing stream; the capture is invalidated",
                     call);
}

/* ---------------------------------------------------------------- fault handler */
inline void describe_address(char* out, size_t n, uintptr_t a) {
    for (auto& kv : g.allocs) {
        const Alloc& al = kv.second;
        if (al.pinned) { continue; }
        uintptr_t base = (uintptr_t)al.base, end = (uintptr_t)al.data_end, user = (uintptr_t)al.user;
        if (a >= base && a < base + g.page) {
            snprintf(out, n, "address %#lx is %lu bytes BEFORE the start of device allocation #%lu (%zu bytes at %p)",
                     (unsigned long)a, (unsigned long)(user - a), al.id, al.size, (void*)al.user);
            return;
        }
        if (a >= end && a < end + g.page) {
            snprintf(out, n,
                     "address %#lx is %lu bytes PAST THE END of device allocation #%lu (%zu bytes at %p; "
                     "index %lu bytes from its start)",
                     (unsigned long)a, (unsigned long)(a - user - al.size), al.id, al.size, (void*)al.user,
                     (unsigned long)(a - user));
            return;
        }
    }
    if (g.smem_guard && a >= (uintptr_t)g.smem_guard && a < (uintptr_t)g.smem_guard + g.page) {
        snprintf(out, n,
                 "dynamic shared memory access at byte offset %lu, but the launch requested %zu bytes",
                 (unsigned long)(a - (uintptr_t)g.smem_ptr), g.smem);
        return;
    }
    for (Fiber* f : g.pool) {
        if (f->mem && a >= (uintptr_t)f->mem && a < (uintptr_t)f->mem + g.page) {
            snprintf(out, n, "fiber stack overflow (stack %zu KiB; set EMU_STACK_KB larger)", g.stack_bytes / 1024);
            return;
        }
    }
    snprintf(out, n, "address %#lx is not in any device allocation or guard page (NULL, host or wild pointer)",
             (unsigned long)a);
}
inline void fault_handler(int sig, siginfo_t* si, void* ucv) {
    char what[512], line[1536];
    describe_address(what, sizeof what, (uintptr_t)si->si_addr);
    const char* rw = "access";
#if defined(__x86_64__) && defined(REG_ERR)
    ucontext_t* uc = (ucontext_t*)ucv;
    rw = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? "write" : "read";
#else
    (void)ucv;
#endif
    std::string ctx = launch_context();
    snprintf(line, sizeof line, "emu: %s: illegal memory %s (%s): %s\n", ctx.c_str(), rw,
             sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", what);
    ssize_t r = write(2, line, strlen(line));
    r = write(1, "not ok - ", 9);
    r = write(1, line, strlen(line));
    (void)r;
    _exit(70);
}
inline void install_fault_handler() {
    if (g.sig_installed) { return; }
    g.sig_installed = true;
    static char altstack[64 * 1024];
    stack_t ss;
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

/* ---------------------------------------------------------------- device memory */
/* Canary / "uninitialised" pattern: the 16-bit word 0x7FA5 repeated (bytes A5 7F). It is a SIGNALLING
 * NaN as fp32 (0x7FA57FA5) and as bf16 (0x7FA5), a NaN as fp16, so reads poison results; and any
 * arithmetic on it returns a QUIET NaN with different bits, so a write of a value computed from an
 * out-of-bounds read still damages the canary (a plain 0xFF NaN canary would be written back unchanged). */
inline unsigned char canary_byte(const void* a) { return ((uintptr_t)a & 1) ? 0x7F : 0xA5; }
inline void canary_fill(char* p, size_t n) {
    for (size_t i = 0; i < n; i++) { p[i] = (char)canary_byte(p + i); }
}
inline bool canary_ok(const Alloc& al, std::string* where) {
    if (al.pinned) { return true; }
    const unsigned char* lo = (const unsigned char*)al.base + g.page;
    const unsigned char* u = (const unsigned char*)al.user;
    for (const unsigned char* p = lo; p < u; p++) {
        if (*p != canary_byte(p)) {
            char b[256];
            snprintf(b, sizeof b, "device allocation #%lu (%zu bytes at %p) was written %ld bytes BEFORE its start",
                     al.id, al.size, (void*)al.user, (long)(u - p));
            *where = b;
            return false;
        }
    }
    for (const unsigned char* p = u + al.size; p < (const unsigned char*)al.data_end; p++) {
        if (*p != canary_byte(p)) {
            char b[256];
            snprintf(b, sizeof b,
                     "device allocation #%lu (%zu bytes at %p) was written %ld bytes PAST ITS END (byte offset %ld)",
                     al.id, al.size, (void*)al.user, (long)(p - (u + al.size)), (long)(p - u));
            *where = b;
            return false;
        }
    }
    return true;
}
/* checks the canaries of every allocation; returns false (and records a sticky error) on damage */
inline bool check_all_canaries() {
    for (auto& kv : g.allocs) {
        std::string w;
        if (!canary_ok(kv.second, &w)) {
            kernel_fail_code(cudaErrorIllegalAddress, "%s", w.c_str());
            /* repaint so that one overrun is reported once */
            Alloc& al = kv.second;
            canary_fill(al.base + g.page, al.user - (al.base + g.page));
            canary_fill(al.user + al.size, al.data_end - (al.user + al.size));
            return false;
        }
    }
    return true;
}
inline cudaError_t device_malloc(void** p, size_t size, bool pinned) {
    if (!p) { return api_error(cudaErrorInvalidValue, "cudaMalloc: NULL result pointer"); }
    if (g.sticky) { return g.sticky; }
    install_fault_handler();
    g.page = (size_t)sysconf(_SC_PAGESIZE);
    *p = nullptr;
    if (size == 0) { return cudaSuccess; }
    Alloc al;
    al.id = g.next_alloc_id++;
    al.size = size;
    if (pinned) {
        al.pinned = true;
        al.base = (char*)aligned_alloc(256, round_up(size, 256));
        if (!al.base) { return api_error(cudaErrorMemoryAllocation, "cudaMallocHost(%zu): out of memory", size); }
        al.user = al.base;
        al.data_end = al.base + size;
    } else {
        size_t rounded = round_up(size, 16);
        size_t data = round_up(rounded, g.page);
        al.map_len = data + 2 * g.page;
        void* m = mmap(nullptr, al.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) { return api_error(cudaErrorMemoryAllocation, "cudaMalloc(%zu): out of memory", size); }
        al.base = (char*)m;
        mprotect(al.base, g.page, PROT_NONE);
        al.data_end = al.base + g.page + data;
        mprotect(al.data_end, g.page, PROT_NONE);
        al.user = al.data_end - rounded;
        canary_fill(al.base + g.page, data); /* canaries and "uninitialised" poison (signalling NaN) */
    }
    g.allocs[(uintptr_t)al.user] = al;
    *p = al.user;
    return cudaSuccess;
}
inline cudaError_t device_free(void* p, bool pinned) {
    if (!p) { return cudaSuccess; }
    if (g.sticky) { return g.sticky; }
    auto it = g.allocs.find((uintptr_t)p);
    if (it == g.allocs.end() || it->second.pinned != pinned) {
        return api_error(cudaErrorInvalidValue, "%s(%p): not a live %s allocation (double free or wrong pointer)",
                         pinned ? "cudaFreeHost" : "cudaFree", p, pinned ? "cudaMallocHost" : "cudaMalloc");
    }
    std::string w;
    if (!canary_ok(it->second, &w)) {
        api_error(cudaErrorIllegalAddress, "cudaFree: %s", w.c_str());
        g.sticky = cudaErrorIllegalAddress;
    }
    if (pinned) { free(it->second.base); } else { munmap(it->second.base, it->second.map_len); }
    g.allocs.erase(it);
    return g.sticky ? g.sticky : cudaSuccess;
}
/* device range check for copies: returns true if [p, p+n) lies inside one allocation */
inline bool device_range(const void* p, size_t n) { return find_alloc(p, n) != nullptr; }

/* ---------------------------------------------------------------- fibers and scheduler */
inline void fiber_entry(void*);

inline Fiber* make_fiber() {
    Fiber* f = new Fiber();
    if (!g.stack_bytes) { g.stack_bytes = (size_t)env_int("EMU_STACK_KB", 64) * 1024; }
    g.page = (size_t)sysconf(_SC_PAGESIZE);
    f->mem_len = round_up(g.stack_bytes, g.page) + g.page;
    void* m = mmap(nullptr, f->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "emu: cannot map a fiber stack\n");
        exit(EXIT_FAILURE);
    }
    f->mem = (char*)m;
    mprotect(f->mem, g.page, PROT_NONE); /* overflow guard */
    return f;
}

#ifdef EMU_USE_UCONTEXT
inline void fiber_entry_uc() { fiber_entry(nullptr); }
#endif

inline void fiber_reset(Fiber* f) {
    char* top = f->mem + f->mem_len;
#ifdef EMU_USE_UCONTEXT
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->mem + g.page;
    f->uc.uc_stack.ss_size = f->mem_len - g.page;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)())fiber_entry_uc, 0);
    (void)top;
#else
    uint64_t* sp = (uint64_t*)(((uintptr_t)top & ~(uintptr_t)15) - 80);
    uint32_t mxcsr;
    uint16_t fcw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fcw));
    sp[0] = (uint64_t)mxcsr | ((uint64_t)fcw << 32);
    sp[1] = 0;                               /* r15 */
    sp[2] = 0;                               /* r14 */
    sp[3] = (uint64_t)(uintptr_t)&fiber_entry; /* r13: function */
    sp[4] = 0;                               /* r12: argument */
    sp[5] = 0;                               /* rbx */
    sp[6] = 0;                               /* rbp */
    sp[7] = (uint64_t)(uintptr_t)&emu_ctx_trampoline;
    f->sp = sp;
#endif
    f->state = F_READY;
    f->wkind = 0;
    f->wmask = 0;
    f->async_pending.clear();
}

inline void switch_to(Fiber* f) {
    g.cur = f;
    threadIdx = f->tid;
#ifdef EMU_USE_UCONTEXT
    swapcontext(&g.sched_uc, &f->uc);
#else
    emu_ctx_switch(&g.sched_sp, f->sp);
#endif
    g.cur = nullptr;
}
inline void yield_to_scheduler() {
    Fiber* f = g.cur;
#ifdef EMU_USE_UCONTEXT
    swapcontext(&f->uc, &g.sched_uc);
#else
    emu_ctx_switch(&f->sp, g.sched_sp);
#endif
}

inline const char* wkind_name(int k) {
    switch (k) {
        case WK_SYNCWARP: return "__syncwarp";
        case WK_SHFL_IDX: return "__shfl_sync";
        case WK_SHFL_UP: return "__shfl_up_sync";
        case WK_SHFL_DOWN: return "__shfl_down_sync";
        case WK_SHFL_XOR: return "__shfl_xor_sync";
        case WK_BALLOT: return "__ballot_sync";
        case WK_ANY: return "__any_sync";
        case WK_ALL: return "__all_sync";
        case WK_REDUCE_ADD: return "__reduce_add_sync";
        case WK_REDUCE_MIN: return "__reduce_min_sync";
        case WK_REDUCE_MAX: return "__reduce_max_sync";
        case WK_MMA: return "mma (warp-collective)";
        case WK_LDMATRIX: return "ldmatrix (warp-collective)";
        default: return "warp collective";
    }
}

inline Fiber* lane_fiber(int warp, int lane) {
    int i = warp * 32 + lane;
    return i < g.nthreads ? g.pool[i] : nullptr;
}
inline unsigned existing_lanes(int warp) {
    int n = g.nthreads - warp * 32;
    return n >= 32 ? 0xffffffffu : ((1u << n) - 1u);
}

inline void on_thread_exit(Fiber* f);

inline void fiber_entry(void*) {
    g.body(g.body_ctx);
    Fiber* f = g.cur;
    on_thread_exit(f);
    f->state = F_DONE;
    yield_to_scheduler();
    __builtin_trap(); /* a finished fiber is never resumed */
}

inline std::string fiber_state_str(Fiber* f) {
    char b[512];
    switch (f->state) {
        case F_READY: snprintf(b, sizeof b, "runnable"); break;
        case F_DONE: snprintf(b, sizeof b, "exited"); break;
        case F_BAR: snprintf(b, sizeof b, "waiting at __syncthreads (%s:%d)", f->bar_file, f->bar_line); break;
        default:
            snprintf(b, sizeof b, "waiting in %s(mask 0x%08x) at %s:%d", f->wname, f->wmask, f->wfile, f->wline);
    }
    char t[600];
    snprintf(t, sizeof t, "thread (%u,%u,%u) [warp %d lane %d] %s", f->tid.x, f->tid.y, f->tid.z, f->warp, f->lane, b);
    return t;
}

/* runs the current block to completion; returns false if it failed */
inline bool run_block() {
    const int n = g.nthreads;
    for (int i = 0; i < n; i++) { fiber_reset(g.pool[i]); }
    g.block_failed = false;
    for (;;) {
        /* Warp-at-a-time, depth-first: a warp runs until every lane waits at __syncthreads or has
         * exited (its warp collectives complete on the way), then the next warp runs. This is a legal
         * GPU schedule (warps advance independently between block barriers) that exposes missing
         * __syncthreads between warps; EMU_SCHEDULE=reverse runs the warps last-to-first. */
        bool progressed = false;
        const int nwarps = (n + 31) / 32;
        for (int w0 = 0; w0 < nwarps; w0++) {
            const int w = g.reverse_warps ? nwarps - 1 - w0 : w0;
            const int lo = w * 32, hi = std::min(n, lo + 32);
            for (bool again = true; again;) {
                again = false;
                for (int i = lo; i < hi; i++) {
                    Fiber* f = g.pool[i];
                    if (f->state == F_READY) {
                        switch_to(f);
                        progressed = again = true;
                        if (g.block_failed) { return false; }
                    }
                }
            }
        }
        if (progressed) { continue; }
        int ndone = 0, nbar = 0, nwarp = 0;
        Fiber *first_bar = nullptr, *first_done = nullptr, *first_warp = nullptr;
        for (int i = 0; i < n; i++) {
            Fiber* f = g.pool[i];
            if (f->state == F_DONE) { ndone++; if (!first_done) first_done = f; }
            else if (f->state == F_BAR) { nbar++; if (!first_bar) first_bar = f; }
            else if (f->state == F_WARP) { nwarp++; if (!first_warp) first_warp = f; }
        }
        if (ndone == n) { break; }
        if (nwarp == 0 && nbar > 0) {
            if (ndone > 0) {
                EMU_FAIL("divergent __syncthreads: %d of %d threads wait at %s:%d but %d threads exited without "
                         "reaching it (first: %s)",
                         nbar, n, first_bar->bar_file, first_bar->bar_line, ndone, fiber_state_str(first_done).c_str());
                return false;
            }
            for (int i = 0; i < n; i++) {
                Fiber* f = g.pool[i];
                if (f->bar_line != first_bar->bar_line || strcmp(f->bar_file, first_bar->bar_file) != 0 ||
                    f->bar_kind != first_bar->bar_kind) {
                    EMU_FAIL("divergent __syncthreads: threads wait at different barriers: %s; %s",
                             fiber_state_str(first_bar).c_str(), fiber_state_str(f).c_str());
                    return false;
                }
            }
            int count = 0;
            for (int i = 0; i < n; i++) { count += g.pool[i]->bar_pred != 0; }
            for (int i = 0; i < n; i++) {
                g.pool[i]->bar_result = count;
                g.pool[i]->state = F_READY;
            }
            continue;
        }
        /* deadlock: describe the first waiting warp collective and what its lanes do */
        std::string d;
        if (first_warp) {
            d = fiber_state_str(first_warp);
            for (int j = 0; j < 32; j++) {
                if (!((first_warp->wmask >> j) & 1)) { continue; }
                Fiber* o = lane_fiber(first_warp->warp, j);
                if (o && !(o->state == F_WARP && o->wmask == first_warp->wmask && o->wkind == first_warp->wkind)) {
                    d += "; but " + fiber_state_str(o);
                    break;
                }
            }
        }
        if (first_bar) { d += "; and " + fiber_state_str(first_bar); }
        EMU_FAIL("deadlock: no thread of the block can proceed: %s", d.c_str());
        return false;
    }
    /* cp.async copies never waited for */
    for (int i = 0; i < n; i++) {
        if (!g.pool[i]->async_pending.empty()) {
            g.cur = g.pool[i];
            EMU_FAIL("thread exited with %zu cp.async copies never waited for (cp_async_wait_all missing)",
                     g.pool[i]->async_pending.size());
            g.cur = nullptr;
            return false;
        }
    }
    return true;
}

/* a lane leaving while others of its warp wait for it in a collective is an error */
inline void on_thread_exit(Fiber* f) {
    for (int j = 0; j < 32; j++) {
        Fiber* o = lane_fiber(f->warp, j);
        if (o && o != f && o->state == F_WARP && ((o->wmask >> f->lane) & 1)) {
            EMU_FAIL("thread exited while lane %d waits for it in %s(mask 0x%08x) at %s:%d", o->lane, o->wname,
                     o->wmask, o->wfile, o->wline);
        }
    }
}

/* ---------------------------------------------------------------- warp collectives */
/* fn is called once, by the last lane to arrive, with the participating lanes' fibers
 * (L[j] == nullptr for lanes not in mask); it reads L[j]->win and writes L[j]->wout. */
using WarpFn = void (*)(Fiber** L, unsigned mask);

inline void warp_collective(int kind, unsigned mask, const void* in, void* out, WarpFn fn, const char* file,
                            int line) {
    Fiber* f = g.cur;
    const char* name = wkind_name(kind);
    if (!f) {
        fprintf(stderr, "emu: %s called outside a kernel (%s:%d)\n", name, file, line);
        abort();
    }
    if (!((mask >> f->lane) & 1)) {
        EMU_FAIL("%s at %s:%d: the calling lane %d is not in mask 0x%08x", name, file, line, f->lane, mask);
    }
    unsigned exist = existing_lanes(f->warp);
    if (mask & ~exist) {
        EMU_FAIL("%s at %s:%d: mask 0x%08x names lanes that do not exist (block of %d threads: warp %d has lanes "
                 "0x%08x)",
                 name, file, line, mask, g.nthreads, f->warp, exist);
    }
    Fiber* L[32];
    bool complete = true;
    for (int j = 0; j < 32; j++) {
        L[j] = nullptr;
        if (!((mask >> j) & 1)) { continue; }
        Fiber* o = lane_fiber(f->warp, j);
        L[j] = o;
        if (o == f) { continue; }
        if (o->state == F_DONE) {
            EMU_FAIL("%s at %s:%d: lane %d named in mask 0x%08x has already exited", name, file, line, j, mask);
        }
        if (o->state == F_WARP) {
            if (o->wmask != mask || o->wkind != kind) {
                if ((o->wmask >> f->lane) & 1) {
                    EMU_FAIL("warp collectives do not match: this lane calls %s(mask 0x%08x) at %s:%d while lane %d "
                             "waits in %s(mask 0x%08x) at %s:%d",
                             name, mask, file, line, j, o->wname, o->wmask, o->wfile, o->wline);
                }
                complete = false;
            }
        } else {
            complete = false;
        }
    }
    f->wkind = kind;
    f->wmask = mask;
    f->win = in;
    f->wout = out;
    f->wname = name;
    f->wfile = file;
    f->wline = line;
    if (complete) {
        fn(L, mask);
        for (int j = 0; j < 32; j++) {
            if (L[j]) {
                L[j]->state = F_READY;
                L[j]->wkind = 0;
            }
        }
        return;
    }
    f->state = F_WARP;
    yield_to_scheduler();
}

inline void syncwarp_fn(Fiber**, unsigned) {}

struct ShflIn {
    const void* v;
    int arg;
    int width;
    size_t bytes;
};
inline void shfl_fn(Fiber** L, unsigned mask) {
    for (int j = 0; j < 32; j++) {
        if (!L[j]) { continue; }
        const ShflIn* in = (const ShflIn*)L[j]->win;
        int w = in->width;
        int kind = L[j]->wkind;
        if (w < 1 || w > 32 || (w & (w - 1))) {
            EMU_FAIL("%s: width %d is not a power of two in [1, 32]", wkind_name(kind), w);
        }
        int base = j & ~(w - 1);
        int src = j;
        switch (kind) {
            case WK_SHFL_IDX: src = base + (((in->arg % w) + w) % w); break;
            case WK_SHFL_UP: src = (j - base - in->arg >= 0) ? j - in->arg : j; break;
            case WK_SHFL_DOWN: src = (j - base + in->arg < w) ? j + in->arg : j; break;
            default: {
                int s = j ^ in->arg;
                src = (s >= 0 && s < 32 && (s / w) <= (j / w)) ? s : j;
            }
        }
        if (!((mask >> src) & 1)) {
            EMU_FAIL("%s: lane %d reads lane %d, which is not in mask 0x%08x (undefined value on a GPU)",
                     wkind_name(kind), j, src, mask);
        }
        const ShflIn* sin = (const ShflIn*)L[src]->win;
        if (sin->bytes != in->bytes) { EMU_FAIL("%s: lanes shuffle values of different sizes", wkind_name(kind)); }
        memcpy(L[j]->wout, sin->v, in->bytes);
    }
}
inline void vote_fn(Fiber** L, unsigned mask) {
    unsigned bits = 0;
    for (int j = 0; j < 32; j++) {
        if (L[j] && *(const int*)L[j]->win) { bits |= 1u << j; }
    }
    for (int j = 0; j < 32; j++) {
        if (!L[j]) { continue; }
        unsigned r = bits;
        if (L[j]->wkind == WK_ANY) { r = bits != 0; }
        if (L[j]->wkind == WK_ALL) { r = bits == mask; }
        *(unsigned*)L[j]->wout = r;
    }
}
template <class T>
inline void reduce_fn(Fiber** L, unsigned) {
    bool have = false;
    T acc = 0;
    int kind = 0;
    for (int j = 0; j < 32; j++) {
        if (!L[j]) { continue; }
        T v = *(const T*)L[j]->win;
        kind = L[j]->wkind;
        if (!have) { acc = v; have = true; continue; }
        if (kind == WK_REDUCE_ADD) { acc += v; }
        else if (kind == WK_REDUCE_MIN) { acc = v < acc ? v : acc; }
        else { acc = v > acc ? v : acc; }
    }
    for (int j = 0; j < 32; j++) {
        if (L[j]) { *(T*)L[j]->wout = acc; }
    }
}

/* ---------------------------------------------------------------- block barrier */
inline int syncthreads_impl(int kind, int pred, const char* file, int line) {
    Fiber* f = g.cur;
    if (!f) {
        fprintf(stderr, "emu: __syncthreads called outside a kernel (%s:%d)\n", file, line);
        abort();
    }
    f->bar_file = file;
    f->bar_line = line;
    f->bar_kind = kind;
    f->bar_pred = pred;
    f->state = F_BAR;
    yield_to_scheduler();
    return f->bar_result;
}

/* ---------------------------------------------------------------- launch */
inline int func_max_smem(const void* fn) {
    auto it = g.func_smem.find(fn);
    return it != g.func_smem.end() ? it->second : (int)kDefaultSmem;
}

inline void ensure_smem_region() {
    if (g.smem_region) { return; }
    g.page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data = round_up(kMaxSmemOptin, g.page);
    g.smem_region_len = data + g.page;
    void* m = mmap(nullptr, g.smem_region_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "emu: cannot map shared memory\n");
        exit(EXIT_FAILURE);
    }
    g.smem_region = (char*)m;
    g.smem_guard = g.smem_region + data;
    mprotect(g.smem_guard, g.page, PROT_NONE);
}

/* validates the configuration; false (with a non-sticky error) if the driver would refuse it */
inline bool launch_check(const void* fn, const std::string& name, dim3 grid, dim3 block, size_t smem, const char* file, int line) {
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    const char* why = nullptr;
    cudaError_t code = cudaErrorInvalidConfiguration;
    char buf[256];
    if (g.in_launch) {
        why = "kernel launched from inside a kernel (dynamic parallelism is not emulated)";
    } else if (nt == 0 || nt > (unsigned long long)kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64) {
        snprintf(buf, sizeof buf, "block (%u,%u,%u) is not a valid block shape (1..1024 threads, z <= 64)", block.x,
                 block.y, block.z);
        why = buf;
    } else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
               grid.z > 65535) {
        snprintf(buf, sizeof buf, "grid (%u,%u,%u) is not a valid grid shape", grid.x, grid.y, grid.z);
        why = buf;
    } else if (smem > (size_t)func_max_smem(fn) || smem > kMaxSmemOptin) {
        snprintf(buf, sizeof buf,
                 "dynamic shared memory %zu bytes exceeds the kernel's limit %d bytes (default 48 KiB; raise with "
                 "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), at most 227 KiB)",
                 smem, std::min(func_max_smem(fn), (int)kMaxSmemOptin));
        why = buf;
        code = cudaErrorInvalidValue;
    }
    if (why) {
        api_error(code, "launch of %s at %s:%d refused: %s", name.c_str(), file, line, why);
        return false;
    }
    return true;
}

template <class T>
inline bool check_pointer_arg(const T& v, int idx, const std::string& name) {
    if constexpr (std::is_pointer_v<T>) {
        if (v != nullptr && !find_alloc((const void*)v, 0)) {
            char w[512];
            describe_address(w, sizeof w, (uintptr_t)v);
            std::string ctx = name;
            EMU_FAIL("argument %d of kernel %s is a pointer %p that is not device memory (%s)", idx, ctx.c_str(),
                     (const void*)v, w);
            return false;
        }
    }
    return true;
}

inline void run_grid() {
    const int n = (int)(g.block.x * g.block.y * g.block.z);
    if (g.reverse_warps < 0) {
        const char* sch = getenv("EMU_SCHEDULE");
        g.reverse_warps = (sch && strcmp(sch, "reverse") == 0) ? 1 : 0;
    }
    while ((int)g.pool.size() < n) { g.pool.push_back(make_fiber()); }
    g.nthreads = n;
    ensure_smem_region();
    size_t sm = round_up(g.smem, 16);
    g.smem_ptr = g.smem_guard - sm;
    for (int i = 0; i < n; i++) {
        Fiber* f = g.pool[i];
        f->linear = i;
        f->tid = make_uint3(i % g.block.x, (i / g.block.x) % g.block.y, i / (g.block.x * g.block.y));
        f->lane = i % 32;
        f->warp = i / 32;
    }
    gridDim = g.grid;
    blockDim = g.block;
    for (unsigned z = 0; z < g.grid.z; z++) {
        for (unsigned y = 0; y < g.grid.y; y++) {
            for (unsigned x = 0; x < g.grid.x; x++) {
                blockIdx = make_uint3(x, y, z);
                if (sm) { memset(g.smem_ptr, 0xFF, sm); }
                if (!run_block()) { return; }
            }
        }
    }
}

template <class... P>
struct Launch {
    void (*fn)(P...);
    dim3 grid, block;
    size_t smem;
    const char* name;
    const char* file;
    int line;
    cudaStream_t stream;

    /* parameters typed like the kernel's, so arguments convert exactly as with <<<>>> (NULL, int->size_t) */
    void operator()(P... p) const {
        std::string nm = normalize_name(name);
        if (g.sticky) { return; }
        if (capturing(stream)) {
            /* recorded with its arguments by value (as a kernel node); the configuration is checked now */
            if (!launch_check((const void*)fn, nm, grid, block, smem, file, line)) {
                g.capture_invalidated = true;
                return;
            }
            Launch replay = *this;
            replay.stream = nullptr; /* a replay runs the grid */
            std::tuple<std::decay_t<P>...> args(p...);
            capture_record(nm, [replay, args]() { std::apply(replay, args); });
            return;
        }
        if (!launch_check((const void*)fn, nm, grid, block, smem, file, line)) { return; }
        install_fault_handler();
        g.in_launch = true;
        g.kname = nm;
        g.kfile = file;
        g.kline = line;
        g.grid = grid;
        g.block = block;
        g.smem = smem;
        g.cur = nullptr;
        g.block_failed = false;
        g.log.push_back(LaunchRecord{nm, grid, block, smem});
        std::tuple<std::decay_t<P>...> args(p...);
        bool ok = true;
        std::apply([&](const auto&... v) {
            int idx = 0;
            ((ok = ok && check_pointer_arg(v, idx++, nm)), ...);
        }, args);
        if (ok) {
            struct Ctx { void (*fn)(P...); std::tuple<std::decay_t<P>...>* args; } ctx{fn, &args};
            g.body = [](void* c) {
                Ctx* x = (Ctx*)c;
                std::apply(x->fn, *x->args); /* copies the arguments: each thread has its own parameters */
            };
            g.body_ctx = &ctx;
            run_grid();
            if (!g.block_failed) { check_all_canaries(); }
        }
        g.in_launch = false;
        g.cur = nullptr;
        g.body = nullptr;
    }
};
template <class... P>
inline Launch<P...> make_launch(void (*fn)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char* name,
                                const char* file, int line) {
    return Launch<P...>{fn, grid, block, smem, name, file, line, stream};
}

/* ---------------------------------------------------------------- test helpers */
inline void clear_errors() {
    g.sticky = cudaSuccess;
    g.last_error = cudaSuccess;
    g.last_msg.clear();
}
inline int error_count() { return g.error_count; }
inline const std::string& last_message() { return g.last_msg; }
inline const std::vector<LaunchRecord>& launch_log() { return g.log; }
/* number of launches since log index `from` whose kernel name contains `sub` */
inline int launches_matching(const char* sub, size_t from = 0) {
    int c = 0;
    for (size_t i = from; i < g.log.size(); i++) { c += g.log[i].name.find(sub) != std::string::npos; }
    return c;
}
/* host work queued on `stream` (what cudaLaunchHostFunc would be): runs now, or is recorded while the stream
 * is captured and runs when the graph is replayed. Used by the host-loop matmuls of llmc/cuda/matmul.cuh. */
inline void host_task(cudaStream_t stream, const char* what, std::function<void()> fn) {
    if (g.sticky) { return; }
    if (capturing(stream)) {
        capture_record(what, std::move(fn));
        return;
    }
    fn();
}
inline long graph_launches() { return g.graph_launches; }
inline size_t live_allocations() {
    size_t c = 0;
    for (auto& kv : g.allocs) { c += !kv.second.pinned; }
    return c;
}

} /* namespace emu */

/* ---------------------------------------------------------------- launch macros */
/* kernel is the LAST argument so template-ids with commas work */
/* kernel must name one function (a kernel or a full template-id; no template argument deduction) */
#define LAUNCH(grid, block, smem, stream, ...) \
    ::emu::make_launch(__VA_ARGS__, (grid), (block), (smem), (stream), #__VA_ARGS__, __FILE__, __LINE__)
#define DYNAMIC_SHARED(type, name) type* const name = reinterpret_cast<type*>(::emu::g.smem_ptr)

/* ---------------------------------------------------------------- block / warp intrinsics */
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::emu::syncthreads_impl(0, 0, file, line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::emu::syncthreads_impl(1, pred != 0, file, line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::emu::syncthreads_impl(2, pred != 0, file, line) == (int)::emu::g.nthreads;
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::emu::syncthreads_impl(3, pred != 0, file, line) != 0;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
/* a yield point: lets the other threads of the block run (spin-waits inside a block make progress) */
inline void __nanosleep(unsigned) {
    if (::emu::g.cur) { ::emu::yield_to_scheduler(); }
}
inline long long clock64() { return (long long)(::emu::now_ms() * 1e6); }
[[noreturn]] inline void __trap() {
    ::emu::kernel_fail_code(cudaErrorLaunchFailure, "__trap() executed");
    abort();
}

inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::emu::warp_collective(::emu::WK_SYNCWARP, mask, nullptr, nullptr, ::emu::syncwarp_fn, file, line);
}
/* lanes of the calling warp that exist and have not exited (an approximation: under independent
 * thread scheduling the hardware answer depends on convergence) */
inline unsigned __activemask() {
    ::emu::Fiber* f = ::emu::g.cur;
    unsigned m = 0;
    for (int j = 0; j < 32; j++) {
        ::emu::Fiber* o = ::emu::lane_fiber(f->warp, j);
        if (o && o->state != ::emu::F_DONE) { m |= 1u << j; }
    }
    return m;
}
namespace emu {
template <class T>
inline T shfl_generic(int kind, unsigned mask, T var, int arg, int width, const char* file, int line) {
    static_assert(std::is_trivially_copyable_v<T>, "shuffled type must be trivially copyable");
    T out;
    memcpy(&out, &var, sizeof(T));
    ShflIn in{&var, arg, width, sizeof(T)};
    warp_collective(kind, mask, &in, &out, shfl_fn, file, line);
    return out;
}
} /* namespace emu */
template <class T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
    return ::emu::shfl_generic(::emu::WK_SHFL_IDX, mask, var, srcLane, width, file, line);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    return ::emu::shfl_generic(::emu::WK_SHFL_UP, mask, var, (int)delta, width, file, line);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
    return ::emu::shfl_generic(::emu::WK_SHFL_DOWN, mask, var, (int)delta, width, file, line);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32, const char* file = __builtin_FILE(),
                         int line = __builtin_LINE()) {
    return ::emu::shfl_generic(::emu::WK_SHFL_XOR, mask, var, laneMask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    int p = pred != 0;
    unsigned r = 0;
    ::emu::warp_collective(::emu::WK_BALLOT, mask, &p, &r, ::emu::vote_fn, file, line);
    return r;
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    int p = pred != 0;
    unsigned r = 0;
    ::emu::warp_collective(::emu::WK_ANY, mask, &p, &r, ::emu::vote_fn, file, line);
    return (int)r;
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    int p = pred != 0;
    unsigned r = 0;
    ::emu::warp_collective(::emu::WK_ALL, mask, &p, &r, ::emu::vote_fn, file, line);
    return (int)r;
}
#define EMU_DEFINE_REDUCE(NAME, KIND, T)                                                                 \
    inline T NAME(unsigned mask, T v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) { \
        T r = v;                                                                                         \
        ::emu::warp_collective(KIND, mask, &v, &r, ::emu::reduce_fn<T>, file, line);                     \
        return r;                                                                                        \
    }
EMU_DEFINE_REDUCE(__reduce_add_sync, ::emu::WK_REDUCE_ADD, unsigned)
EMU_DEFINE_REDUCE(__reduce_add_sync, ::emu::WK_REDUCE_ADD, int)
EMU_DEFINE_REDUCE(__reduce_min_sync, ::emu::WK_REDUCE_MIN, unsigned)
EMU_DEFINE_REDUCE(__reduce_min_sync, ::emu::WK_REDUCE_MIN, int)
EMU_DEFINE_REDUCE(__reduce_max_sync, ::emu::WK_REDUCE_MAX, unsigned)
EMU_DEFINE_REDUCE(__reduce_max_sync, ::emu::WK_REDUCE_MAX, int)
#undef EMU_DEFINE_REDUCE

/* ---------------------------------------------------------------- atomics */
namespace emu { template <class T> struct ident { using type = T; }; }
#define EMU_V typename ::emu::ident<T>::type
/* fibers never interleave inside a function, so plain read-modify-write is atomic */
template <class T>
inline T atomicAdd(T* p, EMU_V v) {
    T old = *p;
    *p = old + v;
    return old;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    __nv_bfloat16 old = *p;
    *p = __float2bfloat16_rn(__bfloat162float(old) + __bfloat162float(v));
    return old;
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    __nv_bfloat162 old = *p;
    p->x = __float2bfloat16_rn(__bfloat162float(old.x) + __bfloat162float(v.x));
    p->y = __float2bfloat16_rn(__bfloat162float(old.y) + __bfloat162float(v.y));
    return old;
}
inline __half atomicAdd(__half* p, __half v) {
    __half old = *p;
    *p = __float2half_rn(__half2float(old) + __half2float(v));
    return old;
}
inline __half2 atomicAdd(__half2* p, __half2 v) {
    __half2 old = *p;
    p->x = __float2half_rn(__half2float(old.x) + __half2float(v.x));
    p->y = __float2half_rn(__half2float(old.y) + __half2float(v.y));
    return old;
}
template <class T> inline T atomicSub(T* p, EMU_V v) { T o = *p; *p = o - v; return o; }
template <class T> inline T atomicExch(T* p, EMU_V v) { T o = *p; *p = v; return o; }
template <class T> inline T atomicMin(T* p, EMU_V v) { T o = *p; *p = v < o ? v : o; return o; }
template <class T> inline T atomicMax(T* p, EMU_V v) { T o = *p; *p = v > o ? v : o; return o; }
template <class T> inline T atomicAnd(T* p, EMU_V v) { T o = *p; *p = o & v; return o; }
template <class T> inline T atomicOr(T* p, EMU_V v) { T o = *p; *p = o | v; return o; }
template <class T> inline T atomicXor(T* p, EMU_V v) { T o = *p; *p = o ^ v; return o; }
template <class T> inline T atomicCAS(T* p, EMU_V cmp, EMU_V v) { T o = *p; if (o == cmp) { *p = v; } return o; }
inline unsigned atomicInc(unsigned* p, unsigned lim) { unsigned o = *p; *p = (o >= lim) ? 0 : o + 1; return o; }
inline unsigned atomicDec(unsigned* p, unsigned lim) {
    unsigned o = *p;
    *p = (o == 0 || o > lim) ? lim : o - 1;
    return o;
}

#undef EMU_V

/* ---------------------------------------------------------------- cache-hinted loads/stores */
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, typename ::emu::ident<T>::type v) { *p = v; }
template <class T> inline void __stcg(T* p, typename ::emu::ident<T>::type v) { *p = v; }
template <class T> inline void __stwb(T* p, typename ::emu::ident<T>::type v) { *p = v; }
template <class T> inline void __stwt(T* p, typename ::emu::ident<T>::type v) { *p = v; }

/* ---------------------------------------------------------------- math intrinsics */
/* The GPU's fast approximations. Five of them, the ones llmc/cuda uses, are modelled with their documented error
 * (CUDA C++ Programming Guide, "Mathematical Functions": the single-precision intrinsic table, and rsqrtf in the
 * standard-function table; __tanhf: PTX ISA, tanh.approx.f32):
 *   __expf(x)        2 + floor(|1.173 x|) ulp
 *   __logf(x)        x in [0.5, 2]: 2^-21.41 absolute; else 3 ulp
 *   __fdividef(a, b) 2 ulp for 2^-126 <= |b| <= 2^126; 0 for 2^126 < |b| < 2^128 (the documented underflow)
 *   rsqrtf(x)        2 ulp
 *   __tanhf(x)       2^-11 relative (tanh.approx.f32's maximum relative error is about 2^-10.99)
 * Model: the libm result moved by the full bound, with a sign hashed from the argument's bits (and the function),
 * so every call errs by the documented maximum, deterministically (runs stay bit-identical). That is pessimistic:
 * the hardware's error is usually smaller; a tolerance that holds under this model holds on the GPU. In host code
 * (no kernel running) they are exact. The other intrinsics are the accurate libm functions.
 * --use_fast_math (nvcc turns plain tanhf, expf, logf into __tanhf, __expf, __logf in device code; the Makefile
 * passes it to BF16/FP16 builds only): the emulator's BF16 builds define EMU_FAST_MATH (dev/emu/emu.mk), and then
 * plain tanhf/expf/logf called from a kernel get the intrinsic's error too (macros at the end of this file). Not
 * modelled: fast math's x/y -> __fdividef (an operator), exp2f (2 ulp in both modes), flush-to-zero of denormals.
 * EMU_EXACT_MATH=1 in the environment turns the model off (every intrinsic exact, as before). */
namespace emu {
inline bool math_model_on() {
    static const int off = env_int("EMU_EXACT_MATH", 0);
    return g.cur != nullptr && !off;
}
/* +1 or -1 from the argument bits and a per-function salt (splitmix64's finaliser) */
inline float math_err_sign(float x, float y, uint64_t salt) {
    uint32_t a, b;
    memcpy(&a, &x, 4);
    memcpy(&b, &y, 4);
    uint64_t h = ((uint64_t)a << 32 | b) ^ (salt * 0x9E3779B97F4A7C15ull);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    return (h & 1) ? 1.0f : -1.0f;
}
/* exact moved by `ulps` units in the last place of exact (ulp of a float: 2^(e-23), at least the smallest
 * denormal), toward the hashed sign; non-finite and zero results are left alone */
inline float math_err_ulp(float exact, double ulps, float x, float y, uint64_t salt) {
    if (!std::isfinite(exact) || exact == 0.0f) { return exact; }
    int e;
    frexp((double)exact, &e);
    double ulp = ldexp(1.0, (e - 1) - 23 < -149 ? -149 : (e - 1) - 23);
    return (float)((double)exact + math_err_sign(x, y, salt) * ulps * ulp);
}
inline float model_expf(float x) {
    float r = expf(x);
    if (!math_model_on()) { return r; }
    return math_err_ulp(r, 2.0 + floor(fabs(1.173 * (double)x)), x, 0.0f, 1);
}
inline float model_logf(float x) {
    float r = logf(x);
    if (!math_model_on() || !std::isfinite(r)) { return r; }
    if (x >= 0.5f && x <= 2.0f) { return (float)((double)r + math_err_sign(x, 0.0f, 2) * exp2(-21.41)); }
    return math_err_ulp(r, 3.0, x, 0.0f, 2);
}
inline float model_tanhf(float x) {
    float r = tanhf(x);
    if (!math_model_on() || !std::isfinite(r)) { return r; }
    return (float)((double)r * (1.0 + math_err_sign(x, 0.0f, 3) * exp2(-11.0)));
}
inline float model_fdividef(float a, float b) {
    if (!math_model_on()) { return a / b; }
    float ab = fabsf(b);
    if (ab > 0x1p126f && std::isfinite(b)) { return 0.0f * a; } /* documented: 0 for 2^126 < |b| < 2^128 */
    return math_err_ulp(a / b, 2.0, a, b, 4);
}
inline float model_rsqrtf(float x) {
    float r = 1.0f / sqrtf(x);
    if (!math_model_on()) { return r; }
    return math_err_ulp(r, 2.0, x, 0.0f, 5);
}
} // namespace emu
inline float __expf(float x) { return ::emu::model_expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return ::emu::model_logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __tanhf(float x) { return ::emu::model_tanhf(x); }
inline float __fdividef(float a, float b) { return ::emu::model_fdividef(a, b); }
inline float fdividef(float a, float b) { return ::emu::model_fdividef(a, b); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return ::emu::model_rsqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; } /* NaN -> 0 */
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) { r |= ((x >> i) & 1u) << (31 - i); }
    return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
/* CUDA's global min/max overloads (device and host) */
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
    using R = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<R>) { return fmin((R)a, (R)b); }
    else { return (R)b < (R)a ? (R)b : (R)a; }
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
    using R = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<R>) { return fmax((R)a, (R)b); }
    else { return (R)a < (R)b ? (R)b : (R)a; }
}

/* ---------------------------------------------------------------- runtime API */
namespace emu {
inline cudaError_t sticky_or(cudaError_t e = cudaSuccess) { return g.sticky ? g.sticky : e; }
inline int num_sms() { return env_int("EMU_NUM_SMS", 132); }
struct StreamObj { int magic; };
/* dry: only the checks (a copy being captured); a captured host<->device copy needs pinned host memory */
inline cudaError_t emu_memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* what,
                              bool dry = false) {
    if (g.sticky) { return g.sticky; }
    if (n == 0) { return cudaSuccess; }
    bool dst_dev = false, src_dev = false;
    switch (kind) {
        case cudaMemcpyHostToDevice: dst_dev = true; break;
        case cudaMemcpyDeviceToHost: src_dev = true; break;
        case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
        case cudaMemcpyHostToHost: break;
        case cudaMemcpyDefault:
            dst_dev = find_alloc(dst, 0) && !find_alloc(dst, 0)->pinned;
            src_dev = find_alloc(src, 0) && !find_alloc(src, 0)->pinned;
            break;
        default: return api_error(cudaErrorInvalidMemcpyDirection, "%s: invalid direction %d", what, (int)kind);
    }
    if (dst_dev && !device_range(dst, n)) {
        return api_error(cudaErrorInvalidValue, "%s: destination [%p, +%zu) is not inside one device allocation",
                         what, dst, n);
    }
    if (src_dev && !device_range(src, n)) {
        return api_error(cudaErrorInvalidValue, "%s: source [%p, +%zu) is not inside one device allocation", what, src,
                         n);
    }
    if (dry) {
        const void* host = !dst_dev ? dst : (!src_dev ? src : nullptr);
        const Alloc* a = host ? find_alloc(host, 0) : nullptr;
        if (host && !(a && a->pinned && (const char*)host + n <= a->data_end)) {
            g.capture_invalidated = true;
            return api_error(cudaErrorStreamCaptureUnsupported,
                             "%s during stream capture: host memory [%p, +%zu) is not inside one cudaMallocHost "
                             "allocation (a graph replays the copy later; the capture is invalidated)", what, host, n);
        }
        return cudaSuccess;
    }
    memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t emu_memset(void* dst, int v, size_t n, const char* what, bool dry = false) {
    if (g.sticky) { return g.sticky; }
    if (n == 0) { return cudaSuccess; }
    if (!device_range(dst, n)) {
        return api_error(cudaErrorInvalidValue, "%s: [%p, +%zu) is not inside one device allocation", what, dst, n);
    }
    if (!dry) { memset(dst, v, n); }
    return cudaSuccess;
}
} /* namespace emu */

/* allocation and release during a capture are refused like the other calls that may synchronise */
inline cudaError_t emu_cudaMalloc(void** p, size_t n) {
    if (::emu::g.capture_graph) { return ::emu::capture_violation("cudaMalloc"); }
    return ::emu::device_malloc(p, n, false);
}
template <class T> inline cudaError_t emu_cudaMalloc(T** p, size_t n) { return emu_cudaMalloc((void**)p, n); }
inline cudaError_t emu_cudaMallocHost(void** p, size_t n, unsigned = 0) {
    if (::emu::g.capture_graph) { return ::emu::capture_violation("cudaMallocHost"); }
    return ::emu::device_malloc(p, n, true);
}
template <class T> inline cudaError_t emu_cudaMallocHost(T** p, size_t n, unsigned = 0) {
    return emu_cudaMallocHost((void**)p, n);
}
inline cudaError_t emu_cudaFree(void* p) {
    if (::emu::g.capture_graph) { return ::emu::capture_violation("cudaFree"); }
    return ::emu::device_free(p, false);
}
inline cudaError_t emu_cudaFreeHost(void* p) {
    if (::emu::g.capture_graph) { return ::emu::capture_violation("cudaFreeHost"); }
    return ::emu::device_free(p, true);
}
inline cudaError_t emu_cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
    if (::emu::g.capture_graph) { return ::emu::capture_violation("cudaMemcpy (synchronous)"); }
    return ::emu::emu_memcpy(d, s, n, k, "cudaMemcpy");
}
inline cudaError_t emu_cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0) {
    if (::emu::capturing(st)) {
        cudaError_t e = ::emu::emu_memcpy(d, s, n, k, "cudaMemcpyAsync", true);
        if (e != cudaSuccess) { return e; }
        ::emu::capture_record("cudaMemcpyAsync", [d, s, n, k]() { ::emu::emu_memcpy(d, s, n, k, "cudaMemcpyAsync (graph node)"); });
        return cudaSuccess;
    }
    return ::emu::emu_memcpy(d, s, n, k, "cudaMemcpyAsync");
}
inline cudaError_t emu_cudaMemset(void* d, int v, size_t n) {
    if (::emu::g.capture_graph) { return ::emu::capture_violation("cudaMemset (synchronous)"); }
    return ::emu::emu_memset(d, v, n, "cudaMemset");
}
inline cudaError_t emu_cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st = 0) {
    if (::emu::capturing(st)) {
        cudaError_t e = ::emu::emu_memset(d, v, n, "cudaMemsetAsync", true);
        if (e != cudaSuccess) { return e; }
        ::emu::capture_record("cudaMemsetAsync", [d, v, n]() { ::emu::emu_memset(d, v, n, "cudaMemsetAsync (graph node)"); });
        return cudaSuccess;
    }
    return ::emu::emu_memset(d, v, n, "cudaMemsetAsync");
}
inline cudaError_t emu_cudaMemGetInfo(size_t* free_b, size_t* total) {
    if (free_b) { *free_b = (size_t)64 << 30; }
    if (total) { *total = (size_t)64 << 30; }
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaGetLastError() {
    cudaError_t e = ::emu::g.sticky ? ::emu::g.sticky : ::emu::g.last_error;
    ::emu::g.last_error = cudaSuccess;
    return e;
}
inline cudaError_t emu_cudaPeekAtLastError() { return ::emu::g.sticky ? ::emu::g.sticky : ::emu::g.last_error; }
inline const char* emu_cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalState: return "the operation is not permitted in the current state";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        default: return "unknown error (emu)";
    }
}
inline const char* emu_cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorIllegalState: return "cudaErrorIllegalState";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        default: return "cudaErrorUnknown(emu)";
    }
}
inline cudaError_t emu_cudaDeviceSynchronize() {
    if (::emu::g.capture_graph) { return ::emu::capture_violation("cudaDeviceSynchronize"); }
    ::emu::check_all_canaries();
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaDeviceReset() { return ::emu::sticky_or(); }
inline cudaError_t emu_cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t emu_cudaSetDevice(int d) {
    return d == 0 ? ::emu::sticky_or() : ::emu::api_error(cudaErrorInvalidDevice, "cudaSetDevice(%d): one device", d);
}
inline cudaError_t emu_cudaGetDevice(int* d) { *d = 0; return ::emu::sticky_or(); }
inline cudaError_t emu_cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) { return ::emu::api_error(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d): one device", d); }
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator (dev/emu)");
    p->totalGlobalMem = (size_t)64 << 30;
    p->sharedMemPerBlock = ::emu::kDefaultSmem;
    p->sharedMemPerBlockOptin = ::emu::kMaxSmemOptin;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = ::emu::num_sms();
    p->maxThreadsPerMultiProcessor = 2048;
    p->l2CacheSize = 50 * 1024 * 1024;
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
    if (d != 0) { return ::emu::api_error(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: device %d", d); }
    cudaDeviceProp p;
    emu_cudaGetDeviceProperties(&p, 0);
    switch (a) {
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)p.sharedMemPerMultiprocessor; break;
        case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
        default: *v = 0;
    }
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaDriverGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
inline cudaError_t emu_cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
/* streams and events: work runs in order at the call, so these only keep handles valid */
inline cudaError_t emu_cudaStreamCreate(cudaStream_t* s) {
    *s = (cudaStream_t)(new ::emu::StreamObj{0x5752});
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return emu_cudaStreamCreate(s); }
inline cudaError_t emu_cudaStreamDestroy(cudaStream_t s) {
    delete (::emu::StreamObj*)s;
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaStreamSynchronize(cudaStream_t s) {
    if (::emu::capturing(s)) { return ::emu::capture_violation("cudaStreamSynchronize of the capturing stream"); }
    if (::emu::g.capture_graph) { return ::emu::sticky_or(); } /* another stream: in order, nothing pending */
    return emu_cudaDeviceSynchronize();
}
inline cudaError_t emu_cudaStreamQuery(cudaStream_t s) {
    if (::emu::capturing(s)) { return ::emu::capture_violation("cudaStreamQuery of the capturing stream"); }
    return ::emu::sticky_or();
}
/* in order: nothing to wait for (while capturing, a dependency that order already gives) */
inline cudaError_t emu_cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return ::emu::sticky_or(); }
inline cudaError_t emu_cudaEventCreate(cudaEvent_t* e) {
    *e = (cudaEvent_t)(new ::emu::EventRec{0.0, false});
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return emu_cudaEventCreate(e); }
inline cudaError_t emu_cudaEventDestroy(cudaEvent_t e) {
    delete (::emu::EventRec*)e;
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) {
    ::emu::EventRec* r = (::emu::EventRec*)e;
    if (::emu::capturing(s)) {
        r->captured = true;
        ::emu::capture_record("cudaEventRecord", [r]() { r->t_ms = ::emu::now_ms(); });
        return ::emu::sticky_or();
    }
    r->captured = false;
    r->t_ms = ::emu::now_ms();
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaEventSynchronize(cudaEvent_t e) {
    if (::emu::g.capture_graph && ((::emu::EventRec*)e)->captured) {
        return ::emu::capture_violation("cudaEventSynchronize of an event recorded in the capture");
    }
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaEventQuery(cudaEvent_t e) {
    if (::emu::g.capture_graph && ((::emu::EventRec*)e)->captured) {
        return ::emu::capture_violation("cudaEventQuery of an event recorded in the capture");
    }
    return ::emu::sticky_or();
}
/* ---- stream capture and graphs (see the header comment) */
inline cudaError_t emu_cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (::emu::g.sticky) { return ::emu::g.sticky; }
    if (!s) { return ::emu::api_error(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture: the legacy NULL stream cannot be captured"); }
    if (::emu::g.capture_graph) {
        return ::emu::api_error(cudaErrorIllegalState, "cudaStreamBeginCapture: a capture is already in progress (emu: one at a time)");
    }
    ::emu::g.capture_graph = new ::emu::GraphObj{::emu::kGraphMagic, {}, {}};
    ::emu::g.capture_stream = s;
    ::emu::g.capture_invalidated = false;
    return cudaSuccess;
}
inline cudaError_t emu_cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    if (!graph) { return ::emu::api_error(cudaErrorInvalidValue, "cudaStreamEndCapture: NULL graph pointer"); }
    *graph = nullptr;
    if (!::emu::capturing(s)) { return ::emu::api_error(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not being captured"); }
    ::emu::GraphObj* gr = ::emu::g.capture_graph;
    bool invalid = ::emu::g.capture_invalidated;
    ::emu::g.capture_graph = nullptr;
    ::emu::g.capture_stream = nullptr;
    ::emu::g.capture_invalidated = false;
    if (invalid) {
        delete gr;
        return ::emu::api_error(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated by an earlier error");
    }
    if (::emu::g.sticky) { delete gr; return ::emu::g.sticky; }
    *graph = (cudaGraph_t)gr;
    return cudaSuccess;
}
inline cudaError_t emu_cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
    *status = !::emu::capturing(s) ? cudaStreamCaptureStatusNone
              : ::emu::g.capture_invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long = 0) {
    ::emu::GraphObj* gr = (::emu::GraphObj*)graph;
    if (!exec || !gr || gr->magic != ::emu::kGraphMagic) { return ::emu::api_error(cudaErrorInvalidValue, "cudaGraphInstantiate: not a graph"); }
    if (::emu::g.sticky) { return ::emu::g.sticky; }
    ::emu::GraphObj* ex = new ::emu::GraphObj(*gr); /* a snapshot: later changes to the graph do not affect it */
    ex->magic = ::emu::kGraphExecMagic;
    *exec = (cudaGraphExec_t)ex;
    return cudaSuccess;
}
inline cudaError_t emu_cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    ::emu::GraphObj* ex = (::emu::GraphObj*)exec;
    if (!ex || ex->magic != ::emu::kGraphExecMagic) { return ::emu::api_error(cudaErrorInvalidValue, "cudaGraphLaunch: not an instantiated graph"); }
    if (::emu::g.sticky) { return ::emu::g.sticky; }
    if (::emu::capturing(s)) { /* a graph launched into a capture becomes part of it */
        ::emu::GraphObj copy = *ex;
        ::emu::capture_record("cudaGraphLaunch", [copy]() { for (auto& n : copy.nodes) { if (!::emu::g.sticky) { n(); } } });
        return cudaSuccess;
    }
    for (size_t i = 0; i < ex->nodes.size() && !::emu::g.sticky; i++) { ex->nodes[i](); }
    ::emu::g.graph_launches++;
    return ::emu::sticky_or();
}
/* frees a graph or an instantiated graph after checking its magic (what = the API's error text) */
inline cudaError_t emu_graph_obj_destroy(void* p, int magic, const char* what) {
    ::emu::GraphObj* o = (::emu::GraphObj*)p;
    if (!o || o->magic != magic) { return ::emu::api_error(cudaErrorInvalidValue, what); }
    o->magic = 0;
    delete o;
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaGraphExecDestroy(cudaGraphExec_t exec) {
    return emu_graph_obj_destroy(exec, ::emu::kGraphExecMagic, "cudaGraphExecDestroy: not an instantiated graph");
}
inline cudaError_t emu_cudaGraphDestroy(cudaGraph_t graph) {
    return emu_graph_obj_destroy(graph, ::emu::kGraphMagic, "cudaGraphDestroy: not a graph");
}
inline cudaError_t emu_cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(((::emu::EventRec*)b)->t_ms - ((::emu::EventRec*)a)->t_ms);
    return ::emu::sticky_or();
}
inline cudaError_t emu_cudaFuncSetAttribute(const void* fn, cudaFuncAttribute attr, int value) {
    if (::emu::g.sticky) { return ::emu::g.sticky; }
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > ::emu::kMaxSmemOptin) {
            return ::emu::api_error(cudaErrorInvalidValue,
                                    "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): above the 227 KiB limit",
                                    value);
        }
        ::emu::g.func_smem[fn] = value;
    }
    return cudaSuccess;
}
template <class... P>
inline cudaError_t emu_cudaFuncSetAttribute(void (*fn)(P...), cudaFuncAttribute attr, int value) {
    return emu_cudaFuncSetAttribute((const void*)fn, attr, value);
}
template <class F>
inline cudaError_t emu_cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int block, size_t smem) {
    int by_threads = 2048 / std::max(block, 1);
    int by_smem = smem ? (int)((228 * 1024) / smem) : 32;
    *n = std::max(0, std::min(std::min(by_threads, by_smem), 32));
    return ::emu::sticky_or();
}

#define cudaMalloc emu_cudaMalloc
#define cudaMallocHost emu_cudaMallocHost
#define cudaFree emu_cudaFree
#define cudaFreeHost emu_cudaFreeHost
#define cudaMemcpy emu_cudaMemcpy
#define cudaMemcpyAsync emu_cudaMemcpyAsync
#define cudaMemset emu_cudaMemset
#define cudaMemsetAsync emu_cudaMemsetAsync
#define cudaMemGetInfo emu_cudaMemGetInfo
#define cudaGetLastError emu_cudaGetLastError
#define cudaPeekAtLastError emu_cudaPeekAtLastError
#define cudaGetErrorString emu_cudaGetErrorString
#define cudaGetErrorName emu_cudaGetErrorName
#define cudaDeviceSynchronize emu_cudaDeviceSynchronize
#define cudaDeviceReset emu_cudaDeviceReset
#define cudaGetDeviceCount emu_cudaGetDeviceCount
#define cudaSetDevice emu_cudaSetDevice
#define cudaGetDevice emu_cudaGetDevice
#define cudaGetDeviceProperties emu_cudaGetDeviceProperties
#define cudaDeviceGetAttribute emu_cudaDeviceGetAttribute
#define cudaDriverGetVersion emu_cudaDriverGetVersion
#define cudaRuntimeGetVersion emu_cudaRuntimeGetVersion
#define cudaStreamCreate emu_cudaStreamCreate
#define cudaStreamCreateWithFlags emu_cudaStreamCreateWithFlags
#define cudaStreamDestroy emu_cudaStreamDestroy
#define cudaStreamSynchronize emu_cudaStreamSynchronize
#define cudaStreamQuery emu_cudaStreamQuery
#define cudaStreamWaitEvent emu_cudaStreamWaitEvent
#define cudaEventCreate emu_cudaEventCreate
#define cudaEventCreateWithFlags emu_cudaEventCreateWithFlags
#define cudaEventDestroy emu_cudaEventDestroy
#define cudaEventRecord emu_cudaEventRecord
#define cudaEventSynchronize emu_cudaEventSynchronize
#define cudaEventQuery emu_cudaEventQuery
#define cudaEventElapsedTime emu_cudaEventElapsedTime
#define cudaFuncSetAttribute emu_cudaFuncSetAttribute
#define cudaStreamBeginCapture emu_cudaStreamBeginCapture
#define cudaStreamEndCapture emu_cudaStreamEndCapture
#define cudaStreamIsCapturing emu_cudaStreamIsCapturing
#define cudaGraphInstantiate emu_cudaGraphInstantiate
#define cudaGraphLaunch emu_cudaGraphLaunch
#define cudaGraphExecDestroy emu_cudaGraphExecDestroy
#define cudaGraphDestroy emu_cudaGraphDestroy
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor emu_cudaOccupancyMaxActiveBlocksPerMultiprocessor

/* --use_fast_math in device code (EMU_FAST_MATH, set by the BF16 builds in dev/emu/emu.mk; see "math intrinsics"):
 * plain tanhf/expf/logf become the modelled intrinsics while a kernel runs, and stay exact in host code */
#ifdef EMU_FAST_MATH
#define tanhf(x) ::emu::model_tanhf(x)
#define expf(x) ::emu::model_expf(x)
#define logf(x) ::emu::model_logf(x)
#endif

#endif /* LLMC_DEV_EMU_H */
