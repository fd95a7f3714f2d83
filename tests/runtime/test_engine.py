"""The offline Engine on the embedded SmolLM2, against HF transformers as the oracle."""

import asyncio
import math

import pytest
import torch

from radixlm import Engine
from radixlm.runtime.models.loader import resolve_model_path

CHATS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Explain what a radix tree is in one sentence.",
    "Translate 'good morning' into Spanish.",
]


@pytest.fixture(scope="module")
def smol_path():
    return str(resolve_model_path("smollm2-135m-instruct"))


@pytest.fixture(scope="module")
def engine(smol_path):
    with Engine(model=smol_path, dtype="float32", max_total_tokens=16384, log_level="warning") as e:
        yield e


@pytest.fixture(scope="module")
def hf(smol_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(smol_path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(smol_path)


def chat_ids(tok, text):
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    return tok.encode(rendered, add_special_tokens=False)


def test_greedy_matches_hf_generate(engine, hf):
    model, tok = hf
    prompts = [chat_ids(tok, c) for c in CHATS]
    outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": 32, "temperature": 0})
    assert isinstance(outs, list) and len(outs) == len(prompts)
    for ids, out in zip(prompts, outs):
        with torch.no_grad():
            ref = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)[0, len(ids):].tolist()
        assert out["output_ids"] == ref[:len(out["output_ids"])] and len(out["output_ids"]) == len(ref)
        assert out["text"] == tok.decode(ref, skip_special_tokens=True).removesuffix(tok.eos_token) or \
            out["meta_info"]["finish_reason"]["type"] == "stop"


def test_text_prompt_and_meta(engine):
    out = engine.generate("The capital of France is", {"max_new_tokens": 8, "temperature": 0})
    meta = out["meta_info"]
    assert set(meta) >= {"id", "prompt_tokens", "completion_tokens", "cached_tokens", "finish_reason", "e2e_latency"}
    assert meta["completion_tokens"] == len(out["output_ids"]) <= 8
    assert meta["forward_passes"] == meta["completion_tokens"]   # no jump-forward: one pass per token
    again = engine.generate("The capital of France is", {"max_new_tokens": 8, "temperature": 0})
    assert again["output_ids"] == out["output_ids"]
    assert again["meta_info"]["cached_tokens"] == meta["prompt_tokens"] - 1


def test_input_logprobs_equal_hf_log_softmax(engine, hf):
    model, tok = hf
    ids = tok.encode("Radix trees share prefixes between requests.")
    out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 2, "temperature": 0},
                          return_logprob=True, logprob_start_len=0, top_logprobs_num=3)
    meta = out["meta_info"]
    with torch.no_grad():
        ref = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    inputs = meta["input_token_logprobs"]
    assert inputs[0][0] is None and inputs[0][1] == ids[0]
    assert len(inputs) == len(ids)
    for pos in range(1, len(ids)):
        assert inputs[pos][1] == ids[pos]
        assert math.isclose(inputs[pos][0], ref[pos - 1, ids[pos]].item(), abs_tol=1e-3)
    top = meta["input_top_logprobs"][1]
    assert [t[1] for t in top] == torch.topk(ref[0], 3).indices.tolist()
    first_out = meta["output_token_logprobs"][0]
    assert first_out[1] == out["output_ids"][0]
    assert math.isclose(first_out[0], ref[-1, first_out[1]].item(), abs_tol=1e-3)


def test_stop_string_and_stop_token(engine):
    base = engine.generate("Count: 1, 2, 3,", {"max_new_tokens": 24, "temperature": 0})
    text = base["text"]
    assert len(text) > 4
    stop = text[2:4]
    out = engine.generate("Count: 1, 2, 3,", {"max_new_tokens": 24, "temperature": 0, "stop": stop})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert stop not in out["text"] and text.startswith(out["text"])
    tok_stop = base["output_ids"][3]
    out = engine.generate("Count: 1, 2, 3,", {"max_new_tokens": 24, "temperature": 0, "stop_token_ids": [tok_stop]})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": tok_stop}
    assert out["output_ids"][-1] == tok_stop and tok_stop not in out["output_ids"][:-1]


def test_seed_reproducible_and_n_samples(engine):
    params = {"max_new_tokens": 12, "temperature": 1.0, "seed": 1234}
    a = engine.generate("Once upon a time", params)
    b = engine.generate("Once upon a time", params)
    assert a["output_ids"] == b["output_ids"]
    outs = engine.generate("Tell me a joke.", {"max_new_tokens": 6, "temperature": 1.0, "n": 3})
    assert isinstance(outs, list) and len(outs) == 3
    assert all(o["meta_info"]["cached_tokens"] > 0 for o in outs)


def test_min_new_tokens_and_ignore_eos(engine):
    out = engine.generate("Hi", {"max_new_tokens": 10, "min_new_tokens": 10, "temperature": 0})
    assert out["meta_info"]["completion_tokens"] == 10
    out = engine.generate("Hi", {"max_new_tokens": 7, "ignore_eos": True, "temperature": 0})
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 7}


def test_streaming_sync_and_async(engine):
    chunks = list(engine.generate("Hello there", {"max_new_tokens": 6, "temperature": 0}, stream=True))
    final = engine.generate("Hello there", {"max_new_tokens": 6, "temperature": 0})
    assert chunks[-1]["text"] == final["text"] and chunks[-1]["output_ids"] == final["output_ids"]
    assert all(chunks[i]["text"] == chunks[i + 1]["text"][:len(chunks[i]["text"])] for i in range(len(chunks) - 1))

    async def go():
        stream = await engine.async_generate("Hello there", {"max_new_tokens": 6, "temperature": 0}, stream=True)
        texts = [c["text"] async for c in stream]
        whole = await engine.async_generate("Hello there", {"max_new_tokens": 6, "temperature": 0})
        return texts, whole

    texts, whole = asyncio.run(go())
    assert texts[-1] == whole["text"] == final["text"]


@pytest.mark.parametrize("kwargs,needle", [
    ({"prompt": ""}, "empty"),
    ({"prompt": "word " * 9000}, "context"),
    ({"prompt": "hi", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    ({"prompt": "hi", "sampling_params": {"top_p": 0}}, "top_p"),
    ({"prompt": "hi", "sampling_params": {"top_p": 1.5}}, "top_p"),
    ({"prompt": "hi", "sampling_params": {"bogus_key": 1}}, "bogus_key"),
    ({"input_ids": [[]]}, "empty"),
    ({"input_ids": [1, 10**9]}, "vocabulary"),
])
def test_bad_input_raises_and_engine_keeps_working(engine, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        engine.generate(**kwargs)
    assert engine.generate("ok", {"max_new_tokens": 2, "temperature": 0})["meta_info"]["completion_tokens"] >= 1


def test_flush_cache_and_server_info(engine):
    engine.generate("A prompt to cache for a while", {"max_new_tokens": 1})
    info = engine.get_server_info()
    assert info["max_total_num_tokens"] == 16384 and info["tree_slots"] > 0
    assert engine.flush_cache()["success"]
    info = engine.get_server_info()
    assert info["tree_slots"] == 0 and info["used_slots"] == 0
