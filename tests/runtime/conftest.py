"""Fixtures of the model tests (test_model_logits.py, test_native_decode_steps.py)."""

import random

import pytest
from logits_oracle import HF, TINY_ARCHS

from radixlm.runtime.models.loader import load_tokenizer, resolve_model_path


@pytest.fixture(scope="session")
def smollm2_path():
    """The embedded default model, converted from GGUF once into the user cache."""
    return resolve_model_path("smollm2-135m-instruct")


@pytest.fixture(scope="module", params=TINY_ARCHS + ("smollm2",))
def case(request, tiny_model, smollm2_path):
    """-> (path, hf model, token ids of a 22-token sequence)."""
    if request.param == "smollm2":
        path = smollm2_path
        tok = load_tokenizer(path)
        ids = tok.encode("The capital of France is Paris. Counting: one, two, three, four, five", add_special_tokens=False)
    else:
        path = tiny_model(request.param)
        ids = random.Random(7).choices(range(load_tokenizer(path).vocab_size), k=22)
    ids = (ids * 2)[:22]
    return path, HF(path), ids
