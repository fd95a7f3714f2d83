"""FP8 weights for the Llama family: quantize a loaded model, or load an FP8 checkpoint as it is.  Gemma 2/3 and
Phi-3 have the same fused decoder weights, so quantize-at-load works for them too; their checkpoints are refused
(loader.py: models without loads_fp8_checkpoints).

Only the decoder layers' linear weights become `Fp8Weight`s (qkv_proj, o_proj, gate_up_proj, down_proj);
embeddings, norms and the lm head stay in the model dtype, as in vLLM's and SGLang's fp8 method.

Checkpoints: config.json's `quantization_config` with `quant_method: "fp8"` (HF transformers' FineGrainedFP8
and the llm-compressor / AutoFP8 layout vLLM reads): e4m3 `*.weight` tensors with either a per-tensor
`*.weight_scale` (a scalar per projection; the fused q/k/v and gate/up rows keep their own scale, stored per
output channel) or, with `weight_block_size: [bn, bk]`, a block scale `*.weight_scale_inv`
[ceil(N/bn), ceil(K/bk)].  Static activation scales (`*.input_scale`) are read past: activations are scaled
per token at run time.  Layers named in `ignored_layers` / `modules_to_not_convert` stay dense.  KV cache
scales (`self_attn.k_scale`, `v_scale`) become the KV pool's per-layer scales (used by an fp8_e4m3 pool).
"""

import logging
from typing import Optional

import torch

from .fp8_linear import Fp8Weight, choose_mode

logger = logging.getLogger(__name__)
QUANTIZATIONS = ("fp8",)
SKIPPED_SUFFIXES = (".input_scale",)


def kv_scale_of(name: str):
    """(layer, "k" or "v") for an FP8 checkpoint's KV cache scale `model.layers.{i}.self_attn.{k,v}_scale`
    (llm-compressor / vLLM layout), else None."""
    parts = name.split(".")
    if len(parts) == 5 and parts[:2] == ["model", "layers"] and parts[3] == "self_attn" and parts[4] in (
            "k_scale", "v_scale"):
        return int(parts[2]), parts[4][0]
    return None


def fused_linears(model):
    """[(module, attribute, [(HF prefix, first row, end row), ...])] for every decoder linear weight."""
    c, out = model.config, []
    q, kv, inter = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.intermediate_size
    for i, layer in enumerate(model.layers):
        p, attn, mlp = f"model.layers.{i}.", layer.self_attn, layer.mlp
        out.append((attn, "qkv_proj", [(p + "self_attn.q_proj", 0, q), (p + "self_attn.k_proj", q, q + kv),
                                       (p + "self_attn.v_proj", q + kv, q + 2 * kv)]))
        out.append((attn, "o_proj", [(p + "self_attn.o_proj", 0, c.hidden_size)]))
        if hasattr(mlp, "gate_up_proj"):      # a dense MLP (a mixture-of-experts layer's experts stay as they are)
            out.append((mlp, "gate_up_proj", [(p + "mlp.gate_proj", 0, inter), (p + "mlp.up_proj", inter, 2 * inter)]))
            out.append((mlp, "down_proj", [(p + "mlp.down_proj", 0, c.hidden_size)]))
        elif hasattr(mlp, "c_fc"):           # StarCoder2's non-gated MLP
            out.append((mlp, "c_fc", [(p + "mlp.c_fc", 0, inter)]))
            out.append((mlp, "c_proj", [(p + "mlp.c_proj", 0, c.hidden_size)]))
    return out


def _swap(module, name: str, weight) -> None:
    delattr(module, name)
    setattr(module, name, weight)


@torch.no_grad()
def quantize_model(model) -> int:
    """Replace every decoder linear weight of a loaded model by its per-output-channel e4m3 quantization.
    Returns how many of them compute with torch._scaled_mm (the rest multiply by the dequantized weight)."""
    fast = 0
    for module, name, _ in fused_linears(model):
        dense = getattr(module, name)
        if isinstance(dense, Fp8Weight):
            continue
        mode = choose_mode(dense.device, *dense.shape, dtype=dense.dtype)
        fast += mode == "scaled_mm"
        _swap(module, name, Fp8Weight.from_dense(dense, mode))
    _log_modes(model, fast)
    return fast


def checkpoint_format(hf_config: dict) -> Optional[dict]:
    """The quantization_config of an FP8 checkpoint's config.json, None for an unquantized one (or gpt-oss's MXFP4
    experts, which its loader dequantizes); ValueError
    for another quantization method (we would read its packed tensors as garbage)."""
    qcfg = hf_config.get("quantization_config") or hf_config.get("text_config", {}).get("quantization_config")
    if not qcfg:
        return None
    method = qcfg.get("quant_method")
    if method == "mxfp4":   # gpt-oss's experts: dequantized at load by gpt_oss.py (any other model: unexpected names)
        return None
    if method != "fp8":
        raise ValueError(f"checkpoint quantization {method!r} is not supported (supported: fp8, mxfp4 for gpt-oss)")
    fmt = qcfg.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise ValueError(f"fp8 checkpoint format {fmt!r} is not supported (supported: e4m3)")
    return qcfg


def prepare_checkpoint(model, qcfg: dict) -> None:
    """Swap the decoder linear weights for empty Fp8Weights of the checkpoint's layout, so that
    load_weights fills them (see checkpoint_targets)."""
    block = qcfg.get("weight_block_size")
    ignored = set(qcfg.get("ignored_layers") or qcfg.get("modules_to_not_convert") or ())
    fast = 0
    for module, name, parts in fused_linears(model):
        dense = getattr(module, name)
        skipped = [prefix in ignored for prefix, _, _ in parts]
        if all(skipped):
            continue
        if any(skipped):
            raise ValueError(f"{[p for p, _, _ in parts]} are fused here: quantize all of them or none")
        n, k = dense.shape
        if block is not None:
            bn, bk = block
            bad = [prefix for prefix, lo, hi in parts if lo % bn or (hi % bn and hi != n)]
            if bad:
                raise ValueError(f"weight_block_size {block}: the rows of {bad[0]} do not start and end on a "
                                 f"block boundary, so its scales cannot be fused with its neighbours'")
        mode = choose_mode(dense.device, n, k, dtype=dense.dtype)
        fast += mode == "scaled_mm" and block is None
        _swap(module, name, Fp8Weight(n, k, block, mode, device=dense.device))
    _log_modes(model, fast, block)


def checkpoint_targets(weight: Fp8Weight, parts) -> dict:
    """HF name -> (destination, kind) for one fused Fp8Weight: `.weight` rows, and the scale of each part:
    per-tensor `.weight_scale` (kind "scalar": one value for all of the part's rows) or block
    `.weight_scale_inv` (its block rows)."""
    t = {}
    for prefix, lo, hi in parts:
        t[prefix + ".weight"] = (weight.weight[lo:hi], False)
        if weight.block is None:
            t[prefix + ".weight_scale"] = (weight.scale[lo:hi], "scalar")
        else:
            bn = weight.block[0]
            t[prefix + ".weight_scale_inv"] = (weight.scale[lo // bn:-(-hi // bn)], False)
    return t


def _log_modes(model, fast: int, block=None) -> None:
    total = len(model.layers) * 4
    if fast == total:
        logger.info("fp8 weights: %d linear layers compute with torch._scaled_mm", total)
    elif block is not None:
        logger.info("fp8 weights (block-scaled %s): %d linear layers multiply by their dequantized weights "
                    "(no block-scaled FP8 product here)", list(block), total)
    else:
        logger.info("fp8 weights: %d of %d linear layers compute with torch._scaled_mm, the rest by dequantizing "
                    "(it needs a CUDA GPU of compute capability 8.9+, bfloat16 and dims divisible by 16)",
                    fast, total)
