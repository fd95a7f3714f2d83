"""AI21 Jamba (HF JambaForCausalLM; fields: jamba_config.py): Mamba-1 mixers (mamba1.py, weighted dt/B/C norms) and
attention layers without position embeddings (LlamaAttention), each followed by a SwiGLU MLP or softmax-routed
experts (SparseMoeBlock), in Granite 4.0's pre-norm layer (granite_hybrid.GraniteHybridLayer, no multipliers).  Only the
attention layers have KV in the pool (ModelConfig.kv_layers), numbered among themselves; the mixers keep a state per
request row (recurrent_state.py).  Checkpoint names: mamba.*, self_attn.*, feed_forward.{gate, up, down}_proj or
feed_forward.{router, experts.{e}.*}, input_layernorm, pre_ff_layernorm and model.final_layernorm.
No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .granite_hybrid import GraniteHybridLayer, attention_targets
from .hybrid_model import RecurrentHybridForCausalLM
from .layer_ops import rms_norm
from .llama import LlamaAttention
from .mamba1 import MambaMixer, mamba1_states
from .moe import SparseMoeBlock
from .multimodal_text import split_stacked_experts
from .recurrent_state import RecurrentStates

_OUR_NAMES = ((".feed_forward.router.", ".mlp.gate."), (".feed_forward.", ".mlp."),
              (".pre_ff_layernorm.", ".post_attention_layernorm."), ("model.final_layernorm.", "model.norm."))


class JambaForCausalLM(RecurrentHybridForCausalLM):
    LAYER_KIND = "hybrid (Mamba)"
    TP_REASON = " (its Mamba mixers run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        return mamba1_states(config.mamba1, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, m = self.config, self.config.mamba1
        if layer_id in m.mamba_layers:
            mixer = MambaMixer(m, m.mamba_layers.index(layer_id), self.states, c.hidden_size, dtype, device)
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
            t.update(mixer.targets(p + "mamba.") if isinstance(mixer, MambaMixer)
                     else attention_targets(p + "self_attn.", mixer))
            t.update(mlp.checkpoint_targets(p + "mlp.") if isinstance(mlp, SparseMoeBlock)
                     else self._mlp_targets(i, mlp))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(pair for name, tensor in named_tensors
                             for pair in split_stacked_experts(_our_name(name), tensor, self.config))


def _our_name(name: str) -> str:
    for theirs, ours in _OUR_NAMES:
        name = name.replace(theirs, ours)
    return name
