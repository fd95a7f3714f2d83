"""Real-world schemas (tests/data/real-world-schemas: Compose spec, Meltano, Snapcraft, Codecov, GitHub's issue
config, Task, Woodpecker CI ...) compile on both the default engine and auto, and every finished output validates.

The decoder is the tiny random model's sampling over the grammar's masks (grammar_walk), biased toward tokens that
close strings, objects and arrays.  Oracle: jsonschema, against the schema as sent (its own $schema's draft)."""

import glob
import json
import os
import random

import jsonschema
import pytest
from grammar_walk import walk
from tiny_models import make_tiny_tokenizer

from radixlm.constrained.backend import GrammarBackend

FOLDER = os.path.join(os.path.dirname(__file__), "..", "data", "real-world-schemas")
SCHEMAS = sorted(glob.glob(os.path.join(FOLDER, "*.json")))


@pytest.mark.parametrize("engine", ["xgrammar", "auto"])
def test_every_schema_compiles_and_every_finished_output_validates(engine):
    tok = make_tiny_tokenizer()
    eos = tok.eos_token_id
    texts = [tok.decode([i]) for i in range(len(tok))]
    close = {i for i, t in enumerate(texts) if any(c in t for c in '"}]') or t.strip() in ("0", "1", "true", "null")}
    close.add(eos)
    backend = GrammarBackend(tok, len(tok), {eos}, engine=engine, timeout_s=60)
    rng, finished, bad = random.Random(0), 0, []
    try:
        for path in SCHEMAS:
            with open(path) as f:
                text = f.read()
            schema = json.loads(text)
            compiled = backend.compile(("json", text), timeout=120)
            validator = jsonschema.validators.validator_for(schema)(schema)
            for _ in range(3):
                ids, done = walk(backend.matcher(compiled), len(tok), rng, 600,
                                 prefer=lambda allowed: [i for i in allowed if i in close], bias=0.6)
                if not done:
                    continue
                finished += 1
                out = json.loads(tok.decode(ids[:-1]))
                errors = list(validator.iter_errors(out))
                if errors:
                    bad.append((os.path.basename(path), errors[0].message[:200]))
    finally:
        backend.shutdown()
    assert len(SCHEMAS) == 13
    assert not bad, bad
    assert finished >= 26
