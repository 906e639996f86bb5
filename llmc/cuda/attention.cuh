/*
 * llmc/cuda/attention.cuh -- causal multi-head self-attention, flash-attention style
 * (FlashAttention-2: Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism
 * and Work Partitioning", Algorithms 1 (forward) and 2 (backward); online softmax from
 * Milakov & Gimelshein 2018). Tensor-core MMA through llmc/cuda/mma.cuh.
 *
 * Grouped-query attention (GQA, Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models
 * from Multi-Head Checkpoints"; llmc/README.md): NKV key/value heads, NKV dividing NH, query head h reading kv head
 * h / g, g = NH/NKV (consecutive query heads share a kv head, the Llama/HF repeat_kv order). The forward, the
 * three-pass backward, the one-kernel FA2 backward and the CUDA-core kernels take NKV natively: the K/V tile loads
 * index kv head h/g in the (B,T,(NH+2*NKV)*hs) rows, and the dK/dV kernels own one (key tile, kv head) each and loop over the g query heads of
 * the group, so dK/dV are summed in fp32 registers in a fixed order and rounded to floatX once (no expanded copy, no
 * reduction pass, no extra scratch). NKV = NH is multi-head attention (MHA) with the same kernels, the same work and
 * the same results as before GQA.
 * llmc/cuda/attention_gqa.cuh maps the contract of llmc/backend.h onto this file (and, under USE_CUDNN, onto cuDNN's
 * SDPA first; see that file).
 *
 * Layout (what every kernel here reads and writes), hs = C/NH, KVC = NKV*hs:
 *   qkv  (B,T,C+2*KVC) floatX, rows [q(C) | k(KVC) | v(KVC)]; query head h uses q channels h*hs..(h+1)*hs-1 and
 *         kv head h/g's k and v channels; NKV = NH: (B,T,3C), the multi-head layout.
 *   out  (B,T,C)  floatX, out[b,t,h*hs+d] = sum_{j<=t} softmax_j(q_t.k_j / sqrt(hs)) v_j[d] (k, v of kv head h/g).
 *   state (B,NH,T) fp32: natural-log log-sum-exp of the scaled scores of each query row,
 *         lse[b,h,t] = log(sum_{j<=t} exp(q_t.k_j / sqrt(hs)))   (attention_state_floats = B*NH*T).
 *   scratch fp32: D[b,h,t] = sum_d dout[b,t,h*hs+d] * out[b,t,h*hs+d], (B,NH,T), at its start (backward only;
 *         forward does not touch it); attention_flash_scratch_floats = B*NH*T, at every NKV, or
 *         attention_fa2_scratch_floats when built with ATTN_BWD_FA2=1 (+ the fp32 dQ accumulator B*T*C and
 *         B*NH*ceil(T/16) flags).
 *   dqkv qkv's shape, floatX, overwritten with dQ | dK | dV; dK, dV of kv head j = the sum over its query heads
 *         j*g .. j*g+g-1 of their multi-head gradients.
 * The (T,T) score/probability matrix never exists in global memory.
 *
 * Paths (chosen per call by attention_flash_path):
 *   MMA path: floatX = bf16 or fp16, hs in {16, 32, 64, 128}, qkv/out/dout/dqkv 16-byte aligned and
 *     C a multiple of 8. Blocks of 4 warps; each warp owns 16 rows (mma m16n8k16 tiles).
 *     Forward: block = 64 query rows; Q fragments in registers; K/V tiles of 64 keys double-buffered in
 *       shared memory with cp.async; scores pre-scaled by log2(e)/sqrt(hs) so exp2f is used; tiles (and
 *       8-key sub-tiles per warp) entirely above the diagonal are skipped; query tiles launched
 *       longest-first. The (64 x hs) output is staged in shared memory for 128-bit stores.
 *     Backward (deterministic, no atomics): (1) D = rowsum(dO*O) into scratch; (2) one block per (64-key
 *       tile, kv head) accumulates dK, dV in registers over the g query heads of its group and, for each, the
 *       query tiles at or below the diagonal (FA2 Alg. 2 outer loop over keys; one double-buffered loop over
 *       the g x tiles steps); (3) one block per (64-query tile, query head) accumulates dQ over key tiles (recomputes
 *       S and dP; 7 instead of 5 matmuls of work, in exchange for fp32-atomic-free determinism and no
 *       dQ scratch). That is attention_backward_flash7, the default.
 *     Backward, FA2 (ATTN_BWD_FA2=1, or attention_backward_fa2 directly): one kernel per (64-key tile, kv head),
 *       looping over the group's query heads as the dK/dV kernel does, does all 5 matmuls;
 *       D is computed by the block on each query tile's diagonal; dQ is summed in fp32 in global memory in a fixed
 *       key-tile order (last tile first), handed from block to block through per-tile flags (no atomics on values:
 *       deterministic). See attention_backward_fa2_mma_kernel.
 *   Fallback path (any hs <= 256, every precision incl. fp32, any alignment): one warp per query row
 *     (forward, dQ) or (key row, kv head) (dK, dV, looping over the group's query heads), fp32 CUDA-core
 *     arithmetic, same state and results.
 * Both paths handle every T >= 1 (partial tiles are zero-filled and masked).
 *
 * Error behaviour: invalid shapes (C % NH != 0, hs > 256, grid too large) print file:line and exit
 * (FATAL); every CUDA call and launch is checked (CUDA_CHECK / CUDA_CHECK_LAUNCH).
 * All work is queued on main_stream(); nothing synchronises the host.
 *
 * Entry points: attention_forward_flash / attention_backward_flash7 (NKV key/value heads) and attention_backward_flash
 * (multi-head; FA2 or three-pass per ATTN_BWD_FA2) pick the path per call; attention_forward_cuda_cores /
 * attention_backward_cuda_cores (NKV) run the fallback kernels directly (the kernel checks and benchmarks time both
 * paths).
 * Performance (GQA): the forward and the dQ kernel do the work of the multi-head kernels (each query head streams
 * its kv head's tiles, which g query heads now share through L2 instead of g expanded copies); the dK/dV kernel
 * runs B*NKV*ceil(T/64) blocks of g times the work each, so at small B*NKV*T/64 fewer blocks fill the GPU (not
 * measured on a GPU here). attention_state_floats and attention_flash_scratch_floats (end of file) size the contract's
 * buffers, for cuDNN's SDPA too (USE_CUDNN: its stats are this state; the flash kernels run what cuDNN does not take).
 */
#ifndef LLMC_CUDA_ATTENTION_CUH
#define LLMC_CUDA_ATTENTION_CUH

#include "common.cuh"
#include "mma.cuh"

#define ATTN_THREADS 128   /* 4 warps per block on every attention kernel */
#define ATTN_ROWS 64       /* query rows (forward, dQ) or key rows (dK/dV) per MMA block: 4 warps x 16 */
#define ATTN_KTILE 64      /* keys per K/V tile in the forward and dQ kernels */
#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f
#define ATTN_FALLBACK_MAX_HS 256

/* ======================================================================== small device helpers */

#if !FLOATX_IS_FLOAT
/* stores the 32-bit word u as floatX p[0] (low half) and p[1] (high half); p 4-byte aligned */
static __device__ __forceinline__ void attn_st32(floatX* p, uint32_t u) {
#ifdef __CUDACC__
    *reinterpret_cast<uint32_t*>(p) = u;
#else
    memcpy(p, &u, 4); /* host compilers enforce strict aliasing: no uint32_t store through a floatX pointer */
#endif
}
/* pack two 16-bit values: lo in bits 0..15, hi in bits 16..31 */
static __device__ __forceinline__ uint32_t attn_pack_x(floatX lo, floatX hi) {
    uint16_t a, b;
    memcpy(&a, &lo, 2);
    memcpy(&b, &hi, 2);
    return (uint32_t)a | ((uint32_t)b << 16);
}
/* round two floats to floatX (nearest) and pack as above */
static __device__ __forceinline__ uint32_t attn_pack_f(float lo, float hi) {
#if defined(__CUDACC__) && defined(ENABLE_BF16) /* nvcc's packed bf16x2 conversion; elsewhere two scalar ones */
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
#else
    return attn_pack_x(from_float<floatX>(lo), from_float<floatX>(hi));
#endif
}
/* d += A*B on the tensor cores, input type = floatX (bf16 or fp16) */
static __device__ __forceinline__ void attn_mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(ENABLE_FP16)
    mma_m16n8k16_f16(d, a, b, d);
#else
    mma_m16n8k16_bf16(d, a, b, d);
#endif
}
/* Fragment loads from shared memory, one ldmatrix each (mma.cuh; lane = 4g + t). Every row address is 16-byte
 * aligned: LD = HS + 8 elements (a multiple of 8) and the column offsets are multiples of 8.
 * A fragment (16x16) of a row-major smem matrix M with leading dimension LD: rows r0..r0+15, cols c0..c0+15;
 * ldmatrix.x4 of the quarters (rows +0/+8, cols +0/+8) in the order a[0..3]. */
template <int LD>
static __device__ __forceinline__ void attn_load_a(uint32_t a[4], const floatX* M, int r0, int c0, int g, int t) {
    const int lane = 4 * g + t, j = lane >> 3;
    ldmatrix_x4(a, M + (r0 + (lane & 7) + 8 * (j & 1)) * LD + c0 + 8 * (j >> 1));
}
/* The B fragments of two adjacent n8-tiles of B = X^T (rows n0..n0+7 and n0+8..n0+15 of X): one ldmatrix.x4 of
 * X's blocks (rows n0+0..7, cols k0+0..7), (n0+0..7, k0+8..15), (n0+8..15, k0+0..7), (n0+8..15, k0+8..15);
 * b[0..1] is tile n0's fragment, b[2..3] tile n0+8's. */
template <int LD>
static __device__ __forceinline__ void attn_load_bt2(uint32_t b[4], const floatX* X, int n0, int k0, int g, int t) {
    const int lane = 4 * g + t, j = lane >> 3;
    ldmatrix_x4(b, X + (n0 + (lane & 7) + 8 * (j >> 1)) * LD + k0 + 8 * (j & 1));
}
/* A fragment (16x16) of A = X^T for a row-major smem matrix X with leading dimension LD: A rows r0..r0+15 are X's
 * columns, A cols c0..c0+15 X's rows; ldmatrix.x4.trans of X's blocks (rows c0+0..7, cols r0+0..7), (c0+0..7,
 * r0+8..15), (c0+8..15, r0+0..7), (c0+8..15, r0+8..15) gives a[0..3] in attn_load_a's order. */
template <int LD>
static __device__ __forceinline__ void attn_load_at(uint32_t a[4], const floatX* X, int r0, int c0, int g, int t) {
    const int lane = 4 * g + t, j = lane >> 3;
    ldmatrix_x4_trans(a, X + (c0 + (lane & 7) + 8 * (j >> 1)) * LD + r0 + 8 * (j & 1));
}
/* acc[n] += A @ B_n for the ON n8-tiles of B = X, X row-major in smem: B_n[k][c] = X[k0+k][8n+c]. The B fragments
 * of tiles n and n+1 come from one ldmatrix.x4.trans of X's blocks (rows k0+0..7 / k0+8..15) x (cols 8n.. / 8n+8..):
 * registers 0-1 are tile n's fragment, 2-3 tile n+1's. ON = HS/8 is even for every instantiated head size. */
template <int LD, int ON>
static __device__ __forceinline__ void attn_mma_ax(float acc[ON][4], const uint32_t a[4], const floatX* X, int k0,
                                                   int g, int t) {
    static_assert(ON % 2 == 0, "attn_mma_ax loads B fragments in pairs of n8 tiles");
    const int lane = 4 * g + t, j = lane >> 3;
    const floatX* row = X + (k0 + (lane & 7) + 8 * (j & 1)) * LD + 8 * (j >> 1);
#pragma unroll
    for (int n = 0; n < ON; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, row + n * 8);
        attn_mma(acc[n], a, b);
        attn_mma(acc[n + 1], a, b + 2);
    }
}
/* Warp GEMM acc (16 x SN*8, fp32) = A (16 rows from smem row r0, KS*16 cols) @ X^T (SN*8 rows of smem X, same
 * cols): the 16x8 output tile n is computed only when n*8 + 7 >= n_edge (causal skip of tiles that are fully
 * masked; n_edge <= 0 computes every tile); skipped tiles stay 0. Fragment layouts: attn_load_a/attn_load_bt2. */
template <int LD, int SN, int KS>
static __device__ __forceinline__ void attn_warp_gemm_abt(float acc[SN][4], const floatX* A, int r0, const floatX* X,
                                                          int n_edge, int g, int t) {
#pragma unroll
    for (int n = 0; n < SN; n++) { acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f; }
    static_assert(SN % 2 == 0, "attn_warp_gemm_abt loads B fragments in pairs of n8 tiles");
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[4];
        attn_load_a<LD>(a, A, r0, ks * 16, g, t);
#pragma unroll
        for (int n = 0; n < SN; n += 2) {
            if (n * 8 + 15 >= n_edge) { /* tile n+1 is needed (and tile n when n*8+7 >= n_edge too) */
                uint32_t bf[4];
                attn_load_bt2<LD>(bf, X, n * 8, ks * 16, g, t);
                if (n * 8 + 7 >= n_edge) { attn_mma(acc[n], a, bf); }
                attn_mma(acc[n + 1], a, bf + 2);
            }
        }
    }
}
/* A fragment (16 rows x 16 cols) from fp32 accumulators of two adjacent 16x8 tiles (cols 0-7: x, 8-15: y) */
static __device__ __forceinline__ void attn_acc_to_a(uint32_t a[4], const float x[4], const float y[4]) {
    a[0] = attn_pack_f(x[0], x[1]);
    a[1] = attn_pack_f(x[2], x[3]);
    a[2] = attn_pack_f(y[0], y[1]);
    a[3] = attn_pack_f(y[2], y[3]);
}

/* Block-cooperative copy of a (ROWS x HS) tile whose row r starts at src + r*ld into smem dst with
 * leading dimension HS+8 (16-byte row padding: conflict-free fragment loads). Rows >= rows_valid are
 * zero-filled. cp.async; the caller commits and waits. */
template <int HS, int ROWS>
static __device__ __forceinline__ void attn_load_tile(floatX* dst, const floatX* src, int rows_valid, size_t ld) {
    constexpr int CPR = HS / 8; /* 16-byte chunks per row */
    constexpr int LD = HS + 8;
    for (int i = threadIdx.x; i < ROWS * CPR; i += blockDim.x) {
        const int r = i / CPR;
        const int c = i % CPR;
        floatX* d = dst + r * LD + c * 8;
        if (r < rows_valid) {
            cp_async_16(d, src + (size_t)r * ld + c * 8);
        } else {
            x128 z;
            for (int k = 0; k < 8; k++) { z[k] = from_float<floatX>(0.0f); }
            store128(d, z);
        }
    }
}
/* A warp stores its 16 staged smem rows (leading dimension HS+8) to global rows row0.. (< T), 128-bit */
template <int HS>
static __device__ __forceinline__ void attn_store_rows(floatX* dst, size_t ld, const floatX* stage, int row0, int T,
                                                       int lane) {
    constexpr int CPR = HS / 8;
    constexpr int LD = HS + 8;
    for (int i = lane; i < 16 * CPR; i += WARP_SIZE) {
        const int r = i / CPR;
        const int c = i % CPR;
        if (row0 + r < T) { store128(dst + (size_t)(row0 + r) * ld + c * 8, load128(stage + r * LD + c * 8)); }
    }
}

/* ======================================================================== MMA forward */

/* grid (ceil(T/64), B*NH), block 128, dynamic smem attn_fwd_smem_bytes(HS).
 * out (B,T,C), lse (B,NH,T) natural log, qkv (B,T,(NH+2*NKV)*HS): query head h reads kv head h/(NH/NKV).
 * scale_log2 = log2(e)/sqrt(HS). */
template <int HS>
__global__ void __launch_bounds__(ATTN_THREADS)
    attention_forward_mma_kernel(floatX* __restrict__ out, float* __restrict__ lse, const floatX* __restrict__ qkv,
                                 int T, int C, int NH, int NKV, float scale_log2) {
    static_assert(HS % 16 == 0 && sizeof(floatX) == 2, "MMA attention needs hs % 16 == 0 and 16-bit floatX");
    constexpr int LD = HS + 8;
    constexpr int KS = HS / 16;          /* k-steps over the head dimension */
    constexpr int SN = ATTN_KTILE / 8;   /* 8-key n-tiles of S */
    constexpr int ON = HS / 8;           /* 8-column n-tiles of O */
    DYNAMIC_SHARED(floatX, attn_smem);
    floatX* smem = attn_smem;
    floatX* Qs = smem;                       /* [64][LD] */
    floatX* Ks = Qs + ATTN_ROWS * LD;        /* [2][64][LD] */
    floatX* Vs = Ks + 2 * ATTN_KTILE * LD;   /* [2][64][LD] */

    const int qt = (int)gridDim.x - 1 - (int)blockIdx.x; /* longest (last) query tiles first */
    const int bh = blockIdx.y;
    const int b = bh / NH;
    const int h = bh % NH;
    const int q0 = qt * ATTN_ROWS;
    const size_t ld = (size_t)C + 2 * (size_t)NKV * HS;
    const floatX* base = qkv + (size_t)b * T * ld + (size_t)h * HS;                 /* q of head h */
    const floatX* kbase = qkv + (size_t)b * T * ld + C + (size_t)(h / (NH / NKV)) * HS; /* k of its kv head */
    const floatX* vbase = kbase + (size_t)NKV * HS;                                  /* v of its kv head */
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int qw = q0 + warp * 16;           /* first query row of this warp */
    const int qwmax = qw + 15;
    const int qlast = (q0 + ATTN_ROWS - 1 < T - 1) ? q0 + ATTN_ROWS - 1 : T - 1;
    const int ntiles = qlast / ATTN_KTILE + 1;

    attn_load_tile<HS, ATTN_ROWS>(Qs, base + (size_t)q0 * ld, T - q0, ld);
    attn_load_tile<HS, ATTN_KTILE>(Ks, kbase, T, ld);
    attn_load_tile<HS, ATTN_KTILE>(Vs, vbase, T, ld);
    cp_async_commit();

    uint32_t qf[KS][4];
    float o[ON][4];
#pragma unroll
    for (int n = 0; n < ON; n++) { o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f; }
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g and g+8 (log2 domain) */

    for (int kt = 0; kt < ntiles; kt++) {
        cp_async_wait_all();
        __syncthreads(); /* tile kt visible to all; everyone is done with tile kt-1's buffer */
        if (kt == 0) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) { attn_load_a<LD>(qf[ks], Qs, warp * 16, ks * 16, g, t); }
        }
        if (kt + 1 < ntiles) {
            const int k1 = (kt + 1) * ATTN_KTILE;
            const int nb = (kt + 1) & 1;
            attn_load_tile<HS, ATTN_KTILE>(Ks + nb * ATTN_KTILE * LD, kbase + (size_t)k1 * ld, T - k1, ld);
            attn_load_tile<HS, ATTN_KTILE>(Vs + nb * ATTN_KTILE * LD, vbase + (size_t)k1 * ld, T - k1, ld);
            cp_async_commit();
        }
        const floatX* Kb = Ks + (kt & 1) * ATTN_KTILE * LD;
        const floatX* Vb = Vs + (kt & 1) * ATTN_KTILE * LD;
        const int k0 = kt * ATTN_KTILE; /* k0 <= q0 <= qw: key k0 is visible to every row of the block */

        /* S = Q K^T (16 x 64 per warp); 8-key tiles entirely above this warp's rows are skipped */
        float s[SN][4];
#pragma unroll
        for (int n = 0; n < SN; n++) { s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f; }
#pragma unroll
        for (int n = 0; n < SN; n += 2) {
            if (k0 + n * 8 <= qwmax) { /* tile n is needed; tile n+1 only if its first key is visible too */
                const bool next = k0 + (n + 1) * 8 <= qwmax;
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    uint32_t bf[4];
                    attn_load_bt2<LD>(bf, Kb, n * 8, ks * 16, g, t);
                    attn_mma(s[n], qf[ks], bf);
                    if (next) { attn_mma(s[n + 1], qf[ks], bf + 2); }
                }
            }
        }
        /* scale into the log2 domain, causal mask (also covers skipped tiles and keys >= T) */
        const bool diag = (k0 + ATTN_KTILE - 1 > qw);
#pragma unroll
        for (int n = 0; n < SN; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[n][e] * scale_log2;
                if (diag) {
                    const int col = k0 + n * 8 + 2 * t + (e & 1);
                    const int row = qw + g + ((e >> 1) << 3);
                    if (col > row) { v = -INFINITY; }
                }
                s[n][e] = v;
            }
        }
        /* online softmax (row max over the quad of lanes sharing a row) */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < SN; n++) {
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0); /* finite: key k0 is unmasked for every row */
        const float mn1 = fmaxf(m1, mx1);
        const float alpha0 = exp2f(m0 - mn0); /* 0 on the first tile (m = -inf) */
        const float alpha1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        l0 *= alpha0;
        l1 *= alpha1;
#pragma unroll
        for (int n = 0; n < ON; n++) {
            o[n][0] *= alpha0;
            o[n][1] *= alpha0;
            o[n][2] *= alpha1;
            o[n][3] *= alpha1;
        }
#pragma unroll
        for (int n = 0; n < SN; n++) {
            s[n][0] = exp2f(s[n][0] - m0);
            s[n][1] = exp2f(s[n][1] - m0);
            s[n][2] = exp2f(s[n][2] - m1);
            s[n][3] = exp2f(s[n][3] - m1);
            l0 += s[n][0] + s[n][1];
            l1 += s[n][2] + s[n][3];
        }
        /* O += P V: P (16 x 64, from the accumulators) as A, V tile (64 x HS) as B */
#pragma unroll
        for (int kk = 0; kk < ATTN_KTILE / 16; kk++) {
            if (k0 + kk * 16 <= qwmax) {
                uint32_t pa[4];
                attn_acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
                attn_mma_ax<LD, ON>(o, pa, Vb, kk * 16, g, t);
            }
        }
    }

    /* epilogue: normalise, stage this warp's 16 rows in its own Q rows, 128-bit stores */
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0;
    const float inv1 = 1.0f / l1;
    floatX* stage = Qs + warp * 16 * LD; /* only this warp ever read these rows */
    __syncwarp();
#pragma unroll
    for (int n = 0; n < ON; n++) {
        attn_st32(stage + g * LD + n * 8 + 2 * t, attn_pack_f(o[n][0] * inv0, o[n][1] * inv0));
        attn_st32(stage + (g + 8) * LD + n * 8 + 2 * t, attn_pack_f(o[n][2] * inv1, o[n][3] * inv1));
    }
    __syncwarp();
    attn_store_rows<HS>(out + (size_t)b * T * C + (size_t)h * HS, (size_t)C, stage, qw, T, lane);
    if (t == 0) {
        float* lrow = lse + (size_t)bh * T;
        if (qw + g < T) { lrow[qw + g] = (m0 + log2f(l0)) * ATTN_LN2; }
        if (qw + g + 8 < T) { lrow[qw + g + 8] = (m1 + log2f(l1)) * ATTN_LN2; }
    }
}

/* ======================================================================== MMA backward: dK, dV */

/* Steps shared by the two backward kernels that own a 64-key tile (attention_backward_kv_mma_kernel and
 * attention_backward_fa2_mma_kernel). Block-wide where they load, per warp (16 keys) where they compute. */

/* Loads the query tile of BQ rows from q0 into double-buffer slot nb (0/1): Q (qkv q part) and dO into
 * smem Qs/dOs [2][BQ][HS+8] (cp.async, the caller commits), Ls[2][BQ] = lse * log2(e) and, with WITH_D,
 * Ds[2][BQ] = D (rows >= T: 0). base/dbase: this (b, h)'s q / dO column at t = 0; lrow/drow: its lse / D row. */
template <int HS, int BQ, bool WITH_D>
static __device__ __forceinline__ void attn_bwd_load_q_tile(floatX* Qs, floatX* dOs, float* Ls, float* Ds, int nb,
                                                            const floatX* base, const floatX* dbase,
                                                            const float* lrow, const float* drow, int q0, int T,
                                                            int C, size_t ld) {
    constexpr int LD = HS + 8;
    attn_load_tile<HS, BQ>(Qs + nb * BQ * LD, base + (size_t)q0 * ld, T - q0, ld);
    attn_load_tile<HS, BQ>(dOs + nb * BQ * LD, dbase + (size_t)q0 * C, T - q0, (size_t)C);
    if (threadIdx.x < BQ) {
        const int q = q0 + threadIdx.x;
        Ls[nb * BQ + threadIdx.x] = (q < T) ? lrow[q] * ATTN_LOG2E : 0.0f;
        if (WITH_D) { Ds[nb * BQ + threadIdx.x] = (q < T) ? drow[q] : 0.0f; }
    }
}
/* Zeroes the dK and dV accumulators (ON 16x8 fp32 tiles each: 16 keys x 8*ON head channels per warp) */
template <int ON>
static __device__ __forceinline__ void attn_bwd_zero_kv(float dk[ON][4], float dv[ON][4]) {
#pragma unroll
    for (int n = 0; n < ON; n++) {
        dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
        dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
    }
}
/* dV (16 keys x HS) += P^T (16 keys x BQ queries, fp32 fragments st[BQ/8]) dO (BQ x HS, smem dOb [BQ][LD]);
 * 16-query sub-tiles entirely before the warp's first key kw (all zeros) skipped. */
template <int LD, int ON, int BQ>
static __device__ __forceinline__ void attn_bwd_dv_update(float dv[ON][4], const float st[BQ / 8][4],
                                                          const floatX* dOb, int q0, int kw, int g, int t) {
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++) {
        if (q0 + kk * 16 + 15 >= kw) {
            uint32_t pa[4];
            attn_acc_to_a(pa, st[2 * kk], st[2 * kk + 1]);
            attn_mma_ax<LD, ON>(dv, pa, dOb, kk * 16, g, t);
        }
    }
}
/* Epilogue of one warp: dK * scale and dV (16 keys x HS each, fp32 fragments) packed to floatX (one rounding), staged
 * in the warp's own 16 rows of Ks / Vs (the caller makes sure no other warp still reads them), then stored 128-bit to
 * rows kw.. (< T) of dK (dkbase: this batch's and kv head's dK column at t = 0, row stride ld) and of dV (dkbase +
 * vofs). SYNCWARP: __syncwarp() before staging. */
template <int HS, bool SYNCWARP>
static __device__ __forceinline__ void attn_bwd_store_kv(floatX* dkbase, size_t vofs, const float dk[HS / 8][4],
                                                         const float dv[HS / 8][4], floatX* Ks, floatX* Vs,
                                                         float scale, int warp, int kw, int T, size_t ld, int lane,
                                                         int g, int t) {
    constexpr int LD = HS + 8;
    floatX* kstage = Ks + warp * 16 * LD;
    floatX* vstage = Vs + warp * 16 * LD;
    if (SYNCWARP) { __syncwarp(); } /* the warp's earlier reads of its rows are done */
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        attn_st32(kstage + g * LD + n * 8 + 2 * t, attn_pack_f(dk[n][0] * scale, dk[n][1] * scale));
        attn_st32(kstage + (g + 8) * LD + n * 8 + 2 * t, attn_pack_f(dk[n][2] * scale, dk[n][3] * scale));
        attn_st32(vstage + g * LD + n * 8 + 2 * t, attn_pack_f(dv[n][0], dv[n][1]));
        attn_st32(vstage + (g + 8) * LD + n * 8 + 2 * t, attn_pack_f(dv[n][2], dv[n][3]));
    }
    __syncwarp();
    attn_store_rows<HS>(dkbase, ld, kstage, kw, T, lane);
    attn_store_rows<HS>(dkbase + vofs, ld, vstage, kw, T, lane);
}

/* grid (ceil(T/64), B*NKV), block 128, smem attn_bwd_kv_smem_bytes(HS, BQ).
 * One block per 64-key tile of one kv head j; loops over the query heads of its group, h = j*gq .. j*gq+gq-1
 * (gq = NH/NKV), in that order, and for each over its query tiles of BQ rows from the diagonal to T (one flattened,
 * double-buffered loop). dK, dV accumulate in fp32 registers over the whole group (a fixed order: deterministic)
 * and are rounded to floatX once, into dqkv's k and v parts of kv head j. qkv, dqkv (B,T,(NH+2*NKV)*HS),
 * lse natural log (B,NH,T), D (B,NH,T). NKV = NH: one query head per block, the multi-head kernel. */
/* Registers: at most 65536 / (3 x 128) = 170 per thread for HS <= 64, so that 3 blocks fit on an SM (hs = 64, every
 * GPT-2 size: 166 registers with the GQA group loop (168 before it), 55 KB of shared memory, 3 blocks; sm_90 ptxas
 * report of dev/test/check_sass.sh); HS = 128 (BQ = 32) needs more (224 in that report) and runs 2 blocks.
 * Without the bound ptxas capped HS = 32 at 128 registers and spilled (seen in the sm_90 ptxas report). */
template <int HS, int BQ>
__global__ void __launch_bounds__(ATTN_THREADS, HS >= 128 ? 1 : 3)
    attention_backward_kv_mma_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                     const floatX* __restrict__ qkv, const float* __restrict__ lse,
                                     const float* __restrict__ Dsum, int T, int C, int NH, int NKV, float scale_log2,
                                     float scale) {
    static_assert(HS % 16 == 0 && BQ % 16 == 0 && BQ <= ATTN_THREADS && sizeof(floatX) == 2, "bad tile");
    constexpr int LD = HS + 8;
    constexpr int KS = HS / 16;
    constexpr int SN = BQ / 8;
    constexpr int ON = HS / 8;
    DYNAMIC_SHARED(floatX, attn_smem);
    floatX* smem = attn_smem;
    floatX* Ks = smem;                    /* [64][LD] */
    floatX* Vs = Ks + ATTN_ROWS * LD;     /* [64][LD] */
    floatX* Qs = Vs + ATTN_ROWS * LD;     /* [2][BQ][LD] */
    floatX* dOs = Qs + 2 * BQ * LD;       /* [2][BQ][LD] */
    float* Ls = (float*)(dOs + 2 * BQ * LD); /* [2][BQ] lse * log2(e) */
    float* Ds = Ls + 2 * BQ;                 /* [2][BQ] */

    const int kt = blockIdx.x; /* low key tiles have the most query tiles: launched first */
    const int bj = blockIdx.y;
    const int b = bj / NKV;
    const int j = bj % NKV;    /* kv head */
    const int gq = NH / NKV;   /* query heads per kv head */
    const int h0 = j * gq;     /* the group's first query head */
    const int k0 = kt * ATTN_ROWS;
    const size_t ld = (size_t)C + 2 * (size_t)NKV * HS;
    const floatX* qb0 = qkv + (size_t)b * T * ld + (size_t)h0 * HS;  /* q of head h0; head h0+r at + r*HS */
    const floatX* db0 = dout + (size_t)b * T * C + (size_t)h0 * HS; /* dO of head h0 */
    const float* lrow0 = lse + ((size_t)b * NH + h0) * T;           /* lse of head h0; head h0+r at + r*T */
    const float* drow0 = Dsum + ((size_t)b * NH + h0) * T;
    const floatX* kbase = qkv + (size_t)b * T * ld + C + (size_t)j * HS;
    const floatX* vbase = kbase + (size_t)NKV * HS;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int kw = k0 + warp * 16; /* first key row of this warp */
    const int qt_begin = k0 / BQ;
    const int nq = (T + BQ - 1) / BQ - qt_begin; /* query tiles per head */
    const int nit = gq * nq;                     /* steps: (head r, tile qt_begin + i), r outer */

    attn_load_tile<HS, ATTN_ROWS>(Ks, kbase + (size_t)k0 * ld, T - k0, ld);
    attn_load_tile<HS, ATTN_ROWS>(Vs, vbase + (size_t)k0 * ld, T - k0, ld);
    attn_bwd_load_q_tile<HS, BQ, true>(Qs, dOs, Ls, Ds, 0, qb0, db0, lrow0, drow0, qt_begin * BQ, T, C, ld);
    cp_async_commit();

    float dk[ON][4], dv[ON][4];
    attn_bwd_zero_kv<ON>(dk, dv);

    for (int it = 0; it < nit; it++) {
        const int buf = it & 1;
        cp_async_wait_all();
        __syncthreads();
        if (it + 1 < nit) {
            const int r1 = (it + 1) / nq;
            const int q1 = (qt_begin + (it + 1) - r1 * nq) * BQ;
            attn_bwd_load_q_tile<HS, BQ, true>(Qs, dOs, Ls, Ds, buf ^ 1, qb0 + (size_t)r1 * HS, db0 + (size_t)r1 * HS,
                                               lrow0 + (size_t)r1 * T, drow0 + (size_t)r1 * T, q1, T, C, ld);
            cp_async_commit();
        }
        const int r = it / nq;
        const int q0 = (qt_begin + it - r * nq) * BQ;
        if (q0 + BQ - 1 < kw) { continue; } /* every query of the tile precedes every key of this warp */
        const floatX* Qb = Qs + buf * BQ * LD;
        const floatX* dOb = dOs + buf * BQ * LD;
        const float* Lb = Ls + buf * BQ;
        const float* Db = Ds + buf * BQ;

        /* S^T = K Q^T (16 keys x BQ queries per warp; query tiles entirely before this warp's keys skipped) */
        float st[SN][4];
        attn_warp_gemm_abt<LD, SN, KS>(st, Ks, warp * 16, Qb, kw - q0, g, t);
        /* P^T = exp(S^T*scale - lse), zero where query < key or query >= T */
#pragma unroll
        for (int n = 0; n < SN; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = n * 8 + 2 * t + (e & 1);
                const int q = q0 + qi;
                const int key = kw + g + ((e >> 1) << 3);
                st[n][e] = (q >= key && q < T) ? exp2f(st[n][e] * scale_log2 - Lb[qi]) : 0.0f;
            }
        }
        /* dV += P^T dO */
        attn_bwd_dv_update<LD, ON, BQ>(dv, st, dOb, q0, kw, g, t);
        /* dP^T = V dO^T */
        float dpt[SN][4];
        attn_warp_gemm_abt<LD, SN, KS>(dpt, Vs, warp * 16, dOb, kw - q0, g, t);
        /* dS^T = P^T * (dP^T - D) */
#pragma unroll
        for (int n = 0; n < SN; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) { dpt[n][e] = st[n][e] * (dpt[n][e] - Db[n * 8 + 2 * t + (e & 1)]); }
        }
        /* dK += dS^T Q (scale applied at the end) */
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            if (q0 + kk * 16 + 15 >= kw) {
                uint32_t da[4];
                attn_acc_to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
                attn_mma_ax<LD, ON>(dk, da, Qb, kk * 16, g, t);
            }
        }
    }

    /* epilogue: stage in this warp's own K/V rows (only this warp read them), 128-bit stores */
    attn_bwd_store_kv<HS, true>(dqkv + (size_t)b * T * ld + C + (size_t)j * HS, (size_t)NKV * HS, dk, dv, Ks, Vs, scale,
                                warp, kw, T, ld, lane, g, t);
}

/* ======================================================================== MMA backward: dQ */

/* grid (ceil(T/64), B*NH), block 128, smem attn_bwd_q_smem_bytes(HS).
 * One block per 64-query tile of query head h; loops over key tiles (of kv head h/(NH/NKV)) up to the diagonal;
 * writes dQ into dqkv's q part. qkv, dqkv (B,T,(NH+2*NKV)*HS).
 * Registers: at most 170 for HS <= 64 (3 blocks per SM), as for the dK/dV kernel; left to itself ptxas chose
 * 128 registers and 36 bytes of spills for hs = 64 (seen in the sm_90 ptxas report). */
template <int HS>
__global__ void __launch_bounds__(ATTN_THREADS, HS >= 128 ? 1 : 3)
    attention_backward_q_mma_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                    const floatX* __restrict__ qkv, const float* __restrict__ lse,
                                    const float* __restrict__ Dsum, int T, int C, int NH, int NKV, float scale_log2,
                                    float scale) {
    static_assert(HS % 16 == 0 && sizeof(floatX) == 2, "bad tile");
    constexpr int LD = HS + 8;
    constexpr int KS = HS / 16;
    constexpr int SN = ATTN_KTILE / 8;
    constexpr int ON = HS / 8;
    DYNAMIC_SHARED(floatX, attn_smem);
    floatX* smem = attn_smem;
    floatX* Qs = smem;                      /* [64][LD] */
    floatX* dOs = Qs + ATTN_ROWS * LD;      /* [64][LD] */
    floatX* Ks = dOs + ATTN_ROWS * LD;      /* [2][64][LD] */
    floatX* Vs = Ks + 2 * ATTN_KTILE * LD;  /* [2][64][LD] */

    const int qt = (int)gridDim.x - 1 - (int)blockIdx.x;
    const int bh = blockIdx.y;
    const int b = bh / NH;
    const int h = bh % NH;
    const int q0 = qt * ATTN_ROWS;
    const size_t ld = (size_t)C + 2 * (size_t)NKV * HS;
    const floatX* base = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const floatX* kbase = qkv + (size_t)b * T * ld + C + (size_t)(h / (NH / NKV)) * HS;
    const floatX* vbase = kbase + (size_t)NKV * HS;
    const floatX* dbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int qw = q0 + warp * 16;
    const int qwmax = qw + 15;
    const int r0 = qw + g;
    const int r1 = r0 + 8;
    const float L0 = (r0 < T) ? lse[(size_t)bh * T + r0] * ATTN_LOG2E : 0.0f;
    const float L1 = (r1 < T) ? lse[(size_t)bh * T + r1] * ATTN_LOG2E : 0.0f;
    const float D0 = (r0 < T) ? Dsum[(size_t)bh * T + r0] : 0.0f;
    const float D1 = (r1 < T) ? Dsum[(size_t)bh * T + r1] : 0.0f;
    const int qlast = (q0 + ATTN_ROWS - 1 < T - 1) ? q0 + ATTN_ROWS - 1 : T - 1;
    const int ntiles = qlast / ATTN_KTILE + 1;

    attn_load_tile<HS, ATTN_ROWS>(Qs, base + (size_t)q0 * ld, T - q0, ld);
    attn_load_tile<HS, ATTN_ROWS>(dOs, dbase + (size_t)q0 * C, T - q0, (size_t)C);
    attn_load_tile<HS, ATTN_KTILE>(Ks, kbase, T, ld);
    attn_load_tile<HS, ATTN_KTILE>(Vs, vbase, T, ld);
    cp_async_commit();

    float dq[ON][4];
#pragma unroll
    for (int n = 0; n < ON; n++) { dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f; }

    for (int kt = 0; kt < ntiles; kt++) {
        cp_async_wait_all();
        __syncthreads();
        if (kt + 1 < ntiles) {
            const int k1 = (kt + 1) * ATTN_KTILE;
            const int nb = (kt + 1) & 1;
            attn_load_tile<HS, ATTN_KTILE>(Ks + nb * ATTN_KTILE * LD, kbase + (size_t)k1 * ld, T - k1, ld);
            attn_load_tile<HS, ATTN_KTILE>(Vs + nb * ATTN_KTILE * LD, vbase + (size_t)k1 * ld, T - k1, ld);
            cp_async_commit();
        }
        const floatX* Kb = Ks + (kt & 1) * ATTN_KTILE * LD;
        const floatX* Vb = Vs + (kt & 1) * ATTN_KTILE * LD;
        const int k0 = kt * ATTN_KTILE;

        /* S = Q K^T and dP = dO V^T (16 x 64 per warp) */
        float s[SN][4], dp[SN][4];
#pragma unroll
        for (int n = 0; n < SN; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
        }
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t qa[4], oa[4];
            attn_load_a<LD>(qa, Qs, warp * 16, ks * 16, g, t);
            attn_load_a<LD>(oa, dOs, warp * 16, ks * 16, g, t);
#pragma unroll
            for (int n = 0; n < SN; n += 2) {
                if (k0 + n * 8 <= qwmax) { /* tile n is needed; tile n+1 only if its first key is visible too */
                    const bool next = k0 + (n + 1) * 8 <= qwmax;
                    uint32_t bf[4];
                    attn_load_bt2<LD>(bf, Kb, n * 8, ks * 16, g, t);
                    attn_mma(s[n], qa, bf);
                    if (next) { attn_mma(s[n + 1], qa, bf + 2); }
                    attn_load_bt2<LD>(bf, Vb, n * 8, ks * 16, g, t);
                    attn_mma(dp[n], oa, bf);
                    if (next) { attn_mma(dp[n + 1], oa, bf + 2); }
                }
            }
        }
        /* dS = P * (dP - D), P = exp(S*scale - lse) masked causally */
#pragma unroll
        for (int n = 0; n < SN; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = k0 + n * 8 + 2 * t + (e & 1);
                const int row = (e >> 1) ? r1 : r0;
                const float L = (e >> 1) ? L1 : L0;
                const float D = (e >> 1) ? D1 : D0;
                const float p = (col <= row) ? exp2f(s[n][e] * scale_log2 - L) : 0.0f;
                dp[n][e] = p * (dp[n][e] - D);
            }
        }
        /* dQ += dS K */
#pragma unroll
        for (int kk = 0; kk < ATTN_KTILE / 16; kk++) {
            if (k0 + kk * 16 <= qwmax) {
                uint32_t da[4];
                attn_acc_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
                attn_mma_ax<LD, ON>(dq, da, Kb, kk * 16, g, t);
            }
        }
    }

    floatX* stage = Qs + warp * 16 * LD; /* only this warp read these Q rows */
    __syncwarp();
#pragma unroll
    for (int n = 0; n < ON; n++) {
        attn_st32(stage + g * LD + n * 8 + 2 * t, attn_pack_f(dq[n][0] * scale, dq[n][1] * scale));
        attn_st32(stage + (g + 8) * LD + n * 8 + 2 * t, attn_pack_f(dq[n][2] * scale, dq[n][3] * scale));
    }
    __syncwarp();
    attn_store_rows<HS>(dqkv + (size_t)b * T * ld + (size_t)h * HS, ld, stage, qw, T, lane);
}

/* ======================================================================== MMA backward, FA2 work: one kernel */

/* Ordered hand-off between the blocks of one (b, h) (attention_backward_fa2_mma_kernel). flag counts the key tiles
 * that have added their dQ contribution to one query tile. Thread 0 spins until *flag >= v (volatile load, no value
 * atomics), then fences so that the block's later L2 loads (__ldcg) see what the writer published before raising
 * the flag. On a host compiler (the CPU emulator runs blocks one after another in launch order) a flag that is not
 * yet raised can never be: that is reported and the process stops instead of spinning forever. */
static __device__ __forceinline__ void attn_wait_flag(const unsigned int* flag, unsigned int v) {
#ifdef __CUDACC__
    while (*(volatile const unsigned int*)flag < v) { __nanosleep(64); }
#else
    if (*(volatile const unsigned int*)flag < v) {
        fprintf(stderr, "attention fa2 backward: block waits for flag %u >= %u, which a block launched earlier "
                        "should have raised\n", *flag, v);
        abort();
    }
#endif
    __threadfence();
}

/* The FA2 backward's step order over a group's query heads and their query tiles: (h, qt) -> the next tile of head h,
 * or after its last (qt_end - 1) the first tile (qt_begin) of head h + 1. */
static __device__ __forceinline__ void attn_bwd_next_step(int& h, int& qt, int qt_begin, int qt_end) {
    if (++qt == qt_end) {
        qt = qt_begin;
        h++;
    }
}

/* grid (ceil(T/64), B*NKV), block 128, smem attn_bwd_fa2_smem_bytes(HS, BQ). The whole backward of FlashAttention-2
 * (Dao 2023, Algorithm 2) in one kernel: 5 matmuls per (key tile, query tile) pair, S = Q K^T, dV += P^T dO,
 * dP = dO V^T, dK += dS^T Q, dQ += dS K; the row-dot D = rowsum(dO*O) fused in. Grouped-query attention natively:
 * one block per (key tile, kv head j); it loops over the query heads of its group, h = j*gq .. j*gq+gq-1
 * (gq = NH/NKV), in that order, and for each over its query tiles (one flattened, double-buffered loop, as
 * attention_backward_kv_mma_kernel). NKV = NH: one query head per block, the multi-head kernel.
 *   Key tile kt = gridDim.x-1-blockIdx.x (the last key tiles, which have the fewest query tiles, launched first);
 *   dK, dV of its 64 keys accumulate in fp32 registers over the group's heads and, for each, the query tiles qt of BQ
 *   rows at or below the diagonal, and are rounded to floatX once, at the end (dK, dV of kv head j).
 *   dQ: the query tile qt gets contributions from key tiles kd(qt) = q0/64 down to 0, in that order, into an fp32
 *   accumulator dqacc (B,NH,T,HS): key tile kd(qt) writes it, the next ones add to it, key tile 0 adds its part
 *   and stores dQ (floatX, times 1/sqrt(hs)) into dqkv. Order is enforced with one flag per (b, h, query tile)
 *   (flags, zeroed before the launch): key tile kt waits until flags[qt] == kd(qt) - kt, adds, raises it by one.
 *   The sum order is fixed, so dQ is bit-identical from run to run; no atomics touch values. Every block waits only
 *   on blocks of the same (b, kv head) with a smaller blockIdx.x, launched before it, which never wait on it (a block
 *   finishes a (head, query tile) step before its next), so the waits cannot deadlock on a GPU that starts blocks
 *   in launch order (the assumption of FlashAttention-2's deterministic backward too).
 *   D: the block on the diagonal of qt (kt == kd(qt)) is qt's first visitor; it computes D = rowsum(dO*O) for
 *   qt's rows from its dO tile (in shared memory) and O (global, 128-bit), and publishes it to Dsum (B,NH,T)
 *   before it raises qt's flag; the other blocks read D after flags[qt] >= 1.
 * Inputs as attention_backward_kv_mma_kernel plus out (B,T,C), Dsum (B,NH,T) out, dqacc (B*NH*T*HS fp32,
 * 8-byte aligned), flags (B*NH*ceil(T/BQ), zero); qkv, dqkv (B,T,(NH+2*NKV)*HS). */
template <int HS, int BQ>
__global__ void __launch_bounds__(ATTN_THREADS, HS >= 128 ? 1 : 3)
    attention_backward_fa2_mma_kernel(floatX* __restrict__ dqkv, float* Dsum, float* dqacc, unsigned int* flags,
                                      const floatX* __restrict__ dout, const floatX* __restrict__ out,
                                      const floatX* __restrict__ qkv, const float* __restrict__ lse, int T, int C,
                                      int NH, int NKV, float scale_log2, float scale) {
    static_assert(HS % 16 == 0 && BQ % 16 == 0 && ATTN_ROWS % BQ == 0 && sizeof(floatX) == 2, "bad tile");
    constexpr int LD = HS + 8;
    constexpr int KS = HS / 16;
    constexpr int SN = BQ / 8;
    constexpr int ON = HS / 8;
    constexpr int RW = BQ / 16;            /* 16-row query groups of the dQ product */
    constexpr int CW = 4 / RW;             /* column groups: the 4 warps cover RW x CW blocks of dQ */
    constexpr int QN = ON / CW;            /* 8-column tiles of dQ per warp */
    constexpr int LDS = BQ + 8;            /* dS^T tile [64 keys][BQ queries], padded rows */
    constexpr int TPR = ATTN_THREADS / BQ; /* threads per row of the fused row-dot */
    static_assert(RW * CW == 4 && QN % 2 == 0 && HS % (8 * TPR) == 0, "bad dQ split");
    DYNAMIC_SHARED(floatX, attn_smem);
    floatX* smem = attn_smem;
    floatX* Ks = smem;                       /* [64][LD] */
    floatX* Vs = Ks + ATTN_ROWS * LD;        /* [64][LD] */
    floatX* Qs = Vs + ATTN_ROWS * LD;        /* [2][BQ][LD] */
    floatX* dOs = Qs + 2 * BQ * LD;          /* [2][BQ][LD] */
    floatX* dSs = dOs + 2 * BQ * LD;         /* [64][LDS] */
    float* Ls = (float*)(dSs + ATTN_ROWS * LDS); /* [2][BQ] lse * log2(e) */
    float* Ds = Ls + 2 * BQ;                 /* [BQ] */

    const int kt = (int)gridDim.x - 1 - (int)blockIdx.x;
    const int bj = blockIdx.y;
    const int b = bj / NKV;
    const int j = bj % NKV;  /* kv head */
    const int gq = NH / NKV; /* query heads per kv head */
    const int h0 = j * gq;   /* the group's first query head */
    const int k0 = kt * ATTN_ROWS;
    const size_t ld = (size_t)C + 2 * (size_t)NKV * HS;
    const floatX* kbase = qkv + (size_t)b * T * ld + C + (size_t)j * HS;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int kw = k0 + warp * 16; /* first key row of this warp */
    const int rg = warp % RW;      /* this warp's dQ rows rg*16.. and columns cg*HS/CW.. */
    const int cg = warp / RW;
    const int qt_begin = k0 / BQ;
    const int qt_end = (T + BQ - 1) / BQ; /* query tiles per head (flags per head) */

    attn_load_tile<HS, ATTN_ROWS>(Ks, kbase + (size_t)k0 * ld, T - k0, ld);
    attn_load_tile<HS, ATTN_ROWS>(Vs, kbase + (size_t)NKV * HS + (size_t)k0 * ld, T - k0, ld);
    attn_bwd_load_q_tile<HS, BQ, false>(Qs, dOs, Ls, nullptr, 0, qkv + (size_t)b * T * ld + (size_t)h0 * HS,
                                        dout + (size_t)b * T * C + (size_t)h0 * HS, lse + ((size_t)b * NH + h0) * T,
                                        nullptr, qt_begin * BQ, T, C, ld);
    cp_async_commit();

    float dk[ON][4], dv[ON][4];
    attn_bwd_zero_kv<ON>(dk, dv);

    /* nit steps (h, qt): the group's query heads h = h0 .. h0+gq-1 (outer), each over its query tiles qt_begin ..
     * qt_end-1 (inner), one double-buffered sequence (a head's last tile prefetches the next head's first), advanced
     * by attn_bwd_next_step; per-head pointers derived from the kernel's arguments at each step. This counted loop
     * fits the register bounds without spills; a nested (head, tile) loop, or one advanced by a running buffer slot,
     * spilled at hs 64 (sm_90 ptxas report: 159 registers at hs 64 and 253 at hs 128 here, 168 and 226 for the
     * multi-head kernel before GQA). */
    const int nit = gq * (qt_end - qt_begin);
    int h = h0, qt = qt_begin;
    for (int it = 0; it < nit; it++) {
        const int buf = it & 1;
        cp_async_wait_all();
        __syncthreads(); /* this step's tile visible; every warp is done with the last step (buffers, dSs, Ds) */
        if (it + 1 < nit) { /* prefetch the next step's tile */
            int h1 = h, q1 = qt;
            attn_bwd_next_step(h1, q1, qt_begin, qt_end);
            attn_bwd_load_q_tile<HS, BQ, false>(Qs, dOs, Ls, nullptr, buf ^ 1,
                                                qkv + (size_t)b * T * ld + (size_t)h1 * HS,
                                                dout + (size_t)b * T * C + (size_t)h1 * HS,
                                                lse + ((size_t)b * NH + h1) * T, nullptr, q1 * BQ, T, C, ld);
            cp_async_commit();
        }
        const size_t bh = (size_t)b * NH + h;
        const floatX* obase = out + (size_t)b * T * C + (size_t)h * HS;
        float* drow = Dsum + bh * T;
        float* accp = dqacc + bh * T * HS;
        unsigned int* fl = flags + bh * qt_end;
        const int q0 = qt * BQ;
        const int kd = q0 / ATTN_ROWS; /* the key tile on this query tile's diagonal: its first visitor */
        const floatX* Qb = Qs + buf * BQ * LD;
        const floatX* dOb = dOs + buf * BQ * LD;
        const float* Lb = Ls + buf * BQ;

        /* D of the tile's rows: computed here on the diagonal, else read back once the diagonal published it */
        if (kt == kd) {
            const int r = threadIdx.x / TPR, sub = threadIdx.x % TPR;
            float acc = 0.0f;
            if (q0 + r < T) {
                const floatX* orow = obase + (size_t)(q0 + r) * C;
#pragma unroll
                for (int c = sub * 8; c < HS; c += TPR * 8) {
                    const x128 o = load128(orow + c);
                    const x128 d = load128(dOb + r * LD + c);
#pragma unroll
                    for (int k = 0; k < 8; k++) { acc += to_float(o[k]) * to_float(d[k]); }
                }
            }
#pragma unroll
            for (int off = TPR / 2; off > 0; off >>= 1) { acc += __shfl_xor_sync(0xffffffffu, acc, off); }
            if (sub == 0) {
                Ds[r] = acc;
                if (q0 + r < T) { drow[q0 + r] = acc; }
            }
        } else {
            if (threadIdx.x == 0) { attn_wait_flag(fl + qt, 1u); }
            __syncthreads();
            if (threadIdx.x < BQ) {
                Ds[threadIdx.x] = (q0 + (int)threadIdx.x < T) ? __ldcg(drow + q0 + threadIdx.x) : 0.0f;
            }
        }
        __syncthreads();

        /* S^T = K Q^T, P^T = exp(S^T*scale - lse) (16 keys x BQ queries per warp; zero where query < key or
         * >= T) */
        float st[SN][4];
        attn_warp_gemm_abt<LD, SN, KS>(st, Ks, warp * 16, Qb, kw - q0, g, t);
#pragma unroll
        for (int n = 0; n < SN; n++) {
            const float2 l2 = *reinterpret_cast<const float2*>(Lb + n * 8 + 2 * t); /* one 64-bit load per pair */
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int q = q0 + n * 8 + 2 * t + (e & 1);
                const int key = kw + g + ((e >> 1) << 3);
                st[n][e] = (q >= key && q < T) ? exp2f(st[n][e] * scale_log2 - ((e & 1) ? l2.y : l2.x)) : 0.0f;
            }
        }
        /* dV += P^T dO */
        attn_bwd_dv_update<LD, ON, BQ>(dv, st, dOb, q0, kw, g, t);
        /* dP^T = V dO^T, dS^T = P^T * (dP^T - D) */
        float dpt[SN][4];
        attn_warp_gemm_abt<LD, SN, KS>(dpt, Vs, warp * 16, dOb, kw - q0, g, t);
#pragma unroll
        for (int n = 0; n < SN; n++) {
            const float2 d2 = *reinterpret_cast<const float2*>(Ds + n * 8 + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; e++) { dpt[n][e] = st[n][e] * (dpt[n][e] - ((e & 1) ? d2.y : d2.x)); }
        }
        /* dK += dS^T Q (scale applied at the end). The packed dS^T fragment is also stored, as it is (32-bit words:
         * keys x queries), for the dQ product, which needs all 64 keys of a query row and reads it back transposed
         * (attn_load_at). Masked sub-tiles are zeros and are stored too. */
        floatX* dSw = dSs + (warp * 16 + g) * LDS + 2 * t;
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            uint32_t da[4];
            attn_acc_to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
            attn_st32(dSw + kk * 16, da[0]);
            attn_st32(dSw + 8 * LDS + kk * 16, da[1]);
            attn_st32(dSw + kk * 16 + 8, da[2]);
            attn_st32(dSw + 8 * LDS + kk * 16 + 8, da[3]);
            if (q0 + kk * 16 + 15 >= kw) { attn_mma_ax<LD, ON>(dk, da, Qb, kk * 16, g, t); }
        }
        __syncthreads(); /* dSs complete */

        /* dQ_part = dS K: this warp's 16 query rows x HS/CW columns; key sub-tiles after the rows are all zero */
        float dq[QN][4];
#pragma unroll
        for (int n = 0; n < QN; n++) { dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f; }
#pragma unroll
        for (int kk = 0; kk < ATTN_ROWS / 16; kk++) {
            if (k0 + kk * 16 <= q0 + rg * 16 + 15) {
                uint32_t a[4];
                attn_load_at<LDS>(a, dSs, rg * 16, kk * 16, g, t);
                attn_mma_ax<LD, QN>(dq, a, Ks + cg * (HS / CW), kk * 16, g, t);
            }
        }
        /* ordered accumulation: after key tiles kd .. kt+1 */
        if (threadIdx.x == 0 && kt != kd) { attn_wait_flag(fl + qt, (unsigned int)(kd - kt)); }
        __syncthreads();
#pragma unroll
        for (int n = 0; n < QN; n++) {
            const int col = cg * (HS / CW) + n * 8 + 2 * t;
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int row = q0 + rg * 16 + g + 8 * half;
                if (row < T) {
                    float x = dq[n][2 * half], y = dq[n][2 * half + 1];
                    float* ap = accp + (size_t)row * HS + col;
                    if (kt != kd) {
                        const float2 prev = __ldcg(reinterpret_cast<const float2*>(ap));
                        x = prev.x + x;
                        y = prev.y + y;
                    }
                    if (kt == 0) {
                        attn_st32(dqkv + ((size_t)b * T + row) * ld + (size_t)h * HS + col,
                                  attn_pack_f(x * scale, y * scale));
                    } else {
                        __stcg(reinterpret_cast<float2*>(ap), make_float2(x, y));
                    }
                }
            }
        }
        if (kt != 0) {
            __threadfence();
            __syncthreads(); /* every thread's part of the sum (and D, on the diagonal) is out */
            if (threadIdx.x == 0) { *(volatile unsigned int*)(fl + qt) = (unsigned int)(kd - kt + 1); }
        }
        attn_bwd_next_step(h, qt, qt_begin, qt_end);
    }

    /* epilogue: stage in this warp's own K/V rows, 128-bit stores. The dQ product of the last query tile read
     * every K row, so all warps must be past it first. */
    __syncthreads();
    attn_bwd_store_kv<HS, false>(dqkv + (size_t)b * T * ld + C + (size_t)j * HS, (size_t)NKV * HS, dk, dv, Ks, Vs,
                                 scale, warp, kw, T, ld, lane, g, t);
}
#endif /* !FLOATX_IS_FLOAT */

/* ======================================================================== D = rowsum(dO * O) */

/* G lanes (a power of two <= 32, aligned groups of a warp) per (b, t, h) row, rows in (b, t, h) order, so a warp
 * reads 32/G consecutive head slices of one or two (b, t) rows; each lane multiplies W-element packets (W = X128_SIZE:
 * 128-bit loads, issue 15 item 9; W = 1 for unaligned or odd shapes) at channels sub*W, sub*W + G*W, ... < hs (sub:
 * the lane's index in its group) and
 * sums them in fp32, then the group adds its lanes' sums with xor shuffles (offsets G/2 .. 1). Every lane of a warp
 * reaches the shuffles (rows past the end add zeros). D (B,NH,T) fp32; dout, out (B,T,C); block 128 threads. */
template <int W>
__global__ void attention_backward_rowdot_kernel(float* __restrict__ Dsum, const floatX* __restrict__ dout,
                                                 const floatX* __restrict__ out, int B, int T, int C, int NH, int G) {
    const long long idx = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / G;
    const int sub = (int)(threadIdx.x % G);
    const int hs = C / NH;
    const bool valid = idx < (long long)B * T * NH;
    float acc = 0.0f;
    if (valid) {
        const int h = (int)(idx % NH);
        const long long bt = idx / NH;
        const floatX* o = out + bt * C + (size_t)h * hs;
        const floatX* d = dout + bt * C + (size_t)h * hs;
        for (int i = sub * W; i < hs; i += G * W) {
            PackedN<floatX, W> op = load_packed<floatX, W>(o + i);
            PackedN<floatX, W> dp = load_packed<floatX, W>(d + i);
#pragma unroll
            for (int k = 0; k < W; k++) { acc += to_float(op[k]) * to_float(dp[k]); }
        }
    }
    for (int off = G / 2; off > 0; off >>= 1) { acc += __shfl_xor_sync(0xffffffffu, acc, off); }
    if (valid && sub == 0) {
        const int h = (int)(idx % NH);
        const long long bt = idx / NH;
        Dsum[((size_t)(bt / T) * NH + h) * T + (size_t)(bt % T)] = acc;
    }
}

/* ======================================================================== fallback (any hs <= 256) */

#define ATTN_FB_DIMS (ATTN_FALLBACK_MAX_HS / WARP_SIZE) /* head dims per lane */

/* forward: one warp per query row; grid (ceil(T/4), B*NH), block 128, smem 4*(hs+32) floats.
 * Lanes split the keys (32 at a time) for the scores, then split the head dims for P V.
 * qkv (B,T,(NH+2*NKV)*hs): query head h reads kv head h/(NH/NKV). */
__global__ void attention_forward_fallback_kernel(floatX* __restrict__ out, float* __restrict__ lse,
                                                  const floatX* __restrict__ qkv, int T, int C, int NH, int NKV,
                                                  float scale_log2) {
    DYNAMIC_SHARED(float, attn_fsm);
    float* fsm = attn_fsm;
    const int hs = C / NH;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    float* sq = fsm + warp * (hs + WARP_SIZE);
    float* sp = sq + hs;
    const int i = blockIdx.x * (ATTN_THREADS / WARP_SIZE) + warp;
    if (i >= T) { return; } /* whole warp leaves together; no block barriers below */
    const int bh = blockIdx.y;
    const int b = bh / NH;
    const int h = bh % NH;
    const size_t ld = (size_t)C + 2 * (size_t)NKV * hs;
    const floatX* base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const floatX* kbase = qkv + (size_t)b * T * ld + C + (size_t)(h / (NH / NKV)) * hs;
    const floatX* vbase = kbase + (size_t)NKV * hs;
    for (int d = lane; d < hs; d += WARP_SIZE) { sq[d] = to_float(base[(size_t)i * ld + d]) * scale_log2; }
    __syncwarp();
    float acc[ATTN_FB_DIMS];
#pragma unroll
    for (int r = 0; r < ATTN_FB_DIMS; r++) { acc[r] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= i; j0 += WARP_SIZE) {
        const int j = j0 + lane;
        float s = -INFINITY;
        if (j <= i) {
            const floatX* kr = kbase + (size_t)j * ld;
            float dot = 0.0f;
            for (int d = 0; d < hs; d++) { dot += sq[d] * to_float(kr[d]); }
            s = dot;
        }
        const float mn = fmaxf(m, warp_reduce_max(s)); /* finite: lane 0's key j0 <= i */
        const float alpha = exp2f(m - mn);
        const float p = (j <= i) ? exp2f(s - mn) : 0.0f;
        l = l * alpha + warp_reduce_sum(p);
        m = mn;
        sp[lane] = p;
        __syncwarp();
        const int cnt = (i + 1 - j0 < WARP_SIZE) ? i + 1 - j0 : WARP_SIZE;
#pragma unroll
        for (int r = 0; r < ATTN_FB_DIMS; r++) {
            const int d = lane + r * WARP_SIZE;
            if (d < hs) {
                float a = acc[r] * alpha;
                for (int jj = 0; jj < cnt; jj++) { a += sp[jj] * to_float(vbase[(size_t)(j0 + jj) * ld + d]); }
                acc[r] = a;
            }
        }
        __syncwarp();
    }
    const float inv = 1.0f / l;
    floatX* orow = out + ((size_t)b * T + i) * C + (size_t)h * hs;
#pragma unroll
    for (int r = 0; r < ATTN_FB_DIMS; r++) {
        const int d = lane + r * WARP_SIZE;
        if (d < hs) { orow[d] = from_float<floatX>(acc[r] * inv); }
    }
    if (lane == 0) { lse[(size_t)bh * T + i] = (m + log2f(l)) * ATTN_LN2; }
}

/* The two dot products of one row pair in the CUDA-core backward kernels, summed over d = 0..hs-1 in order (fp32):
 * *s = a . ra (the scaled score, log2 units, when a is the scaled q or k row), *dp = b . rb (dO . V or V . dO). */
static __device__ __forceinline__ void attn_fb_dots(const float* a, const floatX* ra, const float* b,
                                                    const floatX* rb, int hs, float* s, float* dp) {
    float x = 0.0f, y = 0.0f;
    for (int d = 0; d < hs; d++) {
        x += a[d] * to_float(ra[d]);
        y += b[d] * to_float(rb[d]);
    }
    *s = x;
    *dp = y;
}

/* backward dQ: one warp per query row; grid (ceil(T/4), B*NH), block 128, smem 4*(2*hs+32) floats.
 * qkv, dqkv (B,T,(NH+2*NKV)*hs): query head h reads kv head h/(NH/NKV). */
__global__ void attention_backward_q_fallback_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                                     const floatX* __restrict__ qkv, const float* __restrict__ lse,
                                                     const float* __restrict__ Dsum, int T, int C, int NH, int NKV,
                                                     float scale_log2, float scale) {
    DYNAMIC_SHARED(float, attn_fsm);
    float* fsm = attn_fsm;
    const int hs = C / NH;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    float* sq = fsm + warp * (2 * hs + WARP_SIZE);
    float* sdo = sq + hs;
    float* sds = sdo + hs;
    const int i = blockIdx.x * (ATTN_THREADS / WARP_SIZE) + warp;
    if (i >= T) { return; }
    const int bh = blockIdx.y;
    const int b = bh / NH;
    const int h = bh % NH;
    const size_t ld = (size_t)C + 2 * (size_t)NKV * hs;
    const floatX* base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const floatX* kbase = qkv + (size_t)b * T * ld + C + (size_t)(h / (NH / NKV)) * hs;
    const floatX* vbase = kbase + (size_t)NKV * hs;
    const floatX* dorow = dout + ((size_t)b * T + i) * C + (size_t)h * hs;
    for (int d = lane; d < hs; d += WARP_SIZE) {
        sq[d] = to_float(base[(size_t)i * ld + d]) * scale_log2;
        sdo[d] = to_float(dorow[d]);
    }
    __syncwarp();
    const float L = lse[(size_t)bh * T + i] * ATTN_LOG2E;
    const float Di = Dsum[(size_t)bh * T + i];
    float acc[ATTN_FB_DIMS];
#pragma unroll
    for (int r = 0; r < ATTN_FB_DIMS; r++) { acc[r] = 0.0f; }
    for (int j0 = 0; j0 <= i; j0 += WARP_SIZE) {
        const int j = j0 + lane;
        float ds = 0.0f;
        if (j <= i) {
            const floatX* kr = kbase + (size_t)j * ld;
            const floatX* vr = vbase + (size_t)j * ld;
            float s, dp;
            attn_fb_dots(sq, kr, sdo, vr, hs, &s, &dp);
            ds = exp2f(s - L) * (dp - Di);
        }
        sds[lane] = ds;
        __syncwarp();
        const int cnt = (i + 1 - j0 < WARP_SIZE) ? i + 1 - j0 : WARP_SIZE;
#pragma unroll
        for (int r = 0; r < ATTN_FB_DIMS; r++) {
            const int d = lane + r * WARP_SIZE;
            if (d < hs) {
                float a = acc[r];
                for (int jj = 0; jj < cnt; jj++) { a += sds[jj] * to_float(kbase[(size_t)(j0 + jj) * ld + d]); }
                acc[r] = a;
            }
        }
        __syncwarp();
    }
    floatX* dqrow = dqkv + ((size_t)b * T + i) * ld + (size_t)h * hs;
#pragma unroll
    for (int r = 0; r < ATTN_FB_DIMS; r++) {
        const int d = lane + r * WARP_SIZE;
        if (d < hs) { dqrow[d] = from_float<floatX>(acc[r] * scale); }
    }
}

/* backward dK, dV: one warp per key row j of kv head jh; grid (ceil(T/4), B*NKV), block 128, smem 4*(2*hs+64)
 * floats. Loops over the query heads of the group, jh*gq .. jh*gq+gq-1 (gq = NH/NKV), in that order, and for each
 * over the queries i >= j; dK, dV accumulate in fp32 over the whole group and are rounded to floatX once.
 * qkv, dqkv (B,T,(NH+2*NKV)*hs); lse, Dsum (B,NH,T). NKV = NH: the multi-head kernel. */
__global__ void attention_backward_kv_fallback_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                                      const floatX* __restrict__ qkv, const float* __restrict__ lse,
                                                      const float* __restrict__ Dsum, int T, int C, int NH, int NKV,
                                                      float scale_log2, float scale) {
    DYNAMIC_SHARED(float, attn_fsm);
    float* fsm = attn_fsm;
    const int hs = C / NH;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    float* sk = fsm + warp * (2 * hs + 2 * WARP_SIZE);
    float* sv = sk + hs;
    float* sp = sv + hs;
    float* sds = sp + WARP_SIZE;
    const int j = blockIdx.x * (ATTN_THREADS / WARP_SIZE) + warp;
    if (j >= T) { return; }
    const int bj = blockIdx.y;
    const int b = bj / NKV;
    const int jh = bj % NKV;
    const int gq = NH / NKV;
    const size_t ld = (size_t)C + 2 * (size_t)NKV * hs;
    const size_t kofs = (size_t)b * T * ld + C + (size_t)jh * hs; /* kv head jh's k column at t = 0 */
    const size_t vofs = kofs + (size_t)NKV * hs;
    for (int d = lane; d < hs; d += WARP_SIZE) {
        sk[d] = to_float(qkv[kofs + (size_t)j * ld + d]) * scale_log2;
        sv[d] = to_float(qkv[vofs + (size_t)j * ld + d]);
    }
    __syncwarp();
    float ak[ATTN_FB_DIMS], av[ATTN_FB_DIMS];
#pragma unroll
    for (int r = 0; r < ATTN_FB_DIMS; r++) { ak[r] = av[r] = 0.0f; }
    for (int hr = 0; hr < gq; hr++) {
        const int h = jh * gq + hr;
        const size_t bh = (size_t)b * NH + h;
        const floatX* base = qkv + (size_t)b * T * ld + (size_t)h * hs;
        const floatX* dbase = dout + (size_t)b * T * C + (size_t)h * hs;
        for (int i0 = j; i0 < T; i0 += WARP_SIZE) {
            const int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < T) {
                const floatX* qr = base + (size_t)i * ld;
                const floatX* dor = dbase + (size_t)i * C;
                float s, dp;
                attn_fb_dots(sk, qr, sv, dor, hs, &s, &dp);
                p = exp2f(s - lse[bh * T + i] * ATTN_LOG2E);
                ds = p * (dp - Dsum[bh * T + i]);
            }
            sp[lane] = p;
            sds[lane] = ds;
            __syncwarp();
            const int cnt = (T - i0 < WARP_SIZE) ? T - i0 : WARP_SIZE;
#pragma unroll
            for (int r = 0; r < ATTN_FB_DIMS; r++) {
                const int d = lane + r * WARP_SIZE;
                if (d < hs) {
                    float a = ak[r], c = av[r];
                    for (int ii = 0; ii < cnt; ii++) {
                        const int q = i0 + ii;
                        a += sds[ii] * to_float(base[(size_t)q * ld + d]);
                        c += sp[ii] * to_float(dbase[(size_t)q * C + d]);
                    }
                    ak[r] = a;
                    av[r] = c;
                }
            }
            __syncwarp();
        }
    }
#pragma unroll
    for (int r = 0; r < ATTN_FB_DIMS; r++) {
        const int d = lane + r * WARP_SIZE;
        if (d < hs) {
            dqkv[kofs + (size_t)j * ld + d] = from_float<floatX>(ak[r] * scale);
            dqkv[vofs + (size_t)j * ld + d] = from_float<floatX>(av[r]);
        }
    }
}

/* ======================================================================== host side */

/* MMA tile sizes and shared memory (bytes) */
static inline size_t attn_fwd_smem_bytes(int hs) { return (size_t)(ATTN_ROWS + 4 * ATTN_KTILE) * (hs + 8) * 2; }
static inline size_t attn_bwd_q_smem_bytes(int hs) { return (size_t)(2 * ATTN_ROWS + 4 * ATTN_KTILE) * (hs + 8) * 2; }
static inline size_t attn_bwd_kv_smem_bytes(int hs, int bq) {
    return (size_t)(2 * ATTN_ROWS + 4 * bq) * (hs + 8) * 2 + (size_t)4 * bq * sizeof(float);
}
static inline size_t attn_bwd_fa2_smem_bytes(int hs, int bq) {
    return (size_t)(2 * ATTN_ROWS + 4 * bq) * (hs + 8) * 2 + (size_t)ATTN_ROWS * (bq + 8) * 2 + (size_t)3 * bq * sizeof(float);
}
/* The FA2 backward's scratch (floats): D (B,NH,T) at 0; the fp32 dQ accumulator (B,NH,T,hs) from the offset below
 * (rounded up to 4 floats: 16-byte aligned); then one unsigned flag per (b, h, query tile of >= 16 rows). */
static inline size_t attn_fa2_acc_offset(int B, int T, int NH) { return ((size_t)B * NH * T + 3) / 4 * 4; }
static inline size_t attention_fa2_scratch_floats(int B, int T, int C, int NH) {
    return attn_fa2_acc_offset(B, T, NH) + (size_t)B * T * C + (size_t)B * NH * ((T + 15) / 16);
}

/* Validates the shape (FATAL on C % NH != 0, hs > 256, B*NH > 65535, T < 1) and returns hs. */
static inline int attention_check_dims(int B, int T, int C, int NH) {
    if (B < 1 || T < 1 || NH < 1 || C < 1 || C % NH != 0) {
        FATAL("attention: invalid shape B=%d T=%d C=%d NH=%d (need C %% NH == 0)", B, T, C, NH);
    }
    const int hs = C / NH;
    if (hs > ATTN_FALLBACK_MAX_HS) { FATAL("attention: head size %d > %d is not supported", hs, ATTN_FALLBACK_MAX_HS); }
    if ((long long)B * NH > 65535) { FATAL("attention: B*NH = %lld exceeds the grid limit 65535", (long long)B * NH); }
    return hs;
}

/* the group size gq = NH / NKV (query heads per key/value head); exits with one line unless 1 <= NKV and NKV
 * divides NH */
static inline int attention_kv_group(int NH, int NKV) {
    if (NH < 1 || NKV < 1 || NH % NKV != 0) {
        FATAL("attention: NKV=%d key/value heads must divide NH=%d query heads", NKV, NH);
    }
    return NH / NKV;
}

/* 1 when the tensor-core path handles this call (see the header comment), else 0 */
static inline int attention_flash_path(int hs, int C, const void* p0, const void* p1, const void* p2) {
#if FLOATX_IS_FLOAT
    (void)hs; (void)C; (void)p0; (void)p1; (void)p2;
    return 0;
#else
    if (!(hs == 16 || hs == 32 || hs == 64 || hs == 128)) { return 0; }
    if (C % 8 != 0) { return 0; }
    return ptr_aligned(p0, 16) && ptr_aligned(p1, 16) && ptr_aligned(p2, 16);
#endif
}

/* raises the dynamic shared memory limit of `kernel` once per call site instantiation */
template <class Kernel>
static inline void attn_allow_smem(Kernel kernel, size_t bytes) {
    if (bytes > 48 * 1024) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    }
}

#if !FLOATX_IS_FLOAT
template <int HS>
static inline void attention_forward_mma_launch(floatX* out, float* lse, const floatX* qkv, int B, int T, int C,
                                                int NH, int NKV, float scale_log2) {
    static int configured = 0;
    const size_t smem = attn_fwd_smem_bytes(HS);
    if (!configured) {
        attn_allow_smem(attention_forward_mma_kernel<HS>, smem);
        configured = 1;
    }
    dim3 grid(CEIL_DIV(T, ATTN_ROWS), B * NH);
    LAUNCH(grid, ATTN_THREADS, smem, main_stream(), attention_forward_mma_kernel<HS>)(out, lse, qkv, T, C, NH, NKV,
                                                                                     scale_log2);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static inline void attention_backward_mma_launch(floatX* dqkv, const float* Dsum, const floatX* dout,
                                                 const floatX* qkv, const float* lse, int B, int T, int C, int NH,
                                                 int NKV, float scale_log2, float scale) {
    constexpr int BQ = (HS >= 128) ? 32 : 64; /* keeps dK+dV+S+dP accumulators within 255 registers */
    static int configured = 0;
    const size_t smem_kv = attn_bwd_kv_smem_bytes(HS, BQ);
    const size_t smem_q = attn_bwd_q_smem_bytes(HS);
    if (!configured) {
        attn_allow_smem(attention_backward_kv_mma_kernel<HS, BQ>, smem_kv);
        attn_allow_smem(attention_backward_q_mma_kernel<HS>, smem_q);
        configured = 1;
    }
    dim3 grid_kv(CEIL_DIV(T, ATTN_ROWS), B * NKV); /* one block per (64-key tile, kv head) */
    LAUNCH(grid_kv, ATTN_THREADS, smem_kv, main_stream(), attention_backward_kv_mma_kernel<HS, BQ>)(
        dqkv, dout, qkv, lse, Dsum, T, C, NH, NKV, scale_log2, scale);
    CUDA_CHECK_LAUNCH();
    dim3 grid(CEIL_DIV(T, ATTN_ROWS), B * NH);
    LAUNCH(grid, ATTN_THREADS, smem_q, main_stream(), attention_backward_q_mma_kernel<HS>)(
        dqkv, dout, qkv, lse, Dsum, T, C, NH, NKV, scale_log2, scale);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static inline void attention_backward_fa2_launch(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                                 const floatX* out, const float* lse, int B, int T, int C, int NH,
                                                 int NKV, float scale_log2, float scale) {
    constexpr int BQ = (HS >= 128) ? 32 : 64; /* as the dK/dV kernel: registers */
    static int configured = 0;
    const size_t smem = attn_bwd_fa2_smem_bytes(HS, BQ);
    if (!configured) {
        attn_allow_smem(attention_backward_fa2_mma_kernel<HS, BQ>, smem);
        configured = 1;
    }
    float* dqacc = scratch + attn_fa2_acc_offset(B, T, NH);
    unsigned int* flags = (unsigned int*)(dqacc + (size_t)B * T * C);
    CUDA_CHECK(cudaMemsetAsync(flags, 0, (size_t)B * NH * CEIL_DIV(T, BQ) * sizeof(unsigned int), main_stream()));
    dim3 grid(CEIL_DIV(T, ATTN_ROWS), B * NKV);
    LAUNCH(grid, ATTN_THREADS, smem, main_stream(), attention_backward_fa2_mma_kernel<HS, BQ>)(
        dqkv, scratch, dqacc, flags, dout, out, qkv, lse, T, C, NH, NKV, scale_log2, scale);
    CUDA_CHECK_LAUNCH();
}
#endif

/* Forward on the CUDA cores (the fallback kernel: any hs <= 256, every precision, any alignment).
 * out (B,T,C) floatX, lse (B,NH,T) fp32 natural log, qkv (B,T,(NH+2*NKV)*hs) floatX (NKV = NH: (B,T,3C)). */
static inline void attention_forward_cuda_cores(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                                int NKV) {
    const int hs = attention_check_dims(B, T, C, NH);
    attention_kv_group(NH, NKV);
    const float scale_log2 = ATTN_LOG2E / sqrtf((float)hs);
    dim3 grid(CEIL_DIV(T, ATTN_THREADS / WARP_SIZE), B * NH);
    const size_t smem = (size_t)(ATTN_THREADS / WARP_SIZE) * (hs + WARP_SIZE) * sizeof(float);
    LAUNCH(grid, ATTN_THREADS, smem, main_stream(), attention_forward_fallback_kernel)(out, lse, qkv, T, C, NH, NKV,
                                                                                      scale_log2);
    CUDA_CHECK_LAUNCH();
}

/* Forward: the tensor-core kernels where attention_flash_path allows them, the CUDA-core kernel otherwise.
 * Shapes as attention_forward_cuda_cores (NKV key/value heads read natively, no expansion). */
static inline void attention_forward_flash(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                           int NKV) {
    const int hs = attention_check_dims(B, T, C, NH);
    attention_kv_group(NH, NKV);
#if !FLOATX_IS_FLOAT
    const float scale_log2 = ATTN_LOG2E / sqrtf((float)hs);
    if (attention_flash_path(hs, C, out, qkv, qkv)) {
        switch (hs) {
            case 16: attention_forward_mma_launch<16>(out, lse, qkv, B, T, C, NH, NKV, scale_log2); return;
            case 32: attention_forward_mma_launch<32>(out, lse, qkv, B, T, C, NH, NKV, scale_log2); return;
            case 64: attention_forward_mma_launch<64>(out, lse, qkv, B, T, C, NH, NKV, scale_log2); return;
            case 128: attention_forward_mma_launch<128>(out, lse, qkv, B, T, C, NH, NKV, scale_log2); return;
            default: break;
        }
    }
#else
    (void)hs;
#endif
    attention_forward_cuda_cores(out, lse, qkv, B, T, C, NH, NKV);
}

/* D = rowsum(dO * O) per (b, head, t) into Dsum (B,NH,T) fp32: the first pass of every backward path. 128-bit
 * packets when hs and C are multiples of X128_SIZE and dout, out are 16-byte aligned (hs = 64 in bf16: 8 lanes per
 * row, one packet each), element loads otherwise. Deterministic: a fixed summation order per (shape, path). */
static inline void attention_backward_rowdot(float* Dsum, const floatX* dout, const floatX* out, int B, int T, int C,
                                             int NH) {
    const int hs = C / NH;
    const int vec = hs % X128_SIZE == 0 && C % X128_SIZE == 0 && ptr_aligned(dout, 16) && ptr_aligned(out, 16);
    const int W = vec ? X128_SIZE : 1;
    int G = 1;
    while (G < WARP_SIZE && G * W < hs) { G *= 2; } /* lanes per row: enough packets to cover hs once, <= 32 */
    const long long threads = (long long)B * T * NH * G;
    const unsigned int blocks = (unsigned int)((threads + ATTN_THREADS - 1) / ATTN_THREADS);
    if (vec) {
        LAUNCH(blocks, ATTN_THREADS, 0, main_stream(), attention_backward_rowdot_kernel<X128_SIZE>)(Dsum, dout, out, B, T,
                                                                                                    C, NH, G);
    } else {
        LAUNCH(blocks, ATTN_THREADS, 0, main_stream(), attention_backward_rowdot_kernel<1>)(Dsum, dout, out, B, T, C, NH,
                                                                                            G);
    }
    CUDA_CHECK_LAUNCH();
}

/* Backward on the CUDA cores (the fallback kernels). dqkv (B,T,(NH+2*NKV)*hs) overwritten (dK/dV of a kv head summed
 * over its group inside the dK/dV kernel); Dsum: B*NH*T fp32 scratch; dout, out (B,T,C); qkv as dqkv; lse (B,NH,T)
 * from the forward. Deterministic (fixed summation order, no atomics). */
static inline void attention_backward_cuda_cores(floatX* dqkv, float* Dsum, const floatX* dout, const floatX* qkv,
                                                 const floatX* out, const float* lse, int B, int T, int C, int NH,
                                                 int NKV) {
    const int hs = attention_check_dims(B, T, C, NH);
    attention_kv_group(NH, NKV);
    const float scale = 1.0f / sqrtf((float)hs);
    const float scale_log2 = ATTN_LOG2E * scale;
    attention_backward_rowdot(Dsum, dout, out, B, T, C, NH);
    dim3 grid_kv(CEIL_DIV(T, ATTN_THREADS / WARP_SIZE), B * NKV); /* one warp per (key row, kv head) */
    dim3 grid(CEIL_DIV(T, ATTN_THREADS / WARP_SIZE), B * NH);
    const size_t smem = (size_t)(ATTN_THREADS / WARP_SIZE) * (2 * hs + 2 * WARP_SIZE) * sizeof(float);
    LAUNCH(grid_kv, ATTN_THREADS, smem, main_stream(), attention_backward_kv_fallback_kernel)(
        dqkv, dout, qkv, lse, Dsum, T, C, NH, NKV, scale_log2, scale);
    CUDA_CHECK_LAUNCH();
    LAUNCH(grid, ATTN_THREADS, smem, main_stream(), attention_backward_q_fallback_kernel)(
        dqkv, dout, qkv, lse, Dsum, T, C, NH, NKV, scale_log2, scale);
    CUDA_CHECK_LAUNCH();
}

/* Backward, three passes (row-dot, dK/dV, dQ: 7 matmuls of work): the tensor-core kernels where attention_flash_path
 * allows them, the CUDA-core kernels otherwise. Shapes as attention_backward_cuda_cores: NKV key/value heads natively
 * (dK/dV summed over each group inside the dK/dV kernel, in fp32, one rounding). */
static inline void attention_backward_flash7(floatX* dqkv, float* Dsum, const floatX* dout, const floatX* qkv,
                                             const floatX* out, const float* lse, int B, int T, int C, int NH,
                                             int NKV) {
    const int hs = attention_check_dims(B, T, C, NH);
    attention_kv_group(NH, NKV);
#if !FLOATX_IS_FLOAT
    if (attention_flash_path(hs, C, dqkv, dout, qkv)) { /* hs is 16, 32, 64 or 128 */
        const float scale = 1.0f / sqrtf((float)hs);
        const float scale_log2 = ATTN_LOG2E * scale;
        attention_backward_rowdot(Dsum, dout, out, B, T, C, NH);
        switch (hs) {
            case 16: attention_backward_mma_launch<16>(dqkv, Dsum, dout, qkv, lse, B, T, C, NH, NKV, scale_log2, scale); return;
            case 32: attention_backward_mma_launch<32>(dqkv, Dsum, dout, qkv, lse, B, T, C, NH, NKV, scale_log2, scale); return;
            case 64: attention_backward_mma_launch<64>(dqkv, Dsum, dout, qkv, lse, B, T, C, NH, NKV, scale_log2, scale); return;
            default: attention_backward_mma_launch<128>(dqkv, Dsum, dout, qkv, lse, B, T, C, NH, NKV, scale_log2, scale); return;
        }
    }
#else
    (void)hs;
#endif
    attention_backward_cuda_cores(dqkv, Dsum, dout, qkv, out, lse, B, T, C, NH, NKV);
}

/* Backward, one kernel with FlashAttention-2's work (5 matmuls, row-dot fused, dQ summed in a fixed order:
 * attention_backward_fa2_mma_kernel), NKV key/value heads natively. scratch: attention_fa2_scratch_floats(B, T, C,
 * NH) floats (at every NKV), D (B,NH,T) left at its start as by the other paths. Where the tensor-core path does not
 * apply (or out is not 16-byte aligned) it runs attention_backward_flash7. Shapes as attention_backward_cuda_cores;
 * deterministic. Errors: attention_kv_group / attention_check_dims (FATAL). */
static inline void attention_backward_fa2(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                          const floatX* out, const float* lse, int B, int T, int C, int NH, int NKV) {
    const int hs = attention_check_dims(B, T, C, NH);
    attention_kv_group(NH, NKV);
#if !FLOATX_IS_FLOAT
    if (attention_flash_path(hs, C, dqkv, dout, qkv) && ptr_aligned(out, 16)) {
        const float scale = 1.0f / sqrtf((float)hs);
        const float scale_log2 = ATTN_LOG2E * scale;
        switch (hs) {
            case 16: attention_backward_fa2_launch<16>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, scale_log2, scale); return;
            case 32: attention_backward_fa2_launch<32>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, scale_log2, scale); return;
            case 64: attention_backward_fa2_launch<64>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, scale_log2, scale); return;
            default: attention_backward_fa2_launch<128>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, scale_log2, scale); return;
        }
    }
#else
    (void)hs;
#endif
    attention_backward_flash7(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV);
}

/* Which backward the trainer runs (attention_backward_flash, and cuDNN's fallback for shapes it does not take):
 * ATTN_BWD_FA2=1 at compile time selects attention_backward_fa2 (its scratch is then attention_fa2_scratch_floats),
 * 0 (default) the three-pass attention_backward_flash7. Both are always compiled (dev/cuda/attention.cu times both).
 * Both take NKV key/value heads natively (qkv, dqkv (B,T,(NH+2*NKV)*hs)); NKV = NH is multi-head attention. */
#ifndef ATTN_BWD_FA2
#define ATTN_BWD_FA2 0
#endif
static inline void attention_backward_flash(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                            const floatX* out, const float* lse, int B, int T, int C, int NH,
                                            int NKV) {
    if (ATTN_BWD_FA2) {
        attention_backward_fa2(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV);
    } else {
        attention_backward_flash7(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV);
    }
}

/* ======================================================================== the contract's buffer sizes */
/* fp32 values saved per layer for backward: the (B,NH,T) log-sum-exp (the cuDNN path, USE_CUDNN, saves its
 * softmax stats in the same layout). Part of the contract, unchanged by GQA (the state is per query head). */
static inline size_t attention_state_floats(int B, int T, int NH) { return (size_t)B * NH * T; }
/* fp32 scratch of the flash backward at every NKV: D = rowsum(dO*O), (B,NH,T), or attention_fa2_scratch_floats with
 * ATTN_BWD_FA2=1. The contract's attention_scratch_floats (llmc/cuda/attention_gqa.cuh) is this. */
static inline size_t attention_flash_scratch_floats(int B, int T, int C, int NH) {
    if (ATTN_BWD_FA2) { return attention_fa2_scratch_floats(B, T, C, NH); }
    return (size_t)B * NH * T;
}

#endif /* LLMC_CUDA_ATTENTION_CUH */
