/* Sixteen-lane float32 vectors, for CPUs with 512-bit registers (AVX-512): the same helpers as vec8.h's, so a
 * loop written for either width issues half the instructions there.  Include only where __AVX512F__ is
 * defined; elsewhere 16 lanes would need twice the registers the 8-lane loops fit in. */
#ifndef RADIXLM_VEC16_H
#define RADIXLM_VEC16_H

#include "vec8.h"

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

static inline v16f load16(const float *p) { v16f v; memcpy(&v, p, sizeof v); return v; }
static inline void store16(float *p, v16f v) { memcpy(p, &v, sizeof v); }

/* lanes i and i + 8 added: eight lanes whose horizontal sum is v's */
static inline v8f fold16(v16f v) {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
         + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
}

static inline float hsum16(v16f v) { return hsum8(fold16(v)); }

RADIXLM_LANE_OPS(16, v16f, v16i, v16u, v16h, loadn16_any, storen16_any)

#endif
