"""--grammar-backend llguidance and auto reach the scheduler: through the real Engine, a JSON schema answer
that finishes validates with jsonschema (the oracle), and the server says which backend it runs."""

import json

import jsonschema
import pytest

from radixlm import Engine

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
                                           "tag": {"type": "string", "maxLength": 6}},
          "required": ["id", "tag"], "additionalProperties": False}


@pytest.mark.parametrize("backend", ["llguidance", "auto"])
def test_engine_with_grammar_backend(tiny_model, backend):
    with Engine(model=str(tiny_model("llama")), dtype="float32", grammar_backend=backend,
                log_level="warning") as engine:
        outs = engine.generate(input_ids=[[5, 6, 7, 8 + k] for k in range(4)],
                               sampling_params=[{"max_new_tokens": 96, "temperature": 0.8, "seed": k,
                                                 "json_schema": json.dumps(SCHEMA)} for k in range(4)])
        finished = [o for o in outs if o["meta_info"]["finish_reason"]["type"] == "stop"]
        for o in finished:
            jsonschema.validate(json.loads(o["text"]), SCHEMA)
        assert finished, [o["meta_info"]["finish_reason"] for o in outs]
        assert engine.get_server_info()["grammar_backend"] == backend
