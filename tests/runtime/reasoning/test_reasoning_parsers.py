"""Reasoning parsers: streamed pieces, split at every character boundary, join to the whole-text parse,
which is checked against hand-written expectations; format choice from templates and the option."""

import pytest

from radixlm.runtime.openai.reasoning import FORMATS, choose_reasoning, thinking
from radixlm.runtime.openai.reasoning.base import Parsed
from radixlm.runtime.openai.reasoning.harmony import HarmonyParser
from radixlm.runtime.openai.reasoning.harmony import parse_whole as harmony_whole
from radixlm.runtime.openai.reasoning.think_tags import ThinkParser
from radixlm.runtime.openai.reasoning.think_tags import parse_whole as think_whole

THINK_CASES = [
    ("<think>\nLet me see.\n</think>\n\nThe answer is 4.", "Let me see.", "The answer is 4."),
    ("\nno start tag, R1 style \n</think>\n\n{\"a\": 1}", "no start tag, R1 style", "{\"a\": 1}"),
    ("<think>\n\n</think>\n\nDirect.", "", "Direct."),
    ("<think>still thinking when it ended  \n", "still thinking when it ended", ""),
    ("<think>a </thi b</think>c  ", "a </thi b", "c  "),
    ("x<think>y</think>z", "x<think>y", "z"),
    ("<thi", "<thi", ""),
    ("  <think>  sp  aces  </think>  keep  inner  ", "sp  aces", "keep  inner  "),
    ("<think>é😀 ü</think>\n中文", "é😀 ü", "中文"),
    ("", "", ""),
]

HARMONY_CASES = [
    ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Yes.<|return|>",
     "Think.", "Yes.", []),
    ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
     "Need weather.", "", [("get_weather", "{\"city\": \"Paris\"}")]),
    ("<|channel|>analysis<|message|>cut short", "cut short", "", []),
    ("plain text, no harmony", "", "plain text, no harmony", []),
    ("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Done",
     "", "Checking.Done", []),
    ("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}", "", "", [("f", "{}")]),
]


def _stream(parser, pieces) -> Parsed:
    out = Parsed()
    for p in pieces:
        out += parser.feed(p)
    out += parser.finish()
    return out


def _splits(text):
    yield [text]
    yield list(text)                                 # one character at a time
    for i in range(len(text) + 1):
        yield [text[:i], text[i:]]
    for i in range(0, len(text) + 1, 3):
        for j in range(i, len(text) + 1, 5):
            yield [text[:i], text[i:j], text[j:]]


@pytest.mark.parametrize("text,reasoning,content", THINK_CASES)
def test_think_tags_whole_and_every_split(text, reasoning, content):
    whole = think_whole(text)
    assert (whole.reasoning, whole.content) == (reasoning, content)
    for pieces in _splits(text):
        got = _stream(ThinkParser(), pieces)
        assert (got.reasoning, got.content) == (reasoning, content), pieces


def test_think_tags_stream_sends_reasoning_before_the_end():
    parser = ThinkParser()
    first = parser.feed("<think>\nStep one. ")
    assert first.reasoning == "Step one." and not first.content
    assert parser.feed("Two.</think>\n\nOK").reasoning == " Two."


@pytest.mark.parametrize("text,reasoning,content,calls", HARMONY_CASES)
def test_harmony_whole_and_every_split(text, reasoning, content, calls):
    whole = harmony_whole(text)
    assert (whole.reasoning, whole.content, whole.calls) == (reasoning, content, calls)
    for pieces in _splits(text):
        got = _stream(HarmonyParser(), pieces)
        assert (got.reasoning, got.content, got.calls) == (reasoning, content, calls), pieces


def test_choose_from_template_and_option():
    from reasoning_models import DEEPSEEK_R1_TEMPLATE, QWEN3_TEMPLATE

    assert choose_reasoning(QWEN3_TEMPLATE).name == "qwen3"
    assert choose_reasoning(DEEPSEEK_R1_TEMPLATE).name == "deepseek-r1"
    assert choose_reasoning("{{ '<|start|>assistant<|channel|>analysis<|message|>' }}").name == "gpt-oss"
    assert choose_reasoning("{% for m in messages %}{{ m.content }}{% endfor %}") is None
    assert choose_reasoning(None, "deepseek-r1") is FORMATS["deepseek-r1"]
    with pytest.raises(ValueError, match="unknown reasoning parser 'qwen'"):
        choose_reasoning(None, "qwen")


def test_thinking_from_the_rendered_prompt():
    qwen3 = FORMATS["qwen3"]
    assert thinking(qwen3, "<|im_start|>assistant\n")                          # the model opens it
    assert thinking(qwen3, "<｜Assistant｜><think>\n")                          # the prompt opened it
    assert not thinking(qwen3, "<|im_start|>assistant\n<think>\n\n</think>\n\n")   # enable_thinking false
    assert not thinking(None, "<|im_start|>assistant\n")
