"""A grammar compile worker process: `python -m radixlm.constrained.compile_worker`.

Reads length-prefixed msgpack frames on stdin: first {"tokenizer_info": json, "any_whitespace": bool,
"engine": str, "bounded_numbers": bool},
answers ["ready"] once its compiler is built (startup never counts against a compile's deadline),
then takes one [kind, text] job at a time; answers each with ["ok"] once it compiled or ["error",
message for the client].  The compiled grammar stays here: it is the pool's probe of whether the
grammar compiles in time (shipping it back would cost more than compiling it again).  It exits when stdin closes, so it never outlives its scheduler.
XGrammar compiles cannot be interrupted inside a thread: running them here lets the pool kill one
that is past its deadline.  No torch.
"""

from __future__ import annotations

import os
import struct
import sys

import msgspec

_HEAD = struct.Struct(">I")


def read_exact(f, n: int) -> bytes | None:
    """n bytes from a raw (unbuffered) or buffered stream, or None at end of stream."""
    chunks, left = [], n
    while left:
        data = f.read(left)
        if not data:
            return None
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


def read_frame(f):
    head = read_exact(f, _HEAD.size)
    if head is None:
        return None
    body = read_exact(f, _HEAD.unpack(head)[0])
    return None if body is None else msgspec.msgpack.decode(body)


def write_frame(f, obj) -> None:
    data = msgspec.msgpack.encode(obj)
    f.write(_HEAD.pack(len(data)) + data)
    f.flush()


NICENESS = 10   # the import, the compiler build and the slow compiles yield to the model's forward passes


def main() -> None:
    os.nice(NICENESS)
    import xgrammar as xgr

    from radixlm.constrained.compile import GrammarError, Options, compile_key

    stdin = sys.stdin.buffer
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)               # whatever the compiler prints cannot corrupt the frames
    hello = read_frame(stdin)
    if hello is None:
        return
    info = xgr.TokenizerInfo.deserialize_json(hello["tokenizer_info"])
    # a slow compile must not take the cores the running requests decode on (bench/grammar_storm.py: at
    # the scheduler's priority on both cores it made a trivial regex 7.6x slower); idle cores it may have
    compiler = xgr.GrammarCompiler(info, max_threads=max(1, min(4, (os.cpu_count() or 2) // 2)), cache_enabled=False)
    opts = Options(hello.get("engine", "xgrammar"), hello["any_whitespace"], hello.get("bounded_numbers", True),
                   hello.get("indent"))
    try:   # the compile path's own imports are start-up too, not the first grammar's deadline
        compile_key(xgr, compiler, ("json", '{"type": "object", "properties": {"a": {"type": "integer"}}}'), opts)
    except Exception:  # noqa: BLE001 - a failure here is the first real compile's to report
        pass
    write_frame(frames, ["ready"])
    while (job := read_frame(stdin)) is not None:
        try:
            compile_key(xgr, compiler, (job[0], job[1]), opts)     # llguidance: validated without a tokenizer
            write_frame(frames, ["ok"])
        except GrammarError as exc:
            write_frame(frames, ["error", str(exc)])
        except Exception as exc:  # a compiler bug fails this grammar, never the worker
            write_frame(frames, ["error", f"grammar compilation failed: {exc}"])


if __name__ == "__main__":
    main()
