"""GenerateReqInput: the native /generate request (also what Engine.generate builds), normalised.

Plain Python, no torch.  `normalize()` checks types and shapes and returns one SingleReq per prompt,
raising ValueError with a message that names the problem.  `from_body(body)` splits a JSON body into
the fields radixlm implements, the SGLang fields it accepts with no effect or only at their default
(`compat`, checked against runtime/api/sglang_fields.py), and unknown names (`extra`, refused).
"""

import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from radixlm.runtime.api.sglang_fields import GENERATE_FIELDS, check_compat, split_fields
from radixlm.runtime.sampling_params import SamplingParams


@dataclass
class SingleReq:
    rid: str
    text: Optional[str]
    input_ids: Optional[list]
    sampling_params: dict
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    cache_namespace: Optional[str] = None   # from extra_key / cache_salt; None: the shared namespace
    log_metrics: bool = True
    params: Optional[SamplingParams] = None  # sampling_params parsed by normalize() (not yet verified)


@dataclass
class GenerateReqInput:
    text: Any = None
    input_ids: Any = None
    sampling_params: Any = None
    rid: Any = None
    return_logprob: Any = False
    logprob_start_len: Any = -1
    top_logprobs_num: Any = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    log_metrics: Any = True
    extra_key: Any = None          # SGLang's cache namespace (a string, or one per prompt)
    cache_salt: Any = None         # vLLM's name for the same; both given: both must agree to share
    compat: dict = field(default_factory=dict)   # SGLang fields with no effect here (sglang_fields.py)
    extra: dict = field(default_factory=dict)    # unknown names: refused by normalize()

    @classmethod
    def from_body(cls, body: dict) -> "GenerateReqInput":
        """A /generate JSON object; null values take their defaults."""
        impl, compat, extra = split_fields(body, GENERATE_FIELDS, _IMPLEMENTED)
        return cls(**impl, compat=compat, extra=extra)

    @property
    def is_batch(self) -> bool:
        return isinstance(self.text, list) or (
            isinstance(self.input_ids, list) and bool(self.input_ids) and isinstance(self.input_ids[0], list))

    def normalize(self) -> list:
        if self.extra:
            raise ValueError(f"unknown field(s): {', '.join(sorted(map(str, self.extra)))}")
        check_compat(self.compat, GENERATE_FIELDS, "request")
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("give exactly one of 'text' and 'input_ids'")
        prompts = self._prompts()
        n = len(prompts)
        if n == 0:
            raise ValueError("the batch is empty")
        params = _per_item(self.sampling_params, n, "sampling_params", dict, {})
        rid = [f"{self.rid}_{i}" for i in range(n)] if self.is_batch and isinstance(self.rid, str) else self.rid
        rids = _per_item(rid, n, "rid", str, None)
        given = [r for r in rids if r is not None]
        if len(set(given)) != len(given):
            raise ValueError("rid has duplicate ids: each request of a batch needs its own")
        ret_lp = _per_item(self.return_logprob, n, "return_logprob", bool, False)
        starts = _per_item(self.logprob_start_len, n, "logprob_start_len", int, -1)
        tops = _per_item(self.top_logprobs_num, n, "top_logprobs_num", int, 0)
        for name in ("stream", "log_metrics", "return_text_in_logprobs"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a boolean")
        spaces = _namespaces(_per_item(self.extra_key, n, "extra_key", str, None),
                             _per_item(self.cache_salt, n, "cache_salt", str, None))
        out = []
        for i, (text, ids) in enumerate(prompts):
            if params[i] is None:
                params[i] = {}
            if not isinstance(params[i], dict):
                raise ValueError("sampling_params must be an object")
            if tops[i] < 0:
                raise ValueError("top_logprobs_num must be >= 0")
            if starts[i] < -1:
                raise ValueError("logprob_start_len must be >= -1")
            parsed = SamplingParams.from_dict(params[i])
            out.append(SingleReq(rids[i] or uuid.uuid4().hex, text, ids, params[i], ret_lp[i], starts[i], tops[i],
                                 self.return_text_in_logprobs, self.stream, spaces[i], self.log_metrics, parsed))
        return out

    def _prompts(self) -> list:
        if self.text is not None:
            texts = self.text if isinstance(self.text, list) else [self.text]
            for t in texts:
                if not isinstance(t, str):
                    raise ValueError("text must be a string or a list of strings")
            return [(t, None) for t in texts]
        ids = self.input_ids
        if not isinstance(ids, list):
            raise ValueError("input_ids must be a list of token ids or a list of such lists")
        batch = ids if (ids and isinstance(ids[0], list)) else [ids]
        for seq in batch:
            if not isinstance(seq, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in seq):
                raise ValueError("input_ids must be a list of integers or a list of lists of integers")
        return [(None, list(seq)) for seq in batch]


_IMPLEMENTED = {"text", "input_ids", "sampling_params", "rid", "return_logprob", "logprob_start_len",
                "top_logprobs_num", "return_text_in_logprobs", "stream", "log_metrics", "extra_key", "cache_salt"}


def _namespaces(keys: list, salts: list) -> list:
    """One cache namespace per prompt: None (shared) unless an extra_key or cache_salt is given;
    length-prefixed so that no two different (key, salt) pairs give the same namespace."""
    return [None if not k and not s else f"{len(k or '')}:{k or ''}|{s or ''}" for k, s in zip(keys, salts)]


def _per_item(value, n, name, kind, default):
    if isinstance(value, list) and kind is not list:
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} entries for {n} prompts")
        items = value
    else:
        items = [value] * n
    out = []
    for v in items:
        if v is None:
            v = default
        if v is not None and kind is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"{name} must be an integer")
        if v is not None and kind is bool and not isinstance(v, bool):
            raise ValueError(f"{name} must be a boolean")
        if v is not None and kind is str and not isinstance(v, str):
            raise ValueError(f"{name} must be a string")
        out.append(v if kind is not dict else (dict(v) if isinstance(v, dict) else v))
    return out
