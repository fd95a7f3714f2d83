"""Checks shared by the mixture-of-experts tests."""

import torch


def assert_shards_sum_to_the_block(config, full, prefix: str, ep_size: int):
    """The sparse block of the checkpoint tensors `full` (name, tensor under `prefix`) split over two ranks as
    sharding.py splits it (expert width with ep_size 1, whole experts with ep_size 2) sums to the unsplit block's
    output, in float64."""
    from radixlm.runtime.distributed.sharding import shard_config, shard_weights
    from radixlm.runtime.models.moe import SparseMoeBlock

    def block(moe, named):
        b = SparseMoeBlock(config.hidden_size, moe, torch.float64, "cpu")
        targets = b.checkpoint_targets(prefix)
        assert {n for n, _ in named} == set(targets)
        with torch.no_grad():
            for name, t in named:
                targets[name][0].copy_(t)
        return b

    x = torch.randn(9, config.hidden_size, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    whole = block(config.moe, full)(x)                                              # [T, H]
    parts = [block(shard_config(config, 2, r, ep_size).moe, list(shard_weights(full, config, r, 2, ep_size)))(x)
             for r in (0, 1)]
    torch.testing.assert_close(parts[0] + parts[1], whole, rtol=1e-9, atol=1e-12)
