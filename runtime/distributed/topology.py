"""Where the tensor-parallel ranks run and how they meet; read by the launcher, so no torch here.

World size = --tp-size.  With --nnodes K every node runs tp_size / K consecutive ranks; node 0 runs
rank 0 (the scheduler the rest of the server talks to), every other rank is a tp worker.
"""

import json
import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class TPTopology:
    size: int           # world size (--tp-size)
    nnodes: int
    node_rank: int
    init_addr: str      # host:port of rank 0's rendezvous store
    ep_size: int = 1    # --ep-size: 1, or size (experts split over the ranks)

    @property
    def ranks_per_node(self) -> int:
        return self.size // self.nnodes

    @property
    def local_ranks(self) -> list:
        first = self.node_rank * self.ranks_per_node
        return list(range(first, first + self.ranks_per_node))

    def rank_config(self, rank: int) -> dict:
        """What ModelRunner(tp=...) needs to join the group as `rank`."""
        return {"size": self.size, "rank": rank, "init_addr": self.init_addr, "ep_size": self.ep_size,
                "local_ranks": self.ranks_per_node, "local_index": rank - self.local_ranks[0]}


def plan_topology(args, model_path: str) -> TPTopology:
    """The topology of a --tp-size > 1 server; ValueError when the model's heads do not split."""
    check_heads(model_path, args.tp_size, args.ep_size)
    addr = args.dist_init_addr or f"127.0.0.1:{free_port()}"
    return TPTopology(args.tp_size, args.nnodes, args.node_rank, addr, args.ep_size)


def check_heads(model_path: str, tp_size: int, ep_size: int = 1) -> None:
    """Query and KV heads (and the MLP width) must all be multiples of tp_size: each rank holds whole heads,
    and KV heads are not replicated.  Mixture-of-experts models: ep_size must divide the experts, else
    tp_size each expert's width (and the shared expert's)."""
    with open(os.path.join(model_path, "config.json")) as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config", cfg)
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    check_split(tp_size, heads, kv_heads, cfg["intermediate_size"])
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    if not experts:
        if ep_size > 1:
            raise ValueError("--ep-size > 1 needs a mixture-of-experts model (this one has no experts)")
        return
    if ep_size > 1 and experts % ep_size:
        raise ValueError(f"--ep-size {ep_size} must divide the model's experts ({experts})")
    for key in ("moe_intermediate_size", "shared_expert_intermediate_size") if ep_size == 1 else ():
        if cfg.get(key) and cfg[key] % tp_size:
            raise ValueError(f"--tp-size {tp_size} must divide the model's {key} ({cfg[key]}); or split the "
                             f"experts instead with --ep-size {tp_size}")


def check_split(tp_size: int, heads: int, kv_heads: int, intermediate: int) -> None:
    if heads % tp_size or kv_heads % tp_size:
        raise ValueError(f"--tp-size {tp_size} must divide the model's query heads ({heads}) and KV heads "
                         f"({kv_heads}); KV heads are not replicated across ranks, so choose a --tp-size that "
                         f"divides {kv_heads}")
    if intermediate % tp_size:
        raise ValueError(f"--tp-size {tp_size} must divide the model's intermediate size ({intermediate})")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
