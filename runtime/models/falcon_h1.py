"""TII Falcon-H1 (HF FalconH1ForCausalLM; fields: falcon_h1_config.py): every layer runs a Mamba-2 mixer (mamba2.py,
its width mamba_d_ssm, its gated norm optional and before or after the gate) and rotary attention (LlamaAttention) on
one RMS-normed input and adds both to the residual, then a SwiGLU MLP.  Falcon-H1's muP multipliers on the mixer's
input, in_proj's five output sections and the mixer's output, on the attention's input, keys and output and on the
MLP's gate and output are folded into those weights at load; the embedding and logits multipliers are
ModelConfig.embedding_multiplier and logits_scaling.  Every layer has KV in the pool and a state per request row.
Checkpoint names: mamba.*, self_attn.*, feed_forward.{gate, up, down}_proj, input_layernorm, pre_ff_layernorm and
model.final_layernorm.  No tensor parallelism, no native one-call decode, no FP8.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_hybrid import attention_targets, mixer_targets
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention, LlamaMLP
from .mamba2 import Mamba2Mixer
from .mamba2_hybrid import Mamba2HybridForCausalLM


class FalconH1Layer(nn.Module):
    """x + mamba(h) + self_attn(h) with h = norm(x), then x + mlp(norm(x))."""

    def __init__(self, c: ModelConfig, mamba: Mamba2Mixer, attn: LlamaAttention, mlp: LlamaMLP, dtype, device):
        super().__init__()
        self.eps, self.mamba, self.self_attn, self.mlp = c.rms_norm_eps, mamba, attn, mlp
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.pre_ff_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = rms_norm(x, self.input_layernorm, self.eps)  # [T, H]
        x = x + self.mamba(h, rotary, fb) + self.self_attn(h, rotary, fb)  # [T, H]
        return x + self.mlp(rms_norm(x, self.pre_ff_layernorm, self.eps))  # [T, H]


class FalconH1ForCausalLM(Mamba2HybridForCausalLM):
    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        mixer = Mamba2Mixer(c.mamba2, layer_id, self.states, c.hidden_size, c.rms_norm_eps, dtype, device)
        attn = LlamaAttention(c, layer_id, attn_backend, dtype, device)
        return FalconH1Layer(c, mixer, attn, LlamaMLP(c, dtype, device), dtype, device)

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.mamba, "in_proj"), (layer.mamba, "out_proj"), (layer.self_attn, "qkv_proj"),
                      (layer.self_attn, "o_proj"), (layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
        return swaps

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mlp = f"model.layers.{i}.", layer.mlp
            inter = mlp.down_proj.shape[1]
            t.update({p + "input_layernorm.weight": (layer.input_layernorm, False),
                      p + "pre_ff_layernorm.weight": (layer.pre_ff_layernorm, False),
                      p + "feed_forward.gate_proj.weight": (mlp.gate_up_proj[:inter], False),
                      p + "feed_forward.up_proj.weight": (mlp.gate_up_proj[inter:], False),
                      p + "feed_forward.down_proj.weight": (mlp.down_proj, False)})
            t.update(mixer_targets(p + "mamba.", layer.mamba))
            t.update(attention_targets(p + "self_attn.", layer.self_attn))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(("model.norm.weight" if name == "model.final_layernorm.weight" else name, tensor)
                             for name, tensor in named_tensors)
        self._fold_multipliers()

    def _fold_multipliers(self) -> None:
        """Each muP multiplier into the weights (and biases) whose output it scales, as HF applies it."""
        m = self.config.mamba2
        mu, gn = m.parallel, m.n_groups * m.d_state
        sections = torch.cat([torch.full((n,), s) for n, s in zip(
            (m.intermediate, m.intermediate, gn, gn, m.num_heads), mu.ssm_sections)]).to(self.dtype)  # [I+C+Hm]
        for layer in self.layers:
            mixer, attn, mlp = layer.mamba, layer.self_attn, layer.mlp
            mixer.in_proj.mul_(sections[:, None] * mu.ssm_in)  # [I+C+Hm, H]: the input's multiplier, then each row's
            _scale(mixer.in_bias, sections)
            for t in (mixer.out_proj, mixer.out_bias):
                _scale(t, mu.ssm_out)
            q, kv = attn.q_size, attn.kv_size
            attn.qkv_proj.mul_(mu.attention_in)  # [(Hq+2Hkv)*D, H]: the input's multiplier (the biases come after it)
            for t in (attn.qkv_proj, attn.qkv_bias):
                _scale(None if t is None else t[q:q + kv], mu.key)
            for t in (attn.o_proj, attn.o_bias):
                _scale(t, mu.attention_out)
            mlp.gate_up_proj[:mlp.down_proj.shape[1]].mul_(mu.mlp_gate)  # [I, H] gate rows
            mlp.down_proj.mul_(mu.mlp_down)


def _scale(t, by) -> None:
    if t is not None:
        t.mul_(by)
