"""An `allOf` of `if`/`then` parts that switch on one property's value, as an `anyOf` with one branch per case.

    allOf: [{if: {properties: {kind: {const: "a"}}}, then: A},
            {if: {properties: {kind: {enum: ["b", "c"]}}}, then: B}]

(JSON Schema's spelling of a tagged union) becomes, beside the allOf's other parts,

    anyOf: [{type: object, properties: {kind: {const: "a"}}, required: [kind], allOf: [A]},
            {type: object, properties: {kind: {enum: ["b", "c"]}}, required: [kind], allOf: [B]}]

Every object output names one case's value, so exactly that case's `if` holds (the value sets are
disjoint) and its `then` is met; the others' `if` fails, so their `then` does not apply.  Objects that name
no case's value, or leave the property out, are valid too but not generated: a restriction (marked
"narrowed").  Where the schema's `type` lists other types beside "object", a branch of those types keeps
them, when every `then` only constrains objects (an `if` about an object's properties holds for any other
value, so its `then` applies to it).  It applies only where every `if` is such a switch on the same property
(scalar values, disjoint across the cases) and no part has an `else`; otherwise the schema is left as it is.
"""

from __future__ import annotations

from radixlm.constrained.negation import NOTES, json_key, type_list
from radixlm.constrained.one_of import mark_narrowed, written_types

_OBJECT_ONLY = {"properties", "required", "additionalProperties", "patternProperties", "minProperties",
                "maxProperties", "propertyNames", "dependentRequired", *NOTES}


def tagged_union(schema: dict) -> dict:
    """schema (a dict) with its switching `if`/`then` parts of `allOf` rewritten as above, or schema itself."""
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return schema
    cases = {i: _case(p) for i, p in enumerate(parts) if isinstance(p, dict) and "if" in p}
    if len(cases) < 2 or any(c is None for c in cases.values()) or len({c[0] for c in cases.values()}) != 1:
        return schema
    seen: set = set()
    for _, values, _ in cases.values():
        keys = {json_key(v) for v in values}
        if keys & seen:
            return schema
        seen |= keys
    branches = []
    for name, values, then in cases.values():
        if then is False:
            continue
        tag = {"type": "object", "properties": {name: {"const": values[0]} if len(values) == 1 else {"enum": values}},
               "required": [name]}
        branches.append(tag if then is True or then == {} else {**tag, "allOf": [then]})
    others = _other_types(schema, [then for _, _, then in cases.values()])
    if others:
        branches.append({"type": others[0] if len(others) == 1 else others})
    if not branches:
        return schema
    out = {k: v for k, v in schema.items() if k != "allOf"}
    rest = [p for i, p in enumerate(parts) if i not in cases]
    out["allOf"] = rest + [{"anyOf": branches}]
    mark_narrowed(out, written_types(schema))
    return out


def _case(part: dict):
    """(property, values, then) of an `if`/`then` part whose `if` only names the property's values, or None."""
    if set(part) - {"if", "then", *NOTES}:
        return None
    cond, then = part["if"], part.get("then", True)
    if not isinstance(cond, dict) or not isinstance(then, (dict, bool)):
        return None
    if set(cond) - {"properties", "required", "type", *NOTES} or cond.get("type", "object") != "object":
        return None
    props = cond.get("properties")
    if not isinstance(props, dict) or len(props) != 1:
        return None
    (name, value_schema), = props.items()
    if cond.get("required", []) not in ([], [name]) or not isinstance(value_schema, dict):
        return None
    keys = set(value_schema) - set(NOTES)
    if keys == {"const"}:
        values = [value_schema["const"]]
    elif keys == {"enum"} and isinstance(value_schema["enum"], list) and value_schema["enum"]:
        values = value_schema["enum"]
    else:
        return None
    if any(isinstance(v, (list, dict)) or json_key(v) is None for v in values):
        return None
    return name, values, then


def _other_types(schema: dict, thens: list) -> list:
    """The types beside "object" that the schema's `type` lists, where no `then` constrains them."""
    types = type_list(schema.get("type")) or []
    if "object" not in types or not all(t is True or isinstance(t, dict) and set(t) <= _OBJECT_ONLY for t in thens):
        return []
    return [t for t in types if t != "object"]

