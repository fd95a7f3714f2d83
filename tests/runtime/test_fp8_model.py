"""A model with FP8 weights (runtime/models/fp8_model.py) against its oracles.

1. FP8 checkpoints (per-tensor and block-scaled) load as they are: our logits against HF transformers on the
   dequantized weights those FP8 tensors stand for, with the logits oracle's derived bound (logits_oracle.py).
2. --quantization fp8 (quantize at load): the same logits as the model whose dense weights are the
   per-channel dequantized ones (weight-only FP8 on a CPU multiplies by exactly those weights).
3. The FP8 product path (activations quantized per token, torch._scaled_mm, as on sm89+ GPUs) on the whole
   bfloat16 model: every linear layer's output within the derived e4m3 bound of the dequantized-weight
   product of the same input (tests/runtime/test_fp8_linear.py derives it).
"""

import pytest
import torch
from fp8_checkpoints import fp8_checkpoint
from logits_oracle import HF, Paged, assert_close

from radixlm.runtime.models import fp8_linear as fl
from radixlm.runtime.models import packed_linear
from radixlm.runtime.models.fp8_linear import Fp8Weight, quantize_rows
from radixlm.runtime.models.fp8_model import fused_linears
from radixlm.runtime.models.loader import load_model
from radixlm.runtime.runner.attention_backend import create_attention_backend
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

IDS = [5, 17, 99, 3, 250, 41, 7, 7, 180, 64, 2, 300, 11, 45, 8, 120, 33]


@pytest.mark.parametrize("arch,block,scale_shape", [("llama", None, ()), ("qwen3", None, (1,)),
                                                    ("llama", (16, 16), ()), ("qwen2", (16, 32), ()),
                                                    ("granite", None, ()), ("stablelm", (16, 16), ())])
def test_fp8_checkpoint_matches_hf_on_dequantized_weights(tiny_model, tmp_path, arch, block, scale_shape):
    fp8 = tmp_path / "fp8"
    plain = fp8_checkpoint(tiny_model(arch), fp8, block, scale_shape)
    hf = HF(plain)
    ref = hf(IDS)
    paged = Paged(fp8, reference=True)  # loads the FP8 tensors themselves
    weights = [getattr(m, n) for m, n, _ in fused_linears(paged.model)]
    assert all(isinstance(w, Fp8Weight) and w.block == (tuple(block) if block else None) for w in weights)
    assert_close(paged.step([(0, IDS[:9])]), ref[:9], "prefill")
    assert_close(paged.step([(0, IDS[9:])]), ref[9:], "extend on the cached prefix")


def test_fp8_checkpoint_with_a_scale_dropped_fails(tiny_model, tmp_path):
    """The oracle catches a lost per-tensor scale: k_proj's scale read as 1 moves the logits far out of bound."""
    fp8 = tmp_path / "fp8"
    plain = fp8_checkpoint(tiny_model("llama"), fp8)
    ref = HF(plain)(IDS)
    paged = Paged(fp8, reference=True)
    attn = paged.model.layers[1].self_attn
    q, kv = attn.q_size, attn.kv_size
    attn.qkv_proj.scale[q:q + kv] = 1.0
    with pytest.raises(AssertionError, match="logit error"):
        assert_close(paged.step([(0, IDS)]), ref, "k_proj scale dropped")


def test_checkpoint_kv_scales_become_the_pool_scales(tiny_model, tmp_path):
    fp8 = tmp_path / "fp8"
    fp8_checkpoint(tiny_model("llama"), fp8, kv_scales={0: (0.25, 2.0), 2: (0.5, 4.0)})
    pools = []

    def factory(config):
        pools.append(KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim, dtype=torch.float8_e4m3fn))
        return create_attention_backend("torch", pools[0], config.sm_scale)

    load_model(fp8, torch.float32, factory)
    assert pools[0].k_scales == [0.25, 1.0, 0.5] and pools[0].v_scales == [2.0, 1.0, 4.0]


def test_unsupported_checkpoint_quantization_is_refused(tiny_model, tmp_path):
    import json
    import shutil
    folder = tmp_path / "awq"
    shutil.copytree(tiny_model("llama"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq"}
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="awq"):
        load_model(folder)
    with pytest.raises(ValueError, match="quantization"):
        load_model(tiny_model("llama"), quantization="int3")


@pytest.mark.parametrize("arch", ["gemma2", "phi3", "starcoder2"])
def test_fp8_checkpoints_of_other_families_are_refused(tiny_model, tmp_path, arch):
    fp8 = tmp_path / "fp8"
    fp8_checkpoint(tiny_model(arch), fp8)
    with pytest.raises(ValueError, match="FP8 checkpoints load only for the Llama family.*--quantization fp8"):
        _load(fp8)


def _load(path, dtype=torch.float32, quantization=None):
    def factory(config):
        pool = KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim, dtype=dtype)
        return create_attention_backend("torch", pool, config.sm_scale)

    return load_model(path, dtype, factory, quantization=quantization)[0]


def _forward(model, ids):
    table = ReqToTokenPool(2, 64)
    table.write(0, 0, list(range(len(ids))))
    fb = ForwardBatch.build(ids, [0], [len(ids)], [0], list(range(len(ids))), table.table,
                            logits_indices=list(range(len(ids))))
    return model.compute_logits(model.forward(fb)[fb.logits_indices])  # [T, V]


@pytest.mark.parametrize("arch", ["qwen2", "gemma2", "gemma3", "phi3", "granite", "smollm3", "starcoder2", "stablelm",
                                  "ministral", "seed_oss", "ernie4_5", "exaone4", "hunyuan"])
def test_quantize_at_load_equals_the_dequantized_dense_model(tiny_model, arch):
    path = tiny_model(arch)
    fp8, dense = _load(path, quantization="fp8"), _load(path)
    for (m, name, _), (dm, _, _) in zip(fused_linears(fp8), fused_linears(dense)):
        w = getattr(m, name)
        assert isinstance(w, Fp8Weight) and w.mode == "dequant" and w.scale.shape == (w.n,)
        getattr(dm, name).copy_(w.dequantize())
    assert fp8.quantized and not dense.quantized
    torch.testing.assert_close(_forward(fp8, IDS), _forward(dense, IDS), rtol=0, atol=0)


def test_scaled_mm_model_every_layer_within_the_derived_bound(tiny_model, monkeypatch):
    """The bfloat16 model on the FP8 product (CPU torch has torch._scaled_mm): each of its linear calls against
    x @ dequantize(w)^T, bound sum_k max(2^-4 |x_k|, 2^-10 s_x) |w_k| + 2^-8 |y| (bfloat16 output) + float32
    accumulation."""
    path = tiny_model("llama")
    fp8 = _load(path, torch.bfloat16, "fp8")
    for m, name, _ in fused_linears(fp8):
        getattr(m, name).mode = "scaled_mm"
    calls = []

    def recording(x, w, bias=None):
        out = fl.fp8_linear(x, w, bias)
        calls.append((x.clone(), w, out.clone()))  # the model rotates q and k in place afterwards
        return out

    monkeypatch.setattr(packed_linear, "fp8_linear", recording)
    _forward(fp8, IDS)
    assert len(calls) == 4 * len(fp8.layers)
    for x, w, out in calls:
        wd = w.dequantize(torch.float64)  # [N, K]
        xd = x.double()  # [M, K]
        ref = xd @ wd.T  # [M, N]
        _, sx = quantize_rows(x)  # [M, 1]
        act = torch.maximum(2.0 ** -4 * xd.abs(), 2.0 ** -10 * sx.double()) @ wd.abs().T
        bound = act + 2.0 ** -8 * ref.abs() + x.shape[1] * 2.0 ** -23 * (xd.abs() @ wd.abs().T)
        assert bool(((out.double() - ref).abs() <= bound).all()), ((out.double() - ref).abs() / bound).max()
