"""RWKV-4 (HF RwkvForCausalLM; fields: rwkv_config.py): no attention, no KV.  Each layer is
x + time_mix(ln1(x)), then x + channel_mix(ln2(x)) (LayerNorms with biases; layer 0 first LayerNorms the embeddings,
pre_ln).  Both mixes read their input h and the previous token's h (the token shift: the previous input a width-2
causal convolution that passes it through, recurrent_state.py), mixed per channel as h m + prev (1 - m).
Time mix: k, v, r = key, value, receptance of their mixes; the WKV recurrence with decay w = -exp(time_decay) and
bonus u = time_first gives, per channel,
    wkv_t = (sum_{i<t} e^{(t-1-i) w + k_i} v_i + e^{u + k_t} v_t) / (the same sums without v),
kept as (numerator, denominator, their exponent offset) in float32 (HF's numerically stable form); out is
output(sigmoid(r) * wkv).  Channel mix: sigmoid(receptance(mix)) * value(relu(key(mix))^2).
HF's eval mode halves x after every rescale_every layers and divides each layer's output and value weights by
2^(layer // rescale_every); so does this model, at load.
Each layer keeps, per request row, its two token shifts [H] and its WKV state [3, A] (tables 2i and 2i + 1).
Checkpoint names: rwkv.{embeddings, blocks.{i}.{pre_ln, ln1, ln2, attention.*, feed_forward.*}, ln_out} and head.
No tensor parallelism, no native one-call decode, no FP8.  Notation: T tokens, H hidden, A WKV channels, I the
channel mix's width.
"""

from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .hybrid_model import RecurrentStateForCausalLM
from .layer_ops import Rotary
from .layers import param
from .packed_linear import linear
from .recurrent_state import RecurrentStates

EMPTY = -1e38   # the exponent offset of a state that has seen no token (HF's)
_OUTER_NAMES = {"rwkv.embeddings.weight": "model.embed_tokens.weight", "rwkv.ln_out.weight": "model.norm.weight",
                "head.weight": "lm_head.weight"}


class RwkvLayer(nn.Module):
    LINEARS = ("att_key", "att_value", "att_receptance", "att_output", "ffn_key", "ffn_receptance", "ffn_value")

    def __init__(self, c: ModelConfig, index: int, states: RecurrentStates, dtype, device):
        super().__init__()
        H, A, I = c.hidden_size, c.rwkv.attention_width, c.intermediate_size
        self.index, self.states, self.eps = index, states, c.rms_norm_eps
        self.pre_ln = param(2, H, dtype=dtype, device=device) if index == 0 else None  # [2, H]: weight, bias
        self.ln1, self.ln2 = (param(2, H, dtype=dtype, device=device) for _ in "12")  # [2, H] each
        self.time_decay, self.time_first = (param(A, dtype=torch.float32, device=device) for _ in "df")  # [A]
        self.att_mix = param(3, H, dtype=dtype, device=device)  # [3, H]: key, value, receptance
        self.att_key, self.att_value, self.att_receptance = (param(A, H, dtype=dtype, device=device) for _ in "kvr")
        self.att_output = param(H, A, dtype=dtype, device=device)  # [H, A]
        self.ffn_mix = param(2, H, dtype=dtype, device=device)  # [2, H]: key, receptance
        self.ffn_key = param(I, H, dtype=dtype, device=device)  # [I, H]
        self.ffn_receptance = param(H, H, dtype=dtype, device=device)  # [H, H]
        self.ffn_value = param(H, I, dtype=dtype, device=device)  # [H, I]
        self.register_buffer("previous", torch.tensor([1.0, 0.0], dtype=dtype, device=device).expand(H, 2),
                             persistent=False)  # [H, 2]: the token shift as a convolution

    def forward(self, x: torch.Tensor, rotary: Optional[Rotary], fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]; advances each request's state by its new tokens."""
        if self.pre_ln is not None:
            x = self._ln(x, self.pre_ln)  # [T, H]
        h = self._ln(x, self.ln1)  # [T, H]
        prev = self.states.convolve(2 * self.index, h, self.previous, None, silu=False)  # [T, H]
        k, v, r = (h * m + prev * (1 - m) for m in self.att_mix)  # [T, H] each
        k, v = linear(k, self.att_key), linear(v, self.att_value)  # [T, A] each
        r = torch.sigmoid(linear(r, self.att_receptance))  # [T, A]
        w, u = -torch.exp(self.time_decay), self.time_first  # [A] each
        wkv = self.states.scan(2 * self.index, lambda k, v, state: _wkv(k[:, None], v[:, None], w, u, state[None])[:, 0],
                               lambda k, v, states: _wkv(k[None], v[None], w, u, states)[0],
                               k.float(), v)  # [T, A]
        x = x + linear(r * wkv.to(x.dtype), self.att_output)  # [T, H]
        h = self._ln(x, self.ln2)  # [T, H]
        prev = self.states.convolve(2 * self.index + 1, h, self.previous, None, silu=False)  # [T, H]
        k, r = (h * m + prev * (1 - m) for m in self.ffn_mix)  # [T, H] each
        k = torch.square(torch.relu(linear(k, self.ffn_key)))  # [T, I]
        return x + torch.sigmoid(linear(r, self.ffn_receptance)) * linear(k, self.ffn_value)  # [T, H]

    def _ln(self, x: torch.Tensor, wb: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), wb[0], wb[1], self.eps)

    def targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast allowed) under `p` ("rwkv.blocks.0.")."""
        t = {}
        for name, wb in (("pre_ln", self.pre_ln), ("ln1", self.ln1), ("ln2", self.ln2)):
            if wb is not None:
                t.update({p + name + ".weight": (wb[0], False), p + name + ".bias": (wb[1], False)})
        a, f = p + "attention.", p + "feed_forward."
        t.update({a + "time_decay": (self.time_decay, False), a + "time_first": (self.time_first, False),
                  a + "key.weight": (self.att_key, False), a + "value.weight": (self.att_value, False),
                  a + "receptance.weight": (self.att_receptance, False), a + "output.weight": (self.att_output, False),
                  f + "key.weight": (self.ffn_key, False), f + "receptance.weight": (self.ffn_receptance, False),
                  f + "value.weight": (self.ffn_value, False)})
        for j, name in enumerate(("key", "value", "receptance")):
            t[a + f"time_mix_{name}"] = (self.att_mix[j], False)
        for j, name in enumerate(("key", "receptance")):
            t[f + f"time_mix_{name}"] = (self.ffn_mix[j], False)
        return t


def _wkv(k: torch.Tensor, v: torch.Tensor, w: torch.Tensor, u: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """The WKV recurrence over T tokens of R requests.  k: [T, R, A] float32, v: [T, R, A]; state [R, 3, A]
    (numerator, denominator, exponent offset; a denominator of 0: no token yet) updated in place.  -> [T, R, A]."""
    num, den, top = state.unbind(1)  # [R, A] each
    top = torch.where(den == 0, EMPTY, top)
    out = torch.empty_like(k)
    for t in range(k.shape[0]):
        kt, vt = k[t], v[t]  # [R, A]
        m = torch.maximum(top, kt + u)
        e1, e2 = torch.exp(top - m), torch.exp(kt + u - m)
        out[t] = (e1 * num + e2 * vt) / (e1 * den + e2)
        m = torch.maximum(top + w, kt)
        e1, e2 = torch.exp(top + w - m), torch.exp(kt - m)
        num, den, top = e1 * num + e2 * vt, e1 * den + e2, m
    state.copy_(torch.stack([num, den, top], dim=1))
    return out


class RwkvForCausalLM(RecurrentStateForCausalLM):
    LAYER_KIND = "recurrent (RWKV)"
    TP_REASON = " (its WKV recurrences run on one rank)"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.norm_bias = param(config.hidden_size, dtype=dtype, device=device)  # [H] ln_out's

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        return RecurrentStates(2 * config.num_layers, config.hidden_size, 2, (3, config.rwkv.attention_width), dtype,
                               device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return RwkvLayer(self.config, layer_id, self.states, dtype, device)

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        return [None] * len(self.layers)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        x = self.embed_inputs(fb)  # [T, H]
        every = self.config.rwkv.rescale_every
        for i, layer in enumerate(self.layers):
            x = layer(x, None, fb)  # [T, H]
            if every and (i + 1) % every == 0:
                x = x / 2
        return self.final_norm(x)  # [T, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.norm, self.norm_bias, 1e-5)  # [T, H]: HF's ln_out eps

    def _linear_weights(self) -> list:
        return [(self, "lm_head")] + [(layer, name) for layer in self.layers for name in RwkvLayer.LINEARS]

    def _weight_targets(self) -> dict:
        t = {**self._outer_targets(), "rwkv.ln_out.bias": (self.norm_bias, False)}
        for i, layer in enumerate(self.layers):
            t.update(layer.targets(f"rwkv.blocks.{i}."))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights((_OUTER_NAMES.get(name, name), tensor.reshape(-1) if ".time_mix_" in name else tensor)
                             for name, tensor in named_tensors)   # time_mix_*: [1, 1, H] -> [H]
        every = self.config.rwkv.rescale_every
        for i, layer in enumerate(self.layers):
            if every:   # HF's eval-mode rescaling
                layer.att_output.div_(2 ** (i // every))
                layer.ffn_value.div_(2 ** (i // every))
