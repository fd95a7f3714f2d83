/* The plan both packed extend kernels share (cpu_amx_extend.c, cpu_flash_f32.c): each (request, KV head)'s keys
 * and values are first gathered through the block table into a layout its products read in order, then the
 * new tokens are attended in work items of one query head and up to BLOCK_ROWS consecutive new tokens.
 *
 * q [T, Hq, D] (token rows q_stride elements apart; heads contiguous), the new tokens of request b at rows
 * q_starts[b] .. + extend_lens[b]; token t of request b sees the first prefix_lens[b] + t + 1 keys of its
 * block-table row (causal).  k, v: the pool's [num_slots, Hkv, D] buffers.  out [T, Hq, D] contiguous. */
#ifndef RADIXLM_EXTEND_BLOCKS_H
#define RADIXLM_EXTEND_BLOCKS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scratch.h"

enum { BLOCK_ROWS = 16 };

typedef struct {
    const void *q, *k, *v;
    int64_t q_stride;
    const int32_t *table;
    int64_t table_stride;
    const int64_t *rows, *prefix_lens, *extend_lens, *q_starts;
    int batch, num_q_heads, num_kv_heads, head_dim;
    float scale;
    void *out;
    int64_t key_block;        /* keys are packed in whole blocks of this many, the padding zero */
    int64_t *pack_offsets;    /* [B]: request b's packed keys (every KV head) start here, in elements */
    void *kp, *vp;
    int64_t *items;           /* (b, h, t0) per item, longest (most keys) first within a request */
    int64_t num_items, max_width;
} ExtendPlan;

static inline int64_t padded_keys(const ExtendPlan *p, int64_t n) {
    return (n + p->key_block - 1) / p->key_block * p->key_block;
}

/* request b's packed keys (or values) of KV head g */
static inline int64_t packed_head(const ExtendPlan *p, int b, int g) {
    return p->pack_offsets[b] + (int64_t)g * padded_keys(p, p->prefix_lens[b] + p->extend_lens[b]) * p->head_dim;
}

/* The n query rows of an item (head h, new tokens t0 .. t0 + n - 1 of request b) into qbuf [BLOCK_ROWS, D],
 * zero past n; elem bytes an element. */
static inline void gather_q_block(const ExtendPlan *p, int b, int h, int64_t t0, int n, size_t elem, void *qbuf) {
    const size_t row = elem * (size_t)p->head_dim;
    for (int r = 0; r < BLOCK_ROWS; r++) {
        char *dst = (char *)qbuf + (size_t)r * row;
        if (r < n)
            memcpy(dst, (const char *)p->q + ((p->q_starts[b] + t0 + r) * p->q_stride + (int64_t)h * p->head_dim) * elem,
                   row);
        else
            memset(dst, 0, row);
    }
}

/* Every (request, KV head) with new tokens through pack, shared among the threads of the enclosing parallel
 * region (an orphaned omp for: call it from inside one; it ends at a barrier). */
static inline void pack_every_head(const ExtendPlan *p, void (*pack)(const ExtendPlan *, int, int)) {
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < (int64_t)p->batch * p->num_kv_heads; i++)
        if (p->extend_lens[i / p->num_kv_heads] > 0)
            pack(p, (int)(i / p->num_kv_heads), (int)(i % p->num_kv_heads));
}

/* Fills the plan's offsets, items and pack buffers (elem bytes an element); 0 on success, 1 when out of memory
 * (the plan then holds nothing to free). */
static int plan_extend(ExtendPlan *p, size_t elem) {
    const int B = p->batch;
    p->pack_offsets = malloc(sizeof(int64_t) * (size_t)(B > 0 ? B : 1));
    int64_t packed = 0, items = 0, max_width = p->key_block;
    for (int b = 0; b < B && p->pack_offsets != NULL; b++) {
        const int64_t lp = padded_keys(p, p->prefix_lens[b] + p->extend_lens[b]);
        p->pack_offsets[b] = packed;
        packed += lp * p->num_kv_heads * p->head_dim;
        items += (p->extend_lens[b] + BLOCK_ROWS - 1) / BLOCK_ROWS * p->num_q_heads;
        max_width = lp > max_width ? lp : max_width;
    }
    const size_t bytes = ((size_t)packed * elem + 63) / 64 * 64 + 64;
    p->items = malloc(sizeof(int64_t) * 3 * (size_t)(items > 0 ? items : 1));
    p->kp = scratch_get(0, bytes);
    p->vp = scratch_get(1, bytes);
    if (p->pack_offsets == NULL || p->items == NULL || p->kp == NULL || p->vp == NULL) {
        free(p->pack_offsets), free(p->items);
        return 1;
    }
    int64_t n = 0;
    for (int b = 0; b < B; b++)
        for (int64_t t0 = p->extend_lens[b] > 0 ? (p->extend_lens[b] - 1) / BLOCK_ROWS * BLOCK_ROWS : -1; t0 >= 0;
             t0 -= BLOCK_ROWS)
            for (int h = 0; h < p->num_q_heads; h++) {
                p->items[3 * n] = b, p->items[3 * n + 1] = h, p->items[3 * n + 2] = t0;
                n++;
            }
    p->num_items = items;
    p->max_width = max_width;
    return 0;
}

static void free_plan(ExtendPlan *p) {   /* the packed copies stay, for this thread's next call (scratch.h) */
    free(p->pack_offsets), free(p->items);
}

#endif
