/* The row blocks of cpu_linear_rows.c: out[m, n] = x[m] . w[n] (+ bias[n]) for up to four x rows against NR
 * weight rows, float32 FMA over widened weights or the AVX512-BF16 pair dot product.  Also built into the
 * quantized library (cpu_quant_layer.c), which dequantizes a few weight rows at a time and hands them here. */
#ifndef RADIXLM_LINEAR_BLOCKS_H
#define RADIXLM_LINEAR_BLOCKS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vec8.h"
#if defined(__AVX512F__)
#include "vec16.h"
#endif

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define RADIXLM_DPBF16 1
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define MAX_GROUP 4
#define NR 4           /* weight rows a block streams together */
/* Each block asks for the weight rows two blocks ahead into L2 (locality 2): the hardware prefetcher follows
 * only a few streams, and at batch 1 a block is bound by its loads' latency, not by bandwidth (Zen 4, bf16:
 * SmolLM2's 30 layers and lm head 17 -> 11 ms; 4 to 16 rows ahead alike; a non-temporal hint gains nothing). */
#define PREFETCH_ROWS_AHEAD (2 * NR)

#if defined(__AVX512F__)
#define LANES 16
typedef float vf __attribute__((vector_size(64)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef uint16_t vh __attribute__((vector_size(32)));
#else
#define LANES 8
typedef float vf __attribute__((vector_size(32)));
typedef uint32_t vu __attribute__((vector_size(32)));
typedef uint16_t vh __attribute__((vector_size(16)));
#endif

ALWAYS_INLINE vf load_f32(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }

ALWAYS_INLINE vf load_w(const void *w, int64_t index, const int bf16) {
    vf r;
    if (bf16) {
        vh h;
        memcpy(&h, (const uint16_t *)w + index, sizeof h);
        const vu bits = __builtin_convertvector(h, vu) << 16;
        memcpy(&r, &bits, sizeof r);
    } else {
        memcpy(&r, (const float *)w + index, sizeof r);
    }
    return r;
}

/* sums[r][j] = the horizontal sum of acc[r][j] for r < G: the accumulators eight at a time through one
 * transposing reduction (16 lanes folded to 8 first), not a chain of adds per accumulator */
ALWAYS_INLINE void hsums(vf acc[MAX_GROUP][NR], const int G, float sums[MAX_GROUP][NR]) {
    v8f eight[MAX_GROUP * NR];
    for (int r = 0; r < MAX_GROUP; r++)
        for (int j = 0; j < NR; j++)
#if LANES == 16
            eight[r * NR + j] = r < G ? fold16(acc[r][j]) : (v8f){0};
#else
            eight[r * NR + j] = r < G ? acc[r][j] : (v8f){0};
#endif
    for (int e = 0; e < G * NR; e += 8) {
        const v8f total = reduce8x8(eight + e);
        for (int t = 0; t < 8 && e + t < G * NR; t++)
            sums[(e + t) / NR][(e + t) % NR] = total[t];
    }
}

static inline float bf16_round(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits = ((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16) << 16;
    memcpy(&f, &bits, sizeof f);
    return f;
}

typedef struct {
    const void *x;          /* [rows] x rows (bf16 path) */
    const float *xf;        /* [rows, kp] x widened to float32, zero-padded to kp (FMA path) */
    int64_t x_stride, kp;
    int rows, k;
    const void *w, *bias;
    void *out;
    int64_t out_stride;
    int bf16, out_f32;
} LinearArgs;

/* x as the blocks read it: as it is for the pair dot product (bfloat16 where the CPU has it), else widened to float32
 * rows kp apart and zero-padded to whole vectors, in a->xf (the caller frees it).  Returns 1 when that copy could not
 * be allocated, else 0. */
static int prepare_x(LinearArgs *a) {
#ifdef RADIXLM_DPBF16
    if (a->bf16)
        return 0;
#endif
    a->kp = (a->k + LANES - 1) / LANES * LANES;
    float *xf = calloc((size_t)a->rows * (size_t)a->kp + 1, sizeof(float));
    if (xf == NULL)
        return 1;
    for (int m = 0; m < a->rows; m++)
        for (int i = 0; i < a->k; i++)
            xf[m * a->kp + i] = load1_any(a->x, a->bf16, m * a->x_stride + i);
    a->xf = xf;
    return 0;
}

ALWAYS_INLINE void store_out(const LinearArgs *a, int m, int64_t n, float s) {
    if (a->bias)
        s += load1_any(a->bias, a->bf16, n);
    if (a->bf16)
        s = bf16_round(s);
    if (a->bf16 && !a->out_f32) {
        uint32_t bits;
        memcpy(&bits, &s, sizeof bits);
        ((uint16_t *)a->out)[m * a->out_stride + n] = (uint16_t)(bits >> 16);
    } else {
        ((float *)a->out)[m * a->out_stride + n] = s;
    }
}

/* weight rows n .. n + nw - 1 (nw <= NR) against x rows m0 .. m0 + G - 1, float32 FMA over widened weights.
 * The sums leave the registers only after the loop (fields copied to locals so no store can alias them). */
ALWAYS_INLINE void block_fma(const LinearArgs *a, int m0, int64_t n, int nw, const int G, const int bf16) {
    vf acc[MAX_GROUP][NR];
    for (int r = 0; r < G; r++)
        for (int j = 0; j < NR; j++)
            acc[r][j] = (vf){0};
    const int64_t k = a->k, full = k - k % LANES, kp = a->kp;
    const void *w = a->w;
    int64_t wr[NR];  /* past the last row, a block reads row n again (and drops the sums) */
    for (int j = 0; j < NR; j++)
        wr[j] = (n + (j < nw ? j : 0)) * k;
    const float *xf = a->xf + m0 * kp;
    for (int64_t i = 0; i < full; i += LANES) {
        vf wv[NR];
        for (int j = 0; j < NR; j++)
            wv[j] = load_w(w, wr[j] + i, bf16);
        if (((i * (bf16 ? 2 : 4)) & 63) == 0)   /* once a cache line */
            for (int j = 0; j < NR; j++)
                __builtin_prefetch((const char *)w + (wr[j] + PREFETCH_ROWS_AHEAD * k + i) * (bf16 ? 2 : 4), 0, 2);
        for (int r = 0; r < G; r++) {
            const vf xv = load_f32(xf + r * kp + i);
            for (int j = 0; j < NR; j++)
                acc[r][j] += wv[j] * xv;
        }
    }
    if (full < k) {  /* the tail: zero-padded x makes the weights' lanes past k irrelevant */
        vf wv[NR];
        for (int j = 0; j < NR; j++) {
            wv[j] = (vf){0};
            for (int64_t i = full; i < k; i++)
                wv[j][i - full] = load1_any(w, bf16, wr[j] + i);
        }
        for (int r = 0; r < G; r++) {
            const vf xv = load_f32(xf + r * kp + full);
            for (int j = 0; j < NR; j++)
                acc[r][j] += wv[j] * xv;
        }
    }
    float sums[MAX_GROUP][NR];
    hsums(acc, G, sums);
    for (int r = 0; r < G; r++)
        for (int j = 0; j < nw; j++)
            store_out(a, m0 + r, n + j, sums[r][j]);
}

#ifdef RADIXLM_DPBF16
/* the same block for bfloat16 by the pair dot product: 32 products a weight row per instruction */
ALWAYS_INLINE void block_dp(const LinearArgs *a, int m0, int64_t n, int nw, const int G) {
    __m512 acc[MAX_GROUP][NR];
    for (int r = 0; r < G; r++)
        for (int j = 0; j < NR; j++)
            acc[r][j] = _mm512_setzero_ps();
    const int64_t k = a->k, full = k - k % 32, xs = a->x_stride;
    const uint16_t *wr[NR];
    for (int j = 0; j < NR; j++)
        wr[j] = (const uint16_t *)a->w + (n + (j < nw ? j : 0)) * k;
    const uint16_t *x = (const uint16_t *)a->x + m0 * xs;
    for (int64_t i = 0; i < full; i += 32) {
        __m512bh wv[NR];
        for (int j = 0; j < NR; j++)
            wv[j] = (__m512bh)_mm512_loadu_si512(wr[j] + i);
        for (int j = 0; j < NR; j++)
            __builtin_prefetch(wr[j] + PREFETCH_ROWS_AHEAD * k + i, 0, 2);
        for (int r = 0; r < G; r++) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + r * xs + i);
            for (int j = 0; j < NR; j++)
                acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv[j], xv);
        }
    }
    if (full < k) {
        const __mmask32 mask = (__mmask32)((1u << (k - full)) - 1);
        __m512bh wv[NR];
        for (int j = 0; j < NR; j++)
            wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(mask, wr[j] + full);
        for (int r = 0; r < G; r++) {
            const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + r * xs + full);
            for (int j = 0; j < NR; j++)
                acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv[j], xv);
        }
    }
    float sums[MAX_GROUP][NR];
    for (int r = 0; r < G; r++)
        for (int j = 0; j < NR; j++)
            sums[r][j] = _mm512_reduce_add_ps(acc[r][j]);
    for (int r = 0; r < G; r++)
        for (int j = 0; j < nw; j++)
            store_out(a, m0 + r, n + j, sums[r][j]);
}
#endif

ALWAYS_INLINE void block(const LinearArgs *a, int m0, int64_t n, int nw, const int G) {
#ifdef RADIXLM_DPBF16
    if (a->bf16) {
        block_dp(a, m0, n, nw, G);
        return;
    }
#endif
    if (a->bf16)
        block_fma(a, m0, n, nw, G, 1);
    else
        block_fma(a, m0, n, nw, G, 0);
}

static void outputs(const LinearArgs *a, int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; n += NR) {
        const int nw = hi - n >= NR ? NR : (int)(hi - n);
        int m0 = 0;
        for (; m0 + 4 <= a->rows; m0 += 4)
            block(a, m0, n, nw, 4);
        switch (a->rows - m0) {
        case 3: block(a, m0, n, nw, 3); break;
        case 2: block(a, m0, n, nw, 2); break;
        case 1: block(a, m0, n, nw, 1); break;
        default: break;
        }
    }
}

#endif
