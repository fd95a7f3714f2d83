"""OpenAI-compatible routes through the unchanged `openai` SDK against a real server.  Oracles: the
SDK's typed models (every field they define is present), the tokenizer's chat template, and greedy
agreement with the native /generate answer for the same tokens."""

import json

import openai
import pytest
from openai.types import Completion, CompletionChoice, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion import Choice as ChatChoice
from pydantic import ValidationError

from radixlm.runtime.openai.handlers import _grammar
from radixlm.runtime.openai.protocol import ChatRequest, parse, validation_error
from radixlm.runtime.openai.response import completion_logprobs

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, world!"}]
EXTRA = {"ignore_eos": True}        # a random tiny model may sample eos at any step


# ---- pure adapters ----

def test_response_format_maps_to_json_schema_sampling_param():
    req = ChatRequest.model_validate({"messages": MESSAGES, "response_format": {"type": "json_object"}})
    assert json.loads(_grammar(req)["json_schema"]) == {"type": "object"}   # as SGLang maps json_object
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = ChatRequest.model_validate({"messages": MESSAGES, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}})
    assert json.loads(_grammar(req)["json_schema"]) == schema
    assert _grammar(ChatRequest.model_validate({"messages": MESSAGES, "regex": "a+"})) == {"regex": "a+"}
    assert _grammar(ChatRequest.model_validate({"messages": MESSAGES, "response_format": {"type": "text"}})) == {}


def test_validation_errors_name_the_field():
    with pytest.raises(ValidationError) as info:
        ChatRequest.model_validate({"messages": MESSAGES, "temprature": 1, "n": 0})
    err = validation_error(info.value)
    assert err.status == 400 and "'n'" in err.message and "unknown field 'temprature'" in err.message
    with pytest.raises(Exception) as info:
        parse(ChatRequest, {"messages": MESSAGES, "stop": [1, 2]})
    assert "stop" in info.value.message


def test_completion_logprobs_offsets_and_echo():
    meta = {"input_token_logprobs": [[None, 1, "ab"], [-0.5, 2, "c"]], "input_top_logprobs": [None, None],
            "output_token_logprobs": [[-1.0, 3, "d"], [-2.0, 4, "ef"]],
            "output_top_logprobs": [[[-1.0, 3, "d"]], [[-2.0, 4, "ef"], [-3.0, 5, "g"]]]}
    lp = completion_logprobs(meta, prompt_chars=3, echo=True)
    assert lp["tokens"] == ["ab", "c", "d", "ef"] and lp["token_logprobs"] == [None, -0.5, -1.0, -2.0]
    assert lp["text_offset"] == [0, 2, 3, 4]
    assert lp["top_logprobs"] == [None, None, {"d": -1.0}, {"ef": -2.0, "g": -3.0}]
    tail = completion_logprobs(meta, prompt_chars=3, echo=False, start=1)
    assert tail["tokens"] == ["ef"] and tail["text_offset"] == [4]


# ---- the SDK against the server ----

@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def assert_all_fields(obj: dict, model_cls) -> None:
    missing = set(model_cls.model_fields) - set(obj)
    assert not missing, f"{model_cls.__name__} fields missing: {missing}"


def test_models_list(client, server, tiny_llama):
    models = client.models.list().data
    assert [m.id for m in models] == [str(tiny_llama)] and models[0].object == "model"
    assert client.models.retrieve(models[0].id).id == models[0].id


def test_chat_completion_shape_and_usage(client, model, server, tokenizer):
    resp = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=5, temperature=0,
                                          extra_body=EXTRA)
    raw = resp.model_dump()
    ChatCompletion.model_validate(raw)
    body = server.post("/v1/chat/completions", json={"model": model, "messages": MESSAGES, "max_tokens": 5,
                                                     "temperature": 0, **EXTRA}).json()
    assert_all_fields(body, ChatCompletion)
    assert_all_fields(body["choices"][0], ChatChoice)
    assert_all_fields(body["usage"], CompletionUsage)
    assert body["object"] == "chat.completion" and body["model"] == model
    assert body["choices"][0]["message"]["content"] == resp.choices[0].message.content   # greedy: same answer
    prompt_ids = tokenizer.encode(tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True),
                                  add_special_tokens=False)
    assert resp.usage.prompt_tokens == len(prompt_ids)
    assert resp.usage.completion_tokens == 5 and resp.usage.total_tokens == len(prompt_ids) + 5
    assert resp.choices[0].finish_reason == "length" and resp.choices[0].index == 0
    assert resp.usage.prompt_tokens_details.cached_tokens >= 0
    native = server.post("/generate", json={"input_ids": prompt_ids, "sampling_params": {
        "max_new_tokens": 5, "temperature": 0, "ignore_eos": True}}).json()
    assert resp.choices[0].message.content == native["text"]


def test_chat_stream_with_usage(client, model):
    kw = dict(model=model, messages=MESSAGES, max_tokens=8, temperature=0, extra_body=EXTRA)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == client.chat.completions.create(**kw).choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == 8
    assert all(c.usage is None for c in chunks[:-1])
    for c in chunks:
        ChatCompletionChunk.model_validate(c.model_dump())


def test_chat_stream_helper(client, model):
    for _ in range(3):      # tokens that arrive while the server's loop is behind are merged: retry one merge
        with client.chat.completions.stream(model=model, messages=MESSAGES, max_tokens=6, temperature=0,
                                            extra_body=EXTRA) as stream:
            events = list(stream)
            snapshot = stream.current_completion_snapshot
        if sum(e.type == "chunk" for e in events) >= 3:
            break
    deltas = "".join(e.delta for e in events if e.type == "content.delta")
    done = [e.content for e in events if e.type == "content.done"]
    assert sum(e.type == "chunk" for e in events) >= 3
    plain = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, temperature=0,
                                           extra_body=EXTRA)
    assert done == [deltas] == [plain.choices[0].message.content]
    assert snapshot.choices[0].finish_reason == "length"    # (get_final_completion refuses "length")


def test_chat_n_and_logprobs(client, model):
    resp = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, n=3, temperature=0,
                                          logprobs=True, top_logprobs=2, extra_body=EXTRA)
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert len({c.message.content for c in resp.choices}) == 1           # greedy: all the same
    assert resp.usage.completion_tokens == 12
    for choice in resp.choices:
        content = choice.logprobs.content
        assert len(content) == 4
        for tok in content:
            assert len(tok.top_logprobs) == 2
            assert abs(tok.logprob - tok.top_logprobs[0].logprob) < 1e-4   # greedy takes the top token
            assert bytes(tok.bytes).decode("utf-8", errors="replace") == tok.token   # raw bytes (item 6)


def test_chat_stream_with_n_interleaves_choices(client, model):
    chunks = list(client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=5, n=2, temperature=0,
                                                 stream=True, extra_body=EXTRA))
    texts, finishes = {0: "", 1: ""}, {}
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert finishes == {0: "length", 1: "length"} and texts[0] == texts[1]      # greedy: same text


def test_completions_match_native_generate(client, model, server):
    prompt = "The quick brown fox"
    resp = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0, extra_body=EXTRA)
    body = server.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 6,
                                                "temperature": 0, **EXTRA}).json()
    assert_all_fields(body, Completion)
    assert_all_fields(body["choices"][0], CompletionChoice)
    assert resp.object == "text_completion" and resp.choices[0].finish_reason == "length"
    native = server.post("/generate", json={"text": prompt, "sampling_params": {
        "max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}).json()
    assert resp.choices[0].text == native["text"]
    assert resp.usage.prompt_tokens == native["meta_info"]["prompt_tokens"]


def test_completions_batch_n_order_echo_and_stream(client, model, server):
    prompts = ["Hello", "def add(a, b):"]
    resp = client.completions.create(model=model, prompt=prompts, n=2, max_tokens=3, temperature=0,
                                     echo=True, extra_body=EXTRA)
    assert [c.index for c in resp.choices] == [0, 1, 2, 3]
    for c in resp.choices:
        assert c.text.startswith(prompts[c.index // 2])
    stream = client.completions.create(model=model, prompt=prompts[1], max_tokens=5, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body=EXTRA)
    chunks = list(stream)
    assert all(c.object == "text_completion" for c in chunks)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    plain = client.completions.create(model=model, prompt=prompts[1], max_tokens=5, temperature=0, extra_body=EXTRA)
    assert text == plain.choices[0].text and chunks[-1].usage.completion_tokens == 5


def test_completions_echo_logprobs_score_the_prompt(client, model, tokenizer):
    prompt = "The quick brown fox jumps"
    resp = client.completions.create(model=model, prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    lp = resp.choices[0].logprobs
    n = len(tokenizer.encode(prompt))
    assert len(lp.tokens) == n and lp.token_logprobs[0] is None
    assert all(x < 0 for x in lp.token_logprobs[1:]) and resp.choices[0].text == prompt
    assert resp.usage.completion_tokens == 0


def test_stop_string_cuts_the_text(client, model):
    kw = dict(model=model, prompt="Hello, world!", max_tokens=20, temperature=0, extra_body=EXTRA)
    text = client.completions.create(**kw).choices[0].text
    k = next(i for i in range(3, len(text) - 2) if "\ufffd" not in text[i:i + 2] and text.find(text[i:i + 2]) == i)
    cut = client.completions.create(stop=[text[k:k + 2]], **kw).choices[0]
    assert cut.text == text[:k] and cut.finish_reason == "stop"


def test_sglang_extras_and_sampling_options_accepted(client, model):
    resp = client.chat.completions.create(
        model=model, messages=MESSAGES, max_completion_tokens=4, temperature=0.7, top_p=0.9, seed=7,
        presence_penalty=0.5, frequency_penalty=0.5,
        extra_body={"top_k": 5, "min_p": 0.01, "repetition_penalty": 1.1, "ignore_eos": True, "min_tokens": 4})
    assert resp.usage.completion_tokens == 4
    again = client.chat.completions.create(
        model=model, messages=MESSAGES, max_completion_tokens=4, temperature=0.7, top_p=0.9, seed=7,
        presence_penalty=0.5, frequency_penalty=0.5,
        extra_body={"top_k": 5, "min_p": 0.01, "repetition_penalty": 1.1, "ignore_eos": True, "min_tokens": 4})
    assert again.choices[0].message.content == resp.choices[0].message.content     # same seed, same sample


def test_sdk_errors_are_typed(client, model):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
    assert "no-such-model" in str(info.value)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, temperature=5)
    assert "temperature" in str(info.value)
    bad_key = openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad_key.models.list()


def test_reasoning_effort_is_ignored_by_a_model_without_reasoning(client, model):
    """Clients send reasoning_effort to every model (SGLang and vLLM ignore it where the model does not think): the
    answer is the one without it; an explicit max_thinking_tokens still needs a reasoning parser."""
    plain = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, temperature=0)
    for effort in ("low", "high"):
        resp = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, temperature=0,
                                              reasoning_effort=effort)
        assert resp.choices[0].message.content == plain.choices[0].message.content
    text = client.responses.create(model=model, input=MESSAGES[-1]["content"], max_output_tokens=6, temperature=0,
                                   reasoning={"effort": "medium"}).output_text
    assert text
    with pytest.raises(openai.BadRequestError, match="reasoning parser"):
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6,
                                       extra_body={"max_thinking_tokens": 8})
