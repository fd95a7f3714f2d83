"""Aria's text model (HF AriaTextForCausalLM): Llama's attention and norms over a SparseMoeBlock (moe.py) on every
layer: Mixtral's routing (a softmax over the top k logits), SiLU-gated experts, and moe_num_shared_experts un-gated
shared experts as one MLP added to them (moe_config._aria_text).

Its checkpoint stores each layer's experts stacked and transposed, experts.fc1.weight [E, H, 2I] (gate columns, then
up) and experts.fc2.weight [E, I, H], and the router as router.weight: read as Qwen's per-expert names.
"""

from typing import Iterable, Tuple

import torch

from .moe_model import MoEForCausalLM


class AriaTextForCausalLM(MoEForCausalLM):
    """MoEForCausalLM's contract on one rank; its checkpoint's experts unstacked at load."""

    loads_gguf_weights = False
    loads_fp8_checkpoints = False

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported")

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        inter = self.config.moe.intermediate_size
        for name, tensor in named_tensors:
            if name.endswith(".mlp.router.weight"):
                yield name.replace(".router.", ".gate."), tensor
            elif name.endswith(".mlp.experts.fc1.weight"):
                prefix = name[:-len("fc1.weight")]
                for e, w in enumerate(tensor):   # [H, 2I]
                    yield prefix + f"{e}.gate_proj.weight", w[:, :inter].t()  # [I, H]
                    yield prefix + f"{e}.up_proj.weight", w[:, inter:].t()  # [I, H]
            elif name.endswith(".mlp.experts.fc2.weight"):
                prefix = name[:-len("fc2.weight")]
                for e, w in enumerate(tensor):   # [I, H]
                    yield prefix + f"{e}.down_proj.weight", w.t()  # [H, I]
            else:
                yield name, tensor
