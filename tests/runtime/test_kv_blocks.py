"""KV block copies (runtime/runner/kv_blocks.py) against the payload layout's oracle: block b of a read is
[2 * layers, block, kv_heads, head_dim] bytes, K of every layer then V, the rows at slots[b*B:(b+1)*B],
exactly what the disk tier's files and checksums were written from.  Every path (native CPU, the generic
torch path, the Triton gather/scatter under the interpreter, CUDA under the gpu mark) must give those
bytes and write them back into the same rows."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from radixlm.kernels import cpu_native
from radixlm.runtime.runner import kv_blocks
from radixlm.runtime.runner.memory_pool import KVPool

HAS_CUDA = torch.cuda.is_available()


def _pool(device="cpu", layers=3, slots=96, heads=2, head_dim=8, dtype=torch.bfloat16, seed=0):
    pool = KVPool(layers, slots, heads, head_dim, dtype=dtype, device=device)
    gen = torch.Generator().manual_seed(seed)
    for buf in (*pool.k_buffers, *pool.v_buffers):
        buf.copy_(torch.randn(buf.shape, generator=gen).to(dtype))   # [S, H, D]
    return pool


def _oracle(pool, slots, block):
    """The layout as the disk tier stored it: per block, torch.stack of every buffer's rows."""
    bufs = (*pool.k_buffers, *pool.v_buffers)
    out = []
    for i in range(0, len(slots), block):
        idx = torch.tensor(slots[i:i + block], dtype=torch.long, device=bufs[0].device)   # [B]
        out.append(torch.stack([b.index_select(0, idx) for b in bufs]).cpu().view(torch.uint8).numpy())
    return out


def _slots(n, total=96, seed=1):
    return torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:n].tolist()


def _same_bytes(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert memoryview(g).nbytes == w.nbytes
        assert np.array_equal(np.frombuffer(memoryview(g).cast("B"), dtype=np.uint8), w.reshape(-1))


@pytest.fixture(params=["native", "generic"])
def cpu_path(request, monkeypatch):
    if request.param == "native":
        if not cpu_native.available():
            pytest.skip("native CPU kernels unavailable")
    else:
        monkeypatch.setattr(cpu_native, "available", lambda: False)
    return request.param


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_read_blocks_cpu_bytes_equal_the_layout(cpu_path, dtype):
    pool = _pool(dtype=dtype)
    slots = _slots(3 * 16)
    _same_bytes(kv_blocks.read_blocks(pool, slots, 16), _oracle(pool, slots, 16))


def test_write_blocks_cpu_round_trip(cpu_path):
    src, dst = _pool(seed=0), _pool(seed=5)
    read, write = _slots(4 * 8, seed=2), _slots(4 * 8, seed=3)
    payloads = _oracle(src, read, 8)
    kv_blocks.write_blocks(dst, write, payloads)
    for a, b in zip((*src.k_buffers, *src.v_buffers), (*dst.k_buffers, *dst.v_buffers)):
        assert torch.equal(a[read], b[write])
    _same_bytes(kv_blocks.read_blocks(dst, write, 8), payloads)


def test_write_blocks_takes_read_only_bytes(cpu_path):
    """The disk tier hands back `bytes` objects: read-only, never written."""
    src, dst = _pool(seed=0), _pool(seed=7)
    slots = _slots(16)
    payloads = [bytes(p) for p in _oracle(src, slots, 8)]
    kv_blocks.write_blocks(dst, slots, payloads)
    _same_bytes(kv_blocks.read_blocks(dst, slots, 8), [np.frombuffer(p, dtype=np.uint8) for p in payloads])


def test_write_blocks_refuses_a_wrong_size_and_writes_nothing():
    pool = _pool()
    before = [b.clone() for b in pool.k_buffers]
    bad = [np.zeros(10, dtype=np.uint8)]
    with pytest.raises(ValueError, match="does not fit"):
        kv_blocks.write_blocks(pool, _slots(8), bad)
    assert all(torch.equal(a, b) for a, b in zip(before, pool.k_buffers))


def test_gather_scatter_generic_equal_the_layout(monkeypatch):
    monkeypatch.setattr(kv_blocks, "_use_triton", lambda device: False)
    pool, slots = _pool(), _slots(2 * 16)
    staged = kv_blocks.gather_blocks(pool, slots, 16)   # [2, 2L, 16, H, D]
    _same_bytes([s.view(torch.uint8).numpy() for s in staged], _oracle(pool, slots, 16))
    other = _pool(seed=9)
    kv_blocks.scatter_blocks(other, slots, staged)
    for a, b in zip((*pool.k_buffers, *pool.v_buffers), (*other.k_buffers, *other.v_buffers)):
        assert torch.equal(a[slots], b[slots])


_INTERPRETED = r"""
import os, sys
import numpy as np, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
from test_kv_blocks import _oracle, _pool, _same_bytes, _slots
from radixlm.runtime.runner import kv_blocks
assert kv_blocks._use_triton(torch.device("cpu"))
for dtype, heads, head_dim in [(torch.bfloat16, 2, 8), (torch.float32, 3, 4), (torch.bfloat16, 1, 3)]:
    pool, slots = _pool(dtype=dtype, heads=heads, head_dim=head_dim), _slots(3 * 8)
    staged = kv_blocks.gather_blocks(pool, slots, 8)
    _same_bytes([s.view(torch.uint8).numpy() for s in staged], _oracle(pool, slots, 8))
    other = _pool(dtype=dtype, heads=heads, head_dim=head_dim, seed=4)
    kv_blocks.scatter_blocks(other, slots, staged)
    for a, b in zip((*pool.k_buffers, *pool.v_buffers), (*other.k_buffers, *other.v_buffers)):
        assert torch.equal(a[slots], b[slots])
        rest = sorted(set(range(96)) - set(slots))
        assert not torch.equal(a[rest], b[rest])  # rows outside `slots` untouched
print("ok")
"""


def test_triton_gather_scatter_under_the_interpreter():
    """The one-launch Triton copy (4-byte and 1-byte words), TRITON_INTERPRET=1 in a child only."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", _INTERPRETED, __file__], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("pinned", [True, False])
def test_cuda_read_write_bytes_equal_the_layout(pinned):
    pool, slots = _pool("cuda", layers=4, slots=512, heads=3, head_dim=64), _slots(5 * 64, total=512)
    payloads = kv_blocks.read_blocks(pool, slots, 64, pinned=pinned)
    _same_bytes(payloads, _oracle(pool, slots, 64))
    other = _pool("cuda", layers=4, slots=512, heads=3, head_dim=64, seed=3)
    kv_blocks.write_blocks(other, slots, payloads)                       # pinned (host tier) or pageable
    kv_blocks.write_blocks(other, slots, [bytes(p) for p in payloads])   # the disk tier's bytes
    for a, b in zip((*pool.k_buffers, *pool.v_buffers), (*other.k_buffers, *other.v_buffers)):
        assert torch.equal(a[slots], b[slots])
