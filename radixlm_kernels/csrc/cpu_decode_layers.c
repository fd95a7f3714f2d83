/* Every decoder layer of a Llama-family model for a decode step of a few rows, in one call.
 * At one or two rows a layer's work is streaming its weights; what torch adds around it (about fifteen
 * ops a layer, each a dispatch and a Python wrapper) costs as much again.  This runs the same ops in
 * the same order with the same roundings as the op-by-op path (runtime/models/llama.py):
 *   h = rms_norm(x) (layer 0, residual = x) or add_rms_norm(x, residual);
 *   qkv = h Wqkv^T (+ b); rope on q and k; store k, v and attend (cpu_decode_step.c); x = o Wo^T (+ b);
 *   h = add_rms_norm(x, residual); x = silu_mul(h Wgu^T) Wdown^T
 * with the linear layers by cpu_linear_rows.c (the only difference: a linear layer's float32 sums in
 * another order than oneDNN's), or for bfloat16 from three rows by cpu_amx_linear.c where its copies are given,
 * or, for GGUF weights kept in their blocks, by the quantized library's layer linear (cpu_quant_layer.c, reached
 * through the quant_linear pointer, the op-by-op path's own product).
 *
 * x: [rows, hidden] the embeddings in, the last layer's output out (not yet added to residual);
 * residual: [rows, hidden], written.  All tensors of the model's dtype (float32, or bfloat16 when
 * bf16 != 0), contiguous; weights dense [N, K].  Index arguments as in cpu_decode_step.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*quant_linear_fn)(const void *weight, const void *x, int64_t x_stride, int rows, int k,
                               const void *bias, void *out, int64_t out_stride, int bf16, int num_threads);

typedef struct {
    const void *input_norm, *qkv, *qkv_bias, *o, *o_bias, *post_norm, *gate_up, *down;
    void *k_cache, *v_cache;
    const void *qkv_amx, *o_amx, *gate_up_amx, *down_amx;   /* the AMX linear's packed copies, or NULL */
    const void *qkv_q, *o_q, *gate_up_q, *down_q;   /* GGUF block weights (cpu_quant_layer.c's QuantLinear), or NULL */
    quant_linear_fn quant_linear;                   /* radixlm_quant_layer_linear of one ISA's library, or NULL */
} LayerWeights;

int radixlm_linear_rows(const void *x, int64_t x_stride, int rows, int k, const void *w, int n, const void *bias,
                        void *out, int64_t out_stride, int bf16, int out_f32, int num_threads);
int radixlm_decode_step(const void *q, int64_t q_stride, const void *k_new, int64_t k_stride, const void *v_new,
                        int64_t v_stride, const int64_t *loc, void *k, void *v, int bf16, const int32_t *table,
                        int64_t table_stride, const int64_t *rows, const int64_t *seq_lens, int batch,
                        int num_q_heads, int num_kv_heads, int head_dim, float scale, void *out, int num_threads,
                        const int64_t *starts, const float *prior_o, const float *prior_lse);
void radixlm_rms_norm(const void *x, int64_t x_stride, const void *w, void *out, int64_t rows, int n, float eps,
                      int bf16, int num_threads);
void radixlm_add_rms_norm(const void *x, int64_t x_stride, void *residual, const void *w, void *out, int64_t rows,
                          int n, float eps, int bf16, int num_threads);
void radixlm_rope(void *x, int64_t x_stride, int64_t rows, int heads, int head_dim, const int64_t *positions,
                  const void *cos_sin, int bf16, int num_threads);
int radixlm_shared_keys_attention(const void *q, int64_t q_stride, const void *k, const void *v, int mode,
                                  const int64_t *slots, int64_t num_keys, int batch, int num_q_heads,
                                  int num_kv_heads, int head_dim, float scale, float *out, float *lse,
                                  int num_threads);
void radixlm_silu_mul(const void *gate_up, int64_t gu_stride, void *out, int64_t rows, int n, int bf16,
                      int num_threads);
int radixlm_amx_linear(const uint16_t *x, int64_t x_stride, int m, int64_t k, const uint16_t *packed, int64_t n,
                       const uint16_t *bias, uint16_t *out, int64_t out_stride, int num_threads);

/* rows of bfloat16 from AMX_LINEAR_FROM_ROWS on take the AMX linear where its packed copy is given (the op-by-op
 * path's GEMM for those rows, so the same sums); fewer rows, or no copy, the row kernel */
enum { AMX_LINEAR_FROM_ROWS = 3 };
static int layer_linear(const void *x, int64_t x_stride, int rows, int k, const void *w, const void *amx,
                        const void *quant, quant_linear_fn quant_linear, int n, const void *bias, void *out,
                        int64_t out_stride, int bf16, int num_threads) {
    if (quant != NULL)
        return quant_linear(quant, x, x_stride, rows, k, bias, out, out_stride, bf16, num_threads) != 0;
    if (amx != NULL && bf16 && rows >= AMX_LINEAR_FROM_ROWS) {
        const int status = radixlm_amx_linear(x, x_stride, rows, k, amx, n, bias, out, out_stride, num_threads);
        /* 2: this shape is not the AMX linear's (the row kernel takes it) */
        if (status != 2)
            return status;
    }
    return radixlm_linear_rows(x, x_stride, rows, k, w, n, bias, out, out_stride, bf16, 0, num_threads);
}

/* shared_slots, where not NULL: the first shared_len keys of every row, attended once for all rows
 * (cpu_shared_keys.c, radixlm_shared_keys_attention, bfloat16 by its pair loops where built; its head dim must be one
 * the loops take), each row's own keys
 * from starts[b] on merged with them.
 * Returns 0 on success, 1 when buffers could not be allocated (x and residual then hold no result). */
int radixlm_decode_layers(const LayerWeights *layers, int num_layers, void *x, void *residual, int rows, int hidden,
                          int num_q_heads, int num_kv_heads, int head_dim, int intermediate, float eps,
                          const int64_t *positions, const void *cos_sin, const int64_t *loc, const int32_t *table,
                          int64_t table_stride, const int64_t *req_rows, const int64_t *seq_lens, float scale,
                          int bf16, int num_threads, const int64_t *shared_slots, int64_t shared_len,
                          const int64_t *starts) {
    const size_t esize = bf16 ? 2 : 4;
    const int q_width = num_q_heads * head_dim, kv_width = num_kv_heads * head_dim;
    const int qkv_width = q_width + 2 * kv_width;
    char *h = malloc(esize * (size_t)rows * hidden), *qkv = malloc(esize * (size_t)rows * qkv_width);
    char *attn = malloc(esize * (size_t)rows * q_width), *gate_up = malloc(esize * (size_t)rows * 2 * intermediate);
    char *act = malloc(esize * (size_t)rows * intermediate);
    float *prior_o = shared_slots ? malloc(sizeof(float) * (size_t)rows * q_width) : NULL;
    float *prior_lse = shared_slots ? malloc(sizeof(float) * (size_t)rows * num_q_heads) : NULL;
    int status = !h || !qkv || !attn || !gate_up || !act || (shared_slots && (!prior_o || !prior_lse));
    for (int l = 0; l < num_layers && !status; l++) {
        const LayerWeights *w = &layers[l];
        if (l == 0) {
            memcpy(residual, x, esize * (size_t)rows * hidden);
            radixlm_rms_norm(x, hidden, w->input_norm, h, rows, hidden, eps, bf16, num_threads);
        } else {
            radixlm_add_rms_norm(x, hidden, residual, w->input_norm, h, rows, hidden, eps, bf16, num_threads);
        }
        status |= layer_linear(h, hidden, rows, hidden, w->qkv, w->qkv_amx, w->qkv_q, w->quant_linear, qkv_width,
                               w->qkv_bias, qkv, qkv_width, bf16, num_threads);
        radixlm_rope(qkv, qkv_width, rows, num_q_heads + num_kv_heads, head_dim, positions, cos_sin, bf16,
                     num_threads);
        if (shared_slots)
            status |= radixlm_shared_keys_attention(qkv, qkv_width, w->k_cache, w->v_cache, bf16 ? -1 : 0, shared_slots,
                                                    shared_len, rows, num_q_heads, num_kv_heads, head_dim, scale,
                                                    prior_o, prior_lse, num_threads) != 0;
        status |= radixlm_decode_step(qkv, qkv_width, qkv + esize * q_width, qkv_width,
                                      qkv + esize * (q_width + kv_width), qkv_width, loc, w->k_cache, w->v_cache,
                                      bf16, table, table_stride, req_rows, seq_lens, rows, num_q_heads, num_kv_heads,
                                      head_dim, scale, attn, num_threads, shared_slots ? starts : NULL, prior_o,
                                      prior_lse);
        status |= layer_linear(attn, q_width, rows, q_width, w->o, w->o_amx, w->o_q, w->quant_linear, hidden,
                               w->o_bias, x, hidden, bf16, num_threads);
        radixlm_add_rms_norm(x, hidden, residual, w->post_norm, h, rows, hidden, eps, bf16, num_threads);
        status |= layer_linear(h, hidden, rows, hidden, w->gate_up, w->gate_up_amx, w->gate_up_q, w->quant_linear,
                               2 * intermediate, NULL, gate_up, 2 * intermediate, bf16, num_threads);
        radixlm_silu_mul(gate_up, 2 * intermediate, act, rows, intermediate, bf16, num_threads);
        status |= layer_linear(act, intermediate, rows, intermediate, w->down, w->down_amx, w->down_q,
                               w->quant_linear, hidden, NULL, x, hidden, bf16, num_threads);
    }
    free(h);
    free(qkv);
    free(attn);
    free(gate_up);
    free(act);
    free(prior_o);
    free(prior_lse);
    return status;
}
