/* Eight-lane float32 vectors (GCC/Clang vector extensions: AVX2 with -march=native on x86, plain
 * code elsewhere) and the helpers the CPU kernels share. */
#ifndef RADIXLM_VEC8_H
#define RADIXLM_VEC8_H

#include <stdint.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));

static inline v8f load8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
static inline float hsum8(v8f v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

/* lane t of the result = sum of the lanes of a[t] (eight horizontal sums by three shuffle rounds) */
static inline v8f reduce8x8(const v8f a[8]) {
    v8f t[4], u[2];
    for (int i = 0; i < 4; i++)
        t[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14)
             + __builtin_shufflevector(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
    for (int i = 0; i < 2; i++)
        u[i] = __builtin_shufflevector(t[2 * i], t[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13)
             + __builtin_shufflevector(t[2 * i], t[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
    return __builtin_shufflevector(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11)
         + __builtin_shufflevector(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

/* ---- arrays of float32 (bf16 == 0) or bfloat16 (bf16 != 0), computed on as float32 ---- */

static inline float load1_any(const void *base, int bf16, int64_t index) {
    if (!bf16)
        return ((const float *)base)[index];
    const uint32_t bits = (uint32_t)((const uint16_t *)base)[index] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The helpers of N-lane vectors VF (VI, VU: int32 and uint32 lanes; VH: uint16 lanes), instantiated for 8 lanes
 * here and for 16 in vec16.h:
 *   bf16_bitsN(v)        bfloat16 bits of float32 values, rounded to nearest even
 *   roundN_bf16(v)       v rounded to bfloat16 precision, as float32: what a torch bfloat16 op stores
 *   loadN_any(b, f, i)   N consecutive values from element i
 *   LOADN(b, f, i, n)    n <= N values from element i; lanes from n on are 0
 *   STOREN(b, f, i, v, n)  the first n <= N lanes of v to elements i.. (rounded to nearest even for bfloat16)
 *   expN(x)              exp(x), x clamped to [-87, 88]: 2^n * e^r with |r| <= ln2/2, degree-6 polynomial
 *                        (relative error about 1e-7) */
#define RADIXLM_LANE_OPS(N, VF, VI, VU, VH, LOADN, STOREN)                                    \
    static inline VU bf16_bits##N(VF v) {                                                   \
        VU bits;                                                                            \
        memcpy(&bits, &v, sizeof bits);                                                     \
        return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;                                \
    }                                                                                       \
    static inline VF round##N##_bf16(VF v) {                                                \
        const VU bits = bf16_bits##N(v) << 16;                                              \
        memcpy(&v, &bits, sizeof v);                                                        \
        return v;                                                                           \
    }                                                                                       \
    static inline VF load##N##_any(const void *base, int bf16, int64_t index) {             \
        VF r;                                                                               \
        if (bf16) {                                                                         \
            VH h;                                                                           \
            memcpy(&h, (const uint16_t *)base + index, sizeof h);                           \
            const VU bits = __builtin_convertvector(h, VU) << 16;                           \
            memcpy(&r, &bits, sizeof r);                                                    \
        } else {                                                                            \
            memcpy(&r, (const float *)base + index, sizeof r);                              \
        }                                                                                   \
        return r;                                                                           \
    }                                                                                       \
    static inline VF LOADN(const void *base, int bf16, int64_t index, int n) {              \
        if (n == N)                                                                         \
            return load##N##_any(base, bf16, index);                                        \
        float tmp[N] = {0};                                                                 \
        for (int i = 0; i < n; i++)                                                         \
            tmp[i] = load1_any(base, bf16, index + i);                                      \
        VF r;                                                                               \
        memcpy(&r, tmp, sizeof r);                                                          \
        return r;                                                                           \
    }                                                                                       \
    static inline void STOREN(void *base, int bf16, int64_t index, VF v, int n) {           \
        if (!bf16) {                                                                        \
            if (n == N)                                                                     \
                memcpy((float *)base + index, &v, sizeof v);                                \
            else                                                                            \
                memcpy((float *)base + index, &v, sizeof(float) * (size_t)n);               \
            return;                                                                         \
        }                                                                                   \
        const VH h = __builtin_convertvector(bf16_bits##N(v), VH);                          \
        memcpy((uint16_t *)base + index, &h, sizeof(uint16_t) * (size_t)n);                 \
    }                                                                                       \
    static inline VF exp##N(VF x) {                                                        \
        const VF lo = x - x - 87.0f, hi = x - x + 88.0f;                                    \
        const VI below = x < lo, above = x > hi;                                            \
        x = (VF)(((VI)lo & below) | ((VI)x & ~below));                                      \
        x = (VF)(((VI)hi & above) | ((VI)x & ~above));                                      \
        const VF t = x * 1.44269504088896341f + 0.5f;                                       \
        VI n = __builtin_convertvector(t, VI);              /* truncates toward zero */     \
        n -= (VI)(__builtin_convertvector(n, VF) > t) & 1;  /* floor(x / ln2 + 0.5) */      \
        const VF nf = __builtin_convertvector(n, VF);                                       \
        const VF r = x - nf * 0.693359375f + nf * 2.12194440e-4f;                           \
        VF p = 1.0f / 720 + r * 0.0f;                                                       \
        p = p * r + 1.0f / 120;                                                             \
        p = p * r + 1.0f / 24;                                                              \
        p = p * r + 1.0f / 6;                                                               \
        p = p * r + 0.5f;                                                                   \
        p = p * r + 1.0f;                                                                   \
        p = p * r + 1.0f;                                                                   \
        const VI bits = (n + 127) << 23;                                                    \
        VF scale;                                                                           \
        memcpy(&scale, &bits, sizeof scale);                                                \
        return p * scale;                                                                   \
    }

RADIXLM_LANE_OPS(8, v8f, v8i, v8u, v8h, loadn_any, storen_any)

#endif
