"""Recycled read buffers for the disk tier's loader (no torch).

Reading a 45 MB prefix into fresh bytearrays costs as much in page faults as the read itself; the
loader reads into buffers the scheduler gives back once their blocks are installed.  Thread-safe: the
loader takes, the scheduler thread gives back.
"""

import threading


class ReadBuffers:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._free: dict[int, list] = {}      # size -> bytearrays of that size
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bytearray:
        with self._lock:
            free = self._free.get(size)
            if free:
                self._bytes -= size
                return free.pop()
        return bytearray(size)

    def give_back(self, payloads) -> None:
        """The buffers under these payloads (views that read() returned) are free again."""
        with self._lock:
            for p in payloads:
                buf = p.obj if isinstance(p, memoryview) else None
                if isinstance(buf, bytearray) and self._bytes + len(buf) <= self.max_bytes:
                    self._free.setdefault(len(buf), []).append(buf)
                    self._bytes += len(buf)
