"""Every finished output on every JSONSchemaBench dev schema validates with jsonschema.

The decoder is the tiny random model's sampling over the grammar's masks (grammar_walk), biased toward
tokens that close strings, objects and arrays so that most walks finish within the step budget.
Oracle: jsonschema (Draft 2020-12, or the schema's own $schema) on every `stop` output, against the
schema as sent; a `length` finish is counted apart.  A refused schema must carry a message (a 400),
and the ones XGrammar refuses for a keyword name it with its JSON pointer.  All 100 schemas, 2 walks
each, both the default engine and auto."""

import glob
import json
import os
import random

import jsonschema
import pytest
from grammar_walk import walk
from tiny_models import make_tiny_tokenizer

from radixlm.constrained.backend import GrammarBackend, GrammarError

DEV = os.path.join(os.path.dirname(__file__), "..", "data", "jsonschemabench-dev", "schemas")
STEPS = 400


def closing(tok):
    texts = [tok.decode([i]) for i in range(len(tok))]
    return {i for i, t in enumerate(texts) if any(c in t for c in '"}]') or t.strip() in ("0", "1", "true", "null")}


@pytest.mark.parametrize("engine", ["xgrammar", "auto"])
def test_every_finished_output_validates(engine):
    tok = make_tiny_tokenizer()
    eos = tok.eos_token_id
    close = closing(tok) | {eos}
    backend = GrammarBackend(tok, len(tok), {eos}, engine=engine, timeout_s=30)
    rng = random.Random(0)
    counts = {"stop": 0, "length": 0, "refused": 0}
    bad = []
    try:
        for path in sorted(glob.glob(os.path.join(DEV, "*.json"))):
            with open(path) as f:
                text = f.read()
            schema = json.loads(text)
            try:
                compiled = backend.compile(("json", text), timeout=120)
            except GrammarError as exc:
                counts["refused"] += 1
                assert str(exc)
                if "is not enforced" in str(exc):
                    assert " at /" in str(exc) or " at  " not in str(exc)
                continue
            validator = jsonschema.validators.validator_for(schema)(schema)
            for _ in range(2):
                ids, done = walk(backend.matcher(compiled), len(tok), rng, STEPS,
                                 prefer=lambda allowed: [i for i in allowed if i in close], bias=0.6)
                if not done:
                    counts["length"] += 1
                    continue
                counts["stop"] += 1
                try:
                    out = json.loads(tok.decode(ids[:-1]))
                except ValueError as exc:
                    bad.append((os.path.basename(path), f"not JSON: {exc}: {tok.decode(ids[:-1])[:200]!r}"))
                    continue
                errors = list(validator.iter_errors(out))
                if errors:
                    bad.append((os.path.basename(path), errors[0].message[:200]))
    finally:
        backend.shutdown()
    print(engine, counts)
    assert not bad, bad[:12]
    assert counts["stop"] >= 100
