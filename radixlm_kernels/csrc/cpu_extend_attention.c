/* Paged extend attention for CPUs: several new tokens of a request against its cached keys and each
 * other, in the layout of cpu_decode_attention.c (row pieces in attention_rows.h). */
#include "attention_rows.h"
#include "scratch.h"

/* ---- extend: several new tokens of a request against its cached keys and each other ----
 *
 * q, out [T, Hq, D] float32, the new tokens of request b at q_starts[b] .. + extend_lens[b]; token t
 * of request b sees the first prefix_lens[b] + t + 1 keys of its row (causal).  Work item: one
 * (request, KV head, tile of EXTEND_TILE new tokens); its tile * G query rows score every key once,
 * so a long cached prefix is read once per tile instead of once per new token.
 * radixlm_extend_attention_after: request b's tokens attend to its keys from starts[b] on only, merged with a
 * prior (o [T, Hq, D], log-sum-exp [T, Hq], per new token) for the keys before: a prefix that every request of
 * the step shares, attended once for all their tokens (radixlm_kernels/cpu_shared_prefix.py). */
enum { EXTEND_TILE = 16 };

typedef struct { int b, t0, t1, g; } ExtendItem;

static void extend_item(const DecodeArgs *a, const int64_t *prefix_lens, const int64_t *q_starts,
                        const ExtendItem *it, float *scores, float *qtile, float *otile, float *kvbuf) {
    const int D = a->head_dim, Hq = a->num_q_heads, G = Hq / a->num_kv_heads;
    const int b = it->b, g = it->g, n = it->t1 - it->t0, rows = n * G;
    const int64_t start = a->starts != NULL ? a->starts[b] : 0;       /* keys before it: the prior's */
    const int64_t prefix = prefix_lens[b] - start, len = prefix + it->t1;
    const int32_t *slots = a->table + a->rows[b] * a->table_stride + start;
    for (int t = 0; t < n; t++)
        memcpy(qtile + (int64_t)t * G * D, a->q + ((q_starts[b] + it->t0 + t) * Hq + (int64_t)g * G) * D,
               sizeof(float) * (size_t)G * D);
    score_keys(a, qtile, NULL, rows, slots, len, 0, len, g, scores, kvbuf);
    for (int r = 0; r < rows; r++) {
        const int64_t seen = prefix + it->t0 + r / G + 1;
        const int64_t row = (q_starts[b] + it->t0 + r / G) * Hq + (int64_t)g * G + r % G;   /* in [T, Hq] */
        float *sr = scores + (int64_t)r * len, *o = otile + (int64_t)r * D;
        const float w = softmax_prior_inplace(sr, seen, a->prior_lse != NULL,
                                              a->prior_lse != NULL ? a->prior_lse[row] : 0.f);
        memset(sr + seen, 0, sizeof(float) * (size_t)(len - seen));
        if (a->prior_o != NULL)
            for (int d = 0; d < D; d++)
                o[d] = w * a->prior_o[row * D + d];
        else
            memset(o, 0, sizeof(float) * (size_t)D);
    }
    sum_values(a, scores, rows, slots, len, 0, len, g, otile, kvbuf);
    for (int t = 0; t < n; t++)
        memcpy(a->out + ((q_starts[b] + it->t0 + t) * Hq + (int64_t)g * G) * D, otile + (int64_t)t * G * D,
               sizeof(float) * (size_t)G * D);
}

/* Both return 0 on success, 1 when buffers could not be allocated. */
int radixlm_extend_attention_after(const float *q, const void *k, const void *v, int kv_bf16,
                                   const int32_t *table, int64_t table_stride, const int64_t *rows,
                                   const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                                   int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale,
                                   float *out, int num_threads, const int64_t *starts, const float *prior_o,
                                   const float *prior_lse) {
    const int G = num_q_heads / num_kv_heads, D = head_dim;
    int64_t items = 0, max_len = 1;
    for (int b = 0; b < batch; b++) {
        items += (extend_lens[b] + EXTEND_TILE - 1) / EXTEND_TILE * num_kv_heads;
        const int64_t len = prefix_lens[b] + extend_lens[b];
        max_len = len > max_len ? len : max_len;
    }
    ExtendItem *list = malloc(sizeof(ExtendItem) * (size_t)(items > 0 ? items : 1));
    if (list == NULL)
        return 1;
    int64_t n = 0;
    for (int b = 0; b < batch; b++)
        for (int t0 = 0; t0 < extend_lens[b]; t0 += EXTEND_TILE)
            for (int g = 0; g < num_kv_heads; g++) {
                const int t1 = t0 + EXTEND_TILE < extend_lens[b] ? t0 + EXTEND_TILE : (int)extend_lens[b];
                list[n++] = (ExtendItem){b, t0, t1, g};
            }
    if (num_threads < 1)
        num_threads = 1;
    if (num_threads > items)
        num_threads = items > 0 ? (int)items : 1;
    const DecodeArgs args = {q, k, v, kv_bf16, table, table_stride, rows, NULL, batch, num_q_heads,
                             num_kv_heads, head_dim, scale, out, starts, prior_o, prior_lse, NULL};
    int status = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : status)
    {
        const size_t tile_rows = (size_t)EXTEND_TILE * G;
        float *scores = scratch_get(0, sizeof(float) * tile_rows * (size_t)max_len);   /* this thread's */
        float *qtile = scratch_get(1, sizeof(float) * tile_rows * (size_t)D);
        float *otile = scratch_get(2, sizeof(float) * tile_rows * (size_t)D);
        float *kvbuf = scratch_get(3, sizeof(float) * VALUE_BLOCK * (size_t)D);   /* >= the 8 keys score_keys converts */
        int failed = scores == NULL || qtile == NULL || otile == NULL || kvbuf == NULL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < items; i++)
            if (!failed)
                extend_item(&args, prefix_lens, q_starts, &list[i], scores, qtile, otile, kvbuf);
        status |= failed;
    }
    free(list);
    return status;
}

int radixlm_extend_attention(const float *q, const void *k, const void *v, int kv_bf16,
                             const int32_t *table, int64_t table_stride, const int64_t *rows,
                             const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                             int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale,
                             float *out, int num_threads) {
    return radixlm_extend_attention_after(q, k, v, kv_bf16, table, table_stride, rows, prefix_lens, extend_lens,
                                          q_starts, batch, num_q_heads, num_kv_heads, head_dim, scale, out,
                                          num_threads, NULL, NULL, NULL);
}
