"""LFM2 and LFM2-MoE (lfm2.py, lfm2_config.py) against HF: logits of prefills, chunked prefills, decodes and a mixed
step over each request row's carried convolution inputs; the config fields (the auto-adjusted feed-forward width, only
the attention layers in the KV pool, LFM2-MoE's routing rule); the oracle noticing the carried convolution inputs, the
q/k norms and the expert bias left out; refusals; and the scheduler serving LFM2 greedily as HF generates.
"""

import random

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from paged_checks import (
    check_chunked_prefill,
    check_decode_pair,
    check_mixed_step,
    check_prefill_single_and_batch,
    check_triton_backend,
)
from scheduler_harness import collect, make_scheduler, run_until_idle, submit
from tiny_models import TINY_CONV_ARCHS

from radixlm.runtime.models import loader

pytest.importorskip("transformers.models.lfm2_moe")


@pytest.fixture(scope="module")
def cases(tiny_model):
    return {arch: family_case(arch, tiny_model(arch), 30) for arch in TINY_CONV_ARCHS}


@pytest.mark.parametrize("arch", TINY_CONV_ARCHS)
def test_logits_of_prefills_chunks_decodes_and_mixed_steps(cases, arch):
    case = cases[arch]
    check_prefill_single_and_batch(case)
    check_chunked_prefill(case, 7)
    if arch == "lfm2":
        check_decode_pair(case, 12, 20, 25)
    else:
        check_mixed_step(case, 12, 9)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", TINY_CONV_ARCHS)
def test_triton_backend_on_cuda(tiny_model, arch):
    """The attention layer over the Triton kernels, the short convolutions in torch on the GPU: a prefill, then
    decodes."""
    check_triton_backend(family_case(arch, tiny_model(arch), 30), "cuda", split=22)


def test_config_fields(tiny_model):
    c = loader.read_model_config(tiny_model("lfm2"))
    assert (c.short_conv.conv_layers, c.short_conv.conv_kernel, c.short_conv.bias) == ((0, 1, 3), 3, True)
    assert c.kv_layers == 1 and c.intermediate_size == 128 and c.qk_norm and c.tie_word_embeddings and c.moe is None
    m = loader.read_model_config(tiny_model("lfm2_moe"))
    assert m.kv_layers == 1 and m.intermediate_size == 96 and not m.short_conv.bias and not m.tie_word_embeddings
    moe = m.moe
    assert (moe.num_experts, moe.top_k, moe.intermediate_size, moe.sparse_layers) == (8, 2, 32, (1, 2, 3))
    assert (moe.scoring, moe.correction_bias, moe.norm_topk_prob, moe.routed_scaling_factor, moe.topk_norm_eps) == (
        "sigmoid", True, True, 2.5, 1e-6)


def _leave_out(what, model, monkeypatch):
    from hybrid_models import forget_convolution_inputs

    if what == "carried convolution inputs":
        forget_convolution_inputs(monkeypatch)
    elif what == "q/k norms":
        for layer in model.layers:
            if getattr(layer.mixer, "qk_norm", None) is not None:
                monkeypatch.setattr(layer.mixer, "qk_norm", None)
    elif what == "expert bias":
        for _, block in model.sparse_blocks():
            monkeypatch.setattr(block, "correction_bias", None)


@pytest.mark.parametrize("arch, what", [("lfm2", "carried convolution inputs"), ("lfm2", "q/k norms"),
                                        ("lfm2_moe", "expert bias")])
def test_the_oracle_notices_each_feature_left_out(cases, arch, what, monkeypatch):
    _, path, hf, ids = cases[arch]
    ids = ids[:24]
    ref = hf(ids)
    paged = Paged(path, seed=6)
    _leave_out(what, paged.model, monkeypatch)
    out = torch.cat([paged.step([(0, ids[:9])]), paged.step([(0, ids[9:])])])
    with pytest.raises(AssertionError):
        assert_close(out, ref, what)


def test_refusals(tiny_model):
    from transformers import Lfm2Config, Lfm2MoeConfig

    from radixlm.runtime.models.config import ModelConfig

    small = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2)
    bad = Lfm2Config(layer_types=["conv", "sliding_attention"], **small)
    with pytest.raises(ValueError, match="Lfm2ForCausalLM: layer_types"):
        ModelConfig.from_hf(bad)
    moe = dict(layer_types=["conv", "full_attention"], num_experts=4, **small)
    with pytest.raises(ValueError, match="num_experts_per_tok 5"):
        ModelConfig.from_hf(Lfm2MoeConfig(num_experts_per_tok=5, **moe))
    with pytest.raises(ValueError, match="num_dense_layers 3"):
        ModelConfig.from_hf(Lfm2MoeConfig(num_dense_layers=3, num_experts_per_tok=2, **moe))
    for arch in TINY_CONV_ARCHS:
        model, config = loader.load_model(tiny_model(arch))
        with pytest.raises(ValueError, match=f"{config.architecture}: tensor parallelism"):
            model.enable_tensor_parallel(None)


def test_served_greedily_as_hf_generates(tiny_model):
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.runner.model_runner import ModelRunner

    path = tiny_model("lfm2")
    rng = random.Random(5)
    prompts = [[rng.randrange(3, 380) for _ in range(n)] for n in (17, 21)]
    prompts[1][:12] = prompts[0][:12]   # a shared prefix: the first's first chunk leaves a state snapshot at 8
    runner = ModelRunner(str(path), dtype="float32", max_total_tokens=256, num_rows=8)
    sched = make_scheduler(runner, chunked_prefill_size=8, overlap_schedule=True)
    assert not sched.config.disable_radix_cache and sched.config.overlap_schedule   # plain decodes in flight
    for i, prompt in enumerate(prompts):
        submit(sched, str(i), prompt, 10, params={"ignore_eos": True})
    run_until_idle(sched)
    out = collect(sched)
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None   # as ignore_eos: the end token may be chosen and is not the end
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            want = hf.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False)
        assert out[str(i)]["tokens"] == want[0, len(prompt):].tolist(), i
        assert out[str(i)]["cached_tokens"] == 8 * i
