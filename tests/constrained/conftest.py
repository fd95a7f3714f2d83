"""The real SmolLM2 tokenizer (the grammar tests need a real byte-level BPE vocabulary), and grammar backends
over the tiny tokenizer."""

import pytest


@pytest.fixture(scope="session")
def smol_path():
    from radixlm.runtime.models.loader import resolve_model_path
    return str(resolve_model_path("smollm2-135m-instruct"))


@pytest.fixture(scope="session")
def smol_tokenizer(smol_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smol_path)


@pytest.fixture(scope="module")
def xgrammar_backend():
    """(tiny tokenizer, an XGrammar GrammarBackend over it)."""
    from tiny_models import make_tiny_tokenizer

    from radixlm.constrained.backend import GrammarBackend

    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="xgrammar", timeout_s=30)
    yield tok, backend
    backend.shutdown()


@pytest.fixture(scope="module")
def tiny():
    """(tiny tokenizer, {"xgrammar": backend, "auto": backend}) over it."""
    from tiny_models import make_tiny_tokenizer

    from radixlm.constrained.backend import GrammarBackend

    tok = make_tiny_tokenizer()
    backends = {e: GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=e) for e in ("xgrammar", "auto")}
    yield tok, backends
    for b in backends.values():
        b.shutdown()
