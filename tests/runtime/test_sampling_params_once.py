"""Sampling parameters are parsed once in normalize(), verified once in the tokenizer manager, and
the scheduler takes the sent to_dict() as it is. Oracle: from_dict + verify of the same input."""

import pytest

from radixlm.runtime.api.generate_input import GenerateReqInput
from radixlm.runtime.sampling_params import SamplingParams

REQUEST = {"max_new_tokens": 9, "temperature": 0.5, "top_p": 0.8, "stop": "\n", "logit_bias": {"7": 1.5},
           "json_schema": {"type": "object"}, "seed": 3}


def _verified():
    params = SamplingParams.from_dict(REQUEST)
    params.verify(100)
    return params


def test_normalize_keeps_the_parsed_params():
    items = GenerateReqInput(input_ids=[[1, 2], [3]], sampling_params=[REQUEST, {"n": 2}]).normalize()
    assert items[0].params == SamplingParams.from_dict(REQUEST)
    assert items[1].params == SamplingParams.from_dict({"n": 2})


def test_received_takes_a_sent_dict_without_checking_again(monkeypatch):
    sent = _verified().to_dict()
    calls = []
    for name in ("verify", "_normalise"):
        monkeypatch.setattr(SamplingParams, name, lambda self, *a, _n=name: calls.append(_n))
    got = SamplingParams.received(sent, 100)
    assert calls == []
    monkeypatch.undo()
    assert got == _verified() and got.logit_bias == {7: 1.5} and got.stop == ["\n"]


def test_received_restores_int_logit_bias_keys():
    sent = _verified().to_dict()
    sent["logit_bias"] = {str(k): v for k, v in sent["logit_bias"].items()}  # as a JSON hop leaves them
    assert SamplingParams.received(sent, 100).logit_bias == {7: 1.5}


@pytest.mark.parametrize("partial,error", [({"temperature": -1}, "temperature"), ({"bogus": 1}, "unknown"),
                                           ({"logit_bias": {500: 1.0}}, "outside the vocabulary")])
def test_received_checks_anything_else(partial, error):
    with pytest.raises(ValueError, match=error):
        SamplingParams.received(partial, 100)
    ok = SamplingParams.received({"max_new_tokens": 4, "stop": "x"}, 100)
    assert ok == SamplingParams.from_dict({"max_new_tokens": 4, "stop": "x"})
