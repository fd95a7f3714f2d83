"""Why each schema of a `schema_bench.py --out` run was not answered validly: a table of causes.

Every record that is not a valid 200 falls in one class:
  refused          a 400 (the grammar refused the schema)
  stop_invalid     finish `stop` but the answer violates the schema (must never happen)
  length_object    `length` with some object repeating a key (or, last, ending between an object's members)
  length_string    `length` inside a string of 40 characters or more (a value said over and over)
  length_array     `length` inside an array of 8 items or more (items repeating), else inside a shorter string
  length_number    `length` inside a number
  length_space     `length` with the output ending in a run of whitespace
  length_forced    `length` with the last 120 characters one short text repeated (a forced / jump-forward loop)
  other            anything else (an error, a transport failure, a 200 that is not valid JSON)
The state at the end is read with a small JSON scanner over the answer's text (schema_bench keeps its
first 2,000 characters; a longer answer is classed by its prefix and marked "cut").

    .venv/bin/python bench/schema_misses.py RUN.json [RUN2.json ...] [--list]
"""

import argparse
import json
from collections import Counter

CLASSES = ("refused", "stop_invalid", "length_object", "length_string", "length_array", "length_number",
           "length_space", "length_forced", "other")


def end_state(text: str) -> dict:
    """At the end of a JSON prefix: {'in': 'string'|'number'|'space'|'between', 'string': the open string's
    length, 'stack': open containers ('{' | '['), 'items': item counts of the open arrays, 'dup_keys': whether
    some object (open or closed) repeats a key}."""
    stack, keys, items = [], [], []
    in_string = escaped = key_next = dup = False
    buf, last = [], ""
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if key_next and stack and stack[-1] == "{":
                    key = "".join(buf)
                    dup = dup or key in keys[-1]
                    keys[-1].add(key)
                    key_next = False
            else:
                buf.append(c)
            last = "string"
            continue
        if c == '"':
            in_string, buf = True, []
        elif c in "{[":
            stack.append(c)
            keys.append(set())
            items.append(1)
            key_next = c == "{"
        elif c in "}]" and stack:
            stack.pop()
            keys.pop()
            items.pop()
        elif c == "," and stack:
            key_next = stack[-1] == "{"
            items[-1] += 1
        in_number = c in "-0123456789" or (last == "number" and c in "+-.eE0123456789")
        last = "space" if c.isspace() else "number" if in_number else "between"
    where = "string" if in_string else last if last in ("number", "space") else "between"
    arrays = [n for s, n in zip(stack, items) if s == "["]
    return {"in": where, "string": len(buf) if in_string else 0, "stack": stack, "items": max(arrays, default=0),
            "dup_keys": dup}


def repeating(text: str, window: int = 120) -> bool:
    """The last `window` characters are one text of at most 40 characters said again and again."""
    tail = text[-window:]
    if len(tail) < window:
        return False
    return any(tail == (tail[-n:] * (window // n + 1))[-window:] for n in range(1, 41))


def classify(rec: dict) -> str:
    if rec.get("status") == 400:
        return "refused"
    if rec.get("status") != 200:
        return "other"
    finish = rec.get("finish_reason")
    if finish == "stop":
        return "other" if rec.get("valid") is not False or not rec.get("parses", True) else "stop_invalid"
    if finish != "length":
        return "other"
    text = rec.get("content") or ""
    state = end_state(text)
    if state["dup_keys"]:
        return "length_object"
    if state["in"] == "string" and state["string"] >= 40:
        return "length_string"
    if state["items"] >= 8:
        return "length_array"
    if state["in"] == "string":
        return "length_string"
    if state["in"] == "number":
        return "length_number"
    if len(text) - len(text.rstrip()) >= 8:
        return "length_space"
    if state["stack"] and state["stack"][-1] == "{":
        return "length_object"
    if repeating(text):
        return "length_forced"
    return "other"


def misses(records: list) -> list:
    """[(class, record)] for every record that is not a valid answer."""
    return [(classify(r), r) for r in records if not (r.get("status") == 200 and r.get("valid") is True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--list", action="store_true", help="one line per miss: class, schema, the answer's end")
    args = ap.parse_args()
    for path in args.runs:
        records = json.load(open(path))["records"]
        found = misses(records)
        counts = Counter(c for c, _ in found)
        valid = sum(1 for r in records if r.get("status") == 200 and r.get("valid") is True)
        print(f"{path}: {len(records)} schemas, {valid} valid, {len(found)} misses")
        for c in CLASSES:
            if counts[c]:
                print(f"  {c:14} {counts[c]:3}")
        if args.list:
            for c, r in sorted(found, key=lambda x: x[0]):
                text = r.get("content") or r.get("message") or r.get("error") or ""
                cut = " (cut)" if len(text) >= 2000 else ""
                print(f"  {c:14} {r['schema'][:48]:48} {json.dumps(text[-110:])}{cut}")


if __name__ == "__main__":
    main()
