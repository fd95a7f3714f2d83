"""HRM-Text's fields (HF HrmTextForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch here.

Two stacks of num_layers_per_stack Llama layers (L and H) run in cycles: H_cycles times, L_cycles runs of the L stack
on z_L + z_H, then one of the H stack on z_H + z_L; each run of each layer has its own KV (the checkpoint's
num_hidden_layers: num_layers_per_stack * H_cycles * (L_cycles + 1) slots).  Multi-head attention (no K/V groups) with
a sigmoid gate on every output channel; the embeddings times embedding_scale.  HF's prefix-LM mask applies only to
token_type_ids, which a text prompt does not have: every token attends causally, as HF runs a prompt without them.
"""

from dataclasses import dataclass
from typing import Any, Dict


@dataclass(frozen=True)
class HrmCycles:
    """layers_per_stack: the layers of each stack; high_cycles, low_cycles: H_cycles and L_cycles."""

    layers_per_stack: int
    high_cycles: int
    low_cycles: int

    @property
    def slots(self) -> int:
        """The KV layers: one per run of each layer."""
        return self.layers_per_stack * self.high_cycles * (self.low_cycles + 1)

    def slot(self, high: int, low: int) -> int:
        """The first KV layer of the run at high cycle `high`, low cycle `low` (low_cycles: the H stack's run)."""
        return (high * (self.low_cycles + 1) + low) * self.layers_per_stack


def _hrm_text(arch: str, hf_config) -> Dict[str, Any]:
    cycles = HrmCycles(int(hf_config.num_layers_per_stack), int(hf_config.H_cycles), int(hf_config.L_cycles))
    if min(cycles.layers_per_stack, cycles.high_cycles, cycles.low_cycles) < 1:
        raise ValueError(f"{arch}: num_layers_per_stack, H_cycles and L_cycles must be at least 1, got {cycles}")
    if cycles.slots != int(hf_config.num_hidden_layers):
        raise ValueError(f"{arch}: num_hidden_layers {hf_config.num_hidden_layers} must be num_layers_per_stack * "
                         f"H_cycles * (L_cycles + 1) = {cycles.slots}")
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(hrm=cycles, num_kv_heads=int(hf_config.num_attention_heads), attention_bias=bias, o_proj_bias=bias,
                mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
                embedding_multiplier=float(hf_config.embedding_scale))


HRM_TEXT_FIELDS = {"HrmTextForCausalLM": _hrm_text}
HRM_TEXT_MODEL_TYPES = {"hrm_text": "HrmTextForCausalLM"}
