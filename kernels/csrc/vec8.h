/* Eight-lane float32 vectors (GCC/Clang vector extensions: AVX2 with -march=native on x86, plain
 * code elsewhere) and the helpers the CPU kernels share. */
#ifndef RADIXLM_VEC8_H
#define RADIXLM_VEC8_H

#include <stdint.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f load8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
static inline float hsum8(v8f v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

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
