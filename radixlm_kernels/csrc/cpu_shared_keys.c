/* Keys every request of a step shares (a system prompt's), attended once for all their query rows by the packed
 * row loops of packed_rows.h (radixlm_kernels/cpu_shared_prefix.py calls it; so does cpu_decode_layers.c). */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "packed_rows.h"
#include "scratch.h"

/* Keys every request of a decode step shares (a system prompt's), attended once for all their queries: per KV
 * head, the batch's B * G query rows of its group (request b, head g * G + i) against the same num_keys keys, no
 * mask, in work items of BLOCK_ROWS rows.  q [B, Hq, D] (rows q_stride elements apart, heads contiguous) of the
 * pool's dtype; keys at slots[j] of the pool's [num_slots, Hkv, D] k and v.  mode as for extend_attention (-1:
 * bfloat16 by the pair loops where built, else widened).  out [B, Hq, D] float32, the normalised attention; lse
 * [B, Hq] float32, the log-sum-exp of each row's scaled scores, for merging with attention over the keys after
 * (cpu_decode_attention.c).  Returns 0 on success, 1 when buffers could not be allocated, 2 for a head dim or mode
 * the loops do not take. */
typedef struct {
    const void *q, *k, *v;
    int64_t q_stride;
    const int64_t *slots;
    int64_t num_keys, width;
    int batch, num_q_heads, num_kv_heads, head_dim, bf16, dp;
    float scale;
    void *kp, *vp;
    float *out, *lse;
} SharedKeys;

enum { PACK_KEYS = 256 };  /* keys a packing item gathers */

static void pack_shared_keys(const SharedKeys *a, int g, int64_t j0) {
    const int D = a->head_dim, Hkv = a->num_kv_heads;
    const int64_t end = j0 + PACK_KEYS < a->width ? j0 + PACK_KEYS : a->width, head = (int64_t)g * a->width * D;
#ifdef RADIXLM_DP
    if (a->dp) {
        for (int64_t b0 = j0; b0 < end; b0 += 16) {
            int64_t at[16];
            for (int i = 0; i < 16; i++)
                at[i] = b0 + i < a->num_keys ? (a->slots[b0 + i] * Hkv + g) * D : -1;
            dp_pack_keys16((uint32_t *)((uint16_t *)a->kp + head), b0, a->k, at, D);
            for (int i = 0; i < 16; i += 2)
                dp_pack_value_pair((uint16_t *)a->vp + head, (b0 + i) / 2,
                                   at[i] < 0 ? NULL : (const uint16_t *)a->v + at[i],
                                   at[i + 1] < 0 ? NULL : (const uint16_t *)a->v + at[i + 1], D);
        }
        return;
    }
#endif
    for (int64_t j = j0; j < end; j++) {
        const int64_t base = j < a->num_keys ? (a->slots[j] * Hkv + g) * D : -1;
        float *col = (float *)a->kp + head + (j / W) * D * W + j % W, *vr = (float *)a->vp + head + j * D;
        for (int d = 0; d < D; d++)
            col[(int64_t)d * W] = base < 0 ? 0.f : load1_any(a->k, a->bf16, base + d);
        for (int d = 0; d < D; d += W)
            storew(vr + d, base < 0 ? splat(0.f) : loadw_any(a->v, a->bf16, base + d));
    }
}

static void attend_shared_block(const SharedKeys *a, int g, int64_t i0, const Buffers *t) {
    const int D = a->head_dim, Hq = a->num_q_heads, G = Hq / a->num_kv_heads;
    const int64_t rows = (int64_t)a->batch * G, head = (int64_t)g * a->width * D;
    const int n = rows - i0 < BLOCK_ROWS ? (int)(rows - i0) : BLOCK_ROWS;
    const size_t elem = a->dp ? sizeof(uint16_t) : sizeof(float);
    int64_t at[BLOCK_ROWS], q_at[BLOCK_ROWS], seen[BLOCK_ROWS];   /* at: row r's (request, head) in [B, Hq] */
    for (int r = 0; r < n; r++) {
        at[r] = (i0 + r) / G * Hq + (int64_t)g * G + (i0 + r) % G;
        q_at[r] = at[r] / Hq * a->q_stride + at[r] % Hq * D;
        seen[r] = a->num_keys;
    }
    float sums[BLOCK_ROWS], maxes[BLOCK_ROWS], totals[BLOCK_ROWS];
    attend_rows(a->q, a->bf16, a->dp, q_at, seen, n, D, (const char *)a->kp + head * elem,
                (const char *)a->vp + head * elem, a->width, a->scale, t, maxes, sums, totals);
    for (int r = 0; r < n; r++) {
        const vw inv = splat(1.f / sums[r]);
        for (int d = 0; d < D; d += W)
            storew(a->out + at[r] * D + d, loadw(t->obuf + r * D + d) * inv);
        a->lse[at[r]] = a->scale * maxes[r] + logf(totals[r]);
    }
}

int radixlm_shared_keys_attention(const void *q, int64_t q_stride, const void *k, const void *v, int mode,
                                  const int64_t *slots, int64_t num_keys, int batch, int num_q_heads,
                                  int num_kv_heads, int head_dim, float scale, float *out, float *lse,
                                  int num_threads) {
    if (mode == -1)
        mode = radixlm_dp_extend_available(head_dim) ? 2 : 1;
    const int dp = mode == 2;
    if (!radixlm_f32_extend_available(head_dim) || (dp && !radixlm_dp_extend_available(head_dim)) || mode < 0
        || mode > 2)
        return 2;
    const int D = head_dim, G = num_q_heads / num_kv_heads;
    const int64_t width = (num_keys + W * KEY_VECTORS - 1) / (W * KEY_VECTORS) * (W * KEY_VECTORS);
    const size_t bytes = (dp ? sizeof(uint16_t) : sizeof(float)) * (size_t)(num_kv_heads * width * D);
    SharedKeys a = {q, k, v, q_stride, slots, num_keys, width, batch, num_q_heads, num_kv_heads, D, mode != 0, dp,
                    scale, scratch_get(0, bytes), scratch_get(1, bytes), out, lse};
    if (a.kp == NULL || a.vp == NULL)
        return 1;
    const int64_t pack_items = (width + PACK_KEYS - 1) / PACK_KEYS;
    const int64_t blocks = ((int64_t)batch * G + BLOCK_ROWS - 1) / BLOCK_ROWS;
    int status = 0;
#pragma omp parallel num_threads(num_threads > 0 ? num_threads : 1) reduction(| : status)
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < num_kv_heads * pack_items; i++)
            pack_shared_keys(&a, (int)(i / pack_items), i % pack_items * PACK_KEYS);
        Buffers t;
        const int failed = alloc_buffers(&t, width, D, dp);
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < num_kv_heads * blocks; i++)
            if (!failed)
                attend_shared_block(&a, (int)(i / blocks), i % blocks * BLOCK_ROWS, &t);
        status |= failed;
    }
    return status;
}
