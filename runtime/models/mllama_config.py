"""Llama 3.2 Vision's text fields (HF MllamaForCausalLM / MllamaTextConfig, and the language model of
MllamaForConditionalGeneration: multimodal_text.py), as ModelConfig fields (family_config.py's contract).  No torch.

Its layers are Llama's, but those in cross_attention_layers attend to the image: with no image, HF's text model skips
them (no cross-attention states, none cached), so a text prompt runs the other layers alone.  Those are ours:
num_layers counts them, the KV pool holds them only, and self_attention_layers names each one's index in the
checkpoint (mllama.py renumbers its weights).  HF's attention heads are hidden_size / num_attention_heads whatever a
head_dim says (its rotary would read one: refused), and it never ties the lm head to the embeddings (its embedding
has 8 rows past the vocabulary, image tokens, which no text prompt holds: dropped at load).
"""

from typing import Any, Dict


def _mllama(arch: str, hf_config) -> Dict[str, Any]:
    n = int(hf_config.num_hidden_layers)
    cross = {int(i) for i in (hf_config.cross_attention_layers or ())}
    if not cross <= set(range(n)):
        raise ValueError(f"{arch}: cross_attention_layers {sorted(cross)} must be layers of the {n}")
    if len(cross) == n:
        raise ValueError(f"{arch}: every layer is a cross-attention layer; a text prompt would run none")
    head_dim = hf_config.hidden_size // hf_config.num_attention_heads
    if getattr(hf_config, "head_dim", None) not in (None, head_dim):
        raise ValueError(f"{arch}: head_dim {hf_config.head_dim} other than hidden_size / num_attention_heads is not "
                         "supported (HF's attention ignores it, its rotary does not)")
    layers = tuple(i for i in range(n) if i not in cross)
    return dict(num_layers=len(layers), head_dim=head_dim, self_attention_layers=layers)


MLLAMA_FIELDS = {"MllamaForCausalLM": _mllama}
MLLAMA_MODEL_TYPES = {"mllama_text_model": "MllamaForCausalLM"}
