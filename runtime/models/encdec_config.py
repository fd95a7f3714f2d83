"""The Hugging Face config fields of GIT's text decoder (GitForCausalLM with no pixel_values) and XLM's causal language
models (XLMWithLMHeadModel, causal=True) served as causal LMs (encdec.py), as ModelConfig fields (family_config.py's
contract), on decoder_config.DecoderLayout.  No torch here.

GIT without an image: word + position embeddings and their LayerNorm, BERT's post-norm layers under a plain causal mask
(HF's image block is empty), and the `output` lm head with its bias (tied only where tie_word_embeddings); its image
encoder and projection are read and dropped.  XLM: the same embeddings (learned or, with sinusoidal_embeddings, its
interleaved sines and cosines where the checkpoint lacks the table), post-norm layers with an MLP of 4 * emb_dim (gelu
or relu), the pred_layer's lm head with its bias.  HF's plain input_ids call passes no langs, so no language
embedding is added (lang_embeddings read and dropped).  HF's XLM counts a prompt's pad tokens and blanks that many
positions at its end (its lengths): a prompt holding pad_token_id is served without that rule.
"""

from typing import Any, Dict

from .decoder_config import DecoderLayout, activation
from .gpt_config import GptLayout

ENCDEC_MODEL_TYPES = {"git": "GitForCausalLM", "xlm": "XLMWithLMHeadModel"}


def _post_norm_decoder(hf_config, act: str, intermediate: int, layout: DecoderLayout) -> Dict[str, Any]:
    n = int(hf_config.num_hidden_layers)
    return dict(nope_layers=tuple(range(n)), rope_params={"rope_type": "default", "rope_theta": 1e4},
                gpt=GptLayout(positions=int(hf_config.max_position_embeddings), post_norm=True), decoder=layout,
                hidden_act=act, intermediate_size=intermediate, rms_norm_eps=float(hf_config.layer_norm_eps),
                attention_bias=True, o_proj_bias=True, mlp_bias=True)


def _git(arch: str, hf_config) -> Dict[str, Any]:
    act = activation(arch, hf_config.hidden_act, "hidden_act")
    layout = DecoderLayout(embed_norm="after_positions", head_act=act)
    return _post_norm_decoder(hf_config, act, int(hf_config.intermediate_size), layout)


def _xlm(arch: str, hf_config) -> Dict[str, Any]:
    if not hf_config.causal:
        raise ValueError(f"{arch}: causal=False runs bidirectional self-attention (a masked LM), not a causal LM")
    if hf_config.asm:
        raise ValueError(f"{arch}: asm=True (an adaptive log-softmax head) is not supported")
    if not getattr(hf_config, "is_encoder", True):
        raise ValueError(f"{arch}: is_encoder=False is not supported (HF builds no XLM decoder)")
    act = "gelu" if hf_config.gelu_activation else "relu"
    layout = DecoderLayout(embed_norm="after_positions", head_act=act,
                           sinusoidal="xlm" if hf_config.sinusoidal_embeddings else "")
    return _post_norm_decoder(hf_config, act, 4 * int(hf_config.emb_dim), layout)


ENCDEC_FIELDS = {"GitForCausalLM": _git, "XLMWithLMHeadModel": _xlm}
