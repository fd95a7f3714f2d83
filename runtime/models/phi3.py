"""Phi-3 (HF Phi3ForCausalLM): the Llama layer with checkpoints that store qkv_proj and gate_up_proj fused already,
a sliding window on every layer (config.sliding_window, enforced by the attention backend) and LongRoPE
(rope.py: short factors below original_max_position_embeddings, long ones from there).

The model is llama.LlamaForCausalLM (which takes the windows) with its weight names mapped.
"""

from .llama import LlamaForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    """LlamaForCausalLM's contract; layers windowed by config.layer_windows; no tensor parallelism yet."""

    loads_fp8_checkpoints = False  # its checkpoints' fused qkv_proj / gate_up_proj are not in fp8_model's layouts

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError("Phi3ForCausalLM: tensor parallelism is not supported yet")

    def _weight_targets(self) -> dict:
        """HF name -> (destination tensor view, broadcast allowed): q/k/v and gate/up come fused."""
        t = {}
        for name, target in super()._weight_targets().items():
            if ".self_attn.q_proj." in name:
                layer = self.layers[int(name.split(".")[2])]
                t[name.replace("q_proj", "qkv_proj")] = (layer.self_attn.qkv_proj, False)
            elif ".mlp.gate_proj." in name:
                layer = self.layers[int(name.split(".")[2])]
                t[name.replace("gate_proj", "gate_up_proj")] = (layer.mlp.gate_up_proj, False)
            elif not any(f".{part}." in name for part in ("k_proj", "v_proj", "up_proj")):
                t[name] = target
        return t
