"""Gemma 2, Gemma 3 (text) and Phi-3 against HF transformers on the same tiny random weights (logits_oracle.py).

Every prompt is longer than the model's sliding window (8, 6 and 12 keys), so the windowed layers see fewer
keys than the full ones; Gemma 2's soft-caps bind (scores capped at 2, logits at 3).  The model runs as the
server runs it on a CPU (attention backend "auto", packed weights) and once with the torch reference kernels;
every step goes through the paged pool with shuffled slots over garbage.  test_windows_and_caps_matter proves
the oracle would notice a window or a cap that is not applied.
"""

import random

import pytest
import torch
from logits_oracle import HF, Paged, assert_close

from radixlm.runtime.models.loader import load_tokenizer, read_model_config

FAMILIES = ("gemma2", "gemma3", "phi3")
LENGTH = 30  # prompt tokens: past every window, below Phi-3's original context (32): its short rope factors


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    """-> (arch, path, HF oracle, LENGTH token ids)."""
    path = tiny_model(request.param)
    ids = random.Random(11).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
    return request.param, path, HF(path), ids


def test_prefill_single_and_batch(fam):
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "single prefill")
    short = ids[:13]
    both = paged.step([(1, short), (2, ids)])
    assert_close(both[:13], hf(short), "batched prefill, request 1")
    assert_close(both[13:], ref, "batched prefill, request 2")


def test_extend_on_a_cached_prefix_longer_than_the_window(fam):
    _, path, hf, ids = fam
    other = ids[5:] + ids[:3]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=1)
    paged.step([(0, ids[:17]), (3, other[:4])])
    out = paged.step([(0, ids[17:]), (3, other[4:])])
    assert_close(out[:LENGTH - 17], ref[17:], "extend after prefix 17")
    assert_close(out[LENGTH - 17:], ref_other[4:], "extend after prefix 4")


def test_chunked_prefill(fam):
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=2)
    for start in range(0, LENGTH, 4):
        assert_close(paged.step([(1, ids[start:start + 4])]), ref[start:start + 4], f"chunk at {start}")


def test_decode_batch_of_two_across_the_window(fam):
    """Decode steps from inside the window to well past it (Phi-3: the native one-call decode, then op by op)."""
    _, path, hf, ids = fam
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = Paged(path, seed=3)
    paged.step([(0, seq_a[:5]), (2, seq_b[:7])])
    for i in range(LENGTH - 7):
        out = paged.step([(0, [seq_a[5 + i]]), (2, [seq_b[7 + i]])])  # [2, V]
        assert_close(out[0], ref_a[5 + i], f"decode at {5 + i}, request a")
        assert_close(out[1], ref_b[7 + i], f"decode at {7 + i}, request b")


def test_mixed_step(fam):
    """Decodes beside a prefill chunk in one step (the backend splits them, windows on both parts)."""
    _, path, hf, ids = fam
    other = ids[::-1]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=4)
    paged.step([(0, ids[:20]), (1, other[:15])])
    out = paged.step([(0, [ids[20]]), (1, [other[15]]), (2, ids[:10])])
    assert_close(out[0], ref[20], "decode of request 0")
    assert_close(out[1], ref_other[15], "decode of request 1")
    assert_close(out[2:], ref[:10], "prefill of request 2")


def test_reference_kernels_and_dense_weights(fam, monkeypatch):
    from radixlm.runtime.models import layer_ops

    monkeypatch.setattr(layer_ops, "_native", lambda x: False)
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=5, reference=True)
    assert_close(paged.step([(0, ids[:12])]), ref[:12], "reference prefill")
    for i in range(12, LENGTH):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def test_windows_and_caps_matter(fam):
    """Without the windows (and Gemma 2's caps) the logits leave the bound: the tests above can fail."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)
    backend, config = paged.model.attn_backend, paged.config
    kept = backend.layer_variants
    try:
        backend.set_layer_variants([None] * config.num_layers, config.attn_softcap)
        with pytest.raises(AssertionError):
            assert_close(paged.step([(0, ids)]), ref, "no windows")
        if arch == "gemma2":
            backend.set_layer_variants(config.layer_windows, None)
            with pytest.raises(AssertionError):
                assert_close(paged.step([(1, ids)]), ref, "no attention soft-cap")
    finally:
        backend.layer_variants = kept


def test_final_softcap_matters(tiny_model):
    path = tiny_model("gemma2")
    ids = random.Random(12).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
    paged = Paged(path, seed=7)
    hidden = paged.model.forward(_prefill(paged, ids))  # [T, H]
    capped = paged.model.compute_logits(hidden)  # [T, V]
    assert capped.abs().max() < 3.0
    assert torch.allclose(capped, 3.0 * torch.tanh(_raw_logits(paged.model, hidden) / 3.0), atol=1e-5)


def _prefill(paged, ids):
    from radixlm.runtime.runner.forward_batch import ForwardBatch

    slots = [paged.free.pop() for _ in ids]
    paged.table.write(0, 0, slots)
    return ForwardBatch.build(ids, [0], [len(ids)], [0], slots, paged.table.table,
                              logits_indices=list(range(len(ids))))


def _raw_logits(model, hidden):
    from radixlm.runtime.models.packed_linear import linear

    return linear(hidden, model.lm_head).float()  # [T, V]


def test_model_config_fields(tiny_model):
    gemma2 = read_model_config(tiny_model("gemma2"))
    assert gemma2.layer_windows == (8, None, 8) and (gemma2.attn_softcap, gemma2.final_softcap) == (2.0, 3.0)
    assert gemma2.context_length == gemma2.max_position_embeddings == 256  # the window is enforced: no cap
    assert gemma2.sm_scale == 24 ** -0.5 and gemma2.hidden_act == "gelu_tanh"
    gemma3 = read_model_config(tiny_model("gemma3"))
    assert gemma3.layer_windows == (6, None, 6) and gemma3.qk_norm and gemma3.local_rope_theta == 100.0
    assert (gemma3.rope_theta, gemma3.rope_scaling) == (10000.0, {"rope_type": "linear", "factor": 2.0})
    assert gemma3.attn_softcap is None and gemma3.final_softcap is None
    phi3 = read_model_config(tiny_model("phi3"))
    assert phi3.layer_windows == (12, 12) and phi3.context_length == 256
    assert phi3.rope_scaling["rope_type"] == "longrope" and phi3.rope_scaling["original_max_position_embeddings"] == 32


def test_phi3_longrope_rows_match_hf(tiny_model):
    """Each position's cos/sin against HF's rotary embedding: short factors below 32 (HF: a sequence within the
    original context), long ones from 32 (HF: a sequence past it), both times the attention factor."""
    from transformers import AutoConfig
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    from radixlm.runtime.models.rope import rope_cos_sin_cache

    path = tiny_model("phi3")
    config = read_model_config(path)
    ours = rope_cos_sin_cache(config, 64)  # [64, D]
    rotary = Phi3RotaryEmbedding(AutoConfig.from_pretrained(str(path)))
    x = torch.zeros(1, 1, config.head_dim)
    for length in (32, 64):  # HF chooses the factors by the sequence's length
        cos, sin = rotary(x, torch.arange(length)[None])  # [1, L, D] each
        lo = 0 if length == 32 else 32
        half = config.head_dim // 2
        assert torch.allclose(ours[lo:length, :half], cos[0, lo:, :half], atol=1e-6), length
        assert torch.allclose(ours[lo:length, half:], sin[0, lo:, :half], atol=1e-6), length
    assert not torch.allclose(ours[31:33], rope_cos_sin_cache(config.__class__(**{
        **config.__dict__, "rope_scaling": {**config.rope_scaling, "long_factor": config.rope_scaling["short_factor"]}}),
        64)[31:33])  # the long factors do change position 32


def test_triton_backend_under_the_interpreter(fam):
    """The model over the Triton kernels (the CUDA path; here under TRITON_INTERPRET=1): windows and caps in them."""
    from radixlm.kernels import dispatch
    from radixlm.runtime.models.loader import load_model
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    _, path, hf, ids = fam
    ref = hf(ids)
    box = {}

    def factory(config):
        box["kv"] = KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim)
        return create_attention_backend("triton", box["kv"], config.sm_scale)

    model, _ = load_model(path, torch.float32, factory)
    table = ReqToTokenPool(2, 64)
    slots = torch.randperm(64, generator=torch.Generator().manual_seed(8))[:LENGTH].tolist()
    table.write(0, 0, slots)
    split = 24
    fb = ForwardBatch.build(ids[:split], [0], [split], [0], slots[:split], table.table,
                            logits_indices=list(range(split)))
    assert_close(model.compute_logits(model.forward(fb)), ref[:split], "triton prefill")
    for i in range(split, LENGTH):
        fb = ForwardBatch.build([ids[i]], [i], [1], [0], [slots[i]], table.table)
        assert_close(model.compute_logits(model.forward(fb))[0], ref[i], f"triton decode at {i}")
