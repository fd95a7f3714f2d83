/* KV copies between the pool's per-layer buffers and the disk tier's block payloads.
 *
 * A buffer is [num_slots, row_bytes] (one token's K or V of one layer per row); a block payload is
 * [nbufs][block][row_bytes]: every buffer's rows of the block's tokens, buffer after buffer.  scatter
 * copies payload rows into the rows of `slots`, gather the other way.  Consecutive slots are copied with
 * one memcpy.  Work is split over (block, buffer) pairs on the OpenMP runtime torch already loaded. */
#include <stdint.h>
#include <string.h>

static int run_length(const int64_t *s, int t, int block) {
    int run = 1;
    while (t + run < block && s[t + run] == s[t] + run)
        run++;
    return run;
}

void radixlm_kv_scatter(const uint8_t *const *srcs, int nblocks, int block, uint8_t *const *bufs, int nbufs,
                        const int64_t *slots, int64_t row_bytes, int num_threads) {
    int64_t pairs = (int64_t)nblocks * nbufs;
    if (num_threads < 1)
        num_threads = 1;
#pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t p = 0; p < pairs; p++) {
        int b = (int)(p / nbufs), i = (int)(p % nbufs);
        const uint8_t *src = srcs[b] + (int64_t)i * block * row_bytes;
        const int64_t *s = slots + (int64_t)b * block;
        for (int t = 0; t < block;) {
            int run = run_length(s, t, block);
            memcpy(bufs[i] + s[t] * row_bytes, src + (int64_t)t * row_bytes, (size_t)run * row_bytes);
            t += run;
        }
    }
}

void radixlm_kv_gather(uint8_t *const *dsts, int nblocks, int block, const uint8_t *const *bufs, int nbufs,
                       const int64_t *slots, int64_t row_bytes, int num_threads) {
    int64_t pairs = (int64_t)nblocks * nbufs;
    if (num_threads < 1)
        num_threads = 1;
#pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t p = 0; p < pairs; p++) {
        int b = (int)(p / nbufs), i = (int)(p % nbufs);
        uint8_t *dst = dsts[b] + (int64_t)i * block * row_bytes;
        const int64_t *s = slots + (int64_t)b * block;
        for (int t = 0; t < block;) {
            int run = run_length(s, t, block);
            memcpy(dst + (int64_t)t * row_bytes, bufs[i] + s[t] * row_bytes, (size_t)run * row_bytes);
            t += run;
        }
    }
}
