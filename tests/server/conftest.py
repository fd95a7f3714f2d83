"""Fixtures: the tiny model, its tokenizer, and `server`: one shared real server (session scope) with an
API key and --check-ledger (a KV accounting error kills its scheduler, which later tests notice).
`fuzz_target`: the server both fuzzers hit.  `tool_server(kind)` and `thinking_server(kind)`: the tool-calling and reasoning servers that several files
test with different clients, started once per session each, on first use.
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


@pytest.fixture(scope="session")
def fuzz_target(tiny_llama, tmp_path_factory):
    """The server both fuzzers hit: no API key, --check-ledger, context 64 (short defaults: 1,000 bodies in
    minutes); it must survive them all."""
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("logs"), "--check-ledger", "--context-length", "64",
                        api_key=None).wait_ready()
    yield srv
    crashed = srv.proc.poll()
    srv.stop()
    assert crashed is None, f"the fuzzed server died:\n{srv.log()[-4000:]}"


def _started_once(tmp_path_factory, make_model):
    """kind -> one --check-ledger server of make_model(kind) with --max-total-tokens 32768, started on first use;
    every one must still be alive at the end of the session."""
    servers = {}

    def get(kind: str) -> ServerProcess:
        if kind not in servers:
            model, extra = make_model(kind)
            servers[kind] = ServerProcess(model, tmp_path_factory.mktemp("logs"), "--max-total-tokens", "32768",
                                          "--check-ledger", *extra).wait_ready()
        return servers[kind]

    yield get
    dead = {k: s.log()[-3000:] for k, s in servers.items() if s.proc.poll() is not None}
    for srv in servers.values():
        srv.stop()
    assert not dead, f"shared servers died during the tests: {dead}"


@pytest.fixture(scope="session")
def tool_server(tmp_path_factory):
    """tool_server(kind) for kind in TOOL_SERVERS: a tiny model with that tool-call template, or SmolLM2 on both
    cores (generic JSON calls: it does real work)."""
    from tool_models import TOOL_SERVERS, make_tool_model

    def make(kind):
        arch = TOOL_SERVERS[kind]
        return (make_tool_model(tmp_path_factory, arch), ()) if arch else ("smollm2-135m-instruct",
                                                                           ("--num-threads", "2"))
    yield from _started_once(tmp_path_factory, make)


@pytest.fixture(scope="session")
def thinking_server(tmp_path_factory):
    """thinking_server(kind) for kind in ("qwen3", "deepseek-r1"): reasoning_models.make_thinking_model's model."""
    from reasoning_models import make_thinking_model

    yield from _started_once(tmp_path_factory, lambda kind: (make_thinking_model(tmp_path_factory, kind), ()))
