"""Liquid AI's LFM3 (HF Lfm3ForCausalLM): LFM2's short-convolution hybrid (lfm2.py) with sliding-window attention layers
beside the full ones (config.layer_windows, declared to the attention backend in the attention layers' own numbering),
a rope per attention kind (ShortConv.layer_ropes: lfm3_config.py's default or proportional rope, one cos/sin cache per
kind over the whole head, the pairs that do not rotate at frequency 0), a sigmoid gate per query head on the attention
output before o_proj (g_proj), and an RMSNorm on each sublayer's output before it joins the residual (sandwich norms).
Checkpoint names: LFM2's conv.* and feed_forward.{w1, w3, w2}; self_attn.{q,k,v,o}_proj, {q,k}_norm and gate_proj
(transformers' g_proj);
{operator,ffn}_norm and post_{operator,ffn}_norm.  LFM2's limits.  Notation: T tokens, H hidden, Hq/Hkv heads, D head_dim.
"""

import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_hybrid import attention_targets
from .layer_ops import Rotary, rms_norm
from .layers import param
from .lfm2 import Lfm2ForCausalLM, Lfm2Layer, Lfm2ShortConv
from .llama import LlamaAttention
from .packed_linear import linear


def proportional_cos_sin(base: float, fraction: float, factor: float, head_dim: int, length: int) -> torch.Tensor:
    """[length, D] float32 (cos in [:, :D/2], sin in [:, D/2:]): the first int(fraction * D / 2) pairs at frequencies
    base ** (-2i / D), the rest at 0, all divided by factor (HF's proportional rope; the default at 1, 1)."""
    angles = int(fraction * head_dim // 2)
    inv_freq = 1.0 / base ** (torch.arange(0, 2 * angles, 2, dtype=torch.int64).float() / head_dim)  # [angles]
    inv_freq = torch.cat((inv_freq, torch.zeros(head_dim // 2 - angles))) / factor  # [D/2]
    freqs = torch.outer(torch.arange(length, dtype=torch.int64).float(), inv_freq)  # [length, D/2]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # [length, D]


class Lfm3Attention(LlamaAttention):
    """LlamaAttention (q/k norms before rope) with the output of each query head times sigmoid(g_proj(x)) of it."""

    def __init__(self, config: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(config, layer_id, attn_backend, dtype, device)
        gate = config.short_conv.attention_gate
        self.g_proj = param(config.num_heads, config.hidden_size, dtype=dtype, device=device) if gate else None  # [Hq, H]
        self.LINEARS = ("qkv_proj", "o_proj") + (("g_proj",) if gate else ())   # the weights pack_weights packs

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(T, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = rotary.apply_(self.norm_qk(qkv[:, :hq + hkv]))  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        return linear(self.gate(o, x).reshape(T, self.q_size), self.o_proj, self.o_bias)  # [T, H]

    def gate(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """o [T, Hq, D] times sigmoid(g_proj(x)) [T, Hq, 1] (unchanged without the gate)."""
        return o if self.g_proj is None else o * torch.sigmoid(linear(x, self.g_proj)).unsqueeze(-1)


class Lfm3Layer(Lfm2Layer):
    """x + post_operator_norm(mixer(operator_norm(x))), then x + post_ffn_norm(feed_forward(ffn_norm(x))); without
    sandwich norms, LFM2's layer."""

    def __init__(self, c: ModelConfig, mixer, feed_forward, dtype, device):
        super().__init__(c, mixer, feed_forward, dtype, device)
        sandwich = c.short_conv.sandwich_norms
        self.post_operator_norm, self.post_ffn_norm = (
            (param(c.hidden_size, dtype=dtype, device=device) if sandwich else None) for _ in range(2))  # [H] each

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.post_norm(self.mixer(rms_norm(x, self.operator_norm, self.eps), rotary, fb),
                               self.post_operator_norm)  # [T, H]
        return x + self.post_norm(self.mlp(rms_norm(x, self.ffn_norm, self.eps)), self.post_ffn_norm)  # [T, H]

    def post_norm(self, x: torch.Tensor, weight) -> torch.Tensor:
        return x if weight is None else rms_norm(x, weight, self.eps)  # [T, H]


class Lfm3ForCausalLM(Lfm2ForCausalLM):
    """Lfm2ForCausalLM's contract with LFM3's attention, rope and norms."""

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        c, length = config, max_context or config.context_length
        attention = [i for i in range(c.num_layers) if i not in c.short_conv.conv_layers]
        attn_backend.set_layer_variants([c.layer_windows[i] if c.layer_windows else None for i in attention])
        self.ropes = sorted({rope for rope in c.short_conv.layer_ropes if rope is not None})
        for k, rope in enumerate(self.ropes):
            cache = proportional_cos_sin(*rope, c.head_dim, length)  # [C, D] float32
            self.register_buffer(f"cos_sin_{k}", cache.to(device=device, dtype=dtype), persistent=False)

    def make_layer(self, layer_id: int, attn_backend, dtype, device):
        c, convs = self.config, self.config.short_conv.conv_layers
        if layer_id in convs:
            mixer = Lfm2ShortConv(c, convs.index(layer_id), self.states, dtype, device)
        else:
            mixer = Lfm3Attention(c, self.kv_layer(layer_id), attn_backend, dtype, device)
        return Lfm3Layer(c, mixer, self.make_mlp(layer_id, dtype, device), dtype, device)

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        """Each attention layer's Rotary of its kind's cache (the convolutions': the first, unread)."""
        rotaries = ([Rotary(positions, getattr(self, f"cos_sin_{k}")) for k in range(len(self.ropes))]
                    or [Rotary(positions, self.cos_sin)])   # convolutions only
        return [rotaries[self.ropes.index(rope) if rope is not None else 0]
                for rope in self.config.short_conv.layer_ropes]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            p, attn = f"model.layers.{i}.", layer.mixer
            if layer.post_operator_norm is not None:
                t.update({p + "post_operator_norm.weight": (layer.post_operator_norm, False),
                          p + "post_ffn_norm.weight": (layer.post_ffn_norm, False)})
            if isinstance(attn, Lfm3Attention):
                p += "self_attn."
                for name in ("out_proj.weight", "q_layernorm.weight", "k_layernorm.weight"):
                    del t[p + name]
                t.update(attention_targets(p, attn))
                t.update({p + "q_norm.weight": (attn.qk_norm[:attn.num_heads], True),
                          p + "k_norm.weight": (attn.qk_norm[attn.num_heads:], True)})
                if attn.g_proj is not None:
                    t[p + "gate_proj.weight"] = (attn.g_proj, False)
        return t

    def load_weights(self, named_tensors) -> None:
        """The checkpoint's self_attn.gate_proj (the hub's name) also read as transformers' own g_proj."""
        super().load_weights((name.replace(".self_attn.g_proj.", ".self_attn.gate_proj."), tensor)
                             for name, tensor in named_tensors)
