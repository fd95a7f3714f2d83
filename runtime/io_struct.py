"""IPC messages between the main process, the scheduler and the detokenizer.

msgspec Structs (dataclass-like, tagged, no logic, no torch), serialized as msgpack: never pickle.
Token ids travel as list[int].  Grouped by receiver.
"""

from typing import Any, Optional, Union

import msgspec


class _Msg(msgspec.Struct, tag=True, omit_defaults=True):
    pass


# ---- to the scheduler (from the tokenizer manager) ----

class TokenizedGenerateReq(_Msg):
    rid: str
    input_ids: list[int]
    sampling_params: dict[str, Any]
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    stream: bool = False
    cache_namespace: Optional[str] = None      # extra_key / cache_salt: KV is shared only within one namespace


class AbortReq(_Msg):
    rid: str


class FlushCacheReq(_Msg):
    pass


class GetServerInfoReq(_Msg):
    pass


# ---- to the detokenizer (from the scheduler) ----

class BatchTokenOut(_Msg):
    """One scheduler step's progress; lists are parallel, one entry per request that advanced."""
    rids: list[str]
    new_token_ids: list[list[int]]             # tokens appended this step, per request
    finish_reasons: list[Optional[dict[str, Any]]]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    cached_tokens: list[int]
    forward_passes: list[int]                  # forward passes that produced an output token, so far
    skip_special_tokens: list[bool]
    no_stop_trim: list[bool]
    stops: list[Optional[list[str]]]                        # stop strings, so streamed text holds them back
    output_logprobs: list[Optional[list[list[Any]]]]       # per new token: [logprob, id, top]
    input_logprobs: list[Optional[list[list[Any]]]]        # once, when the prompt finishes
    stop_regexes: list[Optional[list[str]]] = []           # stop_regex patterns (hold-back and trimming)
    disk_cached_tokens: list[Optional[int]] = []           # of cached_tokens, those loaded from the disk tier (None: no tier)
    host_cached_tokens: list[Optional[int]] = []           # of cached_tokens, those loaded from the host tier (None: no tier)
    spec_stats: list[Optional[list[int]]] = []             # speculative decoding: [verify passes, accepted draft tokens] (None: off)


class ControlOut(_Msg):
    """A reply to FlushCacheReq / GetServerInfoReq, passed through the detokenizer unchanged."""
    kind: str
    success: bool = True
    message: str = ""
    info: dict[str, Any] = {}
    replica: int = 0                           # which data-parallel scheduler replica answered


# ---- to the tokenizer manager (from the detokenizer) ----

class BatchStrOut(_Msg):
    rids: list[str]
    text_deltas: list[str]
    new_token_ids: list[list[int]]
    finish_reasons: list[Optional[dict[str, Any]]]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    cached_tokens: list[int]
    forward_passes: list[int]
    output_logprobs: list[Optional[list[list[Any]]]]
    input_logprobs: list[Optional[list[list[Any]]]]
    disk_cached_tokens: list[Optional[int]] = []
    host_cached_tokens: list[Optional[int]] = []
    spec_stats: list[Optional[list[int]]] = []


ToScheduler = Union[TokenizedGenerateReq, AbortReq, FlushCacheReq, GetServerInfoReq]
ToDetokenizer = Union[BatchTokenOut, ControlOut]
ToTokenizer = Union[BatchStrOut, ControlOut]

def with_raw_field(cls, name: str):
    """A struct that is `cls` field for field, with the same tag, except that `name` is a
    list[msgspec.Raw]: each entry left as undecoded msgpack. One message can carry hundreds of
    thousands of input logprobs (n x prompt x top_logprobs_num); a process that only passes them
    on, or renders them later, should not spend a second building Python objects for them first."""
    fields = []
    for f in msgspec.structs.fields(cls):
        kind = list[msgspec.Raw] if f.name == name else f.type
        if f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
        elif f.default is not msgspec.NODEFAULT:
            fields.append((f.name, kind, f.default))
        else:
            fields.append((f.name, kind))
    return msgspec.defstruct(cls.__name__, fields, tag=cls.__name__, omit_defaults=True)


_encoder = msgspec.msgpack.Encoder()
# the detokenizer passes each request's input logprobs on to the tokenizer manager as they came
_types = {"scheduler": ToScheduler, "detokenizer": Union[with_raw_field(BatchTokenOut, "input_logprobs"), ControlOut],
          "tokenizer": ToTokenizer}
_decoders = {k: msgspec.msgpack.Decoder(v) for k, v in _types.items()}


def encode(msg) -> bytes:
    return _encoder.encode(msg)


def decode(data: bytes, receiver: str):
    """receiver: 'scheduler', 'detokenizer' or 'tokenizer'."""
    return _decoders[receiver].decode(data)
