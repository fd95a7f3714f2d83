"""Cohere (HF CohereForCausalLM: Command-R): parallel blocks (parallel_block.py) with LayerNorms without bias, Llama's
gated SiLU MLP, optional per-head q/k LayerNorms (use_qk_norm, a weight per head), logits times config.logit_scale,
tied embeddings, and interleaved rotary embeddings (dims 2i and 2i+1 of a head rotate together), run as rotate-half
on q/k rows reordered at load (interleaved_rope.py).

Cohere 2 (Cohere2ForCausalLM: Command R7B, Command A) is the same model without q/k norms, with sliding-window and full
layers (config.layer_windows) where only the sliding ones rotate q and k (config.nope_layers: more_dense_config.py).
"""

from .interleaved_rope import InterleavedRopeWeights
from .parallel_block import ParallelBlockForCausalLM


class CohereForCausalLM(InterleavedRopeWeights, ParallelBlockForCausalLM):
    """ParallelBlockForCausalLM's contract; its checkpoint's q/k rows read in rotate-half order."""
