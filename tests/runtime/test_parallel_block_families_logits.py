"""Phi, Cohere and GLM-4 against HF transformers on the same tiny random weights (logits_oracle.py), and served greedily
through the real scheduler against HF's generate.

Phi: LayerNorms with biases read by attention and MLP in parallel, biases on q/k/v and dense, fc1 -> gelu_new -> fc2,
6 of 16 head dims rotating (partial_rotary_factor 0.4), q/k LayerNorms with biases, an lm head with a bias.  Cohere:
the parallel block with bias-free LayerNorms, interleaved rope (run as rotate-half on q/k rows reordered at load),
per-head q/k norm weights, logits times 4, tied embeddings, biases on all four attention projections.  GLM-4: the
Llama weights with norms after each sublayer too, fused gate_up_proj, q/k/v biases, head_dim 32 with its first 16
dims rotating in interleaved pairs (the same reordering, the rest of each head in place).  The model runs
as the server runs it on a CPU (attention backend "auto", packed weights) and once with the torch reference kernels;
every step goes through the paged pool with shuffled slots over garbage.  test_the_oracle_notices_each_difference
proves the bound would catch Cohere or GLM-4 read with rotate-half rope, GLM-4's reordering over the whole head,
Cohere without its logit scale, and Phi without its lm head bias or its q/k norm biases.
"""

import contextlib
import dataclasses
import random

import pytest
import torch
from logits_oracle import HF, Paged, assert_close
from scheduler_harness import collect, make_scheduler, run_until_idle, submit

from radixlm.runtime.models.interleaved_rope import interleaved_to_half_order, reorder_head_dims
from radixlm.runtime.models.loader import load_model, load_tokenizer, read_model_config

FAMILIES = ("phi", "cohere", "glm4")
LENGTH = 24


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    """-> (arch, path, HF oracle, LENGTH token ids)."""
    path = tiny_model(request.param)
    ids = random.Random(21).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
    return request.param, path, HF(path), ids


def test_prefill_single_and_batch(fam):
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "single prefill")
    short = ids[:9]
    both = paged.step([(1, short), (2, ids)])
    assert_close(both[:9], hf(short), "batched prefill, request 1")
    assert_close(both[9:], ref, "batched prefill, request 2")


def test_extend_on_a_cached_prefix(fam):
    _, path, hf, ids = fam
    other = ids[5:] + ids[:3]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=1)
    paged.step([(0, ids[:13]), (3, other[:4])])
    out = paged.step([(0, ids[13:]), (3, other[4:])])
    assert_close(out[:LENGTH - 13], ref[13:], "extend after prefix 13")
    assert_close(out[LENGTH - 13:], ref_other[4:], "extend after prefix 4")


def test_chunked_prefill(fam):
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=2)
    for start in range(0, LENGTH, 5):
        assert_close(paged.step([(1, ids[start:start + 5])]), ref[start:start + 5], f"chunk at {start}")


def test_decode_batch_of_two(fam):
    _, path, hf, ids = fam
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = Paged(path, seed=3)
    paged.step([(0, seq_a[:5]), (2, seq_b[:7])])
    for i in range(LENGTH - 7):
        out = paged.step([(0, [seq_a[5 + i]]), (2, [seq_b[7 + i]])])  # [2, V]
        assert_close(out[0], ref_a[5 + i], f"decode at {5 + i}, request a")
        assert_close(out[1], ref_b[7 + i], f"decode at {7 + i}, request b")


def test_reference_kernels_and_dense_weights(fam, monkeypatch):
    from radixlm.runtime.models import layer_ops

    monkeypatch.setattr(layer_ops, "_native", lambda x: False)
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=5, reference=True)
    assert_close(paged.step([(0, ids[:10])]), ref[:10], "reference prefill")
    for i in range(10, LENGTH):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def test_the_oracle_notices_each_difference(fam):
    """Cohere's or GLM-4's rope as rotate-half on HF's rows, GLM-4's pass-through dims reordered too, Cohere's logit
    scale dropped, Phi's lm head bias or q/k norm biases dropped: each leaves the bound."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)
    m = paged.model
    c = m.config
    back = torch.argsort(interleaved_to_half_order(c.head_dim, c.rope_dim))  # [D]: our head order -> HF's
    changes = {  # built for `arch` only
        "cohere": lambda: [("rotate-half rope on HF's q/k rows", _reordered(m, back)),
                           ("no logit scale", [(m, "config", dataclasses.replace(c, logit_scale=None))])],
        "glm4": lambda: [("rotate-half rope on HF's q/k rows", _reordered(m, back)),
                         ("the whole head reordered",
                          _reordered(m, back[interleaved_to_half_order(c.head_dim, c.head_dim)]))],
        "phi": lambda: [("no lm head bias", [(m, "lm_head_bias", None)]),
                        ("no q/k norm biases", [(layer.self_attn, "qk_bias", None) for layer in m.layers])],
    }[arch]()
    for row, (what, swaps) in enumerate(changes):
        with _replaced(swaps), pytest.raises(AssertionError, match="logit error"):
            assert_close(paged.step([(row, ids)]), ref, what)


@contextlib.contextmanager
def _replaced(swaps):
    """Each (module, attribute, value) set for the duration of the block, the old values put back after."""
    old = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    try:
        for module, name, value in swaps:
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in old:
            setattr(module, name, value)


def _reordered(model, order: torch.Tensor) -> list:
    """Swaps that reorder each head's q/k rows (and their biases and norm weights) by `order` [D] from how they were
    loaded: argsort(interleaved_to_half_order) puts them back in HF's interleaved order, as the model would be without
    the reordering at load, rotating HF's dims (i, i + R/2) together."""
    c, swaps = model.config, []
    qk_rows = (c.num_heads + c.num_kv_heads) * c.head_dim
    for layer in model.layers:
        attn = layer.self_attn
        for name in ("qkv_proj", "qkv_bias"):
            t = getattr(attn, name).detach()
            swaps.append((attn, name, torch.cat([reorder_head_dims(name, t[:qk_rows], order), t[qk_rows:]])))
        if attn.qk_norm is not None:
            swaps.append((attn, "qk_norm", reorder_head_dims("q_norm.weight", attn.qk_norm.detach(), order)))
    return [(m, name, torch.nn.Parameter(t, requires_grad=False)) for m, name, t in swaps]


def test_reordered_rotate_half_is_hf_interleaved_rope():
    """HF Cohere's interleaved rope on q and k equals layer_ops.Rotary (rotate-half) on their dims in
    interleaved_to_half_order, read back in that order; their scores are the same."""
    from transformers import CohereConfig
    from transformers.models.cohere.modeling_cohere import CohereRotaryEmbedding, apply_rotary_pos_emb

    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.models.layer_ops import Rotary
    from radixlm.runtime.models.rope import rope_cos_sin_cache

    hf_config = CohereConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
                             max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 100.0})
    gen = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 1, 4, 40, 16, generator=gen)  # [B, heads, T, D] each
    positions = torch.arange(40)[None]  # [1, T]
    cos, sin = CohereRotaryEmbedding(hf_config)(q, positions)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)  # [1, heads, T, D] each
    config = ModelConfig.from_hf(hf_config)
    order = interleaved_to_half_order(config.head_dim, config.rope_dim)  # [D]
    rotary = Rotary(positions[0], rope_cos_sin_cache(config, 64))
    got_q, got_k = (rotary.apply_(x[0].transpose(0, 1)[..., order]) for x in (q, k))  # [T, heads, D] each
    torch.testing.assert_close(got_q, want_q[0].transpose(0, 1)[..., order])
    torch.testing.assert_close(got_k, want_k[0].transpose(0, 1)[..., order])
    got_scores = got_q.transpose(0, 1) @ got_k.permute(1, 2, 0)  # [heads, T, T]
    torch.testing.assert_close(got_scores, want_q[0] @ want_k[0].transpose(1, 2))


def test_model_config_fields(tiny_model):
    phi = read_model_config(tiny_model("phi"))
    assert (phi.rotary_dim, phi.rope_dim, phi.hidden_act, phi.qk_norm) == (6, 6, "gelu_tanh", True)
    assert (phi.attention_bias, phi.o_proj_bias, phi.tie_word_embeddings, phi.logit_scale) == (True, True, False, None)
    cohere = read_model_config(tiny_model("cohere"))
    assert (cohere.rope_dim, cohere.hidden_act, cohere.qk_norm, cohere.logit_scale) == (16, "silu", True, 4.0)
    assert (cohere.attention_bias, cohere.o_proj_bias, cohere.tie_word_embeddings) == (True, True, True)
    glm4 = read_model_config(tiny_model("glm4"))
    assert (glm4.head_dim, glm4.rope_dim, glm4.qk_norm) == (32, 16, False)
    assert (glm4.attention_bias, glm4.o_proj_bias, glm4.tie_word_embeddings) == (True, False, False)


def test_what_they_do_not_run_is_refused(tiny_model, tmp_path):
    from fp8_checkpoints import fp8_checkpoint
    from transformers import CohereConfig, PhiConfig

    from radixlm.runtime.models.config import ModelConfig

    with pytest.raises(ValueError, match="gelu-tanh"):
        ModelConfig.from_hf(PhiConfig(hidden_act="relu"))
    with pytest.raises(ValueError, match="partial rotary"):
        ModelConfig.from_hf(CohereConfig(partial_rotary_factor=0.5))
    with pytest.raises(ValueError, match="quantization fp8"):
        load_model(tiny_model("phi"), quantization="fp8")
    for arch in FAMILIES:
        model, _ = load_model(tiny_model(arch))
        assert model.enable_native_decode() is not None and model.native_decode is None
        with pytest.raises(ValueError, match="tensor parallelism"):
            model.enable_tensor_parallel(object())
        with pytest.raises(ValueError, match="GGUF"):
            load_model(tiny_model(arch), gguf=tmp_path / "model.gguf")
        fp8_checkpoint(tiny_model(arch), tmp_path / arch)
        with pytest.raises(ValueError, match="FP8 checkpoints load only"):
            load_model(tmp_path / arch)


@pytest.mark.parametrize("arch", ["cohere", "glm4"])
def test_quantized_at_load_equals_the_dequantized_dense_model(tiny_model, arch):
    """--quantization fp8 quantizes every row on its own, so the rows reordered at load quantize as HF's would."""
    from radixlm.runtime.models.fp8_linear import Fp8Weight
    from radixlm.runtime.models.fp8_model import fused_linears

    path = tiny_model(arch)
    fp8, dense = _model_over_own_pool(path, "torch", quantization="fp8"), _model_over_own_pool(path, "torch")
    linears = list(zip(fused_linears(fp8), fused_linears(dense)))
    assert len(linears) == 4 * len(fp8.layers)
    for (m, name, _), (dm, _, _) in linears:
        weight = getattr(m, name)
        assert isinstance(weight, Fp8Weight)
        getattr(dm, name).copy_(weight.dequantize())
    ids = list(range(3, 3 + LENGTH))
    torch.testing.assert_close(_prefill(fp8, ids), _prefill(dense, ids), rtol=0, atol=0)


def _model_over_own_pool(path, backend: str, quantization=None):
    """The model loaded over a fresh 64-slot pool and attention backend `backend`."""
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.memory_pool import KVPool

    def factory(config):
        return create_attention_backend(backend, KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim),
                                        config.sm_scale)

    return load_model(path, torch.float32, factory, quantization=quantization)[0]


def _table_and_slots(n: int):
    from radixlm.runtime.runner.memory_pool import ReqToTokenPool

    table = ReqToTokenPool(2, 64)
    slots = torch.randperm(64, generator=torch.Generator().manual_seed(8))[:n].tolist()
    table.write(0, 0, slots)
    return table, slots


def _prefill(model, ids):
    """Logits [T, V] of one request's prefill of `ids` over shuffled slots."""
    from radixlm.runtime.runner.forward_batch import ForwardBatch

    table, slots = _table_and_slots(len(ids))
    fb = ForwardBatch.build(ids, [0], [len(ids)], [0], slots, table.table, logits_indices=list(range(len(ids))))
    return model.compute_logits(model.forward(fb))  # [T, V]


def _serve(path, reqs, **config):
    from radixlm.runtime.runner.model_runner import ModelRunner

    runner = ModelRunner(str(path), dtype="float32", max_total_tokens=1024, num_rows=8)
    sched = make_scheduler(runner, **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True})
    run_until_idle(sched)
    out = collect(sched)
    return {rid: out[rid]["tokens"] for rid, _, _ in reqs}


@pytest.mark.parametrize("arch", FAMILIES)
def test_greedy_serving_matches_hf_generate(arch, tiny_model):
    """Three requests sharing a 12-token prefix, prefilled in chunks of 8 and decoded together, give HF's greedy
    tokens."""
    from transformers import AutoModelForCausalLM

    path = tiny_model(arch)
    rng = random.Random(3)
    vocab = read_model_config(path).vocab_size
    prefix = [rng.randrange(3, vocab) for _ in range(12)]
    reqs = [(f"r{i}", prefix + [rng.randrange(3, vocab) for _ in range(n)], 8) for i, n in enumerate((2, 5, 7))]
    got = _serve(path, reqs, chunked_prefill_size=8)
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    for rid, prompt, n in reqs:
        with torch.no_grad():
            want = hf.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        assert got[rid] == want[0, len(prompt):].tolist(), rid


def test_triton_backend_under_the_interpreter(fam):
    """The model over the Triton kernels (the CUDA path; here under TRITON_INTERPRET=1)."""
    from radixlm.kernels import dispatch
    from radixlm.runtime.runner.forward_batch import ForwardBatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    _, path, hf, ids = fam
    ref = hf(ids)
    model = _model_over_own_pool(path, "triton")
    split = 16
    assert_close(_prefill(model, ids[:split]), ref[:split], "triton prefill")
    table, slots = _table_and_slots(LENGTH)
    for i in range(split, LENGTH):
        fb = ForwardBatch.build([ids[i]], [i], [1], [0], [slots[i]], table.table)
        assert_close(model.compute_logits(model.forward(fb))[0], ref[i], f"triton decode at {i}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", FAMILIES)
def test_cuda_engine_greedy_matches_hf(arch, tiny_model):
    """On CUDA (Triton kernels, CUDA graphs for the decodes), twice, the second from a cached prefix: HF's greedy
    tokens (float32, on the same GPU)."""
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.engine import Engine

    path = tiny_model(arch)
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).cuda().eval()
    prompt = [random.Random(6).randrange(3, hf.config.vocab_size) for _ in range(18)]
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=10, min_new_tokens=10,
                           do_sample=False)[0, 18:].tolist()
    params = {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}
    with Engine(model=str(path), dtype="float32", chunked_prefill_size=8, log_level="warning") as engine:
        assert str(engine.backend.info["device"]).startswith("cuda")
        for _ in range(2):
            assert engine.generate(input_ids=prompt, sampling_params=params)["output_ids"] == want
