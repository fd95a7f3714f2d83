"""StarCoder2 and StableLM against HF transformers on the same tiny random weights (logits_oracle.py), and served greedily
through the real scheduler against HF's generate.

StarCoder2: LayerNorms with a bias, biases on q/k/v/o and on the non-gated gelu-tanh MLP (c_fc, c_proj), a window
of 10 on every layer (shorter than every prompt), tied lm head.  StableLM: LayerNorms with a bias, partial rotary
(4 of each head's 16 dims), per-head q/k LayerNorms (each head its own weight), the gated SiLU MLP; "stablelm" with q/k/v
bias and the sequential residual, "stablelm_parallel" with the parallel residual (no post-attention norm).  The model
runs as the server runs it on a CPU (attention backend "auto", packed weights), with the torch reference kernels and
over the Triton kernels under the interpreter; every step goes through the paged pool with shuffled slots over garbage.
test_the_oracle_notices_each_difference proves the bound would catch a dropped LayerNorm bias, an exact gelu, a
missing window, the whole head rotated, one q/k norm weight for every head, or the MLP after the attention.
"""

import contextlib
import dataclasses
import random

import pytest
import torch
from logits_oracle import HF, Paged, assert_close
from scheduler_harness import collect, make_scheduler, run_until_idle, submit

from radixlm.runtime.models.loader import load_model, load_tokenizer, read_model_config
from radixlm.runtime.models.stablelm import StableLmDecoderLayer

FAMILIES = ("starcoder2", "stablelm", "stablelm_parallel")
LENGTH = 24


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    """-> (arch, path, HF oracle, LENGTH token ids)."""
    path = tiny_model(request.param)
    ids = random.Random(31).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
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
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True, rows=12)  # two fresh rows per difference
    for row, (what, swaps) in enumerate(_differences(arch, paged.model)):
        with contextlib.ExitStack() as stack:
            for obj, name, value in swaps:
                stack.enter_context(_swapped(obj, name, value))
            with pytest.raises(AssertionError):
                assert_close(paged.step([(2 * row, ids)]), ref, what)
        assert_close(paged.step([(2 * row + 1, ids)]), ref, f"{what}, undone")


def _differences(arch, model) -> list:
    """[(what, [(object, attribute, value), ...])]: ways the model could differ from HF's."""
    layer = model.layers[0]
    norm = layer.input_layernorm
    changes = [("LayerNorm bias dropped", [(norm, "bias", _parameter(torch.zeros_like(norm.bias)))])]
    if arch == "starcoder2":
        return changes + [("exact gelu", [(lay.mlp, "approximate", "none") for lay in model.layers]),
                          ("no windows", [(model.attn_backend, "layer_variants", {})])]
    attn = layer.self_attn
    changes += [("the whole head rotated", [(model, "cos_sin", _full_rotary_cache(model))]),
                ("one q/k norm weight for every head",
                 [(attn, "qk_norm", _parameter(attn.qk_norm[:1].expand_as(attn.qk_norm).clone()))])]
    if arch == "stablelm_parallel":
        changes.append(("the MLP after the attention", [(StableLmDecoderLayer, "forward", _sequential_forward)]))
    return changes


@contextlib.contextmanager
def _swapped(obj, name: str, value):
    kept = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, kept)


def _parameter(tensor: torch.Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(tensor, requires_grad=False)


def _full_rotary_cache(model) -> torch.Tensor:
    from radixlm.runtime.models.rope import rope_cos_sin_cache

    full = dataclasses.replace(model.config, rotary_dim=None)
    return rope_cos_sin_cache(full, model.cos_sin.shape[0]).to(model.cos_sin.dtype)  # [C, D]


def _sequential_forward(self, x, rotary, fb):
    """The parallel-residual layer with its MLP reading input_layernorm(x + attn) instead of input_layernorm(x)."""
    x = x + self.self_attn(self.input_layernorm(x), rotary, fb)
    return x + self.mlp(self.input_layernorm(x))


def test_model_config_fields(tiny_model):
    sc2 = read_model_config(tiny_model("starcoder2"))
    assert sc2.layer_windows == (10, 10, 10) and sc2.context_length == 256 and sc2.hidden_act == "gelu_tanh"
    assert (sc2.attention_bias, sc2.o_proj_bias, sc2.mlp_bias, sc2.tie_word_embeddings) == (True, True, True, True)
    slm = read_model_config(tiny_model("stablelm"))
    assert (slm.rotary_dim, slm.head_dim, slm.qk_norm, slm.parallel_residual) == (4, 16, True, False)
    assert (slm.attention_bias, slm.o_proj_bias, slm.hidden_act, slm.layer_windows) == (True, False, "silu", ())
    par = read_model_config(tiny_model("stablelm_parallel"))
    assert (par.parallel_residual, par.attention_bias) == (True, False)


def test_windows_as_long_as_the_context_are_dropped():
    from transformers import Starcoder2Config

    from radixlm.runtime.models.config import ModelConfig

    assert ModelConfig.from_hf(Starcoder2Config(sliding_window=4096, max_position_embeddings=4096)).layer_windows == ()
    assert ModelConfig.from_hf(Starcoder2Config(sliding_window=None)).layer_windows == ()
    assert ModelConfig.from_hf(Starcoder2Config(use_bias=False)).mlp_bias is False


def test_what_they_do_not_run_is_refused(tiny_model, tmp_path):
    from transformers import StableLmConfig, Starcoder2Config

    from radixlm.runtime.models.config import ModelConfig

    for config in (Starcoder2Config(hidden_act="relu"), StableLmConfig(hidden_act="gelu")):
        with pytest.raises(ValueError, match="activation"):
            ModelConfig.from_hf(config)
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        ModelConfig.from_hf(StableLmConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                             partial_rotary_factor=0.1))
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
    """Three requests sharing a 12-token prefix (longer than StarCoder2's window), prefilled in chunks of 8 and decoded
    together, give HF's greedy tokens."""
    from transformers import AutoModelForCausalLM

    path = tiny_model(arch)
    rng = random.Random(4)
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
    """The model over the Triton kernels (the CUDA path; here under TRITON_INTERPRET=1), StarCoder2's window in them."""
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
