"""The Hugging Face config fields of DeepSeek-OCR 2's language model (HF DeepseekOcr2TextModel, under
DeepseekOcr2ForConditionalGeneration served for text prompts: multimodal_wrappers.py) as ModelConfig fields
(family_config.py's contract).  No torch here.

Its layer is Llama's attention (q/k/v/o biases by attention_bias, heads of hidden_size / num_attention_heads whatever
head_dim says, rotate-half rope) with DeepSeek-V2's MLPs: the dense SwiGLU MLP or, in the sparse layers of
mlp_layer_types, softmax-routed experts (greedy or group_limited_greedy, never renormalised, times
routed_scaling_factor) beside n_shared_experts un-gated shared experts (moe_config.py's DeepSeek-V2 rule).  Run by
moe_model.py's MoEForCausalLM under the name DEEPSEEK_OCR2_TEXT (HF has no causal LM class of it).
"""

from typing import Any, Dict

DEEPSEEK_OCR2_TEXT = "DeepseekOcr2TextForCausalLM"
DEEPSEEK_OCR2_MODEL_TYPES = {"deepseek_ocr2_text": DEEPSEEK_OCR2_TEXT}


def _deepseek_ocr2_text(arch: str, hf_config) -> Dict[str, Any]:
    layers, kinds = int(hf_config.num_hidden_layers), list(getattr(hf_config, "mlp_layer_types", None) or ())
    if len(kinds) != layers or not set(kinds) <= {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the {layers} layers, "
                         f"got {kinds}")
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(head_dim=int(hf_config.hidden_size) // int(hf_config.num_attention_heads), o_proj_bias=bias)


DEEPSEEK_OCR2_FIELDS = {DEEPSEEK_OCR2_TEXT: _deepseek_ocr2_text}
