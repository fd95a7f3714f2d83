"""Numeric keywords read so that every validator agrees with the grammar: a number `multipleOf` 1/n written as
integers, an integer's bounds as the whole numbers they allow, and the bounds the grammar puts on numbers without
them (schema_normalize applies them to every node)."""

from __future__ import annotations

import math

from radixlm.constrained.one_of import mark_restricted

INT64 = (-(1 << 63), (1 << 63) - 1)
INT64_F64 = (-9223372036854774784, 9223372036854774784)   # llguidance reads bounds as f64: the int64 values it keeps
NUMBER_LLG = (-1e15, 1e15, 1e-6)  # llguidance numbers: |x| <= 1e15 with at most 6 decimals (no exponent)


def fractional_step_as_integers(out: dict) -> None:
    """A number `multipleOf` a fraction 1/n (0.01, 0.5) as integers: every integer is such a multiple, and one
    that validators agree on.  jsonschema (and ajv) divide in floating point, so a decimal that is an exact
    multiple often fails there (-20362.96 / 0.01 is 2036295.9999999998: 11% of two-decimal values, a third of
    one-decimal ones), while every integer k passes (k / 0.01 is exactly 100 k).  A restriction; left alone
    where the bounds hold no integer."""
    step, t = out.get("multipleOf"), out.get("type")
    types = [t] if isinstance(t, str) else t if isinstance(t, list) else []
    if isinstance(step, float) and 0 < step < 1 and {"number", "integer"} & set(types):
        n = round(1 / step)
        low, high = integer_bounds(out)
        if abs(1 / step - n) <= 1e-9 * n and (low is None or high is None or low <= high):
            kept = list(dict.fromkeys("integer" if x == "number" else x for x in types))
            out["type"] = kept[0] if isinstance(t, str) else kept
            out.pop("multipleOf")
            if "number" in types:
                mark_restricted(out, "type")
            types = kept
    if "integer" in types and "number" not in types:
        whole_bounds(out)


def whole_bounds(out: dict) -> None:
    """An integer's bounds as the whole numbers they allow (XGrammar refuses `minimum: 0.2` on an integer)."""
    low, high = integer_bounds(out)
    for key, value, exclusive in (("minimum", low, "exclusiveMinimum"), ("maximum", high, "exclusiveMaximum")):
        if value is not None and (not isinstance(out.get(key, value), int) or exclusive in out):
            out[key] = value
            out.pop(exclusive, None)


def integer_bounds(out: dict) -> tuple:
    """(least, greatest) integer the node's numeric bounds allow, None where unbounded (draft 4's boolean
    exclusive* read too)."""
    low = high = None
    for key, exclusive in (("minimum", out.get("exclusiveMinimum") is True), ("exclusiveMinimum", True)):
        v = out.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            first = math.floor(v) + 1 if exclusive else math.ceil(v)
            low = first if low is None else max(low, first)
    for key, exclusive in (("maximum", out.get("exclusiveMaximum") is True), ("exclusiveMaximum", True)):
        v = out.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            last = math.ceil(v) - 1 if exclusive else math.floor(v)
            high = last if high is None else min(high, last)
    return low, high


def bound_schema_numbers(out: dict, engine: str) -> None:
    """Integers into the int64 range; for llguidance also numbers (XGrammar's are bounded in its grammar)."""
    t = out.get("type")
    types = [t] if isinstance(t, str) else t if isinstance(t, list) else []
    if "integer" in types and "number" not in types and not (engine == "xgrammar" and "multipleOf" in out):
        low, high = INT64_F64 if engine == "llguidance" else INT64   # XGrammar drops multipleOf beside a bound
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = low
        elif isinstance(out.get("minimum"), (int, float)) and out["minimum"] < low:
            out["minimum"] = low
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = high
        elif isinstance(out.get("maximum"), (int, float)) and out["maximum"] > high:
            out["maximum"] = high
    elif "number" in types and engine == "llguidance":
        low, high, step = NUMBER_LLG
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = low
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = high
        out.setdefault("multipleOf", step)
