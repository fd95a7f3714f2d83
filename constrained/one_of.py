"""Whether a `oneOf` may be compiled as `anyOf`: no output of one branch's grammar validates another branch.

XGrammar reads `oneOf` as `anyOf`, which is exact only when no value the grammar generates from one branch
also validates against another.  That is decided over the grammar's outputs, not over all JSON values:
XGrammar builds objects strictly (a property a branch does not declare, and no `additionalProperties`
or `patternProperties` admits, is never generated), so `[{required: [a], properties: {a: {}}},
{required: [b], properties: {b: {}}}]` is exact although `{"a": 1, "b": 2}` validates against both.

`fails(a, b)` is a sufficient test that every output of a's grammar is invalid under b, from:
- types: no JSON type in common (an integer is also a number; a number may be integer-valued);
- finite values (`const` / `enum`): none of a's is admitted by b;
- objects: a property b requires that a never generates, or a property a requires whose values all fail
  b's schema for it (a discriminator: `{"kind": {"const": "x"}}` against `{"const": "y"}`).
Anything it cannot see through (`not`, nested combinators, unresolvable `$ref`) counts as overlap.
Plain Python, over the normalized schema.
"""

from __future__ import annotations

import json
import re
from typing import Optional

ALL_TYPES = frozenset(("string", "number", "integer", "boolean", "null", "object", "array"))
_DEPTH = 4
_VALUE_TYPES = ((bool, "boolean"), (type(None), "null"), (str, "string"), (dict, "object"), (list, "array"))


def disjoint(branches: list, root, resolve) -> bool:
    """True when the grammar of anyOf(branches) generates only values that match exactly one branch.
    `resolve(root, ref)` returns a local $ref's target (or None)."""
    if not all(isinstance(b, dict) for b in branches):
        return False
    flat = [_deref(b, root, resolve, _DEPTH) for b in branches]
    if any(b is None for b in flat):
        return False
    return all(fails(a, b, root, resolve) for i, a in enumerate(flat) for j, b in enumerate(flat) if i != j)


def _deref(node, root, resolve, depth: int) -> Optional[dict]:
    """node with a local $ref replaced by its target, the ref's siblings kept where they do not clash."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        target = resolve(root, node["$ref"]) if depth > 0 else None
        if not isinstance(target, dict):
            return None
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if any(k in target and target[k] != v for k, v in siblings.items() if k != "type"):
            return None
        types = types_of(target) & types_of(siblings) if "type" in siblings else types_of(target)
        node = {**target, **{k: v for k, v in siblings.items() if k != "type"}}
        if types != ALL_TYPES:
            node["type"] = sorted(types)
        depth -= 1
    return node if isinstance(node, dict) else ({} if node is True else None)


def types_of(node: dict) -> frozenset:
    t = node.get("type")
    if isinstance(t, str):
        return frozenset((t,))
    if isinstance(t, list):
        return frozenset(x for x in t if isinstance(x, str))
    values = _values(node)
    if values is not None:
        return frozenset(_value_type(v) for v in values)
    return ALL_TYPES


def _value_type(v) -> str:
    for kind, name in _VALUE_TYPES:
        if isinstance(v, kind):
            return name
    return "integer" if isinstance(v, int) or (isinstance(v, float) and v.is_integer()) else "number"


def _values(node: dict) -> Optional[list]:
    if "const" in node:
        return [node["const"]]
    if isinstance(node.get("enum"), list):
        return node["enum"]
    return None


def _shared_types(a: frozenset, b: frozenset) -> frozenset:
    numeric = {"number", "integer"}
    shared = set(a & b)
    if a & numeric and b & numeric:
        shared |= (a | b) & numeric
    return frozenset(shared)


def _key(v) -> str:
    return json.dumps(v, sort_keys=True)


def admits(b: dict, value) -> bool:
    """Whether b may accept value (True when unsure)."""
    values = _values(b)
    if values is not None:
        if _key(value) in {_key(x) for x in values}:
            return True
        return isinstance(value, (int, float)) and not isinstance(value, bool) and any(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x == value for x in values)
    kind = _value_type(value)
    types = types_of(b)
    return kind in types or (kind == "integer" and "number" in types) or (
        kind == "number" and "integer" in types and float(value).is_integer())


def fails(a: dict, b: dict, root, resolve, depth: int = _DEPTH) -> bool:
    """Every value a's grammar generates is invalid under b (False when unsure)."""
    a, b = _deref(a, root, resolve, depth), _deref(b, root, resolve, depth)
    if depth <= 0 or a is None or b is None or any(k in a for k in ("not", "if", "allOf")) or "not" in b:
        return False
    for key in ("anyOf", "oneOf"):      # their siblings were pushed into the branches (or the audit refuses)
        if isinstance(a.get(key), list):
            return all(fails(x, b, root, resolve, depth - 1) for x in a[key])
    for key in ("anyOf", "oneOf"):      # failing every branch fails either
        if isinstance(b.get(key), list):
            return all(fails(a, y, root, resolve, depth - 1) for y in b[key])
    values = _values(a)
    if values is not None:
        return all(not admits(b, v) for v in values)
    shared = _shared_types(types_of(a), types_of(b))
    if not shared:
        return True
    if shared != {"object"} or any(k in b for k in ("allOf", "if")):
        return False
    return _object_fails(a, b, root, resolve, depth)


def _opaque(a: dict) -> bool:
    return any(k in a for k in ("anyOf", "oneOf", "allOf", "not", "if", "$ref"))


def _object_fails(a: dict, b: dict, root, resolve, depth: int) -> bool:
    required_b = b.get("required") if isinstance(b.get("required"), list) else []
    if any(isinstance(p, str) and not _generates(a, p) for p in required_b):
        return True
    required_a = a.get("required") if isinstance(a.get("required"), list) else []
    props_a, props_b = a.get("properties") or {}, b.get("properties") or {}
    for p in required_a:
        if p in props_a and p in props_b:
            pa = _deref(props_a[p], root, resolve, depth)
            pb = _deref(props_b[p], root, resolve, depth)
            if pa is not None and pb is not None and fails(pa, pb, root, resolve, depth - 1):
                return True
    return False


def _generates(a: dict, name: str) -> bool:
    """Whether a's (strict) grammar may put property `name` in an object."""
    props = a.get("properties")
    if isinstance(props, dict) and name in props:
        return True
    extra = a.get("additionalProperties", False)
    if extra is not False:
        return True
    for pattern in (a.get("patternProperties") or {}):
        try:
            if re.search(pattern, name):
                return True
        except re.error:
            return True
    return False


def _no_ref(root, ref):
    return None


def make_exclusive(out: dict) -> None:
    """A restriction for a `oneOf` of plain object branches that may overlap only through optional
    properties: each branch stops generating the names another branch requires and it does not (e.g.
    `oneOf: [{required: [a]}, {required: [b]}]` over properties a and b: the first branch never writes b).
    Every output then validates against exactly one branch.  Left as it is when that does not make the
    branches disjoint (the audit refuses it)."""
    branches = out.get("oneOf")
    if not isinstance(branches, list) or len(branches) < 2 or not all(
            isinstance(b, dict) and types_of(b) == {"object"} and not _opaque(b)
            and b.get("additionalProperties", False) is False and not b.get("patternProperties")
            and isinstance(b.get("properties", {}), dict) for b in branches):
        return
    if disjoint(branches, out, _no_ref):
        return
    required = [set(b.get("required") or []) for b in branches]
    narrowed = []
    for i, b in enumerate(branches):
        others = set().union(*(r for j, r in enumerate(required) if j != i)) - required[i]
        props = {n: s for n, s in (b.get("properties") or {}).items() if n not in others}
        narrowed.append({**b, "properties": props})
    if disjoint(narrowed, out, _no_ref):
        out["oneOf"] = narrowed
