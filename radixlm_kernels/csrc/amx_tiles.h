/* Pieces of the AMX kernels (cpu_amx_extend.c, cpu_amx_linear.c, cpu_amx_decode.c): the process's permission to
 * use the tile state, the tile configuration the first two use (eight tiles of 16 rows x 64 bytes), 2^t for softmax
 * weights, and a 16 x 16 transpose of 32-bit lanes (a block of bfloat16 pairs into a B operand's layout).  Include
 * only where __AMX_BF16__ and __AVX512BF16__ are defined. */
#ifndef RADIXLM_AMX_TILES_H
#define RADIXLM_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

/* Linux hands the tile state to a process only once asked; 1 when granted. */
static int amx_permitted(void) {
    static int state = -1;
    if (state < 0)
        state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return state;
}

static void load_tile_config(void) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

/* 2^t for t <= 0: 2^round(t) (vscalefps, exact; 0 below the float range) times 2^f, |f| <= 1/2, by its degree-6
 * Taylor polynomial (relative error below 1.2e-7). */
static inline __m512 exp2_nonpositive(__m512 t) {
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.5403530e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* r[i][n] <- r[n][i] for 16 vectors of 16 32-bit lanes: pairs, then quads within 128-bit lanes, then the lanes */
static inline void transpose16x16(__m512i r[16]) {
    __m512i u[16];
    for (int g = 0; g < 4; g++) {
        const __m512i t_lo = _mm512_unpacklo_epi32(r[4 * g], r[4 * g + 1]), t_hi = _mm512_unpackhi_epi32(r[4 * g], r[4 * g + 1]);
        const __m512i s_lo = _mm512_unpacklo_epi32(r[4 * g + 2], r[4 * g + 3]);
        const __m512i s_hi = _mm512_unpackhi_epi32(r[4 * g + 2], r[4 * g + 3]);
        u[4 * g] = _mm512_unpacklo_epi64(t_lo, s_lo);        /* column c of each 128-bit lane, rows 4g..4g+3 */
        u[4 * g + 1] = _mm512_unpackhi_epi64(t_lo, s_lo);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t_hi, s_hi);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t_hi, s_hi);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i lo01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), hi01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
        const __m512i lo23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        const __m512i hi23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(lo01, lo23, 0xDD);
        r[8 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0xDD);
    }
}

#endif
