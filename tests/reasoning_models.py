"""Tiny random thinking models: a Qwen3 with Qwen3's real chat template and a Qwen2 with
DeepSeek-R1-Distill-Qwen's (template texts in tests/data/reasoning/), their tokenizers given the
markers those templates write as added tokens (`<think>`/`</think>` plain, the rest special), as the
real tokenizers have them.  Context 2048, so tool prompts fit."""

import json
import pathlib

from transformers import AddedToken

DATA = pathlib.Path(__file__).parent / "data" / "reasoning"
QWEN3_TEMPLATE = (DATA / "qwen3.jinja").read_text()
DEEPSEEK_R1_TEMPLATE = (DATA / "deepseek_r1_distill_qwen.jinja").read_text()
CONTEXT = 2048
_R1_SPECIAL = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]


def make_thinking_tokenizer(kind: str):
    """kind: qwen3 or deepseek-r1."""
    from tiny_models import make_tiny_tokenizer

    tok = make_tiny_tokenizer()
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False)])
    if kind == "qwen3":
        tok.chat_template = QWEN3_TEMPLATE
    else:
        tok.add_special_tokens({"additional_special_tokens": _R1_SPECIAL})
        tok.bos_token, tok.eos_token = _R1_SPECIAL[0], _R1_SPECIAL[1]
        tok.chat_template = DEEPSEEK_R1_TEMPLATE
    return tok


def make_thinking_model(tmp_path_factory, kind: str):
    """A tiny random Qwen3 (kind qwen3) or Qwen2 (kind deepseek-r1) with that template, context 2048."""
    from tiny_models import make_tiny_model

    tok = make_thinking_tokenizer(kind)
    folder = make_tiny_model(tmp_path_factory, "qwen3" if kind == "qwen3" else "qwen2", tokenizer=tok)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = CONTEXT
    config_path.write_text(json.dumps(config))
    return folder
