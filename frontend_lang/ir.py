"""The IR: small expression objects that a ProgramState executes in order (`s += expr`).

    Text(str)  Gen(name, params...)  Select(name, choices, method)  RoleBlock(role, body)
    RoleBegin(role)  RoleEnd(role)  Seq([...])   (expr + expr builds a Seq)
    SetVar(name, value)  VarScopeBegin(name)  VarScopeEnd(name)

Each has `execute(state)`, called on the state's worker thread, which owns the state's text while it runs.
"""

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from radixlm.frontend_lang.choice_scoring import CHOICE_METHODS, select_choice
from radixlm.frontend_lang.dtypes import dtype_constraint


class Expr:
    def execute(self, state) -> None:
        raise NotImplementedError

    def __add__(self, other):
        return Seq([self, as_expr(other)])

    def __radd__(self, other):
        return Seq([as_expr(other), self])


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        return Text(x)
    if isinstance(x, (list, tuple)):
        return Seq([as_expr(i) for i in x])
    raise TypeError(f"cannot add {type(x).__name__} to a program state")


@dataclass
class Text(Expr):
    text: str

    def execute(self, state):
        state._append(self.text)


@dataclass
class Seq(Expr):
    items: list

    def execute(self, state):
        for item in self.items:
            item.execute(state)


REQUEST_KEYS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")
RENAMED = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}
DEFAULT_MAX_TOKENS = 128


@dataclass
class Gen(Expr):
    """params: SGLang gen() argument names (max_tokens, min_tokens, stop, regex, return_logprob, ...)."""
    name: Optional[str]
    params: dict = field(default_factory=dict)
    dtype: Any = None

    def request(self, defaults: dict) -> dict:
        """The backend request: the gen's params over the run's defaults, dtype turned into a regex."""
        merged = {"max_tokens": DEFAULT_MAX_TOKENS, **defaults, **self.params}
        if self.dtype is not None:
            merged["regex"], stops_at_space = dtype_constraint(self.dtype)
            if stops_at_space:
                stop = merged.get("stop") or []
                merged["stop"] = ([stop] if isinstance(stop, str) else list(stop)) + [" ", "\n"]
        request = {k: merged.pop(k) for k in REQUEST_KEYS if k in merged}
        if merged.get("json_schema") is not None and not isinstance(merged["json_schema"], str):
            merged["json_schema"] = json.dumps(merged["json_schema"])
        request["sampling_params"] = {RENAMED.get(k, k): v for k, v in merged.items() if v is not None}
        request["return_logprob"] = bool(request.get("return_logprob"))
        request.setdefault("logprob_start_len", -1)
        return request

    def execute(self, state):
        request = dict(text=state._text, **self.request(state._defaults))
        if state._stream is None:
            out = state.backend.generate(**request)
            state._append(out["text"], self.name)
        else:
            out = self._generate_streamed(state, request)
        state._set(self.name, out["text"], out["meta_info"])

    def _generate_streamed(self, state, request) -> dict:
        """Append the text as the backend's cumulative results grow; the last result."""
        out, sent, sent_logprobs = None, "", 0
        for out in state.backend.generate_stream(**request):
            if out["text"].startswith(sent) and len(out["text"]) > len(sent):
                meta, sent_logprobs = _piece_meta(out["meta_info"], sent_logprobs)
                state._append(out["text"][len(sent):], self.name, meta)
                sent = out["text"]
        if out is None or out["text"] != sent:
            raise RuntimeError("the backend's streamed text did not grow by appending; its final text "
                               f"{None if out is None else out['text']!r} does not extend {sent!r}")
        return out


def _piece_meta(meta: dict, sent_logprobs: int) -> tuple:
    """(a streamed piece's meta info: SGLang's per-event output logprob delta since the last piece,
    the number of output logprobs sent so far)."""
    meta = dict(meta)
    if "output_token_logprobs" in meta:
        cumulative = meta["output_token_logprobs"] or []
        meta["output_token_logprobs"] = cumulative[sent_logprobs:]
        meta["output_token_logprobs_length"] = sent_logprobs = len(cumulative)
    return meta, sent_logprobs


@dataclass
class Select(Expr):
    name: Optional[str]
    choices: list
    choices_method: str = "token_length_normalized"

    def __post_init__(self):
        if not self.choices:
            raise ValueError("select needs at least one choice")
        self.choices_method = getattr(self.choices_method, "method_name", self.choices_method)
        if self.choices_method not in CHOICE_METHODS:
            raise ValueError(f"choices_method must be one of {CHOICE_METHODS}, not {self.choices_method!r}")

    def execute(self, state):
        index, meta = select_choice(state.backend, state._text, list(self.choices), self.choices_method)
        value = self.choices[index]
        state._append(value, self.name)
        state._set(self.name, value, meta)


@dataclass
class RoleBegin(Expr):
    role: str

    def execute(self, state):
        state._begin_role(self.role)


@dataclass
class RoleEnd(Expr):
    role: str

    def execute(self, state):
        state._end_role(self.role)


@dataclass
class RoleBlock(Expr):
    role: str
    body: Optional[Expr]

    def execute(self, state):
        state._begin_role(self.role)
        if self.body is not None:
            self.body.execute(state)
        state._end_role(self.role)


@dataclass
class SetVar(Expr):
    """s["name"] = value: set in order with the queued work."""
    name: str
    value: Any

    def execute(self, state):
        state._vars[self.name] = self.value


@dataclass
class VarScopeBegin(Expr):
    name: str

    def execute(self, state):
        state._scopes[self.name] = len(state._text)


@dataclass
class VarScopeEnd(Expr):
    """The text appended since the scope began becomes variable `name`."""
    name: str

    def execute(self, state):
        if self.name not in state._scopes:
            raise ValueError(f"end of var_scope {self.name!r} that did not begin")
        start = state._scopes.pop(self.name)
        state._set(self.name, state._text[start:], None)
