"""Families HF assembles from other families' layers, run by the classes that already run those layers.

- Solar Open (SolarOpenForCausalLM): GLM-4.5's mixture of experts in every layer under Llama's attention (q/k/v
  biases by attention_bias): MoEForCausalLM with its config fields (moe_family_config.py).
- EXAONE MoE (K-EXAONE, ExaoneMoeForCausalLM): EXAONE 4's attention in Llama's pre-norm layer with DeepSeek-V3's
  mixture of experts: MoEForCausalLM; its checkpoint keeps each correction bias beside the router
  (mlp.e_score_correction_bias) and its multi-token-prediction module under mtp.*, skipped as HF skips it.
- FlexOlmo: OLMo 2's post-norm layer (olmo2.py) with OLMoE's mixture of experts in every layer.
- Youtu-LLM (YoutuForCausalLM): DeepSeek-V3's multi-head latent attention with dense MLPs: DeepseekForCausalLM.
- A.X K1 (AXK1ForCausalLM): DeepSeek-V3 with an RMSNorm on each sparse layer's MLP output (post_mlp_layernorm,
  stored beside the layer's other norms; the released checkpoints hold one for the dense layers too, which HF
  ignores and so do we); a checkpoint without correction biases routes with zeros, as HF does.
None of them runs with tensor parallelism or FP8 checkpoints except Solar Open and EXAONE MoE (MoEForCausalLM's).
Notation as in llama.py: T tokens, H hidden.
"""

import re
from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .deepseek import DeepseekDecoderLayer, DeepseekForCausalLM
from .layer_ops import Rotary, rms_norm
from .layers import param
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers, MoEForCausalLM
from .olmo2 import Olmo2DecoderLayer, Olmo2ForCausalLM

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


class ExaoneMoeForCausalLM(MoEForCausalLM):
    """MoEForCausalLM reading EXAONE MoE's checkpoint names."""

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        for name, tensor in super().checkpoint_tensors(named_tensors):
            if not name.startswith("mtp."):
                yield name.replace(".mlp.e_score_correction_bias", ".mlp.gate.e_score_correction_bias"), tensor


class FlexOlmoDecoderLayer(Olmo2DecoderLayer):
    """OLMo 2's post-norm layer whose MLP is a SparseMoeBlock."""

    def make_mlp(self, c, dtype, device) -> nn.Module:
        return SparseMoeBlock(c.hidden_size, c.moe, dtype, device)


class FlexOlmoForCausalLM(ExpertLayers, Olmo2ForCausalLM):
    """Olmo2ForCausalLM's contract with FlexOlmo's layers; expert_load() as MoEForCausalLM's."""

    layer_class = FlexOlmoDecoderLayer
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
        return swaps

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")


class AXK1DecoderLayer(DeepseekDecoderLayer):
    """DeepSeek's layer; a sparse layer normalises its MLP's output before it joins the residual stream."""

    def __init__(self, c, layer_id: int, attn_backend, mlp: nn.Module, dtype, device):
        super().__init__(c, layer_id, attn_backend, mlp, dtype, device)
        sparse = isinstance(mlp, SparseMoeBlock)
        self.post_mlp_layernorm = param(c.hidden_size, dtype=dtype, device=device) if sparse else None  # [H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.self_attn(rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        h = self.mlp(rms_norm(x, self.post_attention_layernorm, self.eps))  # [T, H]
        if self.post_mlp_layernorm is not None:
            h = rms_norm(h, self.post_mlp_layernorm, self.eps)  # [T, H]
        return x + h  # [T, H]


class AXK1ForCausalLM(DeepseekForCausalLM):
    """DeepseekForCausalLM's contract with A.X K1's layers."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return AXK1DecoderLayer(self.config, layer_id, attn_backend, self._make_mlp(layer_id, dtype, device),
                                dtype, device)

    def _norm_targets(self, prefix: str, layer) -> dict:
        t = super()._norm_targets(prefix, layer)
        if layer.post_mlp_layernorm is not None:
            t[prefix + "post_mlp_layernorm.weight"] = (layer.post_mlp_layernorm, False)
        return t

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """DeepseekForCausalLM's stream with the post-MLP norms under their layer (mlp.post_mlp_layernorm, HF's
        module name, read there too), those of dense layers dropped, and zero correction biases where the
        checkpoint has none."""
        sparse = self.config.moe.sparse_layers if self.config.moe is not None else ()
        biases = {f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in sparse}
        for name, tensor in super().checkpoint_tensors(named_tensors):
            name = name.replace(".mlp.post_mlp_layernorm.", ".post_mlp_layernorm.")
            layer = _LAYER.match(name)
            if ".post_mlp_layernorm." in name and layer is not None and int(layer.group(1)) not in sparse:
                continue
            biases.discard(name)
            yield name, tensor
        for name in sorted(biases):
            yield name, torch.zeros(self.config.moe.num_experts)  # [E]
