"""Req keeps one token list (prompt and output are views of it), and a step matches each waiting
request's prefix once (policy order, then admission reuses it). Oracles: plain lists, a fresh match."""

import pytest

from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.kv_manager import KVManager
from radixlm.runtime.scheduler.policy import SchedulePolicy
from radixlm.runtime.scheduler.req import Req


def test_prompt_and_output_are_views_of_the_one_token_list():
    req = Req("a", [5, 6, 7], SamplingParams())
    ids = req.fill_ids
    req.output_ids.append(8)
    req.output_ids.extend([9, 10, 11])
    assert req.fill_ids is ids and ids == [5, 6, 7, 8, 9, 10, 11]
    prompt, out = [5, 6, 7], [8, 9, 10, 11]
    assert req.origin_input_ids == prompt and req.output_ids == out
    assert len(req.output_ids) == 4 and req.seq_len == 7 and req.prompt_len == 3
    for i in range(-4, 4):
        assert req.output_ids[i] == out[i]
    for sl in (slice(1, None), slice(None, -1), slice(-2, None), slice(3, 1), slice(None, None, 2)):
        assert req.output_ids[sl] == out[sl] and req.origin_input_ids[sl] == prompt[sl]
    assert list(req.origin_input_ids) + list(req.output_ids) == ids
    assert req.origin_input_ids + req.output_ids == ids and [1] + req.output_ids == [1] + out
    with pytest.raises(IndexError):
        req.output_ids[4]
    with pytest.raises(IndexError):
        req.origin_input_ids[3]
    del req.output_ids[2:]
    assert ids == [5, 6, 7, 8, 9] and req.output_ids == [8, 9] and req.origin_input_ids == prompt
    del req.output_ids[len(req.output_ids):]  # deleting nothing is fine
    with pytest.raises(TypeError):
        del req.output_ids[0:1]  # only a tail: the prompt never moves


def _kv_with_prefix(prefix):
    kv = KVManager(1000, 8)
    owner = Req("owner", prefix, SamplingParams())
    kv.admit(owner, 0, kv.tree.match_prefix([]))
    assert kv.alloc(owner, len(prefix))
    kv.release(owner)  # caches the prefix in the tree, unlocked
    return kv


class CountingTree:
    """The real tree, counting match_prefix calls."""

    def __init__(self, tree):
        self.tree, self.calls = tree, 0

    def match_prefix(self, key, namespace=None):
        self.calls += 1
        return self.tree.match_prefix(key, namespace)

    def __getattr__(self, name):
        return getattr(self.tree, name)


@pytest.mark.parametrize("policy", ["lpm", "dfs-weight"])
def test_admission_reuses_the_policys_match(policy):
    prefix = list(range(100, 164))
    kv = _kv_with_prefix(prefix)
    counting = CountingTree(kv.tree)
    kv.tree = counting
    waiting = [Req(str(i), prefix[: 10 * (i + 1)] + [1, 2, 3], SamplingParams()) for i in range(5)]
    SchedulePolicy(policy, counting).order(waiting, step=0)
    assert counting.calls == len(waiting)
    for req in waiting:
        fresh = kv.tree.tree.match_prefix(req.fill_ids)
        usable, match = kv.match(req)
        assert match.slots == fresh.slots and usable == min(fresh.length, req.seq_len - 1)
    assert counting.calls == len(waiting)  # admission matched nothing again (the oracle bypasses the count)
    assert all(r.prefix_match is None for r in waiting)   # used once


def test_an_evicted_match_is_matched_again():
    prefix = list(range(100, 164))
    kv = _kv_with_prefix(prefix)
    req = Req("r", prefix + [1], SamplingParams())
    SchedulePolicy("lpm", kv.tree).order([req], step=0)
    assert req.prefix_match.length == 64
    kv.allocator.free(kv.tree.evict(10_000))  # another admission's allocation evicts the prefix
    assert req.prefix_match.node.removed
    usable, match = kv.match(req)
    assert usable == 0 and match.length == 0 and not match.node.removed


def test_a_previous_steps_match_is_not_reused_under_fcfs():
    prefix = list(range(100, 164))
    kv = _kv_with_prefix(prefix)
    req = Req("r", prefix + [1], SamplingParams())
    SchedulePolicy("lpm", kv.tree).order([req], step=0)
    stale = req.prefix_match
    SchedulePolicy("fcfs", kv.tree).order([req], step=1)
    assert req.prefix_match is None and stale is not None
