/* Paged decode attention for CPUs: one query token per request against its cached keys, read in
 * place from the KV pool through the request's row of req_to_token (no gather copy).
 *
 * Layout as in kernels/torch_ref.py: k, v [num_slots, Hkv, D]; table [rows, table_stride] int32;
 * q, out [B, Hq, D] float32; query head h reads KV head h / (Hq / Hkv).
 * Work item: one request, so each slot's record (all KV heads of a token) is read in one piece.
 * Threads: OpenMP; requests dealt round-robin (lengths vary, so neighbours are interleaved).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <float.h>

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
    int thread_id, num_threads;
    int64_t max_len;
    int status;
} DecodeArgs;

static inline float bf16_to_f32(uint16_t x) {
    uint32_t bits = (uint32_t)x << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* row of D values as float32: either a pointer into the pool or a converted copy in buf */
static inline const float *kv_row(const void *base, int bf16, int64_t index, int head_dim, float *buf) {
    if (!bf16)
        return (const float *)base + index * head_dim;
    const uint16_t *src = (const uint16_t *)base + index * head_dim;
    for (int d = 0; d < head_dim; d++)
        buf[d] = bf16_to_f32(src[d]);
    return buf;
}

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f load8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
static inline float hsum8(v8f v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

/* exp(x) for x <= 0 (softmax after subtracting the max): 2^n * e^r with |r| <= ln2/2, degree-6
 * Taylor polynomial (relative error about 1e-7); inputs below -87 flush to about 0. */
static inline v8f exp8_nonpositive(v8f x) {
    const v8f lo = x - x - 87.0f;
    v8i below = x < lo;  /* lanes: -1 where x < lo, else 0 */
    x = (v8f)(((v8i)lo & below) | ((v8i)x & ~below));
    v8f t = x * 1.44269504088896341f;
    v8i n = -__builtin_convertvector(0.5f - t, v8i);  /* round to nearest, t <= 0 */
    v8f nf = __builtin_convertvector(n, v8f);
    v8f r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    v8f p = 1.0f / 720 + r * 0.0f;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    v8i bits = (n + 127) << 23;
    v8f scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static void softmax_inplace(float *s, int64_t len) {
    float m = -FLT_MAX, sum = 0.f;
    for (int64_t j = 0; j < len; j++)
        m = s[j] > m ? s[j] : m;
    int64_t j = 0;
    v8f vsum = {0};
    for (; j + 8 <= len; j += 8) {
        v8f e = exp8_nonpositive(load8(s + j) - m);
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

static inline float dot(const float *a, const float *b, int n) {
    int d = 0;
    v8f acc = {0};
    for (; d + 8 <= n; d += 8)
        acc += load8(a + d) * load8(b + d);
    float s = hsum8(acc);
    for (; d < n; d++)
        s += a[d] * b[d];
    return s;
}

static inline void axpy(float *y, float alpha, const float *x, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8)
        store8(y + d, load8(y + d) + alpha * load8(x + d));
    for (; d < n; d++)
        y[d] += alpha * x[d];
}

static void decode_worker(DecodeArgs *a) {
    const int Hq = a->num_q_heads, Hkv = a->num_kv_heads, G = Hq / Hkv, D = a->head_dim;
    const int row_len = Hkv * D;  /* one slot's record: all KV heads of one token */
    float *scores = malloc(sizeof(float) * (size_t)Hq * (size_t)(a->max_len > 0 ? a->max_len : 1));
    float *row_buf = malloc(sizeof(float) * (size_t)row_len);
    if (!scores || !row_buf) {
        a->status = 1;
        free(scores); free(row_buf);
        return;
    }
    for (int b = a->thread_id; b < a->batch; b += a->num_threads) {
        const int64_t len = a->seq_lens[b];
        const int32_t *slots = a->table + a->rows[b] * a->table_stride;
        const float *qb = a->q + (int64_t)b * Hq * D;  /* [Hq, D] */
        float *ob = a->out + (int64_t)b * Hq * D;      /* [Hq, D] */
        for (int64_t j = 0; j < len; j++) {
            const float *kr = kv_row(a->k, a->kv_bf16, slots[j], row_len, row_buf);  /* [Hkv, D] */
            for (int h = 0; h < Hq; h++)
                scores[(int64_t)h * len + j] = dot(qb + (int64_t)h * D, kr + (h / G) * D, D) * a->scale;
        }
        for (int h = 0; h < Hq; h++)
            softmax_inplace(scores + (int64_t)h * len, len);
        memset(ob, 0, sizeof(float) * (size_t)Hq * D);
        for (int64_t j = 0; j < len; j++) {
            const float *vr = kv_row(a->v, a->kv_bf16, slots[j], row_len, row_buf);  /* [Hkv, D] */
            for (int h = 0; h < Hq; h++)
                axpy(ob + (int64_t)h * D, scores[(int64_t)h * len + j], vr + (h / G) * D, D);
        }
    }
    free(scores); free(row_buf);
}

/* Returns 0 on success, 1 when a thread could not allocate its buffers.  Threads come from the
 * OpenMP runtime already loaded by torch (same libgomp.so.1), so the kernel shares torch's pool
 * instead of competing with its spinning workers for the cores. */
int radixlm_decode_attention(const float *q, const void *k, const void *v, int kv_bf16,
                             const int32_t *table, int64_t table_stride, const int64_t *rows,
                             const int64_t *seq_lens, int batch, int num_q_heads, int num_kv_heads,
                             int head_dim, float scale, float *out, int num_threads) {
    if (num_threads < 1)
        num_threads = 1;
    if (num_threads > batch)
        num_threads = batch > 0 ? batch : 1;
    int64_t max_len = 0;
    for (int b = 0; b < batch; b++)
        max_len = seq_lens[b] > max_len ? seq_lens[b] : max_len;
    int status = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : status)
    {
        DecodeArgs args = {q, k, v, kv_bf16, table, table_stride, rows, seq_lens, batch, num_q_heads,
                           num_kv_heads, head_dim, scale, out, omp_get_thread_num(), omp_get_num_threads(),
                           max_len, 0};
        decode_worker(&args);
        status |= args.status;
    }
    return status;
}
