/*
 * llmc/cpu/matmul_bf16.h -- optional BF16 matrix multiply for the CPU backend (--cpu-matmul bf16):
 * single-threaded Cm(M,Ncol) = op(A) @ op(Bm) + beta * Cm on fp32 row-major operands, computed with the
 * AVX512_BF16 instruction vdpbf16ps (Intel Cooper Lake, AMD Zen 4 and later): the operands are rounded to
 * bfloat16 (round to nearest even) while they are packed, products of pairs are summed in fp32.
 *
 * Method: the GotoBLAS/BLIS blocking (Goto & van de Geijn 2008, "Anatomy of high-performance matrix
 * multiplication"): the k dimension is cut into blocks of LLMC_BF16_KC, the columns into blocks of
 * LLMC_BF16_NC, the rows into blocks of LLMC_BF16_MC (loop order k, rows, columns: op(A)'s block is packed once
 * per k block, op(Bm)'s once per k block and row block, i.e. once when M <= 1536 as in every forward at B*T <= 1536)
 * into panels of 12 rows and of 32 columns, and a 12x32 register tile (24 zmm accumulators) runs over the block's
 * k pairs, row panels outer (the 12-row panel stays in L1), column panels inner (op(Bm)'s block, 512 KiB, in L2).
 * The packed layout interleaves k in pairs, the operand order of vdpbf16ps:
 *   Ap[panel][p][r] = (bf16 A'(r, 2p), bf16 A'(r, 2p+1)) as one 32-bit word (broadcast to 16 lanes),
 *   Bp[panel][p][c] = (bf16 B'(2p, c), bf16 B'(2p+1, c)), 16 columns per zmm.
 * Rows, columns and an odd k are zero-padded in the packed copies, so the kernel has no edge cases.
 *
 * Numerics: each operand element gets a relative rounding error of at most 2^-8 (bf16 keeps 8 significant
 * bits, so half an ulp is up to 2^-8 of the value at the bottom of a binade); sums are fp32, so
 * |C - C_fp32| <= ~2^-7 * sum_k |A'(m,k) B'(k,n)|. vdpbf16ps treats bf16 denormal inputs
 * and fp32 denormal results as zero. Deterministic: a fixed order of operations for given shapes.
 *
 * Availability: cpu_bf16_matmul_supported() says whether this CPU executes AVX512_BF16 (the functions are compiled
 * for it with a target attribute, so the build does not need -mavx512bf16); the trainer refuses --cpu-matmul
 * bf16 with one error line where it is not. Scratch: per thread (_Thread_local), 1.5 MiB for op(A)'s block and
 * 512 KiB for op(Bm)'s, allocated on the first call and kept for the process (plain host memory, like
 * OpenBLAS's own buffers: not a device allocation, so not in the memory ledger).
 */
#ifndef LLMC_CPU_MATMUL_BF16_H
#define LLMC_CPU_MATMUL_BF16_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#define LLMC_BF16_MR 12   /* rows of the register tile */
#define LLMC_BF16_NR 32   /* columns of the register tile (two zmm of 16 fp32) */
#define LLMC_BF16_KC 512  /* k per packed block (256 pairs): Bp block 512 x 512 x 2 bytes = 512 KiB (L2) */
#define LLMC_BF16_NC 512  /* columns per packed op(Bm) block */
#define LLMC_BF16_MC 1536 /* rows per packed op(A) block: 1536 x 512 x 2 bytes = 1.5 MiB (one block for B*T <= 1536) */

/* 0 = the fp32 OpenBLAS path (the test reference; the default on CPUs without AVX512_BF16), 1 = this BF16 path
 * for the matmuls of llmc/cpu/matmul.h (the layers' and the lm head's; attention's small products stay fp32). Set once by the
 * trainer before training (cpu_set_matmul_bf16). */
static int cpu_matmul_bf16_on = 0;

/* 1 if this CPU executes AVX512F and AVX512_BF16 instructions, else 0. */
static inline int cpu_bf16_matmul_supported(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* Selects the matmul path: on = 1 BF16 (requires cpu_bf16_matmul_supported(); exits otherwise), 0 fp32. */
static inline void cpu_set_matmul_bf16(int on) {
    if (on && !cpu_bf16_matmul_supported()) {
        FATAL("--cpu-matmul bf16: this CPU has no AVX512_BF16 instructions (needs Intel Cooper Lake / Sapphire "
              "Rapids or AMD Zen 4 or later); use --cpu-matmul fp32");
    }
    cpu_matmul_bf16_on = on ? 1 : 0;
}

/* Per-thread packing buffers (uint32 words), grown on demand. */
static _Thread_local uint32_t* bf16_pack_a = NULL;
static _Thread_local size_t bf16_pack_a_cap = 0;
static _Thread_local uint32_t* bf16_pack_b = NULL;
static _Thread_local size_t bf16_pack_b_cap = 0;

static inline uint32_t* bf16_scratch(uint32_t** buf, size_t* cap, size_t words) {
    if (*cap < words) {
        free(*buf);
        *buf = (uint32_t*)aligned_alloc(64, (words * sizeof(uint32_t) + 63) / 64 * 64);
        if (!*buf) { FATAL("--cpu-matmul bf16: out of memory for a %zu-byte packing buffer", words * 4); }
        *cap = words;
    }
    return *buf;
}

/* out(kp = ceil(n/2)) = pairs (bf16 x[2p], bf16 x[2p+1]) of the contiguous x(n), round to nearest even,
 * an odd n's last pair zero-padded. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void bf16_pairs_contig(const float* x, int n, uint32_t* out) {
    int k = 0;
    for (; k + 32 <= n; k += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
        _mm512_storeu_si512((void*)(out + k / 2), (__m512i)v);
    }
    if (k < n) {
        const int rest = n - k;
        const __mmask16 m0 = (__mmask16)(rest >= 16 ? 0xffffu : (1u << rest) - 1u);
        const __mmask16 m1 = (__mmask16)(rest <= 16 ? 0u : (1u << (rest - 16)) - 1u);
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + k + 16), _mm512_maskz_loadu_ps(m0, x + k));
        const int words = (rest + 1) / 2;
        _mm512_mask_storeu_epi32((void*)(out + k / 2), (__mmask16)((1u << words) - 1u), (__m512i)v);
    }
}

/* out(n) = pairs (bf16 r0[c], bf16 r1[c]) of two contiguous rows (r1 == NULL: zeros), round to nearest even. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void bf16_pairs_interleave(const float* r0, const float* r1, int n, uint32_t* out) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int c = 0; c < n; c += 16) {
        const __mmask16 m = (__mmask16)(n - c >= 16 ? 0xffffu : (1u << (n - c)) - 1u);
        const __m512 a = _mm512_maskz_loadu_ps(m, r0 + c);
        const __m512 b = r1 ? _mm512_maskz_loadu_ps(m, r1 + c) : _mm512_setzero_ps();
        const __m512i v = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        _mm512_mask_storeu_epi32((void*)(out + c), m, v);
    }
}

/* Packs op(X)(x0:x0+xn, k0:k0+kc) into ceil(xn/R) panels of kp = ceil(kc/2) pairs x R lines (R = 12 for op(A),
 * 32 for op(Bm)), zero-padded: dst[panel][p][line]. kcontig: op(X)(x, k) = X[x*ld + k] (else X[k*ld + x]). */
static inline void bf16_pack_block(uint32_t* dst, int R, int kcontig, const float* X, int ld, int x0, int xn,
                                   int k0, int kc) {
    const int kp = (kc + 1) / 2, npan = (xn + R - 1) / R;
    uint32_t tmp[(LLMC_BF16_KC + 1) / 2 + 16];
    for (int pan = 0; pan < npan; pan++) {
        uint32_t* d = dst + (size_t)pan * kp * R;
        const int l0 = pan * R, ln = xn - l0 < R ? xn - l0 : R;
        if (kcontig) { /* line l is a contiguous run of k: convert it, then spread its pairs with stride R */
            for (int l = 0; l < R; l++) {
                if (l >= ln) {
                    for (int p = 0; p < kp; p++) { d[(size_t)p * R + l] = 0; }
                    continue;
                }
                bf16_pairs_contig(X + (size_t)(x0 + l0 + l) * ld + k0, kc, tmp);
                for (int p = 0; p < kp; p++) { d[(size_t)p * R + l] = tmp[p]; }
            }
        } else { /* a pair interleaves two contiguous rows k and k+1 */
            for (int p = 0; p < kp; p++) {
                const float* r0 = X + (size_t)(k0 + 2 * p) * ld + x0 + l0;
                bf16_pairs_interleave(r0, 2 * p + 1 < kc ? r0 + ld : NULL, ln, d + (size_t)p * R);
                for (int l = ln; l < R; l++) { d[(size_t)p * R + l] = 0; }
            }
        }
    }
}

/* The 12x32 register tile: tile(12,32) = sum over kp pairs of Ap panel x Bp panel (fp32, overwritten). */
__attribute__((target("avx512f,avx512bf16")))
static void bf16_kernel_12x32(int kp, const uint32_t* Ap, const uint32_t* Bp, float* tile) {
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps(), c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
    __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps(), c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
    __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps(), c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
    __m512 c60 = _mm512_setzero_ps(), c61 = _mm512_setzero_ps(), c70 = _mm512_setzero_ps(), c71 = _mm512_setzero_ps();
    __m512 c80 = _mm512_setzero_ps(), c81 = _mm512_setzero_ps(), c90 = _mm512_setzero_ps(), c91 = _mm512_setzero_ps();
    __m512 ca0 = _mm512_setzero_ps(), ca1 = _mm512_setzero_ps(), cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512((const void*)(Bp + (size_t)p * 32));
        const __m512bh b1 = (__m512bh)_mm512_load_si512((const void*)(Bp + (size_t)p * 32 + 16));
        const uint32_t* a = Ap + (size_t)p * 12;
        __m512bh av;
#define LLMC_BF16_ROW(r, x0, x1)                                          \
        av = (__m512bh)_mm512_set1_epi32((int)a[r]);                      \
        x0 = _mm512_dpbf16_ps(x0, av, b0);                                \
        x1 = _mm512_dpbf16_ps(x1, av, b1);
        LLMC_BF16_ROW(0, c00, c01) LLMC_BF16_ROW(1, c10, c11) LLMC_BF16_ROW(2, c20, c21)
        LLMC_BF16_ROW(3, c30, c31) LLMC_BF16_ROW(4, c40, c41) LLMC_BF16_ROW(5, c50, c51)
        LLMC_BF16_ROW(6, c60, c61) LLMC_BF16_ROW(7, c70, c71) LLMC_BF16_ROW(8, c80, c81)
        LLMC_BF16_ROW(9, c90, c91) LLMC_BF16_ROW(10, ca0, ca1) LLMC_BF16_ROW(11, cb0, cb1)
#undef LLMC_BF16_ROW
    }
    _mm512_storeu_ps(tile + 0 * 32, c00); _mm512_storeu_ps(tile + 0 * 32 + 16, c01);
    _mm512_storeu_ps(tile + 1 * 32, c10); _mm512_storeu_ps(tile + 1 * 32 + 16, c11);
    _mm512_storeu_ps(tile + 2 * 32, c20); _mm512_storeu_ps(tile + 2 * 32 + 16, c21);
    _mm512_storeu_ps(tile + 3 * 32, c30); _mm512_storeu_ps(tile + 3 * 32 + 16, c31);
    _mm512_storeu_ps(tile + 4 * 32, c40); _mm512_storeu_ps(tile + 4 * 32 + 16, c41);
    _mm512_storeu_ps(tile + 5 * 32, c50); _mm512_storeu_ps(tile + 5 * 32 + 16, c51);
    _mm512_storeu_ps(tile + 6 * 32, c60); _mm512_storeu_ps(tile + 6 * 32 + 16, c61);
    _mm512_storeu_ps(tile + 7 * 32, c70); _mm512_storeu_ps(tile + 7 * 32 + 16, c71);
    _mm512_storeu_ps(tile + 8 * 32, c80); _mm512_storeu_ps(tile + 8 * 32 + 16, c81);
    _mm512_storeu_ps(tile + 9 * 32, c90); _mm512_storeu_ps(tile + 9 * 32 + 16, c91);
    _mm512_storeu_ps(tile + 10 * 32, ca0); _mm512_storeu_ps(tile + 10 * 32 + 16, ca1);
    _mm512_storeu_ps(tile + 11 * 32, cb0); _mm512_storeu_ps(tile + 11 * 32 + 16, cb1);
}

/* Single-threaded Cm(M,Ncol) = op(A)(M,K) @ op(Bm)(K,Ncol) + beta * Cm, row-major, op = transpose if trans*,
 * in BF16 x BF16 -> fp32 (see the top of this file). beta == 0 never reads Cm. M, Ncol <= 0: nothing; K <= 0:
 * Cm = beta * Cm. Call only when cpu_bf16_matmul_supported(). */
static inline void cpu_bf16gemm(int transA, int transB, int M, int Ncol, int K, const float* A, int lda,
                                const float* Bm, int ldb, float beta, float* Cm, int ldc) {
    if (M <= 0 || Ncol <= 0) { return; }
    if (K <= 0) {
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < Ncol; j++) { Cm[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * Cm[(size_t)i * ldc + j]; }
        }
        return;
    }
    const int kp_max = (LLMC_BF16_KC + 1) / 2;
    uint32_t* pa = bf16_scratch(&bf16_pack_a, &bf16_pack_a_cap, (size_t)kp_max * LLMC_BF16_MC);
    uint32_t* pb = bf16_scratch(&bf16_pack_b, &bf16_pack_b_cap,
                                (size_t)kp_max * ((LLMC_BF16_NC + LLMC_BF16_NR - 1) / LLMC_BF16_NR * LLMC_BF16_NR));
    float tile[LLMC_BF16_MR * LLMC_BF16_NR] __attribute__((aligned(64)));
    for (int k0 = 0; k0 < K; k0 += LLMC_BF16_KC) {
        const int kc = K - k0 < LLMC_BF16_KC ? K - k0 : LLMC_BF16_KC, kp = (kc + 1) / 2;
        const int first = k0 == 0;
        for (int i0 = 0; i0 < M; i0 += LLMC_BF16_MC) {
            const int mc = M - i0 < LLMC_BF16_MC ? M - i0 : LLMC_BF16_MC;
            bf16_pack_block(pa, LLMC_BF16_MR, !transA, A, lda, i0, mc, k0, kc);
            for (int j0 = 0; j0 < Ncol; j0 += LLMC_BF16_NC) {
                const int nc = Ncol - j0 < LLMC_BF16_NC ? Ncol - j0 : LLMC_BF16_NC;
                bf16_pack_block(pb, LLMC_BF16_NR, transB, Bm, ldb, j0, nc, k0, kc);
                for (int ir = 0; ir < mc; ir += LLMC_BF16_MR) {
                    const int mr = mc - ir < LLMC_BF16_MR ? mc - ir : LLMC_BF16_MR;
                    const uint32_t* ap = pa + (size_t)(ir / LLMC_BF16_MR) * kp * LLMC_BF16_MR;
                    for (int jr = 0; jr < nc; jr += LLMC_BF16_NR) {
                        const int nr = nc - jr < LLMC_BF16_NR ? nc - jr : LLMC_BF16_NR;
                        bf16_kernel_12x32(kp, ap, pb + (size_t)(jr / LLMC_BF16_NR) * kp * LLMC_BF16_NR, tile);
                        for (int r = 0; r < mr; r++) {
                            float* c = Cm + (size_t)(i0 + ir + r) * ldc + j0 + jr;
                            const float* t = tile + r * LLMC_BF16_NR;
                            if (!first) {
                                for (int q = 0; q < nr; q++) { c[q] += t[q]; }
                            } else if (beta == 0.0f) {
                                for (int q = 0; q < nr; q++) { c[q] = t[q]; }
                            } else {
                                for (int q = 0; q < nr; q++) { c[q] = beta * c[q] + t[q]; }
                            }
                        }
                    }
                }
            }
        }
    }
}

#endif /* LLMC_CPU_MATMUL_BF16_H */
