"""The grammar mask through xgrammar's kernel (sampler.apply_grammar_bitmask) against the
hand unpacking it replaced, kept here as the reference."""

import pytest
import torch

from radixlm.runtime.runner.sampler import apply_grammar_bitmask


def reference_mask(logits, bitmask, rows, vocab_size):
    """The old path: unpack the rows' bits into a [B, V] bool (free rows all allowed), masked_fill."""
    words = bitmask.shape[1]
    bits = torch.arange(32, dtype=torch.int32)                                          # [32]
    allowed = ((bitmask[rows].unsqueeze(-1) >> bits) & 1).bool().view(len(rows), words * 32)[:, :vocab_size]
    mask = torch.ones((logits.shape[0], vocab_size), dtype=torch.bool)                  # [B, V]
    mask[rows] = allowed
    return logits.masked_fill(~mask, float("-inf"))


@pytest.mark.parametrize("vocab_size", [32, 49152, 1000, 77])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_unpacking_reference(vocab_size, dtype):
    g = torch.Generator().manual_seed(vocab_size)
    B, W = 6, (vocab_size + 31) // 32
    logits = torch.randn(B, vocab_size, generator=g).to(dtype)
    bitmask = torch.randint(-2**31, 2**31 - 1, (B, W), generator=g, dtype=torch.int64).to(torch.int32)
    bitmask[1] = -1   # every token allowed
    bitmask[3] = 0    # none allowed
    rows = [0, 1, 3, 5]
    before = logits.clone()
    got = apply_grammar_bitmask(logits, bitmask, rows, vocab_size)
    assert torch.equal(logits, before)  # a copy: the unmasked logits stay for the logprobs
    want = reference_mask(logits, bitmask, rows, vocab_size)
    assert got.dtype == dtype and torch.equal(got, want)
    assert torch.isinf(got[3]).all() and torch.equal(got[2], logits[2])


def test_free_rows_bitmask_is_never_read():
    logits = torch.randn(3, 64)
    bitmask = torch.zeros(3, 2, dtype=torch.int32)
    bitmask[0] = 0x0F0F0F0F
    got = apply_grammar_bitmask(logits, bitmask, [0], 64)
    assert torch.equal(got[1:], logits[1:])
    assert torch.equal(got[0], reference_mask(logits, bitmask, [0], 64)[0])


def test_a_real_grammar_bitmask(tmp_path):
    xgr = pytest.importorskip("xgrammar")
    vocab = [f"t{i}" for i in range(60)] + ["a", "b", "<eos>"]
    info = xgr.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_regex("(ab)+"))
    V = len(vocab)
    bitmask = torch.empty(2, (V + 31) // 32, dtype=torch.int32)
    matcher.fill_next_token_bitmask(bitmask, 1)
    logits = torch.randn(2, V)
    got = apply_grammar_bitmask(logits, bitmask, [1], V)
    assert torch.equal(got, reference_mask(logits, bitmask, [1], V))
    assert torch.isfinite(got[1]).tolist() == [t == "a" for t in vocab]
