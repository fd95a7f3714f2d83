"""Drive the real Scheduler in-process with a fake model whose output depends on its KV cache.

FakeRunner "computes" KV by writing (position, token) into the slot of every new token, then derives
the next token from the context it reads back through the req_to_token table.  If the scheduler ever
hands a request a wrong or stale slot, the token it reads back differs and the output diverges from
`oracle_generate`, which applies the same rule to the true token sequence.
"""

import os

from radixlm.runtime import io_struct as io
from radixlm.runtime.scheduler.config import SchedulerConfig
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.step import PENDING, EntryResult

VOCAB = 97
EOS = 0


def next_token(context: list) -> int:
    h = 7
    for t in context[-6:]:
        h = (h * 31 + t) % 1000003
    return 1 + (h + len(context)) % (VOCAB - 1)   # never EOS


def repeating_token(context: list) -> int:
    """A rule whose text often repeats itself (so drafts from prompt lookup are often right): mostly
    the token 4 back, sometimes next_token."""
    if len(context) >= 4 and (context[-1] * 7 + context[-2]) % 5:
        return context[-4]
    return next_token(context)


def oracle_generate(prompt: list, n: int, rule=next_token) -> list:
    seq, out = list(prompt), []
    for _ in range(n):
        t = rule(seq)
        out.append(t)
        seq.append(t)
    return out


class FakeRunner:
    def __init__(self, num_slots=4096, num_rows=64, context_len=4096, rule=next_token):
        self.num_slots, self.num_rows, self.context_len = num_slots, num_rows, context_len
        self.rule = rule
        self.vocab_size = VOCAB
        self.eos_token_ids = {EOS}
        self.kv = [None] * num_slots
        self.table = [[None] * (context_len + 1) for _ in range(num_rows)]
        self.steps = []
        self.last_sampled = {}   # table row -> the token last sampled for it

    def launch(self, batch):
        """Computes the whole step at once (the result is the handle); a PENDING input is the token this
        runner last sampled for that table row, as the device keeps it under overlap scheduling."""
        self.steps.append([(r.rid, r.prefix_len, r.extend_len) for r in batch.rows])
        results = []
        for r in batch.rows:
            end = r.prefix_len + r.extend_len
            row = self.table[r.row]
            for k, slot in enumerate(r.table_slots):
                row[r.table_start + k] = slot
            fed = [self.last_sampled[r.row] if t == PENDING else t for t in r.input_ids]
            for p, tok in zip(range(r.prefix_len, end), fed):
                self.kv[row[p]] = (p, tok)
            context = []
            for p in range(end):
                pos, tok = self.kv[row[p]]
                assert pos == p, f"{r.rid}: slot {row[p]} holds position {pos}, expected {p}"
                context.append(tok)
            res = EntryResult()
            if r.sample and r.draft:   # greedy verification: keep drafts while they equal the rule's token
                real_end = end - len(r.draft)
                tokens = [self.rule(context[:real_end])]
                while len(tokens) <= len(r.draft) and tokens[-1] == r.draft[len(tokens) - 1]:
                    tokens.append(self.rule(context[:real_end + len(tokens)]))
                res.next_token, res.next_tokens = tokens[0], tokens
            elif r.sample:
                res.next_token = self.last_sampled[r.row] = self.rule(context)
            if r.logprob_positions:
                res.input_logprobs = [[-float(t), t, None] for t in r.logprob_targets]
            results.append(res)
        return results

    def collect(self, handle):
        return handle

    def forward_step(self, batch):
        return self.collect(self.launch(batch))


class ListInbox:
    def __init__(self):
        self.msgs = []

    def recv(self, block=False):
        out, self.msgs = self.msgs, []
        return out


class ListOutbox:
    def __init__(self):
        self.msgs = []

    def send(self, msg):
        self.msgs.append(msg)


def make_scheduler(runner=None, **config):
    config.setdefault("check_ledger", True)
    config.setdefault("overlap_schedule", os.environ.get("RADIXLM_ENABLE_OVERLAP") == "1")
    runner = runner or FakeRunner()
    return Scheduler(SchedulerConfig(**config), runner, None, ListInbox(), ListOutbox())


def submit(sched, rid, prompt, max_new_tokens=8, **kw):
    params = {"max_new_tokens": max_new_tokens, "temperature": 0, **kw.pop("params", {})}
    sched.handlers[io.TokenizedGenerateReq](io.TokenizedGenerateReq(rid, list(prompt), params, **kw))


def run_until_idle(sched, max_steps=100000):
    for _ in range(max_steps):
        if not sched.has_work():
            return
        sched.step()
    raise AssertionError("scheduler did not become idle")


def collect(sched) -> dict:
    """rid -> {'tokens', 'finish_reason', 'cached_tokens', 'input_logprobs'} from everything sent."""
    out: dict = {}
    for msg in sched.outbox.msgs:
        if not isinstance(msg, io.BatchTokenOut):
            continue
        for i, rid in enumerate(msg.rids):
            r = out.setdefault(rid, {"tokens": [], "finish_reason": None, "cached_tokens": 0, "input_logprobs": None,
                                     "output_logprobs": []})
            r["tokens"].extend(msg.new_token_ids[i])
            r["output_logprobs"].extend(msg.output_logprobs[i] or [])
            r["finish_reason"] = msg.finish_reasons[i] or r["finish_reason"]
            r["cached_tokens"] = msg.cached_tokens[i]
            if msg.input_logprobs[i] is not None:
                r["input_logprobs"] = msg.input_logprobs[i]
    return out


def assert_greedy_serving_matches_hf(path):
    """A model folder through the real runner and scheduler, prefills in chunks of 8: two requests at once, then a
    third that reuses the first's prompt (16 tokens, past every tiny model's window) from the radix cache (for a model
    with a recurrent state per request, from the state snapshot kept where that prompt ended), each giving HF's greedy
    tokens.  Returns HF's model."""
    import random

    import torch
    from tiny_models import hf_auto_class
    from transformers import AutoConfig

    from radixlm.runtime.models.loader import read_model_config
    from radixlm.runtime.runner.model_runner import ModelRunner

    vocab = read_model_config(path).vocab_size
    rng = random.Random(3)
    prompts = [[rng.randrange(3, vocab) for _ in range(n)] for n in (16, 19)]
    reqs = [("a", prompts[0], 10), ("b", prompts[1], 8), ("c", prompts[0] + prompts[1][:3], 9)]
    sched = make_scheduler(ModelRunner(str(path), dtype="float32", max_total_tokens=2048, num_rows=16),
                           chunked_prefill_size=8)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True})
        if rid == "b":
            run_until_idle(sched)
    run_until_idle(sched)
    out = collect(sched)
    assert out["c"]["cached_tokens"] >= 16
    hf = hf_auto_class(AutoConfig.from_pretrained(str(path)).model_type).from_pretrained(
        str(path), dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None   # as ignore_eos: the end token may be chosen and is not the end
    for rid, prompt, n in reqs:
        with torch.no_grad():
            want = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
        assert out[rid]["tokens"] == want[0, len(prompt):].tolist(), rid
    return hf
