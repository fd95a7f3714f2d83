"""The base of the families whose layers are their own (OLMo 2/3, EXAONE 4, GLM-4, StarCoder2, StableLM, Phi, Cohere): Llama's
weights, loading and logits around a stack of modules layer(x, rotary, fb) -> x over the residual stream, which run op
by op (the one-call native decode has Llama's layer only) on one rank."""

from typing import Optional

import torch

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .llama import LlamaForCausalLM
from .quant_linear import embed


class OwnLayersForCausalLM(LlamaForCausalLM):
    """LlamaForCausalLM's contract; subclasses give make_layer (x [T, H] -> [T, H]) and final_norm."""

    loads_gguf_weights = False  # gguf_weights.py maps the Llama layer's names only
    LAYER_KIND = "own"          # in the reason the native one-call decode is off
    TP_REASON = ""              # why tensor parallelism is refused, beyond "not supported"

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.attn_backend.init_forward_metadata(fb)
        x = self.embed_inputs(fb)  # [T, H]
        for layer, rotary in zip(self.layers, self.layer_rotaries(fb.positions)):
            x = layer(x, rotary, fb)  # [T, H]
        return self.final_norm(x)  # [T, H]

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        """The token embeddings [T, H] the first layer reads, times embedding_multiplier (MiniCPM3's scale_emb;
        gpt_layers.py: plus learned positions)."""
        x = embed(fb.input_ids, self.embed_tokens, self.dtype)  # [T, H]
        return x if self.config.embedding_multiplier == 1.0 else x * self.config.embedding_multiplier  # [T, H]

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        """Each layer's Rotary (olmo3.py: the sliding layers' own)."""
        return [Rotary(positions, self.cos_sin)] * len(self.layers)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _own_attention_targets(self) -> dict:
        """_weight_targets where each layer's attention names its own weights (checkpoint_targets(prefix)): the outer
        weights, then each layer's norms, attention and MLP."""
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t.update(self._norm_targets(p, layer))
            t.update(layer.self_attn.checkpoint_targets(p + "self_attn."))
            t.update(self._mlp_targets(i, layer.mlp))
        return t

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported{self.TP_REASON}")

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return f"{self.config.architecture}'s {self.LAYER_KIND} layers are not in the native one-call decode"
