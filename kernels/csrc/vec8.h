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

/* ---- arrays of float32 (bf16 == 0) or bfloat16 (bf16 != 0), computed on as float32 ---- */

/* bfloat16 bits of float32 values, rounded to nearest even */
static inline v8u bf16_bits8(v8f v) {
    v8u bits;
    memcpy(&bits, &v, sizeof bits);
    return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

/* v rounded to bfloat16 precision, as float32: what a torch bfloat16 op stores */
static inline v8f round8_bf16(v8f v) {
    const v8u bits = bf16_bits8(v) << 16;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* 8 consecutive values from element `index` */
static inline v8f load8_any(const void *base, int bf16, int64_t index) {
    v8f r;
    if (bf16) {
        v8h h;
        memcpy(&h, (const uint16_t *)base + index, sizeof h);
        const v8u bits = __builtin_convertvector(h, v8u) << 16;
        memcpy(&r, &bits, sizeof r);
    } else {
        memcpy(&r, (const float *)base + index, sizeof r);
    }
    return r;
}

static inline float load1_any(const void *base, int bf16, int64_t index) {
    if (!bf16)
        return ((const float *)base)[index];
    const uint32_t bits = (uint32_t)((const uint16_t *)base)[index] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* n <= 8 values from element `index`; lanes from n on are 0 */
static inline v8f loadn_any(const void *base, int bf16, int64_t index, int n) {
    if (n == 8)
        return load8_any(base, bf16, index);
    float tmp[8] = {0};
    for (int i = 0; i < n; i++)
        tmp[i] = load1_any(base, bf16, index + i);
    return load8(tmp);
}

/* the first n <= 8 lanes of v to elements index.. (rounded to nearest even for bfloat16) */
static inline void storen_any(void *base, int bf16, int64_t index, v8f v, int n) {
    if (!bf16) {
        if (n == 8)
            store8((float *)base + index, v);
        else
            memcpy((float *)base + index, &v, sizeof(float) * (size_t)n);
        return;
    }
    const v8h h = __builtin_convertvector(bf16_bits8(v), v8h);
    memcpy((uint16_t *)base + index, &h, sizeof(uint16_t) * (size_t)n);
}

/* exp(x), x clamped to [-87, 88]: 2^n * e^r with |r| <= ln2/2, degree-6 polynomial (relative
 * error about 1e-7). */
static inline v8f exp8(v8f x) {
    const v8f lo = x - x - 87.0f, hi = x - x + 88.0f;
    const v8i below = x < lo, above = x > hi;
    x = (v8f)(((v8i)lo & below) | ((v8i)x & ~below));
    x = (v8f)(((v8i)hi & above) | ((v8i)x & ~above));
    const v8f t = x * 1.44269504088896341f + 0.5f;
    v8i n = __builtin_convertvector(t, v8i);              /* truncates toward zero */
    n -= (v8i)(__builtin_convertvector(n, v8f) > t) & 1;  /* floor(x / ln2 + 0.5) */
    const v8f nf = __builtin_convertvector(n, v8f);
    const v8f r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    v8f p = 1.0f / 720 + r * 0.0f;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const v8i bits = (n + 127) << 23;
    v8f scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
