"""Liquid AI's LFM2 (HF Lfm2ForCausalLM) and LFM2-MoE (Lfm2MoeForCausalLM): short-convolution layers and attention
layers (LlamaAttention with per-head q/k RMSNorms before rope), each x + mixer(operator_norm(x)), then
x + feed_forward(ffn_norm(x)); the feed-forward a SwiGLU (LlamaMLP) or LFM2-MoE's experts (SparseMoeBlock:
lfm2_config.py's rule); plain RMSNorms, the final one named embedding_norm; tied embeddings where configured.
Only the attention layers have KV in the pool (ModelConfig.kv_layers), numbered among themselves; a short convolution
keeps the last K - 1 inputs of its convolution per request row (recurrent_state.py, with no state beyond them).
Checkpoint names: conv.{in_proj, conv, out_proj}, self_attn.{q,k,v,out}_proj and {q,k}_layernorm,
feed_forward.{w1, w3, w2} (gate, up, down) or feed_forward.{gate.weight, expert_bias, experts.{e}.{w1, w3, w2}}.
No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.  Notation: T tokens, H hidden, K width.
"""


import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_hybrid import attention_targets
from .hybrid_model import RecurrentHybridForCausalLM
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention
from .moe import SparseMoeBlock
from .packed_linear import linear
from .recurrent_state import ConvWeight, RecurrentStates


class Lfm2ShortConv(nn.Module):
    """in_proj -> B, C, x; y = C * conv(B * x) (causal, depthwise, width K, no activation); out_proj(y)."""

    LINEARS = ("in_proj", "out_proj")   # the weights pack_weights packs

    def __init__(self, c: ModelConfig, index: int, states: RecurrentStates, dtype, device):
        """index: this layer's place among the short convolutions (its slice of `states`)."""
        super().__init__()
        h, sc = c.hidden_size, c.short_conv
        self.index, self.states = index, states
        self.in_proj = param(3 * h, h, dtype=dtype, device=device)  # [3H, H]: B | C | x
        self.conv_weight = param(h, sc.conv_kernel, dtype=dtype, device=device)  # [H, K]
        self.out_proj = param(h, h, dtype=dtype, device=device)  # [H, H]
        self.in_bias, self.conv_bias, self.out_bias = (
            (param(n, dtype=dtype, device=device) if sc.bias else None) for n in (3 * h, h, h))

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H]; advances each request's convolution inputs by its new tokens."""
        B, C, xs = linear(x, self.in_proj, self.in_bias).chunk(3, dim=1)  # [T, H] each
        y = self.states.convolve(self.index, B * xs, self.conv_weight, self.conv_bias, silu=False)  # [T, H]
        return linear(C * y, self.out_proj, self.out_bias)  # [T, H]


class Lfm2Layer(nn.Module):
    """x + mixer(operator_norm(x)), then x + feed_forward(ffn_norm(x))."""

    def __init__(self, c: ModelConfig, mixer: nn.Module, feed_forward: nn.Module, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.operator_norm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.ffn_norm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.mixer, self.mlp = mixer, feed_forward

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.mixer(rms_norm(x, self.operator_norm, self.eps), rotary, fb)  # [T, H]
        return x + self.mlp(rms_norm(x, self.ffn_norm, self.eps))  # [T, H]


class Lfm2ForCausalLM(RecurrentHybridForCausalLM):
    """RecurrentHybridForCausalLM's contract with short convolutions and attention."""

    LAYER_KIND = "hybrid (short convolution)"
    TP_REASON = " (its short convolutions run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        sc = config.short_conv
        return RecurrentStates(len(sc.conv_layers), config.hidden_size, sc.conv_kernel, (0,), dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, convs = self.config, self.config.short_conv.conv_layers
        if layer_id in convs:
            mixer = Lfm2ShortConv(c, convs.index(layer_id), self.states, dtype, device)
        else:
            mixer = LlamaAttention(c, self.kv_layer(layer_id), attn_backend, dtype, device)
        return Lfm2Layer(c, mixer, self.make_mlp(layer_id, dtype, device), dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _outer_targets(self) -> dict:
        t = super()._outer_targets()
        t["model.embedding_norm.weight"] = t.pop("model.norm.weight")
        return t

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mixer, mlp = f"model.layers.{i}.", layer.mixer, layer.mlp
            t.update({p + "operator_norm.weight": (layer.operator_norm, False),
                      p + "ffn_norm.weight": (layer.ffn_norm, False)})
            t.update(_conv_targets(p + "conv.", mixer) if isinstance(mixer, Lfm2ShortConv)
                     else _lfm2_attention_targets(p + "self_attn.", mixer))
            if isinstance(mlp, SparseMoeBlock):
                t.update(mlp.checkpoint_targets(p + "feed_forward.", ("w1", "w3", "w2"), bias_name="expert_bias"))
            else:
                inter = mlp.down_proj.shape[1]
                t.update({p + "feed_forward.w1.weight": (mlp.gate_up_proj[:inter], False),
                          p + "feed_forward.w3.weight": (mlp.gate_up_proj[inter:], False),
                          p + "feed_forward.w2.weight": (mlp.down_proj, False)})
        return t


class Lfm2MoeForCausalLM(Lfm2ForCausalLM):
    """Lfm2ForCausalLM with sigmoid-routed experts after its first num_dense_layers layers."""


def _lfm2_attention_targets(p: str, attn: LlamaAttention) -> dict:
    t = attention_targets(p, attn)
    t[p + "out_proj.weight"] = t.pop(p + "o_proj.weight")
    hq = attn.num_heads
    t.update({p + "q_layernorm.weight": (attn.qk_norm[:hq], True), p + "k_layernorm.weight": (attn.qk_norm[hq:], True)})
    return t


def _conv_targets(p: str, conv: Lfm2ShortConv) -> dict:
    t = {p + "in_proj.weight": (conv.in_proj, False), p + "conv.weight": (ConvWeight(conv.conv_weight), False),
         p + "out_proj.weight": (conv.out_proj, False)}
    for name, tensor in (("in_proj.bias", conv.in_bias), ("conv.bias", conv.conv_bias),
                         ("out_proj.bias", conv.out_bias)):
        if tensor is not None:
            t[p + name] = (tensor, False)
    return t
