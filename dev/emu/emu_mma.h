/*
 * dev/emu/emu_mma.h -- CPU emulation of the tensor-core and async-copy wrappers of llmc/cuda/mma.cuh
 * (provided to mma.cuh by the stand-in dev/emu/include/cuda_runtime.h, which includes dev/emu/emu.h first).
 *
 *   mma_m16n8k16_bf16 / mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4])
 *     D(16x8 f32) = A(16x16, row) * B(16x8, col) + C, with the fragment layouts of the PTX ISA
 *     ("Matrix fragments for mma.m16n8k16 with floating point type"), exactly as documented in
 *     llmc/cuda/mma.cuh. It is a warp collective: all 32 lanes of the warp must call it (a partial
 *     warp, an exited lane, or lanes meeting at a different collective are reported as kernel
 *     errors, like other warp intrinsics). The last lane to arrive gathers the fragments of all 32
 *     lanes, multiplies (products exact in fp32, summed in fp32 in increasing k starting from C)
 *     and scatters D. d may alias c.
 *   ldmatrix_x4 / ldmatrix_x4_trans(uint32_t r[4], const void* smem_row)
 *     Warp collective (all 32 lanes): lane 8j + r passes row r of matrix j; the last lane to arrive reads the
 *     4 x 8 rows (16 bytes each) and hands every lane its words as documented in llmc/cuda/mma.cuh (lane L:
 *     row L/4, columns 2(L%4) and 2(L%4)+1 of matrix j, or of its transpose). Checked: every lane calls the
 *     same variant; the row addresses that are read are 16-byte aligned and lie inside the launch's dynamic
 *     shared memory.
 *   cp_async_16(smem_dst, gmem_src), cp_async_commit(), cp_async_wait_all()
 *     The copy is DEFERRED: cp_async_16 only records it, cp_async_wait_all performs all of the
 *     calling thread's recorded copies. So a kernel that reads the destination before waiting, or
 *     lets other threads read it without wait + __syncthreads, reads stale/poisoned (NaN) shared
 *     memory and fails its test. Checked: both addresses 16-byte aligned; the source lies inside one
 *     device allocation; copies still pending when a block ends are reported.
 *     (Real hardware may complete a copy at any time before the wait; the emulation picks the latest
 *     possible moment, which is the one that exposes missing waits.)
 */
#ifndef LLMC_DEV_EMU_MMA_H
#define LLMC_DEV_EMU_MMA_H

#include <stdint.h>
#include <string.h>
#include "emu.h"

namespace emu {

struct MmaIn {
    const uint32_t* a;
    const uint32_t* b;
    const float* c;
    float* d;
    int is_bf16;
};

inline float mma_elem(uint32_t word, int hi, int is_bf16) {
    uint16_t h = (uint16_t)(hi ? (word >> 16) : (word & 0xffffu));
    if (is_bf16) {
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    return __half2float(__ushort_as_half(h));
}

inline void mma_m16n8k16_fn(Fiber** L, unsigned mask) {
    if (mask != 0xffffffffu) { EMU_FAIL("mma.m16n8k16 needs all 32 lanes of the warp (mask 0x%08x)", mask); }
    float A[16][16], B[16][8], C[16][8];
    int is_bf16 = ((const MmaIn*)L[0]->win)->is_bf16;
    for (int lane = 0; lane < 32; lane++) {
        const MmaIn* in = (const MmaIn*)L[lane]->win;
        if (in->is_bf16 != is_bf16) { EMU_FAIL("mma: lanes mix the bf16 and f16 variants"); }
        const int gq = lane >> 2, t = lane & 3;
        for (int hi = 0; hi < 2; hi++) {
            A[gq][2 * t + hi] = mma_elem(in->a[0], hi, is_bf16);
            A[gq + 8][2 * t + hi] = mma_elem(in->a[1], hi, is_bf16);
            A[gq][2 * t + 8 + hi] = mma_elem(in->a[2], hi, is_bf16);
            A[gq + 8][2 * t + 8 + hi] = mma_elem(in->a[3], hi, is_bf16);
            B[2 * t + hi][gq] = mma_elem(in->b[0], hi, is_bf16);
            B[2 * t + 8 + hi][gq] = mma_elem(in->b[1], hi, is_bf16);
        }
        C[gq][2 * t] = in->c[0];
        C[gq][2 * t + 1] = in->c[1];
        C[gq + 8][2 * t] = in->c[2];
        C[gq + 8][2 * t + 1] = in->c[3];
    }
    float D[16][8];
    for (int m = 0; m < 16; m++) {
        for (int n = 0; n < 8; n++) {
            float acc = C[m][n];
            for (int k = 0; k < 16; k++) { acc += A[m][k] * B[k][n]; }
            D[m][n] = acc;
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const MmaIn* in = (const MmaIn*)L[lane]->win;
        const int gq = lane >> 2, t = lane & 3;
        in->d[0] = D[gq][2 * t];
        in->d[1] = D[gq][2 * t + 1];
        in->d[2] = D[gq + 8][2 * t];
        in->d[3] = D[gq + 8][2 * t + 1];
    }
}

inline void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], int is_bf16,
                         const char* file, int line) {
    MmaIn in{a, b, c, d, is_bf16};
    warp_collective(WK_MMA, 0xffffffffu, &in, nullptr, mma_m16n8k16_fn, file, line);
}

} /* namespace emu */

namespace emu {

struct LdmatrixIn {
    const void* row;
    uint32_t* r;
    int num;
    int trans;
};

inline void ldmatrix_fn(Fiber** L, unsigned mask) {
    if (mask != 0xffffffffu) { EMU_FAIL("ldmatrix needs all 32 lanes of the warp (mask 0x%08x)", mask); }
    const LdmatrixIn* in0 = (const LdmatrixIn*)L[0]->win;
    const int num = in0->num, trans = in0->trans;
    uint16_t M[4][8][8];
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixIn* in = (const LdmatrixIn*)L[lane]->win;
        if (in->num != num || in->trans != trans) { EMU_FAIL("ldmatrix: lanes call different variants"); }
        if (lane >= 8 * num) { continue; } /* address not read */
        const char* p = (const char*)in->row;
        if ((uintptr_t)p & 15u) { EMU_FAIL("ldmatrix: lane %d's row address %p is not 16-byte aligned", lane, in->row); }
        if (!(p >= g.smem_ptr && p + 16 <= g.smem_ptr + g.smem)) {
            EMU_FAIL("ldmatrix: lane %d's row %p is outside the launch's %zu bytes of dynamic shared memory (offset %ld)",
                     lane, in->row, g.smem, (long)(p - g.smem_ptr));
        }
        memcpy(M[lane >> 3][lane & 7], p, 16);
    }
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixIn* in = (const LdmatrixIn*)L[lane]->win;
        const int gq = lane >> 2, t = lane & 3;
        for (int j = 0; j < num; j++) {
            uint16_t lo = trans ? M[j][2 * t][gq] : M[j][gq][2 * t];
            uint16_t hi = trans ? M[j][2 * t + 1][gq] : M[j][gq][2 * t + 1];
            in->r[j] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}

inline void ldmatrix(uint32_t* r, const void* row, int num, int trans, const char* file, int line) {
    LdmatrixIn in{row, r, num, trans};
    warp_collective(WK_LDMATRIX, 0xffffffffu, &in, nullptr, ldmatrix_fn, file, line);
}

} /* namespace emu */

static inline void ldmatrix_x4(uint32_t r[4], const void* smem_row, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
    ::emu::ldmatrix(r, smem_row, 4, 0, file, line);
}
static inline void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row, const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
    ::emu::ldmatrix(r, smem_row, 4, 1, file, line);
}

static inline void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::emu::mma_m16n8k16(d, a, b, c, 1, file, line);
}
static inline void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::emu::mma_m16n8k16(d, a, b, c, 0, file, line);
}

static inline void cp_async_16(void* smem_dst, const void* gmem_src) {
    ::emu::Fiber* f = ::emu::g.cur;
    if (!f) {
        fprintf(stderr, "emu: cp_async_16 called outside a kernel\n");
        abort();
    }
    if (((uintptr_t)smem_dst | (uintptr_t)gmem_src) & 15u) {
        EMU_FAIL("cp_async_16: addresses must be 16-byte aligned (dst %p, src %p)", smem_dst, gmem_src);
    }
    if (!::emu::find_alloc(gmem_src, 16)) {
        char w[512];
        ::emu::describe_address(w, sizeof w, (uintptr_t)gmem_src);
        EMU_FAIL("cp_async_16: the 16 source bytes at %p are not inside one device allocation (%s)", gmem_src, w);
    }
    char* d = (char*)smem_dst;
    if (d >= ::emu::g.smem_region && d < ::emu::g.smem_guard + ::emu::g.page &&
        (d < ::emu::g.smem_ptr || d + 16 > ::emu::g.smem_ptr + ::emu::g.smem)) {
        EMU_FAIL("cp_async_16: destination %p is outside the launch's %zu bytes of dynamic shared memory (offset %ld)",
                 smem_dst, ::emu::g.smem, (long)(d - ::emu::g.smem_ptr));
    }
    f->async_pending.push_back(::emu::AsyncCopy{smem_dst, gmem_src, 16});
}
static inline void cp_async_commit(void) {}
static inline void cp_async_wait_all(void) {
    ::emu::Fiber* f = ::emu::g.cur;
    if (!f) { return; }
    for (const ::emu::AsyncCopy& c : f->async_pending) { memcpy(c.dst, c.src, c.bytes); }
    f->async_pending.clear();
}

#endif /* LLMC_DEV_EMU_MMA_H */
