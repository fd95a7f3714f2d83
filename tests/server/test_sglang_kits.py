"""SGLang's HTTP test kits (`sglang/test/kits`, sglang 0.5.23) run unchanged against `radixlm serve`.

Each kit is a mixin SGLang's own tests put on a unittest class that gives it `base_url`, `process`,
`model` and `client`; the classes here do the same, with servers launched without an API key (the kits
send none).  The kits run on a tiny random Llama whose context is long enough for the abort kit's
16,000-token requests, except the matched-stop kit, whose outputs must end by themselves (an end-of-turn
token of id 2, "and" or "or", a sentence end) within 1000 tokens: it runs on the default
SmolLM2-135M-Instruct.  Kit tests that judge a model's answers, or need what radixlm does not have, are
not run: EXCLUDED names each with the reason, and a test checks every kit test is run or listed there.
"""

import json
import shutil
import unittest

import openai
import pytest
from server_harness import ServerProcess

pytest.importorskip("sglang")
from sglang.test.kits import (  # noqa: E402
    abort_timeout_kit,
    basic_api_contract_kit,
    basic_decode_correctness_kit,
    ebnf_constrained_kit,
    json_constrained_kit,
    json_mode_kit,
    matched_stop_kit,
    regex_constrained_kit,
)

pytestmark = pytest.mark.timeout(900)

LONG_CONTEXT = 32768

TINY_NEVER = "the tiny random model never does"
EXCLUDED = {
    "BasicDecodeCorrectnessMixin.test_capital_france": "judges the model's knowledge (Paris)",
    "BasicDecodeCorrectnessMixin.test_basic_math": "judges the model's arithmetic (391)",
    "BasicDecodeCorrectnessMixin.test_color_completion": "judges the model's knowledge (yellow)",
    "BasicDecodeCorrectnessMixin.test_ascii_ratio": "judges the model's English (a random model's tokens are "
                                                    "any characters of its vocabulary)",
    "BasicDecodeCorrectnessMixin.test_no_repetition_blowup": "judges the model's prose (a tiny random model loops)",
    "RegexConstrainedMixin.test_regex_generate_complex_json":
        "[a-zA-Z0-9 ]+ is unbounded: whether the model closes the string within the kit's 128 tokens judges the "
        f"model ({TINY_NEVER}; SmolLM2-135M did in one run, sampling n=3 at temperature 0.5: chance)",
    "RegexConstrainedMixin.test_regex_generate_custom_log_format":
        f"[a-z]+ is unbounded: whether the model ends it within 128 tokens judges the model ({TINY_NEVER}; "
        "SmolLM2-135M wrote 'xtbjbjbj...' to the limit)",
    "EBNFConstrainedMixin.test_ebnf_generate_complex_json":
        "the grammar admits pairs in any order and number while the kit's pattern wants name, age, city in that "
        "order: it judges the model's choice (SmolLM2-135M wrote {\"name\":\"John\", \"age\":25}, which "
        "the grammar allows); and its strings are unbounded (the tiny random model never closes one within 128 "
        "tokens)",
    "EBNFConstrainedMixin.test_ebnf_generate_custom_log_format":
        f"[a-z]+ is unbounded: whether the model ends it within 128 tokens judges the model ({TINY_NEVER}; "
        "SmolLM2-135M did in one run at temperature 0.5: chance)",
    **{f"JSONConstrainedMixin.{name}":
       "the schema's name and population are unbounded: whether the model closes the object within the kit's "
       f"128 tokens judges the model ({TINY_NEVER}; SmolLM2-135M, greedy, ran on to the limit)"
       for name in ("test_json_generate", "test_json_openai", "test_mix_json_and_other")},
    **{f"JSONModeMixin.{name}":
       "json_object admits any object: whether the model closes it within the kit's 128 tokens judges the model "
       f"({TINY_NEVER}; SmolLM2-135M, greedy, wrote {{\"The capital of Bulgaria is Sofia\": 22.22222222666...}} "
       "to the limit)"
       for name in ("test_json_mode_response", "test_json_mode_with_streaming")},
    "MatchedStopMixin.test_finish_stop_str": "judges whether the model writes a newline within 1000 tokens "
                                             "(SmolLM2-135M's story ran 1000 tokens on one line: 160 s here)",
    "WaitingTimeoutMixin.test_waiting_timeout": "needs SGLANG_REQ_WAITING_TIMEOUT: radixlm has no waiting-queue "
                                                "timeout",
    "RunningTimeoutTwoWaveMixin.test_running_timeout_no_crash": "needs SGLANG_REQ_RUNNING_TIMEOUT: radixlm has "
                                                                "no running-request timeout",
    "streaming_session_kit": "SGLang sessions (/open_session, session_params) are not implemented in radixlm, "
                             "and the kit imports sglang.srt.utils.hf_transformers_utils, which needs a "
                             "torchvision that PyPI only builds for a CUDA torch",
}

ON_TINY = [basic_api_contract_kit.BasicAPIContractMixin, basic_decode_correctness_kit.BasicDecodeCorrectnessMixin,
           regex_constrained_kit.RegexConstrainedMixin, ebnf_constrained_kit.EBNFConstrainedMixin,
           json_constrained_kit.JSONConstrainedMixin, abort_timeout_kit.AbortAllMixin]
ON_SMOLLM2 = [matched_stop_kit.MatchedStopMixin]
NOT_RUN = [json_mode_kit.JSONModeMixin, abort_timeout_kit.WaitingTimeoutMixin,
           abort_timeout_kit.RunningTimeoutTwoWaveMixin]


def kit_tests(mixin) -> set:
    return {f"{mixin.__name__}.{name}" for name in dir(mixin) if name.startswith("test_")}


def test_every_kit_test_is_run_or_excluded_with_a_reason():
    listed = {name for name in EXCLUDED if "." in name}
    for mixin in ON_TINY + ON_SMOLLM2 + NOT_RUN:
        tests = kit_tests(mixin)
        if mixin in NOT_RUN:
            assert tests <= listed, tests - listed
    assert listed <= set().union(*(kit_tests(m) for m in ON_TINY + ON_SMOLLM2 + NOT_RUN)), "stale exclusion"


def long_context_copy(tiny_llama, folder):
    """The shared tiny Llama with a 32k context (its rope runs at any position; only the config says 256)."""
    shutil.copytree(tiny_llama, folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = LONG_CONTEXT
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def kit_servers(tiny_llama, tmp_path_factory, smollm2_server):
    """{"tiny": ..., "smollm2": ...}, without an API key (SmolLM2's is the session's shared server)."""
    tiny = long_context_copy(tiny_llama, tmp_path_factory.mktemp("tiny-long-context"))
    srv = ServerProcess(tiny, tmp_path_factory.mktemp("kit-logs"), "--check-ledger", "--max-total-tokens", "16384",
                        api_key=None).wait_ready()
    try:
        yield {"tiny": srv, "smollm2": smollm2_server}
    finally:
        crashed = srv.proc.poll()
        srv.stop()
        assert crashed is None, srv.log()[-4000:]


def attach(request, srv):
    """What SGLang's test classes give their kits."""
    request.cls.base_url = srv.url
    request.cls.process = srv.proc
    request.cls.model = "default"
    request.cls.client = openai.Client(api_key="EMPTY", base_url=srv.url + "/v1")


@pytest.fixture(scope="class")
def on_tiny(request, kit_servers):
    attach(request, kit_servers["tiny"])


@pytest.fixture(scope="class")
def on_smollm2(request, kit_servers):
    attach(request, kit_servers["smollm2"])


def skipped(mixin):
    """Class attributes that skip the EXCLUDED tests of mixin, with their reasons."""
    prefix = mixin.__name__ + "."
    return {name[len(prefix):]: unittest.skip(reason)(lambda self: None)
            for name, reason in EXCLUDED.items() if name.startswith(prefix)}


def kit_case(mixin, fixture):
    """A unittest class running mixin's tests on fixture's server."""
    cls = type(f"Test{mixin.__name__.removesuffix('Mixin')}", (mixin, unittest.TestCase), skipped(mixin))
    return pytest.mark.usefixtures(fixture)(cls)


for _mixin, _fixture in [(m, "on_tiny") for m in ON_TINY] + [(m, "on_smollm2") for m in ON_SMOLLM2]:
    globals()[f"Test{_mixin.__name__.removesuffix('Mixin')}"] = kit_case(_mixin, _fixture)
