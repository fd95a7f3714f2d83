"""Tool-call parsers: known outputs give the expected calls and content, and every split of an
output (hypothesis, at every character boundary) gives the same result as the whole text."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlm.runtime.openai.tool_calls import choose_format, generic_json, hermes, llama3_json
from radixlm.runtime.openai.tool_calls.scan import JsonStringDecoder

HERMES = [
    ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "d": [1, {"x": "}"}]}}\n'
     '</tool_call>\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n',
     "Let me check.", [("get_weather", '{"city": "Paris", "d": [1, {"x": "}"}]}'), ("f", "{}")]),
    ("no calls here <tool_ca", "no calls here <tool_ca", []),
    ('<tool_call>{ "name" : "g\\"q", "arguments" :{"s": "\\\\\\"<tool_call>"} }</tool_call> after',
     " after", [('g"q', '{"s": "\\\\\\"<tool_call>"}')]),
    ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
    ('<tool_call>\n{"name": "cut", "arguments": {"a": [1, 2', "", [("cut", '{"a": [1, 2')]),
    ("  \n", "  \n", []),
]
LLAMA3 = [
    ('<|python_tag|>{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {"b": "x; y"}}', "",
     [("f", '{"a": 1}'), ("g", '{"b": "x; y"}')]),
    ('I will call. {"name": "f", "parameters": {}}', "I will call.", [("f", "{}")]),
    ('{"name":"f"} is JSON but not a call; {"name": x', '{"name":"f"} is JSON but not a call; {"name": x', []),
    ("<|python_tag|>print(1)", "<|python_tag|>print(1)", []),
]
GENERIC = [
    ('{"tool_calls": [{"name": "f", "arguments": {"a": "\\u00e9"}}, {"name": "g", "arguments": {}}]}', "",
     [("f", '{"a": "\\u00e9"}'), ("g", "{}")]),
    ('{"response": "h\\u00e9llo \\ud83d\\ude00 \\"q\\" \\\\ \\n"}', 'h\u00e9llo \U0001F600 "q" \\ \n', []),
    ('  {"tool_calls": []}', "", []),
    ("plain text, not JSON", "plain text, not JSON", []),
    ('{"tool_calls": [{"name": "f", "arguments": {"x": [', "", [("f", '{"x": [')]),
]
CASES = [(hermes, *c) for c in HERMES] + [(llama3_json, *c) for c in LLAMA3] + [(generic_json, *c) for c in GENERIC]


def collect(fmt, pieces) -> tuple:
    """(content, [(name, arguments)]) from feeding the pieces, checking the event contract."""
    parser, content, calls = fmt.parser(), "", []
    events = [ev for piece in pieces for ev in parser.feed(piece)] + parser.finish()
    for ev in events:
        if ev.kind == "text":
            assert ev.text
            content += ev.text
        elif ev.kind == "call":
            assert ev.index == len(calls)
            calls.append([ev.text, ""])
        else:
            assert ev.kind == "args" and ev.text and ev.index == len(calls) - 1
            calls[ev.index][1] += ev.text
    return content, [tuple(c) for c in calls]


@pytest.mark.parametrize("fmt,text,content,calls", CASES)
def test_known_outputs(fmt, text, content, calls):
    assert collect(fmt, [text]) == (content, calls)


@pytest.mark.parametrize("fmt,text,content,calls", CASES)
def test_every_single_split_point(fmt, text, content, calls):
    for k in range(len(text) + 1):
        assert collect(fmt, [text[:k], text[k:]]) == (content, calls), k


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=30))
def test_any_split_gives_the_same_calls(case, cuts):
    fmt, text, content, calls = case
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0] + points, points + [len(text)])]
    assert collect(fmt, pieces) == (content, calls)


@settings(max_examples=80, deadline=None)
@given(value=st.text(max_size=30), cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=20))
def test_json_string_decoder_any_split(value, cuts):
    raw = json.dumps(value)[1:] + ' tail'
    points = sorted({min(c, len(raw)) for c in cuts})
    dec, decoded, used_total = JsonStringDecoder(), "", 0
    for a, b in zip([0] + points, points + [len(raw)]):
        if dec.closed:
            break
        out, used = dec.feed(raw[a:b])
        decoded += out
        used_total = a + used
    assert dec.closed and decoded == value and raw[used_total:] == " tail"


def test_format_is_chosen_from_the_template():
    assert choose_format("... <tool_call> ... {{ tools }}") is hermes
    assert choose_format("{% if tools %}<|python_tag|>{% endif %}") is llama3_json
    assert choose_format("{{ messages }}") is generic_json
    assert choose_format(None) is generic_json
    assert choose_format("<tool_call> tools", "generic") is generic_json
    with pytest.raises(ValueError, match="unknown tool call parser"):
        choose_format("", "nope")
