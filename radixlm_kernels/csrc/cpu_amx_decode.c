/* Decode attention for bfloat16 KV on the AMX tile unit: one query token per request against its cached keys,
 * for the items cpu_decode_attention.c hands it (a request with all its KV heads, or one KV head of it).
 *
 * Scores as S^T = K Q^T: the rows of a block of 16 keys (read in place where their slots are consecutive, else
 * gathered) are the A operand as they lie in the pool, and the G query heads of a KV head (pairs of dims, one
 * column a head) the B operand, so no key is transposed.  Each key gets a row of 16 floats holding the scores of
 * every query head.  An exact softmax runs down those columns (max first, then exp), the weights rounded to
 * bfloat16 as the AMX extend kernel rounds them; O = P V per KV head, P (heads x 32 keys) from a 16 x 16
 * transpose of weight blocks, the values interleaved as key pairs; O divided by the sum of the rounded weights
 * (and of a prior's weight: a shared prefix attended before, as in cpu_decode_attention.c).
 * Head dim 64 and at most 16 query heads.  A head's result is computed the same way whatever else its item
 * holds, so a request's bits do not depend on the batch it is in. */
#include "attention_rows.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "amx_tiles.h"
#include "scratch.h"

enum { HEAD_DIM = 64, KEYS = 16, PAIR_KEYS = 32 };

/* tile 0: S^T [16 keys x G heads]; 1-2: key rows [16 x 32 dims]; 3-4: the query heads [16 dim pairs x G] */
static void config_scores(int G) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = t == 1 || t == 2 ? 64 : (uint16_t)(4 * G);
    }
    _tile_loadconfig(&cfg);
}

/* tiles 0-3: O [G heads x 16 dims] each; 4: P [G heads x 32 keys]; 5-6: values [16 key pairs x 16 dims] */
static void config_values(int G) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) {
        cfg.rows[t] = t < 5 ? (uint8_t)G : 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

int radixlm_amx_decode_fits(int head_dim, int num_q_heads, int num_kv_heads) {
    return head_dim == HEAD_DIM && num_q_heads <= 16 && num_kv_heads >= 1 && num_q_heads % num_kv_heads == 0 &&
           amx_permitted();
}

static inline void prefetch_heads(const uint16_t *buf, const int32_t *slots, int64_t j0, int64_t j1, int64_t len,
                                  int row_len, int g0, int g1) {
    for (int64_t j = j0; j < j1 && j < len; j++)
        for (int c = g0 * HEAD_DIM; c < g1 * HEAD_DIM; c += 32)
            __builtin_prefetch(buf + (int64_t)slots[j] * row_len + c, 0, 1);
}

/* S[j][h] = q_h . key_j for the heads h of KV heads g0 .. g1 - 1, keys j < len (rows of 16 floats) */
static void score_block_rows(const DecodeArgs *a, const int32_t *slots, int64_t len, int g0, int g1,
                             const uint32_t *qt, uint16_t *kbuf, float *S) {
    const int G = a->num_q_heads / a->num_kv_heads, row_len = a->num_kv_heads * HEAD_DIM;
    const uint16_t *k = a->k;
    config_scores(G);
    prefetch_heads(k, slots, 0, KEYS, len, row_len, g0, g1);
    for (int64_t j0 = 0; j0 < len; j0 += KEYS) {
        prefetch_heads(k, slots, j0 + KEYS, j0 + 2 * KEYS, len, row_len, g0, g1);
        const int n = len - j0 < KEYS ? (int)(len - j0) : KEYS;
        int consecutive = n == KEYS;
        for (int t = 1; t < n && consecutive; t++)
            consecutive = slots[j0 + t] == slots[j0] + t;
        const uint16_t *rows = kbuf;
        if (consecutive) {
            rows = k + (int64_t)slots[j0] * row_len;
        } else {
            for (int t = 0; t < KEYS; t++)
                for (int c = g0 * HEAD_DIM; c < g1 * HEAD_DIM; c += 32)
                    _mm512_storeu_si512(kbuf + t * row_len + c,
                                        t < n ? _mm512_loadu_si512(k + (int64_t)slots[j0 + t] * row_len + c)
                                              : _mm512_setzero_si512());
        }
        for (int g = g0; g < g1; g++) {
            _tile_loadd(1, rows + g * HEAD_DIM, row_len * 2);
            _tile_loadd(2, rows + g * HEAD_DIM + 32, row_len * 2);
            _tile_loadd(3, qt + g * 512, 64);
            _tile_loadd(4, qt + g * 512 + 256, 64);
            _tile_zero(0);
            _tile_dpbf16ps(0, 1, 3);
            _tile_dpbf16ps(0, 2, 4);
            _tile_stored(0, S + j0 * 16 + g * G, 64);
        }
    }
}

/* O [G, 64] (obuf) = P V for KV head g: P rows g * G .. of Pt (lp keys each, zero past len) */
static void sum_value_rows(const DecodeArgs *a, const int32_t *slots, int64_t len, int64_t lp, int g,
                           const uint16_t *Pt, uint16_t *vbuf, float *obuf) {
    const int G = a->num_q_heads / a->num_kv_heads, row_len = a->num_kv_heads * HEAD_DIM;
    const uint16_t *v = a->v;
    __m512i lo_idx, hi_idx;
    {
        uint16_t lo[32], hi[32];
        for (int i = 0; i < 16; i++) {
            lo[2 * i] = (uint16_t)i, lo[2 * i + 1] = (uint16_t)(32 + i);
            hi[2 * i] = (uint16_t)(16 + i), hi[2 * i + 1] = (uint16_t)(48 + i);
        }
        lo_idx = _mm512_loadu_si512(lo);
        hi_idx = _mm512_loadu_si512(hi);
    }
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    prefetch_heads(v, slots, 0, PAIR_KEYS, len, row_len, g, g + 1);
    for (int64_t j0 = 0; j0 < lp; j0 += PAIR_KEYS) {
        prefetch_heads(v, slots, j0 + PAIR_KEYS, j0 + 2 * PAIR_KEYS, len, row_len, g, g + 1);
        for (int p = 0; p < 16; p++) {   /* row p of each dim chunk's operand: keys j0 + 2p and j0 + 2p + 1 */
            const int64_t j = j0 + 2 * p;
            const uint16_t *v0 = j < len ? v + (int64_t)slots[j] * row_len + g * HEAD_DIM : NULL;
            const uint16_t *v1 = j + 1 < len ? v + (int64_t)slots[j + 1] * row_len + g * HEAD_DIM : NULL;
            __m512i r0[2], r1[2];
            for (int c = 0; c < 2; c++) {
                r0[c] = v0 != NULL ? _mm512_loadu_si512(v0 + 32 * c) : _mm512_setzero_si512();
                r1[c] = v1 != NULL ? _mm512_loadu_si512(v1 + 32 * c) : _mm512_setzero_si512();
            }
            for (int c = 0; c < 2; c++) {
                _mm512_storeu_si512(vbuf + (2 * c) * 512 + p * 32, _mm512_permutex2var_epi16(r0[c], lo_idx, r1[c]));
                _mm512_storeu_si512(vbuf + (2 * c + 1) * 512 + p * 32, _mm512_permutex2var_epi16(r0[c], hi_idx, r1[c]));
            }
        }
        _tile_loadd(4, Pt + (int64_t)g * G * lp + j0, lp * 2);
        _tile_loadd(5, vbuf, 64);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(6, vbuf + 512, 64);
        _tile_dpbf16ps(1, 4, 6);
        _tile_loadd(5, vbuf + 1024, 64);
        _tile_dpbf16ps(2, 4, 5);
        _tile_loadd(6, vbuf + 1536, 64);
        _tile_dpbf16ps(3, 4, 6);
    }
    _tile_stored(0, obuf, HEAD_DIM * 4);
    _tile_stored(1, obuf + 16, HEAD_DIM * 4);
    _tile_stored(2, obuf + 32, HEAD_DIM * 4);
    _tile_stored(3, obuf + 48, HEAD_DIM * 4);
}

/* Request b, KV heads g0 .. g1 - 1: its query heads' rows of out.  Returns 0, or 1 when buffers could not be had. */
int radixlm_amx_decode_item(const DecodeArgs *a, int b, int g0, int g1) {
    const int Hq = a->num_q_heads, G = Hq / a->num_kv_heads, row_len = a->num_kv_heads * HEAD_DIM;
    const int64_t start = a->starts != NULL ? a->starts[b] : 0, len = a->seq_lens[b] - start;
    const int64_t lp = (len + PAIR_KEYS - 1) / PAIR_KEYS * PAIR_KEYS;
    const int32_t *slots = a->table + a->rows[b] * a->table_stride + start;
    float *S = scratch_get(0, sizeof(float) * 16 * (size_t)(lp > 0 ? lp : 1));
    uint16_t *Pt = scratch_get(1, sizeof(uint16_t) * 16 * (size_t)(lp > 0 ? lp : 1));
    uint16_t *kbuf = scratch_get(2, sizeof(uint16_t) * KEYS * (size_t)row_len);
    uint16_t *vbuf = scratch_get(3, sizeof(uint16_t) * 4 * 512);
    uint32_t *qt = scratch_get(4, sizeof(uint32_t) * 512 * (size_t)a->num_kv_heads);
    float *obuf = scratch_get(5, sizeof(float) * 16 * HEAD_DIM);
    if (!S || !Pt || !kbuf || !vbuf || !qt || !obuf)
        return 1;
    const uint16_t *qb = a->qb + (int64_t)b * Hq * HEAD_DIM;
    for (int g = g0; g < g1; g++)   /* B operand: row p of chunk c holds dims 32c + 2p, 32c + 2p + 1 of each head */
        for (int c = 0; c < 2; c++)
            for (int p = 0; p < 16; p++)
                for (int n = 0; n < G; n++)
                    memcpy(qt + g * 512 + c * 256 + p * 16 + n, qb + (g * G + n) * HEAD_DIM + 32 * c + 2 * p, 4);
    score_block_rows(a, slots, len, g0, g1, qt, kbuf, S);

    const __mmask16 heads = (__mmask16)(((1u << (g1 * G)) - 1) & ~((1u << (g0 * G)) - 1));
    const float *prior_lse = a->prior_lse != NULL ? a->prior_lse + (int64_t)b * Hq : NULL;
    const __m512 c = _mm512_set1_ps(a->scale * 1.44269504088896341f);   /* exp(scale x) = 2^(c x) */
    __m512 vm = _mm512_set1_ps(-FLT_MAX);
    for (int64_t j = 0; j < len; j++)
        vm = _mm512_mask_max_ps(vm, heads, vm, _mm512_loadu_ps(S + j * 16));
    __m512 mc = _mm512_mul_ps(vm, c);   /* the max of the scores, in base-2 exponent units */
    __m512 prior_c = _mm512_set1_ps(-FLT_MAX);
    if (prior_lse != NULL) {
        prior_c = _mm512_mul_ps(_mm512_maskz_loadu_ps(heads, prior_lse), _mm512_set1_ps(1.44269504088896341f));
        mc = _mm512_max_ps(mc, prior_c);
    }
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < lp; j++) {
        __m512 e = _mm512_setzero_ps();
        if (j < len) {
            const __m512 t = _mm512_min_ps(_mm512_fmsub_ps(_mm512_loadu_ps(S + j * 16), c, mc), _mm512_setzero_ps());
            e = _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(_mm512_maskz_mov_ps(heads, exp2_nonpositive(t))));
        }
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(S + j * 16, e);
    }
    for (int64_t j0 = 0; j0 < lp; j0 += 16) {   /* P: a row of keys per head, bfloat16 (exactly the weights) */
        __m512i r[16];
        for (int t = 0; t < 16; t++)
            r[t] = _mm512_loadu_si512(S + (j0 + t) * 16);
        transpose16x16(r);
        for (int h = g0 * G; h < g1 * G; h++)
            _mm256_storeu_si256((__m256i *)(Pt + h * lp + j0), (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(r[h])));
    }
    float prior_w[16], total[16];
    _mm512_storeu_ps(prior_w, prior_lse != NULL ? _mm512_maskz_mov_ps(heads, exp2_nonpositive(
                                                      _mm512_min_ps(_mm512_sub_ps(prior_c, mc), _mm512_setzero_ps())))
                                                : _mm512_setzero_ps());
    _mm512_storeu_ps(total, _mm512_add_ps(sum, _mm512_loadu_ps(prior_w)));

    config_values(G);
    for (int g = g0; g < g1; g++) {
        if (lp > 0)
            sum_value_rows(a, slots, len, lp, g, Pt, vbuf, obuf);
        else
            memset(obuf, 0, sizeof(float) * G * HEAD_DIM);
        for (int n = 0; n < G; n++) {
            const int h = g * G + n;
            const int64_t row = (int64_t)b * Hq + h;
            const float inv = total[h] > 0.f ? 1.f / total[h] : 0.f;
            float *o = a->out + row * HEAD_DIM;
            for (int d = 0; d < HEAD_DIM; d++) {
                const float prior = a->prior_o != NULL ? prior_w[h] * a->prior_o[row * HEAD_DIM + d] : 0.f;
                o[d] = (prior + obuf[n * HEAD_DIM + d]) * inv;
            }
        }
    }
    return 0;
}

void radixlm_amx_decode_done(void) { _tile_release(); }

#else

int radixlm_amx_decode_fits(int head_dim, int num_q_heads, int num_kv_heads) {
    (void)head_dim, (void)num_q_heads, (void)num_kv_heads;
    return 0;
}

int radixlm_amx_decode_item(const DecodeArgs *a, int b, int g0, int g1) {
    (void)a, (void)b, (void)g0, (void)g1;
    return 1;
}

void radixlm_amx_decode_done(void) {}

#endif
