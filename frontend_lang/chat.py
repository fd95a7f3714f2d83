"""Role affixes from the tokenizer's chat template: the text a role block opens and closes with.

Rendered once per (tokenizer, role) with a sentinel content.  The user and assistant affixes are taken
after a system message, so templates that inject a default system prompt do not repeat it.
"""

_SENTINEL = "\u2063RLCONTENT\u2063"
_cache: dict = {}


def role_affixes(tokenizer, role: str) -> tuple:
    """(prefix, suffix) of a `role` message in this tokenizer's chat template."""
    key = (id(tokenizer), role)
    if key not in _cache:
        _cache[key] = _render(tokenizer, role)
    return _cache[key]


def _render(tokenizer, role):
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return f"{role.upper()}: ", "\n"
    msg = {"role": role, "content": _SENTINEL}
    if role == "system":
        text = tokenizer.apply_chat_template([msg], tokenize=False)
    else:
        system = [{"role": "system", "content": "S"}]
        head = tokenizer.apply_chat_template(system, tokenize=False)
        text = tokenizer.apply_chat_template(system + [msg], tokenize=False)
        if not text.startswith(head):
            raise ValueError(f"cannot derive the {role} role affixes from this chat template")
        text = text[len(head):]
    prefix, _, suffix = text.partition(_SENTINEL)
    return prefix, suffix
