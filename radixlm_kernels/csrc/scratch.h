/* Reusable buffers, one set per calling thread, for the packed copies a kernel makes on every call.  glibc maps an
 * allocation of a megabyte or more afresh (and may unmap it on free), so a call paid a page fault per 4 KiB it
 * packed: the shared-prefix kernel's 1.2 MB of float32 keys and values took 1.2 ms a layer instead of 0.55 (Zen 4).
 * A buffer asked for again is reused, and grown when too small; it lives as long as its thread.  Each file that
 * includes this has its own set. */
#ifndef RADIXLM_SCRATCH_H
#define RADIXLM_SCRATCH_H

#include <stddef.h>
#include <stdlib.h>

enum { SCRATCH_SLOTS = 8 };

/* slot's buffer of at least bytes, 64-byte aligned (NULL when out of memory); its contents are not kept */
static void *scratch_get(int slot, size_t bytes) {
    static _Thread_local void *buffers[SCRATCH_SLOTS];
    static _Thread_local size_t sizes[SCRATCH_SLOTS];
    if (sizes[slot] < bytes || buffers[slot] == NULL) {
        free(buffers[slot]);
        const size_t size = (bytes + 63) / 64 * 64 + 64;
        buffers[slot] = aligned_alloc(64, size);
        sizes[slot] = buffers[slot] != NULL ? size : 0;
    }
    return buffers[slot];
}

#endif
