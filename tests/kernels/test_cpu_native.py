"""The native CPU decode kernel (radixlm_kernels/csrc) against the torch reference."""

import os

import pytest
import torch

from radixlm.kernels import cpu_native, dispatch, torch_ref

pytestmark = pytest.mark.skipif(not cpu_native.available(), reason="no C compiler for the native kernel")


def _case(batch, num_q_heads, num_kv_heads, head_dim, lens, dtype, contiguous_slots, seed=0):
    g = torch.Generator().manual_seed(seed)
    width = max(lens) + 5
    num_slots = max(4096, 2 * width)
    k = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    rows = torch.randperm(batch + 3, generator=g)[:batch]
    if contiguous_slots:
        starts = torch.randint(0, num_slots - width, (batch + 3, 1), generator=g)
        table = (starts + torch.arange(width)).to(torch.int32)
    else:
        table = torch.randint(0, num_slots, (batch + 3, width), generator=g, dtype=torch.int32)
    q = torch.randn(batch, num_q_heads, head_dim, generator=g).to(dtype)
    return q, k, v, table, rows, torch.tensor(lens)


@pytest.mark.parametrize("num_q_heads,num_kv_heads,head_dim", [(9, 3, 64), (4, 4, 32), (8, 1, 128), (6, 2, 20)])
@pytest.mark.parametrize("contiguous_slots", [True, False])
def test_decode_matches_reference_float32(num_q_heads, num_kv_heads, head_dim, contiguous_slots):
    lens = [1, 2, 7, 8, 9, 63, 200, 513]
    q, k, v, table, rows, seq_lens = _case(len(lens), num_q_heads, num_kv_heads, head_dim, lens,
                                           torch.float32, contiguous_slots)
    scale = head_dim ** -0.5
    want = torch_ref.decode_attention(q, k, v, table, rows, seq_lens, scale)
    got = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, scale)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert (got - want).abs().max().item() < 2e-5


def test_decode_matches_reference_bfloat16_and_writes_out():
    lens = [3, 100, 257]
    q, k, v, table, rows, seq_lens = _case(3, 8, 2, 64, lens, torch.bfloat16, True, seed=1)
    want = torch_ref.decode_attention(q, k, v, table, rows, seq_lens, 0.125)
    out = torch.empty_like(q)
    got = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, 0.125, out=out)
    assert got is out and out.dtype == torch.bfloat16
    assert (out.float() - want.float()).abs().max().item() < 3e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_q_heads,num_kv_heads,head_dim", [(9, 3, 64), (8, 1, 128), (6, 2, 20)])
def test_a_large_batch_reading_whole_rows_equals_each_request_alone(dtype, num_q_heads, num_kv_heads, head_dim):
    """A batch of many requests goes one request per work item, all KV heads block by block; a request alone
    goes one KV head per item.  Both must give the same bits, and match the torch reference."""
    lens = [1, 7, 8, 9, 63, 64, 65, 128, 200, 513] * 4
    q, k, v, table, rows, seq_lens = _case(len(lens), num_q_heads, num_kv_heads, head_dim, lens, dtype, False, seed=3)
    scale = head_dim ** -0.5
    batched = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, scale)
    alone = torch.cat([cpu_native.decode_attention(q[b:b + 1], k, v, table, rows[b:b + 1], seq_lens[b:b + 1], scale)
                       for b in range(len(lens))])
    assert torch.equal(batched, alone)
    want = torch_ref.decode_attention(q.float(), k.float(), v.float(), table, rows, seq_lens, scale)
    assert (batched.float() - want).abs().max().item() < (2e-5 if dtype == torch.float32 else 3e-2)


LONG_LENS = [512, 600, 2048, 4100]   # attended in pieces of whole rows (SPLIT_FROM_KEYS = 512 in csrc)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_q_heads,num_kv_heads,head_dim", [(9, 3, 64), (8, 1, 128), (6, 2, 20)])
@pytest.mark.parametrize("contiguous_slots", [True, False])
def test_long_requests_attended_in_pieces_match_reference(dtype, num_q_heads, num_kv_heads, head_dim,
                                                          contiguous_slots):
    """A request of 512 keys or more is cut into pieces, attended by different threads and merged by log-sum-exp:
    within the plain kernel's own bounds of the torch reference (float32: a few float32 roundings of the softmax
    and sums; bfloat16: the inputs' rounding, as above), alone and beside short requests.  A piece dropped or
    weighted wrongly moves an output by the values' own size (about 1)."""
    lens = LONG_LENS + [3, 300]
    q, k, v, table, rows, seq_lens = _case(len(lens), num_q_heads, num_kv_heads, head_dim, lens, dtype,
                                           contiguous_slots, seed=5)
    scale = head_dim ** -0.5
    want = torch_ref.decode_attention(q.double(), k.double(), v.double(), table, rows, seq_lens, scale)
    got = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, scale)
    assert (got.double() - want).abs().max().item() < (2e-5 if dtype == torch.float32 else 3e-2)
    for b in range(len(LONG_LENS)):   # one long request alone: the most pieces per thread
        alone = cpu_native.decode_attention(q[b:b + 1], k, v, table, rows[b:b + 1], seq_lens[b:b + 1], scale)
        assert torch.equal(alone, got[b:b + 1]), lens[b]


def test_pieces_merge_with_a_prior():
    """Attention sinks reach the kernel as a prior (o, log-sum-exp) of no keys, as a shared prefix's attention does:
    the pieces' merge weighs it in (a prior ignored or counted twice moves each output by the sink's share)."""
    lens = [4100, 600, 20]
    q, k, v, table, rows, seq_lens = _case(len(lens), 4, 2, 64, lens, torch.float32, False, seed=7)
    sinks = torch.tensor([3.0, -1.0, 6.0, 0.5])   # [Hq]: shares from about 0 to most of a softmax
    want = torch_ref.decode_attention(q.double(), k.double(), v.double(), table, rows, seq_lens, 0.125,
                                      sinks=sinks.double())
    got = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, 0.125, sinks=sinks)
    assert (got.double() - want).abs().max().item() < 2e-5


def test_pieces_do_not_depend_on_the_thread_count():
    """How a request is cut depends on its key count alone: one thread or two give the same bits."""
    lens = [4100, 700, 40]
    q, k, v, table, rows, seq_lens = _case(len(lens), 9, 3, 64, lens, torch.bfloat16, True, seed=6)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, 0.125)
        torch.set_num_threads(2)
        two = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, 0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def test_large_scores_do_not_overflow():
    q, k, v, table, rows, seq_lens = _case(2, 4, 2, 64, [50, 300], torch.float32, True, seed=2)
    q = q * 40  # logits in the hundreds: the softmax must subtract the max
    want = torch_ref.decode_attention(q, k, v, table, rows, seq_lens, 0.125)
    got = cpu_native.decode_attention(q, k, v, table, rows, seq_lens, 0.125)
    assert torch.isfinite(got).all() and (got - want).abs().max().item() < 1e-4


def test_rejects_bad_inputs():
    q, k, v, table, rows, seq_lens = _case(2, 4, 2, 64, [5, 6], torch.float32, True)
    with pytest.raises(TypeError, match="int32"):
        cpu_native.decode_attention(q, k, v, table.long(), rows, seq_lens, 0.125)
    with pytest.raises(ValueError, match="contiguous"):
        cpu_native.decode_attention(q, k.transpose(0, 1), v, table, rows, seq_lens, 0.125)


def test_dispatch_cpu_backend():
    ops = dispatch.get_attention_ops("cpu", "cpu")
    assert ops.name == "cpu" and ops.decode_attention is cpu_native.decode_attention
    assert dispatch.get_attention_ops("auto", "cpu").name == "cpu"
    with pytest.raises(ValueError, match="CPU only"):
        dispatch.get_attention_ops("cpu", "cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_step_equals_store_then_decode_bit_for_bit(dtype):
    """The one-call decode step (store K/V, attend, cast) against the op-by-op path it replaces, on views into
    a fused qkv tensor as the model passes them: same output bits, same pool bits."""
    from radixlm.kernels.cpu_decode_step import DecodeStep

    hq, hkv, d = 9, 3, 64
    lens = [1, 5, 64, 65, 300] * 3
    _, k, v, table, rows, seq_lens = _case(len(lens), hq, hkv, d, lens, dtype, False, seed=4)
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(len(lens), hq + 2 * hkv, d, generator=g).to(dtype)   # [B, Hq+2Hkv, D]
    q, k_new, v_new = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
    loc = torch.stack([table[r, n - 1] for r, n in zip(rows.tolist(), lens)]).long()   # each request's last slot
    k_ref, v_ref = k.clone(), v.clone()
    torch_ref.store_kv(k_ref, v_ref, loc, k_new, v_new)
    want = cpu_native.decode_attention(q, k_ref, v_ref, table, rows, seq_lens, 0.125)
    got = DecodeStep(table, rows, seq_lens, loc).run(q, k_new, v_new, k, v, 0.125)
    assert got.dtype == dtype and torch.equal(got, want)
    assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
    assert DecodeStep(table, rows, seq_lens, loc).run(q.float() if dtype == torch.bfloat16 else q.bfloat16(),
                                                      k_new, v_new, k, v, 0.125) is None   # a mixed-dtype call


@pytest.mark.parametrize("flags", ["-mno-avx512f", "-mno-avx512bf16"])
def test_the_other_isa_builds_of_the_kernels_pass_the_same_tests(flags, tmp_path):
    """The attention kernels score bfloat16 keys by AVX512-BF16 pair dot products where the CPU has them,
    have 16-lane loops where it has AVX-512 and 8-lane ones elsewhere (so have the fused elementwise ops); on a
    machine with more, the builds without (-mno-avx512bf16, -mno-avx512f) run this file's tests (with the
    shared-prefix ones, which merge into the same loops, the fused ops' and the extend kernels') in a child
    process."""
    import subprocess
    import sys

    feature = flags.removeprefix("-mno-").replace("avx512bf16", "avx512_bf16")
    if feature not in cpu_native.cpu_features():
        pytest.skip(f"no {feature}: the default build is already the one without it")
    env = {**os.environ, "RADIXLM_NATIVE_CFLAGS": flags, "RADIXLM_CACHE_DIR": str(tmp_path)}
    others = [os.path.join(os.path.dirname(__file__), name) for name in ("test_cpu_shared_prefix.py",
                                                                         "test_cpu_fused_ops.py",
                                                                         "test_cpu_flash_f32.py",
                                                                         "test_cpu_packed_extend.py",
                                                                         "test_cpu_extend.py")]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, *others,
                           "-k", "not isa_builds"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and list(tmp_path.glob("kernels/radixlm_cpu-*.so"))
