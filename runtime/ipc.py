"""ZeroMQ plumbing: ipc:// sockets in a private folder, msgpack messages from io_struct."""

import os
import tempfile

import zmq

from radixlm.runtime import io_struct

POLL_MS = 200


def make_ipc_dir() -> str:
    """A fresh folder only this user can enter (mode 0700) for the ipc:// socket files."""
    path = tempfile.mkdtemp(prefix="radixlm-")
    os.chmod(path, 0o700)
    return path


def ipc_addresses(ipc_dir: str) -> dict:
    return {name: f"ipc://{os.path.join(ipc_dir, name)}" for name in ("scheduler", "detokenizer", "tokenizer")}


class ZmqInbox:
    """PULL socket bound at addr; recv() drains what is queued, waiting a little when block is set."""

    def __init__(self, ctx, addr: str, receiver: str):
        self.sock = ctx.socket(zmq.PULL)
        self.sock.bind(addr)
        self.receiver = receiver

    def recv(self, block: bool = False) -> list:
        msgs = []
        if block and not self.sock.poll(POLL_MS):
            return msgs
        while True:
            try:
                data = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return msgs
            msgs.append(io_struct.decode(data, self.receiver))


class ZmqOutbox:
    """PUSH socket connected to addr."""

    def __init__(self, ctx, addr: str):
        self.sock = ctx.socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(addr)

    def send(self, msg) -> None:
        self.sock.send(io_struct.encode(msg))
