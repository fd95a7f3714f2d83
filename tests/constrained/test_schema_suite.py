"""The JSON-Schema-Test-Suite (draft 2020-12, vendored from the jsonschema sdist in
tests/data/json-schema-test-suite) against the compiled grammars of both engines.

Oracle: the suite's own verdicts.  For every schema a backend compiles, no instance the suite marks
invalid may be accepted by the matcher (its tokens and then the stop token); a schema it cannot
enforce must be refused instead (GrammarError, HTTP 400).  Valid instances may be refused only where
the grammar generates a subset on purpose (schema key order, one spelling per number, full-match
patterns, the number bounds): at least most of them are accepted, and every keyword radixlm claims has
schemas that compile.  The keywords enforced by a restriction (schema_restrict: dependencies, if/then,
uniqueItems as at most one item, patternProperties XGrammar cannot apply as a closed object) refuse many
valid instances by design: the valid instances of schemas
that hold those keywords are counted apart, and some must still be accepted."""

import collections
import glob
import json
import os

import pytest
from grammar_walk import accepts_text
from tiny_models import make_tiny_tokenizer

from radixlm.constrained.backend import GrammarBackend, GrammarError

SUITE = os.path.join(os.path.dirname(__file__), "..", "data", "json-schema-test-suite", "draft2020-12")
CLAIMED = ("type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
           "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
           "exclusiveMaximum", "anyOf", "ref", "allOf")
RESTRICTING_KEYS = ('"dependentRequired"', '"dependentSchemas"', '"dependencies"', '"if"', '"uniqueItems"',
                    '"patternProperties"')


def run_suite(engine: str):
    tok = make_tiny_tokenizer()
    eos = tok.eos_token_id
    backend = GrammarBackend(tok, len(tok), {eos}, engine=engine)
    stats = collections.defaultdict(collections.Counter)
    wrong = []
    try:
        for path in sorted(glob.glob(os.path.join(SUITE, "*.json"))):
            kw = os.path.basename(path)[:-5]
            with open(path) as f:
                groups = json.load(f)
            for group in groups:
                try:
                    compiled = backend.compile(("json", json.dumps(group["schema"])), timeout=60)
                except GrammarError:
                    stats[kw]["refused"] += len(group["tests"])
                    continue
                restricted = any(k in json.dumps(group["schema"]) for k in RESTRICTING_KEYS)
                for case in group["tests"]:
                    ok = accepts_text(backend.matcher(compiled), tok, json.dumps(case["data"]), eos)
                    if restricted and case["valid"]:
                        stats["(restricted)"]["valid_accepted" if ok else "valid_refused"] += 1
                        continue
                    if ok and not case["valid"]:
                        wrong.append((kw, group["description"], case["description"]))
                    stats[kw]["valid_accepted" if ok and case["valid"] else "valid_refused" if case["valid"]
                              else "invalid_refused"] += 1
    finally:
        backend.shutdown()
    return stats, wrong


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_no_invalid_instance_is_accepted(engine):
    stats, wrong = run_suite(engine)
    assert not wrong, f"{engine} accepted instances the suite marks invalid: {wrong[:5]}"
    total = sum(stats.values(), collections.Counter())
    assert total["invalid_refused"] > 150
    plain = sum((c for kw, c in stats.items() if kw != "(restricted)"), collections.Counter())
    assert plain["valid_accepted"] >= 0.7 * (plain["valid_accepted"] + plain["valid_refused"]), plain
    if engine == "xgrammar":
        assert stats["(restricted)"]["valid_accepted"] > 10, stats["(restricted)"]
    for kw in CLAIMED:
        assert stats[kw]["valid_accepted"] > 0 and stats[kw]["invalid_refused"] + stats[kw]["refused"] > 0, (kw, stats[kw])
