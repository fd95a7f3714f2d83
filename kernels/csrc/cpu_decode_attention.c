/* Paged decode attention for CPUs: one query token per request against its cached keys, read in
 * place from the KV pool through the request's row of req_to_token (no gather copy).
 *
 * Layout as in kernels/torch_ref.py: k, v [num_slots, Hkv, D] float32 or bfloat16; table
 * [rows, table_stride] int32; q, out [B, Hq, D] float32; query head h reads KV head h / (Hq / Hkv).
 * Work item: one (request, KV head) pair and the G = Hq / Hkv query heads that share it, so each
 * key and value is loaded from memory once and reused from L1 by the G heads.  With at least four
 * requests per thread an item is a whole request instead: it walks the keys in blocks, every KV head
 * within a block, so the pool's rows are read whole and in order with the next block prefetched
 * (a step of 64 requests x 500 keys read K/V at 5.6 GB/s one head at a time, 9.4 GB/s so).
 * Two passes per item: scores (then an exact softmax), then the weighted sum of values.
 * Head dims that are multiples of 8 score 8 keys at a time; multiples of 64 also keep a 64-wide
 * slice of the output in registers while summing values.  Other head dims take a scalar path.
 */
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
typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

static inline v16f load16(const float *p) { v16f v; memcpy(&v, p, sizeof v); return v; }
static inline void store16(float *p, v16f v) { memcpy(p, &v, sizeof v); }

static inline v16f load16_any(const void *base, int bf16, int64_t index) {
    v16f r;
    if (bf16) {
        v16h h;
        memcpy(&h, (const uint16_t *)base + index, sizeof h);
        const v16u bits = __builtin_convertvector(h, v16u) << 16;
        memcpy(&r, &bits, sizeof r);
    } else {
        memcpy(&r, (const float *)base + index, sizeof r);
    }
    return r;
}

/* lanes i and i + 8 added: eight lanes whose horizontal sum is v's */
static inline v8f fold16(v16f v) {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
         + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
}
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
} DecodeArgs;

/* lane t of the result = sum of the lanes of a[t] (eight horizontal sums by three shuffle rounds) */
static inline v8f reduce8x8(const v8f a[8]) {
    v8f t[4], u[2];
    for (int i = 0; i < 4; i++)
        t[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14)
             + __builtin_shufflevector(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
    for (int i = 0; i < 2; i++)
        u[i] = __builtin_shufflevector(t[2 * i], t[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13)
             + __builtin_shufflevector(t[2 * i], t[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
    return __builtin_shufflevector(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11)
         + __builtin_shufflevector(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

static void softmax_inplace(float *s, int64_t len) {
    float m = -FLT_MAX, sum = 0.f;
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
    const float inv = len > 0 ? 1.f / sum : 0.f;
    for (j = 0; j < len; j++)
        s[j] *= inv;
}

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
 * row i of scores is len long.  D % 8 == 0 scores eight keys per round with one reduction. */
static void score_keys(const DecodeArgs *a, const float *qg, int G, const int32_t *slots, int64_t len,
                       int64_t j0, int64_t j1, int g, float *scores, float *kbuf) {
    const int D = a->head_dim, row_len = a->num_kv_heads * D;
    const int bf16 = a->kv_bf16;
    int64_t j = j0;
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

/* out_i += sum_j p[i][j] * value_j for G query rows of KV head g, keys lo <= j < hi (lo a multiple of
 * VALUE_BLOCK: the sums do not depend on how the keys are split into ranges); row i of p is len long */
static void sum_values(const DecodeArgs *a, const float *p, int G, const int32_t *slots, int64_t len,
                       int64_t lo, int64_t hi, int g, float *og, float *vbuf) {
    const int D = a->head_dim, row_len = a->num_kv_heads * D;
    const int bf16 = a->kv_bf16;
    const int64_t head = (int64_t)g * D;
#ifdef RADIXLM_WIDE
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

static void attend(const DecodeArgs *a, int b, int g, float *scores, float *kvbuf) {
    const int D = a->head_dim, Hq = a->num_q_heads, G = Hq / a->num_kv_heads;
    const int64_t len = a->seq_lens[b];
    const int32_t *slots = a->table + a->rows[b] * a->table_stride;
    const int64_t offset = ((int64_t)b * Hq + (int64_t)g * G) * D;  /* first query head of group g */
    score_keys(a, a->q + offset, G, slots, len, 0, len, g, scores, kvbuf);
    for (int i = 0; i < G; i++)
        softmax_inplace(scores + (int64_t)i * len, len);
    memset(a->out + offset, 0, sizeof(float) * (size_t)G * D);
    sum_values(a, scores, G, slots, len, 0, len, g, a->out + offset, kvbuf);
}

/* the cache lines of the rows of keys j0 <= j < j1 of buf (row_bytes each), on their way to L1 */
static inline void prefetch_rows(const void *buf, const int32_t *slots, int64_t j0, int64_t j1, int64_t row_bytes) {
    for (int64_t j = j0; j < j1; j++) {
        const char *row = (const char *)buf + (int64_t)slots[j] * row_bytes;
        for (int64_t c = 0; c < row_bytes; c += 64)
            __builtin_prefetch(row + c);
    }
}

/* Request b, all its KV heads: each pass walks the keys block by block, and within a block every head,
 * so the pool's rows (all heads of a token, adjacent) are read whole and in order, with the next block's
 * rows prefetched; results equal attend()'s for each head bit for bit.  scores holds Hq rows of len. */
static void attend_request(const DecodeArgs *a, int b, float *scores, float *kvbuf) {
    const int D = a->head_dim, Hq = a->num_q_heads, Hkv = a->num_kv_heads, G = Hq / Hkv;
    const int64_t len = a->seq_lens[b], row_bytes = (int64_t)Hkv * D * (a->kv_bf16 ? 2 : 4);
    const int32_t *slots = a->table + a->rows[b] * a->table_stride;
    const float *q = a->q + (int64_t)b * Hq * D;
    float *out = a->out + (int64_t)b * Hq * D;
    prefetch_rows(a->k, slots, 0, len < VALUE_BLOCK ? len : VALUE_BLOCK, row_bytes);
    for (int64_t j0 = 0; j0 < len; j0 += VALUE_BLOCK) {
        const int64_t j1 = j0 + VALUE_BLOCK < len ? j0 + VALUE_BLOCK : len;
        prefetch_rows(a->k, slots, j1, j1 + VALUE_BLOCK < len ? j1 + VALUE_BLOCK : len, row_bytes);
        for (int g = 0; g < Hkv; g++)
            score_keys(a, q + (int64_t)g * G * D, G, slots, len, j0, j1, g, scores + (int64_t)g * G * len, kvbuf);
    }
    for (int i = 0; i < Hq; i++)
        softmax_inplace(scores + (int64_t)i * len, len);
    memset(out, 0, sizeof(float) * (size_t)Hq * D);
    prefetch_rows(a->v, slots, 0, len < VALUE_BLOCK ? len : VALUE_BLOCK, row_bytes);
    for (int64_t j0 = 0; j0 < len; j0 += VALUE_BLOCK) {
        const int64_t j1 = j0 + VALUE_BLOCK < len ? j0 + VALUE_BLOCK : len;
        prefetch_rows(a->v, slots, j1, j1 + VALUE_BLOCK < len ? j1 + VALUE_BLOCK : len, row_bytes);
        for (int g = 0; g < Hkv; g++)
            sum_values(a, scores + (int64_t)g * G * len, G, slots, len, j0, j1, g, out + (int64_t)g * G * D, kvbuf);
    }
}

/* Returns 0 on success, 1 when a thread could not allocate its buffers.  Threads come from the
 * OpenMP runtime already loaded by torch (same libgomp.so.1), so the kernel shares torch's pool
 * instead of competing with its spinning workers for the cores. */
int radixlm_decode_attention(const float *q, const void *k, const void *v, int kv_bf16,
                             const int32_t *table, int64_t table_stride, const int64_t *rows,
                             const int64_t *seq_lens, int batch, int num_q_heads, int num_kv_heads,
                             int head_dim, float scale, float *out, int num_threads) {
    const int G = num_q_heads / num_kv_heads;
    if (num_threads < 1)
        num_threads = 1;
    /* enough requests to keep every thread busy: one item a request (whole rows, in order); else one a KV head */
    const int whole_rows = batch >= 4 * num_threads;
    const int items = whole_rows ? batch : batch * num_kv_heads;
    if (num_threads > items)
        num_threads = items > 0 ? items : 1;
    int64_t max_len = 1;
    for (int b = 0; b < batch; b++)
        max_len = seq_lens[b] > max_len ? seq_lens[b] : max_len;
    const DecodeArgs args = {q, k, v, kv_bf16, table, table_stride, rows, seq_lens, batch, num_q_heads,
                             num_kv_heads, head_dim, scale, out};
    int status = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : status)
    {
        float *scores = malloc(sizeof(float) * (size_t)(whole_rows ? num_q_heads : G) * (size_t)max_len);
        /* bf16 KV (or many heads per KV head): convert each key and value block to float32 once */
        float *kvbuf = kv_bf16 || G >= 4 ? malloc(sizeof(float) * VALUE_BLOCK * (size_t)head_dim) : NULL;
        int failed = scores == NULL || ((kv_bf16 || G >= 4) && kvbuf == NULL);
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < items; item++)
            if (failed)
                continue;
            else if (whole_rows)
                attend_request(&args, item, scores, kvbuf);
            else
                attend(&args, item / num_kv_heads, item % num_kv_heads, scores, kvbuf);
        free(kvbuf);
        free(scores);
        status |= failed;
    }
    return status;
}

/* ---- extend: several new tokens of a request against its cached keys and each other ----
 *
 * q, out [T, Hq, D] float32, the new tokens of request b at q_starts[b] .. + extend_lens[b]; token t
 * of request b sees the first prefix_lens[b] + t + 1 keys of its row (causal).  Work item: one
 * (request, KV head, tile of EXTEND_TILE new tokens); its tile * G query rows score every key once,
 * so a long cached prefix is read once per tile instead of once per new token. */
enum { EXTEND_TILE = 16 };

typedef struct { int b, t0, t1, g; } ExtendItem;

static void extend_item(const DecodeArgs *a, const int64_t *prefix_lens, const int64_t *q_starts,
                        const ExtendItem *it, float *scores, float *qtile, float *otile, float *kvbuf) {
    const int D = a->head_dim, Hq = a->num_q_heads, G = Hq / a->num_kv_heads;
    const int b = it->b, g = it->g, n = it->t1 - it->t0, rows = n * G;
    const int64_t prefix = prefix_lens[b], len = prefix + it->t1;
    const int32_t *slots = a->table + a->rows[b] * a->table_stride;
    for (int t = 0; t < n; t++)
        memcpy(qtile + (int64_t)t * G * D, a->q + ((q_starts[b] + it->t0 + t) * Hq + (int64_t)g * G) * D,
               sizeof(float) * (size_t)G * D);
    score_keys(a, qtile, rows, slots, len, 0, len, g, scores, kvbuf);
    for (int r = 0; r < rows; r++) {
        const int64_t seen = prefix + it->t0 + r / G + 1;
        float *sr = scores + (int64_t)r * len;
        softmax_inplace(sr, seen);
        memset(sr + seen, 0, sizeof(float) * (size_t)(len - seen));
    }
    memset(otile, 0, sizeof(float) * (size_t)rows * D);
    sum_values(a, scores, rows, slots, len, 0, len, g, otile, kvbuf);
    for (int t = 0; t < n; t++)
        memcpy(a->out + ((q_starts[b] + it->t0 + t) * Hq + (int64_t)g * G) * D, otile + (int64_t)t * G * D,
               sizeof(float) * (size_t)G * D);
}

/* Returns 0 on success, 1 when buffers could not be allocated. */
int radixlm_extend_attention(const float *q, const void *k, const void *v, int kv_bf16,
                             const int32_t *table, int64_t table_stride, const int64_t *rows,
                             const int64_t *prefix_lens, const int64_t *extend_lens, const int64_t *q_starts,
                             int batch, int num_q_heads, int num_kv_heads, int head_dim, float scale,
                             float *out, int num_threads) {
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
                             num_kv_heads, head_dim, scale, out};
    int status = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : status)
    {
        const size_t tile_rows = (size_t)EXTEND_TILE * G;
        float *scores = malloc(sizeof(float) * tile_rows * (size_t)max_len);
        float *qtile = malloc(sizeof(float) * tile_rows * (size_t)D);
        float *otile = malloc(sizeof(float) * tile_rows * (size_t)D);
        float *kvbuf = malloc(sizeof(float) * VALUE_BLOCK * (size_t)D);   /* >= the 8 keys score_keys converts */
        int failed = scores == NULL || qtile == NULL || otile == NULL || kvbuf == NULL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < items; i++)
            if (!failed)
                extend_item(&args, prefix_lens, q_starts, &list[i], scores, qtile, otile, kvbuf);
        free(kvbuf);
        free(scores);
        free(qtile);
        free(otile);
        status |= failed;
    }
    free(list);
    return status;
}
