"""Native KV block copies (radixlm_kernels/csrc/cpu_kv_copy.c) against torch indexing: payload rows into the
pool's buffers at any slots (runs, scattered, both dtypes) and back out."""

import random

import pytest
import torch

from radixlm.kernels import cpu_native

pytestmark = pytest.mark.skipif(not cpu_native.available(), reason=f"native kernels: {cpu_native.unavailable_reason()}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["consecutive", "scattered", "runs"])
def test_scatter_then_gather_equals_torch_indexing(dtype, layout):
    nbufs, slots_total, block, heads, dim, nblocks = 6, 512, 16, 3, 8, 5
    buffers = [torch.randn(slots_total, heads, dim).to(dtype) for _ in range(nbufs)]    # nbufs x [S, H, D]
    rng = random.Random(hash(layout) % 1000)
    if layout == "consecutive":
        slots = list(range(100, 100 + nblocks * block))
    elif layout == "scattered":
        slots = rng.sample(range(slots_total), nblocks * block)
    else:   # consecutive stretches of random lengths in random places
        slots = []
        while len(slots) < nblocks * block:
            start, n = rng.randrange(slots_total - 40), rng.randint(1, 40)
            slots.extend(s for s in range(start, start + n) if s not in slots)
        slots = slots[:nblocks * block]
    payloads = [torch.randn(nbufs, block, heads, dim).to(dtype) for _ in range(nblocks)]  # [nbufs, B, H, D]
    index = torch.tensor(slots, dtype=torch.long)
    want = [b.clone() for b in buffers]
    for i in range(nbufs):
        want[i][index] = torch.cat([p[i] for p in payloads])                             # [nblocks*B, H, D]
    cpu_native.kv_blocks_copy(payloads, buffers, index, to_pool=True)
    assert all(torch.equal(b, w) for b, w in zip(buffers, want))
    back = [torch.empty_like(p) for p in payloads]
    cpu_native.kv_blocks_copy(back, buffers, index, to_pool=False)
    assert all(torch.equal(b, p) for b, p in zip(back, payloads))


def test_refuses_payloads_of_the_wrong_size():
    buffers = [torch.zeros(64, 2, 4) for _ in range(2)]
    with pytest.raises(ValueError):
        cpu_native.kv_blocks_copy([torch.zeros(2, 8, 2, 3)], buffers, torch.arange(8), to_pool=True)


@pytest.mark.parametrize("size", [0, 1, 7, 8, 63, 64, 65, 1000, 4099])
def test_checksum64_equals_its_python_reference(size):
    from radixlm.radix_cache.disk_store import checksum64_reference
    data = bytes(random.Random(size).randrange(256) for _ in range(size))
    assert cpu_native.checksum64(data) == checksum64_reference(data)
    assert cpu_native.checksum64(bytearray(data)) == checksum64_reference(data)   # writable buffers too


def test_checksum64_sees_a_zeroed_page_a_swap_and_a_flipped_bit():
    data = bytearray(random.Random(1).randbytes(3 * 4096))
    base = cpu_native.checksum64(data)
    zeroed = bytearray(data)
    zeroed[4096:8192] = bytes(4096)
    swapped = data[4096:8192] + data[:4096] + data[8192:]
    flipped = bytearray(data)
    flipped[5000] ^= 0x10
    assert len({base, cpu_native.checksum64(zeroed), cpu_native.checksum64(swapped),
                cpu_native.checksum64(flipped)}) == 4
