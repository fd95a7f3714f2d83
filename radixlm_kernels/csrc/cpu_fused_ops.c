/* Fused elementwise ops of a decoder layer for CPUs, OpenMP over rows (torch's pool).
 * Each replaces several torch ops (and as many passes over memory) with one pass:
 *   rms_norm:      out = x * rsqrt(mean(x^2) + eps) * w
 *   add_rms_norm:  residual += x; out = rms_norm(residual)
 *   rope:          rotate-half rotary embedding, in place, on the first `heads` heads of each row
 *   silu_mul:      out = silu(gate) * up for rows [gate | up]
 * Every tensor of a call is float32 (bf16 == 0) or bfloat16; arithmetic is float32.  In bfloat16
 * the results are rounded where HF's torch code rounds (after each op), so they match it.
 * Rows may be strided (a view into a wider tensor); elements within a row are contiguous.
 * Row functions are compiled once per dtype (the bf16 flag is a constant inside them), on vectors of W lanes:
 * 16 where the CPU has AVX-512, else 8.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "vec8.h"

#ifdef __AVX512F__
#include "vec16.h"
enum { W = 16 };
typedef v16f vw;
#define loadw_any loadn16_any
#define storew_any storen16_any
#define roundw_bf16 round16_bf16
#define expw exp16
#define hsumw hsum16
#else
enum { W = 8 };
typedef v8f vw;
#define loadw_any loadn_any
#define storew_any storen_any
#define roundw_bf16 round8_bf16
#define expw exp8
#define hsumw hsum8
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

typedef struct {
    const void *x;          /* input rows, x_stride elements apart */
    int64_t x_stride;
    void *residual;         /* add_rms_norm: [rows, n], updated in place */
    const void *w;          /* norm weight [n] */
    void *out;              /* [rows, n] */
    int n;                  /* row length (silu_mul: of the output) */
    float eps;
    const int64_t *positions;
    const void *cos_sin;    /* [*, head_dim]: cos then sin halves */
    int heads, head_dim;
} RowArgs;

/* Parallel only when the work pays for waking the other threads. */
static inline int threads_for(int64_t elements, int num_threads) {
    return elements >= 32768 ? num_threads : 1;
}

ALWAYS_INLINE vw rnd(vw v, const int bf16) { return bf16 ? roundw_bf16(v) : v; }

ALWAYS_INLINE float row_inv_rms(const void *x, int64_t start, int n, float eps, const int bf16) {
    vw acc = {0};
    int i = 0;
    for (; i + W <= n; i += W) {
        const vw v = loadw_any(x, bf16, start + i, W);
        acc += v * v;
    }
    if (i < n) {
        const vw v = loadw_any(x, bf16, start + i, n - i);
        acc += v * v;
    }
    return 1.0f / sqrtf(hsumw(acc) / (float)n + eps);
}

/* round(round(x * s) * w): HF normalises in float32, casts to the model dtype, then scales */
ALWAYS_INLINE void scale_chunk(void *out, int64_t o, const void *x, int64_t xi, const void *w, int wi, float s, int m,
                               const int bf16) {
    storew_any(out, bf16, o, rnd(loadw_any(x, bf16, xi, m) * s, bf16) * loadw_any(w, bf16, wi, m), m);
}

ALWAYS_INLINE void scale_row(void *out, int64_t out_start, const void *x, int64_t x_start, const void *w, float s,
                             int n, const int bf16) {
    int i = 0;
    for (; i + W <= n; i += W)
        scale_chunk(out, out_start + i, x, x_start + i, w, i, s, W, bf16);
    if (i < n)
        scale_chunk(out, out_start + i, x, x_start + i, w, i, s, n - i, bf16);
}

ALWAYS_INLINE void rms_norm_row(const RowArgs *a, int64_t r, const int bf16) {
    const void *x = a->x;
    const int n = a->n;
    const int64_t start = r * a->x_stride;
    scale_row(a->out, r * n, x, start, a->w, row_inv_rms(x, start, n, a->eps, bf16), n, bf16);
}

ALWAYS_INLINE void add_chunk(void *res, const void *x, int64_t rs, int64_t xs, int m, const int bf16) {
    storew_any(res, bf16, rs, loadw_any(res, bf16, rs, m) + loadw_any(x, bf16, xs, m), m);
}

ALWAYS_INLINE void add_rms_norm_row(const RowArgs *a, int64_t r, const int bf16) {
    const int n = a->n;
    void *res = a->residual;
    const void *x = a->x;
    const int64_t xs = r * a->x_stride, rs = r * n;
    int i = 0;
    for (; i + W <= n; i += W)
        add_chunk(res, x, rs + i, xs + i, W, bf16);
    if (i < n)
        add_chunk(res, x, rs + i, xs + i, n - i, bf16);
    scale_row(a->out, rs, res, rs, a->w, row_inv_rms(res, rs, n, a->eps, bf16), n, bf16);
}

ALWAYS_INLINE void rope_pair(void *x, int64_t x1, int64_t x2, const void *cs, int64_t c0, int64_t s0, int m,
                             const int bf16) {
    const vw a = loadw_any(x, bf16, x1, m), b = loadw_any(x, bf16, x2, m);
    const vw c = loadw_any(cs, bf16, c0, m), s = loadw_any(cs, bf16, s0, m);
    storew_any(x, bf16, x1, rnd(a * c, bf16) - rnd(b * s, bf16), m);
    storew_any(x, bf16, x2, rnd(b * c, bf16) + rnd(a * s, bf16), m);
}

ALWAYS_INLINE void rope_row(const RowArgs *a, int64_t r, const int bf16) {
    void *x = (void *)a->x;
    const void *cs = a->cos_sin;
    const int D = a->head_dim, half = D / 2, heads = a->heads;
    const int64_t c0 = a->positions[r] * D, row = r * a->x_stride;
    for (int h = 0; h < heads; h++) {
        const int64_t x1 = row + (int64_t)h * D;
        int i = 0;
        for (; i + W <= half; i += W)
            rope_pair(x, x1 + i, x1 + half + i, cs, c0 + i, c0 + half + i, W, bf16);
        if (i < half)
            rope_pair(x, x1 + i, x1 + half + i, cs, c0 + i, c0 + half + i, half - i, bf16);
    }
}

ALWAYS_INLINE void silu_mul_chunk(const void *gu, void *out, int64_t g, int64_t u, int64_t o, int m,
                                  const int bf16) {
    const vw gv = loadw_any(gu, bf16, g, m);
    storew_any(out, bf16, o, rnd(gv / (1.0f + expw(-gv)), bf16) * loadw_any(gu, bf16, u, m), m);
}

ALWAYS_INLINE void silu_mul_row(const RowArgs *a, int64_t r, const int bf16) {
    const int n = a->n;
    const void *gu = a->x;
    void *out = a->out;
    const int64_t g = r * a->x_stride, o = r * n;
    int i = 0;
    for (; i + W <= n; i += W)
        silu_mul_chunk(gu, out, g + i, g + n + i, o + i, W, bf16);
    if (i < n)
        silu_mul_chunk(gu, out, g + i, g + n + i, o + i, n - i, bf16);
}

#define ROW_KERNEL(name)                                                                     \
    static void name##_f32(const RowArgs *a, int64_t r) { name##_row(a, r, 0); }             \
    static void name##_bf16(const RowArgs *a, int64_t r) { name##_row(a, r, 1); }            \
    static void name##_rows(const RowArgs *a, int64_t rows, int64_t work, int bf16, int nt) { \
        _Pragma("omp parallel for schedule(static) num_threads(threads_for(work, nt))")      \
        for (int64_t r = 0; r < rows; r++) {                                                 \
            if (bf16)                                                                        \
                name##_bf16(a, r);                                                           \
            else                                                                             \
                name##_f32(a, r);                                                            \
        }                                                                                    \
    }

ROW_KERNEL(rms_norm)
ROW_KERNEL(add_rms_norm)
ROW_KERNEL(rope)
ROW_KERNEL(silu_mul)

void radixlm_rms_norm(const void *x, int64_t x_stride, const void *w, void *out, int64_t rows, int n, float eps,
                      int bf16, int num_threads) {
    const RowArgs a = {.x = x, .x_stride = x_stride, .w = w, .out = out, .n = n, .eps = eps};
    rms_norm_rows(&a, rows, rows * n, bf16, num_threads);
}

void radixlm_add_rms_norm(const void *x, int64_t x_stride, void *residual, const void *w, void *out, int64_t rows,
                          int n, float eps, int bf16, int num_threads) {
    const RowArgs a = {.x = x, .x_stride = x_stride, .residual = residual, .w = w, .out = out, .n = n, .eps = eps};
    add_rms_norm_rows(&a, rows, rows * n, bf16, num_threads);
}

void radixlm_rope(void *x, int64_t x_stride, int64_t rows, int heads, int head_dim, const int64_t *positions,
                  const void *cos_sin, int bf16, int num_threads) {
    const RowArgs a = {.x = x, .x_stride = x_stride, .positions = positions, .cos_sin = cos_sin, .heads = heads,
                       .head_dim = head_dim};
    rope_rows(&a, rows, rows * heads * head_dim, bf16, num_threads);
}

void radixlm_silu_mul(const void *gate_up, int64_t gu_stride, void *out, int64_t rows, int n, int bf16,
                      int num_threads) {
    const RowArgs a = {.x = gate_up, .x_stride = gu_stride, .out = out, .n = n};
    silu_mul_rows(&a, rows, rows * n, bf16, num_threads);
}
