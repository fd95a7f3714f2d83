"""OPT (HF OPTForCausalLM) on the GPT layers (gpt_layers.py): learned positions whose row for position p is p + 2,
q/k/v/out projections and fc1 -> relu -> fc2 with biases (enable_bias), LayerNorms with biases before each sublayer,
a final LayerNorm, the lm head tied to the embeddings.  Where word_embed_proj_dim E differs from hidden H (OPT-350m)
the embeddings are E wide: project_in [H, E] maps them to the residual stream and project_out [E, H] maps the final
hidden states to the lm head's input.  do_layer_norm_before=False (OPT-350m): each LayerNorm after its sublayer's
residual add, and no final norm.  Checkpoints saved from the bare model name their tensors without "model.".
Notation as in llama.py: T tokens, H hidden, V vocab, E embedding width.
"""

from typing import Optional

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gpt_layers import GptForCausalLM, GptLayer
from .layer_ops import Rotary
from .layers import param
from .packed_linear import linear


class PostNormGptLayer(GptLayer):
    """ln_1(x + attn(x)), then ln_2(x + mlp(x))."""

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = self.input_layernorm(x + self.self_attn(x, rotary, fb))  # [T, H]
        return self.post_attention_layernorm(x + self.mlp(x))  # [T, H]


class OPTForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with OPT's names, its projections and post-norms."""

    PREFIX = "model."
    NAMES = ((r"decoder\.embed_tokens\.", "model.embed_tokens."),
             (r"decoder\.embed_positions\.", "model.embed_positions."),
             (r"decoder\.project_(in|out)\.", r"model.project_\1."), (r"decoder\.final_layer_norm\.", "model.norm."),
             (r"decoder\.layers\.(\d+)\.self_attn_layer_norm\.", r"model.layers.\1.input_layernorm."),
             (r"decoder\.layers\.(\d+)\.final_layer_norm\.", r"model.layers.\1.post_attention_layernorm."),
             (r"decoder\.layers\.(\d+)\.self_attn\.([qkv])_proj\.", r"model.layers.\1.self_attn.\2_proj."),
             (r"decoder\.layers\.(\d+)\.self_attn\.out_proj\.", r"model.layers.\1.self_attn.o_proj."),
             (r"decoder\.layers\.(\d+)\.fc1\.", r"model.layers.\1.mlp.c_fc."),
             (r"decoder\.layers\.(\d+)\.fc2\.", r"model.layers.\1.mlp.c_proj."))

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        H, V, E = config.hidden_size, config.vocab_size, config.gpt.word_embed_dim
        self.project_in = self.project_out = None
        if E is not None:
            self.embed_tokens = param(V, E, dtype=dtype, device=device)  # [V, E]
            self.lm_head = self.embed_tokens if config.tie_word_embeddings else param(V, E, dtype=dtype, device=device)
            self.project_in = param(H, E, dtype=dtype, device=device)  # [H, E]
            self.project_out = param(E, H, dtype=dtype, device=device)  # [E, H]

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        layer_class = PostNormGptLayer if self.config.gpt.post_norm else GptLayer
        return layer_class(self.config, layer_id, attn_backend, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        """project_in's [T, H] of the [T, E] token embeddings, plus the learned positions."""
        if self.project_in is None:
            return super().embed_inputs(fb)  # [T, H]
        tokens = linear(super(GptForCausalLM, self).embed_inputs(fb), self.project_in, None, self.gemm_rows)  # [T, H]
        return tokens + self.position_embeddings(fb)  # [T, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.config.gpt.post_norm else super().final_norm(x)  # [T, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32 (through project_out [N, E] where there is one)."""
        if self.project_out is not None:
            hidden = linear(hidden, self.project_out, None, self.gemm_rows)  # [N, E]
        return super().compute_logits(hidden)  # [N, V]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        if self.project_in is not None:
            t["model.project_in.weight"] = (self.project_in, False)
            t["model.project_out.weight"] = (self.project_out, False)
        if self.config.gpt.post_norm:
            del t["model.norm.weight"], t["model.norm.bias"]
        return t
