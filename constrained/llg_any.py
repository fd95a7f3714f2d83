"""Values a schema leaves open ("any JSON value") with bounded numbers, for llguidance.

XGrammar's grammar for an untyped value bounds its numbers (`numbers.py`); llguidance's does not, so
`{"id": {}}`, an object's unnamed properties (JSON Schema admits them where `additionalProperties` is
absent) or `items` without a schema let the model write a number that never ends.  `bound_any` points
every such place at one recursive definition: a string, a bounded number (|x| <= 1e15, at most 6
decimals, as typed numbers get in `schema_normalize`), a boolean, null, or an array or object of the
same.  An object that names its properties (and nothing beside it could name more) is written with
those only, as XGrammar writes objects.  Every value it admits is admitted by the original, so outputs
stay valid.  `not` and `if` subschemas are left alone (bounding inside a negation would widen it).
"""

from __future__ import annotations

from radixlm.constrained.one_of import mark_restricted

ANY_NAME = "__radixlm_any"
ANY_REF = {"$ref": f"#/$defs/{ANY_NAME}"}
_NOTES = ("title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ONE = ("items", "additionalProperties", "contains", "then", "else", "unevaluatedProperties", "unevaluatedItems")
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def any_schema(number_bounds: tuple) -> dict:
    low, high, step = number_bounds
    return {"anyOf": [{"type": "string"}, {"type": "number", "minimum": low, "maximum": high, "multipleOf": step},
                      {"type": "boolean"}, {"type": "null"}, {"type": "array", "items": ANY_REF},
                      {"type": "object", "additionalProperties": ANY_REF}]}


def _open(node) -> bool:
    return node is True or (isinstance(node, dict) and all(k in _NOTES for k in node))


def _bound(node, part: bool = False):
    """`part`: node is an allOf member, whose unnamed properties another member may name."""
    if _open(node):
        return dict(ANY_REF)
    if not isinstance(node, dict):
        return node
    out = dict(node)
    for key in _MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: _bound(s) for name, s in out[key].items()}
    for key in _ONE:
        if key in out and (isinstance(out[key], dict) or out[key] is True):
            out[key] = _bound(out[key])
    for key in _LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_bound(s, key == "allOf") for s in out[key]]
    types = out.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    if "object" in types and "additionalProperties" not in out and "unevaluatedProperties" not in out:
        out["additionalProperties"] = False if _closable(out, part) else dict(ANY_REF)
        if _closable(out, part):
            mark_restricted(out, "closed")        # for one_of's proofs: open as the user wrote it
    if "array" in types and "items" not in out:
        out["items"] = dict(ANY_REF)
    return out


def _closable(node: dict, part: bool) -> bool:
    """An object that names its properties, and nothing else could name more: written with those only
    (a restriction, as XGrammar's objects are), so the model cannot invent keys until the length limit."""
    props = node.get("properties")
    required = node.get("required") or []
    return (not part and isinstance(props, dict) and bool(props) and not node.get("patternProperties")
            and all(n in props for n in required if isinstance(n, str))
            and not any(k in node for k in ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas",
                                             "dependencies")))


def bound_any(schema, number_bounds: tuple):
    """A copy of `schema` (parsed JSON) whose open values are the bounded any-value definition."""
    if _open(schema):
        return {"$defs": {ANY_NAME: any_schema(number_bounds)}, **ANY_REF}
    if not isinstance(schema, dict):
        return schema
    out = _bound(schema)
    out["$defs"] = {**(out.get("$defs") or {}), ANY_NAME: any_schema(number_bounds)}
    return out
