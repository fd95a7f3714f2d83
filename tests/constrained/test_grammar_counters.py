"""The counters bench/json_decode.py reads: per-request forward_passes and the grammar mask time.

The real Scheduler and ModelRunner on a tiny random Llama with its byte-level BPE tokenizer.
Oracles: a wrapper around the runner that counts, from the plans, the passes in which each request
sampled and the steps with a constrained sampled row; completion_tokens = forward_passes + the
tokens jump-forward added; the regex itself.
"""

import collections
import re

import pytest
from scheduler_io import ListOutbox, NoInbox

from radixlm.runtime import io_struct as io
from radixlm.runtime.runner.model_runner import ModelRunner
from radixlm.runtime.scheduler.config import SchedulerConfig
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server.detokenizer import Detokenizer

FORCED = r"(alpha|beta)_identifier_with_a_long_fixed_suffix"


class PlanCounter:
    """The real runner; counts from each plan the passes in which a request sampled, and the steps in
    which a sampled row was grammar-constrained (those the runner must mask)."""

    def __init__(self, runner):
        self.runner = runner
        self.samples = collections.Counter()
        self.masked_steps = 0

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def launch(self, batch):
        self.samples.update(r.rid for r in batch.rows if r.sample)
        self.masked_steps += bool(batch.mask_rows)
        return self.runner.launch(batch)

    def launch_forward(self, batch):   # a step with masks: they are filled after this call
        self.samples.update(r.rid for r in batch.rows if r.sample)
        return self.runner.launch_forward(batch)

    def launch_sampling(self, forwarded):
        self.masked_steps += bool(forwarded.batch.mask_rows)
        return self.runner.launch_sampling(forwarded)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_model("llama"))


def _run(sched, tokenizer, requests):
    """Submit {rid: sampling params} on one prompt, step until idle, and collect each request's ids,
    text, finish reason and counters through the wire and the detokenizer, as the Engine gets them."""
    prompt = tokenizer.encode("Hello, world! How are you today?")
    for rid, params in requests.items():
        sched.handlers[io.TokenizedGenerateReq](io.TokenizedGenerateReq(rid, prompt, {"temperature": 0, **params}))
    while sched.has_work():
        sched.step()
    detok, final = Detokenizer(tokenizer), {}
    for msg in sched.outbox.msgs:
        out = io.decode(io.encode(detok.handle(io.decode(io.encode(msg), "detokenizer"))), "tokenizer")
        for i, rid in enumerate(out.rids):
            r = final.setdefault(rid, {"ids": [], "text": ""})
            r["ids"] += out.new_token_ids[i]
            r["text"] += out.text_deltas[i]
            r.update(passes=out.forward_passes[i], completion=out.completion_tokens[i], reason=out.finish_reasons[i])
    return final


def test_forward_passes_and_mask_time(tiny_model, tokenizer):
    runner = PlanCounter(ModelRunner(str(tiny_model("llama")), dtype="float32", max_total_tokens=2048, num_rows=8))
    sched = Scheduler(SchedulerConfig(check_ledger=True), runner, tokenizer, NoInbox(), ListOutbox())
    final = _run(sched, tokenizer, {
        "free": {"max_new_tokens": 80, "ignore_eos": True},   # outlives the constrained ones
        "jump": {"max_new_tokens": 64, "regex": FORCED},
        "masks_only": {"max_new_tokens": 64, "regex": FORCED, "jump_forward": False},
    })

    assert final["free"]["passes"] == final["free"]["completion"] == 80
    for rid in ("jump", "masks_only"):
        r = final[rid]
        assert r["reason"]["type"] == "stop", r
        assert re.fullmatch(FORCED, r["text"]), r["text"]
        assert r["completion"] == len(r["ids"])
    for rid, r in final.items():
        assert r["passes"] == runner.samples[rid], rid
    # masks only: one pass per token (the last one samples the stop token)
    assert final["masks_only"]["passes"] == final["masks_only"]["completion"]
    # jump-forward: the forced suffix costs no pass of its own
    assert sched.forced.jump_forward_tokens > 0
    assert final["jump"]["passes"] + sched.forced.jump_forward_tokens == final["jump"]["completion"]
    assert final["jump"]["passes"] < final["masks_only"]["passes"]

    stats = sched.server_info()
    assert stats["grammar_mask_steps"] == runner.masked_steps > 0
    assert stats["grammar_mask_steps"] < stats["steps"]          # the free request decodes on alone
    assert 0 < stats["grammar_mask_seconds"] < stats["forward_seconds"]
    assert stats["grammar_backend"] == "xgrammar"                 # reported while no compile is queued


def test_stop_inside_jump_forward_text(tiny_model, tokenizer):
    """A stop string or stop token that lies inside grammar-forced text ends the request there, with
    or without jump-forward (which appends that text without sampling it)."""
    runner = ModelRunner(str(tiny_model("llama")), dtype="float32", max_total_tokens=2048, num_rows=8)
    sched = Scheduler(SchedulerConfig(check_ledger=True), runner, tokenizer, NoInbox(), ListOutbox())
    underscore = tokenizer.encode("_")[0]
    base = {"max_new_tokens": 64, "regex": FORCED}
    final = _run(sched, tokenizer, {
        "string_jump": {**base, "stop": ["with_a"]},
        "string_masks": {**base, "stop": ["with_a"], "jump_forward": False},
        "token_jump": {**base, "stop_token_ids": [underscore]},
        "token_masks": {**base, "stop_token_ids": [underscore], "jump_forward": False},
    })
    assert sched.forced.jump_forward_tokens > 0
    for rid in ("string_jump", "string_masks"):
        r = final[rid]
        assert r["reason"] == {"type": "stop", "matched": "with_a"}, (rid, r)
        assert re.fullmatch(r"(alpha|beta)_identifier_", r["text"]), (rid, r["text"])
    for rid in ("token_jump", "token_masks"):  # the forced text starts with "_": cut right after it
        r = final[rid]
        assert r["reason"] == {"type": "stop", "matched": underscore}, (rid, r)
        assert r["ids"][-1] == underscore and r["text"] in ("alpha", "beta"), (rid, r)
    assert final["string_jump"]["text"] == final["string_masks"]["text"]
    assert final["token_jump"]["ids"] == final["token_masks"]["ids"]
