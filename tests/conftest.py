"""Shared fixtures: tiny random models built once per session (see tiny_models.py), and one SmolLM2 server."""

import os
import pathlib
import sys

import pytest
import torch

if not torch.cuda.is_available():
    # Before anything imports triton (collecting the sglang frontend tests does): the Triton kernel tests
    # run under the interpreter on CPU, and a triton imported without it breaks them.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tiny_models import make_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny_model(arch) -> Path of a saved tiny model, built once per session and arch."""
    built = {}

    def get(arch: str):
        if arch not in built:
            built[arch] = make_tiny_model(tmp_path_factory, arch)
        return built[arch]

    return get


@pytest.fixture(scope="session")
def make_tiny(tmp_path_factory):
    """make_tiny(arch, max_shard_size=None) -> Path of a freshly built tiny model."""
    return lambda arch, max_shard_size=None: make_tiny_model(tmp_path_factory, arch, max_shard_size)


@pytest.fixture(scope="session")
def smollm2_server(tmp_path_factory):
    """One `radixlm serve` of SmolLM2 (--check-ledger, 8,192 KV tokens, no API key) for every file that asks: the
    sglang kits and test programs, structured output over HTTP.  It must live to the end of the session."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "server"))
    from server_harness import ServerProcess

    srv = ServerProcess("smollm2-135m-instruct", tmp_path_factory.mktemp("smollm2-logs"), "--check-ledger",
                        "--max-total-tokens", "8192", api_key=None).wait_ready()
    yield srv
    crashed = srv.proc.poll()
    srv.stop()
    assert crashed is None, f"the shared SmolLM2 server died:\n{srv.log()[-4000:]}"


_FILE_CACHES = ("_CASES", "_REFS")   # module-level dicts of HF oracles and their logits, kept for one test file


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Leaving a test file, after its fixtures are torn down: drop the HF oracles its module keeps for the file
    (FamilyCases, _CASES, _REFS) and the models logits_oracle.Paged loaded, so the session does not hold every
    family's.  RADIXLM_TEST_RSS_LOG=FILE appends the file's name and this process's resident and peak memory (MB)."""
    yield
    if nextitem is not None and nextitem.module is item.module:
        return
    import gc

    for name, obj in vars(item.module).items():
        if type(obj).__name__ == "FamilyCases":
            obj.cases.clear()
        elif name in _FILE_CACHES and isinstance(obj, dict):
            obj.clear()
    oracle = sys.modules.get("logits_oracle")
    if oracle is not None:   # the models (and KV pools) Paged loaded for this file
        oracle.Paged._loaded.clear()
    gc.collect()
    if sys.platform == "linux":   # give the freed pages back, so the session's memory is what it still holds
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    log = os.environ.get("RADIXLM_TEST_RSS_LOG")
    if log:
        status = dict(line.split(":", 1) for line in pathlib.Path("/proc/self/status").read_text().splitlines())
        with open(log, "a") as f:
            f.write(f"{item.module.__name__} {int(status['VmRSS'].split()[0]) // 1024} "
                    f"{int(status['VmHWM'].split()[0]) // 1024}\n")
