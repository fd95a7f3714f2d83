"""Collects the requests that advanced in a step and turns them into one BatchTokenOut."""

from radixlm.runtime.io_struct import BatchTokenOut


class OutputBuilder:
    def __init__(self, disk_tier: bool = False, speculative: bool = False, host_tier: bool = False):
        self._reqs: dict = {}
        self.disk_tier = disk_tier      # report how many cached tokens came from disk
        self.host_tier = host_tier      # and from the host tier
        self.speculative = speculative  # report verify passes and accepted draft tokens

    def add(self, req) -> None:
        self._reqs[id(req)] = req

    def build(self):
        if not self._reqs:
            return None
        reqs = list(self._reqs.values())
        self._reqs.clear()
        msg = BatchTokenOut([], [], [], [], [], [], [], [], [], [], [], [], [])
        for req in reqs:
            new = req.output_ids[req.sent_len:]
            req.sent_len = len(req.output_ids)
            params = req.sampling_params
            msg.rids.append(req.rid)
            msg.new_token_ids.append(new)
            msg.finish_reasons.append(req.finish_reason)
            msg.prompt_tokens.append(req.prompt_len)
            msg.completion_tokens.append(len(req.output_ids))
            msg.cached_tokens.append(req.cached_tokens)
            host = _from_host(req) if req.host_ranges else 0
            msg.disk_cached_tokens.append(_from_tiers(req) - host if self.disk_tier else None)
            msg.host_cached_tokens.append(host if self.host_tier else None)
            msg.forward_passes.append(req.forward_passes)
            msg.spec_stats.append([req.spec_verify_ct, req.spec_accepted_tokens] if self.speculative else None)
            msg.skip_special_tokens.append(params.skip_special_tokens)
            msg.no_stop_trim.append(params.no_stop_trim)
            msg.stops.append(params.stop or None)
            msg.stop_regexes.append(params.stop_regex or None)
            msg.output_logprobs.append(req.pending_output_logprobs if req.return_logprob else None)
            req.pending_output_logprobs = []
            msg.input_logprobs.append(req.pending_input_logprobs)
            req.pending_input_logprobs = None
        return msg


def _from_tiers(req) -> int:
    """Cached prompt tokens that the host and disk tiers loaded for this request."""
    if req.disk_span is None:
        return 0
    start, end = req.disk_span
    return max(0, min(req.cached_tokens, end) - start)


def _from_host(req) -> int:
    """Of those, the tokens the host tier held."""
    return sum(max(0, min(req.cached_tokens, hi) - lo) for lo, hi in req.host_ranges)
