/* Fused elementwise ops of a decoder layer for CPUs, OpenMP over rows (torch's pool).
 * Each replaces several torch ops (and as many passes over memory) with one pass:
 *   rms_norm:      out = x * rsqrt(mean(x^2) + eps) * w
 *   add_rms_norm:  residual += x; out = rms_norm(residual)
 *   rope:          rotate-half rotary embedding, in place, on the first `heads` heads of each row
 *   silu_mul:      out = silu(gate) * up for rows [gate | up]
 * Every tensor of a call is float32 (bf16 == 0) or bfloat16; arithmetic is float32.  In bfloat16
 * the results are rounded where HF's torch code rounds (after each op), so they match it.
 * Rows may be strided (a view into a wider tensor); elements within a row are contiguous.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "vec8.h"

/* Parallel only when the work pays for waking the other threads. */
static inline int threads_for(int64_t elements, int num_threads) {
    return elements >= 32768 ? num_threads : 1;
}

static inline v8f rnd(v8f v, int bf16) { return bf16 ? round8_bf16(v) : v; }
static inline int lanes(int n, int i) { return n - i < 8 ? n - i : 8; }

static float row_inv_rms(const void *x, int bf16, int64_t start, int n, float eps) {
    v8f acc = {0};
    for (int i = 0; i < n; i += 8) {
        const v8f v = loadn_any(x, bf16, start + i, lanes(n, i));
        acc += v * v;
    }
    return 1.0f / sqrtf(hsum8(acc) / (float)n + eps);
}

/* out[r] = round(round(x * s) * w): HF normalises in float32, casts to the model dtype, then scales */
static void scale_row(void *out, int64_t out_start, const void *x, int64_t x_start, const void *w, float s, int n,
                      int bf16) {
    for (int i = 0; i < n; i += 8) {
        const int m = lanes(n, i);
        const v8f y = rnd(loadn_any(x, bf16, x_start + i, m) * s, bf16) * loadn_any(w, bf16, i, m);
        storen_any(out, bf16, out_start + i, y, m);
    }
}

void radixlm_rms_norm(const void *x, int64_t x_stride, const void *w, void *out, int64_t rows, int n, float eps,
                      int bf16, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * n, num_threads))
    for (int64_t r = 0; r < rows; r++)
        scale_row(out, r * n, x, r * x_stride, w, row_inv_rms(x, bf16, r * x_stride, n, eps), n, bf16);
}

void radixlm_add_rms_norm(const void *x, int64_t x_stride, void *residual, const void *w, void *out, int64_t rows,
                          int n, float eps, int bf16, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * n, num_threads))
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < n; i += 8) {
            const int m = lanes(n, i);
            const v8f sum = loadn_any(residual, bf16, r * n + i, m) + loadn_any(x, bf16, r * x_stride + i, m);
            storen_any(residual, bf16, r * n + i, sum, m);
        }
        scale_row(out, r * n, residual, r * n, w, row_inv_rms(residual, bf16, r * n, n, eps), n, bf16);
    }
}

/* x: rows of `heads` heads of D values (row stride x_stride); cos_sin: [*, D], cos then sin halves. */
void radixlm_rope(void *x, int64_t x_stride, int64_t rows, int heads, int head_dim, const int64_t *positions,
                  const void *cos_sin, int bf16, int num_threads) {
    const int half = head_dim / 2;
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * heads * head_dim, num_threads))
    for (int64_t r = 0; r < rows; r++) {
        const int64_t c0 = positions[r] * head_dim, s0 = c0 + half;
        for (int h = 0; h < heads; h++) {
            const int64_t x1 = r * x_stride + (int64_t)h * head_dim, x2 = x1 + half;
            for (int i = 0; i < half; i += 8) {
                const int m = lanes(half, i);
                const v8f a = loadn_any(x, bf16, x1 + i, m), b = loadn_any(x, bf16, x2 + i, m);
                const v8f c = loadn_any(cos_sin, bf16, c0 + i, m), s = loadn_any(cos_sin, bf16, s0 + i, m);
                storen_any(x, bf16, x1 + i, rnd(a * c, bf16) - rnd(b * s, bf16), m);
                storen_any(x, bf16, x2 + i, rnd(b * c, bf16) + rnd(a * s, bf16), m);
            }
        }
    }
}

/* gate_up: rows of [gate (n) | up (n)] with row stride gu_stride; out: [rows, n] */
void radixlm_silu_mul(const void *gate_up, int64_t gu_stride, void *out, int64_t rows, int n, int bf16,
                      int num_threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * n, num_threads))
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < n; i += 8) {
            const int m = lanes(n, i);
            const v8f g = loadn_any(gate_up, bf16, r * gu_stride + i, m);
            const v8f u = loadn_any(gate_up, bf16, r * gu_stride + n + i, m);
            storen_any(out, bf16, r * n + i, rnd(g / (1.0f + exp8(-g)), bf16) * u, m);
        }
}
