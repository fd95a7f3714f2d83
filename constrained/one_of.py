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
- strings: a's lengths (`minLength`/`maxLength` and its pattern's widths) outside b's, or b's finite values
  none of which a's pattern and lengths admit (`{"enum": ["red"]}` against `{"pattern": "^#[0-9a-f]{6}$"}`);
- arrays: a's lengths outside b's, or a non-empty array of a whose items all fail b's items;
- objects: a property a requires that b does not allow (b closed without it).
Anything it cannot see through (`not`, nested combinators, unresolvable `$ref`) counts as overlap.
Plain Python, over the normalized schema.  A value must fail the branch as the user wrote it, so where the
normalizer narrowed a node (a `type` inferred from its keywords, an object closed, properties dropped or
required, a `minItems` added or `maxItems` lowered, or a conditional schema applied always: "narrowed") it
says so in `RESTRICTED`, and b is then read as the wider original (of a narrowed node only the JSON types it
accepted before are known: `written_types`).
"""

from __future__ import annotations

import json
import re
from typing import Optional

from radixlm.constrained.pattern_length import (
    ESCAPED_BACKSLASH,
    ESCAPED_QUOTE,
    bounded_string_lengths,
    misplaced_anchor,
    pattern_widths,
)

ALL_TYPES = frozenset(("string", "number", "integer", "boolean", "null", "object", "array"))
DEPTH = 4
_VALUE_TYPES = ((bool, "boolean"), (type(None), "null"), (str, "string"), (dict, "object"), (list, "array"))
RESTRICTED = "x-radixlm-restricted"   # what the normalizer narrowed in this node, for the grammar only
# keywords that validate nothing (VS Code's markdownDescription too)
ANNOTATIONS = ("title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly",
               "$schema", "$id", "$defs", "definitions", "contentMediaType", "contentEncoding", "markdownDescription")
APPLICATORS = ("allOf", "anyOf", "oneOf", "$ref", "if", "then", "else", "not", "dependentSchemas")


def mark_restricted(node: dict, what: str, on: bool = True) -> None:
    marks = set(node.get(RESTRICTED) or ()) | {what} if on else set(node.get(RESTRICTED) or ()) - {what}
    if marks:
        node[RESTRICTED] = sorted(marks)
    else:
        node.pop(RESTRICTED, None)


def restricted(node: dict, what: str) -> bool:
    return what in (node.get(RESTRICTED) or ())


def mark_narrowed(node: dict, written: frozenset) -> None:
    """node narrowed for the grammar (a branch dropped, a condition applied always ...); written: written_types(node)
    as it was before, a superset of the types it accepts as the user wrote it, kept for the proofs."""
    mark_restricted(node, "narrowed")
    if written != ALL_TYPES:
        mark_restricted(node, "types=" + ",".join(sorted(written)))


def written_types(node: dict) -> frozenset:
    """A superset of the JSON types node accepts as the user wrote it (merged nodes: every recorded set holds)."""
    marks = node.get(RESTRICTED) or ()
    if "narrowed" not in marks:
        types = validated_types(node)
        for key in ("anyOf", "oneOf"):      # a value of a branch (siblings are often pushed into the branches)
            branches = node.get(key)
            if isinstance(branches, list) and branches and all(isinstance(b, dict) and "$ref" not in b
                                                                for b in branches):
                types = shared_types(types, frozenset().union(*(written_types(b) for b in branches)))
        return types
    out = ALL_TYPES
    for mark in marks:
        if mark.startswith("types="):
            out &= frozenset(mark[len("types="):].split(","))
    return out


def disjoint(branches: list, root, resolve) -> bool:
    """True when the grammar of anyOf(branches) generates only values that match exactly one branch.
    `resolve(root, ref)` returns a local $ref's target (or None)."""
    if not all(isinstance(b, dict) for b in branches):
        return False
    flat = [deref(b, root, resolve, DEPTH) for b in branches]
    if any(b is None for b in flat):
        return False
    return all(fails(a, b, root, resolve) for i, a in enumerate(flat) for j, b in enumerate(flat) if i != j)


VALUE_KEYWORDS = ("enum", "const", "default", "examples")   # their values are JSON data, never schemas

_RELATIVE = {"additionalProperties": ("properties", "patternProperties"), "items": ("prefixItems",),
             "unevaluatedProperties": ("",), "unevaluatedItems": ("",)}


def scoped(a: dict, b: dict) -> bool:
    """Keywords of a whose meaning depends on its siblings (additionalProperties on properties, ...) when b
    has those siblings: merging would change what they apply to (not when b only names a's properties)."""
    for k, sibs in _RELATIVE.items():
        if k not in a or a[k] in ({}, True):      # a schema that admits everything says nothing about its siblings
            continue
        if k == "additionalProperties" and "patternProperties" not in b and isinstance(b.get("properties", {}), dict) \
                and isinstance(a.get("properties", {}), dict) and set(b.get("properties", {})) <= set(a.get("properties", {})):
            continue
        if not sibs[0] or any(s in b for s in sibs):
            return True
    return False


def deref(node, root, resolve, depth: int) -> Optional[dict]:
    """node with a local $ref replaced by its target, the ref's siblings kept where they do not clash (None
    where they do, or where one side's additionalProperties or items would then apply to the other's names)."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        target = resolve(root, node["$ref"]) if depth > 0 else None
        if not isinstance(target, dict):
            return None
        siblings = {k: v for k, v in node.items() if k != "$ref" and k not in ANNOTATIONS}
        if any(k in target and target[k] != v for k, v in siblings.items() if k != "type") \
                or scoped(siblings, target) or scoped(target, siblings):
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


def shared_types(a: frozenset, b: frozenset) -> frozenset:
    numeric = {"number", "integer"}
    shared = set(a & b)
    if a & numeric and b & numeric:
        shared |= (a | b) & numeric
    return frozenset(shared)


def value_key(v) -> str:
    return json.dumps(v, sort_keys=True)


def validated_types(b: dict) -> frozenset:
    """The JSON types b accepts as written (its `type` may have been inferred for the grammar)."""
    return ALL_TYPES if restricted(b, "type") else types_of(b)


def admits(b: dict, value) -> bool:
    """Whether b may accept value (True when unsure)."""
    values = _values(b)
    if values is not None:
        if value_key(value) in {value_key(x) for x in values}:
            return True
        return isinstance(value, (int, float)) and not isinstance(value, bool) and any(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x == value for x in values)
    kind = _value_type(value)
    types = validated_types(b)
    if not (kind in types or (kind == "integer" and "number" in types) or (
            kind == "number" and "integer" in types and float(value).is_integer())):
        return False
    return not isinstance(value, str) or _string_admits(b, value)


def _string_admits(b: dict, value: str) -> bool:
    low, high = string_lengths(b)
    if len(value) < low or (high is not None and len(value) > high):
        return False
    pattern = b.get("pattern")
    if not isinstance(pattern, str) or not _plain(value) or _json_text_pattern(pattern):
        return True
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return True


def _plain(value: str) -> bool:
    """Printable ASCII: where ECMA-262's and Python's regex agree on what a pattern matches."""
    return all(" " <= c <= "~" for c in value)


def _json_text_pattern(pattern: str) -> bool:
    """A pattern rewritten to match JSON text (an escape spelled out): it does not match the value itself."""
    return ESCAPED_BACKSLASH in pattern or ESCAPED_QUOTE in pattern


def string_lengths(node: dict, generated: bool = False) -> tuple[int, Optional[int]]:
    """(shortest, longest or None) a string of node may have: its minLength/maxLength and its pattern's widths
    (a match is at least as long as the pattern's shortest; the longest binds only the strings the grammar
    generates from a pattern anchored at both ends: Python's `$` also matches before a final newline)."""
    low, high = node.get("minLength"), node.get("maxLength")
    low = low if isinstance(low, int) and not isinstance(low, bool) else 0
    high = high if isinstance(high, int) and not isinstance(high, bool) else None
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        widths = bounded_string_lengths(pattern)
        if widths is None and not _json_text_pattern(pattern):
            widths = pattern_widths(pattern)
            whole = (generated and widths is not None and pattern.startswith("^") and pattern.endswith("$")
                     and "|" not in pattern and not misplaced_anchor(pattern))
            widths = widths if widths is None or whole else (widths[0], None)
        if widths is not None:
            low = max(low, widths[0])
            high = widths[1] if high is None else high if widths[1] is None else min(high, widths[1])
    return low, high


def fails(a: dict, b: dict, root, resolve, depth: int = DEPTH) -> bool:
    """Every value a's grammar generates is invalid under b (False when unsure)."""
    a, b = deref(a, root, resolve, depth), deref(b, root, resolve, depth)
    if depth <= 0 or a is None or b is None:
        return False
    if not shared_types(types_of(a), written_types(b)):
        return True     # a's own `type` holds beside its not, if and allOf too
    if any(k in a for k in ("not", "if", "allOf")) or "not" in b or restricted(b, "narrowed"):
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
    values = _values(b)
    if values is not None and all(not admits(a, v) for v in values):
        return True
    shared = shared_types(types_of(a), validated_types(b))
    if not shared:
        return True
    if any(k in b for k in ("allOf", "if")):
        return False
    if shared == {"string"}:
        return _apart(string_lengths(a, generated=True), string_lengths(b)) or _patterns_apart(a, b)
    if shared == {"array"}:
        return _array_fails(a, b, root, resolve, depth)
    if shared == {"object"}:
        return _object_fails(a, b, root, resolve, depth)
    return False


def _patterns_apart(a: dict, b: dict) -> bool:
    """Two patterns anchored at the start whose matches differ at some position before which both have only
    single characters: a literal in one that the other's character there cannot be (the many `^http://...Space$`
    of ONVIF's selectors)."""
    from radixlm.constrained.pattern_length import leading_characters

    pa, pb = a.get("pattern"), b.get("pattern")
    if not (isinstance(pa, str) and isinstance(pb, str)) or _json_text_pattern(pa) or _json_text_pattern(pb):
        return False
    for x, y in zip(leading_characters(pa), leading_characters(pb)):
        if x is None or y is None:
            return False                # a wider atom: later offsets are not fixed
        if x and y and not (x & y):
            return True
    return False


def _apart(a: tuple, b: tuple) -> bool:
    """Two (low, high or None) ranges with nothing in common."""
    return (a[1] is not None and a[1] < b[0]) or (b[1] is not None and b[1] < a[0])


def int_of(node: dict, key: str, default):
    v = node.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _array_fails(a: dict, b: dict, root, resolve, depth: int) -> bool:
    sizes_a = (int_of(a, "minItems", 0), int_of(a, "maxItems", None))
    sizes_b = (0 if restricted(b, "minItems") else int_of(b, "minItems", 0),
               None if restricted(b, "maxItems") else int_of(b, "maxItems", None))
    if _apart(sizes_a, sizes_b):
        return True
    tuples = ("prefixItems", "contains", "additionalItems")
    if sizes_a[0] < 1 or any(k in a for k in tuples) or any(k in b for k in tuples):
        return False
    items_a, items_b = a.get("items", {}), b.get("items", {})
    return isinstance(items_a, dict) and isinstance(items_b, dict) and fails(items_a, items_b, root, resolve,
                                                                             depth - 1)


def opaque(a: dict) -> bool:
    return any(k in a for k in ("anyOf", "oneOf", "allOf", "not", "if", "$ref"))


def _object_fails(a: dict, b: dict, root, resolve, depth: int) -> bool:
    required_b = b.get("required") if isinstance(b.get("required"), list) and not restricted(b, "required") else []
    required_a = a.get("required") if isinstance(a.get("required"), list) else []
    props_a, props_b = a.get("properties") or {}, b.get("properties") or {}
    if not isinstance(props_a, dict) or not isinstance(props_b, dict):
        return False
    for p in required_b:
        if not isinstance(p, str) or not _generates(a, p):
            return True
        schema_a = props_a.get(p, a.get("additionalProperties") if not _named_by_pattern(a, p) else None)
        if isinstance(schema_a, dict) and isinstance(props_b.get(p), dict) and fails(schema_a, props_b[p], root,
                                                                                      resolve, depth - 1):
            return True                     # whenever a writes p, its value fails b's schema for p
    names = {p for p in required_a if isinstance(p, str)}
    if len(names) > int_of(b, "maxProperties", len(names)):
        return True
    if a.get("additionalProperties", False) is False and not a.get("patternProperties") \
            and len(props_a) < int_of(b, "minProperties", 0):
        return True
    if b.get("additionalProperties") is False and not restricted(b, "closed") and not restricted(b, "properties") \
            and isinstance(props_b, dict) and any(
            isinstance(p, str) and p not in props_b and not _named_by_pattern(b, p) for p in required_a):
        return True
    for p in required_a:
        if isinstance(p, str) and p in props_a:
            pa = deref(props_a[p], root, resolve, depth)
            for schema_b in _schemas_for(b, p):
                pb = deref(schema_b, root, resolve, depth)
                if pa is not None and pb is not None and fails(pa, pb, root, resolve, depth - 1):
                    return True
    return False


def _schemas_for(b: dict, name: str) -> list:
    """The schemas b (as written) applies to the value of property `name`: its own, every matching
    patternProperties schema, or additionalProperties where neither names it."""
    props, patterns = b.get("properties") or {}, b.get("patternProperties") or {}
    if not isinstance(props, dict) or not isinstance(patterns, dict):
        return []
    out = [props[name]] if name in props else []
    for pattern, schema in patterns.items():
        try:
            if re.search(pattern, name):
                out.append(schema)
        except re.error:
            pass
    if not out and not restricted(b, "properties") and isinstance(b.get("additionalProperties"), dict):
        out.append(b["additionalProperties"])
    return out


def _named_by_pattern(node: dict, name: str) -> bool:
    """Whether one of node's patternProperties may match name (True when unsure)."""
    patterns = node.get("patternProperties") or {}
    if not isinstance(patterns, dict):
        return True
    for pattern in patterns:
        try:
            if re.search(pattern, name):
                return True
        except re.error:
            return True
    return False


def _generates(a: dict, name: str) -> bool:
    """Whether a's (strict) grammar may put property `name` in an object."""
    props = a.get("properties")
    if isinstance(props, dict) and name in props:
        return True
    return a.get("additionalProperties", False) is not False or _named_by_pattern(a, name)
