"""What the radix tree evicts, kept below the device, under the real scheduler with the KV-sensitive fake
model (ledger checked after every step): write-back writes exactly the evicted blocks that were reused;
the host tier serves evicted prefixes back with the oracle's tokens, stays in its LRU bound, and spills
to disk what it drops; a host tier on a CPU server is refused unless asked for."""

import random

import pytest
from scheduler_harness import collect, oracle_generate, run_until_idle, submit
from test_disk_tier import BLOCK, DiskFakeRunner, details, disk_scheduler

from radixlm.radix_cache.disk_store import _FIXED, MAGIC
from radixlm.radix_cache.page_hash import chain_keys

PAYLOAD = BLOCK * DiskFakeRunner.kv_bytes_per_token
FILE = len(MAGIC) + _FIXED.size + BLOCK * 8 + PAYLOAD      # one block's file: magic, fixed header, tokens, payload



def assert_hot_prefixes_come_from_disk(sched, hot, rng, tag, suffix_len):
    """Each 64-token hot prefix plus a fresh suffix: what the new scheduler's tree lacks comes from disk."""
    for i, h in enumerate(hot):
        prompt = h + tokens(rng, suffix_len)
        on_device = sched.kv.tree.prefix_len(prompt)
        run_one(sched, f"{tag}{i}", prompt)
        assert details(sched, f"{tag}{i}") == 64 - on_device

def tokens(rng, n):
    return [rng.randrange(1, 97) for _ in range(n)]


def run_one(sched, rid, prompt, n=4):
    submit(sched, rid, prompt, n)
    run_until_idle(sched)
    got = collect(sched)[rid]
    assert got["tokens"] == oracle_generate(prompt, n)
    return got


def block_keys(sched, prompt):
    return chain_keys(sched.disk.start_key(None), prompt, BLOCK)


def host_details(sched, rid):
    for msg in reversed(sched.outbox.msgs):
        if hasattr(msg, "rids") and rid in msg.rids:
            return msg.host_cached_tokens[msg.rids.index(rid)]


def workload(seed):
    """Three prefixes reused once each (h), three prompts never reused (u), then unique prompts enough to
    evict all of them from a 600-slot pool (p)."""
    rng = random.Random(seed)
    hot = [tokens(rng, 64) for _ in range(3)]
    cold = [tokens(rng, 80) for _ in range(3)]
    first = [("h%da" % i, h + tokens(rng, 30)) for i, h in enumerate(hot)]
    again = [("h%db" % i, h + tokens(rng, 10)) for i, h in enumerate(hot)]
    pressure = [("p%d" % i, tokens(rng, 150)) for i in range(10)]
    return hot, cold, first + again + [("u%d" % i, u) for i, u in enumerate(cold)] + pressure


def test_write_back_writes_only_reused_blocks(tmp_path):
    hot, cold, reqs = workload(0)
    sched = disk_scheduler(tmp_path, DiskFakeRunner(num_slots=600), kv_disk_write_policy="write_back")
    for rid, prompt in reqs:
        run_one(sched, rid, prompt)
        assert sched.disk.stats()["disk_writes"] == 0 or rid.startswith("p")   # nothing written on insert
    assert sched.disk.drain()
    store = sched.disk.store
    for h in hot:
        assert all(store.contains(k) for k in block_keys(sched, h))
    first_tail = reqs[0][1][:80]                # h0a's own block after the shared 64 tokens: never reused
    assert not store.contains(block_keys(sched, first_tail)[-1])
    for u in cold:
        assert not any(store.contains(k) for k in block_keys(sched, u))
    stats = sched.disk.stats()
    assert stats["disk_writes"] == stats["disk_writeback_blocks"] == 3 * 64 // BLOCK
    assert stats["disk_write_bytes"] == stats["disk_writes"] * FILE
    assert stats["disk_writeback_skipped"] >= 3 * 80 // BLOCK

    again = disk_scheduler(tmp_path, DiskFakeRunner(num_slots=600), kv_disk_write_policy="write_back")
    assert_hot_prefixes_come_from_disk(again, hot, random.Random(1), "r", 7)


def host_scheduler(tmp_path, host_size, **config):
    config.setdefault("kv_disk_dir", None)
    return disk_scheduler(tmp_path, DiskFakeRunner(num_slots=600), kv_host_size=str(host_size), kv_host_on_cpu=True,
                          **config)


def test_host_tier_serves_evicted_prefixes(tmp_path):
    hot, cold, reqs = workload(2)
    sched = host_scheduler(tmp_path, 1 << 20)
    for rid, prompt in reqs:
        run_one(sched, rid, prompt)
    assert sched.kv.tree.prefix_len(hot[0]) == 0            # evicted from the device
    rng = random.Random(3)
    for i, prefix in enumerate(hot + cold):
        prompt = prefix + tokens(rng, 9)
        on_device = sched.kv.tree.prefix_len(prompt)         # a first token another prompt shares, at most
        got = run_one(sched, f"back{i}", prompt)
        whole = len(prefix) // BLOCK * BLOCK
        assert host_details(sched, f"back{i}") == whole - on_device and got["cached_tokens"] == whole
        assert details(sched, f"back{i}") is None           # no disk tier: not reported
    stats = sched.disk.stats()
    assert stats["host_loaded_tokens"] == sum(host_details(sched, f"back{i}") for i in range(6)) > 3 * 64
    assert stats["host_evicted_blocks"] == 0
    assert stats["host_stored_blocks"] == stats["host_blocks"] and stats["host_bytes"] == stats["host_blocks"] * PAYLOAD


def test_host_tier_lru_bound_and_spill_to_disk(tmp_path):
    hot, cold, reqs = workload(4)
    bound = 10 * PAYLOAD
    sched = host_scheduler(tmp_path, bound, kv_disk_dir=str(tmp_path / "kv"), kv_disk_write_policy="write_back")
    for rid, prompt in reqs:
        run_one(sched, rid, prompt)
        assert sched.disk.host.bytes <= bound
    assert sched.disk.drain()
    stats = sched.disk.stats()
    assert stats["host_evicted_blocks"] > 0 and stats["host_blocks"] <= 10
    # the reused prefixes left the host pool first (oldest): spilled to disk; the never-reused ones were not
    assert stats["host_spilled_blocks"] == stats["disk_writes"] == 3 * 64 // BLOCK
    for h in hot:
        assert all(sched.disk.store.contains(k) for k in block_keys(sched, h))
    rng = random.Random(5)
    for i, h in enumerate(hot):
        prompt = h + tokens(rng, 5)
        on_device = sched.kv.tree.prefix_len(prompt)
        run_one(sched, f"d{i}", prompt)
        assert details(sched, f"d{i}") == 64 - on_device and host_details(sched, f"d{i}") == 0


def test_host_tier_refused_on_cpu_unless_asked(tmp_path):
    with pytest.raises(ValueError, match="--kv-host-size"):
        disk_scheduler(tmp_path, kv_host_size="1M")


@pytest.mark.parametrize("host", [False, True])
def test_stop_persists_what_only_memory_held(tmp_path, host):
    """Write-back keeps reused blocks in memory until evicted; stopping queues them (from the tree, and from
    the host pool) for disk, so a restart still serves them; never-reused prompts are still not written."""
    hot, cold, reqs = workload(6)
    extra = {"kv_host_size": str(1 << 20), "kv_host_on_cpu": True} if host else {}
    sched = disk_scheduler(tmp_path, DiskFakeRunner(num_slots=600), kv_disk_write_policy="write_back", **extra)
    for rid, prompt in reqs[:6] + (reqs[-4:] if host else []):   # the reused prefixes stay on the device, or
        run_one(sched, rid, prompt)                                    # pressure moves them to host memory
    assert sched.disk.stats()["disk_writes"] == 0
    sched.request_stop()
    out = sched.shutdown(drain_s=10.0)
    assert out["dropped"] == 0 and out["written"] == out["queued"] > 0
    for h in hot:
        assert all(sched.disk.store.contains(k) for k in block_keys(sched, h))
    for u in cold:
        assert not any(sched.disk.store.contains(k) for k in block_keys(sched, u))
    again = disk_scheduler(tmp_path, DiskFakeRunner(num_slots=600))
    assert_hot_prefixes_come_from_disk(again, hot, random.Random(7), "s", 3)


def test_bad_tier_options_name_the_flag():
    from radixlm.runtime.server_args import ServerArgs

    with pytest.raises(ValueError, match="--kv-disk-dir"):
        ServerArgs(kv_disk_write_policy="write_back")
    with pytest.raises(ValueError, match="kv_host_size"):
        ServerArgs(kv_host_size="lots")
    assert ServerArgs(kv_host_size="2G", kv_disk_dir="/tmp/x", kv_disk_write_policy="write_back").kv_host_size == "2G"
