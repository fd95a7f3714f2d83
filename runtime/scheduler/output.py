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
        news, totals = [], []
        for req in reqs:   # one pass over each request's token list; the rest is field by field
            fill, start = req.fill_ids, req.prompt_len + req.sent_len
            news.append(fill[start:])
            req.sent_len = len(fill) - req.prompt_len
            totals.append(req.sent_len)
        params = [req.sampling_params for req in reqs]
        hosts = [_from_host(req) if req.host_ranges else 0 for req in reqs]
        msg = BatchTokenOut(
            rids=[req.rid for req in reqs], new_token_ids=news, finish_reasons=[req.finish_reason for req in reqs],
            prompt_tokens=[req.prompt_len for req in reqs], completion_tokens=totals,
            cached_tokens=[req.cached_tokens for req in reqs], forward_passes=[req.forward_passes for req in reqs],
            skip_special_tokens=[p.skip_special_tokens for p in params], no_stop_trim=[p.no_stop_trim for p in params],
            stops=[p.stop or None for p in params],
            output_logprobs=[req.pending_output_logprobs if req.return_logprob else None for req in reqs],
            input_logprobs=[req.pending_input_logprobs for req in reqs],
            stop_regexes=[p.stop_regex or None for p in params],
            disk_cached_tokens=([_from_tiers(req) - h for req, h in zip(reqs, hosts)] if self.disk_tier
                                else [None] * len(reqs)),
            host_cached_tokens=hosts if self.host_tier else [None] * len(reqs),
            spec_stats=([[req.spec_verify_ct, req.spec_accepted_tokens] for req in reqs] if self.speculative
                        else [None] * len(reqs)))
        for req in reqs:
            req.pending_output_logprobs = []
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
