"""The last step before refusing a JSON schema: a grammar that never writes the part XGrammar cannot enforce,
where an instance need not contain that part.

A schema the audit refuses often has its one unenforceable keyword deep in a place an instance may leave
out: an optional property (`"name": {"not": {...}}`), one branch of an `anyOf`, the schema of the items of an
array that may be empty, `additionalProperties` of an object.  Every instance that avoids that place is valid
whatever the keyword says, so the grammar can generate only those (a restriction, never a widening, like the
other narrowings: every output still validates against the schema as sent):
- an optional property of an object XGrammar builds closed (no `additionalProperties` nor
  `patternProperties` to admit the name again) is never written;
- an `anyOf` branch is dropped while another remains;
- an array's `items` ends the array after its `prefixItems` (an empty array where it has none), where
  `minItems` allows it;
- `additionalProperties` becomes false;
- a `oneOf` whose branches may overlap keeps only the branches each of whose outputs fails every other
  branch as written (`one_of.fails`), where there are such.
The place is the nearest such one above the keyword.  Each narrowing is marked in `RESTRICTED`, so that a
`oneOf` proof elsewhere still reads the node as the user wrote it.  Used only where no engine enforces the
schema whole: under `--grammar-backend auto` after llguidance refused it too.
"""

from __future__ import annotations

from typing import Optional

from radixlm.constrained.one_of import DEPTH, deref, fails, mark_narrowed, mark_restricted, written_types
from radixlm.constrained.schema_audit import SUBSCHEMA_LISTS, SUBSCHEMA_MAPS, SUBSCHEMAS

MAX_LEAVE_OUTS = 32            # narrowings for one schema; past that it is refused


def _steps(root, pointer: str) -> list:
    """[(schema, key, next key or None)] for each schema on the pointer's path, root first."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    steps, node, kind, i = [], root, "schema", 0
    while i < len(parts) and isinstance(node, (dict, list)):
        part = parts[i]
        if kind == "schema":
            if not isinstance(node, dict) or part not in node:
                break
            steps.append((node, part, parts[i + 1] if i + 1 < len(parts) else None))
            kind = "map" if part in SUBSCHEMA_MAPS else "list" if part in SUBSCHEMA_LISTS else \
                "schema" if part in SUBSCHEMAS else "value"
            node = node[part]
        elif kind == "map":
            if not isinstance(node, dict) or part not in node:
                break
            node, kind = node[part], "schema"
        elif kind == "list":
            if not (isinstance(node, list) and part.isdigit() and int(part) < len(node)):
                break
            node, kind = node[int(part)], "schema"
        else:
            break
        i += 1
    return steps


def _optional_property(schema: dict, name) -> bool:
    props = schema.get("properties")
    return isinstance(props, dict) and name in props and name not in (schema.get("required") or []) and \
        schema.get("additionalProperties", False) is False and not schema.get("patternProperties") and \
        "minProperties" not in schema


def _enough_names(schema: dict) -> bool:
    """Whether the declared properties alone can meet minProperties (closing the object keeps it satisfiable)."""
    low, props = schema.get("minProperties"), schema.get("properties")
    return not isinstance(low, int) or isinstance(low, bool) or low <= (len(props) if isinstance(props, dict) else 0)


def _exclusive_branches(schema: dict, root, resolve) -> Optional[list]:
    """The branches of schema's oneOf each of whose outputs fails every other branch, or None."""
    branches = schema.get("oneOf")
    if not isinstance(branches, list) or not all(isinstance(b, dict) for b in branches):
        return None
    flat = [deref(b, root, resolve, DEPTH) for b in branches]
    if any(b is None for b in flat):
        return None
    kept = [branches[i] for i, a in enumerate(flat)
            if all(fails(a, b, root, resolve) for j, b in enumerate(flat) if j != i)]
    return kept if 0 < len(kept) < len(branches) else None


def leave_out(root, issue, resolve) -> Optional[str]:
    """Narrow `root` (normalized, in place) so that the grammar never reaches the keyword of `issue`; what was
    done (for the log), or None where no such place is above it."""
    steps = _steps(root, issue.pointer)
    if issue.keyword == "oneOf" and steps and steps[-1][1] == "oneOf":
        schema = steps[-1][0]
        kept = _exclusive_branches(schema, root, resolve)
        if kept is not None:
            written = written_types(schema)
            schema["oneOf"] = kept
            mark_narrowed(schema, written)
            return f"kept {len(kept)} oneOf branch(es) whose outputs match no other branch"
    for schema, key, nxt in reversed(steps[:-1] if steps and steps[-1][1] == issue.keyword else steps):
        if key == "properties" and _optional_property(schema, nxt):
            del schema["properties"][nxt]
            mark_restricted(schema, "properties")
            return f"left out the optional property {nxt!r}"
        if key == "anyOf" and isinstance(schema.get("anyOf"), list) and len(schema["anyOf"]) > 1 and \
                nxt is not None and nxt.isdigit() and int(nxt) < len(schema["anyOf"]):
            written = written_types(schema)
            del schema["anyOf"][int(nxt)]
            mark_narrowed(schema, written)
            return "dropped an anyOf branch"
        if key == "additionalProperties" and isinstance(schema.get(key), dict) and _enough_names(schema):
            schema[key] = False
            mark_restricted(schema, "closed")
            return "closed the object to names beyond its properties"
        if key == "items" and isinstance(schema.get(key), dict) and isinstance(schema.get("prefixItems", []), list):
            most = len(schema.get("prefixItems", []))
            low = schema.get("minItems", 0)
            if isinstance(low, int) and low <= most:
                schema["items"] = {}
                schema["maxItems"] = most
                mark_restricted(schema, "maxItems")
                return f"ended the array after {most} item(s)"
    return None
