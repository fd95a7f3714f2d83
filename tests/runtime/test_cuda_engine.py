"""The Engine on CUDA with the default model ($RADIXLM_TEST_MODEL where set; marked gpu; skipped without CUDA): greedy tokens and
logprobs against HF transformers on the same GPU (teacher-forced: every chosen token is the argmax
up to ties, logprobs equal), a DSL select() scored like HF, a JSON-schema request that validates
and used jump-forward, chunked prefill with the radix cache (the second ask is served from the cache
with the same tokens), and CUDA graphs on vs off giving identical greedy tokens.  float32, so that
the padded graph batch and the eager batch agree token for token."""

import json
import os

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROMPTS = ["The capital of France is", "def fibonacci(n):", "List three colors:", "Once upon a time",
           "2 + 2 ="]
GREEDY = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}


def _engine(**kw):
    import radixlm as rl
    # bench/gpu_check.sh sets it to SmolLM2's shape with random weights where the default model cannot travel
    kw.setdefault("model", os.environ.get("RADIXLM_TEST_MODEL", "smollm2-135m-instruct"))
    return rl.Engine(dtype="float32", chunked_prefill_size=64, log_level="warning", **kw)


@pytest.fixture(scope="module")
def engine():
    with _engine() as e:
        yield e


@pytest.fixture(scope="module")
def hf(engine):
    from transformers import AutoModelForCausalLM
    path = engine.backend.info["model_path"]
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda().eval()


def _hf_logp(hf, ids):
    with torch.no_grad():
        logits = hf(torch.tensor([ids], device="cuda")).logits[0]   # [S, V]
    return torch.log_softmax(logits.double(), dim=-1).cpu()           # [S, V]


def test_runs_on_cuda_with_graphs_and_a_warm_up_sized_pool(engine):
    info = engine.backend.info
    assert str(info["device"]).startswith("cuda")
    from radixlm.runtime.runner.cuda_graph import capture_sizes
    chosen = engine.get_server_info()["cuda_graph_max_bs"]     # sized by the device (runtime/server/device_defaults.py)
    assert chosen >= 64 and info["cuda_graph_batch_sizes"] == capture_sizes(chosen)
    assert info["max_total_num_tokens"] > 4096


def test_greedy_and_logprobs_match_hf(engine, hf):
    tok = engine.tokenizer
    outs = engine.generate(PROMPTS, GREEDY, return_logprob=True, logprob_start_len=0, top_logprobs_num=3)
    for prompt, out in zip(PROMPTS, outs):
        ids = tok.encode(prompt)
        gen = out["output_ids"]
        logp = _hf_logp(hf, ids + gen)
        for j, t in enumerate(gen):
            row = logp[len(ids) - 1 + j]
            assert row[t] >= row.max() - 1e-3, (prompt, j)           # greedy up to a tie
            lp, tid = out["meta_info"]["output_token_logprobs"][j][:2]
            assert tid == t and lp == pytest.approx(row[t].item(), abs=2e-3)
        for p in range(1, len(ids)):
            lp, tid = out["meta_info"]["input_token_logprobs"][p][:2]
            assert tid == ids[p] and lp == pytest.approx(logp[p - 1, ids[p]].item(), abs=2e-3)
        top = out["meta_info"]["output_top_logprobs"][0]
        want = torch.topk(logp[len(ids) - 1], 3).values.tolist()
        assert [x[0] for x in top] == pytest.approx(want, abs=2e-3)


def test_select_scores_like_hf(engine, hf):
    import radixlm as rl
    from radixlm.frontend_lang.choice_scoring import choice_tokens

    context, choices = "The sky is", [" blue", " green", " made of cheese"]

    @rl.function
    def prog(s):
        s += context
        s += rl.select("pick", choices=choices)

    state = prog.run(backend=rl.EngineBackend(engine))
    meta = state.get_meta_info("pick")
    boundary, fulls = choice_tokens(engine.tokenizer, context, choices)
    scores = []
    for i, full in enumerate(fulls):
        logp = _hf_logp(hf, full)
        ref = [logp[p - 1, full[p]].item() for p in range(boundary, len(full))]
        assert meta["input_token_logprobs"][i] == pytest.approx(ref, abs=2e-3)
        scores.append(sum(ref) / len(ref))
    assert state["pick"] == choices[max(range(len(choices)), key=scores.__getitem__)]


def test_json_schema_with_jump_forward(engine):
    import jsonschema
    before = engine.get_server_info().get("jump_forward_tokens", 0)
    out = engine.generate("Describe a person as JSON:", {"max_new_tokens": 64, "temperature": 0,
                                                         "json_schema": json.dumps(SCHEMA)})
    jsonschema.validate(json.loads(out["text"]), SCHEMA)
    assert engine.get_server_info()["jump_forward_tokens"] > before


def test_chunked_prefill_with_the_radix_cache(engine):
    long = " ".join(f"item {i} is number {i * 7 % 13}." for i in range(60))   # several 64-token chunks
    first = engine.generate(long, {"max_new_tokens": 16, "temperature": 0})
    again = engine.generate(long, {"max_new_tokens": 16, "temperature": 0})
    assert first["meta_info"]["prompt_tokens"] > 256
    assert again["meta_info"]["cached_tokens"] >= first["meta_info"]["prompt_tokens"] - 64
    assert again["output_ids"] == first["output_ids"]


def test_cuda_graphs_on_and_off_give_the_same_tokens(engine):
    on = [o["output_ids"] for o in engine.generate(PROMPTS, {**GREEDY, "max_new_tokens": 32})]
    with _engine(disable_cuda_graph=True) as off_engine:
        assert off_engine.backend.info["cuda_graph_batch_sizes"] == []
        off = [o["output_ids"] for o in off_engine.generate(PROMPTS, {**GREEDY, "max_new_tokens": 32})]
    assert on == off
