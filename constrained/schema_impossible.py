"""Schema nodes that no JSON value validates, and leaving them out where no valid output is lost.

Real-world schemas carry such nodes in places an instance never has to reach: an optional property
`{"type": "object", "enum": ["MODIFIABLE", ...]}`, an `anyOf` branch whose `minimum` exceeds its
`maximum`.  The schema still has valid instances (the ones without that property, the other branches),
so refusing it would be wrong; `leave_out_impossible` rewrites each such place into the exact form a
grammar can take: the optional property's schema becomes `false` (the name never appears), the branch is
dropped, `additionalProperties` becomes `false`, an array's `items` ends the array after its
`prefixItems`.  Where the node must be reached (a required property, the root, the only branch) it stays,
and the audit refuses the schema saying its constraints cannot all hold.

`impossible` reads a node as written: a `type` the normalizer only inferred does not count.
"""

from __future__ import annotations

from radixlm.constrained.one_of import ALL_TYPES, RESTRICTED, restricted, types_of

JSON_TYPES = {"string": (str,), "boolean": (bool,), "null": (type(None),), "object": (dict,), "array": (list,),
              "number": (int, float), "integer": (int,)}
NUMERIC = frozenset(("number", "integer"))
BOUNDS = (("minimum", "maximum", NUMERIC), ("minItems", "maxItems", frozenset(("array",))),
          ("minLength", "maxLength", frozenset(("string",))))


def of_type(value, types) -> bool:
    """Whether the JSON value is of one of the JSON types."""
    for t in types:
        if isinstance(value, bool) and t != "boolean":
            continue
        if isinstance(value, JSON_TYPES.get(t, ())) or (t == "integer" and isinstance(value, float)
                                                         and value.is_integer()):
            return True
    return False


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def value_meets(node: dict, value) -> bool:
    """Whether value meets node's string and number keywords (pattern, lengths, bounds, integer multipleOf);
    True where unsure (a pattern Python cannot read).  XGrammar writes an enum's values whatever else the
    node says, so these are checked here."""
    import re

    if isinstance(value, str):
        low, high, pattern = node.get("minLength"), node.get("maxLength"), node.get("pattern")
        if (_number(low) and len(value) < low) or (_number(high) and len(value) > high):
            return False
        try:
            return not isinstance(pattern, str) or re.search(pattern, value) is not None
        except re.error:
            return True
    if not _number(value):
        return True
    checks = (("minimum", lambda b: value >= b), ("maximum", lambda b: value <= b),
              ("exclusiveMinimum", lambda b: value > b), ("exclusiveMaximum", lambda b: value < b))
    if any(_number(node.get(k)) and not ok(node[k]) for k, ok in checks):
        return False
    step = node.get("multipleOf")
    return not (isinstance(step, int) and not isinstance(step, bool) and step > 0 and value % step != 0)


def bound_conflicts(node: dict) -> list:
    """[(low keyword, high keyword)] whose lower bound exceeds the upper one."""
    return [(lo, hi) for lo, hi, _ in BOUNDS if _number(node.get(lo)) and _number(node.get(hi)) and node[lo] > node[hi]]


def undeclared_required(node: dict):
    """A required name that a closed object (additionalProperties false, no patternProperties) does not
    declare, or None."""
    required, props = node.get("required"), node.get("properties")
    if node.get("additionalProperties") is not False or node.get("patternProperties") or \
            not isinstance(required, list):
        return None
    return next((n for n in required if not isinstance(props, dict) or n not in props), None)


def impossible(node) -> bool:
    """Whether no JSON value validates against node (False where unsure)."""
    if node is False:
        return True
    if not isinstance(node, dict):
        return False
    types = ALL_TYPES if restricted(node, "type") or "type" not in node else types_of(node)
    if not types:
        return True
    if isinstance(node.get("enum"), list) and not any(of_type(v, types) for v in node["enum"]):
        return True
    if "const" in node and not of_type(node["const"], types):
        return True
    if any(types <= family for lo, hi, family in BOUNDS if (lo, hi) in bound_conflicts(node)):
        return True
    if types <= {"object"}:
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        required = node.get("required") if isinstance(node.get("required"), list) else []
        if undeclared_required(node) is not None or any(impossible(props.get(n, True)) for n in required
                                                        if isinstance(n, str)):
            return True
    return False


def leave_out_impossible(out: dict) -> None:
    """Rewrite, in place, the places under `out` (its children already normalized) where an impossible node
    need not be reached."""
    props = out.get("properties")
    required = out.get("required") if isinstance(out.get("required"), list) else []
    if isinstance(props, dict):
        out["properties"] = {n: False if n not in required and s is not False and impossible(s) else s
                             for n, s in props.items()}
    low = out.get("minProperties")
    if isinstance(out.get("additionalProperties"), dict) and impossible(out["additionalProperties"]) and \
            (not _number(low) or low <= (len(props) if isinstance(props, dict) else 0)):
        out["additionalProperties"] = False
    for key in ("anyOf", "oneOf"):
        branches = out.get(key)
        if isinstance(branches, list):
            possible = [b for b in branches if not impossible(b)]
            if possible and len(possible) < len(branches):
                out[key] = possible
    items, prefix = out.get("items"), out.get("prefixItems")
    if isinstance(items, dict) and impossible(items) and (prefix is None or isinstance(prefix, list)):
        most = len(prefix or [])
        if not _number(out.get("minItems")) or out["minItems"] <= most:
            out["items"] = {}
            out["maxItems"] = min(most, out["maxItems"]) if _number(out.get("maxItems")) else most


_NAME_KEYWORDS = frozenset(("type", "pattern", "minLength", "maxLength", "enum", "const", "title", "description",
                            "$comment", "examples", "default", "format"))


def name_schema(node: dict, root, resolve):
    """node's propertyNames schema with its reference followed, where it only constrains strings by the keywords
    `name_allowed` reads ({} when absent); None where it says more."""
    from radixlm.constrained.one_of import DEPTH, deref

    names = node.get("propertyNames", {})
    names = {} if names is True else deref(names, root, resolve, DEPTH) if isinstance(names, dict) else None
    return names if isinstance(names, dict) and set(names) - {RESTRICTED} <= _NAME_KEYWORDS else None


def name_allowed(names: dict, name: str) -> bool:
    """Whether a property called name meets the propertyNames schema `names` (as name_schema returns it)."""
    types = types_of(names) if "type" in names else ALL_TYPES
    if "string" not in types or ("const" in names and names["const"] != name):
        return False
    return (not isinstance(names.get("enum"), list) or name in names["enum"]) and value_meets(names, name)


_ANY_NAME = frozenset(("", ".*", "^.*$", "^.*", ".*$"))
_NOTE_KEYWORDS = frozenset(("title", "description", "$comment", "examples", "default", "format"))


def forbid_refused_names(root, resolve) -> None:
    """XGrammar writes a declared property whatever `propertyNames` says of its name: an optional one whose name
    it refuses becomes `false` (it can never appear, as written too); a required one is left for the audit.
    Beside patternProperties XGrammar ignores propertyNames; where the one pattern admits every name and the
    object is closed, the name pattern becomes the patternProperties pattern (XGrammar writes names that match
    it whole, so they meet both)."""
    todo, seen = [root], set()
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(node.values())
        props = node.get("properties")
        if "propertyNames" in node and isinstance(props, dict):
            names = name_schema(node, root, resolve)
            required = node.get("required") if isinstance(node.get("required"), list) else []
            if names:
                node["properties"] = {n: False if n not in required and not name_allowed(names, n) else s
                                      for n, s in props.items()}
        patterns = node.get("patternProperties")
        if "propertyNames" in node and isinstance(patterns, dict) and len(patterns) == 1 and \
                next(iter(patterns)) in _ANY_NAME and node.get("additionalProperties", False) is False:
            names = name_schema(node, root, resolve)
            if names and isinstance(names.get("pattern"), str) and not {"\\", '"'} & set(names["pattern"]) and \
                    set(names) - {RESTRICTED} <= {"type", "pattern"} | _NOTE_KEYWORDS and "string" in types_of(names):
                node["patternProperties"] = {names["pattern"]: next(iter(patterns.values()))}
                del node["propertyNames"]
