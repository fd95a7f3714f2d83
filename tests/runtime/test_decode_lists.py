"""The decode step's batched paths against the per-request ones they replace: one slot for every decode
(KVManager.alloc_decodes against alloc(req, 1) request by request), the runner's lists of a step of
decodes (decode_lists against row_lists), and a CPU int64 tensor made over an array (against torch.tensor);
and KVManager.trim to the middle of a page (the ledger as oracle)."""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlm.runtime.runner.step_inputs import int64_tensor
from radixlm.runtime.runner.step_lists import decode_lists, row_lists, step_lists
from radixlm.runtime.scheduler.kv_manager import KVManager
from radixlm.runtime.step import PENDING, StepRow


def _managers(page_size, lens, num_slots):
    """Two identical KV managers, each with one request per length holding that many slots."""
    out = []
    for _ in range(2):
        kv = KVManager(num_slots, num_rows=len(lens) + 1, page_size=page_size)
        reqs = [SimpleNamespace(kv_slots=[]) for _ in lens]
        for req, n in zip(reqs, lens):
            assert kv.alloc(req, n)
        out.append((kv, reqs))
    return out


@settings(max_examples=150, deadline=None)
@given(page_size=st.sampled_from([1, 2, 4, 16]), lens=st.lists(st.integers(1, 40), min_size=1, max_size=12),
       spare_pages=st.integers(-3, 6))
def test_alloc_decodes_equals_one_alloc_each(page_size, lens, spare_pages):
    used_pages = sum(-(-n // page_size) for n in lens)
    boundary = sum(1 for n in lens if n % page_size == 0)
    pages = max(used_pages, used_pages + boundary + spare_pages)
    (kv, reqs), (oracle_kv, oracle_reqs) = _managers(page_size, lens, pages * page_size)
    fits = oracle_kv.allocator.available() >= boundary * page_size
    before = [list(r.kv_slots) for r in reqs]
    assert kv.alloc_decodes(reqs) is fits
    if fits:
        for req in oracle_reqs:
            assert oracle_kv.alloc(req, 1)
        assert [r.kv_slots for r in reqs] == [r.kv_slots for r in oracle_reqs]
    else:   # all or none
        assert [r.kv_slots for r in reqs] == before
    assert kv.allocator.free_slots() == oracle_kv.allocator.free_slots()
    assert kv.allocator._is_free == oracle_kv.allocator._is_free


def _row(i, token, prefix, sample=True, table=()):
    return StepRow(f"r{i}", row=10 + i, prefix_len=prefix, extend_len=1, input_ids=[token], out_slots=[100 + i],
                   table_start=prefix, table_slots=list(table), sample=sample)


def test_decode_lists_equal_row_lists():
    rows = [_row(0, 5, 7, table=[100]), _row(1, PENDING, 3), _row(2, 9, 12, sample=False, table=[102]),
            _row(3, PENDING, 0, table=[103]), _row(4, 4, 30)]
    rows[1].table_start, rows[1].table_slots = 2, [50, 101]   # a row whose table lagged by a slot
    assert decode_lists(rows) == row_lists(rows)
    assert step_lists(rows) == row_lists(rows)
    lists = decode_lists(rows)
    assert lists.pending_at == [1, 3] and lists.pending_rows == [11, 13]
    assert lists.logits_idx == [0, 1, 3, 4] and lists.sample_rows == {0: 0, 1: 1, 3: 2, 4: 3}
    assert lists.table_rows == [10, 11, 11, 12, 13] and lists.table_cols == [7, 2, 3, 12, 0]


def test_a_step_with_an_extend_or_prompt_logprobs_goes_row_by_row():
    extend = StepRow("x", row=3, prefix_len=0, extend_len=3, input_ids=[1, 2, 3], out_slots=[7, 8, 9], sample=True)
    lists = step_lists([_row(0, 5, 7), extend])
    assert lists.input_ids == [5, 1, 2, 3] and lists.logits_idx == [0, 3]
    logprobs = _row(1, 6, 4)
    logprobs.logprob_positions, logprobs.logprob_targets = [4], [6]
    assert step_lists([_row(0, 5, 7), logprobs]).logits_idx == [0, 1, 1]


@pytest.mark.parametrize("xs", [[], [0], [PENDING, 2**62, -2**63, 5], list(range(300)), range(4, 9)])
def test_int64_tensor_equals_torch_tensor(xs):
    t = int64_tensor(xs)
    assert t.dtype == torch.int64 and t.device.type == "cpu"
    assert torch.equal(t, torch.tensor(list(xs), dtype=torch.int64))


@pytest.mark.parametrize("page_size", [1, 4])
def test_trim_mid_page_keeps_the_page_and_extends_into_it_again(page_size):
    """Forced text after a token in flight trims the request to before that token: the page holding its
    last kept slot stays with it (the ledger holds), and the next extend writes the same slots again."""
    from radixlm.radix_cache.ledger import check_ledger

    kv = KVManager(64, num_rows=2, page_size=page_size)
    req = SimpleNamespace(rid="r", kv_slots=[], cached_len=0, table_len=0)
    assert kv.alloc(req, 10)
    req.table_len = 10
    slots = list(req.kv_slots)
    kv.trim(req, 6)
    assert req.kv_slots == slots[:6] and req.table_len == 6
    check_ledger(kv.allocator, kv.tree, {"r": req.kv_slots})
    kept_pages = -(-6 // page_size)
    assert kv.allocator.available() == 64 - kept_pages * page_size
    assert kv.alloc(req, 4) and req.kv_slots[:kept_pages * page_size] == slots[:kept_pages * page_size]
    check_ledger(kv.allocator, kv.tree, {"r": req.kv_slots})
