"""ProgramState: the running state of one program, executed in order on its own worker thread.

`s += expr` queues the expression and returns at once; reading (`s["name"]`, `s.text()`,
`s.messages()`, `s.fork()`) waits until everything queued so far has run, so independent states (the
branches of a fork, the programs of a batch) run their model requests concurrently.  The first error
stops the state; it is raised by the next read.  Only the worker thread touches `_text` and the
variables while work is queued.

A program run with `run(stream=True)` runs its body on a thread of its own and records every piece of
text it appends in a TextStream (gens append theirs token by token), which `text_iter()` and
`text_async_iter()` replay; reads from other threads then wait for the whole program.
"""

import contextlib
import copy
import threading
from collections import deque

from radixlm.frontend_lang.chat import role_affixes
from radixlm.frontend_lang.ir import RoleBegin, RoleEnd, SetVar, VarScopeBegin, VarScopeEnd, as_expr
from radixlm.frontend_lang.text_stream import TextStream


class ProgramState:
    def __init__(self, backend, text: str = "", variables=None, meta=None, messages=None, defaults=None):
        self.backend = backend
        self._defaults = dict(defaults or {})   # the run's sampling defaults, in gen() argument names
        self._scopes = {}                 # var_scope name -> where in _text it began
        self._text = text
        self._vars = dict(variables or {})
        self._meta = dict(meta or {})
        self._messages = list(messages or [])
        self._role = None                 # (role, index in _text where the content starts)
        self._lock = threading.Lock()
        self._pending: deque = deque()
        self._running = False
        self._idle = threading.Event()
        self._idle.set()
        self._error = None
        self._stream = None               # a TextStream while the program runs with stream=True
        self._program_thread = None       # the thread running a streamed program's body

    # ---- queueing ----
    def __iadd__(self, other):
        if other is None:
            raise ValueError("tried to append None to a program state")
        self._submit(as_expr(other))
        return self

    def _submit(self, expr) -> None:
        with self._lock:
            self._pending.append(expr)
            self._idle.clear()
            if not self._running:
                self._running = True
                threading.Thread(target=self._drain, daemon=True, name="radixlm-program").start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._running = False
                    self._idle.set()
                    return
                expr = self._pending.popleft()
            if self._error is None:
                try:
                    expr.execute(self)
                except BaseException as exc:  # kept, raised by the next read
                    self._error = exc

    def sync(self) -> "ProgramState":
        """Wait for everything queued so far (a streamed program: for all of it, unless called from its
        body); raise the first error the program hit."""
        self._wait()
        if self._error is not None:
            raise self._error
        return self

    def _wait(self) -> None:
        if self._stream is not None and threading.current_thread() is not self._program_thread:
            self._stream.wait_closed()
        self._idle.wait()

    # ---- streaming ----
    def _run_streamed(self, func, args, kwargs) -> "ProgramState":
        """Start func(self, *args, **kwargs) on a thread of its own and return at once."""
        self._stream = TextStream()
        self._program_thread = threading.Thread(target=self._run_body, args=(func, args, kwargs), daemon=True,
                                                name="radixlm-program-body")
        self._program_thread.start()
        return self

    def _run_body(self, func, args, kwargs) -> None:
        error = None
        try:
            func(self, *args, **kwargs)
        except BaseException as exc:  # the program's own error, unless a queued expression failed first
            error = exc
        self._idle.wait()
        self._error = self._error or error
        self._stream.close(self._error)

    def text_iter(self, var_name=None):
        """The text as it is produced: every piece appended to the state, or (var_name) the pieces of that
        variable.  Ends when the program (or the variable) is complete; a program error is raised here.
        A state not run with stream=True yields its whole text (or the variable) once."""
        if self._stream is None:
            yield self.text() if var_name is None else self[var_name]
            return
        yield from self._stream.iter_pieces(var_name)

    async def text_async_iter(self, var_name=None, return_meta_data=False):
        """text_iter for `async for`; return_meta_data=True yields (piece, meta info): a gen's meta when it
        appended the piece, its output logprobs the delta since the previous piece (SGLang's shape)."""
        if self._stream is None:
            value = self.text() if var_name is None else self[var_name]
            yield (value, self.get_meta_info(var_name)) if return_meta_data else value
            return
        async for piece in self._stream.aiter_pieces(var_name, with_meta=return_meta_data):
            yield piece

    # ---- reading ----
    def text(self) -> str:
        return self.sync()._text

    def __getitem__(self, name):
        return self.sync()._vars[name]

    def __contains__(self, name) -> bool:
        return name in self.sync()._vars

    def get_var(self, name):
        return self[name]

    def set_var(self, name, value) -> None:
        """Set variable `name` after the work queued so far (SGLang's `s[name] = value`)."""
        self._submit(SetVar(name, value))

    def __setitem__(self, name, value) -> None:
        self.set_var(name, value)

    @contextlib.contextmanager
    def var_scope(self, name):
        """The text appended inside the block becomes variable `name`."""
        self._submit(VarScopeBegin(name))
        try:
            yield self
        finally:
            self._submit(VarScopeEnd(name))

    def get_meta_info(self, name):
        return self.sync()._meta.get(name)

    def variables(self) -> dict:
        return dict(self.sync()._vars)

    def messages(self) -> list:
        return [dict(m) for m in self.sync()._messages]

    def error(self):
        self._wait()
        return self._error

    def __repr__(self):
        return f"ProgramState({self.text()!r})"

    # ---- roles ----
    @contextlib.contextmanager
    def _role_block(self, role):
        self._submit(RoleBegin(role))
        try:
            yield self
        finally:
            self._submit(RoleEnd(role))

    def system(self):
        return self._role_block("system")

    def user(self):
        return self._role_block("user")

    def assistant(self):
        return self._role_block("assistant")

    # ---- fork ----
    def fork(self, n: int = 1) -> "ForkGroup":
        """n copies of this state; the shared text is computed and cached once before they start."""
        self.sync()
        if self._role is not None:
            raise ValueError("fork() inside a role block is not supported")
        if self._text:
            self.backend.cache_prefix(text=self._text)
        branches = [ProgramState(self.backend, self._text, self._vars, copy.deepcopy(self._meta), self._messages,
                                 self._defaults) for _ in range(n)]
        return ForkGroup(self, branches)

    @contextlib.contextmanager
    def copy(self):
        """A fork of one branch, joined when the block ends."""
        group = self.fork(1)
        try:
            yield group[0]
        finally:
            group.join()

    # ---- called by expressions on the worker thread ----
    def _append(self, text: str, var=None, meta=None) -> None:
        """Append text; var names the variable it is (part of) the value of, meta its gen's meta info."""
        self._text += text
        if self._stream is not None:
            self._stream.put(var, text, meta)

    def _set(self, name, value, meta) -> None:
        if name is not None:
            self._vars[name] = value
            self._meta[name] = meta
            if self._stream is not None:
                self._stream.end_var(name)

    def _begin_role(self, role: str) -> None:
        if self._role is not None:
            raise ValueError(f"a {role} block inside a {self._role[0]} block")
        prefix, _ = role_affixes(self.backend.tokenizer, role)
        self._append(prefix)
        self._role = (role, len(self._text))

    def _end_role(self, role: str) -> None:
        if self._role is None or self._role[0] != role:
            raise ValueError(f"end of a {role} block that is not open")
        _, suffix = role_affixes(self.backend.tokenizer, role)
        self._messages.append({"role": role, "content": self._text[self._role[1]:]})
        self._append(suffix)
        self._role = None


class ForkGroup:
    """The branches of `s.fork(n)`: indexable and iterable; join() gathers their new variables into s."""

    def __init__(self, parent: ProgramState, branches: list):
        self.parent = parent
        self.branches = branches
        self._before = set(parent._vars)

    def __len__(self):
        return len(self.branches)

    def __getitem__(self, i):
        return self.branches[i]

    def __setitem__(self, i, value):
        """`forks[i] += expr` stores the branch back; only the branch itself may be stored."""
        if value is not self.branches[i]:
            raise TypeError("a fork group holds its branches; only forks[i] += expr may assign forks[i]")

    def __iter__(self):
        return iter(self.branches)

    def __iadd__(self, other):
        """forks += expr, forks += [expr per branch], or forks += (lambda i: expr of branch i)."""
        if callable(other) and not hasattr(other, "execute"):
            items = [other(i) for i in range(len(self.branches))]
        elif isinstance(other, (list, tuple)) and len(other) == len(self.branches):
            items = other
        else:
            items = [other] * len(self.branches)
        for branch, item in zip(self.branches, items):
            branch += item
        return self

    def join(self, mode: str = "gather_variable") -> ProgramState:
        """Wait for every branch; each variable a branch set becomes s[name] = [value per branch].

        mode="concate_and_append" (SGLang: splice the branches' KV caches into the parent) needs a server
        route that SGLang's own server does not serve either; it raises."""
        if mode == "concate_and_append":
            raise ValueError("join(mode='concate_and_append') is not supported: it needs the "
                             "/concate_and_append_request route, which neither radixlm nor SGLang's server serves")
        if mode != "gather_variable":
            raise ValueError(f"join mode must be 'gather_variable' or 'concate_and_append', not {mode!r}")
        for b in self.branches:
            b.sync()
        names = []
        for b in self.branches:
            for name in b._vars:
                if name not in names and (name not in self._before or b._vars[name] is not self.parent._vars.get(name)):
                    names.append(name)
        parent = self.parent
        parent.sync()
        for name in names:
            parent._vars[name] = [b._vars.get(name) for b in self.branches]
            parent._meta[name] = [b._meta.get(name) for b in self.branches]
        return parent
