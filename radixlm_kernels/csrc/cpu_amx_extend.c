/* Paged extend attention for bfloat16 KV on CPUs with AMX: a prefill chunk's (or a long extend's) new
 * tokens against their request's keys, with both matrix products on the tile unit.
 *
 * Plan and layout as in extend_blocks.h; q, k, v and out bfloat16.
 *
 * Phase 1, per (request, KV head): its keys and values are gathered through the block table into the tile
 * unit's operand layouts (pairs of bfloat16 along the reduced dimension), zero-padded to 32 keys.
 * Phase 2, per (request, query head, block of 16 new tokens): S = Q K^T on the tile unit into float32 rows,
 * an exact softmax of each row over the keys it sees (max first, then exp), the weights rounded to
 * bfloat16 as torch's flash kernel rounds them, O = P V on the tile unit, and O divided by the sum of the
 * rounded weights (so the weights applied sum to one).  No running rescale: a block's whole score rows fit
 * in its buffers. */
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extend_blocks.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "amx_tiles.h"

enum { ROWS = BLOCK_ROWS, KEY_BLOCK = 32 };

/* Keys of (b, g) as B operands of S = Q K^T: per block of 16 keys and chunk of 32 dims, 16 rows (dim pairs)
 * of 16 keys x 2 bfloat16.  Values as B operands of O = P V: per block of 32 keys and chunk of 16 dims, 16
 * rows (key pairs) of 16 dims x 2 bfloat16.  Keys past the request's are zero. */
static void pack_head(const ExtendPlan *a, int b, int g) {
    const int D = a->head_dim, Hkv = a->num_kv_heads, chunks_k = D / 32, chunks_v = D / 16;
    const int64_t len = a->prefix_lens[b] + a->extend_lens[b], lp = padded_keys(a, len);
    const int32_t *slots = a->table + a->rows[b] * a->table_stride;
    const uint16_t *k = a->k, *v = a->v;
    uint16_t *kp = (uint16_t *)a->kp + packed_head(a, b, g), *vp = (uint16_t *)a->vp + packed_head(a, b, g);
    for (int64_t j0 = 0; j0 < lp; j0 += 16)
        for (int c = 0; c < chunks_k; c++) {
            __m512i r[16];
            for (int n = 0; n < 16; n++)
                r[n] = j0 + n < len ? _mm512_loadu_si512(k + ((int64_t)slots[j0 + n] * Hkv + g) * D + 32 * c)
                                    : _mm512_setzero_si512();
            transpose16x16(r);
            uint16_t *dst = kp + (j0 / 16 * chunks_k + c) * 512;
            for (int i = 0; i < 16; i++)
                _mm512_storeu_si512(dst + 32 * i, r[i]);
        }
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t j = 0; j < lp; j += 2) {
        const uint16_t *r0 = j < len ? v + ((int64_t)slots[j] * Hkv + g) * D : NULL;
        const uint16_t *r1 = j + 1 < len ? v + ((int64_t)slots[j + 1] * Hkv + g) * D : NULL;
        uint16_t *dst = vp + j / KEY_BLOCK * chunks_v * 512 + (j % KEY_BLOCK) / 2 * 32;
        for (int e = 0; e < chunks_v; e++) {
            const __m256i x0 = r0 ? _mm256_loadu_si256((const __m256i *)(r0 + 16 * e)) : _mm256_setzero_si256();
            const __m256i x1 = r1 ? _mm256_loadu_si256((const __m256i *)(r1 + 16 * e)) : _mm256_setzero_si256();
            const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);
            _mm512_storeu_si512(dst + e * 512, _mm512_permutexvar_epi16(interleave, both));
        }
    }
}

/* One score row: p[j] = bfloat16(exp(scale * (s[j] - max))) for j < seen, 0 for seen <= j < width (a
 * multiple of 16); returns the sum of the rounded weights. */
static float softmax_row(const float *s, int64_t seen, int64_t width, float scale, uint16_t *p) {
    __m512 vm = _mm512_set1_ps(-FLT_MAX);
    int64_t j = 0;
    for (; j + 16 <= seen; j += 16)
        vm = _mm512_max_ps(vm, _mm512_loadu_ps(s + j));
    if (j < seen)
        vm = _mm512_mask_max_ps(vm, (__mmask16)((1u << (seen - j)) - 1), vm, _mm512_loadu_ps(s + j));
    const float c = scale * 1.44269504088896341f;   /* exp(scale x) = 2^(c x) */
    const __m512 vc = _mm512_set1_ps(c), mc = _mm512_set1_ps(_mm512_reduce_max_ps(vm) * c);
    __m512 sum = _mm512_setzero_ps();
    for (j = 0; j < width; j += 16) {
        const __mmask16 keep = j + 16 <= seen ? 0xFFFF : j < seen ? (__mmask16)((1u << (seen - j)) - 1) : 0;
        const __m512 t = _mm512_min_ps(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), vc, mc), _mm512_setzero_ps());
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_mov_ps(keep, exp2_nonpositive(t)));
        _mm256_storeu_si256((__m256i *)(p + j), (__m256i)h);
        sum = _mm512_add_ps(sum, _mm512_cvtpbh_ps(h));
    }
    return _mm512_reduce_add_ps(sum);
}

/* S rows [16, width] = Q [16, D] K^T for keys 0 <= j < width.  D = 64: Q in tiles 0-1, two blocks of 16 keys
 * per round into tiles 4-5, their four key operands in four tiles, so no load waits for the product before it
 * to release its tile.  D = 128: Q in tiles 0-3, the key operands in tiles 6-7. */
static void score_keys(const uint16_t *qbuf, const uint16_t *kp, int64_t width, int D, float *scores) {
    _tile_loadd(0, qbuf, D * 2);
    _tile_loadd(1, qbuf + 32, D * 2);
    if (D == 64) {
        for (int64_t jb = 0; jb < width / 16; jb += 2) {
            const uint16_t *k0 = kp + jb * 1024, *k1 = k0 + 1024;
            _tile_zero(4);
            _tile_zero(5);
            _tile_loadd(2, k0, 64);
            _tile_loadd(3, k1, 64);
            _tile_loadd(6, k0 + 512, 64);
            _tile_loadd(7, k1 + 512, 64);
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
            _tile_dpbf16ps(4, 1, 6);
            _tile_dpbf16ps(5, 1, 7);
            _tile_stored(4, scores + jb * 16, width * 4);
            _tile_stored(5, scores + jb * 16 + 16, width * 4);
        }
        return;
    }
    _tile_loadd(2, qbuf + 64, D * 2);
    _tile_loadd(3, qbuf + 96, D * 2);
    for (int64_t jb = 0; jb < width / 16; jb += 2) {
        const uint16_t *k0 = kp + jb * 2048, *k1 = k0 + 2048;
        _tile_zero(4);
        _tile_zero(5);
        _tile_loadd(6, k0, 64); _tile_dpbf16ps(4, 0, 6);
        _tile_loadd(7, k1, 64); _tile_dpbf16ps(5, 0, 7);
        _tile_loadd(6, k0 + 512, 64); _tile_dpbf16ps(4, 1, 6);
        _tile_loadd(7, k1 + 512, 64); _tile_dpbf16ps(5, 1, 7);
        _tile_loadd(6, k0 + 1024, 64); _tile_dpbf16ps(4, 2, 6);
        _tile_loadd(7, k1 + 1024, 64); _tile_dpbf16ps(5, 2, 7);
        _tile_loadd(6, k0 + 1536, 64); _tile_dpbf16ps(4, 3, 6);
        _tile_loadd(7, k1 + 1536, 64); _tile_dpbf16ps(5, 3, 7);
        _tile_stored(4, scores + jb * 16, width * 4);
        _tile_stored(5, scores + jb * 16 + 16, width * 4);
    }
}

/* O [16, 32] (dims d0 .. d0 + 31 of obuf) = P [16, width] V: two blocks of 32 keys per round, each with its own
 * weight tile (2, 3) and value tiles (4-5, 6-7), so loads never wait on the products before them. */
static void sum_values_32(const uint16_t *pbuf, const uint16_t *vp, int64_t width, int chunks_v, int d0,
                          float *obuf, int D) {
    const uint16_t *v = vp + (d0 / 16) * 512;
    const int64_t stride = (int64_t)chunks_v * 512;
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t kb = 0; kb < width / KEY_BLOCK; kb += 2) {
        _tile_loadd(2, pbuf + kb * KEY_BLOCK, width * 2);
        _tile_loadd(4, v + kb * stride, 64);
        _tile_loadd(5, v + kb * stride + 512, 64);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(1, 2, 5);
        if (kb + 1 < width / KEY_BLOCK) {
            _tile_loadd(3, pbuf + (kb + 1) * KEY_BLOCK, width * 2);
            _tile_loadd(6, v + (kb + 1) * stride, 64);
            _tile_loadd(7, v + (kb + 1) * stride + 512, 64);
            _tile_dpbf16ps(0, 3, 6);
            _tile_dpbf16ps(1, 3, 7);
        }
    }
    _tile_stored(0, obuf + d0, D * 4);
    _tile_stored(1, obuf + d0 + 16, D * 4);
}

static void attend_block(const ExtendPlan *a, int b, int h, int64_t t0, float *scores, uint16_t *pbuf,
                         uint16_t *qbuf, float *obuf) {
    const int D = a->head_dim, Hq = a->num_q_heads, g = h / (Hq / a->num_kv_heads);
    const int64_t prefix = a->prefix_lens[b], ext = a->extend_lens[b];
    const int n = ext - t0 < ROWS ? (int)(ext - t0) : ROWS;
    const int64_t width = padded_keys(a, prefix + t0 + n);  /* keys the block's last row sees, padded */
    const uint16_t *kp = (const uint16_t *)a->kp + packed_head(a, b, g);
    const uint16_t *vp = (const uint16_t *)a->vp + packed_head(a, b, g);
    gather_q_block(a, b, h, t0, n, sizeof(uint16_t), qbuf);
    score_keys(qbuf, kp, width, D, scores);
    float sums[ROWS];
    for (int r = 0; r < ROWS; r++)
        sums[r] = softmax_row(scores + r * width, r < n ? prefix + t0 + r + 1 : 0, width, a->scale,
                              pbuf + r * width);
    for (int d0 = 0; d0 < D; d0 += 32)
        sum_values_32(pbuf, vp, width, D / 16, d0, obuf, D);
    for (int r = 0; r < n; r++) {
        const __m512 inv = _mm512_set1_ps(1.f / sums[r]);
        uint16_t *o = (uint16_t *)a->out + ((a->q_starts[b] + t0 + r) * Hq + h) * (int64_t)D;
        for (int d = 0; d < D; d += 16) {
            const __m256bh bits = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(obuf + r * D + d), inv));
            _mm256_storeu_si256((__m256i *)(o + d), (__m256i)bits);
        }
    }
}

int radixlm_amx_extend_available(int head_dim) {
    return head_dim % 64 == 0 && head_dim <= 128 && amx_permitted();
}

/* Returns 0 on success, 1 when buffers could not be allocated, 2 where AMX cannot run this shape. */
int radixlm_amx_extend_attention(const uint16_t *q, int64_t q_stride, const uint16_t *k, const uint16_t *v,
                                 const int32_t *table, int64_t table_stride, const int64_t *rows,
                                 const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                                 int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale,
                                 uint16_t *out, int num_threads) {
    const int D = head_dim;
    if (!radixlm_amx_extend_available(D))
        return 2;
    ExtendPlan plan = {q, k, v, q_stride, table, table_stride, rows, prefix_lens, extend_lens, q_starts, batch,
                       num_q_heads, num_kv_heads, head_dim, scale, out, KEY_BLOCK};
    if (plan_extend(&plan, sizeof(uint16_t)))
        return 1;
    int status = 0;
#pragma omp parallel num_threads(num_threads > 0 ? num_threads : 1) reduction(| : status)
    {
        pack_every_head(&plan, pack_head);
        float *scores = scratch_get(2, sizeof(float) * ROWS * (size_t)plan.max_width);   /* this thread's */
        uint16_t *pbuf = scratch_get(3, sizeof(uint16_t) * ROWS * (size_t)plan.max_width);
        uint16_t *qbuf = scratch_get(4, sizeof(uint16_t) * ROWS * (size_t)D);
        float *obuf = scratch_get(5, sizeof(float) * ROWS * (size_t)D);
        const int failed = scores == NULL || pbuf == NULL || qbuf == NULL || obuf == NULL;
        if (!failed)
            load_tile_config();
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < plan.num_items; i++)
            if (!failed)
                attend_block(&plan, (int)plan.items[3 * i], (int)plan.items[3 * i + 1], plan.items[3 * i + 2], scores,
                             pbuf, qbuf, obuf);
        if (!failed)
            _tile_release();
        status |= failed;
    }
    free_plan(&plan);
    return status;
}

#else

int radixlm_amx_extend_available(int head_dim) {
    (void)head_dim;
    return 0;
}

int radixlm_amx_extend_attention(const uint16_t *q, int64_t q_stride, const uint16_t *k, const uint16_t *v,
                                 const int32_t *table, int64_t table_stride, const int64_t *rows,
                                 const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                                 int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale,
                                 uint16_t *out, int num_threads) {
    (void)q, (void)q_stride, (void)k, (void)v, (void)table, (void)table_stride, (void)rows, (void)prefix_lens;
    (void)extend_lens, (void)q_starts, (void)batch, (void)num_q_heads, (void)num_kv_heads, (void)head_dim;
    (void)scale, (void)out, (void)num_threads;
    return 2;
}

#endif
