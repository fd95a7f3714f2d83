"""gen(dtype=...): SGLang's regexes for int, float, str and bool (`sglang.lang.ir`)."""

REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""

_DTYPES = {int: (REGEX_INT, True), float: (REGEX_FLOAT, True), str: (REGEX_STR, False),
           bool: (REGEX_BOOL, False)}


def dtype_constraint(dtype) -> tuple:
    """(regex, whether it also stops at " " and "\\n") for a gen dtype."""
    by_name = {t.__name__: t for t in _DTYPES}
    key = by_name.get(dtype, dtype) if isinstance(dtype, str) else dtype
    if key not in _DTYPES:
        raise ValueError(f"gen dtype must be one of int, float, str, bool (or their names), not {dtype!r}")
    return _DTYPES[key]
