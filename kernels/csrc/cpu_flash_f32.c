/* Paged extend attention computed in float32: a prefill chunk's (or a long extend's) new tokens against their
 * request's keys, both products as register-blocked FMA loops on W-lane vectors (16 where the CPU has AVX-512,
 * else 8).  Plan and layout as in extend_blocks.h.  q, KV and out are float32 (radixlm_f32_extend_attention) or
 * bfloat16 (radixlm_bf16_extend_attention: widened to float32 as they are packed, out rounded to nearest even), for
 * CPUs without AMX, where bfloat16 products gain nothing over float32 ones in these loops.
 *
 * Packing, per (request, KV head): keys transposed in blocks of W (for each dim, W consecutive keys), so the
 * scores of a row block come W keys per FMA; values gathered into consecutive rows.  Per item: S = Q K^T for
 * its 16 rows, an exact softmax of each row over the keys it sees (max first, then exp), O = P V over the keys
 * the item's rows see, then O divided by the sum of the weights. */
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extend_blocks.h"
#include "vec8.h"

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

/* bf16: the pool holds bfloat16 (widened here), else float32; a constant where inlined */
static inline void pack_head_any(const ExtendPlan *p, int b, int g, int bf16) {
    const int D = p->head_dim, Hkv = p->num_kv_heads;
    const int64_t len = p->prefix_lens[b] + p->extend_lens[b], lp = padded_keys(p, len);
    const int32_t *slots = p->table + p->rows[b] * p->table_stride;
    float *kt = (float *)p->kp + packed_head(p, b, g), *vr = (float *)p->vp + packed_head(p, b, g);
    for (int64_t j = 0; j < lp; j++) {
        float *col = kt + (j / W) * D * W + j % W;            /* dim d of key j at col[d * W] */
        if (j < len) {
            const int64_t base = ((int64_t)slots[j] * Hkv + g) * D;
            for (int d = 0; d < D; d++)
                col[(int64_t)d * W] = load1_any(p->k, bf16, base + d);
            for (int d = 0; d < D; d += W)
                storew(vr + j * D + d, loadw_any(p->v, bf16, base + d));
        } else {
            for (int d = 0; d < D; d++)
                col[(int64_t)d * W] = 0.f;
            memset(vr + j * D, 0, sizeof(float) * (size_t)D);
        }
    }
}

static void pack_head_f32(const ExtendPlan *p, int b, int g) { pack_head_any(p, b, g, 0); }
static void pack_head_bf16(const ExtendPlan *p, int b, int g) { pack_head_any(p, b, g, 1); }

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

/* s[j] <- exp(scale * (s[j] - max)) for j < seen, 0 for seen <= j < width (a multiple of W); returns their sum */
static float softmax_row(float *s, int64_t seen, int64_t width, float scale) {
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

static void attend_block(const ExtendPlan *p, int bf16, int b, int h, int64_t t0, float *scores, float *qbuf,
                         float *obuf) {
    const int D = p->head_dim, Hq = p->num_q_heads, g = h / (Hq / p->num_kv_heads);
    const int64_t prefix = p->prefix_lens[b], ext = p->extend_lens[b];
    const int n = ext - t0 < BLOCK_ROWS ? (int)(ext - t0) : BLOCK_ROWS;
    const int64_t width = padded_keys(p, prefix + t0 + n);
    const float *kt = (const float *)p->kp + packed_head(p, b, g);
    const float *vr = (const float *)p->vp + packed_head(p, b, g);
    for (int r = 0; r < BLOCK_ROWS; r++)
        for (int d = 0; d < D; d += W)
            storew(qbuf + r * D + d, r < n ? loadw_any(p->q, bf16, (p->q_starts[b] + t0 + r) * p->q_stride
                                                                      + (int64_t)h * D + d)
                                           : splat(0.f));
    for (int r0 = 0; r0 < n; r0 += SCORE_ROWS)
        score_rows(qbuf + r0 * D, kt, width, D, scores + r0 * width);
    float sums[BLOCK_ROWS];
    for (int r = 0; r < BLOCK_ROWS; r++)
        sums[r] = softmax_row(scores + r * width, r < n ? prefix + t0 + r + 1 : 0, width, p->scale);
    for (int r0 = 0; r0 < n; r0 += VALUE_ROWS) {
        const int last = r0 + VALUE_ROWS < n ? r0 + VALUE_ROWS - 1 : n - 1;
        for (int d0 = 0; d0 < D; d0 += VALUE_VECTORS * W)
            sum_value_rows(scores, width, vr, prefix + t0 + last + 1, D, r0, d0, obuf);
    }
    for (int r = 0; r < n; r++) {
        const vw inv = splat(1.f / sums[r]);
        const int64_t o = ((p->q_starts[b] + t0 + r) * Hq + h) * (int64_t)D;
        for (int d = 0; d < D; d += W)
            storenw_any(p->out, bf16, o + d, loadw(obuf + r * D + d) * inv, W);
    }
}

int radixlm_f32_extend_available(int head_dim) { return head_dim % (VALUE_VECTORS * W) == 0 && head_dim <= 256; }

static int extend_attention(const void *q, int64_t q_stride, const void *k, const void *v, const int32_t *table,
                            int64_t table_stride, const int64_t *rows, const int64_t *prefix_lens,
                            const int64_t *extend_lens, const int64_t *q_starts, int batch, int num_q_heads,
                            int num_kv_heads, int head_dim, float scale, void *out, int num_threads, int bf16) {
    if (!radixlm_f32_extend_available(head_dim))
        return 2;
    ExtendPlan plan = {q, k, v, q_stride, table, table_stride, rows, prefix_lens, extend_lens, q_starts, batch,
                       num_q_heads, num_kv_heads, head_dim, scale, out, W * KEY_VECTORS};
    if (plan_extend(&plan, sizeof(float)))
        return 1;
    const int D = head_dim;
    int status = 0;
#pragma omp parallel num_threads(num_threads > 0 ? num_threads : 1) reduction(| : status)
    {
        pack_every_head(&plan, bf16 ? pack_head_bf16 : pack_head_f32);
        float *scores = aligned_alloc(64, sizeof(float) * BLOCK_ROWS * (size_t)plan.max_width);
        float *qbuf = aligned_alloc(64, sizeof(float) * BLOCK_ROWS * (size_t)D);
        float *obuf = aligned_alloc(64, sizeof(float) * BLOCK_ROWS * (size_t)D);
        const int failed = scores == NULL || qbuf == NULL || obuf == NULL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < plan.num_items; i++)
            if (!failed)
                attend_block(&plan, bf16, (int)plan.items[3 * i], (int)plan.items[3 * i + 1], plan.items[3 * i + 2],
                             scores, qbuf, obuf);
        free(scores);
        free(qbuf);
        free(obuf);
        status |= failed;
    }
    free_plan(&plan);
    return status;
}

/* Both return 0 on success, 1 when buffers could not be allocated, 2 for a head dim they do not take. */
int radixlm_f32_extend_attention(const float *q, int64_t q_stride, const float *k, const float *v,
                                 const int32_t *table, int64_t table_stride, const int64_t *rows,
                                 const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                                 int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale, float *out,
                                 int num_threads) {
    return extend_attention(q, q_stride, k, v, table, table_stride, rows, prefix_lens, extend_lens, q_starts, batch,
                            num_q_heads, num_kv_heads, head_dim, scale, out, num_threads, 0);
}

int radixlm_bf16_extend_attention(const uint16_t *q, int64_t q_stride, const uint16_t *k, const uint16_t *v,
                                  const int32_t *table, int64_t table_stride, const int64_t *rows,
                                  const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                                  int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale,
                                  uint16_t *out, int num_threads) {
    return extend_attention(q, q_stride, k, v, table, table_stride, rows, prefix_lens, extend_lens, q_starts, batch,
                            num_q_heads, num_kv_heads, head_dim, scale, out, num_threads, 1);
}
