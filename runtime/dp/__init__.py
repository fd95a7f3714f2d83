"""Data parallelism: the front that routes requests to scheduler replicas by shadow radix match, and their control messages."""
