"""DiskKVStore's payload checks: a store with the native checksum64 writes kind-1 files and rejects
(and deletes) one whose payload was zeroed or whose bytes were swapped; a store without it reads crc32
files, and treats a kind-1 file as a miss, never as a hit."""

import random

import pytest

from radixlm.radix_cache.disk_store import _FIXED, MAGIC, DiskKVStore

cpu_native = pytest.importorskip("radixlm.kernels.cpu_native")
native = pytest.mark.skipif(not cpu_native.available(), reason="no native kernels")
HEADER = b"h" * 32


def _block(seed):
    rng = random.Random(seed)
    return bytes(32 * [seed]), [rng.randrange(1000) for _ in range(16)], rng.randbytes(16 * 4096)


@native
@pytest.mark.parametrize("damage", ["zeroed page", "swapped pages", "flipped bit", "none"])
def test_checksum64_files_round_trip_and_reject_damage(tmp_path, damage):
    store = DiskKVStore(tmp_path, HEADER, 1 << 30, cpu_native.checksum64)
    key, tokens, payload = _block(1)
    assert store.write(key, tokens, payload)
    path = store.path(key)
    data = bytearray(path.read_bytes())
    start = len(MAGIC) + _FIXED.size + 8 * len(tokens)
    if damage == "zeroed page":
        data[start + 4096:start + 8192] = bytes(4096)
    elif damage == "swapped pages":
        data[start:start + 8192] = data[start + 4096:start + 8192] + data[start:start + 4096]
    elif damage == "flipped bit":
        data[start + 5000] ^= 1
    path.write_bytes(bytes(data))
    got = store.read(key, tokens)
    if damage == "none":
        assert bytes(got) == payload
    else:
        assert got is None and not path.exists() and store.counters["corrupt"] == 1


@native
def test_a_store_without_checksum64_misses_kind_1_files_and_reads_crc32_ones(tmp_path):
    key, tokens, payload = _block(2)
    DiskKVStore(tmp_path, HEADER, 1 << 30, cpu_native.checksum64).write(key, tokens, payload)
    assert DiskKVStore(tmp_path, HEADER, 1 << 30).read(key, tokens) is None
    key, tokens, payload = _block(3)
    DiskKVStore(tmp_path, HEADER, 1 << 30).write(key, tokens, payload)
    assert bytes(DiskKVStore(tmp_path, HEADER, 1 << 30, cpu_native.checksum64).read(key, tokens)) == payload
