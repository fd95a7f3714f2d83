"""Builds the KV tiers below the device from the scheduler's config: the disk store, the host pool, the
DiskTier that loads from both, and the EvictionSaver the radix tree calls on eviction."""

import logging

from radixlm.radix_cache.disk_store import DiskKVStore
from radixlm.radix_cache.host_store import HostKVStore
from radixlm.radix_cache.page_hash import header_key
from radixlm.runtime.scheduler.disk_tier import DiskTier
from radixlm.runtime.scheduler.evict_saver import EvictionSaver
from radixlm.runtime.server_args import parse_size

logger = logging.getLogger(__name__)


def build_kv_tiers(config, kv, runner) -> tuple:
    """(DiskTier or None, EvictionSaver or None) for a scheduler's config; hooks them into kv (its
    on_insert and its tree's on_evict).  ValueError naming the flag for a bad combination."""
    if not (config.kv_disk_dir or config.kv_host_size):
        return None, None
    if config.kv_disk_write_policy not in ("write_through", "write_back"):
        raise ValueError(f"--kv-disk-write-policy must be write_through or write_back, not "
                         f"{config.kv_disk_write_policy!r}")
    device = str(getattr(runner, "device", "cpu"))
    if config.kv_host_size and device == "cpu" and not config.kv_host_on_cpu:
        raise ValueError("--kv-host-size: this server's KV cache is on the CPU, in host memory already, so a "
                         "host tier would only copy it; give the KV cache more memory instead (--max-total-tokens)")
    header = header_key(runner.kv_identity(config.kv_disk_block))
    store = (DiskKVStore(config.kv_disk_dir, header, parse_size(config.kv_disk_size),
                         getattr(runner, "payload_checksum", None)) if config.kv_disk_dir else None)
    host = HostKVStore(parse_size(config.kv_host_size, "kv_host_size")) if config.kv_host_size else None
    write_back = config.kv_disk_write_policy == "write_back"
    saver = None
    tier = DiskTier(store, kv, runner, config.kv_disk_block, host=host, header=header, write_back=write_back)
    kv.on_insert = tier.on_insert
    if host is not None or (store is not None and write_back):
        saver = EvictionSaver(tier, kv.tree, runner, pinned=device.startswith("cuda"))
        kv.tree.on_evict = saver
    if store is not None:
        logger.info("KV disk tier: %s (%s at most, blocks of %d tokens, %s)", store.dir, config.kv_disk_size,
                    config.kv_disk_block, config.kv_disk_write_policy)
    if host is not None:
        logger.info("KV host tier: %s at most, blocks of %d tokens", config.kv_host_size, config.kv_disk_block)
    return tier, saver
