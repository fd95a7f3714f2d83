/* A linear layer over GGUF block weights as the native decode call (cpu_decode_layers.c) takes it: the input in
 * the model's dtype, quantized once to Q8 blocks and read by every part of the weight (q/k/v, gate/up: separate
 * GGUF tensors, possibly of different formats, stacked along N), the float32 sums plus the bias rounded to the
 * model's dtype.  The values equal quant_linear.QuantWeight.linear's (the op-by-op path) bit for bit: the same
 * activation blocks, the same per-row dot products (cpu_quant_linear.c), the bias added in float32, bfloat16
 * rounded to nearest even as torch's cast does.
 *
 * From dense_from_rows input rows on (radixlm_quant_set_dense_rows) the integer dot products give way to tiles of
 * TILE weight rows.  In the VNNI build these are int8 tiles (below: the same Q8 activation blocks and integer sums
 * per block as the dot products, 16 input rows per vpdpbusd); with them off (radixlm_quant_set_int8_tiles), or in
 * another build, dense tiles: each thread dequantizes TILE weight rows at a time into a buffer of the model's dtype (bfloat16 rounded to
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

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* int8 tiles: TILE weight rows unpacked to signed bytes s [k / 4, TILE, 4] with per-sub-block corr, dsc, off
 * (radixlm_quant_i8_unpack) against 16 input rows at a time laid out by radixlm_quant_i8_pack_x: one vpdpbusd adds
 * 4 products of 16 rows by a broadcast 4 bytes of one weight row, and a 16 x 16 block of float sums stays in
 * registers over all of k, each sub-block's integer sums taken into it by their two scales (and the offset). */
#define RADIXLM_INT8_TILES 1
#include <immintrin.h>
int radixlm_quant_i8_sub(int fmt);
int radixlm_quant_i8_unpack(int fmt, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t j0, int64_t j1,
                            int8_t *s, int lanes, int32_t *corr, float *dsc, float *off);
int radixlm_quant_i8_pack_x(const void *x, int64_t x_stride, int bf16, int rows, int64_t k, uint32_t *xu, float *xd,
                            float *xds, int threads);

static int int8_tiles = 1;   /* 0: the dense tiles take every format (radixlm_quant_set_int8_tiles) */

typedef struct { int8_t *s; int32_t *corr; float *dsc, *off; } I8Tile;   /* one thread's unpacked tile */

/* acc + 4-byte dot products of xv's unsigned bytes with the 4 signed bytes at p broadcast to every lane: one
 * instruction with an embedded broadcast (gcc issues a separate broadcast load for _mm512_set1_epi32 of memory) */
static inline __m512i dpbusd_bcast(__m512i acc, __m512i xv, const int8_t *p) {
#if defined(__GNUC__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(xv), "m"(*(const int32_t *)p));
    return acc;
#else
    int32_t wv;
    memcpy(&wv, p, 4);
    return _mm512_dpbusd_epi32(acc, xv, _mm512_set1_epi32(wv));
#endif
}

/* acc[j] (lane r: x row r of this block) = weight row h + j . x row r over all of k, for j < 8, sub-blocks of `sub`
 * elements: eight rows at a time, so that their integer and float sums all stay in registers */
ALWAYS_INLINE void i8_sums(const I8Tile *t, int h, const uint32_t *xu, const float *xd, const float *xds, int64_t k,
                           const int sub, const int with_off, __m512 acc[8]) {
    const int64_t nsb = k / sub;
    const int gps = sub / 4;   /* groups of 4 bytes per sub-block */
    const int8_t *s = t->s + 4 * h;
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        acc[j] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const int64_t xb = sb * sub / 32;
        __m512i ai[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            ai[j] = _mm512_set1_epi32(t->corr[(h + j) * nsb + sb]);
#pragma GCC unroll 8
        for (int g = 0; g < gps; g++) {
            const __m512i xv = _mm512_loadu_si512(xu + (sb * gps + g) * 16);
            const int8_t *sg = s + (sb * gps + g) * TILE * 4;
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                ai[j] = dpbusd_bcast(ai[j], xv, sg + 4 * j);
        }
        const __m512 dx = _mm512_loadu_ps(xd + xb * 16);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[j]), _mm512_mul_ps(dx, _mm512_set1_ps(t->dsc[(h + j) * nsb + sb])),
                                     acc[j]);
        if (with_off) {
            const __m512 dsx = _mm512_loadu_ps(xds + xb * 16);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(t->off[(h + j) * nsb + sb]), dsx, acc[j]);
        }
    }
}

/* out[m0 + r, c0 + j] (+ bias) for r < mrows, j < nw, rounded as store_out does */
static void i8_block(const LinearArgs *a, const I8Tile *t, const uint32_t *xu, const float *xd, const float *xds,
                     int sub, int with_off, int m0, int mrows, int nw, int64_t c0) {
    float sums[TILE * 16];   /* [j][r] */
    for (int h = 0; h < nw; h += 8) {
        __m512 acc[8];
        if (sub == 16)
            i8_sums(t, h, xu, xd, xds, a->k, 16, 0, acc);
        else if (with_off)
            i8_sums(t, h, xu, xd, xds, a->k, 32, 1, acc);
        else
            i8_sums(t, h, xu, xd, xds, a->k, 32, 0, acc);
        for (int j = 0; j < 8; j++)
            _mm512_storeu_ps(sums + (h + j) * 16, acc[j]);
    }
    const __m512i across = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(16));
    const v16f bias = a->bias != NULL ? loadn16_any(a->bias, a->bf16, c0, nw) : (v16f){0};
    for (int r = 0; r < mrows; r++) {
        const v16f row = (v16f)_mm512_i32gather_ps(_mm512_add_epi32(across, _mm512_set1_epi32(r)), sums, 4);   /* [j] */
        storen16_any(a->out, a->bf16, (int64_t)(m0 + r) * a->out_stride + c0, a->bias != NULL ? row + bias : row, nw);
    }
}
#endif
void radixlm_quant_set_int8_tiles(int on) {
#ifdef RADIXLM_INT8_TILES
    int8_tiles = on;
#else
    (void)on;
#endif
}
/* 1 when the int8 tiles take the formats that have them, 0 when the dense tiles take all (or this build has none) */
int radixlm_quant_int8_tiles(void) {
#ifdef RADIXLM_INT8_TILES
    return int8_tiles;
#else
    return 0;
#endif
}

/* the dense-tile product (see the top): tiles as radixlm_quant_layer_linear numbers them */
static int dense_linear(const QuantLinear *q, const int64_t *first_tile, const int64_t *col, int64_t tiles,
                        const void *x, int64_t x_stride, int rows, int k, const void *bias, void *out,
                        int64_t out_stride, int bf16, int threads) {
    LinearArgs base = {x, NULL, x_stride, 0, rows, k, NULL, NULL, NULL, out_stride, bf16, 0};
    int int8_part[QUANT_MAX_PARTS] = {0}, any_float = 0, any_int8 = 0;
    for (int p = 0; p < q->num_parts; p++) {
#ifdef RADIXLM_INT8_TILES
        int8_part[p] = int8_tiles;
#endif
        any_int8 |= int8_part[p];
        any_float |= !int8_part[p];
    }
    const size_t tile_bytes = any_float ? (size_t)TILE * (size_t)k * (bf16 ? 2 : 4) : 0;
    char *buf = malloc(tile_bytes * (size_t)threads + 1);                   /* [threads, TILE, k] in x's dtype */
    uint32_t *xp = NULL;   /* x in pairs, where the outer-product blocks take the tiles */
    int failed = buf == NULL;
#ifdef RADIXLM_DPBF16
    if (any_float && bf16 && !failed)
        failed = (xp = pair_rows(x, x_stride, rows, k)) == NULL;
#endif
    if (any_float && !failed)
        failed = prepare_x(&base) != 0;
#ifdef RADIXLM_INT8_TILES
    /* x for the int8 tiles, and each thread's unpacked tile: s [k / 4, TILE, 4], corr, dsc, off [TILE, k / 16] */
    const int64_t mblocks = (rows + 15) / 16, nsb_max = k / 16;
    uint32_t *xu = NULL;
    float *xd = NULL, *xds = NULL;
    char *tbuf = NULL;
    const size_t tile_i8 = (size_t)TILE * ((size_t)k + (size_t)nsb_max * 12);
    if (any_int8 && !failed) {
        xu = malloc(sizeof(uint32_t) * (size_t)(mblocks * (k / 4) * 16));
        xd = malloc(sizeof(float) * (size_t)(mblocks * (k / 32) * 16));
        xds = malloc(sizeof(float) * (size_t)(mblocks * (k / 32) * 16));
        tbuf = aligned_alloc(64, (tile_i8 * (size_t)threads + 63) / 64 * 64);
        failed = xu == NULL || xd == NULL || xds == NULL || tbuf == NULL ||
                 radixlm_quant_i8_pack_x(x, x_stride, bf16, rows, k, xu, xd, xds, threads) != 0;
    }
#endif
    const size_t esize = bf16 ? 2 : 4;
    const int64_t todo = failed ? 0 : tiles;   /* a buffer missing: nothing computed, the buffers freed below */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < todo; t++) {
        int64_t lo, hi;
        const int p = tile_rows(q, first_tile, t, &lo, &hi);
        const QuantPart *part = &q->parts[p];
        const int64_t c0 = col[p] + lo;
#ifdef RADIXLM_INT8_TILES
        if (int8_part[p]) {
            const int sub = radixlm_quant_i8_sub(part->fmt);
            const int64_t nsb = k / sub;
            char *mine = tbuf + tile_i8 * (size_t)omp_get_thread_num();
            I8Tile tile = {(int8_t *)mine, (int32_t *)(mine + (size_t)TILE * k), NULL, NULL};
            tile.dsc = (float *)(tile.corr + TILE * nsb);
            tile.off = tile.dsc + TILE * nsb;
            const int nw = (int)(hi - lo);
            if (nw < TILE)   /* rows past the weight's end: no sums */
                memset(tile.s, 0, (size_t)TILE * k);
            radixlm_quant_i8_unpack(part->fmt, part->w, part->row_bytes, k, lo, hi, tile.s, TILE, tile.corr, tile.dsc,
                                    tile.off);
            if (nw < TILE) {
                memset(tile.corr + nw * nsb, 0, sizeof(int32_t) * (size_t)((TILE - nw) * nsb));
                memset(tile.dsc + nw * nsb, 0, sizeof(float) * (size_t)((TILE - nw) * nsb));
                memset(tile.off + nw * nsb, 0, sizeof(float) * (size_t)((TILE - nw) * nsb));
            }
            int with_off = 0;
            for (int64_t i = 0; i < nw * nsb && !with_off; i++)
                with_off = tile.off[i] != 0.0f;
            LinearArgs whole = base;
            whole.bias = bias;
            whole.out = out;
            for (int64_t mb = 0; mb < mblocks; mb++)
                i8_block(&whole, &tile, xu + mb * (k / 4) * 16, xd + mb * (k / 32) * 16, xds + mb * (k / 32) * 16,
                         sub, with_off, (int)(mb * 16), rows - mb * 16 < 16 ? (int)(rows - mb * 16) : 16, nw, c0);
            continue;
        }
#endif
        LinearArgs a = base;
        a.w = buf + tile_bytes * (size_t)omp_get_thread_num();
        radixlm_quant_dequant_rows(part->fmt, part->w, part->row_bytes, k, lo, hi, (void *)a.w, bf16);
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
#ifdef RADIXLM_INT8_TILES
    free(xu);
    free(xd);
    free(xds);
    free(tbuf);
#endif
    return failed;
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
    const LinearArgs dest = {x, NULL, x_stride, 0, rows, k, NULL, bias, out, out_stride, bf16, 0};
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t lo, hi;
        const int p = tile_rows(q, first_tile, t, &lo, &hi);
        const QuantPart *part = &q->parts[p];
        radixlm_quant_tile(dots[p], xq, rows, nb, part->w, part->row_bytes, lo, hi, acc + col[p], n_total);
        for (int m = 0; m < rows; m++)   /* each tile's outputs by its own thread: + bias in float32, rounded once */
            for (int64_t j = col[p] + lo; j < col[p] + hi; j++)
                store_out(&dest, m, j, acc[m * n_total + j]);
    }
    free(xq);
    free(acc);
    return 0;
}
