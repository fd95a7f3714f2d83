/* bfloat16 operands in the pair layout of AVX512-BF16's dot product (vdpbf16ps: each float32 lane adds the
 * products of one pair of bfloat16 values, exactly, to its sum), for the packed attention loops of cpu_flash_f32.c
 * on CPUs without AMX.  Scores are float32 sums of exact products, as with the keys widened to float32; the
 * softmax weights are rounded to bfloat16 before they weight the values, as the AMX tile kernel does.  Twice the
 * products an instruction of the float32 FMA loops gives.
 *
 * Keys: dims 2p, 2p + 1 of key j as one 32-bit pair at ((j / 16) * (D / 2) + p) * 16 + j % 16, so a vector holds
 * one pair of 16 keys.  Values: dim d of keys 2i and 2i + 1 as one pair at i * D + d, so a vector holds 16 dims of
 * two keys.  Include only where __AVX512BF16__ is defined. */
#ifndef RADIXLM_DP_PAIRS_H
#define RADIXLM_DP_PAIRS_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

enum { DP_SCORE_ROWS = 8, DP_KEY_VECTORS = 2, DP_VALUE_ROWS = 4, DP_VALUE_VECTORS = 4 };

/* Keys j0 .. j0 + 15 (j0 a multiple of 16) into the packed keys kp: key i's D bfloat16 values start at element
 * at[i] of k, or it is zero where at[i] < 0.  One gather a pair where every offset fits a 32-bit index. */
static inline void dp_pack_keys16(uint32_t *kp, int64_t j0, const uint16_t *k, const int64_t *at, int D) {
    uint32_t *blk = kp + (j0 / 16) * (D / 2) * 16;
    int32_t idx[16];
    __mmask16 valid = 0;
    int fits = 1;
    for (int i = 0; i < 16; i++) {
        fits &= at[i] / 2 < INT32_MAX;
        idx[i] = at[i] >= 0 && fits ? (int32_t)(at[i] / 2) : 0;
        valid |= (__mmask16)((at[i] >= 0) << i);
    }
    if (fits) {
        const __m512i vidx = _mm512_loadu_si512(idx);
        for (int p = 0; p < D / 2; p++)
            _mm512_storeu_si512(blk + p * 16, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, vidx,
                                                                          (const int *)k + p, 4));
        return;
    }
    for (int i = 0; i < 16; i++)
        for (int p = 0; p < D / 2; p++)
            blk[p * 16 + i] = at[i] >= 0 ? (uint32_t)k[at[i] + 2 * p] | (uint32_t)k[at[i] + 2 * p + 1] << 16 : 0u;
}

/* Values of keys 2i and 2i + 1 (D bfloat16 each; NULL: zeros) interleaved into the packed values vp, 32 at a time */
static inline void dp_pack_value_pair(uint16_t *vp, int64_t i, const uint16_t *v0, const uint16_t *v1, int D) {
    uint16_t *dst = vp + i * 2 * D;
    int16_t lo[32], hi[32];
    for (int d = 0; d < 16; d++)
        lo[2 * d] = (int16_t)d, lo[2 * d + 1] = (int16_t)(32 + d), hi[2 * d] = (int16_t)(16 + d),
        hi[2 * d + 1] = (int16_t)(48 + d);
    const __m512i ilo = _mm512_loadu_si512(lo), ihi = _mm512_loadu_si512(hi);
    for (int d0 = 0; d0 < D; d0 += 32) {
        const __m512i a = v0 != NULL ? _mm512_loadu_si512(v0 + d0) : _mm512_setzero_si512();
        const __m512i b = v1 != NULL ? _mm512_loadu_si512(v1 + d0) : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + 2 * d0, _mm512_permutex2var_epi16(a, ilo, b));
        _mm512_storeu_si512(dst + 2 * d0 + 32, _mm512_permutex2var_epi16(a, ihi, b));
    }
}

static inline __m512bh dp_splat_pair(const uint16_t *pair) {
    uint32_t bits;
    memcpy(&bits, pair, sizeof bits);
    return (__m512bh)_mm512_set1_epi32((int)bits);
}

/* scores[r][j] = q_r . k_j for 8 rows (q: their bfloat16 values, D each) and keys j < width (a multiple of 32) */
static void dp_score_rows(const uint16_t *q, const uint32_t *kp, int64_t width, int D, float *scores) {
    for (int64_t j0 = 0; j0 < width; j0 += 16 * DP_KEY_VECTORS) {
        __m512 acc[DP_SCORE_ROWS][DP_KEY_VECTORS];
        for (int r = 0; r < DP_SCORE_ROWS; r++)
            for (int n = 0; n < DP_KEY_VECTORS; n++)
                acc[r][n] = _mm512_setzero_ps();
        const uint32_t *blk = kp + (j0 / 16) * (D / 2) * 16;
        for (int p = 0; p < D / 2; p++) {
            __m512bh kv[DP_KEY_VECTORS];
            for (int n = 0; n < DP_KEY_VECTORS; n++)
                kv[n] = (__m512bh)_mm512_loadu_si512(blk + ((int64_t)n * (D / 2) + p) * 16);
            for (int r = 0; r < DP_SCORE_ROWS; r++) {
                const __m512bh qv = dp_splat_pair(q + r * D + 2 * p);
                for (int n = 0; n < DP_KEY_VECTORS; n++)
                    acc[r][n] = _mm512_dpbf16_ps(acc[r][n], kv[n], qv);
            }
        }
        for (int r = 0; r < DP_SCORE_ROWS; r++)
            for (int n = 0; n < DP_KEY_VECTORS; n++)
                _mm512_storeu_ps(scores + r * width + j0 + n * 16, acc[r][n]);
    }
}

/* a row of width (a multiple of 16) weights rounded to bfloat16, to nearest even; returns the sum of the rounded
 * weights, which the output is divided by (so that a common factor of their rounding errors cancels) */
static inline float dp_round_row(const float *p, int64_t width, uint16_t *out) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < width; j += 16) {
        const __m256i rounded = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(p + j));
        _mm256_storeu_si256((__m256i *)(out + j), rounded);
        sum += _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(rounded), 16));
    }
    return _mm512_reduce_add_ps(sum);
}

/* obuf rows r0 .. r0 + 3, dims d0 .. d0 + 63 = sum over keys j < keys (rounded up to a pair; a weight past a row's
 * last key is 0) of w[r][j] v_j, w the rounded weights (rows width apart) */
static void dp_sum_value_rows(const uint16_t *w, int64_t width, const uint16_t *vp, int64_t keys, int D, int r0,
                              int d0, float *obuf) {
    __m512 acc[DP_VALUE_ROWS][DP_VALUE_VECTORS];
    for (int r = 0; r < DP_VALUE_ROWS; r++)
        for (int c = 0; c < DP_VALUE_VECTORS; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < (keys + 1) / 2; i++) {
        __m512bh vv[DP_VALUE_VECTORS];
        for (int c = 0; c < DP_VALUE_VECTORS; c++)
            vv[c] = (__m512bh)_mm512_loadu_si512(vp + (i * D + d0 + c * 16) * 2);
        for (int r = 0; r < DP_VALUE_ROWS; r++) {
            const __m512bh pv = dp_splat_pair(w + (r0 + r) * width + 2 * i);
            for (int c = 0; c < DP_VALUE_VECTORS; c++)
                acc[r][c] = _mm512_dpbf16_ps(acc[r][c], vv[c], pv);
        }
    }
    for (int r = 0; r < DP_VALUE_ROWS; r++)
        for (int c = 0; c < DP_VALUE_VECTORS; c++)
            _mm512_storeu_ps(obuf + (r0 + r) * D + d0 + c * 16, acc[r][c]);
}

#endif
