/* Linear layers for a few rows on CPUs (decode steps of small batches):
 *   out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]),  m < rows <= a few dozen.
 * At one to a few rows a linear layer only streams its weight matrix, and oneDNN's GEMM reads its packed
 * weights at well below what the memory gives; these loops stream the dense [N, K] rows in order, four
 * weight rows at a time against up to four x rows, each thread over its own contiguous range of outputs.
 *
 * x, w, bias: float32 (bf16 == 0) or bfloat16; accumulation is float32, bias added in float32, and a
 * bfloat16 result is rounded once, to nearest even, as torch's bfloat16 linear does.  out is of x's dtype,
 * or float32 when out_f32 != 0 (bfloat16 results still rounded: the logits torch's bf16 lm head gives,
 * widened).  Rows of x and out may be strided; elements within a row are contiguous.
 * bfloat16 on a CPU with AVX512-BF16 uses its pair dot product (exact products, float32 sums); elsewhere
 * the weights widen to float32 and multiply by FMA, 16 lanes with AVX-512 and 8 with AVX2.
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "linear_blocks.h"

/* Returns 0 on success, 1 when the widened copy of x could not be allocated. */
int radixlm_linear_rows(const void *x, int64_t x_stride, int rows, int k, const void *w, int n, const void *bias,
                        void *out, int64_t out_stride, int bf16, int out_f32, int num_threads) {
    LinearArgs a = {x, NULL, x_stride, 0, rows, k, w, bias, out, out_stride, bf16, out_f32};
    if (prepare_x(&a) != 0)
        return 1;
    const int64_t work = (int64_t)n * k;
    const int threads = work >= 65536 && num_threads > 1 ? num_threads : 1;
    #pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t blocks = ((int64_t)n + NR - 1) / NR;
        const int64_t lo = blocks * t / nt * NR, hi = blocks * (t + 1) / nt * NR;
        outputs(&a, lo, hi < n ? hi : n);
    }
    free((void *)a.xf);
    return 0;
}
