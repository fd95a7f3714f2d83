/* A linear layer over GGUF block weights as the native decode call (cpu_decode_layers.c) takes it: the input in
 * the model's dtype, quantized once to Q8 blocks and read by every part of the weight (q/k/v, gate/up: separate
 * GGUF tensors, possibly of different formats, stacked along N), the float32 sums plus the bias rounded to the
 * model's dtype.  The values equal quant_linear.QuantWeight.linear's (the op-by-op path) bit for bit: the same
 * activation blocks, the same per-row dot products (cpu_quant_linear.c), the bias added in float32, bfloat16
 * rounded to nearest even as torch's cast does.
 *
 * Built into each ISA's quantized library (radixlm_kernels/cpu_quant.py); the decode call reaches it through
 * the function pointer LayerWeights.quant_linear.
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static inline void store_any(void *out, int bf16, int64_t i, float s) {
    if (!bf16) {
        ((float *)out)[i] = s;
        return;
    }
    uint32_t bits;
    memcpy(&bits, &s, 4);
    bits += 0x7fffu + ((bits >> 16) & 1u);   /* round to nearest even (finite values) */
    ((uint16_t *)out)[i] = (uint16_t)(bits >> 16);
}

static inline float load_any(const void *x, int bf16, int64_t i) {
    if (!bf16)
        return ((const float *)x)[i];
    const uint32_t bits = (uint32_t)((const uint16_t *)x)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
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
    void *xq = malloc((size_t)(rows * nb * radixlm_quant_act_block_bytes()) + 1);   /* [rows, nb] Q8 blocks */
    float *acc = malloc(sizeof(float) * (size_t)(rows * n_total) + 1);              /* [rows, N] */
    if (xq == NULL || acc == NULL) {
        free(xq);
        free(acc);
        return 1;
    }
    radixlm_quantize_rows(x, x_stride, bf16, rows, k, xq, 1);
    const int threads = n_total * k >= 65536 && num_threads > 1 ? num_threads : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int p = 0;
        while (t >= first_tile[p + 1])
            p++;
        const QuantPart *part = &q->parts[p];
        const int64_t lo = (t - first_tile[p]) * TILE, hi = lo + TILE < part->n ? lo + TILE : part->n;
        radixlm_quant_tile(dots[p], xq, rows, nb, part->w, part->row_bytes, lo, hi, acc + col[p], n_total);
    }
    for (int m = 0; m < rows; m++)
        for (int64_t j = 0; j < n_total; j++)
            store_any(out, bf16, m * out_stride + j,
                      acc[m * n_total + j] + (bias != NULL ? load_any(bias, bf16, j) : 0.0f));
    free(xq);
    free(acc);
    return 0;
}
