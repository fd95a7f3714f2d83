"""The disk tier under the real scheduler with a KV-sensitive fake model: blocks written through to disk
and loaded back (after a "restart": a new scheduler on the same folder) must give the oracle's tokens,
count as cached, keep the KV ledger whole, and never serve a torn, foreign or swapped file."""

import os
import random
import struct
import subprocess

import pytest
from scheduler_harness import FakeRunner, collect, make_scheduler, oracle_generate, run_until_idle, submit

from radixlm.runtime import io_struct as io

BLOCK = 16


class DiskFakeRunner(FakeRunner):
    """FakeRunner whose KV (position, token) per slot can be copied out to bytes and back."""
    kv_bytes_per_token = 16

    def __init__(self, model_id="fake-a", **kw):
        super().__init__(**kw)
        self.model_id = model_id

    def kv_identity(self, block_size):
        return {"weights": self.model_id, "block_size": block_size}

    def read_kv(self, slots, block_size):
        flat = [v for s in slots for v in self.kv[s]]
        data = struct.pack(f"<{len(flat)}q", *flat)
        step = block_size * self.kv_bytes_per_token
        return [bytearray(data[i:i + step]) for i in range(0, len(data), step)]

    def write_kv(self, slots, payloads):
        data = b"".join(bytes(p) for p in payloads)
        flat = struct.unpack(f"<{len(data) // 8}q", data)
        assert len(flat) == 2 * len(slots)
        for i, s in enumerate(slots):
            self.kv[s] = (flat[2 * i], flat[2 * i + 1])


def disk_scheduler(folder, runner=None, **config):
    config.setdefault("kv_disk_dir", str(folder))
    config.setdefault("kv_disk_block", BLOCK)
    return make_scheduler(runner or DiskFakeRunner(), **config)


def run_all(sched, reqs):
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n)
    run_until_idle(sched)
    assert sched.disk.drain()
    return collect(sched)


def details(sched, rid):
    for msg in reversed(sched.outbox.msgs):
        if isinstance(msg, io.BatchTokenOut) and rid in msg.rids:
            return msg.disk_cached_tokens[msg.rids.index(rid)]


def prompts(seed=0, n=6, length=(70, 140)):
    rng = random.Random(seed)
    shared = [rng.randrange(1, 97) for _ in range(48)]
    return [(f"r{i}", shared + [rng.randrange(1, 97) for _ in range(rng.randrange(*length))], rng.randrange(3, 12))
            for i in range(n)]


def test_restart_serves_prefixes_from_disk(tmp_path):
    reqs = prompts()
    first = disk_scheduler(tmp_path)
    out = run_all(first, reqs)
    for rid, p, n in reqs:
        assert out[rid]["tokens"] == oracle_generate(p, n)
    assert first.disk.stats()["disk_blocks"] > 0

    again = disk_scheduler(tmp_path)                  # a restart: empty tree, same folder
    out = run_all(again, [(rid + "b", p, n) for rid, p, n in reqs])
    for rid, p, n in reqs:
        got = out[rid + "b"]
        assert got["tokens"] == oracle_generate(p, n)
        whole = (len(p) - 1) // BLOCK * BLOCK
        assert got["cached_tokens"] >= whole          # every whole block before the last token: memory or disk
    stats = again.disk.stats()
    assert stats["disk_loaded_tokens"] > 0 and stats["disk_corrupt"] == 0
    assert sum(details(again, rid + "b") for rid, _, _ in reqs) == stats["disk_loaded_tokens"]
    assert details(again, "r0b") > 0                 # the first request found nothing in memory


def test_outputs_extend_the_chain(tmp_path):
    """Generated tokens are written too, up to the last computed one (a tail block), so the next turn of a
    conversation hits disk past its prompt and recomputes nothing it had."""
    prompt = [random.Random(3).randrange(1, 97) for _ in range(40)]
    first = disk_scheduler(tmp_path)
    out = run_all(first, [("t1", prompt, 40)])
    turn2 = prompt + out["t1"]["tokens"] + [5, 6, 7]
    again = disk_scheduler(tmp_path)
    out2 = run_all(again, [("t2", turn2, 4)])
    assert out2["t2"]["tokens"] == oracle_generate(turn2, 4)
    computed = len(prompt) + 40 - 1                   # the last output token was never fed back
    assert computed % BLOCK                          # ends inside a block: its tail block serves the rest
    assert out2["t2"]["cached_tokens"] == computed == details(again, "t2")


def test_another_model_or_namespace_gets_no_hits(tmp_path):
    reqs = prompts(seed=1, n=2)
    run_all(disk_scheduler(tmp_path), reqs)
    other = disk_scheduler(tmp_path, DiskFakeRunner(model_id="fake-b"))
    out = run_all(other, [(rid + "x", p, n) for rid, p, n in reqs])
    assert other.disk.stats()["disk_loaded_tokens"] == 0
    assert all(out[rid + "x"]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)
    salted = disk_scheduler(tmp_path)
    out = run_all(salted, [(rid + "s", p, n, ) for rid, p, n in reqs[:1]])
    assert salted.disk.stats()["disk_loaded_tokens"] > 0      # same model, shared namespace: hits
    ns = disk_scheduler(tmp_path)
    submit(ns, "n", reqs[0][1], 3, cache_namespace="salt")
    run_until_idle(ns)
    assert ns.disk.stats()["disk_loaded_tokens"] == 0


def _files(folder):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if f.endswith(".kv"))


@pytest.mark.parametrize("fault", ["truncate", "zero", "swap", "garbage", "delete"])
def test_damaged_files_are_misses_never_wrong(tmp_path, fault):
    reqs = prompts(seed=2, n=3)
    run_all(disk_scheduler(tmp_path), reqs)
    files = _files(tmp_path)
    assert len(files) >= 4
    victims = files[::2]
    if fault == "swap":
        a, b = files[0], files[1]
        da, db = open(a, "rb").read(), open(b, "rb").read()
        open(a, "wb").write(db)
        open(b, "wb").write(da)
        victims = [a, b]
    for f in victims if fault != "swap" else []:
        size = os.path.getsize(f)
        if fault == "truncate":
            os.truncate(f, size // 2)
        elif fault == "zero":
            with open(f, "r+b") as fh:
                fh.seek(size - 64)
                fh.write(b"\0" * 64)
        elif fault == "garbage":
            with open(f, "r+b") as fh:
                fh.seek(size // 2)
                fh.write(os.urandom(8))
        else:
            os.unlink(f)
    # each restart meets (and deletes) the first damaged file of each chain, recomputes and rewrites it:
    # every pass gives the oracle's tokens, and the damage is gone after at most one pass per file
    corrupt = []
    for attempt in range(len(victims) + 2):
        again = disk_scheduler(tmp_path)
        out = run_all(again, [(f"{rid}-{attempt}", p, n) for rid, p, n in reqs])
        for rid, p, n in reqs:
            assert out[f"{rid}-{attempt}"]["tokens"] == oracle_generate(p, n)
        corrupt.append(again.disk.stats()["disk_corrupt"])
        if corrupt[-1] == 0:
            break
    assert corrupt[-1] == 0, corrupt
    assert (fault == "delete") == (corrupt[0] == 0)
    last = disk_scheduler(tmp_path)                 # the rewritten blocks serve again
    out = run_all(last, [(rid + "-last", p, n) for rid, p, n in reqs])
    assert all(out[rid + "-last"]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)
    assert last.disk.stats()["disk_loaded_tokens"] > 0 and last.disk.stats()["disk_corrupt"] == 0


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 256 KiB tmpfs (room for about 60 of these block files): a disk that really fills up."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the full-disk and read-only cases are not run")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_then_read_only_disk(small_tmpfs, caplog):
    reqs = prompts(seed=4, n=40, length=(100, 300))
    sched = disk_scheduler(small_tmpfs)
    out = run_all(sched, reqs)
    assert all(out[rid]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)
    stats = sched.disk.stats()
    assert stats["disk_writable"] is False and stats["disk_write_errors"] >= 1
    assert sum("writing to the disk tier is off" in r.getMessage() for r in caplog.records) == 1
    assert not sched.running and not sched.waiting and not sched.disk.busy()

    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    again = disk_scheduler(small_tmpfs)
    out = run_all(again, [(rid + "b", p, n) for rid, p, n in reqs])
    assert all(out[rid + "b"]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)
    assert again.disk.stats()["disk_loaded_tokens"] > 0          # what fitted is still served
    assert again.disk.stats()["disk_writable"] is False


def test_size_bound_and_kv_pressure(tmp_path):
    """A bound of a few blocks keeps the folder under it; a small KV pool with many requests keeps the
    ledger whole while loads and writes interleave with evictions."""
    block_file = 8 + 80 + BLOCK * 8 + BLOCK * DiskFakeRunner.kv_bytes_per_token
    reqs = prompts(seed=5, n=24, length=(40, 200))
    sched = disk_scheduler(tmp_path, DiskFakeRunner(num_slots=640), kv_disk_size=str(20 * block_file))
    out = run_all(sched, reqs)
    assert all(out[rid]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)
    assert sum(os.path.getsize(f) for f in _files(tmp_path)) <= 20 * block_file
    again = disk_scheduler(tmp_path, DiskFakeRunner(num_slots=640), kv_disk_size=str(20 * block_file))
    out = run_all(again, [(rid + "b", p, n) for rid, p, n in reqs])
    assert all(out[rid + "b"]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)


def test_abort_while_loading(tmp_path):
    reqs = prompts(seed=6, n=1)
    run_all(disk_scheduler(tmp_path), reqs)
    again = disk_scheduler(tmp_path)
    rid, p, n = reqs[0]
    submit(again, "a", p, n)
    assert again.disk.busy()
    again.handlers[io.AbortReq](io.AbortReq("a"))
    run_until_idle(again)
    assert collect(again)["a"]["finish_reason"]["status_code"] == 499
    assert not again.disk.busy() and not again.waiting and not again.running


@pytest.mark.parametrize("num_slots", [448, 512, 768])
def test_concurrent_loads_under_kv_pressure_are_all_used(tmp_path, num_slots):
    """Four requests load at once into a pool that cannot hold all of them and run: a load is installed
    only when the pool has room for it and the rest of its request, and stays locked until admitted, so
    no loaded block is evicted unused; nothing stays locked after."""
    rng = random.Random(7)
    reqs = [(f"c{i}", [rng.randrange(1, 97) for _ in range(150)], 4) for i in range(4)]
    run_all(disk_scheduler(tmp_path, DiskFakeRunner(num_slots=num_slots)), reqs)
    again = disk_scheduler(tmp_path, DiskFakeRunner(num_slots=num_slots))
    out = run_all(again, [(rid + "b", p, n) for rid, p, n in reqs])
    for rid, p, n in reqs:
        assert out[rid + "b"]["tokens"] == oracle_generate(p, n)
    used = sum(details(again, rid + "b") for rid, _, _ in reqs)
    assert used == again.disk.stats()["disk_loaded_tokens"] >= 3 * 144
    assert again.kv.tree.protected_size() == 0 and not again.disk.busy()
    assert again.kv.flush()


def test_two_schedulers_share_one_folder(tmp_path):
    """Data-parallel replicas share the folder: a block one of them writes after the other started is
    found by the other on its next probe."""
    reqs = prompts(seed=8, n=2)
    a = disk_scheduler(tmp_path)
    b = disk_scheduler(tmp_path)                       # started while the folder is still empty
    run_all(a, reqs)
    out = run_all(b, [(rid + "b", p, n) for rid, p, n in reqs])
    assert all(out[rid + "b"]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)
    assert b.disk.stats()["disk_loaded_tokens"] > 0 and b.disk.stats()["disk_corrupt"] == 0


def test_stop_writes_or_drops_every_queued_block(tmp_path):
    """Stopping with no time left: each queued write is either on disk whole or counted as dropped, no
    temporary is left, nothing stays pending, and a restart serves the oracle's tokens from what was written."""
    reqs = prompts(seed=9, n=8, length=(150, 250))
    sched = disk_scheduler(tmp_path, kv_disk_block=1)
    for rid, p, n in reqs:
        submit(sched, rid, p, n)
    run_until_idle(sched)
    sched.request_stop()
    out = sched.shutdown(drain_s=0.0)
    assert out["written"] + out["dropped"] == out["queued"]
    assert sched.disk.stats()["disk_pending_write_bytes"] == 0
    assert not [f for _, _, fs in os.walk(tmp_path) for f in fs if ".tmp" in f]
    again = disk_scheduler(tmp_path, kv_disk_block=1)
    got = run_all(again, [(rid + "b", p, n) for rid, p, n in reqs])
    assert all(got[rid + "b"]["tokens"] == oracle_generate(p, n) for rid, p, n in reqs)
    assert again.disk.stats()["disk_corrupt"] == 0


@pytest.mark.parametrize("page_size", [1, 4])
def test_tail_blocks_after_a_restart(tmp_path, page_size):
    """The same prompt after a restart recomputes only its last token (whole blocks plus the tail block its
    first run wrote), in whole pages; a prompt that leaves the tail's tokens midway gets the whole blocks only
    (a tail is keyed by all of its tokens)."""
    prompt = [random.Random(11).randrange(1, 97) for _ in range(16 * 5 + 11)]
    run_all(disk_scheduler(tmp_path, page_size=page_size), [("a", prompt, 3)])
    again = disk_scheduler(tmp_path, page_size=page_size)
    out = run_all(again, [("b", prompt, 3)])
    assert out["b"]["tokens"] == oracle_generate(prompt, 3)
    usable = (len(prompt) - 1) // page_size * page_size
    assert out["b"]["cached_tokens"] == details(again, "b") == usable
    shorter = prompt[:16 * 5 + 6] + [5]
    third = disk_scheduler(tmp_path, page_size=page_size)
    out = run_all(third, [("c", shorter, 3)])
    assert out["c"]["tokens"] == oracle_generate(shorter, 3)
    assert out["c"]["cached_tokens"] == details(third, "c") == 16 * 5
