"""Tiny random models whose chat templates take tools: a Qwen2 with a hermes template (`<tool_call>`
blocks, `<tool_response>` results, as Qwen2.5's) and a Llama with a Llama-3.1-style JSON template
(`{"name", "parameters"}` calls, `ipython` results).  Context 2048, so tool prompts fit."""

import json

from transformers import AutoTokenizer

CONTEXT = 2048

NL = "{{ '\\n' }}"     # a newline that survives trim_blocks

_SYSTEM = ("{% if messages[0].role == 'system' %}{% set system = messages[0].content %}"
           "{% else %}{% set system = 'You are helpful.' %}{% endif %}")

HERMES_TEMPLATE = _SYSTEM + (
    "<|im_start|>system\n{{ system }}"
    "{% if tools %}" + NL + "# Tools" + NL + "<tools>{% for tool in tools %}" + NL + "{{ tool | tojson }}{% endfor %}"
    + NL + "</tools>" + NL + "Call a function as <tool_call>" + NL + "{\"name\": <name>, \"arguments\": <args>}"
    + NL + "</tool_call>{% endif %}<|im_end|>" + NL +
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant" + NL + "{{ m.content or '' }}"
    "{% for tc in m.tool_calls or [] %}{% if m.content or not loop.first %}" + NL + "{% endif %}"
    "<tool_call>" + NL + "{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments | tojson }}}"
    + NL + "</tool_call>{% endfor %}<|im_end|>" + NL +
    "{% elif m.role == 'tool' %}<|im_start|>user" + NL + "<tool_response>" + NL + "{{ m.content }}" + NL
    + "</tool_response><|im_end|>" + NL +
    "{% else %}<|im_start|>{{ m.role }}" + NL + "{{ m.content }}<|im_end|>" + NL + "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant" + NL + "{% endif %}")

LLAMA3_TEMPLATE = _SYSTEM + (
    "<|im_start|>system" + NL + "{{ system }}"
    "{% if tools %}" + NL + "To call a function answer {\"name\": function name, \"parameters\": arguments}, "
    "or <|python_tag|> code." + NL + "{% for tool in tools %}{{ tool | tojson }}" + NL + "{% endfor %}{% endif %}"
    "<|im_end|>" + NL +
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant" + NL +
    "{% for tc in m.tool_calls %}{% if not loop.first %}; {% endif %}"
    "{\"name\": \"{{ tc.function.name }}\", \"parameters\": {{ tc.function.arguments | tojson }}}{% endfor %}"
    "<|im_end|>" + NL +
    "{% elif m.role == 'tool' %}<|im_start|>ipython" + NL + "{{ m.content }}<|im_end|>" + NL +
    "{% else %}<|im_start|>{{ m.role }}" + NL + "{{ m.content }}<|im_end|>" + NL + "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant" + NL + "{% endif %}")

TEMPLATES = {"qwen2": HERMES_TEMPLATE, "llama": LLAMA3_TEMPLATE}


TOOL_SERVERS = {"hermes": "qwen2", "llama3_json": "llama", "generic": None}   # server kind -> tiny arch, None: SmolLM2


def make_tool_model(tmp_path_factory, arch: str):
    """A tiny random `arch` model (qwen2 or llama) saved with its tool-taking template."""
    from tiny_models import make_tiny_model

    folder = make_tiny_model(tmp_path_factory, arch)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = CONTEXT
    config_path.write_text(json.dumps(config))
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.chat_template = TEMPLATES[arch]
    tok.save_pretrained(folder)
    return folder
