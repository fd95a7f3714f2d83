"""Rewrites a JSON schema into an equivalent one that XGrammar compiles exactly.

XGrammar builds an object's grammar from its `properties`; a name listed in `required` but not in
`properties` is dropped, so outputs could omit it and fail validation.  Such a property is governed
by `additionalProperties` (any value when absent or true), so declaring it with that schema changes
nothing for validation and makes the grammar require it.  Left alone: objects whose
additionalProperties is false (the requirement cannot be met) or that have patternProperties
(which of them applies depends on the name).
"""

import json

MAX_PATTERN_LENGTH = 32        # longer maxLength: left to XGrammar (the counted regex costs compile time: on
#                                 SmolLM2's 49k vocabulary 0.4 s at 32, 0.85 s at 64, 1.6 s at 128; the plain rule 0.01 s)


def declare_required_properties(schema):
    """A copy of `schema` (parsed JSON) in which every object schema declares its required names."""
    if isinstance(schema, list):
        return [declare_required_properties(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: declare_required_properties(v) for k, v in schema.items()}
    _bounded_string_as_pattern(out)
    required = out.get("required")
    props = out.get("properties", {})
    extra = out.get("additionalProperties", True)
    if (isinstance(required, list) and isinstance(props, dict) and extra is not False
            and "patternProperties" not in out):
        missing = [name for name in required if isinstance(name, str) and name not in props]
        if missing:
            value = extra if isinstance(extra, dict) else {}
            out["properties"] = {**props, **{name: value for name in missing}}
    return out


# One JSON string character, raw: no control characters, quote or backslash.  Spelled as the ranges of
# well-formed UTF-8 (Unicode's table 3-7), one per distinct lead-byte constraint: XGrammar's regex
# compiles a range across them (U+0800-U+FFFF as one) to byte ranges that also admit overlong and
# surrogate encodings, which decode to U+FFFD and break the length bound.
_STRING_CHAR = "(?:" + "|".join([
    r"[ !#-\[\]-\x7f]", r"[\u0080-\u07ff]", r"[\u0800-\u0fff]", r"[\u1000-\ucfff]", r"[\ud000-\ud7ff]",
    r"[\ue000-\uffff]", r"[\u{10000}-\u{3ffff}]", r"[\u{40000}-\u{fffff}]", r"[\u{100000}-\u{10ffff}]"]) + ")"


def _bounded_string_as_pattern(out: dict) -> None:
    """A string with minLength/maxLength (and no pattern or format): the same bounds as a pattern."""
    low, high = out.get("minLength"), out.get("maxLength")
    if (out.get("type") != "string" or (low is None and high is None) or "pattern" in out or "format" in out
            or "enum" in out or "const" in out):
        return
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in (low, high)):
        return
    if high is not None and high > MAX_PATTERN_LENGTH:
        return
    out.pop("minLength", None)
    out.pop("maxLength", None)
    out["pattern"] = f"^{_STRING_CHAR}{{{low or 0},{'' if high is None else high}}}$"


def normalize_schema_text(text: str) -> str:
    """The schema text with required names declared; unparsable text is returned unchanged (the
    compiler reports it)."""
    try:
        schema = json.loads(text)
    except ValueError:
        return text
    fixed = declare_required_properties(schema)
    return text if fixed == schema else json.dumps(fixed)
