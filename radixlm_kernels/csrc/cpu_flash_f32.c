/* Paged extend attention by the packed row loops of packed_rows.h: a prefill chunk's (or a long extend's) new tokens
 * against their request's keys.  Plan and layout as in extend_blocks.h.  q, KV and out are float32
 * (radixlm_f32_extend_attention), or bfloat16 for CPUs without AMX: widened to float32 as they are packed
 * (radixlm_bf16_extend_attention), or, with AVX512-BF16, packed as pairs for its dot product, the softmax weights
 * rounded to bfloat16 (radixlm_dp_extend_attention: twice the products an instruction); out rounded to nearest
 * even.
 *
 * Packing, per (request, KV head): keys transposed in blocks of W (for each dim, W consecutive keys), so the
 * scores of a row block come W keys per FMA; values gathered into consecutive rows.  Per item: S = Q K^T for
 * its 16 rows, an exact softmax of each row over the keys it sees (max first, then exp), O = P V over the keys
 * the item's rows see, then O divided by the sum of the weights. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "packed_rows.h"

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

#ifdef RADIXLM_DP
/* bfloat16 keys and values in the pairs of dp_pairs.h (their bits copied, not widened) */
static void pack_head_dp(const ExtendPlan *p, int b, int g) {
    const int D = p->head_dim, Hkv = p->num_kv_heads;
    const int64_t len = p->prefix_lens[b] + p->extend_lens[b], lp = padded_keys(p, len);
    const int32_t *slots = p->table + p->rows[b] * p->table_stride;
    uint32_t *kp = (uint32_t *)((uint16_t *)p->kp + packed_head(p, b, g));
    uint16_t *vp = (uint16_t *)p->vp + packed_head(p, b, g);
    for (int64_t j0 = 0; j0 < lp; j0 += 16) {
        int64_t at[16];
        for (int i = 0; i < 16; i++)
            at[i] = j0 + i < len ? ((int64_t)slots[j0 + i] * Hkv + g) * D : -1;
        dp_pack_keys16(kp, j0, p->k, at, D);
        for (int i = 0; i < 16; i += 2)
            dp_pack_value_pair(vp, (j0 + i) / 2, at[i] < 0 ? NULL : (const uint16_t *)p->v + at[i],
                               at[i + 1] < 0 ? NULL : (const uint16_t *)p->v + at[i + 1], D);
    }
}
#endif

static void attend_block(const ExtendPlan *p, int bf16, int dp, int b, int h, int64_t t0, const Buffers *t) {
    const int D = p->head_dim, Hq = p->num_q_heads, g = h / (Hq / p->num_kv_heads);
    const int64_t prefix = p->prefix_lens[b], ext = p->extend_lens[b];
    const int n = ext - t0 < BLOCK_ROWS ? (int)(ext - t0) : BLOCK_ROWS;
    const int64_t width = padded_keys(p, prefix + t0 + n);
    const size_t elem = dp ? sizeof(uint16_t) : sizeof(float);
    const char *kt = (const char *)p->kp + packed_head(p, b, g) * elem;
    const char *vr = (const char *)p->vp + packed_head(p, b, g) * elem;
    int64_t q_at[BLOCK_ROWS], seen[BLOCK_ROWS];
    for (int r = 0; r < n; r++) {
        q_at[r] = (p->q_starts[b] + t0 + r) * p->q_stride + (int64_t)h * D;
        seen[r] = prefix + t0 + r + 1;
    }
    float sums[BLOCK_ROWS], maxes[BLOCK_ROWS], totals[BLOCK_ROWS];
    attend_rows(p->q, bf16, dp, q_at, seen, n, D, kt, vr, width, p->scale, t, maxes, sums, totals);
    const float *obuf = t->obuf;
    for (int r = 0; r < n; r++) {
        const vw inv = splat(1.f / sums[r]);
        const int64_t o = ((p->q_starts[b] + t0 + r) * Hq + h) * (int64_t)D;
        for (int d = 0; d < D; d += W)
            storenw_any(p->out, bf16, o + d, loadw(obuf + r * D + d) * inv, W);
    }
}

int radixlm_f32_extend_available(int head_dim) { return head_dim % (VALUE_VECTORS * W) == 0 && head_dim <= 256; }

/* whether the pair loops (bfloat16 by AVX512-BF16) were built and take this head dim */
int radixlm_dp_extend_available(int head_dim) {
#ifdef RADIXLM_DP
    return head_dim % (DP_VALUE_VECTORS * 16) == 0 && head_dim <= 256;
#else
    (void)head_dim;
    return 0;
#endif
}

/* mode: 0 float32, 1 bfloat16 widened to float32, 2 bfloat16 by the pair loops */
static int extend_attention(const void *q, int64_t q_stride, const void *k, const void *v, const int32_t *table,
                            int64_t table_stride, const int64_t *rows, const int64_t *prefix_lens,
                            const int64_t *extend_lens, const int64_t *q_starts, int batch, int num_q_heads,
                            int num_kv_heads, int head_dim, float scale, void *out, int num_threads, int mode) {
    const int dp = mode == 2, bf16 = mode != 0;
    if (!radixlm_f32_extend_available(head_dim) || (dp && !radixlm_dp_extend_available(head_dim)))
        return 2;
    ExtendPlan plan = {q, k, v, q_stride, table, table_stride, rows, prefix_lens, extend_lens, q_starts, batch,
                       num_q_heads, num_kv_heads, head_dim, scale, out, W * KEY_VECTORS};
    if (plan_extend(&plan, dp ? sizeof(uint16_t) : sizeof(float)))
        return 1;
    void (*pack)(const ExtendPlan *, int, int) = bf16 ? pack_head_bf16 : pack_head_f32;
#ifdef RADIXLM_DP
    if (dp)
        pack = pack_head_dp;
#endif
    int status = 0;
#pragma omp parallel num_threads(num_threads > 0 ? num_threads : 1) reduction(| : status)
    {
        pack_every_head(&plan, pack);
        Buffers t;
        const int failed = alloc_buffers(&t, plan.max_width, head_dim, dp);
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < plan.num_items; i++)
            if (!failed)
                attend_block(&plan, bf16, dp, (int)plan.items[3 * i], (int)plan.items[3 * i + 1],
                             plan.items[3 * i + 2], &t);
        status |= failed;
    }
    free_plan(&plan);
    return status;
}

/* All three return 0 on success, 1 when buffers could not be allocated, 2 for a head dim they do not take. */
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

int radixlm_dp_extend_attention(const uint16_t *q, int64_t q_stride, const uint16_t *k, const uint16_t *v,
                                const int32_t *table, int64_t table_stride, const int64_t *rows,
                                const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                                int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale,
                                uint16_t *out, int num_threads) {
    return extend_attention(q, q_stride, k, v, table, table_stride, rows, prefix_lens, extend_lens, q_starts, batch,
                            num_q_heads, num_kv_heads, head_dim, scale, out, num_threads, 2);
}

