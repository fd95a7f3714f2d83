"""The main process's decoder for the detokenizer's messages (tokenizer_manager._FROM_DETOKENIZER):
every field of io.BatchStrOut decodes as io.decode does, except input_logprobs, which stays raw msgpack
per request (decoded later, in that request's task) and then equals what io.decode gives."""

import msgspec

from radixlm.runtime import io_struct as io
from radixlm.runtime.server import tokenizer_manager as tm


def _message() -> io.BatchStrOut:
    top = [[-0.25, 7], [-1.5, 9]]
    return io.BatchStrOut(
        rids=["a", "b", "c"], text_deltas=["x", "", "z"], new_token_ids=[[1], [], [2, 3]],
        finish_reasons=[None, {"type": "abort", "status_code": 400, "message": "m"}, {"type": "length"}],
        prompt_tokens=[3, 4, 5], completion_tokens=[1, 0, 2], cached_tokens=[0, 2, 1], forward_passes=[1, 1, 2],
        output_logprobs=[[[-0.5, 1, None]], None, [[-0.1, 2, top], [-0.2, 3, top]]],
        input_logprobs=[None, [[None, 5, None], [-1.0, 6, top]], [[None, 8, None]]],
        disk_cached_tokens=[None, 2, None])


def test_every_field_but_input_logprobs_decodes_as_io_decode_does():
    data = io.encode(_message())
    eager, lazy = io.decode(data, "tokenizer"), tm._FROM_DETOKENIZER.decode(data)
    assert type(lazy).__name__ == "BatchStrOut"
    for f in msgspec.structs.fields(io.BatchStrOut):
        if f.name != "input_logprobs":
            assert getattr(lazy, f.name) == getattr(eager, f.name), f.name
    assert [raw == tm._NIL for raw in lazy.input_logprobs] == [True, False, False]
    assert [None if raw == tm._NIL else msgspec.msgpack.decode(raw) for raw in lazy.input_logprobs] == \
        eager.input_logprobs


def test_control_messages_decode_to_their_own_type():
    fields = {f.name: f for f in msgspec.structs.fields(io.ControlOut)}
    sample = {name: ({"x": 1} if "dict" in str(f.type) else "kind" if name == "kind" else 0)
              for name, f in fields.items() if f.required}
    msg = io.ControlOut(**sample)
    out = tm._FROM_DETOKENIZER.decode(io.encode(msg))
    assert isinstance(out, io.ControlOut) and out == io.decode(io.encode(msg), "tokenizer")
