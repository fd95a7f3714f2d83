"""Zaya (HF ZayaForCausalLM; fields: zaya_config.py): Laguna's layer types and ropes around Compressed Convolutional
Attention, residual scalings and a routed MLP whose router state runs from layer to layer.

Attention (CCA): q and k projections [T, (Hq+Hkv)*D] go through a causal depthwise convolution (width W0) then one
grouped per head (width W1), continuing each request's last W0 + W1 - 2 inputs (the per-row conv state of
recurrent_state.py); to them add residual paths: query head h gets (q_h + k_g) / 2 (g its K/V head), key head g the
mean of its group's.  Values: the first half of the flattened values from this token (v_proj_current), the second
from the previous one (v_proj_delayed; the per-row state holds the last token's projection, zeros at position 0).
q and k are L2-normed to sqrt(D), k times a learned factor per K/V head, then rotated (the first rotary_dim dims).
Layer: x = s_a(attn(norm(x)), x), then x = s_m(moe(norm(x)), x), where s(h, x) = (h + hb) * hs + (x + rb) * rs; the
residual stream stays in float32.  Router: r = down(x) (+ the previous layer's r times a scale, after layer 0) goes
on to the next layer; an RMSNorm, two gelu layers and out_proj give logits over the experts and a last "no expert",
softmax, plus balancing biases for the choice of one; Qwen3-MoE's SwiGLU experts.  Embeddings (e + b) * s; logits
with lm_head's bias.  One rank, op by op, no CUDA graphs, no FP8.
Notation: T tokens, H hidden, Hq/Hkv heads of D dims, C = (Hq+Hkv)*D, V2 = Hkv*D/2, R router width, E experts.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .hybrid_model import RecurrentStateForCausalLM
from .laguna import LayerTypeRopes
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention
from .moe import grouped_experts
from .packed_linear import linear
from .quant_linear import embed
from .recurrent_state import RecurrentStates


def cca_convolve(states: RecurrentStates, layer: int, x: torch.Tensor, convs) -> torch.Tensor:
    """x [T, C] after each request's last K - 1 inputs (which then become the last K - 1 of these) through convs,
    (weight, bias, groups) applied in turn without padding -> [T, C]."""
    def run(window):  # [B, C, K-1+n] -> [B, C, n]
        for weight, bias, groups in convs:
            window = F.conv1d(window, weight, bias, groups=groups)
        return window

    conv = states.conv[layer]  # [R, C, K-1]
    if states.decode_only:
        window = torch.cat([conv[states.rows_t], x[:, :, None]], dim=2)  # [B, C, K]
        conv[states.rows_t] = window[:, :, 1:]
        return run(window)[:, :, 0]  # [B, C]
    out = torch.empty_like(x)
    for row, start, n, _ in states.rows:
        window = torch.cat([conv[row], x[start:start + n].t()], dim=1)  # [C, K-1+n]
        conv[row] = window[:, n:]
        out[start:start + n] = run(window[None])[0].t()  # [n, C]
    return out


def delayed(states: RecurrentStates, layer: int, d: torch.Tensor) -> torch.Tensor:
    """Each token's previous token's row of d [T, V2] (the row's kept last one before its first), keeping each
    request's last -> [T, V2]."""
    state = states.state[layer]  # [R, V2] float32
    if states.decode_only:
        prev = state[states.rows_t].to(d.dtype)  # [B, V2]
        state[states.rows_t] = d.float()
        return prev
    out = torch.empty_like(d)
    for row, start, n, _ in states.rows:
        out[start:start + n] = torch.cat([state[row][None].to(d.dtype), d[start:start + n - 1]])
        state[row] = d[start + n - 1].float()
    return out


class CcaAttention(LlamaAttention):
    """qkv_proj's rows: q [Hq*D], k [Hkv*D], current values [V2], delayed values [V2]; qkv_bias the same."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, states: RecurrentStates, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.states, self.widths, width = states, c.zaya.conv_widths, self.q_size + self.kv_size
        self.conv_depthwise = param(width, 1, self.widths[0], dtype=dtype, device=device)  # [C, 1, W0]
        self.conv_grouped = param(width, self.head_dim, self.widths[1], dtype=dtype, device=device)  # [C, D, W1]
        self.conv_biases = param(2, width, dtype=dtype, device=device)  # [2, C] (whatever attention_bias says)
        self.temp = param(self.num_kv_heads, dtype=dtype, device=device)  # [Hkv]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool and advances its request rows' states."""
        t, hq, hkv, d, width = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim, self.q_size + self.kv_size
        proj = linear(x, self.qkv_proj)  # [T, C + 2*V2] unbiased
        biased = proj[:, :-self.kv_size // 2] if self.qkv_bias is None else (
            proj[:, :-self.kv_size // 2] + self.qkv_bias[:-self.kv_size // 2])  # [T, C + V2]
        qk = biased[:, :width]  # [T, C]
        conv = cca_convolve(self.states, self.layer_id, qk, ((self.conv_depthwise, self.conv_biases[0], width),
                                                             (self.conv_grouped, self.conv_biases[1], hq + hkv)))
        q_res = (qk[:, :self.q_size].view(t, hq, d) + qk[:, self.q_size:].view(t, hkv, d).repeat_interleave(
            hq // hkv, dim=1)) * 0.5  # [T, Hq, D]
        k_res = q_res.view(t, hkv, hq // hkv, d).mean(dim=2)  # [T, Hkv, D]
        q = conv[:, :self.q_size].view(t, hq, d) + q_res  # [T, Hq, D]
        k = conv[:, self.q_size:].view(t, hkv, d) + k_res  # [T, Hkv, D]
        late = delayed(self.states, self.layer_id, proj[:, -self.kv_size // 2:])  # [T, V2]
        if self.qkv_bias is not None:
            late = late + self.qkv_bias[-self.kv_size // 2:]
        v = torch.cat([biased[:, width:], late], dim=1).view(t, hkv, d)  # [T, Hkv, D]
        qk = torch.cat([_to_sphere(q), _to_sphere(k) * self.temp[:, None]], dim=1)  # [T, Hq+Hkv, D]
        qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], v, self.layer_id, fb)  # [T, Hq, D]
        return linear(o.reshape(t, self.q_size), self.o_proj, self.o_bias)  # [T, H]


def _to_sphere(x: torch.Tensor) -> torch.Tensor:
    """Each head [.., D] scaled to norm sqrt(D)."""
    eps = torch.finfo(x.dtype).eps
    return x * (x.shape[-1] ** 0.5 / x.norm(p=2, dim=-1, keepdim=True).clamp_min(eps))


class RoutedMLP(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, dtype, device):
        super().__init__()
        h, r, e = c.hidden_size, c.zaya.router_hidden_size, c.zaya.num_experts
        self.eps, self.num_experts = c.rms_norm_eps, e
        self.down, self.down_bias = param(r, h, dtype=dtype, device=device), param(r, dtype=dtype, device=device)
        self.state_scale = param(r, dtype=dtype, device=device) if layer_id else None  # [R]
        self.norm = param(r, dtype=dtype, device=device)  # [R]
        self.fc = param(2, r, r, dtype=dtype, device=device)  # [2, R, R]
        self.fc_bias = param(2, r, dtype=dtype, device=device)  # [2, R]
        self.out_proj = param(e + 1, r, dtype=dtype, device=device)  # [E+1, R]
        self.balancing = param(e + 1, dtype=torch.float32, device=device)  # [E+1]
        self.w13 = param(e, 2 * c.intermediate_size, h, dtype=dtype, device=device)  # [E, 2I, H]
        self.w2 = param(e, h, c.intermediate_size, dtype=dtype, device=device)  # [E, H, I]

    def forward(self, x: torch.Tensor, state):
        """x [T, H], the previous layer's router state [T, R] or None -> (output [T, H], this layer's state)."""
        r = linear(x, self.down, self.down_bias)  # [T, R]
        if self.state_scale is not None and state is not None:
            r = r + state * self.state_scale  # [T, R]
        z = rms_norm(r, self.norm, self.eps)  # [T, R]
        for i in range(2):
            z = F.gelu(linear(z, self.fc[i], self.fc_bias[i]))  # [T, R]
        probs = torch.softmax(linear(z, self.out_proj), dim=-1)  # [T, E+1]
        ids = torch.topk(probs.float() + self.balancing, 1, dim=-1).indices  # [T, 1]
        weights = probs.gather(1, ids)  # [T, 1]
        skip = ids == self.num_experts
        weights, ids = weights.masked_fill(skip, 0).float(), ids.masked_fill(skip, 0)
        return grouped_experts(x, self.w13, self.w2, weights, ids), r  # [T, H], [T, R]


class ZayaLayer(nn.Module):
    _SCALES = ("attn_scales", "mlp_scales")   # [4, H]: branch bias, branch scale, residual bias, residual scale

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, states, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        for name in self._SCALES:
            setattr(self, name, param(4, c.hidden_size, dtype=dtype, device=device))
        self.self_attn = CcaAttention(c, layer_id, attn_backend, states, dtype, device)
        self.mlp = RoutedMLP(c, layer_id, dtype, device)

    def forward(self, x: torch.Tensor, router, rotary: Rotary, fb: ForwardBatch):
        """x: [T, H] float32 residual stream, router: the previous layer's state -> (x, this layer's state)."""
        dtype = self.input_layernorm.dtype
        x = _scaled(self.self_attn(rms_norm(x.to(dtype), self.input_layernorm, self.eps), rotary, fb), x,
                    self.attn_scales)  # [T, H]
        h, router = self.mlp(rms_norm(x.to(dtype), self.post_attention_layernorm, self.eps), router)  # [T, H]
        return _scaled(h, x, self.mlp_scales), router


def _scaled(h: torch.Tensor, x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(h + hb) * hs + (x + rb) * rs in float32."""
    hb, hs, rb, rs = scales.float()
    return (h.float() + hb) * hs + (x + rb) * rs  # [T, H]


class ZayaForCausalLM(LayerTypeRopes, RecurrentStateForCausalLM):
    """RecurrentStateForCausalLM's contract: every layer has KV and a state per request row."""

    LAYER_KIND = "convolutional-attention"
    TP_REASON = " (its convolutional attention runs on one rank)"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.register_local_rope(dtype, device, max_context)
        h = config.hidden_size
        self.input_scales = param(2, h, dtype=dtype, device=device)  # [2, H]: bias, scale
        self.lm_head_bias = param(config.vocab_size, dtype=dtype, device=device) if config.zaya.lm_head_bias else None

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        width = (config.num_heads + config.num_kv_heads) * config.head_dim
        return RecurrentStates(config.num_layers, width, config.zaya.conv_kernel,
                               (config.num_kv_heads * config.head_dim // 2,), dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return ZayaLayer(self.config, layer_id, attn_backend, self.states, dtype, device)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        self.attn_backend.init_forward_metadata(fb)
        bias, scale = self.input_scales
        x = ((embed(fb.input_ids, self.embed_tokens, self.dtype) + bias) * scale).float()  # [T, H]
        router = None
        for layer, rotary in zip(self.layers, self.layer_rotaries(fb.positions)):
            x, router = layer(x, router, rotary, fb)  # [T, H], [T, R]
        return self.final_norm(x)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x.to(self.dtype), self.norm, self.config.rms_norm_eps)  # [T, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return linear(hidden, self.lm_head, self.lm_head_bias).float()  # [N, V]

    def _linear_weights(self) -> list:
        return [(self, "lm_head")] + [(layer.self_attn, name) for layer in self.layers for name in ("qkv_proj", "o_proj")]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        t.update({"model.input_hidden_states_bias": (self.input_scales[0], False),
                  "model.input_hidden_states_scale": (self.input_scales[1], False)})
        if self.lm_head_bias is not None:
            t["lm_head.bias"] = (self.lm_head_bias, False)
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t.update({p + "input_layernorm.weight": (layer.input_layernorm, False),
                      p + "post_attention_layernorm.weight": (layer.post_attention_layernorm, False)})
            for name, scales in (("post_attention_residual_scale.", layer.attn_scales),
                                 ("post_mlp_residual_scale.", layer.mlp_scales)):
                t.update({p + name + part: (scales[j], False) for j, part in enumerate(
                    ("hidden_states_bias", "hidden_states_scale", "residual_bias", "residual_scale"))})
            t.update(_attention_targets(p + "self_attn.", layer.self_attn))
            t.update(_router_targets(p + "mlp.", layer.mlp))
        return t


def _attention_targets(p: str, attn: CcaAttention) -> dict:
    q, kv = attn.q_size, attn.kv_size
    rows = {"q_proj": (0, q), "k_proj": (q, q + kv), "v_proj_current": (q + kv, q + kv + kv // 2),
            "v_proj_delayed": (q + kv + kv // 2, q + 2 * kv)}
    c = p + "qkv_proj."
    t = {c + name + ".weight": (attn.qkv_proj[lo:hi], False) for name, (lo, hi) in rows.items()}
    t.update({p + "o_proj.weight": (attn.o_proj, False), p + "qk_norm.temp": (attn.temp, False),
              c + "conv_qk_depthwise.weight": (attn.conv_depthwise, False),
              c + "conv_qk_grouped.weight": (attn.conv_grouped, False),
              c + "conv_qk_depthwise.bias": (attn.conv_biases[0], False),
              c + "conv_qk_grouped.bias": (attn.conv_biases[1], False)})
    if attn.qkv_bias is not None:
        t.update({c + name + ".bias": (attn.qkv_bias[lo:hi], False) for name, (lo, hi) in rows.items()})
    if attn.o_bias is not None:
        t[p + "o_proj.bias"] = (attn.o_bias, False)
    return t


def _router_targets(p: str, mlp: RoutedMLP) -> dict:
    g = p + "gate."
    t = {g + "down_proj.weight": (mlp.down, False), g + "down_proj.bias": (mlp.down_bias, False),
         g + "router_mlp.norm.weight": (mlp.norm, False), g + "router_mlp.out_proj.weight": (mlp.out_proj, False),
         g + "balancing_biases": (mlp.balancing, False), p + "experts.gate_up_proj": (mlp.w13, False),
         p + "experts.down_proj": (mlp.w2, False)}
    for i in range(2):
        t.update({g + f"router_mlp.fc{i + 1}.weight": (mlp.fc[i], False),
                  g + f"router_mlp.fc{i + 1}.bias": (mlp.fc_bias[i], False)})
    if mlp.state_scale is not None:
        t[g + "router_states_scale"] = (mlp.state_scale, False)
    return t
