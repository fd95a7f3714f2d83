"""Thinking Machines' Inkling (HF InklingForCausalLM; inkling_config.py has its rules): RMSNormed embeddings, layers
x + attn_conv(attention(input_layernorm(x))), then x + mlp_conv(mlp(post_attention_layernorm(x))) with the attention of
inkling_attention.py, a dense SwiGLU times its global_scale or the experts (InklingMoE), the final norm's output divided
by logits_mup_width_multiplier.  Each layer's three convolution states (K|V, attention output, MLP output) are request
rows of one RecurrentStates, so the radix cache snapshots them like the other recurrent models'.
Checkpoint names: model.embed_tokens.{weight, embed_norm.weight}, model.layers.{i}.{self_attn.*, mlp.*,
input_layernorm, post_attention_layernorm, attn_sconv.conv1d, mlp_sconv.conv1d}; multi-token-prediction weights
(model.mtp.*) are skipped as HF skips them.  No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8
(weights or KV cache).  Notation: T tokens, H hidden, E routed experts, S shared ones, k chosen, I their width.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .hybrid_model import RecurrentStateForCausalLM
from .inkling_attention import InklingAttention, requests_of, short_conv
from .layer_ops import rms_norm, silu_mul
from .layers import param
from .moe import grouped_experts
from .packed_linear import linear
from .quant_linear import embed
from .recurrent_state import ConvWeight, RecurrentStates


class InklingMLP(nn.Module):
    """down(silu(gate(x)) * up(x)) * global_scale."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        self.gate_up_proj = param(2 * c.intermediate_size, c.hidden_size, dtype=dtype, device=device)  # [2I, H]
        self.down_proj = param(c.hidden_size, c.intermediate_size, dtype=dtype, device=device)  # [H, I]
        self.global_scale = param(1, dtype=dtype, device=device)  # [1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(silu_mul(linear(x, self.gate_up_proj)), self.down_proj) * self.global_scale  # [T, H]

    def checkpoint_targets(self, p: str) -> dict:
        inter = self.down_proj.shape[1]
        return {p + "gate_proj.weight": (self.gate_up_proj[:inter], False),
                p + "up_proj.weight": (self.gate_up_proj[inter:], False),
                p + "down_proj.weight": (self.down_proj, False), p + "global_scale": (self.global_scale, False)}


class InklingMoE(nn.Module):
    """HF InklingMoE: sigmoid scores plus e_score_correction_bias choose k of the E routed experts; the chosen ones'
    and every shared expert's router logits, through logsigmoid and a softmax (the shared experts a sink), times
    route_scale and global_scale, weigh them, all in float32.  The shared experts run as experts E..E+S-1 of one
    grouped call."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        ink = c.inkling
        self.experts, self.top_k, self.shared = ink.experts, ink.top_k, ink.shared_experts
        self.route_scale = ink.route_scale
        total, inter, hidden = ink.experts + ink.shared_experts, ink.expert_intermediate, c.hidden_size
        self.router = param(total, hidden, dtype=dtype, device=device)  # [E+S, H]
        self.global_scale = param(1, dtype=torch.float32, device=device)  # [1]
        self.correction_bias = param(ink.experts, dtype=torch.float32, device=device)  # [E]
        self.w13 = param(total, 2 * inter, hidden, dtype=dtype, device=device)  # [E+S, 2I, H]: gate | up
        self.w2 = param(total, hidden, inter, dtype=dtype, device=device)  # [E+S, H, I]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = F.linear(x.float(), self.router.float())  # [T, E+S]
        routed = logits[:, :self.experts]  # [T, E]
        chosen = torch.topk(routed.sigmoid() + self.correction_bias, self.top_k, dim=-1, sorted=False)[1]  # [T, k]
        picked = torch.cat([routed.gather(-1, chosen), logits[:, self.experts:]], dim=-1)  # [T, k+S]
        weights = self.expert_weights(picked) * self.route_scale * self.global_scale  # [T, k+S]
        shared = torch.arange(self.experts, self.experts + self.shared, device=x.device).expand(x.shape[0], -1)
        ids = torch.cat([chosen, shared], dim=-1)  # [T, k+S]
        return grouped_experts(x, self.w13, self.w2, weights.to(x.dtype), ids)  # [T, H]

    @staticmethod
    def expert_weights(picked: torch.Tensor) -> torch.Tensor:
        """The chosen and shared experts' logits [T, k+S] -> their weights: softmax over their logsigmoids."""
        return torch.softmax(F.logsigmoid(picked), dim=-1)

    def checkpoint_targets(self, p: str) -> dict:
        e, inter = self.experts, self.w2.shape[2]
        return {p + "gate.weight": (self.router, False), p + "gate.global_scale": (self.global_scale, False),
                p + "gate.e_score_correction_bias": (self.correction_bias, False),
                p + "experts.gate_up_proj": (self.w13[:e], False), p + "experts.down_proj": (self.w2[:e], False),
                p + "shared_experts.gate_proj": (self.w13[e:, :inter], False),
                p + "shared_experts.up_proj": (self.w13[e:, inter:], False),
                p + "shared_experts.down_proj": (self.w2[e:], False)}


class InklingLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, states: RecurrentStates, dtype, device):
        super().__init__()
        ink, h = c.inkling, c.hidden_size
        self.eps, self.states, self.conv_index = c.rms_norm_eps, states, 3 * layer_id + 1
        self.self_attn = InklingAttention(c, layer_id, attn_backend, states, dtype, device)
        self.mlp = InklingMoE(c, dtype, device) if layer_id in ink.sparse_layers else InklingMLP(c, dtype, device)
        self.input_layernorm = param(h, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(h, dtype=dtype, device=device)  # [H]
        self.attn_conv = param(h, ink.conv_kernel, dtype=torch.float32, device=device)  # [H, K]
        self.mlp_conv = param(h, ink.conv_kernel, dtype=torch.float32, device=device)  # [H, K]

    def forward(self, x: torch.Tensor, reqs: list, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        y = self.self_attn(rms_norm(x, self.input_layernorm, self.eps), reqs, fb)  # [T, H]
        x = x + short_conv(self.states, self.conv_index, y, self.attn_conv)
        y = self.mlp(rms_norm(x, self.post_attention_layernorm, self.eps))  # [T, H]
        return x + short_conv(self.states, self.conv_index + 1, y, self.mlp_conv)

    def checkpoint_targets(self, p: str) -> dict:
        t = {p + "input_layernorm.weight": (self.input_layernorm, False),
             p + "post_attention_layernorm.weight": (self.post_attention_layernorm, False),
             p + "attn_sconv.conv1d.weight": (ConvWeight(self.attn_conv), False),
             p + "mlp_sconv.conv1d.weight": (ConvWeight(self.mlp_conv), False)}
        t.update(self.self_attn.checkpoint_targets(p + "self_attn."))
        t.update(self.mlp.checkpoint_targets(p + "mlp."))
        return t


class FirstRows:
    """The load destination of a checkpoint tensor [rows, ...] of which `w` takes the first rows (the unembedding,
    padded to vocab_size)."""

    def __init__(self, w: torch.Tensor, rows: int):
        self.w, self.shape = w, torch.Size((rows, *w.shape[1:]))

    def copy_(self, tensor: torch.Tensor) -> None:
        self.w.copy_(tensor[:self.w.shape[0]])


class InklingForCausalLM(RecurrentStateForCausalLM):
    LAYER_KIND = "Inkling"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        if attn_backend.kv_pool.dtype == torch.float8_e4m3fn:
            raise ValueError(f"{config.architecture}: an fp8_e4m3 KV cache is not supported (its attention reads the "
                             f"pool in the model dtype)")
        super().__init__(config, attn_backend, dtype, device, max_context=1)   # no rope: a one-row cos/sin cache
        self.embed_norm = param(config.hidden_size, dtype=dtype, device=device)  # [H]
        # the head's rows are the logits' (ModelConfig.vocab_size: unpadded_vocab_size); the embedding has its own
        self.embed_tokens = param(config.inkling.embed_rows, config.hidden_size, dtype=dtype, device=device)

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        ink = config.inkling
        width = max([config.hidden_size] + [2 * ink.kv_width(i) for i in range(config.num_layers)])
        return RecurrentStates(3 * ink.kv_layers(config.num_layers), width, ink.conv_kernel, (0,), dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return InklingLayer(self.config, layer_id, attn_backend, self.states, dtype, device)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        reqs = requests_of(fb)
        x = rms_norm(embed(fb.input_ids, self.embed_tokens, self.dtype), self.embed_norm, self.config.rms_norm_eps)
        for layer in self.layers:
            x = layer(x, reqs, fb)  # [T, H]
        return self.final_norm(x)  # [T, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm, divided by logits_mup_width_multiplier (HF divides before its head)."""
        return rms_norm(x, self.norm, self.config.rms_norm_eps) / self.config.inkling.logits_divisor  # [T, H]

    def checkpoint_tensors(self, named_tensors):
        return ((name, t) for name, t in named_tensors if not name.startswith("model.mtp."))

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, name) for name in InklingAttention.LINEARS]
            if isinstance(layer.mlp, InklingMLP):
                swaps += [(layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
        return swaps

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        t["model.embed_tokens.embed_norm.weight"] = (self.embed_norm, False)
        t["lm_head.weight"] = (FirstRows(self.lm_head, self.config.inkling.embed_rows), False)   # HF cuts the logits
        for i, layer in enumerate(self.layers):
            t.update(layer.checkpoint_targets(f"model.layers.{i}."))
        return t
