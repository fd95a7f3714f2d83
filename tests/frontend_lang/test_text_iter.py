"""Streaming a program's text: run(stream=True) with state.text_iter() / text_async_iter().

Oracles: the same program run without streaming (text, variables and messages must be identical), the
state's own final text and variables (the chunks concatenate to them), and a fake backend whose stream
the test releases piece by piece (each piece reaches the reader before the gen has finished).
"""

import asyncio
import queue
import threading

import pytest

import radixlm as rl
from radixlm.frontend_lang.backends import BaseBackend

ANSWER_TOKENS = 12


@rl.function
def chat(s, question):
    s += rl.system("You answer briefly.")
    s += rl.user(question)
    s += rl.assistant(rl.gen("answer", max_tokens=ANSWER_TOKENS, temperature=0, ignore_eos=True))
    s += rl.user("Pick a colour.")
    with s.assistant():
        s += "I pick"
        s += rl.select("pick", choices=[" red", " green", " blue sky"])
        s += ". Then: "
        s += rl.gen("tail", max_tokens=3, temperature=0)


def collect_async(state, var_name=None) -> list:
    async def gather():
        return [piece async for piece in state.text_async_iter(var_name)]
    return asyncio.run(gather())


def check_streamed_equals_plain(backend):
    plain = chat.run(question="Tell me about the fox", backend=backend)
    state = chat.run(question="Tell me about the fox", backend=backend, stream=True)
    chunks = list(state.text_iter())
    answer_chunks = list(state.text_iter("answer"))

    assert "".join(chunks) == state.text() == plain.text()
    assert state.variables() == plain.variables()
    assert state.messages() == plain.messages()
    assert "".join(answer_chunks) == state["answer"]
    assert state.get_meta_info("answer")["completion_tokens"] == ANSWER_TOKENS
    assert list(state.text_iter("pick")) == [state["pick"]]
    assert collect_async(state) == chunks
    assert collect_async(state, "answer") == answer_chunks


def test_engine_stream_equals_plain_run(backend):
    check_streamed_equals_plain(backend)


def test_endpoint_stream_equals_plain_run(endpoint):
    _, ep = endpoint
    check_streamed_equals_plain(ep)


@rl.function
def long_answer(s):
    s += rl.user("Tell me a story")
    s += rl.assistant(rl.gen("answer", max_tokens=128, temperature=0, ignore_eos=True))


def check_gen_arrives_in_pieces(backend):
    """Results that arrive while the reader is behind are merged (as in SGLang), so one stalled reader can
    see a short gen at once; 128 tokens, tried three times, cannot all be merged unless streaming is broken."""
    for _ in range(3):
        state = long_answer.run(backend=backend, stream=True)
        pieces = list(state.text_iter("answer"))
        assert "".join(pieces) == state["answer"]
        assert state.get_meta_info("answer")["completion_tokens"] == 128
        if len(pieces) > 1:
            return
    raise AssertionError(f"three 128-token gens each arrived in one piece: {pieces}")


def test_engine_gen_arrives_in_pieces(backend):
    check_gen_arrives_in_pieces(backend)


def test_endpoint_gen_arrives_in_pieces(endpoint):
    _, ep = endpoint
    check_gen_arrives_in_pieces(ep)


class StoryError(Exception):
    pass


@rl.function
def fails_after_gen(s):
    s += "Once upon a time"
    s += rl.gen("story", max_tokens=4, temperature=0, ignore_eos=True)
    if s["story"] is not None:
        raise StoryError("the program gave up")


@rl.function
def gen_too_long(s, context):
    s += context
    s += rl.gen("answer", max_tokens=4)


def check_errors_raise_from_iterator(backend):
    state = fails_after_gen.run(backend=backend, stream=True)
    chunks = []
    with pytest.raises(StoryError):
        for chunk in state.text_iter():
            chunks.append(chunk)
    assert chunks[0] == "Once upon a time" and len(chunks) >= 2
    assert "".join(state.text_iter("story")) == "".join(chunks[1:])   # complete before the error
    with pytest.raises(StoryError):
        state.text()

    context = "The quick brown fox jumps over the lazy dog. " * 300      # past the 2048-token context
    state = gen_too_long.run(context, backend=backend, stream=True)
    with pytest.raises(Exception, match="context"):
        list(state.text_iter("answer"))
    with pytest.raises(Exception, match="context"):
        collect_async(state)


def test_engine_errors_raise_from_iterator(backend):
    check_errors_raise_from_iterator(backend)


def test_endpoint_errors_raise_from_iterator(endpoint):
    _, ep = endpoint
    check_errors_raise_from_iterator(ep)


def test_not_streamed_state_yields_whole_text(backend):
    state = chat.run(question="hi", backend=backend)
    assert list(state.text_iter()) == [state.text()]
    assert list(state.text_iter("answer")) == [state["answer"]]


# ---- a fake backend whose stream the test releases piece by piece ----

class ReleasedBackend(BaseBackend):
    """generate_stream yields the cumulative text of each piece the test puts in `pieces` (None ends it)."""

    def __init__(self):
        self.pieces: queue.Queue = queue.Queue()

    def generate_stream(self, text=None, input_ids=None, sampling_params=None, return_logprob=False,
                        logprob_start_len=-1):
        sent = ""
        while (piece := self.pieces.get(timeout=30)) is not None:
            sent += piece
            yield {"text": sent, "output_ids": [], "meta_info": {}}


def test_pieces_reach_the_reader_before_the_gen_finishes():
    fake = ReleasedBackend()
    gate = threading.Event()

    @rl.function
    def prog(s):
        s += "Q:"
        s += rl.gen("a")
        s += "!" if gate.wait(timeout=10) else " (the test never opened the gate)"

    state = prog.run(backend=fake, stream=True)
    everything, answer = state.text_iter(), state.text_iter("a")
    assert next(everything) == "Q:"
    for piece in [" one", " two", " three"]:
        fake.pieces.put(piece)
        assert next(everything) == piece
        assert next(answer) == piece
    fake.pieces.put(None)
    assert list(answer) == []        # "a" is complete: its reader ends though the program has not
    gate.set()
    assert list(everything) == ["!"]
    assert state.text() == "Q: one two three!" and state["a"] == " one two three"


def test_reads_from_other_threads_wait_for_the_streamed_program():
    gate = threading.Event()

    @rl.function
    def prog(s):
        s += "A"
        s += "B" if gate.wait(timeout=10) else "timeout"

    state = prog.run(backend=ReleasedBackend(), stream=True)
    threading.Timer(0.2, gate.set).start()
    assert state.text() == "AB"
