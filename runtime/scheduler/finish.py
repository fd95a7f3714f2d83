"""When a request is done: eos / stop token ids, stop strings, max_new_tokens, context length."""

from typing import Optional


class FinishChecker:
    """check(req) after a token was appended; returns an SGLang finish_reason dict or None."""

    def __init__(self, tokenizer, eos_token_ids, context_len: int):
        self.tokenizer = tokenizer
        self.eos_token_ids = set(eos_token_ids or ())
        self.context_len = context_len

    def check(self, req) -> Optional[dict]:
        params = req.sampling_params
        token = req.output_ids[-1]
        if not params.ignore_eos and token in self.eos_token_ids:
            return {"type": "stop", "matched": token}
        if params.stop_token_ids and token in params.stop_token_ids:
            return {"type": "stop", "matched": token}
        if params.stop and self.tokenizer is not None:
            matched = self._stop_string(req, params.stop)
            if matched is not None:
                return {"type": "stop", "matched": matched}
        if len(req.output_ids) >= params.max_new_tokens:
            return {"type": "length", "length": params.max_new_tokens}
        if req.seq_len >= self.context_len:
            return {"type": "length", "length": len(req.output_ids)}
        return None

    def _stop_string(self, req, stops) -> Optional[str]:
        longest = max(len(s) for s in stops)
        tail_ids = req.output_ids[-(longest + 8):]
        # The newest token must contribute to the match, else it would have matched a step earlier.
        before = self.tokenizer.decode(tail_ids[:-1], skip_special_tokens=False)
        text = self.tokenizer.decode(tail_ids, skip_special_tokens=False)
        for stop in stops:
            at = text.find(stop)
            if at >= 0 and stop not in before:
                return stop
        return None
