"""Thinking Machines' Inkling 2 (HF Inkling2ForCausalLM, its text model): Inkling's stack (inkling.py) with block
attention residuals instead of a plain residual stream.  Every n_layers_per_attn_res_block layers the stream's value
becomes a block (a source); each layer reads its attention input (the full layers: one each for q, k and v) and its MLP
input as attention over the blocks so far and its own partial stream, with learned queries over the RMSNormed sources
(no weight, 1e-6); at a block's first layer the partial stream restarts from the attention's output.  The attention is
inkling2_attention.py's, the MLP sigmoid-routed experts of a softcapped SwiGLU (tanh-capped gate factor and up), each
sublayer's output through its short convolution over sqrt(K + 1); a last attention over the blocks, the final norm,
the head of unpadded_vocab_size rows and logits soft-capped at final_logit_softcapping.  Inkling's limits.
Notation: T tokens, H hidden, B blocks so far, E experts, k chosen, I their width, Q learned queries.
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .inkling import FirstRows, InklingForCausalLM
from .inkling2_attention import Inkling2Attention, unit_rms
from .inkling_attention import requests_of, short_conv
from .layer_ops import rms_norm
from .layers import param
from .moe import grouped_experts
from .quant_linear import embed
from .recurrent_state import ConvWeight, RecurrentStates


def block_attention(queries: torch.Tensor, blocks: list, partial: torch.Tensor) -> torch.Tensor:
    """HF Inkling2BlockAttentionResidual: queries [Q, H] over each token's blocks and partial state (RMSNormed, no
    weight), scaled by H ** -0.5, in float32 -> [Q, T, H]."""
    sources = unit_rms(torch.stack(blocks + [partial], dim=1).float(), 1e-6)  # [T, B+1, H]
    scores = torch.einsum("qh,tbh->qtb", queries.float().view(-1, sources.shape[-1]), sources)
    return torch.einsum("qtb,tbh->qth", torch.softmax(scores * sources.shape[-1] ** -0.5, dim=-1), sources)


class Inkling2Experts(nn.Module):
    """HF Inkling2SparseMoeBlock: sigmoid scores (float32 router), the top k by score plus e_score_correction_bias,
    their scores renormalised (1e-20 in the sum) times route_scale; experts of tanh-softcapped gate factor *
    sigmoid(gate) * softcapped up."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        ink = c.inkling
        self.top_k, self.route_scale, self.caps = ink.top_k, ink.route_scale, (ink.gate_softcap, ink.up_softcap)
        self.router = param(ink.experts, c.hidden_size, dtype=torch.float32, device=device)  # [E, H]
        self.correction_bias = param(ink.experts, dtype=torch.float32, device=device)  # [E]
        self.w13 = param(ink.experts, 2 * ink.expert_intermediate, c.hidden_size, dtype=dtype, device=device)
        self.w2 = param(ink.experts, c.hidden_size, ink.expert_intermediate, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = F.linear(x.float(), self.router).sigmoid()  # [T, E]
        chosen = torch.topk(scores + self.correction_bias, self.top_k, dim=-1, sorted=False).indices  # [T, k]
        weights = scores.gather(1, chosen)
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20) * self.route_scale  # [T, k]
        return grouped_experts(x, self.w13, self.w2, weights.to(x.dtype), chosen, act=self.softcapped_swiglu)

    def softcapped_swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        """[n, 2I] -> [n, I]: cap_g tanh(gate / cap_g) * sigmoid(gate) * cap_u tanh(up / cap_u), in float32."""
        gate, up = gate_up.float().chunk(2, dim=-1)
        (cg, cu) = self.caps
        return (torch.tanh(gate / cg) * cg * torch.sigmoid(gate) * torch.tanh(up / cu) * cu).to(gate_up.dtype)

    def checkpoint_targets(self, p: str) -> dict:
        return {p + "gate.weight": (self.router, False), p + "gate.bias": (self.correction_bias, False),
                p + "experts.w13_weight": (Interleaved(self.w13), False), p + "experts.w2_weight": (self.w2, False)}


class Interleaved:
    """The load destination of the checkpoints' w13_weight [E, 2I, H], gate and up rows interleaved: gate | up."""

    def __init__(self, w: torch.Tensor):
        self.w, self.shape = w, w.shape

    def copy_(self, tensor: torch.Tensor) -> None:
        inter = self.w.shape[1] // 2
        self.w[:, :inter].copy_(tensor[:, 0::2])
        self.w[:, inter:].copy_(tensor[:, 1::2])


class Inkling2Layer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, states: RecurrentStates, dtype, device):
        super().__init__()
        ink, h = c.inkling, c.hidden_size
        self.layer_id, self.eps, self.states = layer_id, c.rms_norm_eps, states
        self.message_gates: Optional[nn.Module] = None   # Inkling 2 Loop's looped layers (inkling2_loop.py)
        self.divisor = math.sqrt(ink.conv_kernel + 1)
        self.boundary, self.sliding = layer_id % ink.res_block == 0, layer_id in ink.sliding_layers
        inputs = 1 if self.sliding else 3   # the learned queries of the attention's inputs
        self.attention_queries = (param(inputs, h, dtype=torch.float32, device=device) if layer_id > 0
                                  else None)  # [Q, H]
        self.mlp_query = param(1, h, dtype=torch.float32, device=device)  # [1, H]
        self.self_attn = Inkling2Attention(c, layer_id, attn_backend, states, dtype, device)
        self.mlp = Inkling2Experts(c, dtype, device)
        self.input_norms = param(inputs, h, dtype=dtype, device=device)  # [Q, H]: input (or q, k, v) layernorms
        self.post_attention_layernorm = param(h, dtype=dtype, device=device)  # [H]
        self.attn_conv = param(h, ink.conv_kernel, dtype=torch.float32, device=device)  # [H, K]
        self.mlp_conv = param(h, ink.conv_kernel, dtype=torch.float32, device=device)  # [H, K]

    def forward(self, x: torch.Tensor, blocks: list, reqs: list, fb: ForwardBatch, slot: Optional[int] = None,
                messages: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x: [T, H] the stream, blocks: the blocks so far ([T, H] each) -> [T, H].  slot: the KV layer (3 * slot...:
        the convolution states) of this run, the layer's own by default (Inkling 2 Loop: a loop pass's);
        messages [4, T, H]: a loop pass's for the q, k, v and MLP inputs (message_gates), or None."""
        slot = self.layer_id if slot is None else slot
        dtype, n = x.dtype, self.input_norms.shape[0]
        inputs = [x] * n if self.attention_queries is None else block_attention(self.attention_queries, blocks, x)
        inputs = [inputs[0]] * 3 if n == 1 else list(inputs)   # a sliding layer's one input serves q, k and v
        if messages is not None:
            inputs = [self.message_gates(i, inputs[i], messages[i]) for i in range(3)]
        q_in, k_in, v_in = (rms_norm(inputs[i], self.input_norms[min(i, n - 1)], self.eps).to(dtype) for i in range(3))
        y = self.self_attn(q_in, k_in, v_in, reqs, fb, slot)  # [T, H]
        stream = short_conv(self.states, 3 * slot + 1, y, self.attn_conv, self.divisor).float()
        if self.boundary:
            blocks = blocks + [x]
        else:
            stream = x.float() + stream
        y = block_attention(self.mlp_query, blocks, stream)[0]  # [T, H]
        if messages is not None:
            y = self.message_gates(3, y, messages[3])
        y = self.mlp(rms_norm(y, self.post_attention_layernorm, self.eps).to(dtype))
        y = short_conv(self.states, 3 * slot + 2, y, self.mlp_conv, self.divisor)
        return (stream + y.float()).to(dtype)

    def checkpoint_targets(self, p: str, layer_id: int) -> dict:
        """Checkpoint name -> (destination, broadcast): the layer's under p ("model.llm.layers.{i}.") and its
        attention-residual queries."""
        norms = ("attn_norm",) if self.sliding else ("q_input_norm", "k_input_norm", "v_input_norm")
        t = {p + f"{name}.weight": (self.input_norms[i], False) for i, name in enumerate(norms)}
        t.update({p + "mlp_norm.weight": (self.post_attention_layernorm, False),
                  p + "attn_sconv.weight": (ConvWeight(self.attn_conv), False),
                  p + "mlp_sconv.weight": (ConvWeight(self.mlp_conv), False),
                  f"model.llm.attn_res.mlp_queries.{layer_id}": (self.mlp_query[0], False)})
        if self.attention_queries is not None:
            queries = self.attention_queries
            t[f"model.llm.attn_res.attn_queries.{layer_id - 1}"] = (queries[0] if self.sliding else queries, False)
        t.update(self.self_attn.checkpoint_targets(p + "attn."))
        t.update(self.mlp.checkpoint_targets(p + "mlp."))
        return t


class Inkling2ForCausalLM(InklingForCausalLM):
    LAYER_KIND = "Inkling 2"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.final_query = param(1, config.hidden_size, dtype=torch.float32, device=device)  # [1, H]

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return Inkling2Layer(self.config, layer_id, attn_backend, self.states, dtype, device)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        reqs, eps = requests_of(fb), self.config.rms_norm_eps
        x = rms_norm(embed(fb.input_ids, self.embed_tokens, self.dtype), self.embed_norm, eps)  # [T, H]
        blocks = []
        for layer in self.layers:
            out = layer(x, blocks, reqs, fb)  # [T, H]
            if layer.boundary:   # the layer's input starts a block
                blocks = blocks + [x]
            x = out
        return rms_norm(block_attention(self.final_query, blocks, x)[0], self.norm, eps).to(self.dtype)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, name) for name in layer.self_attn.LINEARS]
        return swaps

    def _weight_targets(self) -> dict:
        """The checkpoints' own names (HF renames them at load): model.llm.{embed, embed_norm, norm, unembed, layers,
        attn_res}."""
        c = self.config
        t = {"model.llm.embed.weight": (self.embed_tokens, False),
             "model.llm.embed_norm.weight": (self.embed_norm, False), "model.llm.norm.weight": (self.norm, False),
             "model.llm.attn_res.output_query": (self.final_query[0], False),
             "model.llm.unembed.weight": (FirstRows(self.lm_head, c.inkling.embed_rows), False)}
        for i, layer in enumerate(self.layers):
            t.update(layer.checkpoint_targets(f"model.llm.layers.{i}.", i))
        return t
