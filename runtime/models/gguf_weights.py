"""Load a Llama-family model's weights straight from a .gguf file, keeping its linear weights quantized.

The file is read with the gguf package.  Every linear weight (q/k/v, o, gate/up, down, the embedding and the lm
head) becomes a quant_linear.QuantWeight that keeps the file's blocks: formats with a kernel
(radixlm_kernels/cpu_quant.FORMATS) stay as they are, any other format is dequantized to the model's dtype (one
log line names them).  Norms and biases are dense, as in the file.  llama.cpp stores the q and k rows of a
"llama" file permuted for its interleaved rotary embedding; the rows are put back in HF's order (as
transformers' GGUF loader does) by moving whole rows, which block formats allow.

  load_gguf_weights(model, gguf_path, isa) -> summary dict (formats kept and dequantized, the ISA)
"""

import ctypes
import gc
import logging
from collections import Counter, namedtuple
from pathlib import Path

import numpy as np
import torch

from radixlm.kernels import cpu_quant
from radixlm.runtime.models.quant_linear import QuantPart, QuantWeight

logger = logging.getLogger(__name__)

_DENSE = ("F32", "F16", "BF16")
# GGUF block name -> (module attribute path, its part index) for the weights we keep as QuantWeight
_LINEAR = {"attn_q": ("self_attn.qkv_proj", 0), "attn_k": ("self_attn.qkv_proj", 1),
           "attn_v": ("self_attn.qkv_proj", 2), "attn_output": ("self_attn.o_proj", 0),
           "ffn_gate": ("mlp.gate_up_proj", 0), "ffn_up": ("mlp.gate_up_proj", 1), "ffn_down": ("mlp.down_proj", 0)}
# GGUF name -> HF name for the dense tensors (model.load_weights' names)
_DENSE_NAMES = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
                "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
                "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
                "attn_k_norm.weight": "self_attn.k_norm.weight"}


def quantization_name(summary) -> str:
    """What --quantization loaded, for /get_server_info: "none", or "gguf:" and the formats kept quantized, most
    tensors first, and the kernels' ISA ("gguf:Q4_1+Q8_0 (vnni)"); formats dequantized follow after "dequantized"."""
    if not summary:
        return "none"
    kept = "+".join(f for f, _ in sorted(summary["kept"].items(), key=lambda kv: (-kv[1], kv[0])))
    name = f"gguf:{kept or '-'} ({summary['isa']})"
    if summary["dequantized"]:
        name += " dequantized " + "+".join(sorted(summary["dequantized"]))
    return name


GGUF_UNVERIFIED = ("GraniteForCausalLM", "SmolLM3ForCausalLM", "MinistralForCausalLM", "SeedOssForCausalLM")


def gguf_architecture(reader) -> str:
    field = reader.fields["general.architecture"]
    return bytes(field.parts[field.data[0]]).decode()


def _unpermute_rows(n_rows: int, n_head: int) -> np.ndarray:
    """Row order that undoes llama.cpp's q/k permutation (transformers' _reverse_permute_weights on row ids)."""
    dim = n_rows // n_head // 2
    return np.arange(n_rows).reshape(n_head, dim, 2).swapaxes(2, 1).reshape(n_rows)   # [n_rows]


def _tensor(t, dtype, rows=None):
    """(fmt, data) of a GGUF tensor: blocks uint8 [N, row_bytes] when a kernel takes its format, else float."""
    fmt = t.tensor_type.name
    data = np.asarray(t.data)
    if rows is not None:
        data = data[rows]   # a copy, in the rows' order
    if fmt in cpu_quant.FORMATS:
        owned = data if rows is not None else np.array(data, copy=True, order="C")   # not the file mapping
        return fmt, torch.from_numpy(np.ascontiguousarray(owned))
    from gguf import quants

    dense = data if fmt in _DENSE else quants.dequantize(data, t.tensor_type)
    return "dense", torch.from_numpy(np.array(dense, dtype=np.float32)).to(dtype)   # [N, K] or [N], owned


def load_gguf_weights(model, gguf_path, isa: str) -> dict:
    """Fill `model` (a LlamaForCausalLM just built) from the GGUF: linear weights as QuantWeight, the rest dense.
    Raises ValueError for a tensor it does not know or a weight the file lacks."""
    c = model.config
    if c.architecture in GGUF_UNVERIFIED:
        raise ValueError(f"{c.architecture}: GGUF weights kept quantized are not supported (llama.cpp's q/k row "
                         "order for it is unverified); load its safetensors checkpoint instead")
    if c.mlp_bias:
        raise ValueError(f"{c.architecture}: GGUF weights kept quantized with mlp_bias=True are not supported")
    tensors, architecture = _tensor_views(Path(gguf_path))
    permute = architecture == "llama"
    parts: dict = {}            # (module path, part index) -> QuantPart
    dense: list = []            # (HF name, tensor) for model.load_weights' targets
    kept, dequantized = Counter(), Counter()
    for t in tensors:
        name = t.name
        rows = None
        if permute and name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = c.num_heads if "attn_q" in name else c.num_kv_heads
            rows = _unpermute_rows(int(t.shape[-1]), heads)
        fmt, data = _tensor(t, model.dtype, rows)
        if fmt in cpu_quant.FORMATS:
            kept[fmt] += 1
        elif t.tensor_type.name not in _DENSE:
            dequantized[t.tensor_type.name] += 1
        key = _linear_key(name)
        if key is not None:
            parts[key] = QuantPart(fmt, data)
        else:
            dense.append((_dense_name(name), data.to(model.dtype) if fmt == "dense" else data))
    del tensors, t, data   # the file's mapping goes with the last view of it
    gc.collect()
    _install(model, parts, dense, isa)
    if dequantized:
        logger.info("GGUF formats without a kernel, dequantized to %s: %s", str(model.dtype).replace("torch.", ""),
                    ", ".join(f"{k} ({v} tensors)" for k, v in sorted(dequantized.items())))
    return {"kept": dict(kept), "dequantized": dict(dequantized), "isa": isa}


_TensorView = namedtuple("_TensorView", "name tensor_type shape data")   # data: a view of the file's mapping


def _tensor_views(path: Path):
    """([_TensorView] of every tensor, the architecture).  The gguf package's reader parses every metadata field
    into numpy objects (the 49k-token vocabulary: about 150 MiB of small objects for SmolLM2); it is dropped, and
    the heap it leaves returned to the system, before a weight is copied, where the copies would otherwise keep its
    fragments alive (the process grew 2.1x the weights, 1.1x after)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    architecture = gguf_architecture(reader)
    infos = [(t.name, t.tensor_type, [int(d) for d in t.shape], t.data_offset, t.data.dtype, t.data.shape)
             for t in reader.tensors]
    del reader
    gc.collect()
    _trim_heap()
    mapping = np.memmap(path, mode="r")
    return [_TensorView(name, kind, shape, np.ndarray(dims, dtype, buffer=mapping, offset=offset))
            for name, kind, shape, offset, dtype, dims in infos], architecture


def _trim_heap() -> None:
    """glibc's malloc_trim(0): the freed heap back to the system (nothing where the C library is another)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _linear_key(name: str):
    if name in ("token_embd.weight", "output.weight"):
        return (name, 0)
    pieces = name.split(".")
    if len(pieces) == 4 and pieces[0] == "blk" and pieces[3] == "weight" and pieces[2] in _LINEAR:
        path, index = _LINEAR[pieces[2]]
        return (f"layers.{pieces[1]}.{path}", index)
    return None


def _dense_name(name: str) -> str:
    if name == "output_norm.weight":
        return "model.norm.weight"
    pieces = name.split(".", 2)
    if pieces[0] == "blk" and len(pieces) == 3 and pieces[2] in _DENSE_NAMES:
        return f"model.layers.{pieces[1]}.{_DENSE_NAMES[pieces[2]]}"
    raise ValueError(f"unexpected GGUF tensor {name!r}")


def _install(model, parts: dict, dense: list, isa: str) -> None:
    c = model.config
    if ("token_embd.weight", 0) not in parts:
        raise ValueError("the GGUF has no token_embd.weight")
    embed = QuantWeight([parts.pop(("token_embd.weight", 0))], c.hidden_size, isa)
    head = parts.pop(("output.weight", 0), None)
    _swap(model, "embed_tokens", embed)
    _swap(model, "lm_head", embed if head is None else QuantWeight([head], c.hidden_size, isa))
    wants = {"self_attn.qkv_proj": (3, c.hidden_size), "self_attn.o_proj": (1, c.num_heads * c.head_dim),
             "mlp.gate_up_proj": (2, c.hidden_size), "mlp.down_proj": (1, c.intermediate_size)}
    for i, layer in enumerate(model.layers):
        for path, (count, k) in wants.items():
            got = [parts.pop((f"layers.{i}.{path}", j), None) for j in range(count)]
            if any(p is None for p in got):
                raise ValueError(f"the GGUF lacks part of layer {i}'s {path}")
            module_path, attr = path.rsplit(".", 1)
            weight = QuantWeight(got, k, isa)
            if weight.shape != tuple(getattr(layer.get_submodule(module_path), attr).shape):
                raise ValueError(f"layer {i}'s {path} is {weight.shape} in the GGUF")
            _swap(layer.get_submodule(module_path), attr, weight)
    if parts:
        raise ValueError(f"unexpected GGUF tensors: {sorted(parts)[:3]}")
    _load_dense(model, dense)


@torch.no_grad()
def _load_dense(model, dense: list) -> None:
    """Norms and biases (HF names) into the model's parameters; ValueError for a shape or a weight missing."""
    c, targets = model.config, {"model.norm.weight": model.norm}
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    for i, layer in enumerate(model.layers):
        p, attn = f"model.layers.{i}.", layer.self_attn
        targets[p + "input_layernorm.weight"] = layer.input_layernorm
        targets[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm
        if attn.qkv_bias is not None:
            for name, view in (("q", attn.qkv_bias[:q]), ("k", attn.qkv_bias[q:q + kv]), ("v", attn.qkv_bias[q + kv:])):
                targets[p + f"self_attn.{name}_proj.bias"] = view
        if attn.qk_norm is not None:   # one [D] weight broadcast over the heads
            targets[p + "self_attn.q_norm.weight"] = attn.qk_norm[:c.num_heads]
            targets[p + "self_attn.k_norm.weight"] = attn.qk_norm[c.num_heads:]
    for name, tensor in dense:
        dst = targets.pop(name, None)
        if dst is None:
            raise ValueError(f"unexpected or repeated GGUF weight {name!r}")
        if tuple(tensor.shape) != tuple(dst.shape[-tensor.dim():]):
            raise ValueError(f"weight {name!r} has shape {tuple(tensor.shape)}, expected {tuple(dst.shape)}")
        dst.copy_(tensor)
    if targets:
        raise ValueError(f"the GGUF is missing {len(targets)} weights, e.g. {sorted(targets)[:3]}")


def _swap(module, attr: str, weight) -> None:
    if attr in module._parameters:
        delattr(module, attr)
    setattr(module, attr, weight)
