"""`not` rewritten into keywords the grammar engines enforce, where an equivalent (or restricting) form exists.

Neither XGrammar nor llguidance takes `not`; these forms of it are rewritten (exactly unless said otherwise):
- `not: false` holds for every value: dropped;
- `not: {required: [a, b]}` (XGrammar only): a or b absent (`properties: {a: false}`, ...);
- `not: {type: T}`: `type` becomes the schema's types (all seven when it has none) without T; without
  "number" goes "integer" too.  Without "integer" alone, numbers that are not integers are still valid, but
  no grammar tells them apart: "number" goes as well (a restriction, marked "type");
- `not: {enum: E}` / `not: {const: c}` (optionally with a `type`, which keeps the values of that type):
  beside an `enum`/`const`, their values without E; beside `type: boolean`, the other boolean; beside
  `type: integer` (with bounds or none), the range cut into the pieces between the excluded integers.
Any other `not` is left as it is, and the audit refuses it naming the keyword.
"""

from __future__ import annotations

import math
from fractions import Fraction

from radixlm.constrained.one_of import mark_restricted
from radixlm.constrained.schema_impossible import of_type

TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
NOTES = ("title", "description", "$comment", "examples", "default")
_INTEGER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_MOST_PIECES = 64


def without_not(schema: dict, engine: str = "xgrammar", notes=NOTES):
    """schema (a dict with `not`) with the `not` rewritten away, False where nothing validates, or schema
    itself where no form above applies.  notes: the keywords that only annotate."""
    neg = schema["not"]
    rest = {k: v for k, v in schema.items() if k != "not"}
    if neg is False:
        return rest
    if not isinstance(neg, dict):
        return schema
    keys = set(neg) - set(notes)
    if keys == {"required"}:
        return _absent_names(schema, rest, neg["required"]) if engine == "xgrammar" else schema
    if keys == {"type"}:
        return _other_types(schema, rest, neg["type"])
    if keys in ({"enum"}, {"const"}, {"enum", "type"}, {"const", "type"}):
        values = neg["enum"] if "enum" in neg else [neg["const"]]
        if not isinstance(values, list) or any(json_key(v) is None for v in values):
            return schema
        if "type" in neg:
            types = type_list(neg["type"])
            if types is None:
                return schema
            values = [v for v in values if of_type(v, types)]
        return _other_values(schema, rest, values)
    return schema


def _absent_names(schema: dict, rest: dict, names):
    """`not: {required: [a, b]}` (not both present) as `allOf: [{anyOf: [{properties: {a: false}}, ...]}]` (a
    or b absent), which merges; one name: `properties: {a: false}` (XGrammar's objects hold only the names
    `properties` lists)."""
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names) \
            or not isinstance(rest.get("allOf", []), list):
        return schema
    part = {"properties": {names[0]: False}} if len(names) == 1 else {
        "anyOf": [{"properties": {n: False}} for n in names]}
    return {**rest, "allOf": list(rest.get("allOf") or []) + [part]}


def type_list(t):
    types = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if types is None or not all(x in TYPES for x in types):
        return None
    return types


def _other_types(schema: dict, rest: dict, banned):
    banned = type_list(banned)
    allowed = type_list(rest.get("type", list(TYPES)))
    if banned is None or allowed is None:
        return schema
    banned = set(banned) | ({"integer"} if "number" in banned else set())
    restricted = "integer" in banned and "number" in allowed and "number" not in banned
    kept = [t for t in allowed if t not in banned and not (restricted and t == "number")]
    if not kept:
        return schema if restricted else False
    out = {**rest, "type": kept[0] if len(kept) == 1 else kept}
    if restricted:
        mark_restricted(out, "type")
    return out


def _other_values(schema: dict, rest: dict, excluded: list):
    gone = {json_key(v) for v in excluded}
    if "const" in rest:
        key = json_key(rest["const"])
        return schema if key is None else rest if key not in gone else False
    if "enum" in rest:
        if not isinstance(rest["enum"], list) or any(json_key(v) is None for v in rest["enum"]):
            return schema
        kept = [v for v in rest["enum"] if json_key(v) not in gone]
        return {**rest, "enum": kept} if kept else False
    types = type_list(rest.get("type"))
    if types == ["boolean"]:
        kept = [b for b in (True, False) if json_key(b) not in gone]
        return {**rest, "enum": kept} if kept else False
    if types == ["integer"] and set(rest) <= {"type", *_INTEGER_BOUNDS, *NOTES}:
        return _integer_pieces(schema, rest, excluded)
    return schema


def _integer_pieces(schema: dict, rest: dict, excluded: list):
    """An integer range without some integers: anyOf of the pieces between them."""
    lo, hi = _integer_bound(rest, low=True), _integer_bound(rest, low=False)
    if lo is False or hi is False:
        return schema
    holes = sorted({int(v) for v in excluded if _integral(v) and (lo is None or v >= lo) and (hi is None or v <= hi)})
    if not holes:
        return rest
    if len(holes) >= _MOST_PIECES:
        return schema
    spans, start = [], lo
    for h in holes:
        if start is None or start <= h - 1:
            spans.append((start, h - 1))
        start = h + 1
    if hi is None or start <= hi:
        spans.append((start, hi))
    if not spans:
        return False
    pieces = [{"type": "integer", **({"minimum": a} if a is not None else {}), **({"maximum": b} if b is not None else {})}
              for a, b in spans]
    notes = {k: v for k, v in rest.items() if k in NOTES}
    return {**notes, "anyOf": pieces} if len(pieces) > 1 else {**notes, **pieces[0]}


def _integer_bound(rest: dict, low: bool):
    """The least (low) or the greatest integer the bounds allow; None: no bound; False: a bound that is not a
    number."""
    inclusive, exclusive = ("minimum", "exclusiveMinimum") if low else ("maximum", "exclusiveMaximum")
    found = []
    for key in (inclusive, exclusive):
        if key in rest:
            v = rest[key]
            if not _finite(v):
                return False
            if low:
                found.append(math.ceil(v) if key == inclusive else math.floor(v) + 1)
            else:
                found.append(math.floor(v) if key == inclusive else math.ceil(v) - 1)
    return (max if low else min)(found) if found else None


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integral(v) -> bool:
    return _finite(v) and (isinstance(v, int) or v.is_integer())


def json_key(v):
    """A key equal for values JSON Schema calls equal (1 and 1.0; true is not 1), None for a value that is not
    JSON (a non-finite number)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, (int, float)):
        return ("number", Fraction(v)) if math.isfinite(v) else None
    if isinstance(v, list):
        items = [json_key(x) for x in v]
        return None if None in items else ("array", tuple(items))
    if isinstance(v, dict):
        items = [(k, json_key(x)) for k, x in v.items()]
        return None if any(x is None for _, x in items) else ("object", tuple(sorted(items)))
    return None
