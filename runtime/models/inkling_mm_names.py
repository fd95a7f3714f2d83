"""Inkling's multimodal checkpoints (InklingForConditionalGeneration) as released: the language model under
model.llm.* in its own names, which inkling_tensors() turns into those of Inkling's text checkpoints (inkling.py), as
transformers' conversion mapping for inkling_mm_model does at load: embed, embed_norm, norm, unembed; attn.wq_du ...;
the fused gate and up projections (mlp.w13_dn, experts.w13_weight, shared_experts.shared_w13_weight) stored with their
rows interleaved (gate 0, up 0, gate 1, ...), taken apart into gate | up.  Its audio (model.audio.*) and vision
(model.visual.*) towers are dropped (multimodal_text.py).

No torch here.
"""

INKLING_MM = "InklingForConditionalGeneration"
RELEASED_PREFIX = "model.llm."
_OUTER = {"model.llm.embed.weight": "model.embed_tokens.weight",
          "model.llm.embed_norm.weight": "model.embed_tokens.embed_norm.weight",
          "model.llm.norm.weight": "model.norm.weight", "model.llm.unembed.weight": "lm_head.weight"}
_RENAMES = (("attn.wq_du.", "self_attn.q_proj."), ("attn.wk_dv.", "self_attn.k_proj."),
            ("attn.wv_dv.", "self_attn.v_proj."), ("attn.wr_du.", "self_attn.r_proj."),
            ("attn.wo_ud.", "self_attn.o_proj."), ("attn.q_norm.", "self_attn.q_norm."),
            ("attn.k_norm.", "self_attn.k_norm."), ("attn.k_sconv.", "self_attn.k_sconv.conv1d."),
            ("attn.v_sconv.", "self_attn.v_sconv.conv1d."), ("attn.rel_logits_proj.", "self_attn.rel_logits_proj."),
            ("attn_sconv.weight", "attn_sconv.conv1d.weight"), ("mlp_sconv.weight", "mlp_sconv.conv1d.weight"),
            ("mlp_norm.", "post_attention_layernorm."), ("attn_norm.", "input_layernorm."),
            ("mlp.w2_md.weight", "mlp.down_proj.weight"), ("mlp.gate.bias", "mlp.gate.e_score_correction_bias"),
            ("mlp.experts.w2_weight", "mlp.experts.down_proj"),
            ("mlp.shared_experts.shared_w2_weight", "mlp.shared_experts.down_proj"))
# interleaved gate and up rows: released suffix -> (the dim they interleave along, the text names: fused, or gate, up)
_FUSED = {"mlp.w13_dn.weight": (0, ("mlp.gate_proj.weight", "mlp.up_proj.weight")),
          "mlp.experts.w13_weight": (1, ("mlp.experts.gate_up_proj",)),
          "mlp.shared_experts.shared_w13_weight": (1, ("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"))}


def inkling_tensors(name: str, tensor):
    """A released language model tensor (model.llm.*) -> (name, tensor) of Inkling's text checkpoint; others as they
    are."""
    if not name.startswith(RELEASED_PREFIX):
        yield name, tensor
        return
    if name in _OUTER:
        yield _OUTER[name], tensor
        return
    name = "model." + name[len(RELEASED_PREFIX):]
    prefix, _, suffix = name.partition(".mlp.")
    if "mlp." + suffix in _FUSED:
        dim, names = _FUSED["mlp." + suffix]
        shape = tensor.shape
        split = (*shape[:dim], shape[dim] // 2, 2, *shape[dim + 1:])
        tensor = tensor.reshape(split).transpose(dim, dim + 1).reshape(shape)   # gate rows, then up rows
        parts = tensor.chunk(len(names), dim=dim)
        yield from ((f"{prefix}.{n}", t.contiguous()) for n, t in zip(names, parts))
        return
    for old, new in _RENAMES:
        name = name.replace(old, new)
    yield name, tensor
