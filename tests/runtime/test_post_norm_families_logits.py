"""Gemma 1, OLMo 2 and OLMo 3 against HF transformers on the same tiny random weights (logits_oracle.py), and served greedily
through the real scheduler against HF's generate.

Gemma 1: embeddings scaled by sqrt(H), (1 + weight) norms, GeGLU, head_dim 32 beside hidden 64 / 4 heads, tied
lm head.  OLMo 2: norms after each sublayer, whole-width q/k norms (Hq*D and Hkv*D) before rope, float32-weighted
norms.  OLMo 3: OLMo 2 with sliding layers (window 6, shorter than every prompt) rotated by their own rope base,
YaRN on its full layer.  The model runs as the server runs it on a CPU (attention backend "auto", packed weights) and once with the
torch reference kernels; every step goes through the paged pool with shuffled slots over garbage.
test_the_oracle_notices_each_difference proves the bound would catch a per-head q/k norm, unscaled embeddings or a
plain-weight norm, and test_olmo3_windows_and_local_rope_matter a missing window or a shared rope.
"""

import random

import pytest
import torch
from logits_oracle import HF, Paged, assert_close
from scheduler_harness import collect, make_scheduler, run_until_idle, submit

from radixlm.runtime.models.loader import load_model, load_tokenizer, read_model_config

FAMILIES = ("gemma", "olmo2", "olmo3")
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


def test_the_oracle_notices_each_difference(fam, monkeypatch):
    """A per-head q/k norm (OLMo 2), unscaled embeddings or a Llama-style norm weight (Gemma 1) leave the bound."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)
    model = paged.model
    if arch.startswith("olmo"):
        _per_head_qk_norms(model, monkeypatch)
        with pytest.raises(AssertionError):
            assert_close(paged.step([(0, ids)]), ref, "per-head q/k norms")
        return
    monkeypatch.setattr(model, "embed_scale", 1.0)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), ref, "unscaled embeddings")
    monkeypatch.undo()
    from radixlm.runtime.models import gemma

    monkeypatch.setattr(gemma, "gemma_rms_norm", lambda x, w, eps: (torch.nn.functional.rms_norm(
        x.float(), (x.shape[-1],), eps=eps) * w.float()).to(x.dtype))
    with pytest.raises(AssertionError):
        assert_close(paged.step([(1, ids)]), ref, "norms times weight, not 1 + weight")


def test_olmo3_windows_and_local_rope_matter(tiny_model):
    path = tiny_model("olmo3")
    ids = random.Random(22).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
    ref = HF(path)(ids)
    paged = Paged(path, seed=7, reference=True)
    model, backend = paged.model, paged.model.attn_backend
    kept = backend.layer_variants
    try:
        backend.set_layer_variants([None] * model.config.num_layers)
        with pytest.raises(AssertionError):
            assert_close(paged.step([(0, ids)]), ref, "no windows")
    finally:
        backend.layer_variants = kept
    local = model.local_cos_sin
    try:
        model.local_cos_sin = model.cos_sin
        with pytest.raises(AssertionError):
            assert_close(paged.step([(1, ids)]), ref, "the full layers' rope on the sliding ones")
    finally:
        model.local_cos_sin = local


def _per_head_qk_norms(model, monkeypatch):
    """OLMo 2's attention as Qwen3's: the same q/k norm weights, each head normalised alone."""
    from radixlm.runtime.models.llama import LlamaAttention
    from radixlm.runtime.models.olmo2 import Olmo2Attention

    c = model.config
    monkeypatch.setattr(Olmo2Attention, "forward", LlamaAttention.forward)
    for layer in model.layers:
        attn = layer.self_attn
        weights = torch.cat([attn.q_norm.view(c.num_heads, c.head_dim), attn.k_norm.view(c.num_kv_heads, c.head_dim)])
        monkeypatch.setattr(attn, "qk_norm", weights)  # [Hq+Hkv, D]


def test_model_config_fields(tiny_model):
    gemma = read_model_config(tiny_model("gemma"))
    assert (gemma.head_dim, gemma.hidden_act, gemma.tie_word_embeddings) == (32, "gelu_tanh", True)
    assert gemma.sm_scale == 32 ** -0.5 and not gemma.layer_windows and gemma.final_softcap is None
    olmo2 = read_model_config(tiny_model("olmo2"))
    assert (olmo2.hidden_act, olmo2.qk_norm, olmo2.tie_word_embeddings) == ("silu", False, False)
    olmo3 = read_model_config(tiny_model("olmo3"))
    assert olmo3.layer_windows == (6, None, 6) and olmo3.context_length == 256 and olmo3.local_rope_theta == 100.0
    assert olmo3.rope_scaling["rope_type"] == "yarn" and olmo3.rope_scaling["factor"] == 4.0


def test_what_they_do_not_run_is_refused(tiny_model, tmp_path):
    from transformers import GemmaConfig, Olmo2Config, Olmo3Config

    from radixlm.runtime.models.config import ModelConfig

    for config in (GemmaConfig(attention_bias=True), Olmo2Config(attention_bias=True), Olmo3Config(attention_bias=True)):
        with pytest.raises(ValueError, match="attention_bias"):
            ModelConfig.from_hf(config)
    for arch in FAMILIES:
        model, _ = load_model(tiny_model(arch))
        assert model.enable_native_decode() is not None and model.native_decode is None
        with pytest.raises(ValueError, match="tensor parallelism"):
            model.enable_tensor_parallel(object())
        with pytest.raises(ValueError, match="GGUF"):
            load_model(tiny_model(arch), gguf=tmp_path / "model.gguf")


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
    """Three requests sharing a 12-token prefix (twice OLMo 3's window), prefilled in chunks of 8 and decoded together, give HF's greedy
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
    """The model over the Triton kernels (the CUDA path; here under TRITON_INTERPRET=1), OLMo 3's windows in them."""
    from radixlm.kernels import dispatch
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    _, path, hf, ids = fam
    ref = hf(ids)

    def factory(config):
        return create_attention_backend("triton", KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim),
                                        config.sm_scale)

    model, _ = load_model(path, torch.float32, factory)
    table = ReqToTokenPool(2, 64)
    slots = torch.randperm(64, generator=torch.Generator().manual_seed(8))[:LENGTH].tolist()
    table.write(0, 0, slots)
    split = 16
    fb = ForwardBatch.build(ids[:split], [0], [split], [0], slots[:split], table.table,
                            logits_indices=list(range(split)))
    assert_close(model.compute_logits(model.forward(fb)), ref[:split], "triton prefill")
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
