"""llguidance past its limits.  A template's deep copies share its lexer, and the lexer's limits count every state
any copy built: JSONSchemaBench Github_hard o62065 (word-count patterns with lengths) spent them within one
answer, after which every new copy started in error and its masks allowed nothing.  Here the limits are made
small (max_lexer_states=200) so that a few tokens spend them.

Oracles: llguidance's own is_error/get_error, the mask of a fresh copy, and the request's finish reason."""

import json
import random

import llguidance
import pytest
from grammar_walk import allowed_ids
from scheduler_io import ListOutbox, NoInbox
from tiny_models import make_tiny_tokenizer

from radixlm.constrained import llg
from radixlm.constrained.backend import GrammarBackend
from radixlm.constrained.llg import LlgMatcher

SCHEMA = {"type": "string", "maxLength": 60, "pattern": "^(?:\\S+\\s+){0,9}\\S+$"}


@pytest.fixture()
def small_limits(monkeypatch):
    def template(llg_tokenizer, grammar, raised=False):
        return llguidance.LLMatcher(llg_tokenizer, grammar, log_level=0,
                                    limits=llguidance.LLParserLimits(max_lexer_states=200))
    monkeypatch.setattr(llg, "template", template)


def _walk_until_stopped(matcher, vocab, rng, steps=200):
    import torch

    bitmask = torch.zeros(1, (vocab + 31) // 32, dtype=torch.int32)
    for _ in range(steps):
        bitmask.zero_()
        matcher.fill_bitmask(bitmask, 0)
        allowed = allowed_ids(bitmask, vocab)
        if not allowed or matcher.is_terminated():
            return allowed
        if not matcher.accept_token(rng.choice(allowed)):
            return []
    return None


def test_a_template_whose_copies_spent_its_limits_is_built_again(small_limits):
    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="llguidance")
    try:
        compiled = backend.compile(("json", json.dumps(SCHEMA)), timeout=60)
        old = compiled.grammar
        first = backend.matcher(compiled)
        assert _walk_until_stopped(first, len(tok), random.Random(0)) == []      # nothing allowed any more
        assert first.error and "\n" not in first.error, first.error
        assert compiled.grammar is not old                    # built again for the requests to come
        import torch

        bitmask = torch.zeros(1, (len(tok) + 31) // 32, dtype=torch.int32)
        stale = LlgMatcher(old.deep_copy(), len(tok), [tok.eos_token_id])
        stale.fill_bitmask(bitmask, 0)
        assert stale.error and not allowed_ids(bitmask, len(tok))   # a copy of the old one starts stopped
        bitmask.zero_()
        fresh = backend.matcher(compiled)
        fresh.fill_bitmask(bitmask, 0)
        assert fresh.error is None and allowed_ids(bitmask, len(tok))
        compiled.grammar = old      # a request that copies a spent template recovers at its first mask
        bitmask.zero_()
        again = backend.matcher(compiled)
        again.fill_bitmask(bitmask, 0)
        assert again.error is None and allowed_ids(bitmask, len(tok)) and compiled.grammar is not old
    finally:
        backend.shutdown()


def test_a_request_whose_grammar_engine_stops_ends_with_a_400_saying_why(small_limits, tiny_model):
    """Through the real Scheduler and ModelRunner (tiny random Llama): the request ends as an abort with status
    400 and llguidance's reason, instead of a 500 for a refused token; the scheduler serves the next request."""
    from transformers import AutoTokenizer

    from radixlm.runtime import io_struct as io
    from radixlm.runtime.runner.model_runner import ModelRunner
    from radixlm.runtime.scheduler.config import SchedulerConfig
    from radixlm.runtime.scheduler.scheduler import Scheduler

    tokenizer = AutoTokenizer.from_pretrained(tiny_model("llama"))
    runner = ModelRunner(str(tiny_model("llama")), dtype="float32", max_total_tokens=2048, num_rows=8)
    sched = Scheduler(SchedulerConfig(check_ledger=True, grammar_backend="llguidance"), runner, tokenizer,
                      NoInbox(), ListOutbox())
    prompt = tokenizer.encode("Hello, world!")
    for rid, params in (("words", {"json_schema": json.dumps(SCHEMA), "max_new_tokens": 120}),
                        ("free", {"max_new_tokens": 8, "ignore_eos": True})):
        sched.handlers[io.TokenizedGenerateReq](io.TokenizedGenerateReq(rid, prompt, {"temperature": 1.0, "seed": 3,
                                                                                      **params}))
    while sched.has_work():
        sched.step()
    reasons = {}
    for msg in sched.outbox.msgs:
        if isinstance(msg, io.BatchTokenOut):
            for i, rid in enumerate(msg.rids):
                if msg.finish_reasons[i] is not None:
                    reasons[rid] = msg.finish_reasons[i]
    assert reasons["free"]["type"] == "length"
    words = reasons["words"]
    assert words["type"] == "abort" and words["status_code"] == 400, words
    assert "grammar engine stopped" in words["message"] and "lexer" in words["message"], words


def test_a_grammar_past_its_lexer_fuel_is_built_again_with_more(smol_path):
    """Github_easy o21053: two word-count patterns up to 5,000 characters.  With SmolLM2's vocabulary, opening the
    first string spends llguidance's default lexer fuel for one mask, and a fresh template with the same limits
    stops again at the same place; built again with RAISED_LIMITS, the replayed copy goes on."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smol_path)
    words = {"minLength": 1, "maxLength": 5000, "pattern": "^$|(^(?:\\S+\\s+){0,99}\\S+$)", "type": "string"}
    schema = {"type": "object", "properties": {"question": words, "answer": words},
              "additionalProperties": False, "required": ["question", "answer"]}
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="llguidance")
    try:
        compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
        matcher = backend.matcher(compiled)
        assert matcher.accept_tokens(tok.encode('{"question": "<', add_special_tokens=False))
        import torch

        bitmask = torch.zeros(1, (len(tok) + 31) // 32, dtype=torch.int32)
        matcher.fill_bitmask(bitmask, 0)
        allowed = allowed_ids(bitmask, len(tok))
        assert matcher.error is None and len(allowed) > 1000, matcher.error
        assert not matcher.is_terminated() and matcher.accept_token(allowed[0])
    finally:
        backend.shutdown()
