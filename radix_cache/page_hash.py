"""Content keys for KV blocks kept outside memory (no torch).

A block is `block_size` consecutive tokens starting at a multiple of block_size.  Its key chains the
previous block's key with its own token ids, so a key names the whole prefix up to the block's end:
two requests share a block key only when every token before it is the same.  The chain starts from a
header that hashes everything that changes the KV itself (the model's weights, dtype, layer and head
layout, rope, block size, KV format version) and the radix-tree namespace, so servers of different
models, dtypes or namespaces never share a key.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Optional, Sequence

KV_FORMAT_VERSION = 1
KEY_BYTES = 32


def header_key(kv_identity: dict) -> bytes:
    """The chain's start for one KV layout: kv_identity holds plain JSON values (canonicalized here)."""
    blob = json.dumps({"kv_format": KV_FORMAT_VERSION, **kv_identity}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).digest()


def namespace_key(header: bytes, namespace: Optional[str]) -> bytes:
    """Where a namespace's chain starts; None (the shared namespace) differs from every string."""
    tag = b"\x00" if namespace is None else b"\x01" + namespace.encode()
    return hashlib.sha256(header + tag).digest()


def block_key(parent: bytes, tokens: Sequence[int]) -> bytes:
    return hashlib.sha256(parent + struct.pack(f"<{len(tokens)}q", *tokens)).digest()


def chain_keys(start: bytes, tokens: Sequence[int], block_size: int, known: Optional[list] = None) -> list[bytes]:
    """Keys of every whole block of `tokens`; `known` is a list of keys already computed for a
    prefix of the same tokens (extended in place and returned), so a growing sequence hashes each
    block once."""
    keys = known if known is not None else []
    parent = keys[-1] if keys else start
    for i in range(len(keys), len(tokens) // block_size):
        parent = block_key(parent, tokens[i * block_size:(i + 1) * block_size])
        keys.append(parent)
    return keys
