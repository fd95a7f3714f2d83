"""Stale IPC folders: a folder whose owner process is dead (or whose pid now names another process)
is removed at start; a live owner's folder, an unmarked folder and other users' names are kept.
Oracle: real processes (a child that has exited, this process) and the folders on disk."""

import os
import subprocess
import sys

from radixlm.runtime.ipc import OWNER_FILE, PREFIX, _start_time, make_ipc_dir, remove_stale_ipc_dirs


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _folder(root, name, owner=None):
    path = root / name
    path.mkdir(mode=0o700)
    (path / "scheduler").write_text("")       # a socket file's place
    if owner is not None:
        (path / OWNER_FILE).write_text(owner)
    return path


def test_dead_owners_folders_are_removed_and_live_ones_kept(tmp_path):
    live = make_ipc_dir(str(tmp_path))                       # this process: alive
    me = os.getpid()
    dead = _folder(tmp_path, PREFIX + "dead", f"{_dead_pid()} 12345")
    reused = _folder(tmp_path, PREFIX + "reused", f"{me} {_start_time(me) + 1}")   # same pid, another process
    unmarked = _folder(tmp_path, PREFIX + "unmarked")
    garbled = _folder(tmp_path, PREFIX + "garbled", "not a pid")
    other = _folder(tmp_path, "other-app", f"{_dead_pid()} 1")
    removed = remove_stale_ipc_dirs(str(tmp_path))
    assert sorted(removed) == sorted([str(dead), str(reused)])
    assert not dead.exists() and not reused.exists()
    for kept in (live, unmarked, garbled, other):
        assert os.path.isdir(kept), kept
    assert (os.stat(live).st_mode & 0o777) == 0o700
    assert remove_stale_ipc_dirs(str(tmp_path)) == []        # idempotent


def test_a_live_child_process_keeps_its_folder(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = _folder(tmp_path, PREFIX + "child", f"{child.pid} {_start_time(child.pid)}")
        assert remove_stale_ipc_dirs(str(tmp_path)) == [] and path.exists()
    finally:
        child.kill()
        child.wait()
    assert remove_stale_ipc_dirs(str(tmp_path)) == [str(path)] and not path.exists()
