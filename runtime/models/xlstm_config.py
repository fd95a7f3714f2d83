"""xLSTM's fields (no torch; HF xLSTMForCausalLM, the native kernels' mLSTM blocks).  No attention: each layer is
x + mlstm(rmsnorm(x)), then x + ffn(rmsnorm(x)).  The mLSTM (xlstm.py) projects q, k (int(hidden_size x
qk_dim_factor) wide) and v and the output gate (int(hidden_size x v_dim_factor)) into num_heads heads, and a scalar
input and forget gate per head (always with biases, soft-capped at gate_soft_cap); its matrix memory per head is each
request row's state.  The FFN is SwiGLU of hidden_size x ffn_proj_factor rounded up to ffn_round_up_to_multiple_of;
logits are soft-capped at output_logit_soft_cap.  weight_mode "single" only: HF 5.25 cannot build a "fused" model.
A request may reach XLSTM_CONTEXT positions (the configs name no limit).
"""

import dataclasses
import math
from dataclasses import dataclass

from .mamba_stack_config import FieldsView

XLSTM_ARCHITECTURES = ("xLSTMForCausalLM",)
XLSTM_MODEL_TYPES = {"xlstm": "xLSTMForCausalLM"}
XLSTM_CONTEXT = 65536


@dataclass(frozen=True)
class XlstmLayout:
    recurrent_layers: tuple   # every layer: each keeps its heads' matrix memories per request row
    heads: int
    qk_dim: int               # q and k, all heads
    v_dim: int                # v and the output gate, all heads
    gate_soft_cap: float
    eps: float                # the mLSTM's denominator epsilon (the norms' is rms_norm_eps)
    use_bias: bool            # on every projection but the gates' (which always have one) and the norms


def _ffn_width(hf) -> int:
    multiple = int(hf.ffn_round_up_to_multiple_of)
    return int(math.ceil(hf.hidden_size * hf.ffn_proj_factor / multiple) * multiple)


def xlstm_fields(hf_config) -> FieldsView:
    """hf_config as from_hf reads it: no attention heads, no position limit, the FFN's width, norm_eps."""
    return FieldsView(hf_config, dict(
        num_attention_heads=1, num_key_value_heads=1, head_dim=2, max_position_embeddings=XLSTM_CONTEXT,
        rope_parameters=None, rope_scaling=None, sliding_window=None, attention_bias=False, mlp_bias=False,
        hidden_act="silu", rms_norm_eps=float(hf_config.norm_eps), intermediate_size=_ffn_width(hf_config)))


def with_xlstm(config, view):
    """ModelConfig `config` of an xLSTM with its layout; ValueError naming the field it cannot run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    for field, allowed in (("mode", ("inference",)), ("inference_state_dtype", ("float32",)),
                           ("weight_mode", ("single",))):
        if getattr(hf, field) not in allowed:
            raise ValueError(f"{arch}: {field} {getattr(hf, field)!r} is not supported ({', '.join(allowed)})")
    heads, qk, v = int(hf.num_heads), int(hf.hidden_size * hf.qk_dim_factor), int(hf.hidden_size * hf.v_dim_factor)
    if qk % 64 or v % 64:   # HF's cache is sized for widths rounded up to 64, its layers' are not
        raise ValueError(f"{arch}: hidden_size x qk_dim_factor and x v_dim_factor must be multiples of 64, got {qk} "
                         f"and {v}")
    if qk % heads or v % heads:
        raise ValueError(f"{arch}: num_heads {heads} must divide the q/k width {qk} and the v width {v}")
    if int(getattr(hf, "embedding_dim", None) or hf.hidden_size) != config.hidden_size:
        raise ValueError(f"{arch}: embedding_dim must equal hidden_size, got {hf.embedding_dim}")
    cap = hf.gate_soft_cap
    layout = XlstmLayout(recurrent_layers=tuple(range(n)), heads=heads, qk_dim=qk, v_dim=v,
                         gate_soft_cap=float(cap) if cap else 0.0, eps=float(hf.eps), use_bias=bool(hf.use_bias))
    out_cap = hf.output_logit_soft_cap
    return dataclasses.replace(config, xlstm=layout, final_softcap=float(out_cap) if out_cap else None)
