/*
 * dev/emu/test_emu_runtime.cpp -- self-tests of the CUDA-on-CPU execution layer (dev/emu/emu.h,
 * dev/emu/emu_mma.h) with toy kernels: indices, barriers, static and dynamic shared memory,
 * shuffles (incl. partial and non-power-of-two participation), votes, atomics, launch limits,
 * error detection (divergent barriers, bad masks, deadlock, out-of-bounds global and shared
 * accesses, host pointers as kernel arguments, bad copies, double free, stack overflow, missing
 * cp.async wait), stream capture and graph replay (including the calls a capture refuses) and the
 * mma.m16n8k16 emulation against a scalar reference written from the PTX
 * ISA fragment tables, and the cuBLASLt stand-in's host GEMM (dev/emu/include/cublasLt.h) against its documented
 * summation order, bit for bit. Faults that kill the process are tested in a forked child.
 *
 * Build: g++ -std=c++17 -O2 -I. -Idev/emu/include -I/usr/local/cuda/include (see dev/emu/emu.mk).
 */
#include "dev/emu/emu.h"
#include "dev/emu/emu_mma.h"
#include "dev/test/testing.h"

#include <cublasLt.h>

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

#include <sys/wait.h>
#include <random>
#include <string>
#include <vector>

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            printf("not ok - %s failed: %s [%s:%d]\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static int contains(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

/* runs fn in a forked child with stdout/stderr captured; returns the exit status (or 128+signal) */
static int run_child(void (*fn)(void), std::string* out) {
    fflush(stdout);
    fflush(stderr);
    int p[2];
    if (pipe(p) != 0) { return -1; }
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 1);
        dup2(p[1], 2);
        fn();
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(p[1]);
    char buf[4096];
    ssize_t n;
    out->clear();
    while ((n = read(p[0], buf, sizeof buf)) > 0) { out->append(buf, (size_t)n); }
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* checks that the last launch failed with `code` and a message containing `sub`; clears the error */
static void expect_kernel_error(cudaError_t code, const char* sub, const char* what) {
    cudaError_t e = cudaGetLastError();
    std::string m = emu::last_message();
    TEST_CHECK(e == code && contains(m, sub), "%s is reported (%s; message has \"%s\")", what, cudaGetErrorName(e), sub);
    emu::clear_errors();
}

/* ---------------------------------------------------------------- toy kernels */

static __global__ void index_kernel(int* out) {
    int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int nt = blockDim.x * blockDim.y * blockDim.z;
    out[bx * nt + tx] = bx * 1000 + tx;
}

/* reverses each block's slice through static shared memory; threadIdx must survive the barrier */
static __global__ void reverse_static_kernel(const float* in, float* out, int* tid_ok, int n) {
    __shared__ float s[1024];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - t);
    if (j < n) { out[j] = s[t]; }
    tid_ok[i] = (int)threadIdx.x == t;
}

static __global__ void reverse_dynamic_kernel(const float* in, float* out, int n) {
    DYNAMIC_SHARED(float, s);
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - t);
    if (j < n) { out[j] = s[t]; }
}

static __global__ void read_unwritten_smem_kernel(float* out) {
    DYNAMIC_SHARED(float, s);
    out[threadIdx.x] = s[threadIdx.x];
}

/* block sum: warp xor-shuffle reduction + shared partials; blockDim a multiple of 32 */
static __global__ void block_sum_kernel(const float* in, float* out, int n) {
    __shared__ float part[32];
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { v += in[i]; }
    for (int o = 16; o > 0; o >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, o); }
    if (threadIdx.x % 32 == 0) { part[threadIdx.x / 32] = v; }
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) { w += __shfl_down_sync(0xffffffffu, w, o); }
        if (threadIdx.x == 0) { *out = w; }
    }
}

/* shuffle variants on a 32-lane block: outputs 6 values per lane */
static __global__ void shuffle_variants_kernel(int* out) {
    int l = threadIdx.x;
    int v = 100 + l;
    int* o = out + 6 * l;
    o[0] = __shfl_sync(0xffffffffu, v, 3, 8);       /* within groups of 8: lane base+3 */
    o[1] = __shfl_up_sync(0xffffffffu, v, 2, 16);   /* own value for the first 2 of each 16 */
    o[2] = __shfl_down_sync(0xffffffffu, v, 5);     /* own value for lanes >= 27 */
    o[3] = __shfl_xor_sync(0xffffffffu, v, 9, 16);  /* xor into a later group of 16 -> own value */
    if (l < 16) {
        o[4] = __shfl_down_sync(0x0000ffffu, v, 1, 16); /* half-warp participation */
    } else {
        o[4] = __shfl_up_sync(0xffff0000u, v, 1, 16);
    }
    o[5] = (int)__ballot_sync(0xffffffffu, l % 3 == 0);
}

/* participation by an irregular, non-power-of-two set of lanes */
#define ODD_MASK 0x0005a3b7u
static __global__ void irregular_mask_kernel(int* out) {
    int l = threadIdx.x;
    out[l] = -1;
    if ((ODD_MASK >> l) & 1u) {
        int first = __ffs((int)ODD_MASK) - 1;
        int v = __shfl_sync(ODD_MASK, 10 * l, first);
        unsigned b = __ballot_sync(ODD_MASK, l > 8);
        int any = __any_sync(ODD_MASK, l == 18);
        int all = __all_sync(ODD_MASK, l < 19);
        unsigned sum = __reduce_add_sync(ODD_MASK, (unsigned)l);
        __syncwarp(ODD_MASK);
        out[l] = v + (b == (ODD_MASK & ~0x1ffu) ? 1 : 0) * 1000 + any * 10000 + all * 100000 + (int)sum * 1000000;
    }
}

/* BUG: 20 live lanes but reads lane threadIdx+1 for lane 19 (src 20 is not in the mask) */
static __global__ void read_nonparticipant_kernel(int* out) {
    unsigned mask = (1u << 20) - 1u;
    int v = __shfl_down_sync(mask, (int)threadIdx.x, 1);
    out[threadIdx.x] = v;
}

/* BUG: full mask in a block of 48 threads (warp 1 has 16 lanes) */
static __global__ void full_mask_partial_warp_kernel(float* out) {
    float v = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
    out[threadIdx.x] = v;
}

/* BUG: lane not in its own mask */
static __global__ void lane_not_in_mask_kernel(int* out) { out[threadIdx.x] = __shfl_sync(0x1u, 1, 0); }

/* BUG: early return before a barrier */
static __global__ void divergent_exit_kernel(float* out, int n) {
    __shared__ float s[64];
    if ((int)threadIdx.x >= n) { return; }
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % n];
}

/* BUG: different barriers in divergent branches */
static __global__ void divergent_sites_kernel(float* out) {
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}

/* BUG: half a warp at __syncwarp(full), the other half at __syncthreads */
static __global__ void deadlock_kernel(float* out) {
    if (threadIdx.x < 16) {
        __syncwarp();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}

/* uniform early exit of whole blocks is fine, and __syncthreads_count works */
static __global__ void syncthreads_count_kernel(int* out) {
    int c = __syncthreads_count(threadIdx.x % 3 == 0);
    int a = __syncthreads_and(threadIdx.x < 1000);
    int o = __syncthreads_or(threadIdx.x == 5);
    if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
}

static __global__ void atomics_kernel(float* fsum, int* imax, unsigned* cnt, unsigned long long* cas_sum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    atomicAdd(fsum, 1.0f);
    atomicMax(imax, i * 7 % 1000);
    atomicInc(cnt, 1u << 30);
    unsigned long long old = *cas_sum, assumed;
    do {
        assumed = old;
        old = atomicCAS(cas_sum, assumed, assumed + (unsigned long long)i);
    } while (old != assumed);
}

static __global__ void smem_user_kernel(float* out) {
    DYNAMIC_SHARED(float, s);
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[0];
}

/* many barriers, 1024 threads: scheduler stress and timing */
static __global__ void many_barriers_kernel(int* out, int rounds) {
    __shared__ int s[1024];
    int t = threadIdx.x;
    s[t] = t;
    for (int r = 0; r < rounds; r++) {
        __syncthreads();
        int v = s[(t + 1) % blockDim.x];
        __syncthreads();
        s[t] = v;
    }
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s[t];
}

static __global__ void write_at_kernel(float* p, long idx) { p[idx] = 42.0f; }
static __global__ void read_at_kernel(const float* p, long idx, float* out) { *out = p[idx]; }
static __global__ void copy_first_kernel(const float* p, float* out) { *out = p[0]; }
static __global__ void deep_stack_kernel(float* out, int n) {
    volatile float big[64 * 1024]; /* 256 KiB: larger than the fiber stack */
    for (int i = n - 1; i >= 0; i--) { big[i] = (float)i; } /* top down: the first page past the stack is the guard */
    *out = big[0];
}
static __global__ void null_and_sizes_kernel(float* maybe_null, size_t n, float* out) {
    out[0] = maybe_null == NULL ? (float)n : -1.0f;
}

/* 32 threads: loads A (16x16 row-major), B (16x8, stored as B[k][n] row-major) and C (16x8), packs
 * the fragments element by element following the PTX ISA tables, runs the MMA, stores D. */
template <int BF16>
static __global__ void mma_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D, int alias) {
    const int lane = threadIdx.x, gq = lane >> 2, t = lane & 3;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4];
    for (int i = 0; i < 8; i++) { /* a_i: row g + 8*((i/2)%2), col 2t + i%2 + 8*(i/4); reg i/2, half i%2 */
        int row = gq + 8 * ((i / 2) % 2), col = 2 * t + (i % 2) + 8 * (i / 4);
        a[i / 2] |= (uint32_t)A[row * 16 + col] << (16 * (i % 2));
    }
    for (int i = 0; i < 4; i++) { /* b_i: k = 2t + i%2 + 8*(i/2), n = g */
        int k = 2 * t + (i % 2) + 8 * (i / 2);
        b[i / 2] |= (uint32_t)B[k * 8 + gq] << (16 * (i % 2));
    }
    for (int i = 0; i < 4; i++) { c[i] = C[(gq + 8 * (i / 2)) * 8 + 2 * t + (i % 2)]; }
    float d[4];
    float* dst = alias ? c : d;
    if (BF16) { mma_m16n8k16_bf16(dst, a, b, c); } else { mma_m16n8k16_f16(dst, a, b, c); }
    for (int i = 0; i < 4; i++) { D[(gq + 8 * (i / 2)) * 8 + 2 * t + (i % 2)] = dst[i]; }
}

static __global__ void mma_partial_warp_kernel(float* out) {
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    mma_m16n8k16_bf16(d, a, b, c);
    out[threadIdx.x] = d[0];
}

/* each thread copies one 16-byte chunk with cp.async; with_wait=0 omits cp_async_wait_all (BUG) */
static __global__ void cp_async_kernel(const float* src, float* out, int with_wait) {
    DYNAMIC_SHARED(float, s);
    int t = threadIdx.x;
    cp_async_16(s + 4 * t, src + 4 * t);
    cp_async_commit();
    if (with_wait) { cp_async_wait_all(); }
    __syncthreads();
    int u = (t + 1) % blockDim.x;
    for (int k = 0; k < 4; k++) { out[4 * t + k] = s[4 * u + k]; }
}

/* ---------------------------------------------------------------- helpers */
static uint16_t f2bf(float x) { __nv_bfloat16 h = __float2bfloat16_rn(x); uint16_t u; memcpy(&u, &h, 2); return u; }
static float bf2f(uint16_t u) { uint32_t b = (uint32_t)u << 16; float f; memcpy(&f, &b, 4); return f; }
static uint16_t f2h(float x) { return __half_as_ushort(__float2half_rn(x)); }
static float h2f(uint16_t u) { return __half2float(__ushort_as_half(u)); }

static unsigned rng_state = 12345u;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return ((rng_state >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

template <class T>
static T* dmalloc(size_t n) {
    T* p = nullptr;
    CK(cudaMalloc(&p, n * sizeof(T)));
    return p;
}

/* ---------------------------------------------------------------- child bodies (forked) */
static void child_read_past_end(void) {
    float* p = dmalloc<float>(16); /* 64 bytes: the end is on the guard page */
    float* o = dmalloc<float>(1);
    LAUNCH(1, 1, 0, 0, read_at_kernel)(p, 16, o);
}
static void child_read_before_start(void) {
    float* p = dmalloc<float>(1024); /* 4 KiB: starts exactly after the leading guard page */
    float* o = dmalloc<float>(1);
    LAUNCH(1, 1, 0, 0, read_at_kernel)(p, -1, o);
}
static void child_smem_overflow(void) {
    float* o = dmalloc<float>(64);
    LAUNCH(1, 32, 64, 0, smem_user_kernel)(o); /* 32 floats written, only 16 (64 bytes) requested */
}
static void child_stack_overflow(void) {
    float* o = dmalloc<float>(1);
    LAUNCH(1, 1, 0, 0, deep_stack_kernel)(o, 64 * 1024);
}

/* ---------------------------------------------------------------- tests */
static void test_indices(void) {
    dim3 grid(3, 2, 2), block(5, 4, 3);
    int nt = 60, nb = 12;
    int* d = dmalloc<int>(nt * nb);
    LAUNCH(grid, block, 0, 0, index_kernel)(d);
    CK(cudaGetLastError());
    std::vector<int> h(nt * nb);
    CK(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < nt; t++) bad += h[b * nt + t] != b * 1000 + t;
    TEST_CHECK(bad == 0, "threadIdx/blockIdx/blockDim/gridDim are correct in every fiber (3D grid and block), %d wrong", bad);
    CK(cudaFree(d));
}

static void test_shared_and_barrier(void) {
    const int n = 250, block = 100; /* not a multiple of 32, last block partial */
    std::vector<float> h(n), r(n);
    for (int i = 0; i < n; i++) h[i] = (float)i;
    float* in = dmalloc<float>(n);
    float* out = dmalloc<float>(n);
    int* ok = dmalloc<int>(300);
    CK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    int nblocks = CEIL_DIV(n, block);
    LAUNCH(nblocks, block, 0, 0, reverse_static_kernel)(in, out, ok, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(r.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<int> tok(300);
    CK(cudaMemcpy(tok.data(), ok, 300 * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0, badt = 0;
    for (int b = 0; b < nblocks; b++)
        for (int t = 0; t < block; t++) {
            int j = b * block + (block - 1 - t), i = b * block + t;
            if (j < n) bad += r[j] != (i < n ? h[i] : 0.0f);
        }
    for (int i = 0; i < 300; i++) badt += tok[i] != 1;
    TEST_CHECK(bad == 0 && badt == 0, "__syncthreads + static __shared__: block reversal correct (%d wrong, %d threadIdx lost)", bad, badt);

    float* out2 = dmalloc<float>(n);
    LAUNCH(nblocks, block, block * sizeof(float), 0, reverse_dynamic_kernel)(in, out2, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(r.data(), out2, n * sizeof(float), cudaMemcpyDeviceToHost));
    bad = 0;
    for (int b = 0; b < nblocks; b++)
        for (int t = 0; t < block; t++) {
            int j = b * block + (block - 1 - t), i = b * block + t;
            if (j < n) bad += r[j] != (i < n ? h[i] : 0.0f);
        }
    TEST_CHECK(bad == 0, "DYNAMIC_SHARED: block reversal correct (%d wrong)", bad);

    LAUNCH(1, 32, 32 * sizeof(float), 0, read_unwritten_smem_kernel)(out2);
    CK(cudaGetLastError());
    CK(cudaMemcpy(r.data(), out2, 32 * sizeof(float), cudaMemcpyDeviceToHost));
    int nans = 0;
    for (int i = 0; i < 32; i++) nans += isnan(r[i]);
    TEST_CHECK(nans == 32, "never-written dynamic shared memory reads as NaN poison (%d/32 NaN)", nans);

    std::vector<float> fresh(8);
    float* un = dmalloc<float>(8);
    CK(cudaMemcpy(fresh.data(), un, 8 * sizeof(float), cudaMemcpyDeviceToHost));
    TEST_CHECK(isnan(fresh[0]) && isnan(fresh[7]), "fresh cudaMalloc memory is NaN poison until written");
    CK(cudaFree(un));
    CK(cudaFree(in)); CK(cudaFree(out)); CK(cudaFree(out2)); CK(cudaFree(ok));
}

static void test_reductions_and_shuffles(void) {
    const int n = 1000;
    std::vector<float> h(n);
    double ref = 0;
    for (int i = 0; i < n; i++) { h[i] = (float)(i % 17) - 8.0f; ref += h[i]; }
    float* in = dmalloc<float>(n);
    float* out = dmalloc<float>(1);
    CK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    int blocks[3] = {32, 256, 1024};
    for (int k = 0; k < 3; k++) {
        LAUNCH(1, blocks[k], 0, 0, block_sum_kernel)(in, out, n);
        CK(cudaGetLastError());
        float r;
        CK(cudaMemcpy(&r, out, 4, cudaMemcpyDeviceToHost));
        TEST_CHECK(r == (float)ref, "block sum with xor/down shuffles, block %d: %g (expected %g)", blocks[k], r, ref);
    }

    int* sv = dmalloc<int>(32 * 6);
    LAUNCH(1, 32, 0, 0, shuffle_variants_kernel)(sv);
    CK(cudaGetLastError());
    std::vector<int> s(32 * 6);
    CK(cudaMemcpy(s.data(), sv, s.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++) if (l % 3 == 0) ballot |= 1u << l;
    for (int l = 0; l < 32; l++) {
        int v = 100 + l;
        int e0 = 100 + (l & ~7) + 3;
        int e1 = (l % 16) >= 2 ? v - 2 : v;
        int e2 = l + 5 < 32 ? v + 5 : v;
        int x = l ^ 9;
        int e3 = (x / 16 <= l / 16) ? 100 + x : v;
        int e4 = l < 16 ? (l + 1 < 16 ? v + 1 : v) : (l - 1 >= 16 ? v - 1 : v);
        int e[6] = {e0, e1, e2, e3, e4, (int)ballot};
        for (int k = 0; k < 6; k++) bad += s[6 * l + k] != e[k];
    }
    TEST_CHECK(bad == 0, "__shfl_sync/up/down/xor with width 8/16/32, half-warp masks, __ballot_sync: %d wrong", bad);

    int* im = dmalloc<int>(32);
    LAUNCH(1, 32, 0, 0, irregular_mask_kernel)(im);
    CK(cudaGetLastError());
    std::vector<int> r(32);
    CK(cudaMemcpy(r.data(), im, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    bad = 0;
    int first = __builtin_ffs((int)ODD_MASK) - 1;
    unsigned sum = 0;
    for (int l = 0; l < 32; l++) if ((ODD_MASK >> l) & 1) sum += l;
    for (int l = 0; l < 32; l++) {
        int e = -1;
        if ((ODD_MASK >> l) & 1) e = 10 * first + 1000 + 10000 * ((ODD_MASK >> 18) & 1) + 100000 * 1 + (int)sum * 1000000;
        bad += r[l] != e;
    }
    TEST_CHECK(bad == 0, "irregular non-power-of-two participation mask 0x%08x: shfl/ballot/any/all/reduce_add/syncwarp (%d wrong)", ODD_MASK, bad);

    CK(cudaFree(in)); CK(cudaFree(out)); CK(cudaFree(sv)); CK(cudaFree(im));
}

static void test_warp_errors(void) {
    int* o = dmalloc<int>(64);
    float* f = dmalloc<float>(64);
    LAUNCH(1, 20, 0, 0, read_nonparticipant_kernel)(o);
    expect_kernel_error(cudaErrorLaunchFailure, "lane 19 reads lane 20, which is not in mask", "shuffle from a lane outside the mask (20-thread block)");
    LAUNCH(1, 48, 0, 0, full_mask_partial_warp_kernel)(f);
    expect_kernel_error(cudaErrorLaunchFailure, "names lanes that do not exist", "full mask in a partial warp (48-thread block)");
    LAUNCH(1, 32, 0, 0, lane_not_in_mask_kernel)(o);
    expect_kernel_error(cudaErrorLaunchFailure, "is not in mask", "calling lane not in its mask");
    LAUNCH(1, 32, 0, 0, deadlock_kernel)(f);
    expect_kernel_error(cudaErrorLaunchFailure, "deadlock", "half warp in __syncwarp, half at __syncthreads");
    LAUNCH(1, 32, 0, 0, mma_partial_warp_kernel)(f);
    CK(cudaGetLastError());
    LAUNCH(1, 16, 0, 0, mma_partial_warp_kernel)(f);
    expect_kernel_error(cudaErrorLaunchFailure, "names lanes that do not exist", "mma in a 16-thread block");
    CK(cudaFree(o)); CK(cudaFree(f));
}

static void test_barrier_errors(void) {
    float* o = dmalloc<float>(64);
    LAUNCH(1, 64, 0, 0, divergent_exit_kernel)(o, 64);
    CK(cudaGetLastError());
    LAUNCH(1, 64, 0, 0, divergent_exit_kernel)(o, 40);
    expect_kernel_error(cudaErrorLaunchFailure, "divergent __syncthreads", "early return before __syncthreads (divergent barrier)");
    TEST_CHECK(contains(emu::last_message(), "") && emu::error_count() > 0, "errors are counted (%d so far)", emu::error_count());
    LAUNCH(1, 64, 0, 0, divergent_sites_kernel)(o);
    expect_kernel_error(cudaErrorLaunchFailure, "different barriers", "__syncthreads at different call sites");

    int* c = dmalloc<int>(3);
    LAUNCH(1, 100, 0, 0, syncthreads_count_kernel)(c);
    CK(cudaGetLastError());
    int h[3];
    CK(cudaMemcpy(h, c, sizeof h, cudaMemcpyDeviceToHost));
    TEST_CHECK(h[0] == 34 && h[1] == 1 && h[2] == 1, "__syncthreads_count/and/or: %d %d %d", h[0], h[1], h[2]);
    CK(cudaFree(o)); CK(cudaFree(c));
}

static void test_atomics(void) {
    const int n = 1000;
    float* fs = dmalloc<float>(1);
    int* im = dmalloc<int>(1);
    unsigned* cnt = dmalloc<unsigned>(1);
    unsigned long long* cs = dmalloc<unsigned long long>(1);
    CK(cudaMemset(fs, 0, 4)); CK(cudaMemset(im, 0, 4)); CK(cudaMemset(cnt, 0, 4)); CK(cudaMemset(cs, 0, 8));
    LAUNCH(CEIL_DIV(n, 128), 128, 0, 0, atomics_kernel)(fs, im, cnt, cs, n);
    CK(cudaGetLastError());
    float hf; int hi; unsigned hc; unsigned long long hs;
    CK(cudaMemcpy(&hf, fs, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&hi, im, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&hc, cnt, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&hs, cs, 8, cudaMemcpyDeviceToHost));
    int emax = 0;
    for (int i = 0; i < n; i++) emax = std::max(emax, i * 7 % 1000);
    TEST_CHECK(hf == 1000.0f && hi == emax && hc == 1000u && hs == 499500ull,
               "atomicAdd/atomicMax/atomicInc/atomicCAS loop: %g %d %u %llu", hf, hi, hc, hs);
    CK(cudaFree(fs)); CK(cudaFree(im)); CK(cudaFree(cnt)); CK(cudaFree(cs));
}

static void test_launch_limits(void) {
    float* o = dmalloc<float>(1024);
    LAUNCH(1, 32, 64 * 1024, 0, smem_user_kernel)(o);
    cudaError_t e = cudaGetLastError();
    TEST_CHECK(e == cudaErrorInvalidValue, "64 KiB dynamic smem without opt-in is refused (%s)", cudaGetErrorName(e));
    e = cudaFuncSetAttribute(smem_user_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    LAUNCH(1, 32, 64 * 1024, 0, smem_user_kernel)(o);
    cudaError_t e2 = cudaGetLastError();
    TEST_CHECK(e == cudaSuccess && e2 == cudaSuccess, "after cudaFuncSetAttribute(64 KiB) the launch runs (%s, %s)", cudaGetErrorName(e), cudaGetErrorName(e2));
    e = cudaFuncSetAttribute(smem_user_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024);
    TEST_CHECK(e == cudaErrorInvalidValue, "opt-in above 227 KiB is refused (%s)", cudaGetErrorName(e));
    emu::clear_errors();
    LAUNCH(1, 1025, 0, 0, smem_user_kernel)(o);
    e = cudaGetLastError();
    LAUNCH(0, 32, 0, 0, smem_user_kernel)(o);
    e2 = cudaGetLastError();
    TEST_CHECK(e == cudaErrorInvalidConfiguration && e2 == cudaErrorInvalidConfiguration, "1025-thread block and empty grid are refused (%s, %s)", cudaGetErrorName(e), cudaGetErrorName(e2));
    TEST_CHECK(cudaGetLastError() == cudaSuccess, "launch-configuration errors are not sticky");
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    TEST_CHECK(p.sharedMemPerBlock == 48 * 1024 && p.sharedMemPerBlockOptin == 227 * 1024 && p.maxThreadsPerBlock == 1024 && p.warpSize == 32,
               "device properties: \"%s\", %d SMs, smem %zu/%zu", p.name, p.multiProcessorCount, p.sharedMemPerBlock, p.sharedMemPerBlockOptin);
    cudaStream_t s;
    cudaEvent_t a, b;
    CK(cudaStreamCreate(&s)); CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    LAUNCH(4, 64, 0, s, null_and_sizes_kernel)(NULL, 7, o);
    CK(cudaEventRecord(b, s));
    CK(cudaStreamSynchronize(s));
    float ms = -1, r = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaMemcpyAsync(&r, o, 4, cudaMemcpyDeviceToHost, s));
    TEST_CHECK(r == 7.0f && ms >= 0.0f, "streams/events accepted, NULL and int->size_t kernel arguments convert (%g, %.3f ms)", r, ms);
    CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b)); CK(cudaStreamDestroy(s));
    CK(cudaFree(o));
}

static void test_memory_errors(void) {
    std::string out;
    int st = run_child(child_read_past_end, &out);
    TEST_CHECK(st == 70 && contains(out, "0 bytes PAST THE END") && contains(out, "read_at_kernel"),
               "read one element past the end of a buffer faults and names the kernel (status %d)", st);
    {
        size_t a = out.find("emu:"), b = out.find('\n', a);
        printf("#   %s\n", out.substr(a, b - a).c_str());
    }
    st = run_child(child_read_before_start, &out);
    TEST_CHECK(st == 70 && contains(out, "BEFORE the start"), "read before the start of a buffer faults (status %d)", st);
    st = run_child(child_smem_overflow, &out);
    TEST_CHECK(st == 70 && contains(out, "dynamic shared memory access at byte offset 64"),
               "dynamic shared memory access past the launch's bytes faults (status %d)", st);
    st = run_child(child_stack_overflow, &out);
    TEST_CHECK(st == 70 && contains(out, "stack overflow"), "fiber stack overflow is reported (status %d)", st);

    float* p = dmalloc<float>(10); /* 40 bytes, 8 bytes of rounding slack */
    LAUNCH(1, 1, 0, 0, write_at_kernel)(p, 10);
    expect_kernel_error(cudaErrorIllegalAddress, "0 bytes PAST ITS END", "write one past the end (inside the rounding slack)");
    LAUNCH(1, 1, 0, 0, write_at_kernel)(p, -3);
    expect_kernel_error(cudaErrorIllegalAddress, "BEFORE its start", "write before the start (inside the first page)");
    float host[4] = {1, 2, 3, 4};
    LAUNCH(1, 1, 0, 0, copy_first_kernel)(host, p);
    expect_kernel_error(cudaErrorLaunchFailure, "not device memory", "host pointer passed as a kernel argument");
    cudaError_t e = cudaMemcpy(host, p, 44, cudaMemcpyDeviceToHost);
    TEST_CHECK(e == cudaErrorInvalidValue, "cudaMemcpy beyond the allocation is refused (%s)", cudaGetErrorName(e));
    e = cudaMemset(p + 5, 0, 24);
    TEST_CHECK(e == cudaErrorInvalidValue, "cudaMemset beyond the allocation is refused (%s)", cudaGetErrorName(e));
    CK(cudaFree(p));
    e = cudaFree(p);
    TEST_CHECK(e == cudaErrorInvalidValue, "double cudaFree is refused (%s)", cudaGetErrorName(e));
    emu::clear_errors();
    TEST_CHECK(emu::live_allocations() == 0, "no device allocation leaked by this test (%zu live)", emu::live_allocations());
}

template <int BF16>
static void test_mma_variant(void) {
    const char* nm = BF16 ? "bf16" : "f16";
    std::vector<uint16_t> A(256), B(128);
    std::vector<float> C(128), D(128);
    for (int i = 0; i < 256; i++) A[i] = BF16 ? f2bf(frand()) : f2h(frand());
    for (int i = 0; i < 128; i++) B[i] = BF16 ? f2bf(frand()) : f2h(frand());
    for (int i = 0; i < 128; i++) C[i] = frand();
    uint16_t* dA = dmalloc<uint16_t>(256);
    uint16_t* dB = dmalloc<uint16_t>(128);
    float* dC = dmalloc<float>(128);
    float* dD = dmalloc<float>(128);
    CK(cudaMemcpy(dA, A.data(), 512, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), 256, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C.data(), 512, cudaMemcpyHostToDevice));
    for (int alias = 0; alias < 2; alias++) {
        LAUNCH(1, 32, 0, 0, mma_kernel<BF16>)(dA, dB, dC, dD, alias);
        CK(cudaGetLastError());
        CK(cudaMemcpy(D.data(), dD, 512, cudaMemcpyDeviceToHost));
        double maxerr = 0;
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ref = C[m * 8 + n];
                for (int k = 0; k < 16; k++) {
                    double a = BF16 ? bf2f(A[m * 16 + k]) : h2f(A[m * 16 + k]);
                    double b = BF16 ? bf2f(B[k * 8 + n]) : h2f(B[k * 8 + n]);
                    ref += a * b;
                }
                maxerr = std::max(maxerr, fabs(D[m * 8 + n] - ref));
            }
        /* 17 fp32 additions of terms |.| <= 1: error <= 17 * 2^-24 * 17 ~ 2e-5 */
        TEST_CHECK(maxerr < 2e-5, "mma.m16n8k16 %s%s vs scalar reference from the PTX fragment tables: max abs err %.2e",
                   nm, alias ? " (d aliases c)" : "", maxerr);
    }
    CK(cudaFree(dA)); CK(cudaFree(dB)); CK(cudaFree(dC)); CK(cudaFree(dD));
}

static void test_cp_async(void) {
    const int nt = 64;
    std::vector<float> h(4 * nt), r(4 * nt);
    for (int i = 0; i < 4 * nt; i++) h[i] = (float)i;
    float* src = dmalloc<float>(4 * nt);
    float* out = dmalloc<float>(4 * nt);
    CK(cudaMemcpy(src, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    LAUNCH(1, nt, 4 * nt * sizeof(float), 0, cp_async_kernel)(src, out, 1);
    CK(cudaGetLastError());
    CK(cudaMemcpy(r.data(), out, r.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 4; k++) bad += r[4 * t + k] != h[4 * ((t + 1) % nt) + k];
    TEST_CHECK(bad == 0, "cp_async_16 + commit + wait_all + __syncthreads delivers the data (%d wrong)", bad);
    LAUNCH(1, nt, 4 * nt * sizeof(float), 0, cp_async_kernel)(src, out, 0);
    expect_kernel_error(cudaErrorLaunchFailure, "never waited", "cp.async without cp_async_wait_all");
    CK(cudaMemcpy(r.data(), out, r.size() * 4, cudaMemcpyDeviceToHost));
    int nans = 0;
    for (int i = 0; i < 4 * nt; i++) nans += isnan(r[i]);
    TEST_CHECK(nans == 4 * nt, "... and reads of the destination before the wait see NaN poison (%d/%d)", nans, 4 * nt);
    CK(cudaFree(src)); CK(cudaFree(out));
}

/* ---------------------------------------------------------------- stream capture and graphs */
static __global__ void axpb_kernel(float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { x[i] = a * x[i] + b; }
}

static void test_graphs(void) {
    const int n = 100;
    cudaStream_t s, other;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreate(&other));
    float* x = dmalloc<float>(n);
    float* y = dmalloc<float>(n);
    float* pinned = nullptr;
    CK(cudaMallocHost(&pinned, n * sizeof(float)));
    std::vector<float> h(n), pageable(n, 5.0f);
    for (int i = 0; i < n; i++) { pinned[i] = (float)i; }
    CK(cudaMemset(x, 0, n * sizeof(float)));
    cudaStreamCaptureStatus st;
    CK(cudaStreamIsCapturing(s, &st));
    TEST_CHECK(st == cudaStreamCaptureStatusNone, "cudaStreamIsCapturing: None before a capture");
    /* capture: upload from pinned memory, two launches (by-value arguments), a memset, a host task, a copy back */
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaStreamIsCapturing(s, &st));
    cudaStreamCaptureStatus st_other;
    CK(cudaStreamIsCapturing(other, &st_other));
    TEST_CHECK(st == cudaStreamCaptureStatusActive && st_other == cudaStreamCaptureStatusNone,
               "cudaStreamIsCapturing: Active on the captured stream, None on another");
    size_t launches0 = emu::launch_log().size();
    float a = 2.0f;
    CK(cudaMemcpyAsync(x, pinned, n * sizeof(float), cudaMemcpyHostToDevice, s));
    LAUNCH(1, 128, 0, s, axpb_kernel)(x, a, 1.0f, n);
    a = 100.0f; /* the captured launch keeps a = 2 */
    LAUNCH(1, 128, 0, s, axpb_kernel)(x, 3.0f, 0.0f, n);
    CK(cudaGetLastError());
    CK(cudaMemsetAsync(y, 0, n * sizeof(float), s));
    int host_runs = 0;
    emu::host_task(s, "count", [&host_runs]() { host_runs++; });
    CK(cudaMemcpyAsync(pinned, x, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    /* work on another stream during the capture runs at once */
    LAUNCH(1, 128, 0, other, axpb_kernel)(y, 1.0f, 7.0f, n);
    CK(cudaMemcpy(h.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported
           ? cudaSuccess : cudaErrorUnknown);
    TEST_CHECK(emu::launch_log().size() == launches0 + 1 && host_runs == 0 && pinned[3] == 3.0f,
               "during capture nothing on the captured stream runs (only the other stream's launch: %zu; host task "
               "runs %d)", emu::launch_log().size() - launches0, host_runs);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    TEST_CHECK(e == cudaErrorStreamCaptureInvalidated && graph == nullptr,
               "a synchronous cudaMemcpy during capture is refused (cudaErrorStreamCaptureUnsupported) and "
               "invalidates it: cudaStreamEndCapture returns %s and no graph", cudaGetErrorName(e));
    (void)cudaGetLastError();
    TEST_CHECK(cudaGetLastError() == cudaSuccess, "capture errors are not sticky");
    /* the same capture without the violation */
    for (int i = 0; i < n; i++) { pinned[i] = (float)i; }
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    a = 2.0f;
    CK(cudaMemcpyAsync(x, pinned, n * sizeof(float), cudaMemcpyHostToDevice, s));
    LAUNCH(1, 128, 0, s, axpb_kernel)(x, a, 1.0f, n);
    a = 100.0f;
    LAUNCH(1, 128, 0, s, axpb_kernel)(x, 3.0f, 0.0f, n);
    CK(cudaMemsetAsync(y, 0, n * sizeof(float), s));
    emu::host_task(s, "count", [&host_runs]() { host_runs++; });
    CK(cudaMemcpyAsync(pinned, x, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphDestroy(graph)); /* the instance stays valid */
    int bad = 0;
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < n; i++) { pinned[i] = (float)(i + rep); } /* a replay reads the pinned buffer anew */
        CK(cudaGraphLaunch(exec, s));
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) { bad += pinned[i] != 3.0f * (2.0f * (float)(i + rep) + 1.0f); }
    }
    CK(cudaMemcpy(h.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    TEST_CHECK(bad == 0 && host_runs == 3 && h[0] == 0.0f && emu::graph_launches() == 3,
               "3 replays run copy, kernels (captured arguments), memset and host task in order on fresh input: %d "
               "wrong, host task ran %d times", bad, host_runs);
    /* refused during capture, each invalidating it */
    struct { const char* what; int kind; } cases[] = {
        {"cudaStreamSynchronize of the capturing stream", 0}, {"cudaDeviceSynchronize", 1},
        {"cudaMalloc", 2}, {"a captured copy from pageable host memory", 3}, {"cudaEventSynchronize of a captured event", 4}};
    for (auto& c : cases) {
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        LAUNCH(1, 128, 0, s, axpb_kernel)(x, 1.0f, 1.0f, n);
        cudaEvent_t ev;
        CK(cudaEventCreate(&ev));
        float* tmp = nullptr;
        cudaError_t r = cudaSuccess;
        if (c.kind == 0) { r = cudaStreamSynchronize(s); }
        if (c.kind == 1) { r = cudaDeviceSynchronize(); }
        if (c.kind == 2) { r = cudaMalloc(&tmp, 64); }
        if (c.kind == 3) { r = cudaMemcpyAsync(x, pageable.data(), n * sizeof(float), cudaMemcpyHostToDevice, s); }
        if (c.kind == 4) { CK(cudaEventRecord(ev, s)); r = cudaEventSynchronize(ev); }
        CK(cudaStreamIsCapturing(s, &st));
        cudaGraph_t gr = nullptr;
        cudaError_t end = cudaStreamEndCapture(s, &gr);
        TEST_CHECK(r == cudaErrorStreamCaptureUnsupported && st == cudaStreamCaptureStatusInvalidated &&
                   end == cudaErrorStreamCaptureInvalidated && gr == nullptr,
                   "%s during capture: %s, capture invalidated, cudaStreamEndCapture -> %s", c.what, cudaGetErrorName(r),
                   cudaGetErrorName(end));
        CK(cudaEventDestroy(ev));
        (void)cudaGetLastError();
    }
    e = cudaStreamEndCapture(s, &graph);
    TEST_CHECK(e == cudaErrorIllegalState, "cudaStreamEndCapture without a capture is refused (%s)", cudaGetErrorName(e));
    e = cudaStreamBeginCapture(0, cudaStreamCaptureModeThreadLocal);
    TEST_CHECK(e == cudaErrorStreamCaptureUnsupported, "the legacy NULL stream cannot be captured (%s)", cudaGetErrorName(e));
    (void)cudaGetLastError();
    /* a captured kernel with a barrier bug is reported when the graph runs it (sticky, like any kernel error) */
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    LAUNCH(1, 64, 0, s, divergent_sites_kernel)(y);
    CK(cudaStreamEndCapture(s, &graph));
    TEST_CHECK(cudaGetLastError() == cudaSuccess, "capturing a faulty kernel reports nothing yet");
    cudaGraphExec_t bad_exec;
    CK(cudaGraphInstantiate(&bad_exec, graph, 0));
    CK(cudaGraphDestroy(graph));
    (void)cudaGraphLaunch(bad_exec, s);
    expect_kernel_error(cudaErrorLaunchFailure, "different barriers", "a barrier bug in a replayed graph");
    CK(cudaGraphExecDestroy(bad_exec));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaFreeHost(pinned));
    CK(cudaFree(x)); CK(cudaFree(y));
    CK(cudaStreamDestroy(s)); CK(cudaStreamDestroy(other));
}

static void test_scheduler_speed(void) {
    const int rounds = 50, blocks = 8;
    int* o = dmalloc<int>(1024 * blocks);
    double t0 = emu::now_ms();
    LAUNCH(blocks, 1024, 0, 0, many_barriers_kernel)(o, rounds);
    double t1 = emu::now_ms();
    CK(cudaGetLastError());
    std::vector<int> h(1024 * blocks);
    CK(cudaMemcpy(h.data(), o, h.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < 1024; t++) bad += h[b * 1024 + t] != (t + rounds) % 1024;
    double switches = (double)blocks * 1024 * (2 * rounds + 2);
    TEST_CHECK(bad == 0, "1024-thread blocks through %d barrier rounds correct (%d wrong); %.0f ns per fiber switch",
               2 * rounds + 1, bad, (t1 - t0) * 1e6 / switches);
    CK(cudaFree(o));
}

/* the cuBLASLt stand-in's host GEMM is blocked (K in blocks of 256, 64 x 4 output tiles, vector lanes) for speed;
 * its header promises every element is summed as acc = beta*C, then + op(A)[i][k]*op(B)[k][j] for k = 0..K-1 (the
 * product rounded to fp32, then the add; no FMA), then the epilogue. This is that definition written as one scalar
 * loop per element; 200 random problems per type (transposes, leading dimensions past the rows, beta 0/1, every
 * epilogue, M not a multiple of 64, N not of 4, K up to 700, so across K blocks) must match it bit for bit. A
 * blocking that reorders one element's sum, drops a partial sum between K blocks or writes past a tile fails. */
template <class T>
static int gemm_order_mismatches(std::mt19937& rng) {
    using namespace emu::lt;
    int bad = 0;
    std::normal_distribution<float> nd;
    for (int trial = 0; trial < 200; trial++) {
        Gemm g{};
        g.m = trial % 10 == 0 ? 1 + rng() % 3 : rng() % 150;
        g.n = rng() % 13;
        g.k = trial % 5 == 0 ? 256 + rng() % 450 : rng() % 70;
        g.transa = (int)(rng() & 1);
        g.transb = (int)(rng() & 1);
        const uint32_t eps[4] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                 CUBLASLT_EPILOGUE_DGELU};
        const int e = (int)(rng() % 4);
        g.epilogue = eps[e];
        const uint64_t acols = g.transa ? g.m : g.k, bcols = g.transb ? g.k : g.n;
        g.lda = (int64_t)((g.transa ? g.k : g.m) + rng() % 3);
        g.ldb = (int64_t)((g.transb ? g.n : g.k) + rng() % 3);
        g.ldc = g.ldd = (int64_t)(g.m + rng() % 3);
        g.ld_aux = (int64_t)(g.m + 1);
        auto fill = [&](size_t n) {
            std::vector<T> v(n + 1);
            for (auto& x : v) { x = from_f<T>(nd(rng)); }
            return v;
        };
        std::vector<T> a = fill(g.lda * acols), b = fill(g.ldb * bcols), c = fill(g.ldc * g.n), bias = fill(g.m);
        std::vector<T> aux = fill(g.ld_aux * g.n), aux_ref = aux, d(g.ldd * g.n + 1), d_ref(d.size());
        g.A = a.data(); g.B = b.data(); g.C = c.data();
        g.beta = (float)(rng() & 1);
        g.bias = e == 1 || e == 2 ? bias.data() : nullptr;
        g.aux = e >= 2 ? aux.data() : nullptr;
        g.D = d.data();
        gemm_host<T>(g);
        for (uint64_t j = 0; j < g.n; j++) {
            for (uint64_t i = 0; i < g.m; i++) {
                float acc = g.beta != 0.0f ? to_f(c[i + j * g.ldc]) : 0.0f;
                for (uint64_t k = 0; k < g.k; k++) {
                    volatile float p = to_f(g.transa ? a[i * g.lda + k] : a[i + k * g.lda]) *
                                       to_f(g.transb ? b[j + k * g.ldb] : b[k + j * g.ldb]);
                    acc += p;
                }
                if (g.bias) { acc += to_f(bias[i]); }
                if (e == 2) {
                    aux_ref[i + j * g.ld_aux] = from_f<T>(acc);
                    acc = gelu(acc);
                } else if (e == 3) {
                    acc *= gelu_grad(to_f(aux_ref[i + j * g.ld_aux]));
                }
                d_ref[i + j * g.ldd] = from_f<T>(acc);
            }
        }
        bad += memcmp(d.data(), d_ref.data(), d.size() * sizeof(T)) != 0 ||
               memcmp(aux.data(), aux_ref.data(), aux.size() * sizeof(T)) != 0;
    }
    return bad;
}

static void test_cublaslt_host_gemm_order(void) {
    std::mt19937 rng(20261204);
    const int f = gemm_order_mismatches<float>(rng), bf = gemm_order_mismatches<__nv_bfloat16>(rng),
              h = gemm_order_mismatches<__half>(rng);
    TEST_CHECK(f == 0 && bf == 0 && h == 0,
               "cuBLASLt stand-in: the blocked host GEMM equals its documented per-element order bit for bit "
               "(200 random problems each; mismatches fp32 %d, bf16 %d, fp16 %d)", f, bf, h);
}

int main(void) {
    test_indices();
    test_shared_and_barrier();
    test_reductions_and_shuffles();
    test_warp_errors();
    test_barrier_errors();
    test_atomics();
    test_launch_limits();
    test_memory_errors();
    test_mma_variant<1>();
    test_mma_variant<0>();
    test_cp_async();
    test_graphs();
    test_cublaslt_host_gemm_order();
    test_scheduler_speed();
    TEST_CHECK(cudaDeviceSynchronize() == cudaSuccess, "no sticky error left at the end");
    return testing_finish();
}
