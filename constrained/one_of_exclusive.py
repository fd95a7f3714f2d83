"""Narrowings that make an overlapping `oneOf` exact: each branch generates less (a restriction, every output
still valid), so that no output validates two branches, which `one_of.disjoint` then proves."""

from __future__ import annotations

from typing import Optional

from radixlm.constrained.one_of import (
    DEPTH,
    VALUE_KEYWORDS,
    deref,
    disjoint,
    fails,
    int_of,
    mark_restricted,
    opaque,
    types_of,
    validated_types,
)


def _no_ref(root, ref):
    return None


def make_exclusive(out: dict, root=None, resolve=None) -> None:
    """A restriction for a `oneOf` whose branches may overlap, where one makes every output validate against
    exactly one branch; left as it is otherwise (the audit refuses it).  With `root` and `resolve`, branches
    that are local references are narrowed as copies of what they name.
    - plain object branches that overlap only through optional properties: each branch stops generating the
      names another branch requires and it does not (`oneOf: [{required: [a]}, {required: [b]}]` over
      properties a and b: the first branch never writes b);
    - array branches that share only the empty array (`[{items: number}, {items: string}]`): `[]` validates
      both, so it is never a valid answer, and each of them generates at least one item;
    - closed object branches with no name in common, which share only `{}`: each writes its first property;
    - object branches told apart by a property they may leave out (an optional `type` with a different
      `const` in each): each branch always writes it;
    - `null` (or a boolean) that two branches take whole (`[{type: [array, null]}, {type: null}]`): valid under
      both, so never an answer; no branch writes it (a branch of that type alone is left out)."""
    branches = out.get("oneOf")
    root, resolve = (out, _no_ref) if resolve is None else (root, resolve)
    if not isinstance(branches, list) or len(branches) < 2 or not all(isinstance(b, dict) for b in branches) \
            or disjoint(branches, root, resolve):
        return
    flat = [deref(b, root, resolve, DEPTH) for b in branches]
    if any(b is None for b in flat):
        return
    for narrow in (_without_names_others_require, _non_empty_arrays, _non_empty_objects, _discriminator_required,
                   _without_shared_scalars):
        narrowed = narrow(flat, root, resolve)
        if narrowed is not None and disjoint(narrowed, root, resolve):
            out["oneOf"] = narrowed
            return


def exclusive_one_ofs(root, resolve) -> None:
    """make_exclusive on every `oneOf` of a normalized schema, its references resolved against root."""
    todo, seen = [root], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            if isinstance(node.get("oneOf"), list):
                make_exclusive(node, root, resolve)
            todo.extend(v for k, v in node.items() if k not in VALUE_KEYWORDS)
        elif isinstance(node, list):
            todo.extend(node)


def _without_names_others_require(branches: list, root, resolve) -> Optional[list]:
    if not all(types_of(b) == {"object"} and not opaque(b) and b.get("additionalProperties", False) is False
               and not b.get("patternProperties") and isinstance(b.get("properties", {}), dict) for b in branches):
        return None
    required = [set(b.get("required") or []) for b in branches]
    narrowed = []
    for i, b in enumerate(branches):
        others = set().union(*(r for j, r in enumerate(required) if j != i)) - required[i]
        props = {n: s for n, s in (b.get("properties") or {}).items() if n not in others}
        narrowed.append({**b, "properties": props})
        if len(props) < len(b.get("properties") or {}):
            mark_restricted(narrowed[-1], "properties")
    return narrowed


def _non_empty_arrays(branches: list, root, resolve) -> Optional[list]:
    empty = [i for i, b in enumerate(branches) if types_of(b) == {"array"} and not opaque(b)
             and int_of(b, "minItems", 0) < 1 and int_of(b, "maxItems", 1) >= 1]
    if len(empty) < 2:
        return None
    narrowed = list(branches)
    for i in empty:
        narrowed[i] = {**branches[i], "minItems": 1}
        mark_restricted(narrowed[i], "minItems")
    return narrowed


def _non_empty_objects(branches: list, root, resolve) -> Optional[list]:
    if not all(types_of(b) == {"object"} and not opaque(b) and b.get("additionalProperties") is False
               and not b.get("patternProperties") and isinstance(b.get("properties"), dict) and b["properties"]
               for b in branches):
        return None
    names = [set(b["properties"]) for b in branches]
    if any(names[i] & names[j] for i in range(len(names)) for j in range(i + 1, len(names))):
        return None
    narrowed = []
    for b in branches:
        narrowed.append(b if b.get("required") else {**b, "required": [next(iter(b["properties"]))]})
        if not b.get("required"):
            mark_restricted(narrowed[-1], "required")
    return narrowed


def _discriminator_required(branches: list, root, resolve) -> Optional[list]:
    if not all(types_of(b) == {"object"} and not opaque(b) and isinstance(b.get("properties"), dict)
               and isinstance(b.get("required", []), list) for b in branches):
        return None
    for name in branches[0]["properties"]:
        if not all(name in b["properties"] for b in branches):
            continue
        schemas = [b["properties"][name] for b in branches]
        if not all(isinstance(s, dict) for s in schemas) or not all(
                fails(x, y, root, resolve) for i, x in enumerate(schemas) for j, y in enumerate(schemas) if i != j):
            continue
        narrowed = []
        for b in branches:
            required = list(b.get("required") or [])
            narrowed.append(b if name in required else {**b, "required": required + [name]})
            if name not in required:
                mark_restricted(narrowed[-1], "required")
        return narrowed
    return None


_WHOLE = ("enum", "const", "not", "anyOf", "oneOf", "allOf", "if", "$ref")


def _without_shared_scalars(branches: list, root, resolve) -> Optional[list]:
    narrowed = list(branches)
    for scalar in ("null", "boolean"):
        whole = [b for b in narrowed if scalar in validated_types(b) and not any(k in b for k in _WHOLE)]
        if len(whole) < 2:
            continue
        kept = []
        for b in narrowed:
            types = types_of(b)
            if scalar not in types or any(k in b for k in _WHOLE):
                kept.append(b)
            elif len(types) > 1 and isinstance(b.get("type"), list):
                kept.append({**b, "type": [t for t in b["type"] if t != scalar]})
            elif len(types) > 1:   # no `type` (`{}`, or only keywords of other types): every other type stays
                without = {**b, "type": sorted(types - {scalar})}
                mark_restricted(without, "type")
                kept.append(without)
        narrowed = kept
    if narrowed == branches or not narrowed:
        return None
    return narrowed
