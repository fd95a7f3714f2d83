"""Gemma 4, text (HF Gemma4ForCausalLM; Gemma4ForConditionalGeneration's language model through multimodal_text.py).

The decoder layers are gemma4_layers.py's; the fields per layer gemma4_config.py's.  Around them: embeddings scaled by
sqrt(H) in the model dtype; the per-layer inputs (hidden_size_per_layer_input P > 0): each token's row of
embed_tokens_per_layer [Vp, L*P] times sqrt(P), plus per_layer_model_projection of the scaled embeddings times
H ** -0.5, RMSNormed per layer (per_layer_projection_norm), the sum times 2 ** -0.5, layer i reading slice i; a rope
table per (layer type, head dim): "default" turns every pair, "proportional" the first pairs of each half at
HF's frequencies (base ** (-2j / d)), the others by 0; the final norm, the tied lm head and the logits' soft-cap.
Layers that reuse an earlier layer's KV store nothing: the pool has ModelConfig.kv_layers layers.

Refused (gemma4_config.py, ValueError naming the field): bidirectional attention ("all"), attention biases, rope types
other than default and proportional, KV sharing by all layers or without an earlier layer of the type.  No tensor
parallelism, FP8 or GGUF weights, no native one-call decode: every step runs op by op.
Notation: T tokens, H hidden, L layers, P per-layer input width, V vocab.
"""

import math
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gemma2 import Gemma2ForCausalLM
from .gemma4_layers import Gemma4DecoderLayer, rms_norm
from .layer_ops import Rotary
from .layers import pack_linears, param
from .packed_linear import linear


def rope_table(theta: float, pairs: int, factor: float, head_dim: int, length: int) -> torch.Tensor:
    """[length, d] float32 (cos in [:, :d/2], sin in [:, d/2:]): pair j turns by position * base ** (-2j / d) / factor
    for j < pairs, by 0 after (HF's default rope where pairs = d/2, its proportional rope otherwise)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, 2 * pairs, 2, dtype=torch.int64).float() / head_dim)  # [pairs]
    inv_freq = torch.cat((inv_freq, torch.zeros(head_dim // 2 - pairs))) / factor  # [d/2]
    freqs = torch.outer(torch.arange(length, dtype=torch.int64).float(), inv_freq)  # [C, d/2]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # [C, d]


class Gemma4ForCausalLM(nn.Module):
    """forward(fb) -> final-normed hidden states [T, H]; compute_logits(hidden [N, H]) -> [N, V] float32.

    The same contract as llama.LlamaForCausalLM (positions < max_context, load_weights before use, forward mutates the
    KV pool's first kv_layers layers)."""

    loads_gguf_weights = False
    quantizes_to_fp8 = False
    compute_logits = Gemma2ForCausalLM.compute_logits
    enable_tensor_parallel = Gemma2ForCausalLM.enable_tensor_parallel
    enable_native_decode = Gemma2ForCausalLM.enable_native_decode

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__()
        c, g = config, config.gemma4
        self.config, self.attn_backend, self.dtype = c, attn_backend, dtype
        attn_backend.set_layer_variants(c.layer_windows or [None] * c.num_layers)
        self.embed_tokens = param(c.vocab_size, c.hidden_size, dtype=dtype, device=device)  # [V, H]
        self.register_buffer("placeholders", torch.tensor(c.placeholders_as_pad[1:], dtype=torch.long, device=device),
                             persistent=False)  # [N]: read as the pad (text_ids)
        self.layers = nn.ModuleList(self.make_layer(c, i, attn_backend, dtype, device) for i in range(c.num_layers))
        self.norm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.lm_head = (self.embed_tokens if c.tie_word_embeddings
                        else param(c.vocab_size, c.hidden_size, dtype=dtype, device=device))  # [V, H]
        p, width = g.per_layer_input, c.num_layers * g.per_layer_input
        self.embed_tokens_per_layer = param(g.per_layer_vocab, width, dtype=dtype, device=device) if p else None
        self.per_layer_model_projection = param(width, c.hidden_size, dtype=dtype, device=device) if p else None
        self.per_layer_projection_norm = param(p, dtype=dtype, device=device) if p else None  # [P]
        length, self.rope_of_layer, tables = max_context or c.context_length, [], {}
        for rope, head_dim in zip(g.rope, g.head_dims):
            key = (*rope, head_dim)
            if key not in tables:
                tables[key] = f"cos_sin_{len(tables)}"
                self.register_buffer(tables[key], rope_table(*key, length).to(device=device, dtype=dtype),
                                     persistent=False)  # [C, d]
            self.rope_of_layer.append(tables[key])
        self.embed_scale = torch.tensor(math.sqrt(c.hidden_size), dtype=dtype).item()  # sqrt(H) in the model dtype
        self.per_layer_embed_scale = torch.tensor(math.sqrt(p), dtype=dtype).item() if p else None
        self.gemm_rows: Optional[int] = None
        self.tp = None
        self.native_decode = None

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.attn_backend.init_forward_metadata(fb)
        input_ids = self.text_ids(fb.input_ids)  # [T]
        x = self.embed(input_ids)  # [T, H]
        per_layer = self.per_layer_inputs(input_ids, x)  # [T, L, P] or None
        rotaries = {name: Rotary(fb.positions, getattr(self, name)) for name in set(self.rope_of_layer)}
        return rms_norm(self.run_layers(x, per_layer, rotaries, fb), self.norm, self.config.rms_norm_eps)  # [T, H]

    def text_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [T] with a multimodal checkpoint's image/video/audio placeholders the pad id, as HF's text path."""
        if not self.config.placeholders_as_pad:
            return input_ids
        return torch.where(torch.isin(input_ids, self.placeholders), self.config.placeholders_as_pad[0], input_ids)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [T] -> the scaled embeddings [T, H]."""
        return F.embedding(input_ids, self.embed_tokens) * self.embed_scale

    def make_layer(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return Gemma4DecoderLayer(c, layer_id, attn_backend, dtype, device)

    def run_layers(self, x: torch.Tensor, per_layer: Optional[torch.Tensor], rotaries: dict,
                   fb: ForwardBatch) -> torch.Tensor:
        """The scaled embeddings x [T, H], the per-layer inputs [T, L, P] or None -> the last layer's output [T, H]."""
        for i, layer in enumerate(self.layers):
            x = layer(x, None if per_layer is None else per_layer[:, i], rotaries[self.rope_of_layer[i]], fb)  # [T, H]
        return x

    def per_layer_inputs(self, input_ids: torch.Tensor, x: torch.Tensor) -> Optional[torch.Tensor]:
        """input_ids [T], the scaled embeddings x [T, H] -> each layer's input [T, L, P] (None without them)."""
        if self.embed_tokens_per_layer is None:
            return None
        T, L = x.shape[0], len(self.layers)
        input_ids = torch.where(input_ids < self.embed_tokens_per_layer.shape[0], input_ids, 0)  # past its vocab: row 0
        tokens = (F.embedding(input_ids, self.embed_tokens_per_layer) * self.per_layer_embed_scale).view(T, L, -1)
        context = linear(x, self.per_layer_model_projection, None, self.gemm_rows) * self.config.hidden_size ** -0.5
        context = rms_norm(context.view(T, L, -1), self.per_layer_projection_norm, self.config.rms_norm_eps)
        return (context + tokens) * 2.0 ** -0.5  # [T, L, P]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        """Every linear layer and the lm head as GEMMs of gemm_rows rows (see LlamaForCausalLM); refused with experts,
        as MoEForCausalLM refuses it."""
        if self.config.gemma4.num_experts:
            raise ValueError("--deterministic does not support mixture-of-experts models yet")
        self.gemm_rows = gemm_rows
        for layer in self.layers:
            layer.gemm_rows = layer.self_attn.gemm_rows = layer.mlp.gemm_rows = gemm_rows

    def pack_weights(self, rows_pack: bool = False, amx_pack: bool = False) -> bool:
        """The attention and MLP weights and the lm head packed for the CPU GEMM (see LlamaForCausalLM.pack_weights);
        the experts, the per-layer inputs' and the router's stay dense."""
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj"),
                      (layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
        return pack_linears(swaps, self.dtype, self.embed_tokens.device, rows_pack, amx_pack)

    def _weight_targets(self) -> dict:
        """HF name -> destination tensor view."""
        t = {"model.embed_tokens.weight": self.embed_tokens, "model.norm.weight": self.norm}
        if not self.config.tie_word_embeddings:
            t["lm_head.weight"] = self.lm_head
        if self.embed_tokens_per_layer is not None:
            t.update({"model.embed_tokens_per_layer.weight": self.embed_tokens_per_layer,
                      "model.per_layer_model_projection.weight": self.per_layer_model_projection,
                      "model.per_layer_projection_norm.weight": self.per_layer_projection_norm})
        for i, layer in enumerate(self.layers):
            t.update(layer.checkpoint_targets(f"model.layers.{i}."))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Gemma2ForCausalLM.load_weights over the checkpoint, less the KV projections and norms that checkpoints may
        keep for the layers reusing an earlier layer's KV (HF ignores them too)."""
        unused = {f"model.layers.{i}.self_attn.{name}.weight" for i, layer in enumerate(self.layers)
                  if layer.self_attn.reuses_kv for name in ("k_proj", "v_proj", "k_norm", "v_norm")}
        Gemma2ForCausalLM.load_weights(self, ((n, w) for n, w in named_tensors if n not in unused))
