"""The SGLang field table against the installed `sglang` package (read with ast: its modules import the
GPU runtime), and the pieces that read it: request splitting, default checks, stop_regex bounds."""

import random
import re

import pytest
from sglang_schema import GEN, SAMP, all_defaults_body

from radixlm.runtime.api.generate_input import GenerateReqInput
from radixlm.runtime.api.sglang_fields import DEFAULT_ONLY, GENERATE_FIELDS, SAMPLING_FIELDS, is_default
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.stop_regex import MAX_LEN, max_match_len


@pytest.mark.parametrize("table,theirs", [(GENERATE_FIELDS, GEN), (SAMPLING_FIELDS, SAMP)])
def test_table_covers_exactly_sglangs_fields(table, theirs):
    ours = {name for name, rule in table.items() if not rule.extra}
    assert sorted(set(theirs) - ours) == [], "SGLang fields missing from runtime/api/sglang_fields.py"
    assert sorted(ours - set(theirs)) == [], "table entries SGLang does not have (mark them extra=True)"


@pytest.mark.parametrize("table,theirs", [(GENERATE_FIELDS, GEN), (SAMPLING_FIELDS, SAMP)])
def test_sglangs_own_defaults_count_as_default(table, theirs):
    for name, value in theirs.items():
        rule = table[name]
        if rule.status == DEFAULT_ONLY:
            assert is_default(value, rule), (name, value)
            assert not is_default(True if value in (None, False) else value + 1, rule), name


def test_all_defaults_body_is_accepted_and_equals_the_minimal_request():
    items = GenerateReqInput.from_body(all_defaults_body()).normalize()
    minimal = GenerateReqInput(text="hi").normalize()
    assert len(items) == len(minimal) == 1
    a, b = items[0], minimal[0]
    assert SamplingParams.from_dict(a.sampling_params) == SamplingParams.from_dict(b.sampling_params)
    assert (a.return_logprob, a.top_logprobs_num, a.logprob_start_len, a.stream, a.cache_namespace) == (
        b.return_logprob, b.top_logprobs_num, b.logprob_start_len, b.stream, b.cache_namespace)


@pytest.mark.parametrize("body,needle", [
    ({"return_hidden_states": True}, "return_hidden_states"),
    ({"lora_path": "x"}, "lora_path"),
    ({"return_logprob": True, "frobnicate": 1}, "frobnicate"),
    ({"image_data": ["a.png"]}, "image_data"),
    ({"data_parallel_rank": 1}, "data_parallel_rank"),
    ({"sampling_params": {"beam_width": 4}}, "beam_width"),
    ({"sampling_params": {"custom_params": 5}}, "custom_params"),
    ({"sampling_params": {"stop_regex": "("}}, "stop_regex"),
    ({"sampling_params": {"stop_regex": ["a"] * 33}}, "stop_regex"),
    ({"extra_key": 5}, "extra_key"),
    ({"log_metrics": "no"}, "log_metrics"),
])
def test_non_default_or_unknown_values_are_refused_by_name(body, needle):
    obj = GenerateReqInput.from_body({"text": "hi", **body})
    with pytest.raises(ValueError, match=needle):
        items = obj.normalize()
        for it in items:
            SamplingParams.from_dict(it.sampling_params)


def test_no_effect_fields_keep_the_request_and_rid_lists_expand():
    body = {"text": ["a", "b"], "rid": "job", "priority": 5, "routing_key": "r", "custom_labels": {"x": "y"},
            "sampling_params": {"custom_params": {"k": [1, 2]}, "stream_interval": 4, "stop_regex": r"\d"}}
    items = GenerateReqInput.from_body(body).normalize()
    assert [it.rid for it in items] == ["job_0", "job_1"]            # SGLang's expansion of a string rid
    assert SamplingParams.from_dict(items[0].sampling_params).stop_regex == [r"\d"]


def test_cache_namespaces_separate_keys_and_salts():
    def ns(**kw):
        return GenerateReqInput(text="x", **kw).normalize()[0].cache_namespace
    assert ns() is None and ns(extra_key="") is None
    spaces = [ns(extra_key="a"), ns(extra_key="b"), ns(cache_salt="a"), ns(extra_key="a", cache_salt="b"),
              ns(extra_key="a|", cache_salt=""), ns(extra_key="a", cache_salt="|")]
    assert len(set(spaces)) == len(spaces) and None not in spaces
    assert ns(extra_key="a") == ns(extra_key="a")


@pytest.mark.parametrize("pattern", [r"ab", r"a|bcd", r"(ab){2,3}", r"x?[yz]{1,4}", r"\bq\w{0,2}", r"(a|bb)c{2}"])
def test_max_match_len_bounds_every_match(pattern):
    rng = random.Random(0)
    bound = max_match_len(pattern)
    assert bound < MAX_LEN
    longest = 0
    for _ in range(3000):
        text = "".join(rng.choice("abcqxyz ") for _ in range(rng.randint(0, 12)))
        for start in range(len(text) + 1):
            m = re.compile(pattern).match(text, start)
            if m:
                longest = max(longest, m.end() - m.start())
    assert 0 < longest <= bound


def test_unbounded_patterns_are_unbounded():
    for p in [r"\d+", r"a*", r"(?=a)a", r"(a)\1"]:
        assert max_match_len(p) == MAX_LEN
