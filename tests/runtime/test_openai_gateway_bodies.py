"""The OpenAI bodies SGLang's gateway forwards (sglang-router 0.3.2 re-serializes each request with
SGLang's extras at their defaults; recorded from a run in front of radixlm) parse, and the extras we do
not implement are refused with a 400 naming them when asked for (runtime/openai/protocol.py)."""

import pytest

from radixlm.runtime.api.errors import APIError
from radixlm.runtime.openai.protocol import ChatRequest, CompletionRequest, parse

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "model": "m", "logprobs": False,
        "max_completion_tokens": 8, "stream": False, "temperature": 0.0, "no_stop_trim": False,
        "ignore_eos": True, "continue_final_message": False, "skip_special_tokens": True,
        "separate_reasoning": True, "stream_reasoning": True, "return_hidden_states": False}
COMPLETION = {"model": "m", "prompt": "Hi", "max_tokens": 8, "temperature": 0.0, "stream": False, "echo": False,
              "no_stop_trim": False, "ignore_eos": False, "skip_special_tokens": True,
              "return_hidden_states": False}


def test_the_gateways_bodies_parse():
    chat = parse(ChatRequest, CHAT)
    assert chat.max_completion_tokens == 8 and chat.ignore_eos is True and chat.continue_final_message is False
    assert parse(CompletionRequest, COMPLETION).prompt == "Hi"


@pytest.mark.parametrize("model,body,field", [
    (ChatRequest, {**CHAT, "continue_final_message": True}, "continue_final_message"),
    (ChatRequest, {**CHAT, "return_hidden_states": True}, "return_hidden_states"),
    (CompletionRequest, {**COMPLETION, "return_hidden_states": "last"}, "return_hidden_states"),
    (CompletionRequest, {**COMPLETION, "separate_reasoning": True}, "separate_reasoning"),   # chat only
])
def test_what_is_not_implemented_is_refused_by_name(model, body, field):
    with pytest.raises(APIError) as err:
        parse(model, body)
    assert err.value.status == 400 and err.value.param == field and field in err.value.message
