/* A linear layer over GGUF block weights as the native decode call (cpu_decode_layers.c) takes it: the input in
 * the model's dtype, quantized once to Q8 blocks and read by every part of the weight (q/k/v, gate/up: separate
 * GGUF tensors, possibly of different formats, stacked along N), the float32 sums plus the bias rounded to the
 * model's dtype.  The values equal quant_linear.QuantWeight.linear's (the op-by-op path) bit for bit: the same
 * activation blocks, the same per-row dot products (cpu_quant_linear.c), the bias added in float32, bfloat16
 * rounded to nearest even as torch's cast does.
 *
 * From dense_from_rows input rows on (radixlm_quant_set_dense_rows) the integer dot products give way to dense
 * tiles: each thread dequantizes TILE weight rows at a time into a buffer of the model's dtype (bfloat16 rounded to
 * nearest even) and multiplies them by cpu_linear_rows.c's blocks (linear_blocks.h), or, for bfloat16 where the CPU
 * has AVX512-BF16, by outer products of 16 x rows at a time (pair_block), so the unpacking is paid once for all rows
 * and the products run at the dense kernels' rate; x is then not quantized.  Below it, every weight
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

#ifdef RADIXLM_DPBF16
/* bfloat16 tiles by outer products: x is laid out once as blocks of 16 rows, each [k / 2][16] pairs of elements
 * (one 32-bit lane a row), so that one pair dot product multiplies 16 x rows by a broadcast pair of one weight row,
 * and a 16 x 16 block of outputs stays in 16 registers over all of k with no horizontal sums (the row blocks of
 * linear_blocks.h reduce 16 accumulators every 18 products at SmolLM2's k = 576, a fifth of their time). */
enum { PAIR_ROWS = 16 };

/* x [rows, k] bfloat16 (k even) -> [ceil(rows / 16), k / 2, 16] pairs, rows past `rows` zero; NULL when it cannot be
 * allocated */
static uint32_t *pair_rows(const uint16_t *x, int64_t x_stride, int rows, int64_t k) {
    const int64_t kh = k / 2, blocks = (rows + PAIR_ROWS - 1) / PAIR_ROWS;
    uint32_t *xp = aligned_alloc(64, (size_t)(blocks * kh * PAIR_ROWS * 4));
    if (xp == NULL)
        return NULL;
    for (int64_t mb = 0; mb < blocks; mb++)
        for (int r = 0; r < PAIR_ROWS; r++) {
            const int64_t m = mb * PAIR_ROWS + r;
            uint32_t *dst = xp + mb * kh * PAIR_ROWS + r;
            if (m < rows)
                for (int64_t p = 0; p < kh; p++)
                    memcpy(dst + p * PAIR_ROWS, x + m * x_stride + 2 * p, 4);
            else
                for (int64_t p = 0; p < kh; p++)
                    dst[p * PAIR_ROWS] = 0;
        }
    return xp;
}

/* out[m0 + r, c0 + j] (+ bias) for r < mrows, j < nw (both <= 16): x block xb [k / 2, 16] against weight rows w
 * [nw, k] bfloat16; the sums rounded to bfloat16 once, as store_out does */
static void pair_block(const LinearArgs *a, const uint32_t *xb, int m0, int mrows, const uint16_t *w, int nw,
                       int64_t c0) {
    const int64_t k = a->k, kh = k / 2;
    const uint32_t *wr[PAIR_ROWS];
    for (int j = 0; j < PAIR_ROWS; j++)
        wr[j] = (const uint32_t *)(w + (j < nw ? j : 0) * k);   /* past nw: row 0 again, its sums dropped */
    __m512 acc[PAIR_ROWS];
    for (int j = 0; j < PAIR_ROWS; j++)
        acc[j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kh; p++) {
        const __m512bh xv = (__m512bh)_mm512_load_si512(xb + p * PAIR_ROWS);
        for (int j = 0; j < PAIR_ROWS; j++)
            acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)_mm512_set1_epi32((int)wr[j][p]), xv);
    }
    float sums[PAIR_ROWS * PAIR_ROWS];   /* [j][r] */
    for (int j = 0; j < PAIR_ROWS; j++)
        _mm512_storeu_ps(sums + j * PAIR_ROWS, acc[j]);
    const __m512i across = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(PAIR_ROWS));
    const v16f bias = a->bias != NULL ? loadn16_any(a->bias, 1, c0, nw) : (v16f){0};
    for (int r = 0; r < mrows; r++) {
        const v16f row = (v16f)_mm512_i32gather_ps(_mm512_add_epi32(across, _mm512_set1_epi32(r)), sums, 4);   /* [j] */
        storen16_any(a->out, 1, (int64_t)(m0 + r) * a->out_stride + c0, a->bias != NULL ? row + bias : row,
                     nw);   /* the bias added and the sum rounded as store_out does */
    }
}
#endif

/* the dense-tile product (see the top): tiles as radixlm_quant_layer_linear numbers them */
static int dense_linear(const QuantLinear *q, const int64_t *first_tile, const int64_t *col, int64_t tiles,
                        const void *x, int64_t x_stride, int rows, int k, const void *bias, void *out,
                        int64_t out_stride, int bf16, int threads) {
    LinearArgs base = {x, NULL, x_stride, 0, rows, k, NULL, NULL, NULL, out_stride, bf16, 0};
    const size_t tile_bytes = (size_t)TILE * (size_t)k * (bf16 ? 2 : 4);
    char *buf = malloc(tile_bytes * (size_t)threads + 1);                   /* [threads, TILE, k] in x's dtype */
    uint32_t *xp = NULL;   /* x in pairs, where the outer-product blocks take the tiles */
#ifdef RADIXLM_DPBF16
    if (bf16 && buf != NULL && (xp = pair_rows(x, x_stride, rows, k)) == NULL) {
        free(buf);
        return 1;
    }
#endif
    if (buf == NULL || prepare_x(&base) != 0) {
        free(buf);
        free(xp);
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
#ifdef RADIXLM_DPBF16
        if (xp != NULL) {
            LinearArgs whole = base;
            whole.bias = bias;
            whole.out = out;
            for (int m0 = 0; m0 < rows; m0 += PAIR_ROWS)
                pair_block(&whole, xp + (int64_t)m0 / 2 * k, m0, rows - m0 < PAIR_ROWS ? rows - m0 : PAIR_ROWS,
                           (const uint16_t *)a.w, (int)(hi - lo), c0);
            continue;
        }
#endif
        a.bias = bias != NULL ? (const char *)bias + c0 * esize : NULL;
        a.out = (char *)out + c0 * esize;
        outputs(&a, 0, hi - lo);
    }
    free((void *)base.xf);
    free(buf);
    free(xp);
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
