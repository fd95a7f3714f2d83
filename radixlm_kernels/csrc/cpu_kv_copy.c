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

/* to_pool: payload rows into the buffers' rows `slots`; else the buffers' rows into the payloads. */
void radixlm_kv_copy(uint8_t *const *payloads, int nblocks, int block, uint8_t *const *bufs, int nbufs,
                     const int64_t *slots, int64_t row_bytes, int to_pool, int num_threads) {
    int64_t pairs = (int64_t)nblocks * nbufs;
    if (num_threads < 1)
        num_threads = 1;
#pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t p = 0; p < pairs; p++) {
        int b = (int)(p / nbufs), i = (int)(p % nbufs);
        uint8_t *payload = payloads[b] + (int64_t)i * block * row_bytes;
        const int64_t *s = slots + (int64_t)b * block;
        for (int t = 0; t < block;) {
            int run = run_length(s, t, block);
            uint8_t *pool_rows = bufs[i] + s[t] * row_bytes, *payload_rows = payload + (int64_t)t * row_bytes;
            size_t n = (size_t)run * row_bytes;
            if (to_pool)
                memcpy(pool_rows, payload_rows, n);
            else
                memcpy(payload_rows, pool_rows, n);
            t += run;
        }
    }
}

/* A 64-bit checksum of n bytes for the disk tier's files, at memory speed: eight FNV-1a-style lanes over
 * little-endian 64-bit words (word i goes to lane i % 8), the tail bytes zero-padded into one more word
 * for lane 0, then the lanes and the length folded together.  radix_cache/disk_store.py has the same
 * function in Python (the reference the tests compare with). */
#define FNV_PRIME 0x100000001b3ull
#define FNV_BASIS 0xcbf29ce484222325ull
#define GOLDEN 0x9e3779b97f4a7c15ull

uint64_t radixlm_checksum64(const uint8_t *data, int64_t n) {
    uint64_t h[8];
    for (int j = 0; j < 8; j++)
        h[j] = FNV_BASIS ^ ((uint64_t)j * GOLDEN);
    int64_t words = n / 8, i = 0;
    for (; i + 8 <= words; i += 8)
        for (int j = 0; j < 8; j++) {
            uint64_t w;
            memcpy(&w, data + 8 * (i + j), 8);
            h[j] = (h[j] ^ w) * FNV_PRIME;
        }
    for (; i < words; i++) {
        uint64_t w;
        memcpy(&w, data + 8 * i, 8);
        h[i % 8] = (h[i % 8] ^ w) * FNV_PRIME;
    }
    int tail = (int)(n % 8);
    if (tail) {
        uint64_t w = 0;
        memcpy(&w, data + 8 * words, (size_t)tail);
        h[0] = (h[0] ^ w ^ ((uint64_t)tail << 56)) * FNV_PRIME;
    }
    uint64_t r = (uint64_t)n;
    for (int j = 0; j < 8; j++)
        r = (r ^ h[j]) * FNV_PRIME;
    return r ^ (r >> 29);
}
