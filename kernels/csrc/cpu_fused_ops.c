/* Fused elementwise ops of a decoder layer for CPUs, float32, OpenMP over rows (torch's pool).
 * Each replaces several torch ops (and as many passes over memory) with one pass:
 *   rms_norm:      out = x * rsqrt(mean(x^2) + eps) * w
 *   add_rms_norm:  residual += x; out = rms_norm(residual)
 *   rope:          rotate-half rotary embedding, in place, on the first `heads` heads of each row
 *   silu_mul:      out = silu(gate) * up for rows [gate | up]
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

static float row_inv_rms(const float *x, int n, float eps) {
    v8f acc = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f v = load8(x + i);
        acc += v * v;
    }
    float ss = hsum8(acc);
    for (; i < n; i++)
        ss += x[i] * x[i];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

static void scale_row(float *out, const float *x, const float *w, float s, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        store8(out + i, load8(x + i) * s * load8(w + i));
    for (; i < n; i++)
        out[i] = x[i] * s * w[i];
}

void radixlm_rms_norm(const float *x, int64_t x_stride, const float *w, float *out, int64_t rows, int n,
                      float eps, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * n, num_threads))
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * x_stride;
        scale_row(out + r * n, xr, w, row_inv_rms(xr, n, eps), n);
    }
}

void radixlm_add_rms_norm(const float *x, int64_t x_stride, float *residual, const float *w, float *out,
                          int64_t rows, int n, float eps, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * n, num_threads))
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * x_stride;
        float *res = residual + r * n;
        int i = 0;
        for (; i + 8 <= n; i += 8)
            store8(res + i, load8(res + i) + load8(xr + i));
        for (; i < n; i++)
            res[i] += xr[i];
        scale_row(out + r * n, res, w, row_inv_rms(res, n, eps), n);
    }
}

/* x: rows of `heads` heads of D values (row stride x_stride); cos_sin: [*, D], cos then sin halves. */
void radixlm_rope(float *x, int64_t x_stride, int64_t rows, int heads, int head_dim, const int64_t *positions,
                  const float *cos_sin, int num_threads) {
    const int half = head_dim / 2;
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * heads * head_dim, num_threads))
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cos_sin + positions[r] * head_dim, *s = c + half;
        for (int h = 0; h < heads; h++) {
            float *x1 = x + r * x_stride + (int64_t)h * head_dim, *x2 = x1 + half;
            int i = 0;
            for (; i + 8 <= half; i += 8) {
                const v8f a = load8(x1 + i), b = load8(x2 + i), cv = load8(c + i), sv = load8(s + i);
                store8(x1 + i, a * cv - b * sv);
                store8(x2 + i, b * cv + a * sv);
            }
            for (; i < half; i++) {
                const float a = x1[i], b = x2[i];
                x1[i] = a * c[i] - b * s[i];
                x2[i] = b * c[i] + a * s[i];
            }
        }
    }
}

/* gate_up: rows of [gate (n) | up (n)] with row stride gu_stride; out: [rows, n] */
void radixlm_silu_mul(const float *gate_up, int64_t gu_stride, float *out, int64_t rows, int n, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * n, num_threads))
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gate_up + r * gu_stride, *u = g + n;
        float *o = out + r * n;
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            const v8f gv = load8(g + i);
            store8(o + i, gv / (1.0f + exp8(-gv)) * load8(u + i));
        }
        for (; i < n; i++)
            o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}
