"""Keywords XGrammar does not enforce, rewritten into ones it does: an equivalent form, or a restriction
whose every output is still valid under the keyword (never a widening).

Per object schema, after its children are normalized (`schema_normalize.normalize_schema` calls these):
- draft-7 tuples (`items: [...]`, `additionalItems`) are `prefixItems` / `items` (equivalent);
- `dependentRequired` / `dependencies` (name -> names): the dependent names become required (a
  restriction: the dependency then holds whether or not the trigger is present); where a name cannot be
  required (`additionalProperties: false` without it), the trigger is left out instead when it is optional;
- `dependentSchemas` / `dependencies` (name -> schema): an optional trigger of a closed object is left out;
  otherwise the schema is merged into the object and holds always (a restriction), when it merges;
- `if` / `then` (and `else`): `if` and `then` merged into the object, so every output takes the `then`
  path (a restriction), when they merge;
- `uniqueItems: true`: at most one item (a restriction; no grammar can tell distinct items apart), unless
  `minItems` asks for two or more (then the audit refuses it);
- `patternProperties` that XGrammar cannot apply (two patterns, or one that governs a declared name too): the
  declared and required names with all their schemas merged, in a closed object (a restriction).
Where a rewrite does not apply the keyword stays, and the audit refuses it naming the keyword.

llguidance refuses `dependencies`, `if` and `uniqueItems` too ("Unimplemented keys"), so its schemas get the
same rewrites with `open_objects=True`: its objects admit names beyond `properties` unless
`additionalProperties` is false, so leaving a trigger out of `properties` would not keep it out (that rewrite
is XGrammar's only).
"""

from __future__ import annotations

from radixlm.constrained.one_of import APPLICATORS, VALUE_KEYWORDS, mark_narrowed, mark_restricted, written_types


def restrict(out: dict, merge, open_objects: bool = False) -> None:
    """Rewrite `out` in place; `merge(a, b)` is schema_normalize.merge (None when a and b do not merge);
    open_objects: the engine generates names `properties` does not list (llguidance)."""
    _tuple_items(out)
    _dependencies(out, merge, open_objects)
    _if_then(out, merge)
    _unique_items(out)
    if not open_objects:
        _overlapping_patterns(out, merge)


def _overlapping_patterns(out: dict, merge) -> None:
    """patternProperties that XGrammar cannot apply (two patterns, or a pattern that also names a declared
    property): each declared or required name gets every schema that governs it, merged, and the object is
    closed to other names (a restriction: names beyond those, and optional ones whose schemas do not merge,
    are never written).  Left alone where a required name's schemas do not merge or a pattern is unreadable."""
    import re

    patterns, props = out.get("patternProperties"), out.get("properties", {})
    required = out.get("required", [])
    if not isinstance(patterns, dict) or not patterns or not isinstance(props, dict) or "minProperties" in out \
            or not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        return
    try:
        found = [re.compile(p) for p in patterns]
    except re.error:
        return
    if len(patterns) == 1 and not any(found[0].search(n) and s != patterns[next(iter(patterns))]
                                      for n, s in props.items()):
        return                                   # one pattern apart from the declared names: XGrammar's own
    extra = out.get("additionalProperties", True)
    closed = {}
    for name in list(props) + [n for n in required if n not in props]:
        schemas = [s for rx, s in zip(found, patterns.values()) if rx.search(name)]
        if name in props:
            schemas.insert(0, props[name])
        elif not schemas:
            if extra is False:
                return
            schemas = [{} if extra is True else extra]
        both = schemas[0]
        for s in schemas[1:]:
            both = merge_property(both, s, merge) if both is not None else None
        if both is None and name in required:
            return
        if both is not None:                     # an optional name whose schemas do not merge is never written
            closed[name] = both
    out.pop("patternProperties")
    out["properties"] = closed
    out["additionalProperties"] = False
    mark_restricted(out, "closed")      # the names the patterns admitted are valid too


def merge_property(a, b, merge):
    """Two schemas of one property name as one; None when they do not merge."""
    if a == b or b in ({}, True):
        return a
    if a in ({}, True):
        return b
    if a is False or b is False:
        return False
    return merge(a, b) if isinstance(a, dict) and isinstance(b, dict) else None


def _tuple_items(out: dict) -> None:
    items = out.get("items")
    if isinstance(items, list) and "prefixItems" not in out:
        out["prefixItems"] = items
        extra = out.pop("additionalItems", True)
        out["items"] = {} if extra is True else extra
    elif not isinstance(items, list) and "additionalItems" in out:
        out.pop("additionalItems")        # without tuple items it has no effect


def _split_dependencies(out: dict) -> tuple[dict, dict]:
    names, schemas = dict(out.get("dependentRequired") or {}), dict(out.get("dependentSchemas") or {})
    for trigger, dep in (out.get("dependencies") or {}).items():
        (names if isinstance(dep, list) else schemas)[trigger] = dep
    return names, schemas


def _dependencies(out: dict, merge, open_objects: bool = False) -> None:
    if not any(isinstance(out.get(k), dict) for k in ("dependentRequired", "dependentSchemas", "dependencies")):
        return
    names, schemas = _split_dependencies(out)
    work = {k: v for k, v in out.items() if k not in ("dependentRequired", "dependentSchemas", "dependencies")}
    for trigger, needed in names.items():
        if not isinstance(needed, list) or not all(isinstance(n, str) for n in needed):
            return
        work = _require(work, trigger, needed, open_objects)
        if work is None:
            return
    for trigger, schema in schemas.items():
        if schema is True or schema == {}:
            continue
        merged = None if open_objects else _drop_trigger(work, trigger)   # an optional name less, rather than
        if merged is None and isinstance(schema, dict):                    # a schema over the whole object
            merged = merge(work, schema)
            if merged is not None and trigger not in (work.get("required") or []):
                mark_narrowed(merged, written_types(out))   # the dependent schema holds even without its trigger
        if merged is None:
            return
        work = merged
    out.clear()
    out.update(work)


def _require(work: dict, trigger: str, needed: list, open_objects: bool = False):
    """work with `needed` required (or `trigger` left out when some cannot be), or None."""
    props = work.get("properties") if isinstance(work.get("properties"), dict) else {}
    closed = work.get("additionalProperties") is False or "patternProperties" in work
    if not closed or all(n in props for n in needed):
        required = list(work.get("required") or [])
        out = {**work, "required": required + [n for n in needed if n not in required]}
        if trigger not in required and len(out["required"]) > len(required):
            mark_restricted(out, "required")
        return out
    return None if open_objects else _drop_trigger(work, trigger)


def _drop_trigger(work: dict, trigger: str):
    """work never generating `trigger` (XGrammar builds objects from `properties` only), or None when it is
    required or another keyword could still admit it."""
    if trigger in (work.get("required") or []) or work.get("additionalProperties", False) is not False or \
            work.get("patternProperties"):
        return None
    props = {k: v for k, v in (work.get("properties") or {}).items() if k != trigger}
    out = {**work, "properties": props}
    mark_restricted(out, "properties")
    return out


def _if_then(out: dict, merge) -> None:
    cond, then = out.get("if"), out.get("then", True)
    if not isinstance(cond, dict):
        return
    rest = {k: v for k, v in out.items() if k not in ("if", "then", "else")}
    merged = merge(rest, cond)
    if merged is not None and then is not True:
        merged = merge(merged, then) if isinstance(then, dict) else None
    if merged is None:
        return
    written = written_types(out)
    out.clear()
    out.update(merged)
    mark_narrowed(out, written)


def _unique_items(out: dict) -> None:
    if out.get("uniqueItems") is not True:
        if out.get("uniqueItems") is False:
            out.pop("uniqueItems")
        return
    low, high = out.get("minItems", 0), out.get("maxItems")
    if isinstance(high, int) and high <= 1:
        out.pop("uniqueItems")
    elif isinstance(low, int) and low <= 1 and not out.get("prefixItems"):
        out.pop("uniqueItems")
        out["maxItems"] = 1
        mark_restricted(out, "maxItems")


_REF_NOTES = ("$ref", "title", "description", "default", "examples", "$comment", "$defs", "definitions",
              "$schema", "$id", "deprecated", "readOnly", "writeOnly")


def inline_ref_siblings(root, merge, resolve, settle=None):
    """A copy of the (normalized) schema in which `{"$ref": X, <keywords>}`, whose keywords XGrammar would
    ignore beside the reference, becomes X's schema merged with them (X's own references stay references);
    left as it is where they do not merge (the audit refuses it).  The root's own `$ref` is kept.
    `settle(node)`, when given, rewrites each merged node in place (keywords now beside X's `oneOf` pushed
    into its branches)."""
    def walk(node, top: bool):
        if isinstance(node, list):
            return [walk(v, False) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: (v if k in VALUE_KEYWORDS else walk(v, False)) for k, v in node.items()}
        ref = out.get("$ref")
        extra = {k: v for k, v in out.items() if k not in _REF_NOTES}
        if top or not isinstance(ref, str) or not extra:
            return out
        target = resolve(root, ref)
        if not isinstance(target, dict) or "$ref" in target:
            return out
        closed = extra.get("unevaluatedProperties") is False    # X's names count as evaluated: merged, they are its own
        merged = merge({k: v for k, v in target.items() if k not in ("$defs", "definitions")},
                       {k: v for k, v in extra.items() if not (closed and k == "unevaluatedProperties")})
        if merged is None:
            return out
        if settle is not None:
            settle(merged)
        if closed and any(k in merged for k in APPLICATORS):
            merged["unevaluatedProperties"] = False     # the audit refuses it
        elif closed:
            merged.setdefault("additionalProperties", False)
        return {**{k: v for k, v in out.items() if k in _REF_NOTES and k != "$ref"}, **merged}
    return walk(root, True)


def inline_all_of_refs(root, resolve):
    """A copy of the (raw) schema in which an `allOf` part that is only a local reference, `{"$ref": X}`, is a
    copy of X's schema, so the parts can merge (schema_normalize merges `allOf` parts without references).
    Equivalent.  Left as a reference where X is not a local object schema, or is itself a reference or names
    an `$id` (a new base for its own references)."""
    def walk(node):
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: (v if k in VALUE_KEYWORDS else walk(v)) for k, v in node.items()}
        parts = out.get("allOf")
        if isinstance(parts, list):
            out["allOf"] = [_target(p) for p in parts]
        return out

    inlining = []                    # the references being inlined, outermost first (a cycle stays a reference)

    def _target(part):
        if not isinstance(part, dict) or not isinstance(part.get("$ref"), str) or \
                any(k not in _REF_NOTES for k in part) or part["$ref"] in inlining:
            return part
        target = resolve(root, part["$ref"])
        if not isinstance(target, dict) or "$ref" in target or "$id" in target or target is root:
            return part
        inlining.append(part["$ref"])
        try:                         # its own allOf references too (an Event that is a ProtocolMessage)
            return walk({k: v for k, v in target.items() if k not in ("$defs", "definitions")})
        finally:
            inlining.pop()
    return walk(root)
