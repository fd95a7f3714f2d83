"""The base of the classic GPT families (gpt2.py: GPT-2, GPT-BigCode; gpt_neox.py: GPT-NeoX, GPT-J; opt.py: OPT):
StarCoder2's LayerNorm layers (starcoder2.py: the Llama attention, a non-gated MLP c_proj(act(c_fc(x)))) with the
activation of config.hidden_act, learned absolute position embeddings added to the token embeddings
(config.gpt.positions rows, the row of position p at p + position_offset) where there is no rotary embedding, an lm
head with an optional bias, and each checkpoint's names read as Llama's (rename: one HF tensor -> our (name, tensor)
pairs).  Fused q/k/v projections are split into q_proj, k_proj and v_proj at load (split_qkv).

No tensor parallelism, native one-call decode, GGUF weights kept quantized or FP8 checkpoints (own_layers.py).
Notation as in llama.py: T tokens, H hidden, I intermediate, Hq/Hkv heads, D head_dim, V vocab, P positions.
"""

import re
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layers import param
from .packed_linear import linear
from .starcoder2 import Starcoder2DecoderLayer, Starcoder2ForCausalLM, Starcoder2MLP

ACTIVATIONS = {"gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu, "relu": F.relu,
               "relu2": lambda x: F.relu(x).square(), "silu": F.silu}


class GptMLP(Starcoder2MLP):
    """c_proj(act(c_fc(x))), biases where config.mlp_bias; act: config.hidden_act (gpt_config._ACTIVATIONS)."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__(c, dtype, device)
        self.act = ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        h = self.act(linear(x, self.c_fc, self.c_fc_bias, self.gemm_rows))  # [T, I]
        return linear(h, self.c_proj, self.c_proj_bias, self.gemm_rows)  # [T, H]


class GptLayer(Starcoder2DecoderLayer):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    mlp_class = GptMLP


def rename_with(table, name: str):
    """`name` through the first (pattern, replacement) of `table` that matches its start, else None."""
    for pattern, replacement in table:
        if re.match(pattern, name):
            return re.sub("^" + pattern, replacement, name)
    return None


def split_qkv(name: str, tensor: torch.Tensor, c: ModelConfig, per_head: bool = False) -> list:
    """A fused "<prefix>.qkv.weight" [(Hq+2Hkv)*D, H] (or its bias) -> [(q_proj's name, rows), (k_proj's ...), (v_proj's
    ...)].  per_head: the checkpoint keeps each head's q, k and v rows together ([Hq, 3, D]: GPT-NeoX, multi-head
    GPT-BigCode), regrouped here into all q rows, then k, then v."""
    if per_head:
        tensor = tensor.unflatten(0, (c.num_heads, 3, c.head_dim)).transpose(0, 1).flatten(0, 2)  # [3*Hq*D, ...]
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    parts = tensor.split([q, kv, kv])
    return [(name.replace(".qkv.", f".{p}_proj."), t) for p, t in zip("qkv", parts)]


class GptForCausalLM(Starcoder2ForCausalLM):
    """LayerNormForCausalLM's contract with GPT layers (make_layer), learned positions where config.gpt.positions, an
    lm head bias where LM_HEAD_BIAS; subclasses give rename."""

    LM_HEAD_BIAS = False
    LAYER_KIND = "GPT"
    NAMES = ()          # (pattern, replacement): a checkpoint name without PREFIX -> ours (\1: the layer)
    PREFIX = ""         # the model's own prefix, absent where the checkpoint was saved from the bare model
    SKIPPED = None      # the names (without PREFIX) of buffers HF saved: causal masks, rotary frequencies
    PER_HEAD_QKV = False   # split_qkv's per_head

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        H, V, layout = config.hidden_size, config.vocab_size, config.gpt
        self.embed_positions = (param(layout.positions, H, dtype=dtype, device=device)
                                if layout is not None and layout.positions else None)  # [P, H]
        self.lm_head_bias = param(V, dtype=dtype, device=device) if self.LM_HEAD_BIAS else None  # [V]

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return GptLayer(self.config, layer_id, attn_backend, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        """Token embeddings plus each position's learned embedding: [T, H].  ValueError past the table."""
        x = super().embed_inputs(fb)  # [T, H]
        return x if self.embed_positions is None else x + self.position_embeddings(fb)  # [T, H]

    def position_embeddings(self, fb: ForwardBatch) -> torch.Tensor:
        """Each token's learned position embedding [T, H].  ValueError for a position past the table."""
        rows = fb.positions + self.config.gpt.position_offset  # [T]
        if rows.device.type == "cpu" and rows.numel() and int(rows.max()) >= self.embed_positions.shape[0]:
            raise ValueError(f"position {int(fb.positions.max())} is beyond {self.config.architecture}'s learned "
                             f"positions ({self.config.context_length})")
        return self.embed_positions[rows]  # [T, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32, with the lm head's bias where it has one."""
        return linear(hidden, self.lm_head, self.lm_head_bias, self.gemm_rows).float()  # [N, V]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        if self.embed_positions is not None:
            t["model.embed_positions.weight"] = (self.embed_positions, False)
        if self.lm_head_bias is not None:
            t["lm_head.bias"] = (self.lm_head_bias, False)
        return t

    def rename(self, name: str, tensor: torch.Tensor) -> list:
        """One checkpoint tensor -> [(our name, tensor)]: none for a buffer HF saved (SKIPPED), the name unchanged where
        NAMES has no match (load_weights then reports it)."""
        if name.startswith("lm_head."):
            return [(name, tensor)]
        name = name.removeprefix(self.PREFIX)
        if self.SKIPPED is not None and re.fullmatch(self.SKIPPED, name):
            return []
        ours = rename_with(self.NAMES, name)
        return [(name, tensor)] if ours is None else self.convert(ours, tensor)

    def convert(self, name: str, tensor: torch.Tensor) -> list:
        """Our name and the checkpoint's tensor -> [(name, tensor)] in our layout: a fused "qkv" split (split_qkv)."""
        if ".qkv." in name:
            return split_qkv(name, tensor, self.config, per_head=self.PER_HEAD_QKV)
        return [(name, tensor)]

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream in Llama's names and layouts."""
        for name, tensor in named_tensors:
            yield from self.rename(name, tensor)

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """LlamaForCausalLM.load_weights on checkpoint_tensors(named_tensors)."""
        super().load_weights(self.checkpoint_tensors(named_tensors))
