/* The row-level pieces of the CPU attention kernels (cpu_decode_attention.c, cpu_extend_attention.c):
 * query rows scored against a range of keys read in place through a block table, an exact softmax, and
 * the weighted sum of values; 16-lane loops where the CPU has AVX-512, 8-lane ones elsewhere.  Layout and
 * arguments as described in cpu_decode_attention.c. */
#ifndef RADIXLM_ATTENTION_ROWS_H
#define RADIXLM_ATTENTION_ROWS_H

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vec8.h"


#if defined(__AVX512F__)
/* Sixteen-lane vectors where the CPU has 512-bit registers: the score and value loops then issue half
 * the instructions.  Elsewhere (AVX2) they would need twice the registers the 8-lane loops fit in. */
#define RADIXLM_WIDE 1
#ifdef __AVX512BF16__
#include <immintrin.h>
#endif
#include "vec16.h"
#endif

typedef struct {
    const float *q;
    const void *k, *v;
    int kv_bf16;
    const int32_t *table;
    int64_t table_stride;
    const int64_t *rows, *seq_lens;
    int batch, num_q_heads, num_kv_heads, head_dim;
    float scale;
    float *out;
    /* optional: request b attends only to its keys from starts[b] on, merged with what its query rows got
     * from the keys before (prior_o [B, Hq, D], prior_lse [B, Hq], float32: a shared prefix's attention) */
    const int64_t *starts;
    const float *prior_o, *prior_lse;
    const uint16_t *qb;     /* q in bfloat16 where every value is one (decode with bfloat16 KV), else NULL */
} DecodeArgs;

/* softmax over len scores and, where has_prior, one more key of score prior: the log-sum-exp of keys
 * attended elsewhere (a shared prefix), whose weight is returned; s is normalised in place; where lse is not
 * NULL it receives the log-sum-exp of all of them */
static float softmax_lse_inplace(float *s, int64_t len, int has_prior, float prior, float *lse) {
    float m = has_prior ? prior : -FLT_MAX, sum = 0.f;
    for (int64_t j = 0; j < len; j++)
        m = s[j] > m ? s[j] : m;
    int64_t j = 0;
    v8f vsum = {0};
    for (; j + 8 <= len; j += 8) {
        v8f e = exp8(load8(s + j) - m);
        store8(s + j, e);
        vsum += e;
    }
    sum = hsum8(vsum);
    for (; j < len; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    const float prior_weight = has_prior ? expf(prior - m) : 0.f;
    sum += prior_weight;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (j = 0; j < len; j++)
        s[j] *= inv;
    if (lse != NULL)
        *lse = m + logf(sum);
    return prior_weight * inv;
}

static float softmax_prior_inplace(float *s, int64_t len, int has_prior, float prior) {
    return softmax_lse_inplace(s, len, has_prior, prior, NULL);
}

static void softmax_inplace(float *s, int64_t len) { softmax_prior_inplace(s, len, 0, 0.f); }

/* q . row for one key; any head dim */
static inline float dot_row(const float *q, const void *k, int bf16, int64_t base, int n) {
    int d = 0;
    v8f acc = {0};
    for (; d + 8 <= n; d += 8)
        acc += load8(q + d) * load8_any(k, bf16, base + d);
    float s = hsum8(acc);
    for (; d < n; d++)
        s += q[d] * load1_any(k, bf16, base + d);
    return s;
}

/* scores[i][j] = scale * q_i . key_j for G query rows (contiguous, D each) that read KV head g, keys
 * j0 <= j < j1 (j0 a multiple of 8: a score does not depend on how the keys are split into ranges);
 * row i of scores is len long.  D % 8 == 0 scores eight keys per round with one reduction.
 * qb: the same rows in bfloat16 where they are exactly bfloat16 values (else NULL): with bfloat16 keys on a
 * CPU with AVX512-BF16 the products are then taken in pairs from the stored bits (exact, float32 sums),
 * with no float32 copy of the keys. */
static void score_keys(const DecodeArgs *a, const float *qg, const uint16_t *qb, int G, const int32_t *slots,
                       int64_t len, int64_t j0, int64_t j1, int g, float *scores, float *kbuf) {
    const int D = a->head_dim, row_len = a->num_kv_heads * D;
    const int bf16 = a->kv_bf16;
    int64_t j = j0;
#if defined(RADIXLM_WIDE) && defined(__AVX512BF16__)
    if (bf16 && qb != NULL && D % 32 == 0) {
        for (; j + 8 <= j1; j += 8) {
            const uint16_t *keys[8];
            for (int t = 0; t < 8; t++)
                keys[t] = (const uint16_t *)a->k + (int64_t)slots[j + t] * row_len + (int64_t)g * D;
            for (int i = 0; i < G; i++) {
                const uint16_t *qi = qb + (int64_t)i * D;
                __m512 acc[8];
                for (int t = 0; t < 8; t++)
                    acc[t] = _mm512_setzero_ps();
                for (int d = 0; d < D; d += 32) {
                    const __m512bh qd = (__m512bh)_mm512_loadu_si512(qi + d);
                    for (int t = 0; t < 8; t++)
                        acc[t] = _mm512_dpbf16_ps(acc[t], qd, (__m512bh)_mm512_loadu_si512(keys[t] + d));
                }
                v8f folded[8];
                for (int t = 0; t < 8; t++)
                    folded[t] = fold16((v16f)acc[t]);
                store8(scores + (int64_t)i * len + j, reduce8x8(folded) * a->scale);
            }
        }
    }
#endif
#ifdef RADIXLM_WIDE
    if (D % 16 == 0 && (kbuf != NULL || !bf16)) {
        for (; j + 8 <= j1; j += 8) {
            const float *keys[8];
            if (kbuf != NULL) {   /* the 8 keys of a round made float32 once, then read from L1 by every row */
                for (int t = 0; t < 8; t++) {
                    const int64_t base = (int64_t)slots[j + t] * row_len + (int64_t)g * D;
                    for (int d = 0; d < D; d += 16)
                        store16(kbuf + (int64_t)t * D + d, load16_any(a->k, bf16, base + d));
                    keys[t] = kbuf + (int64_t)t * D;
                }
            } else {
                for (int t = 0; t < 8; t++)
                    keys[t] = (const float *)a->k + (int64_t)slots[j + t] * row_len + (int64_t)g * D;
            }
            for (int i = 0; i < G; i++) {
                const float *qi = qg + (int64_t)i * D;
                v16f acc[8] = {{0}};
                for (int d = 0; d < D; d += 16) {
                    const v16f qd = load16(qi + d);
                    for (int t = 0; t < 8; t++)
                        acc[t] += qd * load16(keys[t] + d);
                }
                v8f folded[8];
                for (int t = 0; t < 8; t++)
                    folded[t] = fold16(acc[t]);
                store8(scores + (int64_t)i * len + j, reduce8x8(folded) * a->scale);
            }
        }
    }
#endif
    if (D % 8 == 0 && kbuf != NULL) {
        /* many query rows: the 8 keys of a round are made float32 once, then read from L1 by every row */
        for (; j + 8 <= j1; j += 8) {
            for (int t = 0; t < 8; t++) {
                const int64_t base = (int64_t)slots[j + t] * row_len + (int64_t)g * D;
                for (int d = 0; d < D; d += 8)
                    store8(kbuf + (int64_t)t * D + d, load8_any(a->k, bf16, base + d));
            }
            for (int i = 0; i < G; i++) {
                const float *qi = qg + (int64_t)i * D;
                v8f acc[8] = {{0}};
                for (int d = 0; d < D; d += 8) {
                    const v8f qd = load8(qi + d);
                    for (int t = 0; t < 8; t++)
                        acc[t] += qd * load8(kbuf + (int64_t)t * D + d);
                }
                store8(scores + (int64_t)i * len + j, reduce8x8(acc) * a->scale);
            }
        }
    }
    if (D % 8 == 0) {
        for (; j + 8 <= j1; j += 8) {
            int64_t base[8];
            for (int t = 0; t < 8; t++)
                base[t] = (int64_t)slots[j + t] * row_len + (int64_t)g * D;
            for (int i = 0; i < G; i++) {
                const float *qi = qg + (int64_t)i * D;
                v8f acc[8] = {{0}};
                for (int d = 0; d < D; d += 8) {
                    const v8f qd = load8(qi + d);
                    for (int t = 0; t < 8; t++)
                        acc[t] += qd * load8_any(a->k, bf16, base[t] + d);
                }
                store8(scores + (int64_t)i * len + j, reduce8x8(acc) * a->scale);
            }
        }
    }
    for (; j < j1; j++) {
        const int64_t base = (int64_t)slots[j] * row_len + (int64_t)g * D;
        for (int i = 0; i < G; i++)
            scores[(int64_t)i * len + j] = dot_row(qg + (int64_t)i * D, a->k, bf16, base, D) * a->scale;
    }
}

enum { VALUE_BLOCK = 64 };  /* keys per block: a block's values for one KV head stay in L1 */

#ifdef RADIXLM_WIDE
/* sum_values for G <= 4 query rows at once (G a constant where inlined): each value row is loaded and
 * widened once, into registers, for every query row; each row's sums take the same order as one row at a
 * time (key by key), so the results are the same bits */
static inline __attribute__((always_inline)) void sum_values_rows(const DecodeArgs *a, const float *p, const int G,
                                                                  const int32_t *slots, int64_t len, int64_t lo,
                                                                  int64_t hi, int64_t head, float *og) {
    const int D = a->head_dim, row_len = a->num_kv_heads * D, bf16 = a->kv_bf16;
    for (int d0 = 0; d0 < D; d0 += 64) {
        v16f acc[4][4];
        for (int i = 0; i < G; i++)
            for (int c = 0; c < 4; c++)
                acc[i][c] = load16(og + (int64_t)i * D + d0 + 16 * c);
        for (int64_t j = lo; j < hi; j++) {
            const int64_t base = (int64_t)slots[j] * row_len + head + d0;
            v16f vv[4];
            for (int c = 0; c < 4; c++)
                vv[c] = load16_any(a->v, bf16, base + 16 * c);
            for (int i = 0; i < G; i++) {
                const float w = p[(int64_t)i * len + j];
                for (int c = 0; c < 4; c++)
                    acc[i][c] += w * vv[c];
            }
        }
        for (int i = 0; i < G; i++)
            for (int c = 0; c < 4; c++)
                store16(og + (int64_t)i * D + d0 + 16 * c, acc[i][c]);
    }
}
#endif

/* whether sum_values takes its key-by-key path for G rows (any split of the keys then gives the same sums) */
static inline int value_rows_path(const DecodeArgs *a, int G) {
#ifdef RADIXLM_WIDE
    return a->head_dim % 64 == 0 && G <= 4;
#else
    (void)a, (void)G;
    return 0;
#endif
}

/* out_i += sum_j p[i][j] * value_j for G query rows of KV head g, keys lo <= j < hi (lo a multiple of
 * VALUE_BLOCK, or any split where value_rows_path: the sums do not depend on how the keys are split into
 * ranges); row i of p is len long */
static void sum_values(const DecodeArgs *a, const float *p, int G, const int32_t *slots, int64_t len,
                       int64_t lo, int64_t hi, int g, float *og, float *vbuf) {
    const int D = a->head_dim, row_len = a->num_kv_heads * D;
    const int bf16 = a->kv_bf16;
    const int64_t head = (int64_t)g * D;
#ifdef RADIXLM_WIDE
    if (value_rows_path(a, G)) {
        switch (G) {
        case 1: sum_values_rows(a, p, 1, slots, len, lo, hi, head, og); return;
        case 2: sum_values_rows(a, p, 2, slots, len, lo, hi, head, og); return;
        case 3: sum_values_rows(a, p, 3, slots, len, lo, hi, head, og); return;
        default: sum_values_rows(a, p, 4, slots, len, lo, hi, head, og); return;
        }
    }
    if (D % 64 == 0 && (vbuf != NULL || !bf16)) {
        for (int64_t j0 = lo; j0 < hi; j0 += VALUE_BLOCK) {
            const int64_t j1 = j0 + VALUE_BLOCK < hi ? j0 + VALUE_BLOCK : hi;
            if (vbuf != NULL)   /* a block's values made float32 once (VALUE_BLOCK x D), then summed by every row */
                for (int64_t j = j0; j < j1; j++) {
                    const int64_t base = (int64_t)slots[j] * row_len + head;
                    for (int d = 0; d < D; d += 16)
                        store16(vbuf + (j - j0) * D + d, load16_any(a->v, bf16, base + d));
                }
            for (int i = 0; i < G; i++)
                for (int d0 = 0; d0 < D; d0 += 64) {
                    float *oi = og + (int64_t)i * D + d0;
                    const float *pi = p + (int64_t)i * len;
                    v16f acc[4];
                    for (int c = 0; c < 4; c++)
                        acc[c] = load16(oi + 16 * c);
                    for (int64_t j = j0; j < j1; j++) {
                        const float w = pi[j];
                        const float *vr = vbuf != NULL ? vbuf + (j - j0) * D + d0
                                                       : (const float *)a->v + (int64_t)slots[j] * row_len + head + d0;
                        for (int c = 0; c < 4; c++)
                            acc[c] += w * load16(vr + 16 * c);
                    }
                    for (int c = 0; c < 4; c++)
                        store16(oi + 16 * c, acc[c]);
                }
        }
        return;
    }
#endif
    if (D % 64 == 0 && vbuf != NULL) {
        /* many query rows: a block's values are made float32 once (VALUE_BLOCK x D), then summed by every row */
        for (int64_t j0 = lo; j0 < hi; j0 += VALUE_BLOCK) {
            const int64_t j1 = j0 + VALUE_BLOCK < hi ? j0 + VALUE_BLOCK : hi;
            for (int64_t j = j0; j < j1; j++) {
                const int64_t base = (int64_t)slots[j] * row_len + head;
                for (int d = 0; d < D; d += 8)
                    store8(vbuf + (j - j0) * D + d, load8_any(a->v, bf16, base + d));
            }
            for (int i = 0; i < G; i++)
                for (int d0 = 0; d0 < D; d0 += 64) {
                    float *oi = og + (int64_t)i * D + d0;
                    const float *pi = p + (int64_t)i * len;
                    v8f acc[8];
                    for (int c = 0; c < 8; c++)
                        acc[c] = load8(oi + 8 * c);
                    for (int64_t j = j0; j < j1; j++) {
                        const float w = pi[j];
                        const float *vr = vbuf + (j - j0) * D + d0;
                        for (int c = 0; c < 8; c++)
                            acc[c] += w * load8(vr + 8 * c);
                    }
                    for (int c = 0; c < 8; c++)
                        store8(oi + 8 * c, acc[c]);
                }
        }
        return;
    }
    if (D % 64 == 0) {
        for (int64_t j0 = lo; j0 < hi; j0 += VALUE_BLOCK) {
            const int64_t j1 = j0 + VALUE_BLOCK < hi ? j0 + VALUE_BLOCK : hi;
            for (int i = 0; i < G; i++)
                for (int d0 = 0; d0 < D; d0 += 64) {
                    float *oi = og + (int64_t)i * D + d0;
                    const float *pi = p + (int64_t)i * len;
                    v8f acc[8];
                    for (int c = 0; c < 8; c++)
                        acc[c] = load8(oi + 8 * c);
                    for (int64_t j = j0; j < j1; j++) {
                        const int64_t base = (int64_t)slots[j] * row_len + head + d0;
                        const float w = pi[j];
                        for (int c = 0; c < 8; c++)
                            acc[c] += w * load8_any(a->v, bf16, base + 8 * c);
                    }
                    for (int c = 0; c < 8; c++)
                        store8(oi + 8 * c, acc[c]);
                }
        }
        return;
    }
    for (int64_t j = lo; j < hi; j++) {
        const int64_t base = (int64_t)slots[j] * row_len + head;
        for (int i = 0; i < G; i++) {
            const float w = p[(int64_t)i * len + j];
            float *oi = og + (int64_t)i * D;
            int d = 0;
            for (; d + 8 <= D; d += 8)
                store8(oi + d, load8(oi + d) + w * load8_any(a->v, bf16, base + d));
            for (; d < D; d++)
                oi[d] += w * load1_any(a->v, bf16, base + d);
        }
    }
}

#endif
