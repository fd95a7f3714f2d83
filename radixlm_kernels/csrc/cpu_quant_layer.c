/* A linear layer over GGUF block weights as the native decode call (cpu_decode_layers.c) takes it: the input in
 * the model's dtype, quantized once to Q8 blocks and read by every part of the weight (q/k/v, gate/up: separate
 * GGUF tensors, possibly of different formats, stacked along N), the float32 sums plus the bias rounded to the
 * model's dtype.  The values equal quant_linear.QuantWeight.linear's (the op-by-op path) bit for bit: the same
 * activation blocks, the same per-row dot products (cpu_quant_linear.c), the bias added in float32, bfloat16
 * rounded to nearest even as torch's cast does.
 *
 * From dense_from_rows input rows on (radixlm_quant_set_dense_rows) the integer dot products give way to dense
 * tiles: each thread dequantizes TILE weight rows at a time into a buffer of the model's dtype (bfloat16 rounded to
 * nearest even) and multiplies them by cpu_linear_rows.c's blocks (linear_blocks.h), so the unpacking is paid once
 * for all rows and the products run at the dense kernels' rate; x is then not quantized.  Below it, every weight
 * block meets the rows' Q8 blocks (cpu_quant_linear.c), which reads the fewest bytes a row.
 *
 * Built into each ISA's quantized library (radixlm_kernels/cpu_quant.py); the decode call reaches it through
 * the function pointer LayerWeights.quant_linear.
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "linear_blocks.h"

#define QUANT_MAX_PARTS 3
#define TILE 16   /* weight rows per task, as radixlm_quant_linear */

typedef struct {
    int32_t fmt, pad;           /* cpu_quant.FORMATS code */
    const uint8_t *w;           /* [n, row_bytes] GGUF blocks */
    int64_t n, row_bytes;
} QuantPart;

typedef struct {
    int32_t num_parts, pad;
    QuantPart parts[QUANT_MAX_PARTS];
} QuantLinear;

int64_t radixlm_quant_act_block_bytes(void);
void radixlm_quantize_rows(const void *x, int64_t x_stride, int bf16, int m, int64_t k, void *out, int threads);
const void *radixlm_quant_dots(int fmt);
void radixlm_quant_tile(const void *dots, const void *xq, int m, int64_t nb, const uint8_t *w, int64_t row_bytes,
                        int64_t t, int64_t end, float *out, int64_t out_stride);

int radixlm_quant_dequant_rows(int fmt, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t j0, int64_t j1,
                               void *out, int bf16);

/* input rows from which a product takes dense tiles; 0 never does (cpu_quant.set_dense_rows) */
static int dense_from_rows = 8;
void radixlm_quant_set_dense_rows(int rows) { dense_from_rows = rows; }
int radixlm_quant_dense_rows(void) { return dense_from_rows; }

/* tile t of the weight (tiles numbered across its parts, first_tile[p] the first of part p): its part, and its
 * rows lo .. hi - 1 of that part */
static inline int tile_rows(const QuantLinear *q, const int64_t *first_tile, int64_t t, int64_t *lo, int64_t *hi) {
    int p = 0;
    while (t >= first_tile[p + 1])
        p++;
    *lo = (t - first_tile[p]) * TILE;
    *hi = *lo + TILE < q->parts[p].n ? *lo + TILE : q->parts[p].n;
    return p;
}

/* the dense-tile product (see the top): tiles as radixlm_quant_layer_linear numbers them */
static int dense_linear(const QuantLinear *q, const int64_t *first_tile, const int64_t *col, int64_t tiles,
                        const void *x, int64_t x_stride, int rows, int k, const void *bias, void *out,
                        int64_t out_stride, int bf16, int threads) {
    LinearArgs base = {x, NULL, x_stride, 0, rows, k, NULL, NULL, NULL, out_stride, bf16, 0};
    const size_t tile_bytes = (size_t)TILE * (size_t)k * (bf16 ? 2 : 4);
    char *buf = malloc(tile_bytes * (size_t)threads + 1);                   /* [threads, TILE, k] in x's dtype */
    if (buf == NULL || prepare_x(&base) != 0) {
        free(buf);
        return 1;
    }
    const size_t esize = bf16 ? 2 : 4;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t lo, hi;
        const int p = tile_rows(q, first_tile, t, &lo, &hi);
        const QuantPart *part = &q->parts[p];
        LinearArgs a = base;
        a.w = buf + tile_bytes * (size_t)omp_get_thread_num();
        radixlm_quant_dequant_rows(part->fmt, part->w, part->row_bytes, k, lo, hi, (void *)a.w, bf16);
        const int64_t c0 = col[p] + lo;
        a.bias = bias != NULL ? (const char *)bias + c0 * esize : NULL;
        a.out = (char *)out + c0 * esize;
        outputs(&a, 0, hi - lo);
    }
    free((void *)base.xf);
    free(buf);
    return 0;
}

/* x [rows, k] (rows x_stride apart) @ weight^T (+ bias [N]) -> out [rows, N] (rows out_stride apart), all in the
 * model's dtype (float32, or bfloat16 when bf16 != 0).  Threads as cpu_linear_rows.c: num_threads from N * K of
 * 65536 on.  Returns 0, 1 when its buffers could not be allocated, 2 for a format without a kernel. */
int radixlm_quant_layer_linear(const void *weight, const void *x, int64_t x_stride, int rows, int k, const void *bias,
                               void *out, int64_t out_stride, int bf16, int num_threads) {
    const QuantLinear *q = (const QuantLinear *)weight;
    const int64_t nb = k / 32;
    int64_t n_total = 0, tiles = 0, first_tile[QUANT_MAX_PARTS + 1], col[QUANT_MAX_PARTS];
    const void *dots[QUANT_MAX_PARTS];
    for (int p = 0; p < q->num_parts; p++) {
        dots[p] = radixlm_quant_dots(q->parts[p].fmt);
        if (dots[p] == NULL)
            return 2;
        first_tile[p] = tiles;
        col[p] = n_total;
        tiles += (q->parts[p].n + TILE - 1) / TILE;
        n_total += q->parts[p].n;
    }
    first_tile[q->num_parts] = tiles;
    const int threads = n_total * k >= 65536 && num_threads > 1 ? num_threads : 1;
    if (dense_from_rows > 0 && rows >= dense_from_rows)
        return dense_linear(q, first_tile, col, tiles, x, x_stride, rows, k, bias, out, out_stride, bf16, threads);
    void *xq = malloc((size_t)(rows * nb * radixlm_quant_act_block_bytes()) + 1);   /* [rows, nb] Q8 blocks */
    float *acc = malloc(sizeof(float) * (size_t)(rows * n_total) + 1);              /* [rows, N] */
    if (xq == NULL || acc == NULL) {
        free(xq);
        free(acc);
        return 1;
    }
    radixlm_quantize_rows(x, x_stride, bf16, rows, k, xq, 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t lo, hi;
        const int p = tile_rows(q, first_tile, t, &lo, &hi);
        const QuantPart *part = &q->parts[p];
        radixlm_quant_tile(dots[p], xq, rows, nb, part->w, part->row_bytes, lo, hi, acc + col[p], n_total);
    }
    const LinearArgs dest = {x, NULL, x_stride, 0, rows, k, NULL, bias, out, out_stride, bf16, 0};
    for (int m = 0; m < rows; m++)
        for (int64_t j = 0; j < n_total; j++)
            store_out(&dest, m, j, acc[m * n_total + j]);   /* + bias in float32, rounded once */
    free(xq);
    free(acc);
    return 0;
}
