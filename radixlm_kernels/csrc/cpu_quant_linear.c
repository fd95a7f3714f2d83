/* Linear layers over GGUF weights kept in their block formats (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K), as llama.cpp
 * multiplies them: the activations are quantized per block of 32 to int8 with one float scale (Q8 blocks, which
 * also carry the sums of their two halves), and every weight block meets its activation block in an integer dot
 * product; the block's float scales are applied to that one integer.
 *
 *   out[m, n] = sum over blocks b of the row:  scale(w, b) * d_x[m, b] * sum_i q_w[n, b, i] * q_x[m, b, i]  (+ offsets)
 *
 * The same source builds three ways (radixlm_kernels/cpu_quant.py picks one per process):
 *   VNNI   (-mavx512vnni -mavx512vl): 32 unsigned x 32 signed bytes per vpdpbusd
 *   AVX2   (-mavx2):                  vpmaddubsw + vpmaddwd (no saturation: |u| <= 128, |s| <= 127)
 *   scalar (no vector ISA):           plain loops over the same 8-lane layout
 * Every weight is unpacked to 32 unsigned bytes and every offset (Q4_0's -8, Q4_1's min, Q4_K's min, Q6_K's
 * -32) is applied through the activation block's sums, so one unsigned x signed dot serves every format; Q8_0's
 * signed weights use |w| against sign(w) * x, as llama.cpp does.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#include <immintrin.h>
#define RQ_VNNI 1
#define RQ_SIMD 1
#elif defined(__AVX2__)
#include <immintrin.h>
#define RQ_AVX2 1
#define RQ_SIMD 1
#endif

enum { FMT_Q8_0 = 0, FMT_Q4_0 = 1, FMT_Q4_1 = 2, FMT_Q4_K = 3, FMT_Q6_K = 4, FMT_Q5_0 = 5 };
#define QK 32
#define TILE 16   /* weight rows a thread streams against every activation row before moving on */

/* one activation block: x[i] ~ d * q[i]; s[h] = sum of q over half h (elements 16h .. 16h + 15); ds = d (s[0] + s[1]),
 * the block's sum as the offsets of the unsigned formats take it (a conversion and a product fewer per weight block) */
typedef struct { float d, ds; int16_t s[2]; int8_t q[QK]; } BlockQ8x;

int radixlm_quant_isa(void) {
#if defined(RQ_VNNI)
    return 2;
#elif defined(RQ_AVX2)
    return 1;
#else
    return 0;
#endif
}

int64_t radixlm_quant_act_block_bytes(void) { return (int64_t)sizeof(BlockQ8x); }

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#endif
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        const float f = (float)man * (1.0f / 16777216.0f);   /* subnormal: man * 2^-24 */
        return sign ? -f : f;
    }
    bits = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ---- the primitives: 32 bytes, 8 int32 lanes (lane j holds elements 4j .. 4j + 3), 8 float lanes ---- */
#if defined(RQ_SIMD)
typedef __m256i vb;   /* 32 bytes */
typedef __m256i vi;   /* 8 x int32 */
typedef __m256 vfl;   /* 8 x float */
static inline vb load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline vb nibbles16(const uint8_t *qs) {   /* 16 bytes -> low nibbles in bytes 0..15, high in 16..31 */
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}
static inline vb lo4(vb b) { return _mm256_and_si256(b, _mm256_set1_epi8(0x0F)); }
static inline vb hi4(vb b) { return _mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0F)); }
static inline vb or_bits(vb q, vb h, int shift) {   /* q | (((h >> shift) & 3) << 4) */
    const vb two = _mm256_and_si256(_mm256_srli_epi16(h, shift), _mm256_set1_epi8(3));
    return _mm256_or_si256(q, _mm256_slli_epi16(two, 4));
}
static inline vb sixteens(uint32_t bits) {   /* byte j: 16 where bit j of bits is set, else 0 */
    const __m256i pick = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}
static inline vb or32(vb a, vb b) { return _mm256_or_si256(a, b); }
static inline vi dot_us(vb u, vb s) {
#if defined(RQ_VNNI)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
static inline vi dot_ss(vb w, vb x) { return dot_us(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }
static inline vfl fzero(void) { return _mm256_setzero_ps(); }
static inline vfl facc(vfl acc, vi d, float scale) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(scale), acc);
}
static inline vfl facc2(vfl acc, vi d, float lo, float hi) {   /* lanes 0-3 by lo, 4-7 by hi */
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_setr_ps(lo, lo, lo, lo, hi, hi, hi, hi), acc);
}
static inline float fsum(vfl v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#else
typedef struct { uint8_t b[32]; } vb;
typedef struct { int32_t l[8]; } vi;
typedef struct { float l[8]; } vfl;
static inline vb load32(const void *p) { vb r; memcpy(r.b, p, 32); return r; }
static inline vb nibbles16(const uint8_t *qs) {
    vb r;
    for (int i = 0; i < 16; i++) { r.b[i] = qs[i] & 0x0F; r.b[i + 16] = qs[i] >> 4; }
    return r;
}
static inline vb lo4(vb b) { for (int i = 0; i < 32; i++) b.b[i] &= 0x0F; return b; }
static inline vb hi4(vb b) { for (int i = 0; i < 32; i++) b.b[i] >>= 4; return b; }
static inline vb or_bits(vb q, vb h, int shift) {
    for (int i = 0; i < 32; i++) q.b[i] |= ((h.b[i] >> shift) & 3) << 4;
    return q;
}
static inline vb sixteens(uint32_t bits) {
    vb r;
    for (int i = 0; i < 32; i++) r.b[i] = (uint8_t)(((bits >> i) & 1u) << 4);
    return r;
}
static inline vb or32(vb a, vb b) { for (int i = 0; i < 32; i++) a.b[i] |= b.b[i]; return a; }
static inline vi dot_us(vb u, vb s) {
    vi r;
    for (int j = 0; j < 8; j++) {
        int32_t t = 0;
        for (int i = 4 * j; i < 4 * j + 4; i++) t += (int32_t)u.b[i] * (int32_t)(int8_t)s.b[i];
        r.l[j] = t;
    }
    return r;
}
static inline vi dot_ss(vb w, vb x) {
    vi r;
    for (int j = 0; j < 8; j++) {
        int32_t t = 0;
        for (int i = 4 * j; i < 4 * j + 4; i++) t += (int32_t)(int8_t)w.b[i] * (int32_t)(int8_t)x.b[i];
        r.l[j] = t;
    }
    return r;
}
static inline vfl fzero(void) { vfl r = {{0}}; return r; }
static inline vfl facc(vfl acc, vi d, float scale) {
    for (int j = 0; j < 8; j++) acc.l[j] += (float)d.l[j] * scale;
    return acc;
}
static inline vfl facc2(vfl acc, vi d, float lo, float hi) {
    for (int j = 0; j < 8; j++) acc.l[j] += (float)d.l[j] * (j < 4 ? lo : hi);
    return acc;
}
static inline float fsum(vfl v) { float s = 0; for (int j = 0; j < 8; j++) s += v.l[j]; return s; }
#endif

/* ---- one weight row against R <= MAX_R activation rows (nb blocks each, rows nb blocks apart): per format.
 * The weight blocks are unpacked once for all R rows; res[r] receives row r's sum. ---- */
#define MAX_R 4
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define ROWS_BEGIN vfl acc[MAX_R]; float offset[MAX_R]; \
    for (int r = 0; r < R; r++) { acc[r] = fzero(); offset[r] = 0.0f; }
#define ROWS_END for (int r = 0; r < R; r++) res[r] = fsum(acc[r]) + offset[r];

ALWAYS_INLINE void dot_q8_0(const uint8_t *w, const BlockQ8x *x, int64_t nb, const int R, float *res) {
    ROWS_BEGIN   /* 34 bytes: d, q[32] */
    for (int64_t b = 0; b < nb; b++, w += 34) {
        const float d = h2f(w);
        const vb q = load32(w + 2);
        for (int r = 0; r < R; r++)
            acc[r] = facc(acc[r], dot_ss(q, load32(x[r * nb + b].q)), d * x[r * nb + b].d);
    }
    ROWS_END
}

ALWAYS_INLINE void dot_q4_0(const uint8_t *w, const BlockQ8x *x, int64_t nb, const int R, float *res) {
    ROWS_BEGIN   /* 18 bytes: d, qs[16]; w = d (q - 8) */
    for (int64_t b = 0; b < nb; b++, w += 18) {
        const float d = h2f(w);
        const vb q = nibbles16(w + 2);
        for (int r = 0; r < R; r++) {
            const BlockQ8x *xb = &x[r * nb + b];
            acc[r] = facc(acc[r], dot_us(q, load32(xb->q)), d * xb->d);
            offset[r] -= 8.0f * d * xb->ds;
        }
    }
    ROWS_END
}

ALWAYS_INLINE void dot_q4_1(const uint8_t *w, const BlockQ8x *x, int64_t nb, const int R, float *res) {
    ROWS_BEGIN   /* 20 bytes: d, m, qs[16]; w = d q + m */
    for (int64_t b = 0; b < nb; b++, w += 20) {
        const float d = h2f(w), m = h2f(w + 2);
        const vb q = nibbles16(w + 4);
        for (int r = 0; r < R; r++) {
            const BlockQ8x *xb = &x[r * nb + b];
            acc[r] = facc(acc[r], dot_us(q, load32(xb->q)), d * xb->d);
            offset[r] += m * xb->ds;
        }
    }
    ROWS_END
}

ALWAYS_INLINE void dot_q5_0(const uint8_t *w, const BlockQ8x *x, int64_t nb, const int R, float *res) {
    ROWS_BEGIN   /* 22 bytes: d, qh[4] (bit i: element i's fifth bit), qs[16] as Q4_0's; w = d (q - 16) */
    for (int64_t b = 0; b < nb; b++, w += 22) {
        const float d = h2f(w);
        uint32_t qh;
        memcpy(&qh, w + 2, 4);
        const vb q = or32(nibbles16(w + 6), sixteens(qh));
        for (int r = 0; r < R; r++) {
            const BlockQ8x *xb = &x[r * nb + b];
            acc[r] = facc(acc[r], dot_us(q, load32(xb->q)), d * xb->d);
            offset[r] -= 16.0f * d * xb->ds;
        }
    }
    ROWS_END
}

static inline void k4_scale_min(int j, const uint8_t *q, float *sc, float *mn) {   /* ggml's get_scale_min_k4 */
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *mn = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* 144 bytes per 256: d, dmin, scales[12] (6-bit scale and min of 8 sub-blocks), qs[128]; sub-block 2c takes the
 * low nibbles of qs[32c .. 32c + 31], 2c + 1 their high nibbles; w = d sc q - dmin mn */
ALWAYS_INLINE void dot_q4_k(const uint8_t *w, const BlockQ8x *x, int64_t nb, const int R, float *res) {
    ROWS_BEGIN
    for (int64_t b = 0; b < nb; b += 8, w += 144) {
        const float d = h2f(w), dmin = h2f(w + 2);
        for (int c = 0; c < 4; c++) {
            const vb q = load32(w + 16 + 32 * c);
            for (int h = 0; h < 2; h++) {
                float sc, mn;
                k4_scale_min(2 * c + h, w + 4, &sc, &mn);
                const vb qh = h ? hi4(q) : lo4(q);
                for (int r = 0; r < R; r++) {
                    const BlockQ8x *xb = &x[r * nb + b + 2 * c + h];
                    acc[r] = facc(acc[r], dot_us(qh, load32(xb->q)), d * sc * xb->d);
                    offset[r] -= dmin * mn * xb->ds;
                }
            }
        }
    }
    ROWS_END
}

/* 210 bytes per 256: ql[128], qh[64], scales[16] (int8, one per 16), d; w = d sc (q - 32), q = 4 low bits from
 * ql and 2 high bits from qh.  Per half of 128: block c (0..3) takes ql[32 (c & 1) ..] (low nibbles for c < 2,
 * high for c >= 2) and bits 2c .. 2c + 1 of qh[0 .. 31]; its two halves scales sc[2c], sc[2c + 1]. */
ALWAYS_INLINE vb q6_k_block(const uint8_t *ql, vb h, int c) {   /* block c's 6-bit q (0..63) of one half */
    const vb l = load32(ql + 32 * (c & 1));
    return or_bits(c < 2 ? lo4(l) : hi4(l), h, 2 * c);
}

ALWAYS_INLINE void dot_q6_k(const uint8_t *w, const BlockQ8x *x, int64_t nb, const int R, float *res) {
    ROWS_BEGIN
    for (int64_t b = 0; b < nb; b += 8, w += 210) {
        const float d = h2f(w + 208);
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = w + 64 * half, *qh = w + 128 + 32 * half;
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * half);
            const vb h = load32(qh);
            for (int c = 0; c < 4; c++) {
                const vb q = q6_k_block(ql, h, c);
                for (int r = 0; r < R; r++) {
                    const BlockQ8x *xb = &x[r * nb + b + 4 * half + c];
                    const float lo = d * (float)sc[2 * c] * xb->d, hi = d * (float)sc[2 * c + 1] * xb->d;
                    acc[r] = facc2(acc[r], dot_us(q, load32(xb->q)), lo, hi);
                    offset[r] -= 32.0f * (lo * (float)xb->s[0] + hi * (float)xb->s[1]);
                }
            }
        }
    }
    ROWS_END
}

typedef void (*dot_fn)(const uint8_t *, const BlockQ8x *, int64_t, float *);
const void *radixlm_quant_dots(int fmt);

#if defined(RQ_SIMD)
/* Q4_K against one activation row: a super-block's eight scales, mins, activation scales and sums taken in vectors.
 * With several rows the per-sub-block scalar work is shared by all of them; alone it bounded the product (10 GB/s of
 * weights on a Zen 4 core pair, where Q8_0 streams at 29). */
static void dot_q4_k_one(const uint8_t *w, const BlockQ8x *x, int64_t nb, float *res) {
    const __m256i blocks = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                              _mm256_set1_epi32((int)(sizeof(BlockQ8x) / 4)));
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    vfl acc = fzero(), acc_hi = fzero(), offs = fzero();   /* two sums: each fused add waits for the last */
    for (int64_t b = 0; b < nb; b += 8, w += 144) {
        const float d = h2f(w), dmin = h2f(w + 2);
        uint32_t u[3];
        memcpy(u, w + 4, 12);   /* the 6-bit scales and mins of k4_scale_min, four bytes at a time */
        const __m128i sc = _mm_setr_epi32((int)(u[0] & m6), (int)((u[2] & m4) | (((u[0] >> 6) & m2) << 4)), 0, 0);
        const __m128i mn = _mm_setr_epi32((int)(u[1] & m6), (int)(((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4)), 0, 0);
        const vfl xd = _mm256_i32gather_ps(&x[b].d, blocks, 4);
        const vfl xds = _mm256_i32gather_ps(&x[b].ds, blocks, 4);
        float f[8];
        _mm256_storeu_ps(f, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))),
                                          xd));
        offs = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn))),
                               xds, offs);
        for (int c = 0; c < 4; c++) {
            const vb q = load32(w + 16 + 32 * c);
            acc = facc(acc, dot_us(lo4(q), load32(x[b + 2 * c].q)), f[2 * c]);
            acc_hi = facc(acc_hi, dot_us(hi4(q), load32(x[b + 2 * c + 1].q)), f[2 * c + 1]);
        }
    }
    res[0] = fsum(_mm256_add_ps(acc, acc_hi)) - fsum(offs);
}
#endif
void radixlm_quant_tile(const void *dots, const void *xq, int m, int64_t nb, const uint8_t *w, int64_t row_bytes,
                        int64_t t, int64_t end, float *out, int64_t out_stride);

/* each format's function for R = 1 .. MAX_R rows, R a constant in each (its loops unrolled, sums in registers);
 * ROW_VARIANTS_ONE takes a format's own function for one row */
#define ROW_VARIANTS_ONE(name, one) \
    static void name##_2(const uint8_t *w, const BlockQ8x *x, int64_t nb, float *res) { name(w, x, nb, 2, res); } \
    static void name##_3(const uint8_t *w, const BlockQ8x *x, int64_t nb, float *res) { name(w, x, nb, 3, res); } \
    static void name##_4(const uint8_t *w, const BlockQ8x *x, int64_t nb, float *res) { name(w, x, nb, 4, res); } \
    static const dot_fn name##_rows[MAX_R] = {one, name##_2, name##_3, name##_4};
#define ROW_VARIANTS(name) \
    static void name##_1(const uint8_t *w, const BlockQ8x *x, int64_t nb, float *res) { name(w, x, nb, 1, res); } \
    ROW_VARIANTS_ONE(name, name##_1)
ROW_VARIANTS(dot_q8_0)
ROW_VARIANTS(dot_q4_0)
ROW_VARIANTS(dot_q4_1)
ROW_VARIANTS(dot_q5_0)
#if defined(RQ_SIMD)
ROW_VARIANTS_ONE(dot_q4_k, dot_q4_k_one)
#else
ROW_VARIANTS(dot_q4_k)
#endif
ROW_VARIANTS(dot_q6_k)

static inline float load_x(const void *x, int bf16, int64_t i) {   /* bfloat16 widens exactly */
    if (!bf16)
        return ((const float *)x)[i];
    const uint32_t bits = (uint32_t)((const uint16_t *)x)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#if defined(RQ_SIMD)
static inline __m256 load8_x(const void *x, int bf16, int64_t i) {
    if (!bf16)
        return _mm256_loadu_ps((const float *)x + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline int32_t hsum8_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
/* one block as the scalar loop below quantizes it (the same products, rounded to nearest even as lrintf does) */
static inline void quantize_block(const void *x, int bf16, int64_t base, BlockQ8x *o) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = load8_x(x, bf16, base + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_and_ps(v[i], absmask));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float a = _mm_cvtss_f32(m), d = a / 127.0f, inv = a > 0.0f ? 127.0f / a : 0.0f;
    __m256i q[4];
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inv)));
    const int s0 = hsum8_i32(_mm256_add_epi32(q[0], q[1])), s1 = hsum8_i32(_mm256_add_epi32(q[2], q[3]));
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)o->q, _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    o->d = d;
    o->ds = d * (float)(s0 + s1);
    o->s[0] = (int16_t)s0;
    o->s[1] = (int16_t)s1;
}
#endif

/* x [m, k] float32, or bfloat16 when bf16 != 0 (rows x_stride apart) -> blocks [m, k / 32]; k a multiple of 32.
 * Also called by cpu_quant_layer.c. */
void radixlm_quantize_rows(const void *x, int64_t x_stride, int bf16, int m, int64_t k, void *out, int threads) {
    BlockQ8x *blocks = (BlockQ8x *)out;
    const int64_t nb = k / QK;
#pragma omp parallel for num_threads(threads) schedule(static) if (m * k >= 65536)
    for (int64_t i = 0; i < (int64_t)m * nb; i++) {
        const int64_t base = (i / nb) * x_stride + (i % nb) * QK;
#if defined(RQ_SIMD)
        quantize_block(x, bf16, base, &blocks[i]);
        continue;
#endif
        float v[QK], amax = 0.0f;
        for (int j = 0; j < QK; j++) {
            v[j] = load_x(x, bf16, base + j);
            amax = fmaxf(amax, fabsf(v[j]));
        }
        const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        BlockQ8x *o = &blocks[i];
        o->d = d;
        int s0 = 0, s1 = 0;
        for (int j = 0; j < QK; j++) {
            const int q = (int)lrintf(v[j] * inv);
            o->q[j] = (int8_t)q;
            if (j < 16) s0 += q; else s1 += q;
        }
        o->ds = d * (float)(s0 + s1);
        o->s[0] = (int16_t)s0;
        o->s[1] = (int16_t)s1;
    }
}

void radixlm_quantize_q8(const float *x, int64_t x_stride, int m, int64_t k, void *out, int threads) {
    radixlm_quantize_rows(x, x_stride, 0, m, k, out, threads);
}

/* each format's row functions (NULL for an unknown format); also called by cpu_quant_layer.c */
const void *radixlm_quant_dots(int fmt) {
    switch (fmt) {
        case FMT_Q8_0: return dot_q8_0_rows;
        case FMT_Q4_0: return dot_q4_0_rows;
        case FMT_Q4_1: return dot_q4_1_rows;
        case FMT_Q5_0: return dot_q5_0_rows;
        case FMT_Q4_K: return dot_q4_k_rows;
        case FMT_Q6_K: return dot_q6_k_rows;
        default: return NULL;
    }
}

/* weight rows t .. end (one tile) against every activation row: out[r, j] (rows out_stride apart); also called by
 * cpu_quant_layer.c */
void radixlm_quant_tile(const void *dots, const void *xq, int m, int64_t nb, const uint8_t *w, int64_t row_bytes,
                        int64_t t, int64_t end, float *out, int64_t out_stride) {
    for (int r0 = 0; r0 < m; r0 += MAX_R) {
        const int rows = m - r0 < MAX_R ? m - r0 : MAX_R;
        for (int64_t j = t; j < end; j++) {
            float res[MAX_R];
            ((const dot_fn *)dots)[rows - 1](w + j * row_bytes, (const BlockQ8x *)xq + r0 * nb, nb, res);
            for (int r = 0; r < rows; r++)
                out[(r0 + r) * out_stride + j] = res[r];
        }
    }
}

/* ---- dequantization: rows of weights to float32 or bfloat16, the values of the gguf package's dequantizer: the
 * same operations in the same order, none fused (a fused multiply-add would round once where numpy rounds twice),
 * bfloat16 rounded to nearest even from them.  16 values at a time in vector types every build can compile. ---- */
#if defined(__clang__)
#define NO_CONTRACT   /* clang fuses within one expression only: every product below is a statement of its own */
#else
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif
#if defined(__AVX512F__)
#define DQ_LANES 16
#else
#define DQ_LANES 8
#endif
typedef float dq_f __attribute__((vector_size(4 * DQ_LANES)));
typedef int32_t dq_i __attribute__((vector_size(4 * DQ_LANES)));
typedef uint32_t dq_u __attribute__((vector_size(4 * DQ_LANES)));
typedef uint16_t dq_h __attribute__((vector_size(2 * DQ_LANES)));

/* DQ_LANES bytes from p widened to int32 lanes, unsigned (DQ_BYTES) or signed (DQ_BYTES_SIGNED), by the widening
 * loads where the ISA has them (gcc's own conversion of a byte vector went a byte at a time) */
#if defined(__AVX512F__)
#define DQ_BYTES(p) ((dq_i)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define DQ_BYTES_SIGNED(p) ((dq_i)_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#elif defined(RQ_SIMD)
#define DQ_BYTES(p) ((dq_i)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define DQ_BYTES_SIGNED(p) ((dq_i)_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#else
#define DQ_BYTES(p) ({ dq_i r_; for (int i_ = 0; i_ < DQ_LANES; i_++) r_[i_] = ((const uint8_t *)(p))[i_]; r_; })
#define DQ_BYTES_SIGNED(p) ({ dq_i r_; for (int i_ = 0; i_ < DQ_LANES; i_++) r_[i_] = ((const int8_t *)(p))[i_]; r_; })
#endif
#define DQ_FLOAT(i) __builtin_convertvector((i), dq_f)
#if defined(__AVX512BF16__) && DQ_LANES == 16
/* vcvtneps2bf16 rounds to nearest even as torch does (input subnormals count as zero: no weight is one) */
#define DQ_BF16_BITS(v) ((dq_h)_mm512_cvtneps_pbh((__m512)(v)))
#else
#define DQ_BF16_BITS(v) ({ dq_u u_; memcpy(&u_, &(v), sizeof u_);                                          \
                           __builtin_convertvector((u_ + 0x7FFFu + ((u_ >> 16) & 1u)) >> 16, dq_h); })
#endif
#define DQ_STORE(out, bf16, i, v) do {                                  \
        const dq_f v_ = (v);                                           \
        if (bf16) {                                                    \
            const dq_h h_ = DQ_BF16_BITS(v_);                          \
            memcpy((uint16_t *)(out) + (i), &h_, sizeof h_);           \
        } else {                                                       \
            memcpy((float *)(out) + (i), &v_, sizeof v_);              \
        }                                                              \
    } while (0)

NO_CONTRACT static void dequant_q8_0(const uint8_t *w, int64_t k, void *out, int bf16) {
    for (int64_t b = 0; b < k / QK; b++, w += 34) {
        const float d = h2f(w);
        for (int e = 0; e < QK; e += DQ_LANES)
            DQ_STORE(out, bf16, b * QK + e, DQ_FLOAT(DQ_BYTES_SIGNED(w + 2 + e)) * d);
    }
}

NO_CONTRACT static void dequant_q4_01(const uint8_t *w, int64_t k, void *out, int bf16, const int with_min) {
    const int size = with_min ? 20 : 18, offset = with_min ? 0 : 8;   /* Q4_0: d (q - 8); Q4_1: d q + m */
    for (int64_t b = 0; b < k / QK; b++, w += size) {
        const float d = h2f(w), m = with_min ? h2f(w + 2) : 0.0f;
        for (int e = 0; e < 16; e += DQ_LANES) {
            const dq_i qs = DQ_BYTES(w + (with_min ? 4 : 2) + e);
            const dq_f lo = DQ_FLOAT((qs & 0x0F) - offset) * d, hi = DQ_FLOAT((qs >> 4) - offset) * d;
            DQ_STORE(out, bf16, b * QK + e, with_min ? lo + m : lo);
            DQ_STORE(out, bf16, b * QK + 16 + e, with_min ? hi + m : hi);
        }
    }
}

NO_CONTRACT static void dequant_q5_0(const uint8_t *w, int64_t k, void *out, int bf16) {
    dq_u lane;
    for (int i = 0; i < DQ_LANES; i++)
        lane[i] = (uint32_t)i;
    for (int64_t b = 0; b < k / QK; b++, w += 22) {
        const float d = h2f(w);
        uint32_t qh;
        memcpy(&qh, w + 2, 4);
        const dq_u bits = (dq_u){0} + qh;
        for (int e = 0; e < 16; e += DQ_LANES) {
            const dq_i qs = DQ_BYTES(w + 6 + e);
            const dq_i h_lo = (dq_i)((bits >> (lane + (uint32_t)e)) & 1u), h_hi = (dq_i)((bits >> (lane + (uint32_t)(16 + e))) & 1u);
            const dq_f lo = DQ_FLOAT(((qs & 0x0F) | (h_lo << 4)) - 16) * d, hi = DQ_FLOAT(((qs >> 4) | (h_hi << 4)) - 16) * d;
            DQ_STORE(out, bf16, b * QK + e, lo);
            DQ_STORE(out, bf16, b * QK + 16 + e, hi);
        }
    }
}

NO_CONTRACT static void dequant_q4_k(const uint8_t *w, int64_t k, void *out, int bf16) {
    for (int64_t b = 0; b < k / 256; b++, w += 144) {
        const float d = h2f(w), dmin = h2f(w + 2);
        for (int c = 0; c < 4; c++) {
            float sc0, mn0, sc1, mn1;
            k4_scale_min(2 * c, w + 4, &sc0, &mn0);
            k4_scale_min(2 * c + 1, w + 4, &sc1, &mn1);
            const float d0 = d * sc0, m0 = dmin * mn0, d1 = d * sc1, m1 = dmin * mn1;
            for (int e = 0; e < 32; e += DQ_LANES) {
                const dq_i q = DQ_BYTES(w + 16 + 32 * c + e);
                const dq_f lo = DQ_FLOAT(q & 0x0F) * d0, hi = DQ_FLOAT(q >> 4) * d1;
                DQ_STORE(out, bf16, b * 256 + 64 * c + e, lo - m0);
                DQ_STORE(out, bf16, b * 256 + 64 * c + 32 + e, hi - m1);
            }
        }
    }
}

NO_CONTRACT static void dequant_q6_k(const uint8_t *w, int64_t k, void *out, int bf16) {
    for (int64_t b = 0; b < k / 256; b++, w += 210) {
        const float d = h2f(w + 208);
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = w + 64 * half, *qh = w + 128 + 32 * half;
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * half);
            for (int e = 0; e < 32; e += DQ_LANES) {   /* elements e .. of each 32; scale sc[2c] below 16 */
                const dq_i l0 = DQ_BYTES(ql + e), l1 = DQ_BYTES(ql + 32 + e), hb = DQ_BYTES(qh + e);
                const dq_i q[4] = {(l0 & 0x0F) | ((hb & 3) << 4), (l1 & 0x0F) | (((hb >> 2) & 3) << 4),
                                   (l0 >> 4) | (((hb >> 4) & 3) << 4), (l1 >> 4) | (((hb >> 6) & 3) << 4)};
                for (int c = 0; c < 4; c++) {
                    const float scale = d * (float)sc[2 * c + e / 16];
                    DQ_STORE(out, bf16, b * 256 + 128 * half + 32 * c + e, DQ_FLOAT(q[c] - 32) * scale);
                }
            }
        }
    }
}

/* weight rows j0 .. j1 - 1 (row_bytes apart, format fmt) -> out [j1 - j0, k] (rows k apart), float32, or bfloat16
 * when bf16 != 0.  Returns -1 for an unknown format.  Also called by cpu_quant_layer.c. */
int radixlm_quant_dequant_rows(int fmt, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t j0, int64_t j1,
                               void *out, int bf16) {
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *row = w + j * row_bytes;
        void *o = (char *)out + (j - j0) * k * (bf16 ? 2 : 4);
        switch (fmt) {
            case FMT_Q8_0: dequant_q8_0(row, k, o, bf16); break;
            case FMT_Q4_0: dequant_q4_01(row, k, o, bf16, 0); break;
            case FMT_Q4_1: dequant_q4_01(row, k, o, bf16, 1); break;
            case FMT_Q5_0: dequant_q5_0(row, k, o, bf16); break;
            case FMT_Q4_K: dequant_q4_k(row, k, o, bf16); break;
            case FMT_Q6_K: dequant_q6_k(row, k, o, bf16); break;
            default: return -1;
        }
    }
    return 0;
}

/* every row of w [n, row_bytes] -> out [n, k] as radixlm_quant_dequant_rows, `threads` threads over groups of rows */
int radixlm_quant_dequantize(int fmt, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t n, void *out, int bf16,
                             int threads) {
    if (radixlm_quant_dots(fmt) == NULL)
        return -1;
    const int64_t group = 16;
#pragma omp parallel for num_threads(threads) schedule(static) if (n * k >= 262144)
    for (int64_t j = 0; j < n; j += group)
        radixlm_quant_dequant_rows(fmt, w, row_bytes, k, j, j + group < n ? j + group : n,
                                   (char *)out + j * k * (bf16 ? 2 : 4), bf16);
    return 0;
}

/* out[r, n] = row n of w (row_bytes apart, format fmt) . activation row r (nb blocks), as float32 (out rows
 * out_stride apart).  Returns -1 for an unknown format. */
int radixlm_quant_linear(int fmt, const void *xq, int m, int64_t k, const uint8_t *w, int64_t n, int64_t row_bytes,
                         float *out, int64_t out_stride, int threads) {
    const void *dots = radixlm_quant_dots(fmt);
    if (dots == NULL)
        return -1;
    const int64_t nb = k / QK;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < n; t += TILE)
        radixlm_quant_tile(dots, xq, m, nb, w, row_bytes, t, t + TILE < n ? t + TILE : n, out, out_stride);
    return 0;
}

/* ---- int8 tiles (cpu_quant_layer.c): the weights as signed bytes s with one scale per sub-block, multiplied by
 * vpdpbusd against activation bytes q + 128 of 16 input rows at a time.  A sub-block's integer sum is the dot path's
 * sum_i s_i q_i exactly (the + 128 is taken back by corr = -128 sum_i s_i), so a weight row meets each row's Q8 blocks
 * as it does in dot_*; only the float sums are taken in another order. ---- */
#if defined(RQ_VNNI)
static inline int32_t sum_s8(__m256i v) {   /* the 32 signed bytes' sum */
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    return (int32_t)(_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1)) - 32 * 128;
}
static inline int32_t sum_s8_16(__m128i v) {   /* 16 signed bytes' sum */
    const __m128i sad = _mm_sad_epu8(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)), _mm_setzero_si128());
    return (int32_t)(_mm_cvtsi128_si64(sad) + _mm_extract_epi64(sad, 1)) - 16 * 128;
}

/* elements per sub-block of one scale in the int8 tiles: 32, 16 for Q6_K (a scale per 16) */
int radixlm_quant_i8_sub(int fmt) { return fmt == FMT_Q6_K ? 16 : 32; }

static inline void put_groups(int8_t *s, int64_t first, int lanes, __m256i q, int groups) {
    uint32_t g4[8];
    _mm256_storeu_si256((__m256i *)g4, q);
    for (int g = 0; g < groups; g++)
        memcpy(s + (first + g) * lanes * 4, &g4[g], 4);
}

static inline void i8_put(int8_t *s, int lanes, int32_t *corr, float *dsc, float *off, int64_t sb, __m256i q,
                          float scale, float offset) {
    put_groups(s, 8 * sb, lanes, q, 8);
    corr[sb] = -128 * sum_s8(q);
    dsc[sb] = scale;
    off[sb] = offset;
}

/* weight rows j0 .. j1 - 1 (row_bytes apart, format fmt) -> signed bytes s [k / 4, lanes, 4]: group i (elements
 * 4i .. 4i + 3) of row j at s[i, j - j0] (lanes >= j1 - j0), so that one vector of 4-byte broadcasts per row steps
 * through k; and, per sub-block sb of each row (nsb = k / radixlm_quant_i8_sub(fmt) of them, rows nsb apart):
 * corr[sb] = -128 times its bytes' sum, dsc[sb] their scale, off[sb] what multiplies the activation block's
 * d * sum q (Q4_1's min, Q4_K's -dmin * min; 0 elsewhere).  Weight = dsc * s + off.  Returns -1 for an unknown
 * format. */
int radixlm_quant_i8_unpack(int fmt, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t j0, int64_t j1,
                            int8_t *s, int lanes, int32_t *corr, float *dsc, float *off) {
    const int64_t nsb = k / radixlm_quant_i8_sub(fmt), nb = k / QK;
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *r = w + j * row_bytes;
        const int64_t o = (j - j0) * nsb;
        int8_t *sj = s + (j - j0) * 4;
        switch (fmt) {
            case FMT_Q8_0:
                for (int64_t b = 0; b < nb; b++, r += 34)
                    i8_put(sj, lanes, corr + o, dsc + o, off + o, b, load32(r + 2), h2f(r), 0.0f);
                break;
            case FMT_Q4_0:
                for (int64_t b = 0; b < nb; b++, r += 18)
                    i8_put(sj, lanes, corr + o, dsc + o, off + o, b, _mm256_sub_epi8(nibbles16(r + 2), _mm256_set1_epi8(8)),
                           h2f(r), 0.0f);
                break;
            case FMT_Q4_1:
                for (int64_t b = 0; b < nb; b++, r += 20)
                    i8_put(sj, lanes, corr + o, dsc + o, off + o, b, nibbles16(r + 4), h2f(r), h2f(r + 2));
                break;
            case FMT_Q5_0:
                for (int64_t b = 0; b < nb; b++, r += 22) {
                    uint32_t qh;
                    memcpy(&qh, r + 2, 4);
                    i8_put(sj, lanes, corr + o, dsc + o, off + o, b,
                           _mm256_sub_epi8(or32(nibbles16(r + 6), sixteens(qh)), _mm256_set1_epi8(16)), h2f(r), 0.0f);
                }
                break;
            case FMT_Q4_K:
                for (int64_t b = 0; b < nb; b += 8, r += 144) {
                    const float d = h2f(r), dmin = h2f(r + 2);
                    for (int c = 0; c < 4; c++) {
                        const vb q = load32(r + 16 + 32 * c);
                        for (int h = 0; h < 2; h++) {
                            float sc, mn;
                            k4_scale_min(2 * c + h, r + 4, &sc, &mn);
                            i8_put(sj, lanes, corr + o, dsc + o, off + o, b + 2 * c + h, h ? hi4(q) : lo4(q), d * sc,
                                   -dmin * mn);
                        }
                    }
                }
                break;
            case FMT_Q6_K:
                for (int64_t b = 0; b < nb; b += 8, r += 210) {
                    const float d = h2f(r + 208);
                    for (int half = 0; half < 2; half++) {
                        const uint8_t *ql = r + 64 * half, *qh = r + 128 + 32 * half;
                        const int8_t *sc = (const int8_t *)(r + 192 + 8 * half);
                        const vb h = load32(qh);
                        for (int c = 0; c < 4; c++) {
                            const vb q = _mm256_sub_epi8(q6_k_block(ql, h, c), _mm256_set1_epi8(32));
                            const int64_t sb = 2 * (b + 4 * half + c);   /* two sub-blocks of 16 */
                            put_groups(sj, 4 * sb, lanes, q, 8);
                            for (int e = 0; e < 2; e++) {
                                corr[o + sb + e] = -128 * sum_s8_16(e ? _mm256_extracti128_si256(q, 1)
                                                                      : _mm256_castsi256_si128(q));
                                dsc[o + sb + e] = d * (float)sc[2 * c + e];
                                off[o + sb + e] = 0.0f;
                            }
                        }
                    }
                }
                break;
            default:
                return -1;
        }
    }
    return 0;
}

/* x [rows, k] (rows x_stride apart, float32 or bfloat16) quantized as radixlm_quantize_rows does, laid out for the
 * int8 tiles in blocks of 16 rows: xu [ceil(rows / 16), k / 4, 16] (lane r: row r's 4 bytes q + 128 of that group),
 * xd and xds [ceil(rows / 16), k / 32, 16] (each block's d and d * sum q); rows past `rows` have q = 0, d = 0.
 * Returns 1 when its buffer could not be allocated. */
int radixlm_quant_i8_pack_x(const void *x, int64_t x_stride, int bf16, int rows, int64_t k, uint32_t *xu, float *xd,
                            float *xds, int threads) {
    const int64_t nb = k / QK, groups = k / 4, blocks = (rows + 15) / 16;
    BlockQ8x *q = malloc(sizeof(BlockQ8x) * (size_t)(rows * nb) + 1);
    if (q == NULL)
        return 1;
    radixlm_quantize_rows(x, x_stride, bf16, rows, k, q, threads);
    for (int64_t mb = 0; mb < blocks; mb++)
        for (int r = 0; r < 16; r++) {
            const int64_t m = mb * 16 + r;
            for (int64_t b = 0; b < nb; b++) {
                const BlockQ8x *blk = m < rows ? &q[m * nb + b] : NULL;
                xd[(mb * nb + b) * 16 + r] = blk ? blk->d : 0.0f;
                xds[(mb * nb + b) * 16 + r] = blk ? blk->ds : 0.0f;
                for (int g = 0; g < 8; g++) {
                    uint32_t v = 0x80808080u;
                    if (blk) {
                        memcpy(&v, blk->q + 4 * g, 4);
                        v ^= 0x80808080u;   /* each byte + 128 */
                    }
                    xu[(mb * groups + 8 * b + g) * 16 + r] = v;
                }
            }
        }
    free(q);
    return 0;
}
#endif
