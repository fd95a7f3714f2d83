"""Fixtures: the tiny model, its tokenizer, and `server`: one shared real server (session scope) with an
API key and --check-ledger (a KV accounting error kills its scheduler, which later tests notice).
"""

import pytest
from server_harness import ServerProcess, load_make_tiny_model


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    return load_make_tiny_model()(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def tokenizer(tiny_llama):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(tiny_llama))


@pytest.fixture(scope="session")
def server(tiny_llama, tmp_path_factory):
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("logs"), "--check-ledger").wait_ready()
    yield srv
    crashed = srv.proc.poll()
    code = srv.stop()
    assert crashed is None, f"the shared server died during the tests:\n{srv.log()[-4000:]}"
    assert code == 0, f"the shared server exited with {code} on SIGTERM"
