"""IBM Granite 4.0 (HF GraniteMoeHybridForCausalLM): Mamba-2 mixers (mamba2.py) and Granite attention layers
(LlamaAttention, rotary only with position_embedding_type "rope"), each followed by Granite 3 MoE's experts plus an
un-gated shared MLP (SparseMoeBlock), or the shared MLP alone (LlamaMLP) in the dense models; Granite's embedding,
residual, attention and logits multipliers; plain RMSNorms.  Only the attention layers have KV in the pool
(ModelConfig.kv_layers), numbered among themselves; the mixers keep a state per request row (recurrent_state.py).
Checkpoint names: mamba.{in_proj, conv1d, dt_bias, A_log, D, norm, out_proj}, self_attn.{q,k,v,o}_proj,
block_sparse_moe.* and shared_mlp.* (renamed by granite_moe.py as Granite 3 MoE's).
No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_moe import _our_names
from .hybrid_model import RecurrentHybridForCausalLM
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention
from .mamba2 import Mamba2Mixer, mamba2_states
from .moe import SparseMoeBlock
from .recurrent_state import ConvWeight, RecurrentStates


class GraniteHybridLayer(nn.Module):
    """x + r * mixer(norm(x)), then x + r * mlp(norm(x)): r Granite's residual multiplier."""

    def __init__(self, c: ModelConfig, mixer: nn.Module, mlp: nn.Module, dtype, device):
        super().__init__()
        self.eps, self.r = c.rms_norm_eps, c.residual_multiplier
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.mixer, self.mlp = mixer, mlp

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.mixer(rms_norm(x, self.input_layernorm, self.eps), rotary, fb) * self.r  # [T, H]
        return x + self.mlp(rms_norm(x, self.post_attention_layernorm, self.eps)) * self.r  # [T, H]


class GraniteMoeHybridForCausalLM(RecurrentHybridForCausalLM):
    """RecurrentHybridForCausalLM's contract with Mamba-2 mixers and Granite attention."""

    LAYER_KIND = "hybrid (Mamba-2)"
    TP_REASON = " (its Mamba-2 mixers run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        return mamba2_states(config.mamba2, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, m = self.config, self.config.mamba2
        if layer_id in m.mamba_layers:
            mixer = Mamba2Mixer(m, m.mamba_layers.index(layer_id), self.states, c.hidden_size, c.rms_norm_eps,
                                dtype, device)
        else:
            mixer = LlamaAttention(c, self.kv_layer(layer_id), attn_backend, dtype, device)
        return GraniteHybridLayer(c, mixer, self.make_mlp(layer_id, dtype, device), dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mixer, mlp = f"model.layers.{i}.", layer.mixer, layer.mlp
            t.update(self._norm_targets(p, layer))
            t.update(mixer_targets(p + "mamba.", mixer) if isinstance(mixer, Mamba2Mixer)
                     else attention_targets(p + "self_attn.", mixer))
            if isinstance(mlp, SparseMoeBlock):
                t.update(mlp.checkpoint_targets(p + "mlp."))
            else:
                shared = mlp.down_proj.shape[1]
                t.update({p + "mlp.shared_experts.gate_proj.weight": (mlp.gate_up_proj[:shared], False),
                          p + "mlp.shared_experts.up_proj.weight": (mlp.gate_up_proj[shared:], False),
                          p + "mlp.shared_experts.down_proj.weight": (mlp.down_proj, False)})
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(pair for name, tensor in named_tensors for pair in _our_names(name, tensor))


def attention_targets(p: str, attn: LlamaAttention) -> dict:
    q, kv, w = attn.q_size, attn.kv_size, attn.qkv_proj
    t = {p + "q_proj.weight": (w[:q], False), p + "k_proj.weight": (w[q:q + kv], False),
         p + "v_proj.weight": (w[q + kv:], False), p + "o_proj.weight": (attn.o_proj, False)}
    if attn.qkv_bias is not None:
        b = attn.qkv_bias
        t.update({p + "q_proj.bias": (b[:q], False), p + "k_proj.bias": (b[q:q + kv], False),
                  p + "v_proj.bias": (b[q + kv:], False)})
    if attn.o_bias is not None:
        t[p + "o_proj.bias"] = (attn.o_bias, False)
    return t


def mixer_targets(p: str, mixer: Mamba2Mixer) -> dict:
    t = {p + "in_proj.weight": (mixer.in_proj, False), p + "conv1d.weight": (ConvWeight(mixer.conv_weight), False),
         p + "dt_bias": (mixer.dt_bias, False), p + "A_log": (mixer.A_log, False), p + "D": (mixer.D, False),
         p + "out_proj.weight": (mixer.out_proj, False)}
    for name, tensor in (("in_proj.bias", mixer.in_bias), ("conv1d.bias", mixer.conv_bias),
                         ("out_proj.bias", mixer.out_bias), ("norm.weight", mixer.norm)):
        if tensor is not None:
            t[p + name] = (tensor, False)
    return t
