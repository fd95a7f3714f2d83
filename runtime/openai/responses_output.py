"""One generated output as Responses API output items, and the stream events that build them.

`OutputBuilder` is fed the pieces of the output in order (text, a call's start, its argument
fragments), opens an item for each run of text (`message`) and each call (`function_call`), and
returns the events of each step; the whole output and the streamed one go through the same steps, so
they give the same items.  Event order per item, as the `openai` SDK's ResponseStream expects:
message: output_item.added, content_part.added, output_text.delta..., output_text.done,
content_part.done, output_item.done; function_call: output_item.added,
function_call_arguments.delta..., function_call_arguments.done, output_item.done; reasoning (a thinking
model's thinking, `content` of reasoning_text): output_item.added, reasoning_text.delta...,
reasoning_text.done, output_item.done.
"""

from __future__ import annotations

import uuid


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class OutputBuilder:
    def __init__(self):
        self.items: list = []
        self._open = False
        self._texts: list = []          # text of the open message item

    # -- steps: each returns its events (dicts without sequence_number) --
    def text(self, text: str) -> list:
        if not text:
            return []
        events = []
        if not (self._open and self.items[-1]["type"] == "message"):
            events += self._close("completed") + self._open_message()
        self._texts.append(text)
        events.append(self._ev("response.output_text.delta", content_index=0, delta=text, logprobs=[]))
        return events

    def reasoning(self, text: str) -> list:
        if not text:
            return []
        events = []
        if not (self._open and self.items[-1]["type"] == "reasoning"):
            events += self._close("completed") + self._add({"id": new_id("rs"), "type": "reasoning", "summary": [],
                                                           "content": [], "encrypted_content": None,
                                                           "status": "in_progress"})
        self._texts.append(text)
        events.append(self._ev("response.reasoning_text.delta", content_index=0, delta=text))
        return events

    def call(self, call_id: str, name: str) -> list:
        events = self._close("completed")
        return events + self._add({"id": new_id("fc"), "type": "function_call", "call_id": call_id, "name": name,
                                   "arguments": "", "status": "in_progress"})

    def arguments(self, fragment: str) -> list:
        if not fragment:
            return []
        self.items[-1]["arguments"] += fragment
        return [self._ev("response.function_call_arguments.delta", delta=fragment)]

    def finish(self, status: str) -> list:
        """Close the open item (status "completed" or "incomplete"); an output with no items gets an
        empty message, so output_text is "" rather than missing."""
        events = [] if self.items else self._open_message()
        return events + self._close(status)

    def chat_body(self, body: dict) -> list:
        """Apply one chat stream delta body of tool_calls/shape.ChoiceTools."""
        if "content" in body:
            return self.text(body["content"])
        call = body["tool_calls"][0]
        if "id" in call:
            return self.call(call["id"], call["function"]["name"])
        return self.arguments(call["function"]["arguments"])

    # -- internals --
    def _ev(self, kind: str, **fields) -> dict:
        index = len(self.items) - 1
        return {"type": kind, "item_id": self.items[index]["id"], "output_index": index, **fields}

    def _open_message(self) -> list:
        events = self._add({"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                            "content": []})
        return events + [self._ev("response.content_part.added", content_index=0, part=_part(""))]

    def _add(self, item: dict) -> list:
        self.items.append(item)
        self._open = True
        snapshot = {**item, "content": []} if item["type"] in ("message", "reasoning") else dict(item)
        return [{"type": "response.output_item.added", "output_index": len(self.items) - 1, "item": snapshot}]

    def _close(self, status: str) -> list:
        if not self._open:
            return []
        self._open = False
        item = self.items[-1]
        item["status"] = status
        events = []
        if item["type"] == "message":
            text = "".join(self._texts)
            self._texts = []
            item["content"] = [_part(text)]
            events += [self._ev("response.output_text.done", content_index=0, text=text, logprobs=[]),
                       self._ev("response.content_part.done", content_index=0, part=_part(text))]
        elif item["type"] == "reasoning":
            text = "".join(self._texts)
            self._texts = []
            item["content"] = [{"type": "reasoning_text", "text": text}]
            events.append(self._ev("response.reasoning_text.done", content_index=0, text=text))
        else:
            events.append(self._ev("response.function_call_arguments.done", arguments=item["arguments"],
                                   name=item["name"]))
        snapshot = {**item, "content": [dict(p) for p in item["content"]]} \
            if item["type"] in ("message", "reasoning") else dict(item)
        events.append({"type": "response.output_item.done", "output_index": len(self.items) - 1, "item": snapshot})
        return events
