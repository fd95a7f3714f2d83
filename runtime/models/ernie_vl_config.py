"""ERNIE 4.5 VL (HF Ernie4_5_VLMoeForConditionalGeneration) served for text prompts (multimodal_text.py): its
language model is ERNIE 4.5 MoE's (Ernie4_5_MoeForCausalLM) for text tokens.  No torch here.

Each sparse layer holds text experts and vision experts (moe_intermediate_size: [text width, vision width]), each set
with its own router and correction bias; HF routes text tokens through the text experts alone, the shared experts
beside them.  Its M-RoPE pre-rotates the height and width frequencies (mrope_section [h, w, t]) and puts them back in
order for equal positions on all axes (h == w), so for text it is ERNIE 4.5's rope of interleaved pairs.

The released checkpoint (which transformers saves too) keeps the text experts as experts 0..E-1 and the vision experts
as E..2E-1 of mlp.experts.*, the text router mlp.gate.weight as [H, E] (the vision one mlp.gate.weight_1) and both
correction biases as the rows of mlp.moe_statics.e_score_correction_bias [2, E]: the text ones are read (the router
transposed, the bias's first row), the vision ones dropped.  A checkpoint under transformers 5's module names
(text_moe, vision_moe) does not load.
"""

import re
from typing import Optional

from .mamba_stack_config import FieldsView

ERNIE_VL = "Ernie4_5_VLMoeForConditionalGeneration"
_EXPERT = re.compile(r"\.mlp\.experts\.(\d+)\.")
HF_MROPE_SECTION = [22, 22, 20]   # HF's when rope_parameters has none


def ernie_vl_rope(arch: str, text) -> None:
    """ValueError for a rope HF's text path does not run as interleaved pairs in order."""
    params = text.rope_parameters or {}
    h, w, t = params.get("mrope_section", HF_MROPE_SECTION)
    if params.get("rope_type", "default") != "default" or h != w or t < 1:
        raise ValueError(f"{arch}: only the default rope with mrope_section [h, h, t], t >= 1, is supported (HF's "
                         f"text rope), got {params}")


def ernie_vl_text_view(arch: str, text):
    """ERNIE 4.5 VL's text config read as ERNIE 4.5 MoE's: the text experts' width, the sparse layers of
    mlp_layer_types as moe_layer_start_index, moe_layer_interval and moe_layer_end_index."""
    types = list(text.mlp_layer_types)
    sparse = [i for i, kind in enumerate(types) if kind == "sparse"]
    if len(types) != text.num_hidden_layers or set(types) - {"dense", "sparse"} or not sparse:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the "
                         f"{text.num_hidden_layers} layers, one sparse at least; got {types}")
    start, end = sparse[0], sparse[-1]
    step = next((k for k in range(1, len(types) + 1)
                 if sparse == [i for i in range(start, end + 1) if (i + 1) % k == 0]), None)
    if step is None:
        raise ValueError(f"{arch}: sparse layers {sparse} are not every k-th layer of a range (ERNIE 4.5 MoE's "
                         "layout)")
    return FieldsView(text, dict(moe_intermediate_size=int(text.moe_intermediate_size[0]),
                                 moe_layer_start_index=start, moe_layer_interval=step, moe_layer_end_index=end))


def ernie_vl_text_name(name: str, num_experts: int) -> Optional[str]:
    """The released name of one of ERNIE 4.5 VL's language model tensors as ERNIE 4.5 MoE loads it, None for the
    vision experts and their router."""
    expert = _EXPERT.search(name)
    if name.endswith(".mlp.gate.weight_1") or (expert is not None and int(expert[1]) >= num_experts):
        return None
    return name


def ernie_vl_text_tensor(name: str, tensor):
    """The text router [H, E] as [E, H], the text experts' correction bias [2, E] as [1, E]; others as they are."""
    if name.endswith(".mlp.gate.weight"):
        return tensor.t()
    if name.endswith(".mlp.moe_statics.e_score_correction_bias"):
        return tensor[:1]
    return tensor
