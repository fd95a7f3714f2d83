"""Every finished JSON-constrained output checked against its schema: the last line of defence.

The grammar path enforces a schema's keywords or refuses the request with a 400 naming the one it cannot
(constrained/schema_audit.py, compile.py; README "Structured output: what is enforced"), so an output that
violates its schema should not happen.  Should one get through anyway (a grammar engine's own bug: raw control
characters in strings were one), `check_finished_output`, a TokenizerManager listener, validates the text of
every request with a `json_schema` that finished with `stop` with `jsonschema` (the oracle the schema's author
uses) and, on a violation, adds `schema_violation` (a message naming the failing path) to the finish reason the
client gets, and logs it.  No torch, no xgrammar.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Optional

logger = logging.getLogger(__name__)

_BUILTIN_MARKERS = ('"$$ANY$$"', "$$ANY$$")     # backend.BUILTIN_JSON: any JSON value
MAX_MESSAGE = 400


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str):
    import jsonschema

    schema = json.loads(schema_text)
    return jsonschema.validators.validator_for(schema)(schema)


def violation(schema_text: str, text: str) -> Optional[str]:
    """Why `text` does not satisfy the schema, or None when it does (or the schema cannot be read)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"the output is not valid JSON: {exc}"
    if schema_text.strip() in _BUILTIN_MARKERS:
        return None
    try:
        validator = _validator(schema_text)
        errors = list(validator.iter_errors(value))
    except Exception:  # a schema jsonschema cannot evaluate: nothing to check against
        return None
    if not errors:
        return None
    import jsonschema

    err = jsonschema.exceptions.best_match(errors)
    where = "/" + "/".join(str(p) for p in err.absolute_path)
    return f"the output violates the schema at {where}: {err.message}"[:MAX_MESSAGE]


def check_finished_output(state, new_ids, now) -> None:
    reason = state.finish_reason
    if not reason or reason.get("type") != "stop" or "schema_violation" in reason:
        return
    schema = (state.req.sampling_params or {}).get("json_schema")
    if schema is None:
        return
    message = violation(schema if isinstance(schema, str) else json.dumps(schema), state.text)
    if message:
        reason["schema_violation"] = message
        logger.warning("request %s: constrained output %s", state.req.rid, message)
