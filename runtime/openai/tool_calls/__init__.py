"""Tool calling for /v1/chat/completions: one module per output format (hermes, llama3_json,
generic_json), each with `detect(template)`, `template_kwargs(tools)`, `constraint(tools, choice)`
(an XGrammar structural tag, enforced by constrained/ like any grammar) and an incremental
`parser()`; `choose_format` picks one from the chat template or the --tool-call-parser option."""

from radixlm.runtime.openai.tool_calls import generic_json, hermes, llama3_json

FORMATS = {m.NAME_: m for m in (hermes, llama3_json, generic_json)}


def choose_format(chat_template, override=None):
    """The format module for this model: the override when given, else the first whose markers
    the template contains; a template that never mentions `tools` gets the generic format."""
    if override:
        if override not in FORMATS:
            raise ValueError(f"unknown tool call parser {override!r}; choose from {', '.join(FORMATS)}")
        return FORMATS[override]
    template = chat_template if isinstance(chat_template, str) else str(chat_template or "")
    if "tools" not in template:
        return generic_json
    for fmt in (hermes, llama3_json):
        if fmt.detect(template):
            return fmt
    return generic_json
