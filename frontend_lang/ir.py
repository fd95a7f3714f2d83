"""The IR: small expression objects that a ProgramState executes in order (`s += expr`).

    Text(str)  Gen(name, params...)  Select(name, choices, method)  RoleBlock(role, body)
    RoleBegin(role)  RoleEnd(role)  Seq([...])   (expr + expr builds a Seq)

Each has `execute(state)`, called on the state's worker thread, which owns the state's text while it runs.
"""

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from radixlm.frontend_lang.choice_scoring import CHOICE_METHODS, select_choice


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


@dataclass
class Gen(Expr):
    name: Optional[str]
    max_tokens: int = 128
    stop: Any = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    regex: Optional[str] = None
    json_schema: Any = None
    return_logprob: bool = False
    extra: dict = field(default_factory=dict)

    def sampling_params(self) -> dict:
        params = {"max_new_tokens": self.max_tokens, "stop": self.stop, "temperature": self.temperature,
                  "top_p": self.top_p, "top_k": self.top_k, "regex": self.regex, **self.extra}
        if self.json_schema is not None:
            params["json_schema"] = self.json_schema if isinstance(self.json_schema, str) else \
                json.dumps(self.json_schema)
        return {k: v for k, v in params.items() if v is not None}

    def execute(self, state):
        request = dict(text=state._text, sampling_params=self.sampling_params(),
                       return_logprob=self.return_logprob, logprob_start_len=-1)
        if state._stream is None:
            out = state.backend.generate(**request)
            state._append(out["text"], self.name)
        else:
            out = self._generate_streamed(state, request)
        state._set(self.name, out["text"], out["meta_info"])

    def _generate_streamed(self, state, request) -> dict:
        """Append the text as the backend's cumulative results grow; the last result."""
        out, sent = None, ""
        for out in state.backend.generate_stream(**request):
            if out["text"].startswith(sent):
                state._append(out["text"][len(sent):], self.name)
                sent = out["text"]
        if out is None or out["text"] != sent:
            raise RuntimeError("the backend's streamed text did not grow by appending; its final text "
                               f"{None if out is None else out['text']!r} does not extend {sent!r}")
        return out


@dataclass
class Select(Expr):
    name: Optional[str]
    choices: list
    choices_method: str = "token_length_normalized"

    def __post_init__(self):
        if not self.choices:
            raise ValueError("select needs at least one choice")
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


# ---- the user-facing constructors ----

def gen(name=None, max_tokens=128, stop=None, temperature=None, top_p=None, top_k=None, regex=None,
        json_schema=None, return_logprob=False, **extra) -> Gen:
    return Gen(name, max_tokens, stop, temperature, top_p, top_k, regex, json_schema, return_logprob, extra)


def select(name=None, choices=None, choices_method="token_length_normalized", temperature=None) -> Select:
    return Select(name, list(choices or []), choices_method)


def system(body=None) -> RoleBlock:
    return RoleBlock("system", None if body is None else as_expr(body))


def user(body=None) -> RoleBlock:
    return RoleBlock("user", None if body is None else as_expr(body))


def assistant(body=None) -> RoleBlock:
    return RoleBlock("assistant", None if body is None else as_expr(body))
