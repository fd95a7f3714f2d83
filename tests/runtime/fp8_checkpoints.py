"""FP8 checkpoints made from a tiny HF folder, in the layouts HF and vLLM read (runtime/models/fp8_model.py).

fp8_checkpoint(src, dst, block) writes dst as an FP8 checkpoint of src (e4m3 decoder linear weights with a
per-tensor weight_scale, or with block=(bn, bk) a weight_scale_inv per block, plus a static input_scale the
loader must read past), and dst + "-dequantized" as the plain float32 checkpoint those FP8 weights stand for:
the oracle's weights.
"""

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

E4M3 = torch.float8_e4m3fn
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _quantize(w: torch.Tensor, block):
    """w [N, K] -> (e4m3 [N, K], scale: [] per tensor or [N/bn, K/bk] per block, dequantized [N, K])."""
    if block is None:
        s = w.abs().max() / 448.0  # []
        q = (w / s).to(E4M3)
        return q, s.reshape(()), q.float() * s
    bn, bk = block
    n, k = w.shape
    s = w.reshape(n // bn, bn, k // bk, bk).abs().amax(dim=(1, 3)) / 448.0  # [N/bn, K/bk]
    full = s.repeat_interleave(bn, 0).repeat_interleave(bk, 1)  # [N, K]
    q = (w / full).to(E4M3)
    return q, s, q.float() * full


def fp8_checkpoint(src: Path, dst: Path, block=None, scale_shape=(), kv_scales=None) -> Path:
    """Write the FP8 checkpoint of `src` to dst and its dequantized twin to dst-dequantized; returns the twin.
    scale_shape: the per-tensor scales' shape, () or (1,) (both are found in the wild).  kv_scales: {layer:
    (k_scale, v_scale)} written as self_attn.k_scale / v_scale (the KV cache's scales)."""
    src, dst = Path(src), Path(dst)
    plain = dst.with_name(dst.name + "-dequantized")
    for folder in (dst, plain):
        shutil.copytree(src, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.index.json"))
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    fp8, dequantized = {}, {}
    for name, w in tensors.items():
        if name.endswith(".weight") and name.split(".")[-2] in LINEARS:
            q, s, d = _quantize(w.float(), block)
            fp8[name] = q
            prefix = name[:-len(".weight")]
            if block is None:
                fp8[prefix + ".weight_scale"] = s.reshape(scale_shape).contiguous()
            else:
                fp8[prefix + ".weight_scale_inv"] = s.contiguous()
            fp8[prefix + ".input_scale"] = torch.tensor(0.05)
            dequantized[name] = d
        else:
            fp8[name] = dequantized[name] = w
    for layer, (k, v) in (kv_scales or {}).items():
        fp8[f"model.layers.{layer}.self_attn.k_scale"] = torch.tensor(k)
        fp8[f"model.layers.{layer}.self_attn.v_scale"] = torch.tensor(v)
    save_file(fp8, str(dst / "model.safetensors"))
    save_file(dequantized, str(plain / "model.safetensors"))
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "static" if block is None else "dynamic",
                                  **({"weight_block_size": list(block)} if block else {})}
    (dst / "config.json").write_text(json.dumps(cfg))
    return plain
