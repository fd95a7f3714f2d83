"""A step with grammar masks is launched in two calls: the runner launches the forward, the scheduler
fills the masks (while a GPU would run that forward), then the runner samples.

The real Scheduler and ModelRunner on a tiny random Llama.  Oracles: the same requests through the same
runner offering only the one-call launch (masks filled before it), which must give the same tokens and
finish reasons; and the order of the calls, recorded by a wrapper that sees each step's mask rows.
"""

import json

import pytest
from scheduler_io import ListOutbox, NoInbox

from radixlm.runtime import io_struct as io
from radixlm.runtime.runner.model_runner import ModelRunner
from radixlm.runtime.scheduler.config import SchedulerConfig
from radixlm.runtime.scheduler.scheduler import Scheduler

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "tags": {"type": "array", "items": {"enum": ["red", "green"]}}},
          "required": ["name", "tags"], "additionalProperties": False}
REQUESTS = {
    "free": {"max_new_tokens": 40, "ignore_eos": True},
    "schema": {"max_new_tokens": 60, "json_schema": json.dumps(SCHEMA)},
    "schema_sampled": {"max_new_tokens": 60, "json_schema": json.dumps(SCHEMA), "temperature": 0.8, "seed": 3},
    "regex_masks_only": {"max_new_tokens": 40, "regex": r"(alpha|beta)_[a-z]{3,8}", "jump_forward": False},
}


class OneCall:
    """The runner as a runner without launch_forward: the launcher fills the masks, then calls launch."""

    def __init__(self, runner):
        self._runner = runner

    def __getattr__(self, name):
        if name in ("launch_forward", "launch_sampling"):
            raise AttributeError(name)
        return getattr(self._runner, name)


class CallOrder:
    """The runner, recording ("forward", mask rows then) and ("sampling", mask rows then) for each split step."""

    def __init__(self, runner):
        self._runner = runner
        self.calls = []

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def launch_forward(self, batch):
        self.calls.append(("forward", len(batch.mask_rows)))
        return self._runner.launch_forward(batch)

    def launch_sampling(self, forwarded):
        self.calls.append(("sampling", len(forwarded.batch.mask_rows)))
        return self._runner.launch_sampling(forwarded)


def _run(runner, tokenizer, **config):
    sched = Scheduler(SchedulerConfig(check_ledger=True, **config), runner, tokenizer, NoInbox(), ListOutbox())
    prompt = tokenizer.encode("Hello, world! How are you today?")
    for rid, params in REQUESTS.items():
        sched.handlers[io.TokenizedGenerateReq](io.TokenizedGenerateReq(rid, prompt, {"temperature": 0, **params}))
    while sched.has_work():
        sched.step()
    out = {}
    for msg in sched.outbox.msgs:
        if isinstance(msg, io.BatchTokenOut):
            for i, rid in enumerate(msg.rids):
                r = out.setdefault(rid, {"ids": []})
                r["ids"] += msg.new_token_ids[i]
                if msg.finish_reasons[i] is not None:
                    r["reason"] = msg.finish_reasons[i]
    sched.grammar_queue.backend.shutdown()
    return out, sched


@pytest.fixture(scope="module")
def runner(tiny_model):
    return ModelRunner(str(tiny_model("llama")), dtype="float32", max_total_tokens=4096, num_rows=8, device="cpu")


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_model("llama"))


@pytest.mark.parametrize("config", [{}, {"speculative_algorithm": "ngram"}], ids=["plain", "ngram-drafts"])
def test_masks_filled_beside_the_forward_give_the_same_tokens(runner, tokenizer, config):
    one_call, _ = _run(OneCall(runner), tokenizer, **config)
    order = CallOrder(runner)
    split, sched = _run(order, tokenizer, **config)
    assert split == one_call
    assert set(split) == set(REQUESTS) and all("reason" in r for r in split.values())
    # every split step: the forward launched before any mask row was filled, the sampling after
    assert order.calls and len(order.calls) % 2 == 0
    for (first, before), (second, after) in zip(order.calls[::2], order.calls[1::2]):
        assert (first, before, second) == ("forward", 0, "sampling") and after > 0
    assert sched.server_info()["grammar_mask_steps"] == len(order.calls) // 2
