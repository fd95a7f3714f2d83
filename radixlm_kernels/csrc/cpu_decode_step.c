/* One decode step's attention for one layer in one call: store the new tokens' K/V rows in the pool,
 * then attend (cpu_decode_attention.c) with q read from the model's tensor and the result written in
 * the model's dtype.  Where torch takes seven ops per layer (an index copy each for K and V, q to
 * float32, an output buffer, the kernel, the cast back), each with its dispatch cost, this is one.
 *
 * q, k_new, v_new: [B] rows (row strides in elements; heads contiguous within a row) of the pool's
 * dtype (float32, or bfloat16 when bf16 != 0); k, v: the pool [slots, Hkv, D]; loc: [B] slots of the
 * new tokens; out: [B, Hq, D] contiguous; starts, prior_o, prior_lse: NULL, or a shared prefix's attention
 * (radixlm_decode_attention_after).  The values equal store_kv + decode_attention's bit for bit:
 * a bfloat16 q widens exactly, and the float32 result rounds to nearest even as torch's cast does.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vec8.h"

int radixlm_decode_attention_after(const float *q, const void *k, const void *v, int kv_bf16,
                                   const int32_t *table, int64_t table_stride, const int64_t *rows,
                                   const int64_t *seq_lens, int batch, int num_q_heads, int num_kv_heads,
                                   int head_dim, float scale, float *out, int num_threads, const int64_t *starts,
                                   const float *prior_o, const float *prior_lse);

/* Returns 0 on success, 1 when buffers could not be allocated. */
int radixlm_decode_step(const void *q, int64_t q_stride, const void *k_new, int64_t k_stride, const void *v_new,
                        int64_t v_stride, const int64_t *loc, void *k, void *v, int bf16, const int32_t *table,
                        int64_t table_stride, const int64_t *rows, const int64_t *seq_lens, int batch,
                        int num_q_heads, int num_kv_heads, int head_dim, float scale, void *out, int num_threads,
                        const int64_t *starts, const float *prior_o, const float *prior_lse) {
    const size_t esize = bf16 ? 2 : 4;
    const int64_t kv_row = (int64_t)num_kv_heads * head_dim, q_row = (int64_t)num_q_heads * head_dim;
    for (int b = 0; b < batch; b++) {
        memcpy((char *)k + loc[b] * kv_row * esize, (const char *)k_new + b * k_stride * esize, kv_row * esize);
        memcpy((char *)v + loc[b] * kv_row * esize, (const char *)v_new + b * v_stride * esize, kv_row * esize);
    }
    const size_t n = (size_t)batch * q_row;
    float *qf = malloc(sizeof(float) * (n ? n : 1)), *of = malloc(sizeof(float) * (n ? n : 1));
    int status = qf == NULL || of == NULL;
    if (!status) {
        for (int b = 0; b < batch; b++)
            for (int64_t e = 0; e < q_row; e += 8) {
                const int m = q_row - e < 8 ? (int)(q_row - e) : 8;
                const v8f x = loadn_any(q, bf16, b * q_stride + e, m);
                memcpy(qf + b * q_row + e, &x, sizeof(float) * (size_t)m);
            }
        status = radixlm_decode_attention_after(qf, k, v, bf16, table, table_stride, rows, seq_lens, batch,
                                                num_q_heads, num_kv_heads, head_dim, scale, of, num_threads, starts,
                                                prior_o, prior_lse);
    }
    if (!status)
        for (size_t e = 0; e < n; e += 8) {
            const int m = n - e < 8 ? (int)(n - e) : 8;
            storen_any(out, bf16, (int64_t)e, loadn_any(of, 0, (int64_t)e, m), m);
        }
    free(qf);
    free(of);
    return status;
}
