"""What XGrammar would not enforce in a (normalized) JSON schema, and what no output could satisfy.

`audit(schema)` walks the schema from its root, following local `$ref`s (each target once), and returns
the `Issue`s in document order: a keyword XGrammar drops or mis-reads (`unsupported`), or constraints
that cannot all hold (`unsatisfiable`).  The grammar backend refuses a schema with an issue (HTTP 400
naming the keyword and its JSON pointer) or, under `--grammar-backend auto`, compiles it with
llguidance.  The per-keyword decisions were made by compiling the JSON-Schema-Test-Suite's schemas
and matching their valid and invalid instances (tests/constrained/test_schema_suite.py); README
"Structured output: what is enforced" lists them.  Plain Python.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from radixlm.constrained.one_of import disjoint, types_of
from radixlm.constrained.pattern_length import is_js_literal, misplaced_anchor, pattern_widths, regular_only
from radixlm.constrained.schema_impossible import (
    bound_conflicts,
    name_allowed,
    name_schema,
    of_type,
    undeclared_required,
)

# keywords XGrammar 0.2 ignores or enforces wrongly wherever they appear (value: why)
NOT_ENFORCED = {
    "not": "negation", "if": "conditional subschemas", "then": "conditional subschemas",
    "else": "conditional subschemas", "dependentRequired": "dependencies between properties",
    "dependentSchemas": "dependencies between properties", "dependencies": "dependencies between properties",
    "contains": "array containment", "minContains": "array containment", "maxContains": "array containment",
    "unevaluatedItems": "unevaluated items", "unevaluatedProperties": "unevaluated properties",
    "additionalItems": "draft-7 tuple items",
    "$dynamicRef": "dynamic references", "$recursiveRef": "dynamic references", "$anchor": "anchors",
    "$dynamicAnchor": "anchors", "allOf": "an intersection of schemas that do not merge",
}
# the keywords of the JSON Schema vocabularies (drafts 4 to 2020-12) that constrain or apply; any other key
# (`x-...`, `markdownDescription`, annotations) has no effect on validation, so it is never an issue beside
# `$ref` or a combinator
VOCABULARY = frozenset((
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "items", "prefixItems", "additionalItems", "contains",
    "minContains", "maxContains", "maxItems", "minItems", "uniqueItems", "unevaluatedItems", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "maxProperties", "minProperties", "required",
    "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties", "allOf", "anyOf", "oneOf",
    "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef", "$anchor", "$dynamicAnchor", "$id", "id",
    "$schema", "contentEncoding", "contentMediaType", "contentSchema"))
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMAS = ("additionalProperties", "items", "contains", "propertyNames", "not", "if", "then", "else",
               "unevaluatedItems", "unevaluatedProperties", "additionalItems")


class Issue(NamedTuple):
    keyword: str
    pointer: str            # JSON pointer of the keyword
    kind: str               # "unsupported" | "unsatisfiable"
    why: str

    def message(self, backend: str = "xgrammar") -> str:
        if self.kind == "unsatisfiable":
            return (f"invalid json_schema: the constraints at {self.pointer} cannot all hold ({self.why}); "
                    f"no output could satisfy keyword {self.keyword!r}")
        return (f"json_schema keyword {self.keyword!r} at {self.pointer} is not enforced by the {backend} grammar "
                f"backend ({self.why}); refused rather than answered without it (the server's "
                f"--grammar-backend auto or llguidance may enforce it)")


def _esc(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


def resolve(root, ref: str):
    """The subschema a local `#/...` pointer names, or None."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def audit(schema) -> list:
    issues: list = []
    seen: set = set()
    todo = [(schema, "")]
    while todo:
        node, ptr = todo.pop(0)
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        _check_node(node, ptr, issues, schema, todo)
    return issues


def _check_node(node: dict, ptr: str, issues: list, root, todo: list) -> None:
    for kw, why in NOT_ENFORCED.items():
        if kw in node:
            issues.append(Issue(kw, f"{ptr}/{kw}", "unsupported", why))
    if node.get("uniqueItems") is True:
        issues.append(Issue("uniqueItems", f"{ptr}/uniqueItems", "unsupported", "distinct array items"))
    if "$id" in node and ptr:
        issues.append(Issue("$id", f"{ptr}/$id", "unsupported", "a nested base URI changes what $ref names"))
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = resolve(root, ref)
        if target is None:
            issues.append(Issue("$ref", f"{ptr}/$ref", "unsupported", f"only local references (#/...) resolve, "
                                                                      f"not {ref[:80]!r}"))
        else:
            todo.append((target, ref[1:]))
        extra = [k for k in node if k in VOCABULARY and k not in ("$ref", "id", "contentEncoding", "contentMediaType",
                                                                  "$schema")
                 and not (k == "type" and _implied_type(node, target))
                 and not (not ptr and k == "$id")]
        if extra:
            issues.append(Issue(extra[0], f"{ptr}/{extra[0]}", "unsupported", "a keyword beside $ref"))
    _check_combinators(node, ptr, issues, root)
    _check_types(node, ptr, issues)
    _check_property_names(node, ptr, issues, root)
    for key in SUBSCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            todo.extend((v, f"{ptr}/{key}/{_esc(k)}") for k, v in node[key].items())
    for key in SUBSCHEMA_LISTS + ("items",):
        if isinstance(node.get(key), list):
            todo.extend((v, f"{ptr}/{key}/{i}") for i, v in enumerate(node[key]))
    for key in SUBSCHEMAS:
        if isinstance(node.get(key), dict):
            todo.append((node[key], f"{ptr}/{key}"))


def _check_property_names(node: dict, ptr: str, issues: list, root) -> None:
    """XGrammar applies `propertyNames` to the names additionalProperties admits only: beside patternProperties
    it is ignored, and a required declared name is written whatever it says."""
    if "propertyNames" not in node or node["propertyNames"] in ({}, True):
        return
    names = name_schema(node, root, resolve)
    if names is None or (names and node.get("patternProperties")):
        issues.append(Issue("propertyNames", f"{ptr}/propertyNames", "unsupported",
                            "a name schema beside patternProperties, or one that says more than a string's "
                            "pattern, lengths and values"))
        return
    props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    for name in node.get("required") if isinstance(node.get("required"), list) else []:
        if isinstance(name, str) and name in props and not name_allowed(names, name):
            issues.append(Issue("propertyNames", f"{ptr}/propertyNames", "unsatisfiable",
                                f"the required name {name[:60]!r} is not a name it allows"))
            return


def _implied_type(node: dict, target) -> bool:
    """A `type` beside `$ref` that the target already implies (every type the target admits is in it)."""
    if not isinstance(target, dict) or "type" not in target:
        return False
    return types_of(target) <= types_of({"type": node["type"]})


def _check_combinators(node: dict, ptr: str, issues: list, root) -> None:
    for key in ("anyOf", "oneOf"):
        if key in node:
            extra = [k for k in node if k in VOCABULARY and k not in (key, "$schema", "$id", "id", "contentEncoding",
                                                                      "contentMediaType")]
            if extra:
                issues.append(Issue(extra[0], f"{ptr}/{extra[0]}", "unsupported", f"a keyword beside {key} "
                                    f"that does not merge into its branches"))
    branches = node.get("oneOf")
    if isinstance(branches, list) and not disjoint(branches, root, resolve):
        issues.append(Issue("oneOf", f"{ptr}/oneOf", "unsupported", "branches that may overlap (XGrammar reads "
                                                                     "oneOf as anyOf)"))


def _check_types(node: dict, ptr: str, issues: list) -> None:
    types = node.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    if "string" in types:
        _check_string(node, ptr, issues)
    if node.get("enum") == []:
        issues.append(Issue("enum", f"{ptr}/enum", "unsatisfiable", "no value of enum meets the other keywords"))
    elif types and isinstance(node.get("enum"), list) and not any(of_type(v, types) for v in node["enum"]):
        issues.append(Issue("enum", f"{ptr}/enum", "unsatisfiable", f"no value of enum is of type {types}"))
    step = node.get("multipleOf")
    if "multipleOf" in node and ("number" in types or not isinstance(step, int) or isinstance(step, bool)):
        issues.append(Issue("multipleOf", f"{ptr}/multipleOf", "unsupported", "multiples of a number that is "
                                                                              "not an integer"))
    elif "multipleOf" in node and any(k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        issues.append(Issue("multipleOf", f"{ptr}/multipleOf", "unsupported", "multiples within bounds (XGrammar "
                                                                              "drops multipleOf beside a bound)"))
    for low, high in bound_conflicts(node):
        issues.append(Issue(high, f"{ptr}/{high}", "unsatisfiable", f"{low} {node[low]} > {high} {node[high]}"))
    pattern_props = node.get("patternProperties")
    if isinstance(pattern_props, dict) and pattern_props and (len(pattern_props) > 1 or _names_match(
            *next(iter(pattern_props.items())), node.get("properties"))):
        issues.append(Issue("patternProperties", f"{ptr}/patternProperties", "unsupported",
                            "a property name that two schemas govern (overlapping patterns or properties)"))
    name = undeclared_required(node)
    if name is not None:
        issues.append(Issue("required", f"{ptr}/required", "unsatisfiable", f"{str(name)[:60]!r} is required but "
                            f"additionalProperties is false and properties does not declare it"))


def _names_match(pattern: str, schema, props) -> bool:
    """A declared property that the pattern also governs, with another schema (both would apply)."""
    import re

    try:
        return isinstance(props, dict) and any(re.search(pattern, n) and s != schema for n, s in props.items())
    except re.error:
        return True


def _check_string(node: dict, ptr: str, issues: list) -> None:
    pattern = node.get("pattern")
    lengths = [k for k in ("minLength", "maxLength") if k in node]
    if isinstance(pattern, str):
        anchor = misplaced_anchor(pattern)
        if anchor and is_js_literal(pattern):
            issues.append(Issue("pattern", f"{ptr}/pattern", "unsatisfiable",
                                f"pattern {pattern[:60]!r} is written as a JavaScript /.../ literal: JSON Schema "
                                f"reads the slashes as characters, so its {anchor!r} can never match; send the "
                                f"pattern without the slashes"))
            return
        if anchor:
            issues.append(Issue("pattern", f"{ptr}/pattern", "unsupported", f"a {anchor!r} anchor inside the pattern"))
            return
        irregular = regular_only(pattern)
        if irregular:
            issues.append(Issue("pattern", f"{ptr}/pattern", "unsupported", f"{irregular} in the pattern"))
            return
        if lengths:
            widths = pattern_widths(pattern)
            anchored = pattern.startswith("^") and pattern.endswith("$")
            low, high = node.get("minLength", 0), node.get("maxLength")
            if widths and anchored and ((high is not None and widths[0] > high) or
                                        (widths[1] is not None and widths[1] < low)):
                issues.append(Issue(lengths[-1], f"{ptr}/{lengths[-1]}", "unsatisfiable",
                                    f"every match of pattern {pattern[:60]!r} has {widths[0]} to "
                                    f"{'any' if widths[1] is None else widths[1]} characters"))
            else:
                issues.append(Issue(lengths[-1], f"{ptr}/{lengths[-1]}", "unsupported",
                                    "a length bound together with a pattern that does not imply it"))
    elif lengths and ("format" in node or "enum" in node or "const" in node):
        if "format" in node:
            issues.append(Issue(lengths[-1], f"{ptr}/{lengths[-1]}", "unsupported", "a length bound with a format"))


def first_issue(schema) -> Optional[Issue]:
    issues = audit(schema)
    unsat = [i for i in issues if i.kind == "unsatisfiable"]
    return (unsat or issues or [None])[0]
