/* The row loops both packed float32-sum attention kernels share (cpu_flash_f32.c's extend, cpu_shared_keys.c's
 * shared prefix): a block of up to BLOCK_ROWS query rows scored against keys packed for them, an exact softmax of
 * each row, the weighted sum of packed values.  Register-blocked FMA loops on W-lane float32 vectors (16 where the
 * CPU has AVX-512, else 8), keys transposed in blocks of W (for each dim, W consecutive keys) and values in rows;
 * or, for bfloat16 on a CPU with AVX512-BF16, the pair loops of dp_pairs.h. */
#ifndef RADIXLM_PACKED_ROWS_H
#define RADIXLM_PACKED_ROWS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extend_blocks.h"
#include "scratch.h"
#include "vec8.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include "dp_pairs.h"
#define RADIXLM_DP 1
#endif

#ifdef __AVX512F__
#include "vec16.h"
enum { W = 16, KEY_VECTORS = 2, VALUE_ROWS = 4 };   /* 8 x 2 score and 4 x 4 value accumulators of 32 */
typedef v16f vw;
typedef v16i vwi;
#define loadw load16
#define storew store16
#define expw exp16
#define loadw_any load16_any
#define storenw_any storen16_any
#else
enum { W = 8, KEY_VECTORS = 1, VALUE_ROWS = 2 };    /* 8 x 1 and 2 x 4 accumulators of AVX2's 16 registers */
typedef v8f vw;
typedef v8i vwi;
#define loadw load8
#define storew store8
#define expw exp8
#define loadw_any load8_any
#define storenw_any storen_any
#endif

enum { SCORE_ROWS = 8, VALUE_VECTORS = 4 };

static inline vw splat(float x) { return (vw){0} + x; }

/* scores[r][j] = q_r . k_j for 8 rows and keys 0 <= j < width (a multiple of W * KEY_VECTORS) */
static void score_rows(const float *qbuf, const float *kt, int64_t width, int D, float *scores) {
    for (int64_t j0 = 0; j0 < width; j0 += W * KEY_VECTORS) {
        vw acc[SCORE_ROWS][KEY_VECTORS] = {{{0}}};
        const float *blk = kt + (j0 / W) * D * W;
        for (int d = 0; d < D; d++) {
            vw kv[KEY_VECTORS];
            for (int n = 0; n < KEY_VECTORS; n++)
                kv[n] = loadw(blk + ((int64_t)n * D + d) * W);
            for (int r = 0; r < SCORE_ROWS; r++) {
                const vw qd = splat(qbuf[r * D + d]);
                for (int n = 0; n < KEY_VECTORS; n++)
                    acc[r][n] += qd * kv[n];
            }
        }
        for (int r = 0; r < SCORE_ROWS; r++)
            for (int n = 0; n < KEY_VECTORS; n++)
                storew(scores + r * width + j0 + n * W, acc[r][n]);
    }
}

/* s[j] <- exp(scale * (s[j] - max)) for j < seen, 0 for seen <= j < width (a multiple of W); returns their sum,
 * and the max through *max_out */
static float softmax_row(float *s, int64_t seen, int64_t width, float scale, float *max_out) {
    vw vm = splat(-FLT_MAX);
    int64_t j = 0;
    for (; j + W <= seen; j += W) {
        const vw x = loadw(s + j);
        vm = (vw)(((vwi)x & (x > vm)) | ((vwi)vm & ~(x > vm)));
    }
    float m = -FLT_MAX;
    for (int i = 0; i < W; i++)
        m = vm[i] > m ? vm[i] : m;
    for (; j < seen; j++)
        m = s[j] > m ? s[j] : m;
    vw sum = {0};
    vwi lane;
    for (int i = 0; i < W; i++)
        lane[i] = i;
    for (j = 0; j < width; j += W) {
        const vwi keep = (lane + (int)j) < (int)seen;
        const vw e = (vw)((vwi)expw((loadw(s + j) - m) * scale) & keep);
        storew(s + j, e);
        sum += e;
    }
    float total = 0.f;
    for (int i = 0; i < W; i++)
        total += sum[i];
    *max_out = m;
    return total;
}

/* obuf rows r0 .. r0 + VALUE_ROWS - 1, dims d0 .. d0 + 4W - 1 = sum over keys j < keys of p[r][j] v_j */
static void sum_value_rows(const float *p, int64_t width, const float *vr, int64_t keys, int D, int r0, int d0,
                           float *obuf) {
    vw acc[VALUE_ROWS][VALUE_VECTORS] = {{{0}}};
    for (int64_t j = 0; j < keys; j++) {
        vw vv[VALUE_VECTORS];
        for (int c = 0; c < VALUE_VECTORS; c++)
            vv[c] = loadw(vr + j * D + d0 + c * W);
        for (int r = 0; r < VALUE_ROWS; r++) {
            const vw w = splat(p[(r0 + r) * width + j]);
            for (int c = 0; c < VALUE_VECTORS; c++)
                acc[r][c] += w * vv[c];
        }
    }
    for (int r = 0; r < VALUE_ROWS; r++)
        for (int c = 0; c < VALUE_VECTORS; c++)
            storew(obuf + (r0 + r) * D + d0 + c * W, acc[r][c]);
}

/* Per work item's thread: scores [BLOCK_ROWS, max width], its rounded weights (pair loops), q and out rows; the
 * thread's scratch buffers (scratch.h), kept for its next call, so never freed. */
typedef struct {
    float *scores, *qbuf, *obuf;
    uint16_t *weights;
} Buffers;

static int alloc_buffers(Buffers *t, int64_t width, int D, int dp) {
    t->scores = scratch_get(2, sizeof(float) * BLOCK_ROWS * (size_t)width);     /* this thread's (scratch.h) */
    t->qbuf = scratch_get(3, sizeof(float) * BLOCK_ROWS * (size_t)D);
    t->obuf = scratch_get(4, sizeof(float) * BLOCK_ROWS * (size_t)D);
    t->weights = dp ? scratch_get(5, sizeof(uint16_t) * BLOCK_ROWS * (size_t)width) : NULL;
    return t->scores == NULL || t->qbuf == NULL || t->obuf == NULL || (dp && t->weights == NULL);
}

/* Rows 0 .. n - 1 of a block (row r's query at q_at[r] of q, its softmax over its first seen[r] keys, out at
 * out_at[r]) against the packed keys kt and values vr of width keys: scores, exact softmax, weighted values.
 * Returns each row's max score, the sum its output is to be divided by (of the weights as applied: rounded by
 * the pair loops) and the exact sum of its weights (totals); obuf holds the unnormalised outputs. dp: the pair
 * loops. */
static void attend_rows(const void *q, int bf16, int dp, const int64_t *q_at, const int64_t *seen, int n, int D,
                        const void *kt, const void *vr, int64_t width, float scale, const Buffers *t, float *maxes,
                        float *sums, float *totals) {
    int64_t keys = 0;
    for (int r = 0; r < n; r++)
        keys = seen[r] > keys ? seen[r] : keys;
#ifdef RADIXLM_DP
    if (dp) {
        uint16_t *qb = (uint16_t *)t->qbuf;
        for (int r = 0; r < BLOCK_ROWS; r++)
            if (r < n)
                memcpy(qb + r * D, (const uint16_t *)q + q_at[r], sizeof(uint16_t) * (size_t)D);
            else
                memset(qb + r * D, 0, sizeof(uint16_t) * (size_t)D);
        for (int r0 = 0; r0 < n; r0 += DP_SCORE_ROWS)
            dp_score_rows(qb + r0 * D, kt, width, D, t->scores + r0 * width);
        for (int r = 0; r < BLOCK_ROWS; r++) {
            totals[r] = softmax_row(t->scores + r * width, r < n ? seen[r] : 0, width, scale, maxes + r);
            sums[r] = dp_round_row(t->scores + r * width, width, t->weights + r * width);
        }
        for (int r0 = 0; r0 < n; r0 += DP_VALUE_ROWS)
            for (int d0 = 0; d0 < D; d0 += DP_VALUE_VECTORS * 16)
                dp_sum_value_rows(t->weights, width, vr, keys, D, r0, d0, t->obuf);
        return;
    }
#endif
    (void)dp;
    for (int r = 0; r < BLOCK_ROWS; r++)
        for (int d = 0; d < D; d += W)
            storew(t->qbuf + r * D + d, r < n ? loadw_any(q, bf16, q_at[r] + d) : splat(0.f));
    for (int r0 = 0; r0 < n; r0 += SCORE_ROWS)
        score_rows(t->qbuf + r0 * D, kt, width, D, t->scores + r0 * width);
    for (int r = 0; r < BLOCK_ROWS; r++)
        totals[r] = sums[r] = softmax_row(t->scores + r * width, r < n ? seen[r] : 0, width, scale, maxes + r);
    for (int r0 = 0; r0 < n; r0 += VALUE_ROWS) {
        int64_t block_keys = 0;   /* the most keys a row of these sees: causal rows see fewer than the last */
        for (int r = r0; r < r0 + VALUE_ROWS && r < n; r++)
            block_keys = seen[r] > block_keys ? seen[r] : block_keys;
        for (int d0 = 0; d0 < D; d0 += VALUE_VECTORS * W)
            sum_value_rows(t->scores, width, vr, block_keys, D, r0, d0, t->obuf);
    }
}

int radixlm_f32_extend_available(int head_dim);
int radixlm_dp_extend_available(int head_dim);

#endif
