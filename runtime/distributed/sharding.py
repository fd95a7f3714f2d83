"""This rank's slices of a full checkpoint, and the loader of a sharded model.

A rank holds Hq/size query heads and Hkv/size KV heads (rank r: heads r*Hq/size.., so its query heads use
exactly its KV heads), I/size of the MLP width and ceil(V/size) rows of the vocabulary:

  q/k/v_proj weight, bias     rows of my heads      -> column-parallel qkv_proj = [my q; my k; my v]
  gate/up_proj                rows of my I range    -> column-parallel gate_up_proj = [my gate; my up]
  o_proj, down_proj           columns of my range   -> row-parallel, all-reduced; o_proj bias on rank 0 only
  embed_tokens, lm_head       rows of my vocab range (zero rows pad V to a multiple of size)
  norms (q/k norms included)  whole: they act per head_dim or on the all-reduced [T, H]

Mixture-of-experts layers (runtime/models/moe.py): the router and the shared expert's gate whole, the shared expert
as a dense MLP; the experts either like a dense MLP, each one's width split (ep_size 1), or, with expert parallelism
(ep_size == size), whole experts, E/size of them: rank r holds experts r*E/size.. and no others' weights.
gpt-oss (its stream converted by model.checkpoint_tensors: every expert of a layer in one tensor, experts.{w13, b13,
w2, b2}): the attention sinks [Hq] by the rank's query heads; the experts the same two ways: whole (rows
r*E/size.. of each stacked tensor), or w13 [E, 2I, H] and b13 [E, 2I] by the rank's I range in the gate half and in
the up half, w2 [E, H, I] by columns, b2 [E, H] on rank 0 only (the all-reduced sum adds it once).
"""

import dataclasses
from typing import Iterable, Iterator, Tuple

import torch

from radixlm.runtime.distributed.topology import check_split


def padded_vocab(vocab_size: int, size: int) -> int:
    return -(-vocab_size // size) * size


def shard_config(config, size: int, rank: int = 0, ep_size: int = 1):
    """The config of one rank's model: its heads, MLP width, vocabulary rows and experts (or experts' width)."""
    check_split(size, config.num_heads, config.num_kv_heads, config.intermediate_size)
    return dataclasses.replace(config, num_heads=config.num_heads // size, num_kv_heads=config.num_kv_heads // size,
                               intermediate_size=config.intermediate_size // size,
                               vocab_size=padded_vocab(config.vocab_size, size) // size,
                               moe=_shard_moe(config.moe, size, rank, ep_size) if config.moe else None)


def _shard_moe(moe, size: int, rank: int, ep_size: int):
    shared = moe.shared_expert_intermediate_size // size
    if ep_size > 1:
        if ep_size != size or moe.num_experts % size:
            raise ValueError(f"--ep-size {ep_size} must equal --tp-size {size} and divide the experts ({moe.num_experts})")
        local = moe.num_experts // size
        return dataclasses.replace(moe, num_local_experts=local, expert_offset=rank * local,
                                   shared_expert_intermediate_size=shared)
    if moe.intermediate_size % size or moe.shared_expert_intermediate_size % size:
        raise ValueError(f"--tp-size {size} must divide the experts' width ({moe.intermediate_size}, shared "
                         f"{moe.shared_expert_intermediate_size}); or split the experts with --ep-size {size}")
    return dataclasses.replace(moe, intermediate_size=moe.intermediate_size // size, shared_expert_intermediate_size=shared)


STACKED_EXPERTS = ("w13", "b13", "w2", "b2")    # gpt-oss: ...experts.{leaf}, [E, ...] each


def _expert_of(name: str):
    """The expert index of an expert's weight name (...experts.{e}.{proj}.weight), else None."""
    parts = name.split(".")
    if "experts" not in parts or not parts[parts.index("experts") + 1].isdigit():
        return None
    return int(parts[parts.index("experts") + 1])


def _stacked_leaf(name: str):
    """w13, b13, w2 or b2 for a tensor of every expert of a layer (...experts.w13: gpt-oss), else None."""
    head, _, leaf = name.rpartition(".")
    return leaf if head.endswith(".experts") and leaf in STACKED_EXPERTS else None


def _shard_stacked(leaf: str, t: torch.Tensor, rank: int, size: int, ep_size: int) -> torch.Tensor:
    if ep_size > 1:
        return _rows(t, rank, size)                                             # [E/size, ...] my experts whole
    if leaf in ("w13", "b13"):
        gate, up = t.chunk(2, dim=1)                                            # [E, I, ...] each
        n = gate.shape[1] // size
        return torch.cat((gate[:, rank * n:(rank + 1) * n], up[:, rank * n:(rank + 1) * n]), dim=1)  # [E, 2I/size, ...]
    if leaf == "w2":
        n = t.shape[2] // size
        return t[:, :, rank * n:(rank + 1) * n]                                 # [E, H, I/size]
    return t if rank == 0 else torch.zeros_like(t)                              # b2 [E, H]: added once


def _rows(t: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    n = t.shape[0] // size
    return t[rank * n:(rank + 1) * n]


def _cols(t: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    n = t.shape[1] // size
    return t[:, rank * n:(rank + 1) * n]


def shard_tensor(name: str, t: torch.Tensor, config, rank: int, size: int, ep_size: int = 1) -> torch.Tensor:
    """One HF checkpoint tensor (full) -> this rank's part of it (an expert's weight under expert parallelism:
    whole; the caller keeps only this rank's experts, expert_held)."""
    leaf = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else name
    if ep_size > 1 and _expert_of(name) is not None:
        return t
    stacked = _stacked_leaf(name)
    if stacked is not None:
        return _shard_stacked(stacked, t, rank, size, ep_size)
    if name.endswith(".self_attn.sinks"):     # gpt-oss: one logit per query head [Hq]
        return _rows(t, rank, size)
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        pad = padded_vocab(config.vocab_size, size) - t.shape[0]
        padded = torch.cat((t, t.new_zeros(pad, t.shape[1]))) if pad else t    # [Vp, H]
        return _rows(padded, rank, size)                                        # [Vp/size, H]
    if leaf in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "w1", "w3"):   # w1/w3: Mixtral's gate/up
        return _rows(t, rank, size)
    if leaf in ("o_proj", "down_proj", "w2"):
        if t.dim() == 1:                       # o_proj bias: added once, after the all-reduce
            return t if rank == 0 else torch.zeros_like(t)
        return _cols(t, rank, size)
    return t


def expert_held(name: str, config, rank: int, size: int, ep_size: int) -> bool:
    """False for another rank's expert weight under expert parallelism; True for everything else."""
    expert = _expert_of(name)
    if ep_size == 1 or expert is None:
        return True
    return expert // (config.moe.num_experts // size) == rank


def shard_weights(named: Iterable[Tuple[str, torch.Tensor]], config, rank: int, size: int, ep_size: int = 1) -> Iterator:
    for name, t in named:
        if expert_held(name, config, rank, size, ep_size):
            yield name, shard_tensor(name, t, config, rank, size, ep_size).contiguous()


def load_sharded_model(path, dtype, attn_backend_factory, device, tp):
    """-> (model holding this rank's shards, the full ModelConfig).  The factory sees the rank's config
    (its KV heads), so the KV pool holds only this rank's heads."""
    from radixlm.runtime.models.loader import iter_safetensors, read_model_config, resolve_model_path
    from radixlm.runtime.models.registry import get_model_class

    path = resolve_model_path(str(path))
    config = read_model_config(path)
    local = shard_config(config, tp.size, tp.rank, tp.ep_size)
    tp.vocab_size = config.vocab_size
    model = get_model_class(config.architecture, config.language_model)(local, attn_backend_factory(local), dtype=dtype, device=device)
    model.enable_tensor_parallel(tp)
    named = model.checkpoint_tensors(iter_safetensors(path))
    model.load_weights(shard_weights(named, config, tp.rank, tp.size, tp.ep_size))
    return model.eval(), config


def agreed_budget(tp, budget_fn):
    """budget_fn(config) -> slots, decided by rank 0 for every rank.  CPU ranks of one node share its memory,
    so rank 0 budgets the KV heads of all its node's ranks against it."""
    def budget(local_config) -> int:
        slots = 0
        if tp.is_leader:
            sharers = tp.local_ranks if tp.shares_memory else 1
            slots = budget_fn(dataclasses.replace(local_config, num_kv_heads=local_config.num_kv_heads * sharers))
        return tp.agree_on(slots)
    return budget
