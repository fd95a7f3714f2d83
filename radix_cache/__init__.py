"""The radix tree of token prefixes and the KV slot allocator (no torch), the slot ledger, page hashes, and the disk and host block stores."""
