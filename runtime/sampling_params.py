"""Per-request sampling parameters, with SGLang's names and defaults (no torch here).

Contract:
- `SamplingParams(...)` and `SamplingParams.from_dict(d)` check types and normalise
  (`stop` str -> [str], `json_schema` dict -> JSON string, `logit_bias` keys -> int); a wrong type
  raises ValueError. `from_dict` also rejects unknown keys and treats a None value as "default".
- `verify(vocab_size)` checks ranges and cross-field rules; call it once at admission.
- `received(d, vocab_size)` rebuilds, in the scheduler, what the tokenizer manager sent: the
  `to_dict()` of an object it already parsed and verified, taken as it is (no second validation);
  any other dict (a partial one from an in-process caller) is parsed and verified.
- SGLang convention: temperature 0 (or top_k 1) means greedy decoding.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.api.sglang_fields import SAMPLING_FIELDS, check_compat
from radixlm.runtime.stop_regex import check_stop_regex

MAX_N = 128
TOP_K_ALL = 1 << 30  # SGLang's "whole vocabulary" top_k; normalised to -1
_GRAMMAR_FIELDS = ("json_schema", "regex", "ebnf", "structural_tag")
_INT_FIELDS = ("max_new_tokens", "min_new_tokens", "top_k", "n")
_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "repetition_penalty",
                 "frequency_penalty", "presence_penalty")
_BOOL_FIELDS = ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                "no_stop_trim", "jump_forward", "speculative")
_ALIASES = {"sampling_seed": "seed"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass
class SamplingParams:
    """How to sample one request. Mutable; re-run `verify` after changing fields."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    stop: str | list[str] | None = None  # normalised to list[str] | None
    stop_token_ids: list[int] | None = None
    stop_regex: str | list[str] | None = None  # normalised to list[str] | None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    seed: int | None = None
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None  # XGrammar structural tag (JSON), e.g. tool calls
    jump_forward: bool = True
    speculative: bool = True  # false: never drafted for (with --speculative-algorithm)
    logit_bias: dict[str | int, float] | None = None  # normalised to dict[int, float]
    think_end_ids: list[int] | None = None  # the output starts inside a thinking block these ids end
    max_thinking_tokens: int | None = None  # with think_end_ids: force them after this many output tokens

    def __post_init__(self) -> None:
        self._normalise()

    @classmethod
    def accepted_keys(cls) -> list[str]:
        return sorted([f.name for f in dataclasses.fields(cls)] + list(_ALIASES))

    @classmethod
    def from_dict(cls, d: dict | None) -> "SamplingParams":
        """Build from a request's `sampling_params` dict. Raises ValueError on unknown keys or
        wrong types. Keys with value None take the default. `sampling_seed` aliases `seed`."""
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ValueError(f"sampling_params must be an object, got {d!r}")
        accepted = cls.accepted_keys()
        unknown = sorted(str(k) for k in d if k not in accepted and k not in SAMPLING_FIELDS)
        if unknown:
            raise ValueError(f"unknown sampling parameter(s): {', '.join(unknown)}; "
                             f"accepted names are: {', '.join(sorted(set(accepted) | set(SAMPLING_FIELDS)))}")
        compat = {k: v for k, v in d.items() if k not in accepted and v is not None}
        if not isinstance(compat.get("custom_params", {}), dict):
            raise ValueError(f"custom_params must be an object, got {compat['custom_params']!r}")
        check_compat(compat, SAMPLING_FIELDS, "sampling_params")
        kw: dict[str, Any] = {}
        for key, value in d.items():
            if value is None or key in compat:
                continue
            name = _ALIASES.get(key, key)
            if name in kw and kw[name] != value:
                raise ValueError(f"conflicting values for {name}: {kw[name]!r} and {value!r}")
            kw[name] = value
        return cls(**kw)

    @classmethod
    def received(cls, d: dict, vocab_size: int | None = None) -> "SamplingParams":
        """The params of a TokenizedGenerateReq; ValueError as from_dict/verify for a dict that is
        not a complete to_dict() (those are checked here, the complete ones were at the sender)."""
        if not isinstance(d, dict) or d.keys() != _FIELD_NAMES:
            params = cls.from_dict(d)
            params.verify(vocab_size)
            return params
        params = object.__new__(cls)
        params.__dict__.update(d)
        if params.logit_bias:  # a serializer may have turned the int keys into strings
            params.logit_bias = {int(k): v for k, v in params.logit_bias.items()}
        return params

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of all fields (lists and dicts copied); `from_dict(to_dict())` round-trips."""
        return dataclasses.asdict(self)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    # -- checks ---------------------------------------------------------------------------------

    def _normalise(self) -> None:
        for name in _INT_FIELDS:
            if not _is_int(getattr(self, name)):
                raise ValueError(f"{name} must be an integer, got {getattr(self, name)!r}")
        for name in _FLOAT_FIELDS:
            v = getattr(self, name)
            if not (_is_int(v) or isinstance(v, float)):
                raise ValueError(f"{name} must be a number, got {v!r}")
            setattr(self, name, float(v))
        for name in _BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a boolean, got {getattr(self, name)!r}")
        if self.top_k >= TOP_K_ALL:
            self.top_k = -1
        if self.seed is not None and not _is_int(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        for name in ("json_schema", "structural_tag"):
            if isinstance(getattr(self, name), dict):
                setattr(self, name, json.dumps(getattr(self, name)))
        for name in _GRAMMAR_FIELDS:
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{name} must be a string, got {v!r}")
        self._normalise_stop()
        self._normalise_logit_bias()
        self._normalise_thinking()

    def _normalise_thinking(self) -> None:
        ids = self.think_end_ids
        if ids is not None:
            if not isinstance(ids, (list, tuple)) or not ids or not all(_is_int(t) for t in ids):
                raise ValueError(f"think_end_ids must be a non-empty list of integers, got {ids!r}")
            self.think_end_ids = list(ids)
        if self.max_thinking_tokens is not None and not _is_int(self.max_thinking_tokens):
            raise ValueError(f"max_thinking_tokens must be an integer, got {self.max_thinking_tokens!r}")

    def _normalise_stop(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is not None:
            if not isinstance(self.stop, (list, tuple)):
                raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
            for s in self.stop:
                if not isinstance(s, str) or not s:
                    raise ValueError(f"stop entries must be non-empty strings, got {s!r}")
            self.stop = list(self.stop)
        if self.stop_token_ids is not None:
            ids = self.stop_token_ids
            if not isinstance(ids, (list, tuple)) or not all(_is_int(t) for t in ids):
                raise ValueError(f"stop_token_ids must be a list of integers, got {ids!r}")
            self.stop_token_ids = list(ids)
        if isinstance(self.stop_regex, str):
            self.stop_regex = [self.stop_regex]
        if self.stop_regex is not None:
            check_stop_regex(self.stop_regex)
            self.stop_regex = list(self.stop_regex) or None

    def _normalise_logit_bias(self) -> None:
        if self.logit_bias is None:
            return
        if not isinstance(self.logit_bias, dict):
            raise ValueError(f"logit_bias must be an object, got {self.logit_bias!r}")
        out: dict[int, float] = {}
        for k, v in self.logit_bias.items():
            try:
                tid = k if _is_int(k) else int(k) if isinstance(k, str) else None
            except ValueError:
                tid = None
            if tid is None:
                raise ValueError(f"logit_bias keys must be token ids, got {k!r}")
            if not (_is_int(v) or isinstance(v, float)):
                raise ValueError(f"logit_bias values must be numbers, got {v!r}")
            if tid in out:
                raise ValueError(f"logit_bias has token id {tid} twice")
            out[tid] = float(v)
        self.logit_bias = out

    def verify(self, vocab_size: int | None = None) -> None:
        """Raise ValueError unless every field is in range. logit_bias token ids are checked against
        [0, vocab_size) when vocab_size is given, else only for >= 0; stop_token_ids outside it are dropped."""
        self._normalise()

        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(msg)

        need(self.max_new_tokens >= 0, f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        need(0 <= self.min_new_tokens <= self.max_new_tokens,
             f"min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}], "
             f"got {self.min_new_tokens}")
        need(self.temperature >= 0 and math.isfinite(self.temperature),
             f"temperature must be >= 0, got {self.temperature}")
        need(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        need(self.top_k == -1 or self.top_k >= 1,
             f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        need(0 <= self.min_p <= 1, f"min_p must be in [0, 1], got {self.min_p}")
        need(0 < self.repetition_penalty < math.inf,
             f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for name in ("frequency_penalty", "presence_penalty"):
            v = getattr(self, name)
            need(-2 <= v <= 2, f"{name} must be in [-2, 2], got {v}")
        need(1 <= self.n <= MAX_N, f"n must be in [1, {MAX_N}], got {self.n}")
        grammars = [g for g in _GRAMMAR_FIELDS if getattr(self, g) is not None]
        need(len(grammars) <= 1,
             f"at most one of json_schema, regex, ebnf, structural_tag may be set, got {', '.join(grammars)}")
        if self.json_schema is not None:
            try:
                json.loads(self.json_schema)
            except ValueError as e:
                raise ValueError(f"json_schema is not valid JSON: {e}") from None
        hi = vocab_size if vocab_size is not None else math.inf
        need(all(0 <= t < hi for t in self.think_end_ids or []),
             f"think_end_ids must be token ids in [0, {vocab_size}), got {self.think_end_ids}")
        if self.max_thinking_tokens is not None:
            need(self.max_thinking_tokens >= 0, f"max_thinking_tokens must be >= 0, got {self.max_thinking_tokens}")
            need(self.think_end_ids is not None, "max_thinking_tokens needs think_end_ids (the ids that end the "
                                                 "thinking, which the budget forces)")
        if self.stop_token_ids:   # ids outside the vocabulary can never be sampled: ignored, as SGLang does
            self.stop_token_ids = [t for t in self.stop_token_ids if 0 <= t < hi]
        for t in self.logit_bias or {}:
            need(0 <= t < hi, f"logit_bias token id {t} is outside the vocabulary "
                              f"[0, {vocab_size if vocab_size is not None else 'inf'})")
        for v in (self.logit_bias or {}).values():
            need(math.isfinite(v), f"logit_bias values must be finite, got {v}")


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(SamplingParams))
