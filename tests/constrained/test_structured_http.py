"""Structured output through the HTTP server and the unchanged `openai` SDK (SmolLM2, CPU).

Oracles: the SDK's own Pydantic parsing (`chat.completions.parse`), jsonschema, re.fullmatch, and the
400 error for an invalid regex that quotes XGrammar's message."""

import json
import re
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel


class Pet(BaseModel):
    species: Literal["cat", "dog", "parrot"]
    is_friendly: bool
    legs: Literal[2, 4]


@pytest.fixture(scope="module")
def server(smollm2_server):
    return smollm2_server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY", max_retries=0, timeout=300)


def test_parse_returns_a_pydantic_object(client):
    done = client.chat.completions.parse(
        model="default", messages=[{"role": "user", "content": "Describe a pet as JSON."}],
        response_format=Pet, temperature=0, max_tokens=64)
    pet = done.choices[0].message.parsed
    assert isinstance(pet, Pet) and done.choices[0].finish_reason == "stop"


def test_json_object_and_regex_extras(client):
    done = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Give a JSON object with a name."}],
        response_format={"type": "json_object"}, temperature=0, max_tokens=48)
    if done.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(done.choices[0].message.content), (dict, list))
    done = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "What is today's date?"}],
        temperature=0, max_tokens=16, extra_body={"regex": r"20\d{2}-\d{2}-\d{2}"})
    assert re.fullmatch(r"20\d{2}-\d{2}-\d{2}", done.choices[0].message.content)


def test_native_generate_json_schema_and_invalid_regex(server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = server.post("/generate", json={"text": "Answer:", "sampling_params": {
        "json_schema": json.dumps(schema), "temperature": 0, "max_new_tokens": 16}})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["text"]), schema)
    r = server.post("/generate", json={"text": "x", "sampling_params": {"regex": "(unclosed"}})
    assert r.status_code == 400 and "parenthesis is not closed" in r.text
