"""IBM Granite 3 MoE (HF GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM): Granite's Llama layer (its four
multipliers: family_config._granite) with a SparseMoeBlock in every layer (Mixtral's routing: the top k of the
router logits, weighted by a softmax over those k) and, in GraniteMoeShared, an un-gated shared SwiGLU MLP.

Checkpoint layout (the hub's, and transformers 5's save_pretrained): per layer block_sparse_moe.router.layer.weight
[E, H], block_sparse_moe.input_linear.weight [E, 2I, H] (gate rows, then up: HF chunks it in two),
block_sparse_moe.output_linear.weight [E, H, I], shared_mlp.input_linear.weight [2S, H] (gate, then up) and
shared_mlp.output_linear.weight [H, S]; transformers 5's names (GraniteMoeSWA's checkpoints) are
block_sparse_moe.router.weight, experts.gate_up_proj and experts.down_proj in the same layouts.  checkpoint_tensors
renames them to the Qwen/DeepSeek names (mlp.gate, mlp.experts.{e}.{gate,up,down}_proj, mlp.shared_experts.*), one
tensor per expert, so that tensor and expert parallelism (runtime/distributed/sharding.py) shard them as any other
family's; a converted stream passes unchanged.
Notation: E experts, H hidden, I expert width, S shared width.
"""

from typing import Iterable, Tuple

import torch

from .moe_model import MoEForCausalLM


class GraniteMoeForCausalLM(MoEForCausalLM):
    """MoEForCausalLM's contract; HF's fused expert tensors split per expert at load."""

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        return (pair for name, t in named_tensors for pair in _our_names(name, t))


def _our_names(name: str, t: torch.Tensor):
    """One Granite MoE checkpoint tensor -> (name, tensor) pairs in the Qwen/DeepSeek names."""
    prefix, sep, leaf = name.partition(".block_sparse_moe.")
    if sep:
        mlp = prefix + ".mlp."
        if leaf in ("router.layer.weight", "router.weight"):   # the second: transformers 5's names (GraniteMoeSWA's)
            yield mlp + "gate.weight", t                                         # [E, H]
        elif leaf in ("input_linear.weight", "experts.gate_up_proj"):
            gates, ups = t.chunk(2, dim=1)                                       # [E, I, H] each
            for e in range(t.shape[0]):
                yield mlp + f"experts.{e}.gate_proj.weight", gates[e]            # [I, H]
                yield mlp + f"experts.{e}.up_proj.weight", ups[e]                # [I, H]
        elif leaf in ("output_linear.weight", "experts.down_proj"):
            for e, down in enumerate(t):
                yield mlp + f"experts.{e}.down_proj.weight", down                # [H, I]
        else:
            yield name, t
        return
    prefix, sep, leaf = name.partition(".shared_mlp.")
    if sep and leaf == "input_linear.weight":
        gate, up = t.chunk(2, dim=0)                                             # [S, H] each
        yield prefix + ".mlp.shared_experts.gate_proj.weight", gate
        yield prefix + ".mlp.shared_experts.up_proj.weight", up
    elif sep and leaf == "output_linear.weight":
        yield prefix + ".mlp.shared_experts.down_proj.weight", t                 # [H, S]
    else:
        yield name, t
