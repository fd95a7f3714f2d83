"""Weight sharding for --tp-size (runtime/distributed/sharding.py).  Oracle: the full checkpoint tensor, which
the shards of all ranks must rebuild exactly (concatenated by rows or columns as the layer is split), and
head bookkeeping done by hand: rank r's query heads must use exactly rank r's KV heads."""

import pytest
import torch

from radixlm.runtime.distributed.sharding import padded_vocab, shard_config, shard_tensor
from radixlm.runtime.distributed.topology import check_split
from radixlm.runtime.models.config import ModelConfig

CONFIG = ModelConfig(architecture="Qwen2ForCausalLM", vocab_size=391, hidden_size=64, intermediate_size=128,
                     num_layers=1, num_heads=8, num_kv_heads=4, head_dim=8, rope_theta=1e4, rms_norm_eps=1e-5,
                     max_position_embeddings=64, context_length=64, attention_bias=True, o_proj_bias=True)
SHAPES = {  # HF name -> full shape; how the shards rebuild it
    "model.embed_tokens.weight": ((391, 64), "rows"),
    "lm_head.weight": ((391, 64), "rows"),
    "model.layers.0.self_attn.q_proj.weight": ((64, 64), "rows"),
    "model.layers.0.self_attn.q_proj.bias": ((64,), "rows"),
    "model.layers.0.self_attn.k_proj.weight": ((32, 64), "rows"),
    "model.layers.0.self_attn.v_proj.bias": ((32,), "rows"),
    "model.layers.0.self_attn.o_proj.weight": ((64, 64), "cols"),
    "model.layers.0.self_attn.o_proj.bias": ((64,), "sum"),
    "model.layers.0.self_attn.q_norm.weight": ((8,), "whole"),
    "model.layers.0.mlp.gate_proj.weight": ((128, 64), "rows"),
    "model.layers.0.mlp.up_proj.weight": ((128, 64), "rows"),
    "model.layers.0.mlp.down_proj.weight": ((64, 128), "cols"),
    "model.layers.0.input_layernorm.weight": ((64,), "whole"),
}


@pytest.mark.parametrize("size", [1, 2, 4])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shards_of_all_ranks_rebuild_the_full_tensor(name, size):
    shape, how = SHAPES[name]
    full = torch.randn(shape, generator=torch.Generator().manual_seed(len(name)))
    shards = [shard_tensor(name, full, CONFIG, r, size) for r in range(size)]
    if how == "whole":
        assert all(torch.equal(s, full) for s in shards)
    elif how == "sum":   # a row-parallel bias is added once: rank 0 holds it, the others zeros
        assert torch.equal(sum(shards), full) and torch.equal(shards[0], full)
    elif how == "cols":
        assert torch.equal(torch.cat(shards, dim=1), full)
    else:
        rebuilt = torch.cat(shards)
        if name in ("model.embed_tokens.weight", "lm_head.weight"):   # zero rows pad V to a multiple of size
            assert rebuilt.shape[0] == padded_vocab(391, size) and not rebuilt[391:].any()
            rebuilt = rebuilt[:391]
        assert torch.equal(rebuilt, full)


@pytest.mark.parametrize("size", [2, 4])
def test_a_rank_holds_whole_heads_and_the_kv_heads_its_query_heads_use(size):
    local = shard_config(CONFIG, size)
    assert (local.num_heads, local.num_kv_heads, local.intermediate_size) == (8 // size, 4 // size, 128 // size)
    assert local.vocab_size * size == padded_vocab(391, size) and local.head_dim == CONFIG.head_dim
    group = CONFIG.num_heads // CONFIG.num_kv_heads
    for rank in range(size):
        q_heads = range(rank * local.num_heads, (rank + 1) * local.num_heads)
        kv_heads = set(range(rank * local.num_kv_heads, (rank + 1) * local.num_kv_heads))
        assert {h // group for h in q_heads} == kv_heads


@pytest.mark.parametrize("size,heads,kv_heads,inter,needle", [
    (2, 4, 1, 128, "KV heads (1)"),
    (3, 9, 3, 128, "intermediate size (128)"),
    (4, 6, 2, 128, "query heads (6)"),
])
def test_sizes_that_do_not_split_the_model_are_refused_naming_the_flag(size, heads, kv_heads, inter, needle):
    with pytest.raises(ValueError) as err:
        check_split(size, heads, kv_heads, inter)
    assert "--tp-size" in str(err.value) and needle in str(err.value)
