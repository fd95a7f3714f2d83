"""ZeroMQ plumbing: ipc:// sockets in a private folder, msgpack messages from io_struct."""

import os
import shutil
import tempfile

import msgspec
import zmq

from radixlm.runtime import io_struct

POLL_MS = 200


PREFIX = "radixlm-"
OWNER_FILE = "owner"              # "<pid> <start time>" of the process that made the folder


def _start_time(pid: int):
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def make_ipc_dir(root: str = None) -> str:
    """A fresh folder only this user can enter (mode 0700) for the ipc:// socket files, marked with
    its owner so that a later start can tell whether the owner is gone."""
    path = tempfile.mkdtemp(prefix=PREFIX, dir=root)
    os.chmod(path, 0o700)
    with open(os.path.join(path, OWNER_FILE), "w") as f:
        f.write(f"{os.getpid()} {_start_time(os.getpid())}")
    return path


def _owner_gone(path: str) -> bool:
    try:
        with open(os.path.join(path, OWNER_FILE)) as f:
            pid, started = f.read().split()
    except (OSError, ValueError):
        return False                  # unmarked (or being made right now): never ours to judge
    now = _start_time(int(pid))
    return now is None or str(now) != started     # dead, or the pid now names another process


def remove_stale_ipc_dirs(root: str = None) -> list:
    """Remove this user's IPC folders whose owner process is dead (a server killed with SIGKILL
    cannot clean up); folders of live owners and unmarked folders are kept.  Returns the removed."""
    root = root or tempfile.gettempdir()
    removed = []
    if _start_time(os.getpid()) is None:       # no /proc: nothing can be proven dead
        return removed
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if mine and _owner_gone(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def ipc_addresses(ipc_dir: str, dp_size: int = 1) -> dict:
    """The sockets' addresses; "replicas": each scheduler replica's inbox (the first is "scheduler")."""
    addrs = {name: f"ipc://{os.path.join(ipc_dir, name)}" for name in ("scheduler", "detokenizer", "tokenizer")}
    addrs["replicas"] = [addrs["scheduler"]] + [f"{addrs['scheduler']}-{i}" for i in range(1, dp_size)]
    return addrs


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


class ReplicaOutbox(ZmqOutbox):
    """A scheduler replica's outbox: its control replies carry its rank, so that the front, which fans
    control requests out to every replica, can tell the answers apart."""

    def __init__(self, ctx, addr: str, replica: int = 0):
        super().__init__(ctx, addr)
        self.replica = replica

    def send(self, msg) -> None:
        if isinstance(msg, io_struct.ControlOut) and msg.replica != self.replica:
            msg = msgspec.structs.replace(msg, replica=self.replica)
        super().send(msg)
