/* A bfloat16 linear layer for the few rows of a decode step (M <= 64) on the AMX tile unit, streaming a copy of
 * the weight packed once into the tile unit's B-operand layout.
 *
 * y [M, N] = x [M, K] W^T (+ bias), W [N, K]: products of bfloat16 pairs summed in float32 (as oneDNN's AMX GEMM
 * sums them, in another order), the bias added in float32, each output rounded once to bfloat16.
 * Packed layout: per block of 16 outputs and chunk of 32 inputs, 16 rows (input pairs) x 16 outputs x 2 bfloat16
 * (1 KB); a block's chunks consecutive, so each thread streams its share of the weight in order.  A thread's
 * block of outputs keeps the M rows' partial sums in up to four tiles for the whole reduction. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "amx_tiles.h"

enum { MAX_ROWS = 64 };

int radixlm_amx_linear_available(int64_t k) { return k % 32 == 0 && amx_permitted(); }

/* packed [ceil(N/16) * K * 16] bfloat16 from w [N, K] (K % 32 == 0); outputs past N are zero */
void radixlm_amx_linear_pack(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed, int num_threads) {
    const int64_t blocks = (n + 15) / 16, chunks = k / 32;
#pragma omp parallel for num_threads(num_threads > 0 ? num_threads : 1) schedule(static)
    for (int64_t nb = 0; nb < blocks; nb++)
        for (int64_t c = 0; c < chunks; c++) {
            __m512i r[16];
            for (int o = 0; o < 16; o++)
                r[o] = nb * 16 + o < n ? _mm512_loadu_si512(w + (nb * 16 + o) * k + 32 * c) : _mm512_setzero_si512();
            transpose16x16(r);
            uint16_t *dst = packed + (nb * chunks + c) * 512;
            for (int i = 0; i < 16; i++)
                _mm512_storeu_si512(dst + 32 * i, r[i]);
        }
}

/* C tiles 0 .. TILES-1 (16 rows each) += x rows [16 t, 16 t + 16) . W block, over every chunk; x tiles 4-5 and
 * weight tiles 6-7 alternate so a load never waits for the product before it */
#define REDUCE(TILES)                                                                                    \
    for (int64_t c = 0; c < chunks; c += 2) {                                                           \
        _tile_loadd(6, wb + c * 512, 64);                                                               \
        _tile_loadd(4, xa + c * 32, k * 2);               _tile_dpbf16ps(0, 4, 6);                      \
        if (TILES > 1) { _tile_loadd(5, xa + 16 * k + c * 32, k * 2); _tile_dpbf16ps(1, 5, 6); }        \
        if (TILES > 2) { _tile_loadd(4, xa + 32 * k + c * 32, k * 2); _tile_dpbf16ps(2, 4, 6); }        \
        if (TILES > 3) { _tile_loadd(5, xa + 48 * k + c * 32, k * 2); _tile_dpbf16ps(3, 5, 6); }        \
        if (c + 1 < chunks) {                                                                           \
            _tile_loadd(7, wb + (c + 1) * 512, 64);                                                     \
            _tile_loadd(4, xa + (c + 1) * 32, k * 2);               _tile_dpbf16ps(0, 4, 7);            \
            if (TILES > 1) { _tile_loadd(5, xa + 16 * k + (c + 1) * 32, k * 2); _tile_dpbf16ps(1, 5, 7); } \
            if (TILES > 2) { _tile_loadd(4, xa + 32 * k + (c + 1) * 32, k * 2); _tile_dpbf16ps(2, 4, 7); } \
            if (TILES > 3) { _tile_loadd(5, xa + 48 * k + (c + 1) * 32, k * 2); _tile_dpbf16ps(3, 5, 7); } \
        }                                                                                               \
    }

/* Returns 0 on success, 1 when its buffer could not be allocated, 2 where it cannot run (no AMX, M > 64,
 * K % 32 != 0). */
int radixlm_amx_linear(const uint16_t *x, int64_t x_stride, int m, int64_t k, const uint16_t *packed, int64_t n,
                       const uint16_t *bias, uint16_t *out, int64_t out_stride, int num_threads) {
    if (m < 1 || m > MAX_ROWS || !radixlm_amx_linear_available(k))
        return 2;
    const int tiles = (m + 15) / 16;
    const int64_t blocks = (n + 15) / 16, chunks = k / 32;
    uint16_t *xa = aligned_alloc(64, sizeof(uint16_t) * (size_t)(tiles * 16) * (size_t)k);
    if (xa == NULL)
        return 1;
    for (int r = 0; r < tiles * 16; r++) {
        if (r < m)
            memcpy(xa + r * k, x + r * x_stride, sizeof(uint16_t) * (size_t)k);
        else
            memset(xa + r * k, 0, sizeof(uint16_t) * (size_t)k);
    }
#pragma omp parallel num_threads(num_threads > 0 ? num_threads : 1)
    {
        load_tile_config();
        float acc[MAX_ROWS * 16];
#pragma omp for schedule(static)
        for (int64_t nb = 0; nb < blocks; nb++) {
            const uint16_t *wb = packed + nb * chunks * 512;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            switch (tiles) {
            case 1: REDUCE(1); break;
            case 2: REDUCE(2); break;
            case 3: REDUCE(3); break;
            default: REDUCE(4); break;
            }
            _tile_stored(0, acc, 64);
            if (tiles > 1) _tile_stored(1, acc + 256, 64);
            if (tiles > 2) _tile_stored(2, acc + 512, 64);
            if (tiles > 3) _tile_stored(3, acc + 768, 64);
            const int64_t o0 = nb * 16, width = n - o0 < 16 ? n - o0 : 16;
            const __mmask16 keep = (__mmask16)((1u << width) - 1);
            __m512 b = _mm512_setzero_ps();
            if (bias != NULL)
                b = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(keep, bias + o0)), 16));
            for (int r = 0; r < m; r++) {
                const __m256bh y = _mm512_cvtneps_pbh(_mm512_add_ps(_mm512_loadu_ps(acc + r * 16), b));
                _mm256_mask_storeu_epi16(out + r * out_stride + o0, keep, (__m256i)y);
            }
        }
        _tile_release();
    }
    free(xa);
    return 0;
}

#else

int radixlm_amx_linear_available(int64_t k) {
    (void)k;
    return 0;
}

void radixlm_amx_linear_pack(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed, int num_threads) {
    (void)w, (void)n, (void)k, (void)packed, (void)num_threads;
}

int radixlm_amx_linear(const uint16_t *x, int64_t x_stride, int m, int64_t k, const uint16_t *packed, int64_t n,
                       const uint16_t *bias, uint16_t *out, int64_t out_stride, int num_threads) {
    (void)x, (void)x_stride, (void)m, (void)k, (void)packed, (void)n, (void)bias, (void)out, (void)out_stride;
    (void)num_threads;
    return 2;
}

#endif
