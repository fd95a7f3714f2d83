/* Paged decode attention for CPUs: one query token per request against its cached keys, read in
 * place from the KV pool through the request's row of req_to_token (no gather copy).
 *
 * Layout as in radixlm_kernels/torch_ref.py: k, v [num_slots, Hkv, D] float32 or bfloat16; table
 * [rows, table_stride] int32; q, out [B, Hq, D] float32; query head h reads KV head h / (Hq / Hkv).
 * Work item: one (request, KV head) pair and the G = Hq / Hkv query heads that share it, so each
 * key and value is loaded from memory once and reused from L1 by the G heads.  With at least four
 * requests per thread an item is a whole request instead: it walks the keys in blocks, every KV head
 * within a block, so the pool's rows are read whole and in order with the next block prefetched
 * (a step of 64 requests x 500 keys read K/V at 5.6 GB/s one head at a time, 9.4 GB/s so).  A request of
 * SPLIT_FROM_KEYS keys or more is cut into pieces of whole rows instead, an item each, merged at the end.
 * Two passes per item: scores (then an exact softmax), then the weighted sum of values.
 * Head dims that are multiples of 8 score 8 keys at a time; multiples of 64 also keep a 64-wide
 * slice of the output in registers while summing values.  Other head dims take a scalar path.
 * radixlm_decode_attention_after attends to each request's keys from starts[b] on only and merges the
 * result with a prior (o, log-sum-exp) for the keys before: a prefix that a batch shares, attended once
 * for all its requests as a matrix product (radixlm_kernels/cpu_shared_prefix.py).
 */
#include "attention_rows.h"

/* cpu_amx_decode.c: the same items on the AMX tile unit, for bfloat16 KV with head dim 64 */
int radixlm_amx_decode_fits(int head_dim, int num_q_heads, int num_kv_heads);
int radixlm_amx_decode_item(const DecodeArgs *a, int b, int g0, int g1);
void radixlm_amx_decode_done(void);

/* RADIXLM_DISABLE_AMX_DECODE=1 keeps bfloat16 decode attention on the AVX-512 loops (read once a process) */
static int amx_decode_wanted(void) {
    static int wanted = -1;
    if (wanted < 0) {
        const char *off = getenv("RADIXLM_DISABLE_AMX_DECODE");
        wanted = !(off != NULL && (strcmp(off, "1") == 0 || strcmp(off, "true") == 0 || strcmp(off, "yes") == 0));
    }
    return wanted;
}

/* request b's keys from its start on: their slots, and how many */
static inline const int32_t *request_keys(const DecodeArgs *a, int b, int64_t *len) {
    const int64_t start = a->starts != NULL ? a->starts[b] : 0;
    *len = a->seq_lens[b] - start;
    return a->table + a->rows[b] * a->table_stride + start;
}

/* softmax of query rows h0 .. h0 + n - 1 of request b (scores rows of len); their output rows start as the
 * prior's share of them, or 0 */
static void softmax_rows(const DecodeArgs *a, int b, int h0, int n, float *scores, int64_t len, float *out) {
    const int D = a->head_dim;
    for (int i = 0; i < n; i++) {
        const int64_t row = (int64_t)b * a->num_q_heads + h0 + i;
        const float w = softmax_prior_inplace(scores + (int64_t)i * len, len, a->prior_lse != NULL,
                                              a->prior_lse != NULL ? a->prior_lse[row] : 0.f);
        float *o = out + (int64_t)i * D;
        if (a->prior_o != NULL)
            for (int d = 0; d < D; d++)
                o[d] = w * a->prior_o[row * D + d];
        else
            memset(o, 0, sizeof(float) * (size_t)D);
    }
}

static void attend(const DecodeArgs *a, int b, int g, float *scores, float *kvbuf) {
    const int D = a->head_dim, Hq = a->num_q_heads, G = Hq / a->num_kv_heads;
    int64_t len;
    const int32_t *slots = request_keys(a, b, &len);
    const int64_t offset = ((int64_t)b * Hq + (int64_t)g * G) * D;  /* first query head of group g */
    score_keys(a, a->q + offset, a->qb != NULL ? a->qb + offset : NULL, G, slots, len, 0, len, g, scores, kvbuf);
    softmax_rows(a, b, g * G, G, scores, len, a->out + offset);
    sum_values(a, scores, G, slots, len, 0, len, g, a->out + offset, kvbuf);
}

/* the cache lines of the rows of keys j0 <= j < min(j1, len) of buf (row_bytes each), on their way to L2 (the
 * low-locality hint: scattered rows, as decode tokens' are, read 8-10% faster than asked into L1; rows in
 * order alike; Intel AMX machine, bench/README.md stop 22) */
static inline void prefetch_rows(const void *buf, const int32_t *slots, int64_t j0, int64_t j1, int64_t len,
                                 int64_t row_bytes) {
    for (int64_t j = j0; j < j1 && j < len; j++) {
        const char *row = (const char *)buf + (int64_t)slots[j] * row_bytes;
        for (int64_t c = 0; c < row_bytes; c += 64)
            __builtin_prefetch(row + c, 0, 1);
    }
}

/* Request b's keys lo .. hi - 1 (lo a multiple of VALUE_BLOCK), all its KV heads: each pass walks the keys round by
 * round, and within a round every head, so the pool's rows (all heads of a token, adjacent) are read whole and in
 * order, with later rows prefetched; scores holds Hq rows of hi - lo.  With lse NULL the keys are all of the
 * request's (with its prior, if any) and out receives its rows of the result, equal to attend()'s for each head bit
 * for bit; else out ([Hq, D]) receives these keys' share alone, normalised over them, and lse ([Hq]) its
 * log-sum-exp, for merge_pieces. */
enum { SCORE_ROUND = 8, PREFETCH_KEYS = 16 };
static void attend_rows(const DecodeArgs *a, int b, int64_t lo, int64_t hi, float *scores, float *kvbuf, float *out,
                        float *lse) {
    const int D = a->head_dim, Hq = a->num_q_heads, Hkv = a->num_kv_heads, G = Hq / Hkv;
    const int64_t row_bytes = (int64_t)Hkv * D * (a->kv_bf16 ? 2 : 4);
    int64_t total;
    const int32_t *slots = request_keys(a, b, &total) + lo;
    const int64_t len = hi - lo;
    const float *q = a->q + (int64_t)b * Hq * D;
    const uint16_t *qb = a->qb != NULL ? a->qb + (int64_t)b * Hq * D : NULL;
    /* rows are prefetched PREFETCH_KEYS ahead, a round of keys at a time between rounds of arithmetic: a whole
     * block's rows at once would fill the core's line-fill buffers and stall it until they came */
    prefetch_rows(a->k, slots, 0, PREFETCH_KEYS, len, row_bytes);
    for (int64_t j0 = 0; j0 < len; j0 += SCORE_ROUND) {
        const int64_t j1 = j0 + SCORE_ROUND < len ? j0 + SCORE_ROUND : len;
        prefetch_rows(a->k, slots, j0 + PREFETCH_KEYS, j1 + PREFETCH_KEYS, len, row_bytes);
        for (int g = 0; g < Hkv; g++)
            score_keys(a, q + (int64_t)g * G * D, qb != NULL ? qb + (int64_t)g * G * D : NULL, G, slots, len, j0, j1,
                       g, scores + (int64_t)g * G * len, kvbuf);
    }
    prefetch_rows(a->v, slots, 0, PREFETCH_KEYS, len, row_bytes);   /* on their way while the softmax runs */
    if (lse == NULL) {
        softmax_rows(a, b, 0, Hq, scores, len, out);
    } else {
        for (int h = 0; h < Hq; h++)
            softmax_lse_inplace(scores + (int64_t)h * len, len, 0, 0.f, lse + h);
        memset(out, 0, sizeof(float) * (size_t)Hq * (size_t)D);
    }
    /* value sums taken key by key (G <= 4 rows in registers) do not depend on how the keys are split: rounds of
     * SCORE_ROUND keys then; the other paths convert VALUE_BLOCK keys at a time */
    const int64_t step = value_rows_path(a, G) ? SCORE_ROUND : VALUE_BLOCK;
    for (int64_t j0 = 0; j0 < len; j0 += step) {
        const int64_t j1 = j0 + step < len ? j0 + step : len;
        prefetch_rows(a->v, slots, j0 + PREFETCH_KEYS, j1 + PREFETCH_KEYS, len, row_bytes);
        for (int g = 0; g < Hkv; g++)
            sum_values(a, scores + (int64_t)g * G * len, G, slots, len, j0, j1, g, out + (int64_t)g * G * D, kvbuf);
    }
}

/* A request of SPLIT_FROM_KEYS keys or more is attended in pieces of whole rows, a work item each, then merged by
 * their log-sum-exps: with one or two requests in a step, one item per KV head leaves threads idle (three heads for
 * two threads) and each item reads a slice of every row (a batch of 1, 2,048 keys, 2 cores of a Zen 4: K/V read at
 * 7 GB/s one head per item, 14 in pieces).  How a request is cut depends on its own key count alone, so its result is
 * the same bits in any batch and with any number of threads. */
enum { SPLIT_FROM_KEYS = 512, PIECE_MIN_KEYS = 256, MAX_PIECES = 8 };

static inline int64_t piece_keys(int64_t len) {   /* keys per piece, a multiple of VALUE_BLOCK */
    const int64_t even = ((len + MAX_PIECES - 1) / MAX_PIECES + VALUE_BLOCK - 1) / VALUE_BLOCK * VALUE_BLOCK;
    return even > PIECE_MIN_KEYS ? even : PIECE_MIN_KEYS;
}

static inline int request_pieces(const DecodeArgs *a, int b) {   /* 1: attended whole */
    int64_t len;
    request_keys(a, b, &len);
    return len < SPLIT_FROM_KEYS ? 1 : (int)((len + piece_keys(len) - 1) / piece_keys(len));
}

/* request b's result from its n pieces (o [n, Hq, D], lse [n, Hq]) and its prior, if any, in a fixed order */
static void merge_pieces(const DecodeArgs *a, int b, int n, const float *o, const float *lse) {
    const int D = a->head_dim, Hq = a->num_q_heads;
    for (int h = 0; h < Hq; h++) {
        const int64_t row = (int64_t)b * Hq + h;
        float m = a->prior_lse != NULL ? a->prior_lse[row] : -FLT_MAX;
        for (int i = 0; i < n; i++)
            m = lse[(int64_t)i * Hq + h] > m ? lse[(int64_t)i * Hq + h] : m;
        float sum = a->prior_lse != NULL ? expf(a->prior_lse[row] - m) : 0.f;
        for (int i = 0; i < n; i++)
            sum += expf(lse[(int64_t)i * Hq + h] - m);
        float *dst = a->out + row * D;
        const float prior_w = a->prior_lse != NULL ? expf(a->prior_lse[row] - m) / sum : 0.f;
        for (int d = 0; d < D; d++)
            dst[d] = a->prior_o != NULL ? prior_w * a->prior_o[row * D + d] : 0.f;
        for (int i = 0; i < n; i++) {
            const float w = expf(lse[(int64_t)i * Hq + h] - m) / sum;
            const float *src = o + ((int64_t)i * Hq + h) * D;
            for (int d = 0; d < D; d++)
                dst[d] += w * src[d];
        }
    }
}

/* q's values as bfloat16 bits when every one of them is a bfloat16 value (a bf16 model's q, widened), else
 * NULL (also when the copy cannot be allocated: the float32 loops then run) */
static uint16_t *bf16_copy(const float *q, size_t n) {
#if defined(RADIXLM_WIDE) && defined(__AVX512BF16__)
    uint16_t *qb = malloc(sizeof(uint16_t) * (n ? n : 1));
    if (qb == NULL)
        return NULL;
    for (size_t e = 0; e < n; e++) {
        uint32_t bits;
        memcpy(&bits, q + e, sizeof bits);
        if (bits & 0xFFFFu) {
            free(qb);
            return NULL;
        }
        qb[e] = (uint16_t)(bits >> 16);
    }
    return qb;
#else
    (void)q;
    (void)n;
    return NULL;
#endif
}

/* Returns 0 on success, 1 when a thread could not allocate its buffers.  Threads come from the
 * OpenMP runtime already loaded by torch (same libgomp.so.1), so the kernel shares torch's pool
 * instead of competing with its spinning workers for the cores. */
int radixlm_decode_attention_after(const float *q, const void *k, const void *v, int kv_bf16,
                                   const int32_t *table, int64_t table_stride, const int64_t *rows,
                                   const int64_t *seq_lens, int batch, int num_q_heads, int num_kv_heads,
                                   int head_dim, float scale, float *out, int num_threads, const int64_t *starts,
                                   const float *prior_o, const float *prior_lse) {
    const int G = num_q_heads / num_kv_heads;
    if (num_threads < 1)
        num_threads = 1;
    /* enough requests to keep every thread busy: one item a request (whole rows, in order); else one a KV head */
    const int whole_rows = batch >= 4 * num_threads;
    int64_t max_len = 1;
    for (int b = 0; b < batch; b++)
        max_len = seq_lens[b] > max_len ? seq_lens[b] : max_len;
    uint16_t *qb = kv_bf16 ? bf16_copy(q, (size_t)batch * num_q_heads * head_dim) : NULL;
    const DecodeArgs args = {q, k, v, kv_bf16, table, table_stride, rows, seq_lens, batch, num_q_heads,
                             num_kv_heads, head_dim, scale, out, starts, prior_o, prior_lse, qb};
    int status = 0;
    if (qb != NULL && amx_decode_wanted() && radixlm_amx_decode_fits(head_dim, num_q_heads, num_kv_heads)) {
        const int items = whole_rows ? batch : batch * num_kv_heads;
        if (num_threads > items)
            num_threads = items > 0 ? items : 1;
#pragma omp parallel num_threads(num_threads) reduction(| : status)
        {
#pragma omp for schedule(dynamic, 1)
            for (int item = 0; item < items; item++)
                status |= whole_rows ? radixlm_amx_decode_item(&args, item, 0, num_kv_heads)
                                     : radixlm_amx_decode_item(&args, item / num_kv_heads, item % num_kv_heads,
                                                               item % num_kv_heads + 1);
            radixlm_amx_decode_done();
        }
        free(qb);
        return status;
    }
    /* work items: a piece of a request's keys, a whole request (whole_rows), or one KV head of a request */
    int *item_req = malloc(sizeof(int) * ((size_t)batch * (size_t)(MAX_PIECES + num_kv_heads) + 1));
    int *item_part = malloc(sizeof(int) * ((size_t)batch * (size_t)(MAX_PIECES + num_kv_heads) + 1));
    int *first_piece = malloc(sizeof(int) * ((size_t)batch + 1));   /* request b's first slot in piece_o, or -1 */
    int num_items = 0, num_pieces = 0;
    if (item_req == NULL || item_part == NULL || first_piece == NULL) {
        free(item_req), free(item_part), free(first_piece), free(qb);
        return 1;
    }
    for (int b = 0; b < batch; b++) {
        const int n = request_pieces(&args, b);
        first_piece[b] = n > 1 ? num_pieces : -1;
        num_pieces += n > 1 ? n : 0;
        const int parts = n > 1 ? n : whole_rows ? 1 : num_kv_heads;
        for (int p = 0; p < parts; p++, num_items++)
            item_req[num_items] = b, item_part[num_items] = p;
    }
    float *piece_o = malloc(sizeof(float) * (size_t)num_pieces * (size_t)num_q_heads * (size_t)head_dim + 1);
    float *piece_lse = malloc(sizeof(float) * (size_t)num_pieces * (size_t)num_q_heads + 1);
    status = piece_o == NULL || piece_lse == NULL;
    if (num_threads > num_items)
        num_threads = num_items > 0 ? num_items : 1;
#pragma omp parallel num_threads(num_threads) reduction(| : status) if (!status)
    {
        float *scores = malloc(sizeof(float) * (size_t)num_q_heads * (size_t)max_len);
        /* bf16 KV (or many heads per KV head): convert each key and value block to float32 once */
        float *kvbuf = kv_bf16 || G >= 4 ? malloc(sizeof(float) * VALUE_BLOCK * (size_t)head_dim) : NULL;
        int failed = status || scores == NULL || ((kv_bf16 || G >= 4) && kvbuf == NULL);
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < num_items; item++) {
            const int b = item_req[item], p = item_part[item];
            if (failed) {
                continue;
            } else if (first_piece[b] >= 0) {
                int64_t len;
                request_keys(&args, b, &len);
                const int64_t size = piece_keys(len), lo = p * size, hi = lo + size < len ? lo + size : len;
                const int64_t slot = first_piece[b] + p;
                attend_rows(&args, b, lo, hi, scores, kvbuf, piece_o + slot * num_q_heads * head_dim,
                            piece_lse + slot * num_q_heads);
            } else if (whole_rows) {
                int64_t len;
                request_keys(&args, b, &len);
                attend_rows(&args, b, 0, len, scores, kvbuf, out + (int64_t)b * num_q_heads * head_dim, NULL);
            } else {
                attend(&args, b, p, scores, kvbuf);
            }
        }
        failed |= status;
#pragma omp for schedule(static)
        for (int b = 0; b < batch; b++)
            if (first_piece[b] >= 0)
                merge_pieces(&args, b, request_pieces(&args, b), piece_o + (int64_t)first_piece[b] * num_q_heads *
                             head_dim, piece_lse + (int64_t)first_piece[b] * num_q_heads);
        free(kvbuf);
        free(scores);
        status |= failed;
    }
    free(piece_o);
    free(piece_lse);
    free(item_req);
    free(item_part);
    free(first_piece);
    free(qb);
    return status;
}


int radixlm_decode_attention(const float *q, const void *k, const void *v, int kv_bf16,
                             const int32_t *table, int64_t table_stride, const int64_t *rows,
                             const int64_t *seq_lens, int batch, int num_q_heads, int num_kv_heads,
                             int head_dim, float scale, float *out, int num_threads) {
    return radixlm_decode_attention_after(q, k, v, kv_bf16, table, table_stride, rows, seq_lens, batch, num_q_heads,
                                          num_kv_heads, head_dim, scale, out, num_threads, NULL, NULL, NULL);
}
