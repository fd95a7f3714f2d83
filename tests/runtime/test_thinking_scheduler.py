"""The scheduler's thinking state: a grammar held until the end-of-thinking ids, the thinking budget,
with and without overlap scheduling and speculative drafts.

The real Scheduler (XGrammar matchers, jump-forward) with a scripted runner on the tiny Qwen3 thinking
tokenizer: each row's next token is the script's, unless the grammar mask refuses it, then the lowest
allowed id.  Oracles: the script (the thinking is its tokens exactly, so nothing constrained it), the
regex over the answer's text, and the same run without overlap."""

import re

import pytest
from reasoning_models import make_thinking_tokenizer
from scheduler_harness import FakeRunner, ListInbox, ListOutbox, collect

from radixlm.runtime import io_struct as io
from radixlm.runtime.scheduler.config import SchedulerConfig
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.scheduler.thinking import Thinking

ANSWER = r"(yes|no)"
THOUGHT = "<think>\nThe user wants one word. Maybe 42, maybe not!\n</think>\n\nHello there, friend."


class ScriptedRunner(FakeRunner):
    """FakeRunner (which checks every KV slot it reads) whose rule follows a script of output ids."""

    def __init__(self, tokenizer, prompt_len: int, script: list, filler: int):
        super().__init__(rule=self._script)
        self.vocab_size = len(tokenizer)
        self.eos_token_ids = {tokenizer.eos_token_id}
        self.prompt_len, self.script, self.filler = prompt_len, script, filler
        self.masked_rows = 0

    def _script(self, context: list) -> int:
        k = len(context) - self.prompt_len
        return self.script[k] if k < len(self.script) else self.filler

    def launch(self, batch):
        """A masked position whose token the mask refuses gets the lowest allowed id instead, and a draft's
        verified run ends there (as the sampler masks every draft position)."""
        results = super().launch(batch)
        first = 0
        for r, res in zip(batch.rows, results):
            if not r.sample:
                continue
            tokens = res.next_tokens or [res.next_token]
            for i, t in enumerate(tokens):
                if first + i not in batch.mask_rows:
                    continue
                self.masked_rows += 1
                allowed = [v for v in range(self.vocab_size) if (int(batch.mask[first + i, v // 32]) >> (v % 32)) & 1]
                if t not in allowed:
                    tokens = tokens[:i] + [allowed[0]]
                    break
            res.next_token, res.next_tokens = tokens[0], (tokens if r.draft else None)
            self.last_sampled[r.row] = tokens[-1]
            first += len(r.draft) + 1
        return results


@pytest.fixture(scope="module")
def tok():
    return make_thinking_tokenizer("qwen3")


def _prompt(tok):
    text = tok.apply_chat_template([{"role": "user", "content": "Answer yes or no."}], tokenize=False,
                                   add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def _run(tok, requests: dict, script: list, **config):
    prompt = _prompt(tok)
    runner = ScriptedRunner(tok, len(prompt), script, filler=tok.encode(" x")[0])
    sched = Scheduler(SchedulerConfig(check_ledger=True, **config), runner, tok, ListInbox(), ListOutbox())
    for rid, params in requests.items():
        sched.handlers[io.TokenizedGenerateReq](io.TokenizedGenerateReq(rid, prompt, {"temperature": 0, **params}))
    for _ in range(5000):
        if not sched.has_work():
            break
        sched.step()
    return collect(sched), runner, sched


def _split(tok, ids: list):
    end = tok.convert_tokens_to_ids("</think>")
    at = ids.index(end) + 1
    return ids[:at], tok.decode(ids[at:], skip_special_tokens=True)


@pytest.mark.parametrize("overlap", [False, True])
def test_grammar_starts_after_the_thinking(tok, overlap):
    end = tok.convert_tokens_to_ids("</think>")
    script = tok.encode(THOUGHT)
    thinking_part = script[:script.index(end) + 1]
    outs, runner, _ = _run(tok, {
        "thinks": {"max_new_tokens": 80, "regex": ANSWER, "think_end_ids": [end]},
        "plain": {"max_new_tokens": 80, "regex": ANSWER},
    }, script, overlap_schedule=overlap)
    think, answer = _split(tok, outs["thinks"]["tokens"])
    assert think == thinking_part                              # the thinking was never masked
    assert re.fullmatch(ANSWER, answer), answer
    assert outs["thinks"]["finish_reason"]["type"] == "stop"
    plain = tok.decode(outs["plain"]["tokens"], skip_special_tokens=True)
    assert re.fullmatch(ANSWER, plain)                          # no think ids: constrained from the start
    assert runner.masked_rows > 0


@pytest.mark.parametrize("overlap", [False, True])
def test_budget_forces_the_end_of_thinking(tok, overlap):
    end = tok.convert_tokens_to_ids("</think>")
    script = tok.encode("<think>\n" + "and so on, " * 40)          # never ends its thinking
    budget = 12
    outs, _, sched = _run(tok, {
        "grammar": {"max_new_tokens": 60, "regex": ANSWER, "think_end_ids": [end], "max_thinking_tokens": budget},
        "free": {"max_new_tokens": 30, "think_end_ids": [end], "max_thinking_tokens": budget},
        "no_room": {"max_new_tokens": budget, "think_end_ids": [end], "max_thinking_tokens": budget},
    }, script, overlap_schedule=overlap)
    think, answer = _split(tok, outs["grammar"]["tokens"])
    assert think == script[:budget] + [end]
    assert re.fullmatch(ANSWER, answer) and outs["grammar"]["finish_reason"]["type"] == "stop"
    free = outs["free"]["tokens"]
    assert free[:budget + 1] == script[:budget] + [end] and len(free) == 30   # then free text up to its length
    assert end not in outs["no_room"]["tokens"]                # no room for an answer: nothing forced
    assert outs["no_room"]["finish_reason"]["type"] == "length"
    assert sched.forced.forced_thinking_tokens == 2


def test_overlap_equals_no_overlap(tok):
    end = tok.convert_tokens_to_ids("</think>")
    script = tok.encode(THOUGHT)
    reqs = {f"r{i}": {"max_new_tokens": 40 + i, "think_end_ids": [end], "regex": ANSWER if i % 2 else None,
                      "max_thinking_tokens": 8 + i if i % 3 == 0 else None} for i in range(6)}
    reqs = {rid: {k: v for k, v in p.items() if v is not None} for rid, p in reqs.items()}
    plain, _, _ = _run(tok, reqs, script, overlap_schedule=False)
    over, _, _ = _run(tok, reqs, script, overlap_schedule=True)
    assert {r: o["tokens"] for r, o in plain.items()} == {r: o["tokens"] for r, o in over.items()}


def test_drafts_never_carry_unmasked_answer_tokens(tok):
    """n-gram drafts from a prompt that holds the whole scripted output run past `</think>` into answer
    tokens the grammar refuses: the step keeps the tokens up to the end of the thinking only."""
    end = tok.convert_tokens_to_ids("</think>")
    script = tok.encode(THOUGHT)
    prompt = tok.encode(THOUGHT + "\n") + _prompt(tok)
    runner = ScriptedRunner(tok, len(prompt), script, filler=tok.encode(" x")[0])
    sched = Scheduler(SchedulerConfig(check_ledger=True, speculative_algorithm="ngram"), runner, tok, ListInbox(),
                      ListOutbox())
    sched.handlers[io.TokenizedGenerateReq](io.TokenizedGenerateReq(
        "r", prompt, {"temperature": 0, "max_new_tokens": 60, "regex": ANSWER, "think_end_ids": [end]}))
    while sched.has_work():
        sched.step()
    out = collect(sched)["r"]
    think, answer = _split(tok, out["tokens"])
    assert think == script[:script.index(end) + 1]
    assert re.fullmatch(ANSWER, answer), answer
    assert sched.speculator.accepted_tokens > 0


def test_force_ids_complete_a_marker_begun():
    class R:
        def __init__(self, out):
            self.output_ids, self.output_len, self.grammar = out, len(out), None
    t = Thinking([7, 8, 9], budget=3)
    assert t.force_ids(R([1, 2, 7, 8])) == [9] and t.force_ids(R([1, 7])) == [8, 9] and t.force_ids(R([9])) == [7, 8, 9]
    req = R([1, 2, 3])
    assert t.over_budget(req) and t.force_end(req) == 3 and req.output_ids == [1, 2, 3, 7, 8, 9]
    assert t.done and t.answer_start == 3 and not t.over_budget(req)


@pytest.mark.parametrize("overlap", [False, True])
def test_stop_token_while_thinking_gives_way_to_the_answer(tok, overlap):
    """A constrained request must answer: eos sampled inside the thinking becomes the end ids; without a
    grammar the eos ends the request as usual."""
    end, eos = tok.convert_tokens_to_ids("</think>"), tok.eos_token_id
    script = tok.encode("<think>\nShort.") + [eos] + tok.encode(" more text")
    stop_at = script.index(eos)
    outs, _, sched = _run(tok, {
        "grammar": {"max_new_tokens": 60, "regex": ANSWER, "think_end_ids": [end]},
        "free": {"max_new_tokens": 60, "think_end_ids": [end]},
        "tight": {"max_new_tokens": stop_at + 1, "regex": ANSWER, "think_end_ids": [end]},
    }, script, overlap_schedule=overlap)
    think, answer = _split(tok, outs["grammar"]["tokens"])
    assert think == script[:stop_at] + [end] and re.fullmatch(ANSWER, answer)
    assert outs["free"]["tokens"] == script[:stop_at + 1] and outs["free"]["finish_reason"]["type"] == "stop"
    assert outs["tight"]["tokens"] == script[:stop_at + 1]        # no room for an answer: the stop stays
    assert sched.forced.forced_thinking_tokens == 1
