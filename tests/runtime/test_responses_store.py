"""The /v1/responses pieces that need no server: the bounded store and its chains, input items to chat
messages (400s naming the item), and the output builder's event protocol."""

import pytest

from radixlm.runtime.api.http import APIError
from radixlm.runtime.openai.protocol import ChatMessage
from radixlm.runtime.openai.responses_api import ResponseStore
from radixlm.runtime.openai.responses_output import OutputBuilder
from radixlm.runtime.openai.responses_protocol import input_messages, output_messages


def msg(text):
    return [ChatMessage(role="user", content=text)]


def test_chain_walks_back_and_eviction_breaks_it_clearly():
    store = ResponseStore(max_items=3)
    store.put({"id": "r1"}, msg("a"), None)
    store.put({"id": "r2"}, msg("b"), "r1")
    store.put({"id": "r3"}, msg("c"), "r2")
    assert [m.content for m in store.chain("r3")] == ["a", "b", "c"]
    store.put({"id": "r4"}, msg("d"), "r3")       # r1 is the least recently used: evicted
    assert len(store) == 3
    with pytest.raises(APIError) as info:
        store.chain("r4")
    assert info.value.param == "previous_response_id" and "'r1'" in info.value.message
    assert store.delete("r4") and not store.delete("r4")
    small = ResponseStore(max_items=10, max_chars=10)
    small.put({"id": "big"}, msg("x" * 100), None)
    assert len(small) == 0                         # over the character bound: not kept



def test_a_stored_response_belongs_to_the_key_that_stored_it():
    store = ResponseStore()
    store.put({"id": "a1"}, msg("alice's secret"), None, owner=0)
    store.put({"id": "a2"}, msg("more"), "a1", owner=0)
    assert [m.content for m in store.chain("a2", 0)] == ["alice's secret", "more"]
    assert store.get("a1", 1) is None and store.get("a1") is None      # another key, or no key: nothing
    for other in (1, None):
        with pytest.raises(APIError) as info:
            store.chain("a2", other)
        assert "was not found" in info.value.message and "secret" not in info.value.message
    store.put({"id": "b1"}, msg("mallory"), "a1", owner=1)      # continuing another key's chain: not found
    with pytest.raises(APIError):
        store.chain("b1", 1)
    assert not store.delete("a1", 1) and len(store) == 3
    assert store.get("a1", 0)[0] == {"id": "a1"} and store.delete("a1", 0)

def test_items_group_an_assistant_turn_and_name_bad_items():
    items = [{"role": "user", "content": "hi"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me."}]},
             {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 1}'},
             {"type": "function_call", "call_id": "call_2", "name": "get", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "ok"}]}]
    out = input_messages(items)
    assert [m.role for m in out] == ["user", "assistant", "tool"]
    assert out[1].content == "Let me." and [c.id for c in out[1].tool_calls] == ["call_1", "call_2"]
    assert out[2].tool_call_id == "call_2" and out[2].name == "get" and out[2].content == "ok"
    for bad, param in [([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}], "input.0.arguments"),
                       ([{"role": "tool", "content": "x"}], "input.0.role"),
                       ([{"type": "file_search_call", "id": "x"}], "input.0.type"),
                       ([{"type": "reasoning", "content": [{"type": "image"}]}], "input.0.content.0"),
                       ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input.0.call_id")]:
        with pytest.raises(APIError) as info:
            input_messages(bad)
        assert info.value.param == param


def test_builder_events_and_items():
    b = OutputBuilder()
    events = b.text("Hi") + b.text(" there") + b.call("call_1", "add") + b.arguments('{"a"') + b.arguments(": 1}")
    events += b.finish("completed")
    kinds = [e["type"] for e in events]
    assert kinds == ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
                     "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done"]
    message, call = b.items
    assert message["content"][0]["text"] == "Hi there" and message["status"] == "completed"
    assert call["arguments"] == '{"a": 1}' and call["call_id"] == "call_1"
    assert events[0]["item"]["content"] == [] and events[7]["item"]["arguments"] == ""   # snapshots, not the live item
    turn = output_messages(b.items)
    assert turn[0].content == "Hi there" and turn[0].tool_calls[0].function.arguments == '{"a": 1}'
    empty = OutputBuilder()
    assert [e["type"] for e in empty.finish("incomplete")][-1] == "response.output_item.done"
    assert empty.items[0]["content"][0]["text"] == "" and empty.items[0]["status"] == "incomplete"


def test_reasoning_items_in_and_out():
    """A reasoning item joins its assistant turn as reasoning_content (content first, else the summary), and
    the builder's reasoning item comes back the same way (previous_response_id)."""
    items = [{"role": "user", "content": "hi"},
             {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Hm."}]},
             {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "3"},
             {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Sum."}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "3"}]}]
    out = input_messages(items)
    assert [m.role for m in out] == ["user", "assistant", "tool", "assistant"]
    assert out[1].reasoning_content == "Hm." and out[1].tool_calls[0].id == "call_1"
    assert out[3].reasoning_content == "Sum." and out[3].content == "3"
    b = OutputBuilder()
    events = b.reasoning("Let") + b.reasoning(" me.") + b.text("Yes") + b.finish("completed")
    assert [e["type"] for e in events][:5] == ["response.output_item.added", "response.reasoning_text.delta",
                                               "response.reasoning_text.delta", "response.reasoning_text.done",
                                               "response.output_item.done"]
    assert b.items[0]["content"] == [{"type": "reasoning_text", "text": "Let me."}]
    [back] = output_messages(b.items)
    assert back.reasoning_content == "Let me." and back.content == "Yes"
