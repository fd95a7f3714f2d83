"""SGLang's own frontend test programs (`sglang.test.test_programs`, sglang 0.5.23) through the real
`sglang` frontend's RuntimeEndpoint against `radixlm serve`: their assertions are the oracle.

They run twice: with the real frontend, and with `radixlm` imported in place of `sglang` (item 5: radixlm's
own frontend as a drop-in for `sglang.lang`), on the server and on the in-process Engine.  The protocol
programs run on the tiny random model; those that need real text to produce what their
assertion parses (finished JSON, a computable expression) run on the default SmolLM2.  See
test_sglang_frontend.py for how sglang is imported without its GPU runtime.
"""

import importlib.util
import re
import types
import warnings

import pytest

import radixlm as rl

sgl = pytest.importorskip("sglang")
test_programs = pytest.importorskip("sglang.test.test_programs")

pytestmark = pytest.mark.timeout(1800)

# name -> the keyword arguments it runs with (check_answer=False: the variant that checks the protocol)
ON_TINY = {
    "test_mt_bench": {}, "test_select": {"check_answer": False}, "test_expert_answer": {"check_answer": False},
    "test_parallel_decoding": {}, "test_stream": {}, "test_regex": {},
    "test_dtype_gen": {}, "test_chat_completion_speculative": {},
}
ON_SMOLLM2 = {"test_decode_json_regex": {}, "test_tool_use": {}}

# Not run, with the reason.  Every test_* function of the module is either run or listed here.
EXCLUDED = {
    "test_few_shot_qa": "judges the model's knowledge (Washington, Tokyo, London, Beijing); SmolLM2-135M "
                        "answers 'New York'",
    "test_decode_int": "judges the answers 24 and 365; SmolLM2-135M writes 24000...",
    "test_react": "judges the model's answer (Finland or the States)",
    "test_decode_json": "samples at temperature 1.0 (run's default) within max_new_tokens=64, and its string "
                        "regex is unbounded: whether SmolLM2 closes the string in time is chance (it passed "
                        "and failed on the same server); test_decode_json_regex is its greedy twin",
    "test_parallel_encoding": "joins forks with mode='concate_and_append', which calls "
                              "/concate_and_append_request: a route SGLang's own server does not serve either",
    "test_image_qa": "needs example_image.png and a vision model; radixlm serves text models",
    "test_completion_speculative": "reads backend.token_usage, which only SGLang's OpenAI-API backends have "
                                   "(num_api_spec_tokens is an API-model feature)",
    "test_stream_logprobs": "a race in sglang 0.5.23's frontend: its executor keeps only the latest stream "
                            "event's meta_info per variable, so an async reader that wakes after two events "
                            "loses the first one's logprob delta (seen on a loaded machine); radixlm's own "
                            "frontend runs it below (RADIXLM_ALSO), and test_sglang_compat.py checks the "
                            "server's per-event deltas",
    "test_gen_min_new_tokens": "imports sglang.srt.utils.hf_transformers_utils, which needs torchvision, "
                               "and torchvision from PyPI pulls a CUDA torch; min_tokens is tested in "
                               "test_sglang_frontend.py instead",
}


def test_every_program_is_run_or_excluded_with_a_reason():
    names = {n for n in dir(test_programs) if n.startswith("test_") and callable(getattr(test_programs, n))}
    listed = set(ON_TINY) | set(ON_SMOLLM2) | set(EXCLUDED)
    assert names == listed, (names - listed, listed - names)


# radixlm's own frontend in place of sglang: run as well (see the exclusion above)
RADIXLM_ALSO = {"test_stream_logprobs": {}}


def programs_with(frontend):
    """A copy of sglang.test.test_programs whose `sgl` is `frontend` (the functions read it when called)."""
    spec = importlib.util.find_spec("sglang.test.test_programs")
    module = types.ModuleType(f"test_programs_on_{frontend.__name__}")
    with open(spec.origin) as f:
        exec(compile(f.read(), spec.origin, "exec"), module.__dict__)
    module.sgl = frontend
    return module


@pytest.fixture(scope="module")
def tiny_server(long_tiny_server):
    try:
        yield long_tiny_server
    finally:
        _no_default_backend()


@pytest.fixture(scope="module")
def smollm2_server(smollm2_server):
    try:
        yield smollm2_server
    finally:
        _no_default_backend()


def _no_default_backend():
    sgl.set_default_backend(None)
    rl.set_default_backend(None)


# Run on radixlm's frontend only: the real frontend cannot run them against any RuntimeEndpoint.
SGLANG_FRONTEND_CANNOT = {
    "test_chat_completion_speculative": "num_api_spec_tokens makes sglang 0.5.23's interpreter read "
                                        "backend.is_chat_model, which only its OpenAI backend has: against "
                                        "RuntimeEndpoint (SGLang's own server too) the program dies in the "
                                        "executor thread",
}


def run_with_sglang(name, kwargs, srv):
    """sglang's executor thread turns a program's exception into a warning and sync() returns anyway, so
    such a warning fails the test."""
    if name in SGLANG_FRONTEND_CANNOT:
        pytest.skip(SGLANG_FRONTEND_CANNOT[name])
    sgl.set_default_backend(sgl.RuntimeEndpoint(srv.url, api_key=srv.api_key))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(test_programs, name)(**kwargs)
    died = [str(w.message) for w in caught if "Error in stream_executor" in str(w.message)]
    assert not died, died[0][-3000:]


def run_with_radixlm(name, kwargs, backend):
    rl.set_default_backend(backend)
    getattr(RADIXLM_PROGRAMS, name)(**kwargs)


RADIXLM_PROGRAMS = programs_with(rl)


@pytest.mark.parametrize("name", sorted(ON_TINY))
def test_program_on_tiny_model(name, tiny_server):
    run_with_sglang(name, ON_TINY[name], tiny_server)


@pytest.mark.parametrize("name", sorted({**ON_TINY, **RADIXLM_ALSO}))
def test_program_with_radixlm_on_tiny_server(name, tiny_server):
    run_with_radixlm(name, {**ON_TINY, **RADIXLM_ALSO}[name], rl.RuntimeEndpoint(tiny_server.url,
                                                                                   api_key=tiny_server.api_key))


@pytest.mark.parametrize("name", sorted({**ON_TINY, **RADIXLM_ALSO}))
def test_program_with_radixlm_on_tiny_engine(name, engine):
    run_with_radixlm(name, {**ON_TINY, **RADIXLM_ALSO}[name], engine)


@pytest.mark.parametrize("name", sorted(ON_SMOLLM2))
def test_program_on_smollm2(name, smollm2_server):
    run_with_sglang(name, ON_SMOLLM2[name], smollm2_server)


@pytest.mark.parametrize("name", sorted(ON_SMOLLM2))
def test_program_with_radixlm_on_smollm2_server(name, smollm2_server):
    run_with_radixlm(name, ON_SMOLLM2[name], rl.RuntimeEndpoint(smollm2_server.url, api_key=smollm2_server.api_key))


def no_roles(frontend):
    """One program (no role blocks: the two frontends take chat templates from different places), written
    against either frontend module."""
    @frontend.function
    def program(s, subject):
        s += "Q: Name a " + subject + ".\nA:" + frontend.gen("a", max_tokens=6, stop="\n", temperature=0)
        s += "\nCode: " + frontend.gen("code", max_tokens=5, regex=r"[0-9]{3}", temperature=0)
        s += "\nNumber: " + frontend.gen_int("num", max_tokens=4, temperature=0)
        s += "\nPick:" + frontend.select("pick", [" the", " a", " fox"])
        forks = s.fork(2)
        forks += lambda i: f"\nBranch {i}:" + frontend.gen("b", max_tokens=4, temperature=0)
        forks.join()
        s["branches"] = s["b"]
        with s.var_scope("tail"):
            s += "\nEnd:" + frontend.gen(max_tokens=3, temperature=0)
    return program


def test_radixlm_frontend_gives_the_real_frontends_results(tiny_server):
    """Greedy: the same text and variables from sglang's frontend and radixlm's, on the same server."""
    kwargs = [{"subject": "color"}, {"subject": "river"}]
    real = no_roles(sgl).run_batch(kwargs, backend=sgl.RuntimeEndpoint(tiny_server.url, api_key=tiny_server.api_key))
    ours = no_roles(rl).run_batch(kwargs, backend=rl.RuntimeEndpoint(tiny_server.url, api_key=tiny_server.api_key))
    for a, b in zip(real, ours):
        assert b.error() is None, b.error()
        assert a.text() == b.text()
        for var in ("a", "code", "num", "pick", "branches", "tail"):
            assert a[var] == b[var], var
        assert re.fullmatch(r"[0-9]{3}", b["code"]) and len(b["branches"]) == 2
