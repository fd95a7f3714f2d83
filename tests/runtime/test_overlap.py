"""Overlap scheduling gives token for token what plain scheduling gives (the oracle: the same workload with
overlap off), and it does overlap: the scheduler plans step N+1 before step N's tokens reach the host.

Scheduler level: the real scheduler around the fake runner of scheduler_harness (a token that depends on the
KV it reads back, so a stale or wrong slot changes the output), with stop token ids, stop strings, max new
tokens, tight KV (retraction), aborts at fixed steps, logprobs and n-gram drafts.  Engine level: the real
model on the CPU (deterministic mode, so a different batch composition cannot change a token), with greedy,
seeded and penalised sampling, stop strings, a JSON schema with jump-forward and KV pressure."""

import json

import pytest
from scheduler_harness import FakeRunner, collect, make_scheduler, repeating_token, submit

from radixlm.runtime import io_struct as io


class CharTokenizer:
    """Token t is the letter chr(97 + t % 26): enough for stop strings."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + t % 26) for t in ids)


def _workload(seed):
    import random
    rng = random.Random(seed)
    shared = [rng.randrange(1, 97) for _ in range(40)]
    reqs = []
    for k in range(14):
        prompt = (shared if k % 2 else []) + [rng.randrange(1, 97) for _ in range(rng.randrange(3, 60))]
        params = {}
        if k % 5 == 1:
            params["stop_token_ids"] = [rng.randrange(1, 97) for _ in range(6)]
        if k % 5 == 2:
            params["stop"] = ["e", "zz"]
        kw = {"return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 1} if k % 7 == 3 else {}
        reqs.append((f"r{k}", prompt, rng.randrange(1, 40), params, kw))
    return reqs


def _run(overlap, reqs, aborts=(), **config):
    sched = make_scheduler(FakeRunner(**config.pop("runner", {})), overlap_schedule=overlap, **config)
    sched.finish.tokenizer = CharTokenizer()
    for rid, prompt, n, params, kw in reqs:
        submit(sched, rid, prompt, n, params=params, **kw)
    for step in range(100000):
        if not sched.has_work():
            break
        for at, rid in aborts:
            if at == step:
                sched.handlers[io.AbortReq](io.AbortReq(rid))
        sched.step()
    assert not sched.has_work()
    assert sched.kv.allocator.available() + sched.kv.tree.total_size() == sched.kv.allocator.total
    return collect(sched), sched.stats


@pytest.mark.parametrize("config", [
    {},
    {"max_running_requests": 3},
    {"runner": {"num_slots": 260}},                      # KV pressure: retraction and eviction
    {"chunked_prefill_size": 16, "max_prefill_tokens": 16},
    {"page_size": 4},
], ids=["plain", "few-rows", "tight-kv", "chunked", "pages"])
def test_scheduler_outputs_equal_without_overlap(config):
    reqs = _workload(1)
    plain, plain_stats = _run(False, reqs, **json.loads(json.dumps(config)))   # _run pops from its own copy
    over, stats = _run(True, reqs, **json.loads(json.dumps(config)))
    assert over == plain
    assert plain_stats.overlapped_steps == 0 and stats.overlapped_steps > stats.launched_steps // 3


def test_aborts_in_flight_equal_without_overlap():
    reqs = _workload(2)
    aborts = [(3, "r0"), (5, "r5"), (9, "r9"), (9, "r10"), (20, "r13")]
    plain, _ = _run(False, reqs, aborts)
    over, _ = _run(True, reqs, aborts)
    for rid in plain:   # an abort arrives at the same step; what was sent before it may differ by one step
        assert over[rid]["finish_reason"]["type"] == plain[rid]["finish_reason"]["type"]
        if plain[rid]["finish_reason"]["type"] != "abort":
            assert over[rid] == plain[rid]


def test_drafts_equal_without_overlap():
    reqs = [(f"r{k}", [3, 5, 7, 3, 5, 7, 3, 5] * (k + 1), 24, {}, {}) for k in range(5)]
    plain, _ = _run(False, reqs, speculative_algorithm="ngram", runner={"rule": repeating_token})
    over, _ = _run(True, reqs, speculative_algorithm="ngram", runner={"rule": repeating_token})
    assert over == plain


def _engines(tiny_model, arch="llama", **extra):
    from radixlm import Engine
    path = str(tiny_model(arch))
    opts = {**dict(model=path, dtype="float32", deterministic=True, max_total_tokens=700, max_running_requests=12,
                   log_level="warning"), **extra}
    return Engine(disable_overlap_schedule=True, **opts), Engine(enable_overlap_schedule=True, **opts)


@pytest.fixture(scope="module")
def engines(tiny_model):
    plain, over = _engines(tiny_model)
    with plain, over:
        yield plain, over


def _engine_requests():
    prompts = [[5 + k, 17, 42, 99 - k, 7] * (1 + k % 4) for k in range(16)]
    params = []
    for k in range(16):
        p = {"max_new_tokens": 12 + 5 * (k % 5), "temperature": 0}
        if k % 4 == 1:
            p.update(temperature=0.9, top_p=0.9, seed=k)
        if k % 4 == 2:
            p.update(stop=["a", "e"])
        if k % 8 == 3:
            p.update(frequency_penalty=0.5, repetition_penalty=1.2)
        if k % 8 == 7:
            p.update(json_schema=json.dumps({"type": "object", "properties": {"n": {"type": "integer"}},
                                             "required": ["n"]}))
        params.append(p)
    return prompts, params


def test_engine_outputs_equal_without_overlap(engines):
    plain, over = engines
    prompts, params = _engine_requests()
    a = plain.generate(input_ids=prompts, sampling_params=params)
    b = over.generate(input_ids=prompts, sampling_params=params)
    assert [o["output_ids"] for o in b] == [o["output_ids"] for o in a]
    assert [o["meta_info"]["finish_reason"] for o in b] == [o["meta_info"]["finish_reason"] for o in a]
    info = over.get_server_info()
    assert info["overlapped_steps"] > 0 and plain.get_server_info()["overlapped_steps"] == 0


GRAMMARS = [
    {"json_schema": json.dumps({"type": "object", "properties": {
        "kind": {"enum": ["alpha_response", "beta_response"]}, "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"const": "fixed_tag_value"}, "maxItems": 3}},
        "required": ["kind", "n", "tags"], "additionalProperties": False})},
    {"regex": r"(first|second)_answer: [a-z]{2,6}\.( The end\.)?"},
    {"json_schema": json.dumps({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
                                "required": ["name"]})},
    {"regex": r"[0-9]{1,3}", "jump_forward": False},
]


@pytest.mark.parametrize("page_size", [1, 4])
def test_grammar_steps_overlap_and_equal_without_overlap(engines, tiny_model, page_size):
    """Grammar steps are planned and their forwards launched before the step before is applied; a row whose
    request that step finished, or whose input forced text replaced (jump-forward, with the sampled token
    retokenized), is dropped and its KV taken back (to the middle of a page with pages of 4), so the tokens
    are those of plain scheduling."""
    if page_size == 1:
        _grammar_workload(*engines)
    else:
        plain, over = _engines(tiny_model, page_size=page_size)
        with plain, over:
            _grammar_workload(plain, over)


def _grammar_workload(plain, over):
    prompts = [[5 + k, 17, 42, 99 - k, 7] * (1 + k % 3) for k in range(12)]
    params = [{"max_new_tokens": 48, "temperature": 0, **GRAMMARS[k % len(GRAMMARS)]} for k in range(12)]
    for k in (2, 7):
        params[k].update(temperature=0.8, seed=k)
    before = over.get_server_info()
    a = plain.generate(input_ids=prompts, sampling_params=params)
    b = over.generate(input_ids=prompts, sampling_params=params)
    assert [o["output_ids"] for o in b] == [o["output_ids"] for o in a]
    assert [o["meta_info"]["finish_reason"] for o in b] == [o["meta_info"]["finish_reason"] for o in a]
    info = over.get_server_info()
    launched = info["launched_steps"] - before["launched_steps"]
    assert info["overlapped_steps"] - before["overlapped_steps"] > launched // 2
    assert info["dropped_in_flight"] > before["dropped_in_flight"]
    assert plain.get_server_info()["overlapped_steps"] == 0


def test_a_recurrent_model_overlaps_its_decodes_with_outputs_and_cache_hits_of_plain_scheduling(tiny_model):
    """A gated delta net (Qwen3.5): only plain decodes stay in flight, prompts, prefill chunks and grammars (jump-
    forward) are collected first (launcher.py); stop strings, penalties, grammars and second turns that start from
    the first's snapshots give the tokens of plain scheduling."""
    pytest.importorskip("transformers.models.qwen3_5")
    # one request at a time: the same shapes in both schedules without --deterministic (hybrids refuse it)
    plain, over = _engines(tiny_model, "qwen3_5", chunked_prefill_size=16, deterministic=False, max_running_requests=1)
    with plain, over:
        prompts, params = _engine_requests()
        prompts, params = prompts[2:4], params[2:4]   # stop strings, penalties; then jump-forward
        params.append({"max_new_tokens": 24, "temperature": 0, **GRAMMARS[0]})
        prompts.append(prompts[0])
        a = plain.generate(input_ids=prompts, sampling_params=params)
        b = over.generate(input_ids=prompts, sampling_params=params)
        assert [o["output_ids"] for o in b] == [o["output_ids"] for o in a]
        turn2 = [p + o["output_ids"] + [3, 4] for p, o in zip(prompts, a)]
        a2 = plain.generate(input_ids=turn2, sampling_params=params)
        b2 = over.generate(input_ids=turn2, sampling_params=params)
        assert [o["output_ids"] for o in b2] == [o["output_ids"] for o in a2]
        assert sum(o["meta_info"]["cached_tokens"] for o in b2) > 0
        assert over.get_server_info()["overlapped_steps"] > 0
