"""Rewrites a JSON schema into one a grammar backend enforces whole, and whose every instance is valid
under the original (so a `jsonschema` check of the output against the schema as sent always holds).

For XGrammar (`normalize_schema(s, "xgrammar")`), per object schema, children first:
- a schema without `type` whose keywords all belong to one or more types (`maxLength`: string,
  `properties`: object, ...) gets that type: XGrammar applies a type's keywords only under its `type`;
- `allOf` whose parts merge without conflict (same or disjoint keys, `required` united, `properties`
  with distinct names) is merged into its parent, one `anyOf` part distributed over the rest (parts that
  are only a local `$ref` were inlined before: `schema_restrict.inline_all_of_refs`); a conflict is left
  for the audit to refuse;
- the siblings of `anyOf`/`oneOf` (`required`, `properties`, ...) are pushed into each branch, which
  XGrammar otherwise ignores (the `required` property lost under a combinator);
- `unevaluatedProperties: false` next to no applicator is `additionalProperties: false`;
- a name in `required` but not in `properties` is declared with the additionalProperties schema
  (XGrammar builds an object from `properties` and would drop it);
- a string's `minLength`/`maxLength` become one JSON-string pattern (XGrammar's own rule lets raw
  control characters in), or are merged into its `pattern` (`pattern_length`); a literal backslash or
  quote in a `pattern` is spelled as its JSON escape (XGrammar matches the pattern against the JSON text);
- integers without bounds get the int64 range, so the grammar makes the model close the number
  (unless `bounded_numbers` is off).  Unbounded `number`s are bounded in the grammar (`numbers.py`).
- keywords XGrammar does not enforce are rewritten where an equivalent or a restricting form exists
  (`schema_restrict`: draft-7 tuples, dependencies, if/then, uniqueItems);
For llguidance the number bounds apply, and schema_restrict's rewrites of the keywords it refuses
(dependencies, if/then, uniqueItems); it enforces the rest itself or refuses the schema.
"""

from __future__ import annotations

import json
import re

from radixlm.constrained.llg_any import bound_any
from radixlm.constrained.negation import without_not
from radixlm.constrained.one_of import (
    ANNOTATIONS,
    APPLICATORS,
    RESTRICTED,
    VALUE_KEYWORDS,
    mark_restricted,
    restricted,
    scoped,
    shared_types,
    types_of,
    validated_types,
    value_key,
)
from radixlm.constrained.one_of_exclusive import make_exclusive
from radixlm.constrained.pattern_length import (
    STRING_CHAR,
    class_members_escaped,
    json_escapes_spelled,
    merge_length_into_pattern,
    optional_groups_counted,
)
from radixlm.constrained.schema_impossible import leave_out_impossible, of_type, value_meets
from radixlm.constrained.schema_numbers import NUMBER_LLG, bound_schema_numbers, fractional_step_as_integers
from radixlm.constrained.schema_restrict import merge_property, restrict
from radixlm.constrained.tagged_union import tagged_union

MAX_PATTERN_LENGTH = 32        # longer maxLength: left to XGrammar (the counted regex costs compile time: on
#                                 SmolLM2's 49k vocabulary 0.4 s at 32, 0.85 s at 64, 1.6 s at 128; the plain rule 0.01 s)

FAMILIES = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "minContains",
              "maxContains", "unevaluatedItems", "additionalItems"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
               "maxProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
               "unevaluatedProperties"),
}
_KEYWORD_TYPE = {kw: t for t, kws in FAMILIES.items() for kw in kws}
_NO_INFERENCE = ("type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "if")


_NAME_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
              "dependencies")   # name -> schema (dependencies: or -> names)


def normalize_schema(schema, engine: str = "xgrammar", bounded_numbers: bool = True):
    """A rewritten copy of `schema` (parsed JSON); the input is not modified."""
    if isinstance(schema, list):
        return [normalize_schema(s, engine, bounded_numbers) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("not") in ({}, True) and all(k == "not" or k in ANNOTATIONS for k in schema):
        return False                     # `{"not": {}}`: nothing validates (WashingtonPost's forbidden names)
    if "not" in schema:
        schema = without_not(schema, engine, ANNOTATIONS)
        if not isinstance(schema, dict):
            return schema
    if "allOf" in schema:
        schema = tagged_union(schema)
    out = {}
    for k, v in schema.items():
        if k in VALUE_KEYWORDS:
            out[k] = v
        elif k in _NAME_MAPS and isinstance(v, dict):   # name -> schema: each value is a schema, the map is not
            out[k] = {name: normalize_schema(s, engine, bounded_numbers) for name, s in v.items()}
        else:
            out[k] = normalize_schema(v, engine, bounded_numbers)
    fractional_step_as_integers(out)
    if engine == "xgrammar":
        for key in ("properties", "patternProperties", "$defs", "definitions"):
            if isinstance(out.get(key), dict):
                out[key] = {k: {} if v is True else v for k, v in out[key].items()}
        if isinstance(out.get("patternProperties"), dict):   # XGrammar misreads (...)? in a name pattern too
            out["patternProperties"] = {optional_groups_counted(k): v for k, v in out["patternProperties"].items()}
        for key in ("items", "additionalProperties"):
            if out.get(key) is True:
                out[key] = {}
        restrict(out, merge)
        _infer_type(out)
        _enum_of_type(out)
        leave_out_impossible(out)
        if out.get("type") == "array" and "items" not in out:
            out["items"] = {}          # XGrammar reads a missing items as "no more items"
        _merge_all_of(out)
        leave_out_impossible(out)   # branches the merge made impossible (a tagged union's objects beside a string enum)
        push_into_branches(out)
        make_exclusive(out)
        _close_unevaluated(out)
        _declare_required(out)
        if isinstance(out.get("pattern"), str) and "format" in out:
            out.pop("format")   # XGrammar writes the format and drops the pattern; a format only annotates
        if isinstance(out.get("pattern"), str):
            out["pattern"] = optional_groups_counted(out["pattern"])
        merge_length_into_pattern(out)
        if isinstance(out.get("pattern"), str) and "minLength" not in out and "maxLength" not in out:
            out["pattern"] = json_escapes_spelled(out["pattern"])   # lengths left: the audit refuses them
        _bounded_string_as_pattern(out)
    elif engine == "llguidance":
        restrict(out, merge, open_objects=True)
        if isinstance(out.get("pattern"), str):
            out["pattern"] = class_members_escaped(out["pattern"])
        if isinstance(out.get("patternProperties"), dict):
            out["patternProperties"] = {class_members_escaped(k): v for k, v in out["patternProperties"].items()}
    if bounded_numbers:
        bound_schema_numbers(out, engine)
    return out


def _types(node: dict) -> list:
    t = node.get("type")
    return [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []


def finished(node, engine: str = "xgrammar"):
    """The normalized schema as the engine takes it: without RESTRICTED marks, and for XGrammar without the
    names whose schema is false in closed objects (XGrammar rejects the schema `false`; in a closed object, as
    XGrammar's strict mode closes one without additionalProperties, never writing the name is exact).  Done
    last: a part of an `allOf` that forbids a name must still forbid it once merged."""
    if isinstance(node, list):
        return [finished(v, engine) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in VALUE_KEYWORDS:
            out[k] = v
        elif k in _NAME_MAPS and isinstance(v, dict):
            out[k] = {name: finished(s, engine) for name, s in v.items()}
        elif k != RESTRICTED:
            out[k] = finished(v, engine)
    if engine == "xgrammar" and isinstance(out.get("properties"), dict) and \
            out.get("additionalProperties", False) is False:
        required = out.get("required") if isinstance(out.get("required"), list) else []
        out["properties"] = {k: v for k, v in out["properties"].items() if v is not False or k in required}
    return out


def _infer_type(out: dict) -> None:
    if any(k in out for k in _NO_INFERENCE):
        return
    kinds = []
    for kw in out:
        t = _KEYWORD_TYPE.get(kw)
        if t and t not in kinds:
            kinds.append(t)
    if kinds:
        # a restriction, never a widening: values of other types were valid too, and are simply not generated
        out["type"] = kinds[0] if len(kinds) == 1 else kinds
        mark_restricted(out, "type")


def _enum_of_type(out: dict) -> None:
    """enum values of another type than `type` can never validate: dropped (XGrammar would emit them);
    none left is left for the audit to call unsatisfiable.  So are values (and a `const`) that the node's
    pattern, lengths or bounds rule out, which XGrammar would emit too; none left is an empty enum."""
    types, values = _types(out), out.get("enum")
    if types and isinstance(values, list):
        kept = [v for v in values if of_type(v, types)]
        if kept and len(kept) < len(values):
            out["enum"] = values = kept
    if "const" in out and not value_meets(out, out["const"]):
        del out["const"]
        out["enum"] = []
    elif isinstance(values, list) and not all(value_meets(out, v) for v in values):
        out["enum"] = [v for v in values if value_meets(out, v)]


def merge(a: dict, b: dict):
    """a and b as one schema (both must hold), or None where that is not a plain union of keys."""
    if scoped(a, b) or scoped(b, a):
        return None
    out = dict(a)
    for k, v in b.items():
        if k not in out or out[k] == v or k in ANNOTATIONS:
            out.setdefault(k, v)
        elif k == RESTRICTED:
            out[k] = sorted(set(out[k]) | set(v))
        elif k == "enum" and isinstance(v, list) and isinstance(out[k], list):
            both = [x for x in out[k] if value_key(x) in {value_key(y) for y in v}]
            if not both:
                return None
            out[k] = both                      # a value of both lists
        elif k == "required" and isinstance(v, list) and isinstance(out[k], list):
            out[k] = out[k] + [n for n in v if n not in out[k]]
        elif k == "properties" and isinstance(v, dict) and isinstance(out[k], dict):
            props = dict(out[k])
            for n, s in v.items():
                both = s if n not in props else merge_property(props[n], s, merge)
                if both is None and not _never_valid(n, props[n], s, a, b):
                    return None
                if both is None:
                    del props[n]
                else:
                    props[n] = both
            out[k] = props
        elif k in _TIGHTER and _number(v) and _number(out[k]):
            out[k] = _TIGHTER[k](out[k], v)          # both bounds hold: the tighter one
        elif k == "type":
            both = [t for t in _types(out) if t in _types({"type": v}) or (t == "integer" and "number" in _types(
                {"type": v}))] + [t for t in _types({"type": v}) if t == "integer" and "number" in _types(out)]
            if not both:
                return None
            out[k] = both[0] if len(both) == 1 else both
        else:
            return None
    if restricted(out, "type") and types_of(out) == validated_types(a) & validated_types(b):
        mark_restricted(out, "type", False)     # the other part's own type says no more than the inferred one
    _enum_of_type(out)                          # one part's enum, the other's pattern or bounds
    return out


def _never_valid(name: str, x, y, a: dict, b: dict) -> bool:
    """Whether an optional property whose two schemas share no JSON type can simply be left out of the merge of
    a and b: no value is valid under both, and neither object admits the name through another keyword."""
    if not (isinstance(x, dict) and isinstance(y, dict)) or "$ref" in x or "$ref" in y:
        return False
    if any(name in (o.get("required") or []) or o.get("additionalProperties", False) is not False
           or o.get("patternProperties") for o in (a, b)):
        return False
    return not shared_types(validated_types(x), validated_types(y))


_TIGHTER = {**dict.fromkeys(("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"), max),
            **dict.fromkeys(("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"), min)}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _merge_all_of(out: dict) -> None:
    """allOf parts merged into the parent; one part that is an `anyOf` or `oneOf` (beside plain keywords) is
    distributed: A and (B1 or B2) is (A and B1) or (A and B2), each branch merged (for oneOf too: where A holds,
    exactly one Bi holds when exactly one A and Bi does).  Where a branch is a reference, the combinator stays
    beside the merged keywords, which are pushed into its branches once they are inlined."""
    parts = out.get("allOf")
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        return
    # the parts' names count as evaluated: once merged, the names they declare are the merged node's own
    closed = out.get("unevaluatedProperties") is False
    merged = {k: v for k, v in out.items() if k != "allOf" and not (closed and k == "unevaluatedProperties")}
    choice = key = None
    for part in parts:
        for kind in ("anyOf", "oneOf"):
            if choice is None and isinstance(part.get(kind), list) and all(isinstance(b, dict) for b in part[kind]) \
                    and not any(k in part for k in APPLICATORS if k != kind) and kind not in merged:
                choice, key, part = part[kind], kind, {k: v for k, v in part.items() if k != kind}
        if any(k in part for k in APPLICATORS):
            return
        merged = merge(merged, part)
        if merged is None or (choice is not None and any(k in merged for k in APPLICATORS)):
            return
    if choice is not None:
        notes = {k: v for k, v in merged.items() if k in ANNOTATIONS}
        plain = {k: v for k, v in merged.items() if k not in ANNOTATIONS}
        branches = [merge(plain, b) if not any(k in b for k in APPLICATORS) else None for b in choice]
        if all(b is not None for b in branches):
            for b in branches:
                if closed:      # each branch's output holds its own names and the shared ones: all evaluated
                    b["unevaluatedProperties"] = False
                    _close_unevaluated(b)
                _declare_required(b)
            merged, closed = {**notes, key: branches}, False
        else:
            merged = {**merged, key: choice}
    out.clear()
    out.update(merged)
    if closed:
        out["unevaluatedProperties"] = False


def _close_unevaluated(out: dict) -> None:
    """`unevaluatedProperties: false` next to no applicator is `additionalProperties: false` (a schema there already
    evaluates every other name)."""
    if out.get("unevaluatedProperties") is False and not any(k in out for k in APPLICATORS):
        out.pop("unevaluatedProperties")
        out.setdefault("additionalProperties", False)


def push_into_branches(out: dict) -> None:
    """The siblings of `anyOf`/`oneOf` merged into each branch, where they merge with every one."""
    for key in ("anyOf", "oneOf"):
        branches = out.get(key)
        if not isinstance(branches, list) or not all(isinstance(b, dict) for b in branches):
            continue
        if out.get("additionalProperties") in ({}, True):   # no constraint, and it would sit beside a branch's $ref
            del out["additionalProperties"]
        siblings = {k: v for k, v in out.items() if k != key and k not in ANNOTATIONS}
        if not siblings or any(k in siblings for k in APPLICATORS):
            continue
        pushed = []
        for b in branches:
            m = merge(b, siblings)
            if m is None:
                return
            _declare_required(m)
            types = _types(m)
            if types and isinstance(m.get("enum"), list) and not any(of_type(v, types) for v in m["enum"]):
                continue                       # a branch nothing can match now (`enum` of strings on an object)
            pushed.append(m)
        if not pushed:
            return
        for k in siblings:
            del out[k]
        out[key] = pushed


def _declare_required(out: dict) -> None:
    """A required name that `properties` lacks is declared with the additionalProperties schema, which
    governs it anyway (any value when absent or true); left alone when additionalProperties is false
    (the audit refuses: the two cannot both hold) or patternProperties decide its schema."""
    required = out.get("required")
    props = out.get("properties", {})
    extra = out.get("additionalProperties", True)
    patterns = out.get("patternProperties") or {}
    if not (isinstance(required, list) and isinstance(props, dict) and isinstance(patterns, dict)):
        return
    declared = {}
    for name in required:
        if not isinstance(name, str) or name in props:
            continue
        matching = [s for p, s in patterns.items() if _search(p, name)]
        if len(matching) == 1:
            declared[name] = matching[0]        # the pattern's schema governs it anyway
        elif not matching and extra is not False and not (patterns and any(_search(p, name) is None
                                                                           for p in patterns)):
            declared[name] = extra if isinstance(extra, dict) else {}
    if declared:
        out["properties"] = {**props, **declared}


def _search(pattern: str, name: str):
    """Whether pattern matches name (None when Python cannot read the pattern)."""

    try:
        return re.search(pattern, name) is not None
    except re.error:
        return None


def declare_required_properties(schema):
    """A copy of `schema` (parsed JSON) in which every object schema declares its required names."""
    if isinstance(schema, list):
        return [declare_required_properties(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: declare_required_properties(v) for k, v in schema.items()}
    _bounded_string_as_pattern(out)
    _declare_required(out)
    return out


def _bounded_string_as_pattern(out: dict) -> None:
    """A string with minLength/maxLength (and no pattern or format): the same bounds as a pattern."""
    low, high = out.get("minLength"), out.get("maxLength")
    if (out.get("type") != "string" or (low is None and high is None) or "pattern" in out or "format" in out
            or "enum" in out or "const" in out):
        return
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in (low, high)):
        return
    if high is not None and (high > MAX_PATTERN_LENGTH or (low or 0) > high):   # low > high: the audit refuses
        return
    out.pop("minLength", None)
    out.pop("maxLength", None)
    out["pattern"] = f"^{STRING_CHAR}{{{low or 0},{'' if high is None else high}}}$"


def normalize_schema_text(text: str, engine: str = "xgrammar", bounded_numbers: bool = True) -> str:
    """The schema text rewritten; unparsable text is returned unchanged (the compiler reports it)."""
    try:
        schema = json.loads(text)
    except ValueError:
        return text
    fixed = finished(marked_schema(schema, engine, bounded_numbers), engine)
    return text if fixed == schema else json.dumps(fixed)


def marked_schema(schema, engine: str = "xgrammar", bounded_numbers: bool = True):
    """normalize_schema, and for llguidance its open values bounded (llg_any), with the RESTRICTED marks
    that `finished` strips."""
    fixed = normalize_schema(schema, engine, bounded_numbers)
    if engine == "llguidance" and bounded_numbers:
        fixed = bound_any(fixed, NUMBER_LLG)
    return fixed


def load_schema(text: str):
    """Parsed schema, or None when the text is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None
