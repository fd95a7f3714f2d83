"""TextStream: the pieces a streamed program appends to its state, replayable by any number of readers.

The program's worker thread calls `put(var, piece)` for each piece of text it appends (var names the
gen/select variable the piece belongs to, None for constant text), `end_var(name)` when a variable is
complete, and `close(error)` when the program has finished.  Readers iterate from the first piece:

    iter_pieces(None)    every piece appended to the state, in order, until the program finishes
    iter_pieces("name")  the pieces of variable "name", until that variable is complete
    with_meta=True       (piece, meta) pairs: the meta info the gen had when it appended the piece

A reader whose program failed (before its variable completed) gets the error raised after the last piece.
"""

import asyncio
import threading

_VAR_END = None   # the piece of a (name, piece) event that says variable `name` is complete


class TextStream:
    def __init__(self):
        self._cond = threading.Condition()
        self._events: list = []          # (var name or None, piece or _VAR_END)
        self._done = False
        self._error = None
        self._wakers: set = set()        # callbacks of the async readers, called on every change

    # ---- writer (the program's worker thread) ----
    def put(self, var, piece: str, meta=None) -> None:
        if piece:
            self._publish(lambda: self._events.append((var, piece, meta)))

    def end_var(self, name) -> None:
        self._publish(lambda: self._events.append((name, _VAR_END, None)))

    def close(self, error=None) -> None:
        def finish():
            self._done, self._error = True, error
        self._publish(finish)

    def wait_closed(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._done)

    def _publish(self, change) -> None:
        with self._cond:
            change()
            self._cond.notify_all()
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    # ---- readers ----
    def iter_pieces(self, var_name=None, with_meta=False):
        seen = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: len(self._events) > seen or self._done)
            pieces, seen, finished, error = self._read(seen, var_name, with_meta)
            yield from pieces
            if finished:
                if error is not None:
                    raise error
                return

    async def aiter_pieces(self, var_name=None, with_meta=False):
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake():
            try:
                loop.call_soon_threadsafe(changed.set)
            except RuntimeError:   # the reader's loop is closed
                pass

        with self._cond:
            self._wakers.add(wake)
        try:
            seen = 0
            while True:
                changed.clear()
                pieces, seen, finished, error = self._read(seen, var_name, with_meta)
                for piece in pieces:
                    yield piece
                if finished:
                    if error is not None:
                        raise error
                    return
                await changed.wait()
        finally:
            with self._cond:
                self._wakers.discard(wake)

    def _read(self, seen: int, var_name, with_meta=False) -> tuple:
        """(pieces for the reader after event `seen`, the new `seen`, whether the reader is finished,
        the error to raise then: the program's, unless the reader's variable completed first)."""
        with self._cond:
            events, done, error = self._events[seen:], self._done, self._error
        pieces, var_complete = _select(events, var_name, with_meta)
        if var_complete:
            return pieces, seen + len(events), True, None
        return pieces, seen + len(events), done, error


def _select(events: list, var_name, with_meta=False) -> tuple:
    """(the pieces of events a reader of var_name yields, whether var_name completed in them)."""
    pieces = []
    for var, piece, meta in events:
        if var_name is None:
            if piece is not _VAR_END:
                pieces.append((piece, meta) if with_meta else piece)
        elif var == var_name:
            if piece is _VAR_END:
                return pieces, True
            pieces.append((piece, meta) if with_meta else piece)
    return pieces, False
