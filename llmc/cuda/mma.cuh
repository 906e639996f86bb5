/*
 * llmc/cuda/mma.cuh -- the ONLY place in llmc/ with inline PTX.
 *
 * A handful of small device functions wrapping warp-level tensor-core MMA and
 * the sm_80 asynchronous global->shared copy. Everything else in llmc/cuda is
 * plain CUDA C++. The inline-PTX versions below are compiled only by nvcc
 * (__CUDACC__). Any other compiler gets the CUDA backend only on a runtime that
 * runs kernels without nvcc (the tests' CPU execution layer, llmc/README.md,
 * "Tests"), and that runtime's <cuda_runtime.h> must provide functions with
 * exactly the names, signatures and semantics documented here:
 *
 *   void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
 *   void mma_m16n8k16_f16 (float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
 *   void ldmatrix_x4(uint32_t r[4], const void* smem_row);          // four 8x8 b16 matrices
 *   void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row);    // four, each transposed
 *   void cp_async_16(void* smem_dst, const void* gmem_src);   // 16 bytes, both 16-byte aligned
 *   void cp_async_commit(void);
 *   void cp_async_wait_all(void);
 *
 * (An emulation may perform cp_async_16 synchronously; cp_async_commit may be a
 * no-op; cp_async_wait_all must make the copies visible to the calling thread.
 * Visibility to OTHER threads is always established by the kernel's own
 * __syncthreads() after cp_async_wait_all(), exactly as on the GPU.)
 *
 * Source: PTX ISA (NVIDIA, "Parallel Thread Execution ISA", sections
 * "Warp-level matrix multiply-accumulate instructions: mma" -> "Matrix
 * fragments for mma.m16n8k16 with floating point type", and "cp.async").
 *
 * ---------------------------------------------------------------------------
 * MMA  D(16x8, f32) = A(16x16, bf16|f16, row-major) * B(16x8, bf16|f16, col-major) + C(16x8, f32)
 * ---------------------------------------------------------------------------
 * Collective over the 32 lanes of a warp (all lanes must execute it with
 * converged control flow). For lane L let  g = L >> 2  (0..7, "groupID")
 * and  t = L & 3  (0..3, "threadID_in_group").
 *
 * A (M=16 rows x K=16 cols): four 32-bit registers, each holding two 16-bit
 * elements; the element with the LOWER column index sits in the LOW 16 bits.
 *     a[0] = { A[g    ][2t], A[g    ][2t+1] }
 *     a[1] = { A[g + 8][2t], A[g + 8][2t+1] }
 *     a[2] = { A[g    ][2t + 8], A[g    ][2t + 9] }
 *     a[3] = { A[g + 8][2t + 8], A[g + 8][2t + 9] }
 *
 * B (K=16 rows x N=8 cols): two 32-bit registers; lower k index in LOW bits.
 *     b[0] = { B[2t    ][g], B[2t + 1][g] }
 *     b[1] = { B[2t + 8][g], B[2t + 9][g] }
 *   ("col" layout: for a fixed column n = g the lane holds consecutive k.
 *    If B = X^T for a row-major X (N x K), i.e. B[k][n] = X[n][k], then
 *    b[0] is the 32-bit word X[g][2t..2t+1] -- contiguous in memory.)
 *
 * C, D (M=16 x N=8, fp32): four floats.
 *     c[0] = C[g    ][2t],  c[1] = C[g    ][2t + 1]
 *     c[2] = C[g + 8][2t],  c[3] = C[g + 8][2t + 1]
 *
 * Consequence used by the attention kernels: the accumulators of two
 * horizontally adjacent 16x8 D tiles (columns 0..7 in d0, 8..15 in d1),
 * converted to 16-bit and packed pairwise, form exactly the A fragment of the
 * 16x16 matrix they make up:
 *     a[0] = pack(d0[0], d0[1]), a[1] = pack(d0[2], d0[3]),
 *     a[2] = pack(d1[0], d1[1]), a[3] = pack(d1[2], d1[3]).
 *
 * d may alias c (in-place accumulation).
 * Accumulation is in fp32 (the hardware's internal summation order within the
 * k=16 dot product is unspecified; emulations sum in increasing k).
 * Requires sm_80+ for bf16 (the f16 variant exists from sm_80 in this form).
 *
 * ---------------------------------------------------------------------------
 * ldmatrix (sm_75+): ldmatrix.sync.aligned.m8n8.x4{,.trans}.shared.b16 (PTX ISA, "Warp-level matrix
 * load instruction: ldmatrix"). Collective over the 32 lanes of a warp (converged control flow). It loads
 * four matrices of 8x8 16-bit elements from shared memory. Lane 8j + r (j < 4, r < 8) passes the address of
 * row r of matrix j: 8 consecutive elements, 16 bytes, 16-byte aligned.
 * With g = L >> 2 and t = L & 3 as above, lane L receives in r[j]
 *     plain:  { Mj[g][2t], Mj[g][2t + 1] }          (row g, lower column in the low 16 bits)
 *     .trans: { Mj[2t][g], Mj[2t + 1][g] }          (the same from the transpose of Mj)
 * which are exactly the mma fragments above: an A fragment is x4 of the four 8x8 quarters (rows 0-7/8-15 x
 * cols 0-7/8-15, in the order a[0..3]); the B fragments of two adjacent n8 tiles of B = X^T (X row-major, n
 * along rows) are x4 of X's blocks (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15); those of
 * B = X (k along rows) are x4.trans of (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15). Either
 * way r[0..1] is the first tile's fragment and r[2..3] the second's.
 * One LDSM instead of four to eight 32-bit or 16-bit shared loads (plus the packing).
 *
 * ---------------------------------------------------------------------------
 * cp.async (sm_80+): cp_async_16 starts an asynchronous 16-byte copy from
 * global to shared memory (cp.async.cg: cached in L2 only). cp_async_commit
 * closes the current group of copies issued by this thread; cp_async_wait_all
 * blocks until ALL of this thread's copies have completed. Both addresses must
 * be 16-byte aligned. On architectures below sm_80 the wrappers fall back to a
 * synchronous 16-byte load/store.
 */
#ifndef LLMC_CUDA_MMA_CUH
#define LLMC_CUDA_MMA_CUH

#include <stdint.h>

#ifdef __CUDACC__

/* D = A*B + C, bf16 inputs, fp32 accumulate. Layouts: see header comment. */
static __device__ __forceinline__ void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                         const float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    (void)a; (void)b;
    d[0] = c[0]; d[1] = c[1]; d[2] = c[2]; d[3] = c[3];
    __trap();  /* never reached: the host dispatch only selects MMA kernels on sm_80+ builds */
#endif
}

/* D = A*B + C, fp16 inputs, fp32 accumulate. Layouts: see header comment. */
static __device__ __forceinline__ void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                        const float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    (void)a; (void)b;
    d[0] = c[0]; d[1] = c[1]; d[2] = c[2]; d[3] = c[3];
    __trap();
#endif
}

/* Warp-collective loads of 8x8 16-bit matrices from shared memory; layouts: see the header comment. */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#else
    (void)smem_row;
    r[0] = r[1] = r[2] = r[3] = 0u;
    __trap(); /* never reached: the MMA kernels that call it are selected only on sm_80+ builds */
#endif
}
static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#else
    (void)smem_row;
    r[0] = r[1] = r[2] = r[3] = 0u;
    __trap();
#endif
}

/* Asynchronous 16-byte global -> shared copy (both 16-byte aligned). */
static __device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem_src) : "memory");
#else
    *(int4*)smem_dst = *(const int4*)gmem_src;
#endif
}

/* Closes the group of cp.async copies issued so far by this thread. */
static __device__ __forceinline__ void cp_async_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Waits until every cp.async copy issued by this thread has landed. */
static __device__ __forceinline__ void cp_async_wait_all(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

#endif /* __CUDACC__ */
#endif /* LLMC_CUDA_MMA_CUH */
