"""X-MOD (HF XmodForCausalLM, is_decoder=True) on the BERT-like decoder (bert_decoder.py, RoBERTa's positions and head):
each layer's MLP block followed by the bottleneck adapter of the config's default_language (dense1 -> act -> dense2)
on the block's LayerNorm, reused: y = LN(x + mlp(x)), then LN(y + adapter(y)) (ln_before_adapter; else the
adapter's residual is x + mlp(x) before its norm).  The other languages' adapters are read and dropped.
Notation as in llama.py: T tokens, H hidden, B the adapter's bottleneck.
"""

import re
from typing import Optional

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .bert_decoder import LAYER_NAMES, BertDecoderForCausalLM
from .gpt_layers import ACTIVATIONS
from .layer_ops import Rotary
from .layers import param
from .opt import PostNormGptLayer
from .packed_linear import linear


class XmodLayer(PostNormGptLayer):
    """BERT's post-norm layer with the language adapter after its MLP block."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        H, (_, B, self.ln_before_adapter) = c.hidden_size, c.decoder.xmod_adapter
        self.adapter = (param(B, H, dtype=dtype, device=device), param(B, dtype=dtype, device=device),
                        param(H, B, dtype=dtype, device=device), param(H, dtype=dtype, device=device))
        self.act = ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = self.input_layernorm(x + self.self_attn(x, rotary, fb))  # [T, H]
        h = x + self.mlp(x)  # [T, H]
        y = self.post_attention_layernorm(h)  # [T, H]
        w1, b1, w2, b2 = self.adapter
        adapted = linear(self.act(linear(y, w1, b1)), w2, b2)  # [T, H]
        return self.post_attention_layernorm(adapted + (y if self.ln_before_adapter else h))  # [T, H]


class XmodDecoderForCausalLM(BertDecoderForCausalLM):
    """The BERT-like decoder with X-MOD's layers; the default language's adapters loaded."""

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        language = re.escape(config.decoder.xmod_adapter[0])
        self.NAMES = ((rf"encoder\.layer\.(\d+)\.output\.adapter_modules\.{language}\.", r"model.layers.\1.adapter."),
                      *LAYER_NAMES)
        other_languages = rf"encoder\.layer\.\d+\.output\.adapter_modules\.(?!{language}\.).*"
        self.SKIPPED = f"{BertDecoderForCausalLM.SKIPPED}|{other_languages}"
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return XmodLayer(self.config, layer_id, attn_backend, dtype, device)

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            names = [f"model.layers.{i}.adapter.dense{n}.{kind}" for n in (1, 2) for kind in ("weight", "bias")]
            t.update({name: (p, False) for name, p in zip(names, layer.adapter)})
        return t
