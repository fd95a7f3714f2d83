"""Numbers that end: XGrammar's JSON number rules rewritten with bounded digit counts.

XGrammar writes an unbounded JSON number as `N ::= ((sign int frac exp))` with
`int ::= (("0") | ([1-9] [0-9]*))`, `frac ::= ("" | ("." d{1, -1}))`, `exp ::= ("" | ([eE] s d{1, -1}))`,
and the open side of a one-sided range as `(([1-9]) | ([1-9] d{1, -1}))`: a model can write digits
forever.  `bound_numbers(ebnf)` replaces the first with at most 17 significant digits (integer and
fraction digits together, leading "0." not counted) and an exponent of at most 308, and the second
with at most 17 integer digits (the range's fraction already has at most 6).  Integers get the int64
range in the schema itself (schema_normalize), so their rule is XGrammar's exact range.  Strings are
not touched: the rewrite matches only these rule shapes, which XGrammar's regex rules never print.
"""

from __future__ import annotations

import re

SIGNIFICANT = 17
_RULE = re.compile(r"^(\S+) ::= (.*)$", re.M)
_INT = '(("0") | ([1-9] [0-9]*))'
_FRAC = re.compile(r'^\(""\s*\|\s*\("\." (\S+)\{1, -1\}\)\)$')
_EXP = re.compile(r'^\(""\s*\|\s*\(\[eE\] (\S+) (\S+)\{1, -1\}\)\)$')
_COMPOSITE = re.compile(r"^\(\((\S+) (\S+) (\S+) (\S+)\)\)$")
_OPEN_SIDE = re.compile(r"^\(\(\[1-9\]\) \| \(\[1-9\] (\S+)\{1, -1\}\)\)$")
_DIGIT = "(([0-9]))"
MANTISSA, EXPONENT = "radixlm_bounded_mantissa", "radixlm_bounded_exponent"


def _mantissa() -> str:
    alts = [f'("0" ("" | ("." [0-9]{{1, {SIGNIFICANT}}})))']
    for k in range(1, SIGNIFICANT + 1):
        head = "[1-9]" + (f" [0-9]{{{k - 1}, {k - 1}}}" if k > 1 else "")
        frac = f' ("" | ("." [0-9]{{1, {SIGNIFICANT - k}}}))' if k < SIGNIFICANT else ""
        alts.append(f"({head}{frac})")
    return f"{MANTISSA} ::= ({' | '.join(alts)})"


_EXTRA = (_mantissa() + "\n"
          + f'{EXPONENT} ::= ("" | ([eE] ("" | [+\\-]) (([0-9]) | ([0-9] [0-9]) | ([1-2] [0-9] [0-9]) | '
            f'("3" "0" [0-8]))))')


def bound_numbers(ebnf: str) -> tuple[str, int]:
    """(rewritten EBNF, number of rules rewritten)."""
    rules = {m.group(1): m.group(2).strip() for m in _RULE.finditer(ebnf)}
    changed: dict = {}
    for name, body in rules.items():
        m = _COMPOSITE.match(body)
        if m:
            sign, whole, frac, exp = m.groups()
            fm, em = _FRAC.match(rules.get(frac, "")), _EXP.match(rules.get(exp, ""))
            if (rules.get(whole) == _INT and fm and em and rules.get(fm.group(1)) == _DIGIT
                    and rules.get(em.group(2)) == _DIGIT):
                changed[name] = f"(({sign} {MANTISSA} {EXPONENT}))"
            continue
        m = _OPEN_SIDE.match(body)
        if m and rules.get(m.group(1)) == _DIGIT:
            changed[name] = f"(([1-9]) | ([1-9] {m.group(1)}{{1, {SIGNIFICANT - 1}}}))"
    if not changed:
        return ebnf, 0
    out = _RULE.sub(lambda m: f"{m.group(1)} ::= {changed.get(m.group(1), m.group(2))}", ebnf)
    return out.rstrip("\n") + "\n" + _EXTRA + "\n", len(changed)
