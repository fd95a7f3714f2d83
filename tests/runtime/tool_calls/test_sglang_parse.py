"""/parse_function_call's answers, as SGLang's FunctionCallParser.parse_non_stream gives them for the
same text (expected values derived from SGLang's hermes/qwen25 and llama3 detectors)."""

import json

import pytest

from radixlm.runtime.api.http import APIError
from radixlm.runtime.openai.tool_calls import generic_json, hermes, llama3_json
from radixlm.runtime.openai.tool_calls.request import parse_tools
from radixlm.runtime.openai.tool_calls.sglang_parse import parse_function_call, resolve_format

TOOLS = parse_tools([{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                     for n in ("get_weather", "add")], None)

CASES = [
    (hermes, 'Let me check.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": "\u00e9"}}\n</tool_call>',
     "Let me check.", [(1, "add", '{"a": 1, "b": "\u00e9"}')]),
    (hermes, '<tool_call>\n{"name": "get_weather", "arguments": {"city":"x"}}\n</tool_call>\n<tool_call>\n'
             '{"name": "add", "arguments": {}}\n</tool_call>', "", [(0, "get_weather", '{"city": "x"}'),
                                                                     (1, "add", "{}")]),
    (hermes, '<tool_call>\n{"name": "unknown", "arguments": {}}\n</tool_call>', "", []),     # dropped
    (hermes, "no call here", "no call here", []),
    (hermes, 'A <tool_call>\n{"name": "add", "arguments": {}}\n</tool_call> B', "A", [(1, "add", "{}")]),
    (llama3_json, 'Sure. {"name": "add", "parameters": {}} done', "Sure. done", [(1, "add", "{}")]),
    (hermes, '  text  \n', '  text  \n', []),                       # no call: the text unchanged
    (hermes, '<tool_call>\n{"name": "add", "arguments": {"a": [1', "", []),                  # cut: dropped
    (llama3_json, '<|python_tag|>{"name": "add", "parameters": {"a": 1}}; {"name": "get_weather", '
                  '"parameters": {"city": "y"}}', "", [(1, "add", '{"a": 1}'), (0, "get_weather", '{"city": "y"}')]),
    (llama3_json, '{"name": "add", "parameters": {}}', "", [(1, "add", "{}")]),
    (generic_json, '{"tool_calls": [{"name": "add", "arguments": {"b": 2}}]}', "", [(1, "add", '{"b": 2}')]),
    (generic_json, '{"response": "hi"}', '{"response": "hi"}', []),
]


@pytest.mark.parametrize("fmt,text,normal,calls", CASES)
def test_answers_as_sglang(fmt, text, normal, calls):
    out = parse_function_call(text, TOOLS, fmt)
    assert out == {"normal_text": normal, "calls": [{"tool_index": i, "name": n, "parameters": p}
                                                    for i, n, p in calls]}
    for call in out["calls"]:
        json.loads(call["parameters"])


def test_no_tools_returns_the_text_and_parser_names():
    assert parse_function_call('<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>', [], hermes) == \
        {"normal_text": '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>', "calls": []}
    assert resolve_format("qwen25", None) is hermes and resolve_format("qwen", None) is hermes
    assert resolve_format("llama3", None) is llama3_json and resolve_format(None, generic_json) is generic_json
    with pytest.raises(APIError) as info:
        resolve_format("mistral", None)
    assert info.value.param == "tool_call_parser" and info.value.status == 400
