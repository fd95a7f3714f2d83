"""Rewrites a JSON schema into an equivalent one that XGrammar compiles exactly.

XGrammar builds an object's grammar from its `properties`; a name listed in `required` but not in
`properties` is dropped, so outputs could omit it and fail validation.  Such a property is governed
by `additionalProperties` (any value when absent or true), so declaring it with that schema changes
nothing for validation and makes the grammar require it.  Left alone: objects whose
additionalProperties is false (the requirement cannot be met) or that have patternProperties
(which of them applies depends on the name).

XGrammar also reads a missing `items` / `additionalProperties` as "none allowed", so it refuses
`{"type": "array", "minItems": 2}` ("minItems is greater than the number of prefixItems").  In JSON
Schema a missing keyword means any value; declaring it as `{}` says the same and compiles.
"""

import json


def declare_required_properties(schema):
    """A copy of `schema` (parsed JSON) in which every object schema declares its required names."""
    if isinstance(schema, list):
        return [declare_required_properties(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: declare_required_properties(v) for k, v in schema.items()}
    _declare_open_counts(out)
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


def _declare_open_counts(out: dict) -> None:
    """minItems / minProperties beyond what is declared: make the implicit 'any value' explicit."""
    min_items, min_props = out.get("minItems"), out.get("minProperties")
    if isinstance(min_items, int) and min_items > len(out.get("prefixItems") or []) and "items" not in out:
        out["items"] = {}
    props = out.get("properties") if isinstance(out.get("properties"), dict) else {}
    if (isinstance(min_props, int) and min_props > len(props) and "additionalProperties" not in out
            and "patternProperties" not in out):
        out["additionalProperties"] = {}


def normalize_schema_text(text: str) -> str:
    """The schema text with required names declared; unparsable text is returned unchanged (the
    compiler reports it)."""
    try:
        schema = json.loads(text)
    except ValueError:
        return text
    fixed = declare_required_properties(schema)
    return text if fixed == schema else json.dumps(fixed)
