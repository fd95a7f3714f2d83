"""NVIDIA Nemotron-H, Nemotron Nano 2 and Nemotron 3 Nano (HF NemotronHForCausalLM; fields: nemotron_h_config.py):
each layer is x + block(norm(x)) with ONE block, a Mamba-2 mixer (mamba2.py), attention without rotary embedding
(LlamaAttention), a relu^2 MLP (ReluSquaredMLP) or NemotronHMoE.  Only the attention blocks have KV in the pool
(ModelConfig.kv_layers), numbered among themselves; the mixers keep a state per request row (recurrent_state.py).
Checkpoint names: backbone.{embeddings, layers.{i}.{norm, mixer.*}, norm_f} (or model.*) and lm_head; the
multi-token prediction layers (mtp.*) are skipped.  No tensor parallelism, no native one-call decode, no FP8.
Notation: T tokens, H hidden, E experts, I expert width, L the experts' latent width (H without one), S shared width.
"""

from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_hybrid import attention_targets, mixer_targets
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention
from .llama_like import ReluSquaredMLP
from .mamba2 import Mamba2Mixer
from .mamba2_hybrid import Mamba2HybridForCausalLM
from .moe import grouped_experts
from .moe_config import MoEConfig
from .moe_router import route
from .packed_linear import linear

relu_squared = ReluSquaredMLP.activation


class NemotronHMoE(nn.Module):
    """HF NemotronHMoE: relu^2 experts (up_proj, down_proj, no gate) chosen by moe_router.route's DeepSeek-V3 rule
    from a float32 router, between fc1_latent_proj and fc2_latent_proj where the model has a latent width, plus a
    relu^2 shared expert on the block's input."""

    def __init__(self, hidden: int, moe: MoEConfig, latent: Optional[int], dtype, device):
        super().__init__()
        E, I, S, L = moe.num_experts, moe.intermediate_size, moe.shared_expert_intermediate_size, latent or hidden
        self.moe = moe
        self.gate = param(E, hidden, dtype=torch.float32, device=device)  # [E, H] router
        self.correction_bias = param(E, dtype=torch.float32, device=device)  # [E]
        self.up = param(E, I, L, dtype=dtype, device=device)  # [E, I, L]
        self.down = param(E, L, I, dtype=dtype, device=device)  # [E, L, I]
        self.fc1_latent = param(L, hidden, dtype=dtype, device=device) if latent else None  # [L, H]
        self.fc2_latent = param(hidden, L, dtype=dtype, device=device) if latent else None  # [H, L]
        self.shared_up = param(S, hidden, dtype=dtype, device=device)  # [S, H]
        self.shared_down = param(hidden, S, dtype=dtype, device=device)  # [H, S]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        weights, ids = route(F.linear(x.float(), self.gate), self.moe, self.correction_bias)  # [T, k] each
        h = x if self.fc1_latent is None else linear(x, self.fc1_latent)  # [T, L]
        routed = grouped_experts(h, self.up, self.down, weights, ids, act=relu_squared)  # [T, L]
        if self.fc2_latent is not None:
            routed = linear(routed, self.fc2_latent)  # [T, H]
        return routed + linear(relu_squared(linear(x, self.shared_up)), self.shared_down)  # [T, H]

    def targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this block's weights under `p` ("model.layers.1.mixer.")."""
        t = {p + "gate.weight": (self.gate, False), p + "gate.e_score_correction_bias": (self.correction_bias, False),
             p + "shared_experts.up_proj.weight": (self.shared_up, False),
             p + "shared_experts.down_proj.weight": (self.shared_down, False)}
        for e in range(self.up.shape[0]):
            t[p + f"experts.{e}.up_proj.weight"] = (self.up[e], False)
            t[p + f"experts.{e}.down_proj.weight"] = (self.down[e], False)
        if self.fc1_latent is not None:
            t.update({p + "fc1_latent_proj.weight": (self.fc1_latent, False),
                      p + "fc2_latent_proj.weight": (self.fc2_latent, False)})
        return t


class NemotronHBlock(nn.Module):
    """x + block(norm(x)); the mixer and attention blocks read the batch, the MLP and MoE blocks only x."""

    def __init__(self, c: ModelConfig, mixer: nn.Module, dtype, device):
        super().__init__()
        self.eps, self.mixer = c.rms_norm_eps, mixer
        self.norm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.reads_batch = isinstance(mixer, (Mamba2Mixer, LlamaAttention))

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = rms_norm(x, self.norm, self.eps)  # [T, H]
        return x + (self.mixer(h, rotary, fb) if self.reads_batch else self.mixer(h))  # [T, H]


class NemotronHForCausalLM(Mamba2HybridForCausalLM):
    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, m = self.config, self.config.mamba2
        kind = m.block_kinds[layer_id]
        if kind == "mamba":
            mixer = Mamba2Mixer(m, m.mamba_layers.index(layer_id), self.states, c.hidden_size, c.rms_norm_eps,
                                dtype, device)
        elif kind == "attention":
            mixer = LlamaAttention(c, m.block_kinds[:layer_id].count("attention"), attn_backend, dtype, device)
        elif kind == "moe":
            mixer = NemotronHMoE(c.hidden_size, c.moe, m.moe_latent_size, dtype, device)
        else:
            mixer = ReluSquaredMLP(c, dtype, device)
        return NemotronHBlock(c, mixer, dtype, device)

    def _linear_weights(self) -> list:
        names = {Mamba2Mixer: ("in_proj", "out_proj"), LlamaAttention: ("qkv_proj", "o_proj"),
                 ReluSquaredMLP: ("up_proj", "down_proj"), NemotronHMoE: ("shared_up", "shared_down")}
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.mixer, name) for name in names[type(layer.mixer)]]
        return swaps

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mixer = f"model.layers.{i}.", layer.mixer
            t[p + "norm.weight"] = (layer.norm, False)
            if isinstance(mixer, Mamba2Mixer):
                t.update(mixer_targets(p + "mixer.", mixer))
            elif isinstance(mixer, LlamaAttention):
                t.update(attention_targets(p + "mixer.", mixer))
            else:
                t.update(mixer.targets(p + "mixer."))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights((_our_name(name), tensor) for name, tensor in named_tensors
                             if not name.startswith(("mtp.", "model.mtp.", "backbone.mtp.")))


def _our_name(name: str) -> str:
    """A checkpoint name in Llama's outer names: backbone. -> model., embeddings -> embed_tokens, norm_f -> norm."""
    if name.startswith("backbone."):
        name = "model." + name[len("backbone."):]
    return {"model.embeddings.weight": "model.embed_tokens.weight", "model.norm_f.weight": "model.norm.weight"}.get(
        name, name)
