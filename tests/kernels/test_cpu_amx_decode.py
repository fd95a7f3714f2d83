"""Decode attention on the AMX tile unit (radixlm_kernels/csrc/cpu_amx_decode.c) against a float64 run of the torch
reference.  Where the CPU or the build has no AMX-BF16 these tests skip, visibly; tests/kernels/test_cpu_native.py
covers the AVX-512 and AVX2 loops that run there instead.

The bound is derived as in test_cpu_amx_extend.py, whose helper computes it: a decode is an extend of one new token
that sees every cached key.  The kernel's scores are float32 sums of exact bfloat16 products, each softmax weight is
rounded once to bfloat16 and the weights applied are divided by their own sum, and the output is rounded once more.
"""

import os
import subprocess
import sys

import pytest
import torch

from radixlm.kernels import cpu_native
from radixlm.kernels.cpu_shared_prefix import SharedPrefix

pytestmark = pytest.mark.skipif(not (cpu_native.available() and cpu_native.amx_decode_available(64, 9, 3)),
                                reason="no AMX-BF16 tile unit on this CPU (or no native build): the AMX decode "
                                       "kernel cannot run here")

from test_cpu_amx_extend import _batch, _reference_and_bound  # noqa: E402


def _decode_case(lens, heads, seed, consecutive):
    """q [B, Hq, D] and a KV pool whose requests have lens keys each (the last one the token being decoded);
    consecutive: each request's keys in consecutive slots (read in place), else scattered (gathered)."""
    q, k, v, table, rows, prefix, ext = _batch([n - 1 for n in lens], [1] * len(lens), *heads, seed=seed)
    if consecutive:
        g = torch.Generator().manual_seed(seed + 1)
        starts = torch.randint(0, k.shape[0] - table.shape[1], (table.shape[0], 1), generator=g)
        table = (starts + torch.arange(table.shape[1])).to(torch.int32)
    return q, k, v, table, rows, prefix, ext


@pytest.mark.parametrize("heads", [(9, 3, 64), (8, 2, 64), (16, 4, 64), (4, 4, 64), (16, 1, 64)])
@pytest.mark.parametrize("consecutive", [True, False])
@pytest.mark.parametrize("lens", [
    [1, 2, 15, 16, 17],                                   # under a block of keys, one block, one key past it
    [31, 32, 33, 300, 1500] * 2,                          # ten requests: whole requests a work item
])
def test_within_its_rounding_of_float64(heads, consecutive, lens):
    q, k, v, table, rows, prefix, ext = _decode_case(lens, heads, seed=len(lens) + heads[0], consecutive=consecutive)
    scale = heads[2] ** -0.5
    want, bound = _reference_and_bound(q, k, v, table, rows, prefix, ext, scale)
    got = cpu_native.decode_attention(q, k, v, table, rows, prefix + 1, scale)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"max excess {(err - bound).max().item():.3g}"


@pytest.mark.parametrize("consecutive", [True, False])
def test_a_request_gets_the_same_bits_alone_and_in_a_batch(consecutive):
    """A batch of many requests goes a whole request per work item, a request alone one KV head per item: the
    same bits either way (what --deterministic relies on)."""
    lens = [1, 16, 17, 40, 64, 65, 300, 513] * 3
    q, k, v, table, rows, prefix, _ = _decode_case(lens, (9, 3, 64), seed=5, consecutive=consecutive)
    batched = cpu_native.decode_attention(q, k, v, table, rows, prefix + 1, 0.125)
    alone = torch.cat([cpu_native.decode_attention(q[b:b + 1], k, v, table, rows[b:b + 1], prefix[b:b + 1] + 1, 0.125)
                       for b in range(len(lens))])
    assert torch.equal(batched, alone)


def test_a_shared_prefix_merged_by_its_log_sum_exp():
    """Requests that share their first 400 keys: the prefix attended once for all (cpu_shared_prefix.py), each
    request's own keys here, merged with the prefix's (o, log-sum-exp).  Bound: the prefix's weights are rounded
    once by the shared path and the own keys' once here, with the shared log-sum-exp within 2^-9: at most twice
    the bound of one rounding of every weight."""
    batch, shared_len, heads = 12, 400, (9, 3, 64)
    lens = [shared_len + n for n in (1, 2, 17, 33, 100, 250)] * 2
    q, k, v, table, rows, prefix, ext = _decode_case(lens, heads, seed=11, consecutive=False)
    table[rows, :shared_len] = table[rows[0], :shared_len]
    want, bound = _reference_and_bound(q, k, v, table, rows, prefix, ext, 0.125)
    shared = SharedPrefix(table[rows[0], :shared_len].to(torch.int64), batch)
    got = cpu_native.decode_attention(q, k, v, table, rows, prefix + 1, 0.125, shared=shared)
    err = (got.double() - want).abs()
    assert bool((err <= 2 * bound).all()), f"max excess {(err - 2 * bound).max().item():.3g}"


def test_the_off_switch_keeps_the_avx512_loops():
    """RADIXLM_DISABLE_AMX_DECODE=1: the AVX-512 loops' bits (their weights are not rounded), which differ from
    this kernel's; both within the reference's bound (test_cpu_native.py checks the loops)."""
    script = (
        "import sys, torch\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_cpu_amx_decode import _decode_case\n"
        "from radixlm.kernels import cpu_native\n"
        "q, k, v, table, rows, prefix, _ = _decode_case([40, 300, 513] * 4, (9, 3, 64), seed=7, consecutive=False)\n"
        "torch.save(cpu_native.decode_attention(q, k, v, table, rows, prefix + 1, 0.125), sys.argv[2])\n")
    here = os.path.dirname(os.path.abspath(__file__))
    outs = {}
    for off in ("0", "1"):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"amx_decode_{os.getpid()}_{off}.pt")
        env = {**os.environ, "RADIXLM_DISABLE_AMX_DECODE": off}
        subprocess.run([sys.executable, "-c", script, here, path], env=env, check=True, timeout=300)
        outs[off] = torch.load(path)
        os.unlink(path)
    q, k, v, table, rows, prefix, ext = _decode_case([40, 300, 513] * 4, (9, 3, 64), seed=7, consecutive=False)
    want, bound = _reference_and_bound(q, k, v, table, rows, prefix, ext, 0.125)
    assert not torch.equal(outs["0"], outs["1"])
    for out in outs.values():
        assert bool(((out.double() - want).abs() <= bound).all())
