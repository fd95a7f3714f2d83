"""Under --grammar-backend auto, a JSON schema whose XGrammar compile runs past --grammar-timeout is handed
to llguidance (which builds masks lazily) instead of refused; under xgrammar it is still refused.
Oracle: the queue's verdicts on futures whose timing the test controls, and the llguidance matcher's
verdicts on valid and invalid instances (jsonschema)."""

import json
import time
from concurrent.futures import Future
from types import SimpleNamespace

import jsonschema
import pytest
from grammar_walk import accepts_text
from tiny_models import make_tiny_tokenizer

from radixlm.constrained.backend import GrammarBackend
from radixlm.constrained.compile import LLG_AFTER_TIMEOUT
from radixlm.constrained.errors import GrammarTimeout
from radixlm.constrained.queue import GrammarQueue

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}, "required": ["n"],
          "additionalProperties": False}


class StuckBackend:
    """The real queue against a compile that does not finish in time: a started future past its deadline
    (the in-process lanes), or one failed with GrammarTimeout (the slow lane's worker, stopped)."""

    def __init__(self, engine: str, how: str):
        self.options = SimpleNamespace(engine=engine)
        self.how = how
        self.second = []

    def submit(self, key):
        fut = Future()
        fut.set_running_or_notify_cancel()
        fut.deadline = time.monotonic() + 0.2
        if self.how == "worker":
            fut.set_exception(GrammarTimeout("grammar compilation timed out after 5 s"))
        return fut

    def after_timeout(self, key):
        if self.options.engine != "auto":
            return None
        fut = Future()
        fut.set_result(("compiled by llguidance", key))
        self.second.append(key)
        return fut

    def matcher(self, compiled):
        return compiled


@pytest.mark.parametrize("how", ["deadline", "worker"])
@pytest.mark.parametrize("engine", ["xgrammar", "auto"])
def test_queue_hands_a_timed_out_schema_to_the_second_engine(engine, how):
    backend = StuckBackend(engine, how)
    queue = GrammarQueue(backend, timeout_s=5)
    req = SimpleNamespace(rid="r", grammar=None)
    queue.add(req, ("json", json.dumps(SCHEMA)))
    if how == "deadline":
        assert queue.poll() == ([], []) and len(queue) == 1     # still compiling: kept as it was
        time.sleep(0.3)
    ready, failed = queue.poll()
    if engine == "xgrammar":
        assert not ready and failed and "timed out" in failed[0][1]
        return
    assert not failed and not ready and len(queue) == 1      # waiting for llguidance now
    ready, failed = queue.poll()
    assert ready == [req] and req.grammar[0] == "compiled by llguidance" and not failed
    assert backend.second == [("json", json.dumps(SCHEMA))]


def test_after_timeout_compiles_with_llguidance():
    tok = make_tiny_tokenizer()
    eos = tok.eos_token_id
    backend = GrammarBackend(tok, len(tok), {eos}, engine="auto")
    try:
        key = ("json", json.dumps(SCHEMA))
        compiled = backend.after_timeout(key).result(60)
        assert compiled.engine == "llguidance" and compiled.kind == "json"
        for instance in ({"n": 3}, {"n": 2}, {"n": 3, "m": 1}, {}):
            got = accepts_text(backend.matcher(compiled), tok, json.dumps(instance), eos)
            assert got == jsonschema.Draft202012Validator(SCHEMA).is_valid(instance), instance
        assert backend.pool.lane_of((LLG_AFTER_TIMEOUT, "x" * 100000)) == "quick"   # never behind XGrammar
    finally:
        backend.shutdown()
    xgr_only = GrammarBackend(tok, len(tok), {eos}, engine="xgrammar")
    try:
        assert xgr_only.after_timeout(key) is None
    finally:
        xgr_only.shutdown()


def test_llguidance_refusals_name_the_keyword():
    from radixlm.constrained import llg
    from radixlm.constrained.errors import GrammarError

    nested = {"type": "object", "properties": {"a~b": {"type": "array", "uniqueItems": True, "minItems": 2}}}
    with pytest.raises(GrammarError, match="keyword 'uniqueItems' at /properties/a~0b/uniqueItems is not enforced"):
        llg.check("json", json.dumps(nested), False, True)
    for schema, keyword in (({"type": "array", "uniqueItems": True, "minItems": 2}, "uniqueItems"),
                            ({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]}, "oneOf")):
        with pytest.raises(GrammarError, match=f"keyword '{keyword}' at /{keyword} is not enforced"):
            llg.check("json", json.dumps(schema), False, True)


def test_a_refusal_after_a_timeout_still_names_the_keyword():
    """XGrammar timed out (a busy host's worker can, on a schema its audit would have sent to llguidance at once)
    and llguidance refuses the schema too: the 400 names the keyword and pointer XGrammar's audit finds, whatever
    llguidance says (JSONSchemaBench wp_5: "Schema intersection stack level exceeded")."""
    from radixlm.constrained.errors import GrammarError

    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="auto")
    try:
        schema = {"type": "object", "properties": {"v": {"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 0}]}}}
        with pytest.raises(GrammarError) as err:
            backend.after_timeout(("json", json.dumps(schema))).result(60)
        # named by XGrammar's audit before llguidance speaks (whose own errors need not name one)
        assert "--grammar-timeout, and json_schema keyword 'oneOf' at /properties/v/oneOf" in str(err.value), str(err.value)
    finally:
        backend.shutdown()
