"""Tensor parallelism (`--tp-size N`): one model split over N processes by heads, MLP columns and vocab.

  topology.py        no torch: which ranks run on this node, the rendezvous address, head-count checks
  group.py           the process group and the collectives the sharded model calls
  sharding.py        full checkpoint tensors -> this rank's shards; the sharded model's loader
  step_sync.py       rank 0 broadcasts each step's plain data; ranks > 0 replay it (the worker loop)
  worker_process.py  entry of a tp worker process (ranks > 0)
"""
