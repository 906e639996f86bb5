/*
 * llmc/rand.h -- a random number generator that reproduces PyTorch's CPU
 * generator, so that a model initialised in C from a seed is identical to the
 * same model initialised in PyTorch (train_gpt.py) from the same seed.
 *
 * Source: written from the published algorithms --
 *   - MT19937, Matsumoto & Nishimura 1998 (32-bit Mersenne Twister, the
 *     standard initialisation multiplier 1812433253), which is the engine
 *     behind torch's default CPU generator; torch.manual_seed(s) seeds it with
 *     (uint32)s and clears the generator's cached normal samples;
 *   - the way PyTorch's CPU kernels turn 32-bit draws into floats, documented
 *     in ATen's DistributionsHelper / TransformationHelper / DistributionKernels:
 *       uniform float in [0,1):  (u32 & (2^24-1)) * 2^-24
 *       uniform double in [0,1): (u64 & (2^53-1)) * 2^-53, u64 = (first << 32) | second
 *       normal_ on a contiguous float32 tensor with n >= 16 elements: fill with
 *         n uniform floats, Box-Muller on blocks of 16 (element j pairs with j+8),
 *         and if n % 16 != 0 redraw the last 16 elements and redo that block.
 *         torch's CPU build with AVX2 (every x86-64 machine we use) runs this
 *         with vectorised Cephes log/sin/cos polynomials (avx_mathfun) in
 *         float32; we emulate that in scalar C, including where the compiler
 *         fused multiply-adds (found by matching 200,000 torch values);
 *       normal_ with n < 16 elements: per element one double-precision
 *         Box-Muller sample (two uniform doubles u1, u2; r = sqrt(-2 log(1-u2)),
 *         theta = 2 pi u1; return r cos(theta); the r sin(theta) value is cached
 *         in the generator and returned by the next small-tensor normal draw).
 *       uniform_(a, b) on float32: per element (u32 & (2^24-1)) * 2^-24 * (b-a) + a.
 *
 * Verified bit-for-bit against torch 1.13.1 (Debian python3-torch, CPU
 * capability AVX2) by the unit test test_rand.c (expected values generated with
 * that torch and pasted in); during development also 200,000 consecutive
 * normal_ values matched exactly. Caveats: torch >= 2.1 computes the
 * small-tensor (n < 16) normal with log1p(-u2) instead of log(1-u2), which can
 * change the last bit of some values (set rng->small_normal_log1p = 1 for that
 * behaviour); a torch build without AVX2 (CPU capability DEFAULT) uses libm
 * logf/sinf/cosf for the n >= 16 path and differs in the last bits. Not yet
 * verified against torch 2.x wheels (same AVX2 source code there).
 *
 * Host code only; must be compiled without -ffast-math (the fused
 * multiply-adds are explicit fmaf calls and no unfused a*b+c remains, so
 * -ffp-contract does not change results).
 *
 * Usage:
 *   mt19937_state rng; manual_seed(&rng, 1337);
 *   normal_(&rng, data, n, 0.0, 0.02);   // == torch.manual_seed(1337); t.normal_(0, 0.02)
 *
 * All functions are pure computation on caller memory: no allocation, no
 * errors (n == 0 is a no-op). Not thread-safe per state object.
 */
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MT19937_N 624
#define MT19937_M 397
#define MT19937_MATRIX_A 0x9908b0dfu
#define MT19937_UPPER_MASK 0x80000000u
#define MT19937_LOWER_MASK 0x7fffffffu

/* Generator state: the MT19937 engine plus torch's cached normal sample. */
typedef struct {
    uint64_t seed;                 /* the seed given to manual_seed */
    int left;                      /* draws left before the next twist */
    int next;                      /* index of the next word in state */
    uint32_t state[MT19937_N];
    int has_next_double_normal;    /* torch's next_double_normal_sample cache */
    double next_double_normal;
    int small_normal_log1p;        /* 0: torch <= 2.0 (log(1-u)), 1: torch >= 2.1 (log1p(-u)) */
} mt19937_state;

/* Seeds like torch.manual_seed(seed) on the CPU generator (only the low 32 bits
 * of seed enter the engine, as in torch) and clears the cached normal sample. */
static inline void manual_seed(mt19937_state* rng, uint64_t seed) {
    rng->seed = seed;
    rng->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (int i = 1; i < MT19937_N; i++) {
        uint32_t prev = rng->state[i - 1];
        rng->state[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
    }
    rng->left = 1;
    rng->next = 0;
    rng->has_next_double_normal = 0;
    rng->next_double_normal = 0.0;
    rng->small_normal_log1p = 0;
}

/* Regenerates all 624 words (the MT19937 "twist"). */
static inline void mt19937_twist(mt19937_state* rng) {
    uint32_t* s = rng->state;
    for (int i = 0; i < MT19937_N; i++) {
        uint32_t y = (s[i] & MT19937_UPPER_MASK) | (s[(i + 1) % MT19937_N] & MT19937_LOWER_MASK);
        uint32_t v = s[(i + MT19937_M) % MT19937_N] ^ (y >> 1);
        if (y & 1u) { v ^= MT19937_MATRIX_A; }
        s[i] = v;
    }
    rng->left = MT19937_N;
    rng->next = 0;
}

/* Next 32-bit output (tempered), identical to torch's generator->random(). */
static inline uint32_t randint32(mt19937_state* rng) {
    if (--rng->left <= 0) { mt19937_twist(rng); }
    uint32_t y = rng->state[rng->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* Next 64-bit output as torch's random64(): first draw is the high word. */
static inline uint64_t randint64(mt19937_state* rng) {
    uint64_t hi = randint32(rng);
    uint64_t lo = randint32(rng);
    return (hi << 32) | lo;
}

/* Uniform float in [0,1) from one draw (24 random bits). */
static inline float randfloat32(mt19937_state* rng) {
    return (float)(randint32(rng) & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
}

/* Uniform double in [0,1) from two draws (53 random bits). */
static inline double randfloat64(mt19937_state* rng) {
    return (double)(randint64(rng) & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* torch.Tensor.uniform_(from, to) on a contiguous float32 tensor of n elements. */
static inline void uniform_(mt19937_state* rng, float* data, size_t n, float from, float to) {
    for (size_t i = 0; i < n; i++) {
        data[i] = randfloat32(rng) * (to - from) + from;
    }
}

/* Bit casts (memcpy; no aliasing problems). */
static inline uint32_t rand_float_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float rand_bits_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Natural log of x in (0, 1] exactly as torch's AVX2 kernel computes it: the
 * Cephes single-precision logf polynomial (S. L. Moshier's Cephes library, as
 * vectorised in the avx_mathfun routines torch uses), evaluated with the fused
 * multiply-adds GCC forms from that code (determined empirically: every
 * multiply-add below is fused). Only valid for positive normal x. */
static inline float rand_cephes_logf(float x) {
    const uint32_t b = rand_float_bits(x);
    float e = (float)((int)(b >> 23) - 0x7f) + 1.0f;             /* exponent */
    x = rand_bits_float((b & ~0x7f800000u) | 0x3f000000u);       /* mantissa in [0.5, 1) */
    const int small = x < 0.707106781186547524f;                 /* sqrt(1/2) */
    const float tmp = small ? x : 0.0f;
    x = x - 1.0f;
    e = e - (small ? 1.0f : 0.0f);
    x = x + tmp;
    const float z = x * x;
    float y = 7.0376836292e-2f;
    y = fmaf(y, x, -1.1514610310e-1f);
    y = fmaf(y, x, 1.1676998740e-1f);
    y = fmaf(y, x, -1.2420140846e-1f);
    y = fmaf(y, x, 1.4249322787e-1f);
    y = fmaf(y, x, -1.6668057665e-1f);
    y = fmaf(y, x, 2.0000714765e-1f);
    y = fmaf(y, x, -2.4999993993e-1f);
    y = fmaf(y, x, 3.3333331174e-1f);
    y = y * x;
    y = fmaf(y, z, e * -2.12194440e-4f);
    y = fmaf(-z, 0.5f, y);
    x = x + y;
    x = fmaf(e, 0.693359375f, x);
    return x;
}

/* sin and cos of x >= 0 exactly as torch's AVX2 kernel computes them (Cephes
 * sinf/cosf: octant reduction by 4/pi, three-part Cody-Waite subtraction of
 * pi/4 multiples, minimax polynomials), with GCC's fused multiply-adds. */
static inline void rand_cephes_sincosf(float x, float* s, float* c) {
    uint32_t sign_sin = rand_float_bits(x) & 0x80000000u;
    x = fabsf(x);
    const int j = ((int)(x * 1.27323954473516f) + 1) & ~1;       /* 4/pi, even octant */
    const float y = (float)j;
    sign_sin ^= (uint32_t)(j & 4) << 29;
    const uint32_t sign_cos = (uint32_t)((~(j - 2)) & 4) << 29;
    const int use_sin_poly = (j & 2) == 0;
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    const float z = x * x;
    float yc = 2.443315711809948e-5f;
    yc = fmaf(yc, z, -1.388731625493765e-3f);
    yc = fmaf(yc, z, 4.166664568298827e-2f);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;
    float ys = -1.9515295891e-4f;
    ys = fmaf(ys, z, 8.3321608736e-3f);
    ys = fmaf(ys, z, -1.6666654611e-1f);
    ys = ys * z;
    ys = fmaf(ys, x, x);
    const float sv = use_sin_poly ? ys : yc;
    const float cv = use_sin_poly ? yc : ys;
    *s = rand_bits_float(rand_float_bits(sv) ^ sign_sin);
    *c = rand_bits_float(rand_float_bits(cv) ^ sign_cos);
}

/* One Box-Muller block as torch's normal_fill_16_AVX2: data[0..16) holds
 * uniforms in [0,1) on entry and normals on exit; element j pairs with j + 8:
 *   r = sqrt(-2 log(1 - u_j)), theta = 2pi * u_{j+8} (float),
 *   data[j] = fma(r cos theta, std, mean), data[j+8] = fma(r sin theta, std, mean). */
static inline void normal_fill_16(float* data, float mean, float std) {
    const float two_pi = (float)(2.0 * 3.14159265358979323846);
    for (int j = 0; j < 8; j++) {
        const float u1 = 1.0f - data[j];     /* [0,1) -> (0,1] for log */
        const float u2 = data[j + 8];
        const float radius = sqrtf(-2.0f * rand_cephes_logf(u1));
        const float theta = two_pi * u2;
        float sin_t, cos_t;
        rand_cephes_sincosf(theta, &sin_t, &cos_t);
        data[j] = fmaf(radius * cos_t, std, mean);
        data[j + 8] = fmaf(radius * sin_t, std, mean);
    }
}

/* torch's normal_fill: the path for float32 tensors with n >= 16 elements. */
static inline void normal_fill(mt19937_state* rng, float* data, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) {
        data[i] = randfloat32(rng);
    }
    for (size_t i = 0; i + 16 <= n; i += 16) {
        normal_fill_16(data + i, mean, std);
    }
    if (n % 16 != 0) {
        /* recompute the last 16 values (overlapping the previous block) */
        float* tail = data + n - 16;
        for (int i = 0; i < 16; i++) {
            tail[i] = randfloat32(rng);
        }
        normal_fill_16(tail, mean, std);
    }
}

/* One sample of torch's at::normal_distribution<double>, with its cache. */
static inline double normal_double_sample(mt19937_state* rng, double mean, double std) {
    if (rng->has_next_double_normal) {
        rng->has_next_double_normal = 0;
        return rng->next_double_normal * std + mean;
    }
    const double u1 = randfloat64(rng);
    const double u2 = randfloat64(rng);
    const double lg = rng->small_normal_log1p ? log1p(-u2) : log(1.0 - u2);
    const double r = sqrt(-2.0 * lg);
    const double theta = 2.0 * 3.14159265358979323846 * u1;
    rng->has_next_double_normal = 1;
    rng->next_double_normal = r * sin(theta);
    return r * cos(theta) * std + mean;
}

/* torch.Tensor.normal_(mean, std) on a contiguous float32 tensor of n elements
 * (n >= 16: vectorisable float path; n < 16: serial double path with cache).
 * mean and std are doubles as in torch (Python floats): the n >= 16 path rounds
 * them to float, the n < 16 path uses them as doubles. */
static inline void normal_(mt19937_state* rng, float* data, size_t n, double mean, double std) {
    if (n >= 16) {
        normal_fill(rng, data, n, (float)mean, (float)std);
    } else {
        for (size_t i = 0; i < n; i++) {
            data[i] = (float)normal_double_sample(rng, mean, std);
        }
    }
}

/* Uniform integer in [0, range) from one 32-bit draw (draw % range), as torch's
 * random_(0, range) on CPU for range < 2^32. Returns 0 when range == 0. */
static inline uint32_t randint_below(mt19937_state* rng, uint32_t range) {
    uint32_t r = randint32(rng);
    return range ? r % range : 0u;
}

#endif /* LLMC_RAND_H */
