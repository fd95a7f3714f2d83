"""GPT-2, GPT-BigCode, GPT-NeoX, GPT-J and OPT: what sets them apart, against HF transformers on the same tiny random
weights (logits_oracle.py; the common checks of every family: test_family_logits.py, served: test_family_serving.py).

GPT-2: learned positions, Conv1D weights ([in, out]) transposed at load, gelu_new.  GPT-BigCode: nn.Linear weights,
one K/V head (multi_query), or each head's q/k/v rows together without it.  GPT-NeoX: query_key_value rows grouped per
head, 4 of 16 head dims rotating, the parallel residual over two LayerNorms (or sequential).  GPT-J: 8 of 16 head dims
rotating in interleaved pairs, one LayerNorm read in parallel, an lm head bias.  Falcon: 40B's query_key_value grouped
per K/V head with ln_attn and ln_mlp in parallel, 7B's one K/V head and one LayerNorm, or sequential layers with per-head
rows; the rope base from rope_parameters.  OPT: positions at offset 2, ReLU,
project_in/project_out (word_embed_proj_dim 32 of 64) with post-LayerNorms (do_layer_norm_before=False: OPT-350m's
shape).
test_the_oracle_notices_each_difference proves the bound would catch each of them left out.
"""

import contextlib
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from logits_oracle import Paged, assert_close, family_case
from tiny_gpt_models import TINY_GPT_VARIANT_ARCHS

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.gpt_layers import GptLayer
from radixlm.runtime.models.gpt_neox import ParallelGptLayer
from radixlm.runtime.models.interleaved_rope import interleaved_to_half_order, reorder_head_dims
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.rope import rope_cos_sin_cache

LENGTH = 24
# with the variants outside the common checks (tiny_gpt_models.TINY_GPT_VARIANT_ARCHS)
NOTICED = ("gpt2", "gpt_neox", "gptj", "opt", "falcon") + TINY_GPT_VARIANT_ARCHS


@pytest.fixture(scope="module", params=NOTICED)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH)


def test_the_oracle_notices_each_difference(fam):
    """The model as loaded is within the bound (the variants' own check); each family's difference undone on it
    leaves the bound."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)
    assert_close(paged.step([(0, ids)]), ref, "as loaded")
    m = paged.model
    changes = _changes(arch, m)
    assert changes
    for row, (what, swaps) in enumerate(changes):
        paged = Paged(path, seed=6 + row, reference=True)
        with _replaced(swaps), pytest.raises(AssertionError, match="logit error"):
            assert_close(paged.step([(row, ids)]), ref, what)


def _changes(arch: str, m) -> list:
    """[(what, swaps)] of `arch`'s differences undone."""
    c, layers = m.config, m.layers
    attns = [layer.self_attn for layer in layers]
    each = lambda objs, name, value: [(o, name, value(o)) for o in objs]  # noqa: E731
    if arch == "gpt2":
        return [("no learned positions", [(m, "embed_positions", None)]),
                ("Conv1D c_proj read as nn.Linear", each(attns, "o_proj", lambda a: a.o_proj.t().contiguous())),
                ("exact gelu, not gelu_new", each([layer.mlp for layer in layers], "act", lambda _: F.gelu))]
    if arch == "falcon":
        return [("q/k/v rows read as blocks, not per K/V group", _qkv_grouped(attns, c)),
                ("ln_attn read by both", each(layers, "post_attention_layernorm", lambda layer: layer.input_layernorm))]
    if arch == "falcon_7b":
        base = rope_cos_sin_cache(dataclasses.replace(c, rope_theta=10000.0), m.cos_sin.shape[0]).to(m.cos_sin.dtype)
        return [("the rope base 10000, not rope_parameters' 100", [(m, "cos_sin", base)])]
    if arch == "falcon_sequential":
        return [("q/k/v rows read as blocks, not per head", _qkv_as_blocks(attns, c)),
                ("the parallel residual", each(layers, "__class__", lambda _: ParallelGptLayer))]
    if arch in ("gpt_bigcode_mha", "gpt_neox"):
        changes = [("q/k/v rows read as blocks, not per head", _qkv_as_blocks(attns, c))]
        if arch == "gpt_bigcode_mha":
            return changes
        full = rope_cos_sin_cache(dataclasses.replace(c, rotary_dim=None), m.cos_sin.shape[0]).to(m.cos_sin.dtype)
        return changes + [("one LayerNorm read by both", each(layers, "post_attention_layernorm",
                                                             lambda layer: layer.input_layernorm)),
                          ("the sequential residual", each(layers, "__class__", lambda _: GptLayer)),
                          ("every head dim rotating", [(m, "cos_sin", full)])]
    if arch == "gpt_neox_sequential":
        return [("the parallel residual", each(layers, "__class__", lambda _: ParallelGptLayer))]
    if arch == "gptj":
        back = torch.argsort(interleaved_to_half_order(c.head_dim, c.rope_dim))  # [D]: our head order -> HF's
        return [("rotate-half rope on HF's q/k rows", _reordered(attns, c, back)),
                ("no lm head bias", [(m, "lm_head_bias", None)])]
    if arch == "opt":
        unshifted = dataclasses.replace(c, gpt=dataclasses.replace(c.gpt, position_offset=0))
        return [("positions without the offset 2", [(m, "config", unshifted)]),
                ("gelu, not relu", each([layer.mlp for layer in layers], "act", lambda _: F.gelu))]
    return [("pre-LayerNorms", each(layers, "__class__", lambda _: GptLayer))]   # opt_350m


def _qkv_as_blocks(attns, c: ModelConfig) -> list:
    """Swaps that put each layer's q/k/v rows (and biases) back in the checkpoint's per-head order: the model as it
    would be with those rows split as [q; k; v] blocks."""
    swaps = []
    for attn in attns:
        for name in ("qkv_proj", "qkv_bias"):
            t = getattr(attn, name)
            if t is not None:
                swaps.append((attn, name, t.unflatten(0, (3, c.num_heads, c.head_dim)).transpose(0, 1).flatten(0, 2)))
    return swaps


def _qkv_grouped(attns, c: ModelConfig) -> list:
    """Swaps that put each layer's q/k/v rows (and biases) back in Falcon 40B's order, [Hkv, Hq/Hkv + 2, D]: the model
    as it would be with those rows split as [q; k; v] blocks."""
    g, swaps = c.num_heads // c.num_kv_heads, []
    for attn in attns:
        for name in ("qkv_proj", "qkv_bias"):
            t = getattr(attn, name)
            q, k, v = t.split([c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.num_kv_heads * c.head_dim])
            groups = [q.unflatten(0, (c.num_kv_heads, g, c.head_dim)), k.unflatten(0, (c.num_kv_heads, 1, c.head_dim)),
                      v.unflatten(0, (c.num_kv_heads, 1, c.head_dim))]
            swaps.append((attn, name, torch.cat(groups, dim=1).flatten(0, 2)))
    return swaps


def _reordered(attns, c: ModelConfig, order: torch.Tensor) -> list:
    """Swaps that reorder each head's q/k rows by `order` [D]: argsort(interleaved_to_half_order) puts them back in
    HF's interleaved order, as the model would be without the reordering at load."""
    qk_rows = (c.num_heads + c.num_kv_heads) * c.head_dim
    return [(a, "qkv_proj", torch.cat([reorder_head_dims("qkv_proj", a.qkv_proj[:qk_rows], order),
                                       a.qkv_proj[qk_rows:]])) for a in attns]


@contextlib.contextmanager
def _replaced(swaps):
    """Each (object, attribute, value) set for the duration of the block, the old values put back after; a tensor in
    a parameter's place as a parameter."""
    old = [(obj, name, getattr(obj, name)) for obj, name, _ in swaps]
    try:
        for (obj, name, value), (_, _, was) in zip(swaps, old):
            if isinstance(was, torch.nn.Parameter) and isinstance(value, torch.Tensor):
                value = torch.nn.Parameter(value, requires_grad=False)
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(old):
            setattr(obj, name, value)


def test_config_fields(tiny_model):
    gpt2 = read_model_config(tiny_model("gpt2"))
    assert gpt2.context_length == 64 and gpt2.gpt.positions == 64 and gpt2.nope_layers == (0, 1)
    assert gpt2.intermediate_size == 128 and gpt2.hidden_act == "gelu_tanh" and gpt2.tie_word_embeddings
    assert gpt2.attention_bias and gpt2.o_proj_bias and gpt2.mlp_bias and gpt2.sm_scale == 16 ** -0.5
    assert read_model_config(tiny_model("gpt_bigcode")).num_kv_heads == 1
    assert read_model_config(tiny_model("gpt_bigcode_mha")).num_kv_heads == 4
    neox = read_model_config(tiny_model("gpt_neox"))
    assert neox.rotary_dim == 4 and neox.parallel_residual and neox.hidden_act == "gelu" and neox.gpt is None
    assert not read_model_config(tiny_model("gpt_neox_sequential")).attention_bias
    gptj = read_model_config(tiny_model("gptj"))
    assert gptj.rotary_dim == 8 and not gptj.attention_bias and gptj.mlp_bias and not gptj.tie_word_embeddings
    opt = read_model_config(tiny_model("opt"))
    assert opt.gpt.positions == 66 and opt.gpt.position_offset == 2 and opt.gpt.word_embed_dim is None
    assert opt.context_length == 64 and opt.hidden_act == "relu" and opt.intermediate_size == 128
    post = read_model_config(tiny_model("opt_350m"))
    assert post.gpt.post_norm and post.gpt.word_embed_dim == 32
    falcon = read_model_config(tiny_model("falcon"))
    assert falcon.num_kv_heads == 2 and falcon.gpt.grouped_qkv and not falcon.gpt.shared_norm and falcon.rope_theta == 100
    assert falcon.parallel_residual and falcon.attention_bias and falcon.o_proj_bias and falcon.mlp_bias
    falcon_7b = read_model_config(tiny_model("falcon_7b"))
    assert falcon_7b.num_kv_heads == 1 and falcon_7b.gpt.shared_norm and falcon_7b.tie_word_embeddings
    sequential = read_model_config(tiny_model("falcon_sequential"))
    assert sequential.num_kv_heads == 4 and not sequential.parallel_residual


def test_positions_past_the_table_are_refused(tiny_model):
    """The context is n_positions; a position past it is a ValueError, not an index error or garbage."""
    paged = Paged(tiny_model("gpt2"), seed=6, reference=True)
    paged.cached[0] = 64   # the next token would sit at position 64
    with pytest.raises(ValueError, match="position 64 is beyond GPT2LMHeadModel's learned positions"):
        paged.step([(0, [5])])


@pytest.mark.parametrize("field,value,message", [
    ("scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx=True"),
    ("activation_function", "swish", "activation_function='swish'"),
    ("add_cross_attention", True, "add_cross_attention=True"),
])
def test_gpt2_refusals(field, value, message):
    from transformers import GPT2Config

    config = GPT2Config(n_layer=1, n_embd=64, n_head=4, **{field: value})
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)


def test_other_refusals():
    from transformers import FalconConfig, GPTJConfig, GPTNeoXConfig, OPTConfig

    with pytest.raises(ValueError, match="hidden_act='silu'"):
        ModelConfig.from_hf(GPTNeoXConfig(hidden_size=64, num_attention_heads=4, hidden_act="silu"))
    with pytest.raises(ValueError, match="GPTJForCausalLM: 7 rotated dims"):
        ModelConfig.from_hf(GPTJConfig(n_embd=64, n_head=4, rotary_dim=7))
    with pytest.raises(ValueError, match="_remove_final_layer_norm=True"):
        ModelConfig.from_hf(OPTConfig(_remove_final_layer_norm=True))
    with pytest.raises(ValueError, match="layer_norm_elementwise_affine=False"):
        ModelConfig.from_hf(OPTConfig(layer_norm_elementwise_affine=False))
    with pytest.raises(ValueError, match="alibi=True"):
        ModelConfig.from_hf(FalconConfig(hidden_size=64, num_attention_heads=4, alibi=True))
    with pytest.raises(ValueError, match="parallel_attn=False"):
        ModelConfig.from_hf(FalconConfig(hidden_size=64, num_attention_heads=4, new_decoder_architecture=True,
                                         num_kv_heads=2, parallel_attn=False))


@pytest.mark.parametrize("arch,changes", [("falcon_7b", {"multi_query": False}),
                                          ("falcon", {"new_decoder_architecture": False, "parallel_attn": True}),
                                          ("gpt_bigcode", {"multi_query": False})])
def test_a_layout_changed_after_the_config_was_built(arch, changes, tmp_path_factory):
    """A config whose layout fields are set after construction (as a script does before building the model) saves a
    stale num_key_value_heads: the K/V heads are read by HF's attention's own rule, and the logits are HF's."""
    import random

    from logits_oracle import HF, Paged, assert_close
    from tiny_models import _SEED_ORDER, _hf_config, make_tiny_tokenizer, save_tiny_model

    tok = make_tiny_tokenizer()
    config = _hf_config(arch, len(tok), tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>"))
    for key, value in changes.items():
        setattr(config, key, value)
    path = save_tiny_model(tmp_path_factory, config, f"relaid-{arch}", tok, 1000 + _SEED_ORDER.index(arch))
    ids = random.Random(5).choices(range(3, 300), k=20)
    assert_close(Paged(path).step([(0, ids)]), HF(path)(ids), f"{arch} with {changes}")
