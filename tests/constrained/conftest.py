"""The real SmolLM2 tokenizer (the grammar tests need a real byte-level BPE vocabulary)."""

import pytest


@pytest.fixture(scope="session")
def smol_path():
    from radixlm.runtime.models.loader import resolve_model_path
    return str(resolve_model_path("smollm2-135m-instruct"))


@pytest.fixture(scope="session")
def smol_tokenizer(smol_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smol_path)
