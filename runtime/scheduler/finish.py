"""When a request is done: eos / stop token ids, stop strings, stop_regex, max_new_tokens, context length; the
abort reasons a request ends with (grammar_stopped: its grammar engine went past its limits)."""

import logging
from typing import Optional

from radixlm.runtime.stop_regex import first_match, max_match_len

logger = logging.getLogger(__name__)


def grammar_stopped(req):
    """The abort reason of a request whose grammar engine stopped (llguidance past its lexer or parser limits:
    its masks allow nothing from there), else None."""
    stopped = getattr(req.grammar, "error", None) if req.grammar is not None else None
    if not stopped:
        return None
    logger.warning("request %s: the grammar engine stopped: %s", req.rid, stopped)
    return abort_reason(f"the grammar engine stopped following this schema: {stopped}; simplify its patterns", 400)


def abort_reason(message: str, status_code: int = 400) -> dict:
    return {"type": "abort", "message": message, "status_code": status_code}


class FinishChecker:
    """check(req) after a token was appended; returns an SGLang finish_reason dict or None."""

    def __init__(self, tokenizer, eos_token_ids, context_len: int):
        self.tokenizer = tokenizer
        self.eos_token_ids = set(eos_token_ids or ())
        self.context_len = context_len

    def check(self, req) -> Optional[dict]:
        params = req.sampling_params
        token = req.fill_ids[-1]     # the output's last token
        if not params.ignore_eos and token in self.eos_token_ids:
            return {"type": "stop", "matched": token}
        if params.stop_token_ids and token in params.stop_token_ids:
            return {"type": "stop", "matched": token}
        if params.stop and self.tokenizer is not None:
            matched = self._stop_string(req, params.stop, 1)
            if matched is not None:
                return {"type": "stop", "matched": matched}
        if params.stop_regex and self.tokenizer is not None:
            matched = self._stop_regex(req, 1)
            if matched is not None:
                return {"type": "stop", "matched": matched}
        if req.output_len >= params.max_new_tokens:
            return {"type": "length", "length": params.max_new_tokens}
        if len(req.fill_ids) >= self.context_len:
            return {"type": "length", "length": req.output_len}
        return None

    def check_appended(self, req, count: int) -> Optional[dict]:
        """After jump-forward appended `count` tokens at once: a stop token among them (the output is
        cut after it) or a stop string their text completes.  Length limits are the caller's."""
        params = req.sampling_params
        new = req.output_ids[len(req.output_ids) - count:]
        stop_ids = set(params.stop_token_ids or ()) | (set() if params.ignore_eos else self.eos_token_ids)
        for i, token in enumerate(new):
            if token in stop_ids:
                del req.output_ids[len(req.output_ids) - count + i + 1:]
                return {"type": "stop", "matched": token}
        if params.stop and self.tokenizer is not None and count > 0:
            matched = self._stop_string(req, params.stop, count)
            if matched is not None:
                return {"type": "stop", "matched": matched}
        if params.stop_regex and self.tokenizer is not None and count > 0:
            matched = self._stop_regex(req, count)
            if matched is not None:
                return {"type": "stop", "matched": matched}
        return None

    def _stop_regex(self, req, new_count: int) -> Optional[str]:
        """The pattern that first matches the output text once one of the newest `new_count` tokens is
        in; the output is cut after the token that completed the match.  Only text a new match can
        start in is searched (max_match_len back from the previous text's end)."""
        params = req.sampling_params
        patterns = params.stop_regex
        reach = max(max_match_len(p) for p in patterns) + 4   # + slack for a character re-decoded
        pos = max(0, req.stop_regex_text_len - reach)
        base = len(req.output_ids) - new_count
        for k in range(base + 1, len(req.output_ids) + 1):
            text = self.tokenizer.decode(req.output_ids[:k], skip_special_tokens=params.skip_special_tokens)
            found = first_match(patterns, text, min(pos, len(text)))
            if found is not None:
                del req.output_ids[k:]
                return found[0]
        req.stop_regex_text_len = len(text) if new_count > 0 else req.stop_regex_text_len
        return None

    def _stop_string(self, req, stops, new_count: int) -> Optional[str]:
        """A stop string in the text that the newest `new_count` tokens complete (one not complete
        without them, else it would have matched earlier)."""
        longest = max(len(s) for s in stops)
        tail_ids = req.output_ids[-(longest + 8 + new_count):]
        before = self.tokenizer.decode(tail_ids[:-new_count], skip_special_tokens=False)
        text = self.tokenizer.decode(tail_ids, skip_special_tokens=False)
        for stop in stops:
            if stop in text and stop not in before:
                return stop
        return None
