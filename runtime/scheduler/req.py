"""Req: one request's state inside the scheduler (plain Python, no torch)."""

import time
from itertools import islice
from typing import Optional


class TokenSpan:
    """A live read-only view of ids[lo:hi] (hi None: to the end of ids) that copies nothing;
    indexing by a slice returns a new list, `+` a new list."""

    __slots__ = ("_ids", "_lo", "_hi")

    def __init__(self, ids: list, lo: int, hi: Optional[int] = None):
        self._ids, self._lo, self._hi = ids, lo, hi

    def _end(self) -> int:
        return len(self._ids) if self._hi is None else self._hi

    def __len__(self) -> int:
        return self._end() - self._lo

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step == 1:
                return self._ids[self._lo + start:self._lo + max(start, stop)]
            return [self._ids[self._lo + j] for j in range(start, stop, step)]
        if not -n <= i < n:
            raise IndexError("token index out of range")
        return self._ids[self._lo + (i % n)]

    def __iter__(self):
        return islice(self._ids, self._lo, self._end())

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def __add__(self, other) -> list:
        return self[:] + list(other)

    def __radd__(self, other) -> list:
        return list(other) + self[:]

    def __repr__(self) -> str:
        return repr(self[:])


class OutputIds(TokenSpan):
    """The output tokens: the tail of the request's one token list, appended and cut in place."""

    __slots__ = ()

    def append(self, token: int) -> None:
        self._ids.append(token)

    def extend(self, tokens) -> None:
        self._ids.extend(tokens)

    def __delitem__(self, i) -> None:
        n = len(self)
        if not isinstance(i, slice) or i.step not in (None, 1) or i.indices(n)[1] != n:
            raise TypeError("only a tail of the output ids can be deleted")
        del self._ids[self._lo + i.indices(n)[0]:]


class Req:
    """A request from arrival to finish.

    fill_ids = prompt + output so far, the request's one token list (origin_input_ids and
    output_ids are views into it: nothing copies it per step or per position).  kv_slots[i] is the
    KV slot of fill_ids[i] for every position whose KV is computed; the first cached_len of them
    belong to the radix tree (locked through last_node), the rest were allocated by this request
    ("held").  The next step feeds fill_ids[len(kv_slots):].
    """

    def __init__(self, rid, input_ids, sampling_params, return_logprob=False, logprob_start_len=-1,
                 top_logprobs_num=0, stream=False, arrival_step=0, cache_namespace=None):
        self.rid = rid
        self.fill_ids: list[int] = list(input_ids)
        self.prompt_len = len(self.fill_ids)
        self.origin_input_ids = TokenSpan(self.fill_ids, 0, self.prompt_len)
        self.output_ids = OutputIds(self.fill_ids, self.prompt_len)
        self.sampling_params = sampling_params
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len
        self.top_logprobs_num = top_logprobs_num
        self.stream = stream
        self.cache_namespace = cache_namespace   # radix-tree namespace (extra_key / cache_salt); None: shared
        self.arrival_step = arrival_step
        self.arrival_time = time.monotonic()

        self.kv_slots: list[int] = []
        self.cached_len = 0            # leading kv_slots owned by the tree
        self.last_node = None          # locked tree node covering kv_slots[:cached_len]
        self.row: Optional[int] = None  # req_to_token row while running
        self.table_len = 0             # positions of kv_slots already written to the row
        self.in_flight = 0             # tokens sampled by launched steps that the host has not seen yet

        self.cached_tokens = 0         # prompt tokens served from the cache (reported)
        self.prefill_done = False      # the prompt has been computed once (input logprobs sent)
        self.finish_reason: Optional[dict] = None
        self.aborted = False
        self.retractions = 0
        self.prefix_match = None       # MatchResult the policy found this step, for admission
        self.prefix_match_len = 0      # its length (set by the policy while waiting)
        self.cache_point = None        # recurrent-state models: where the prefill stops to keep a state snapshot
        self.sent_len = 0              # output tokens already sent to the detokenizer
        self.forward_passes = 0        # passes that sampled an output token; the rest came from jump-forward
        self.input_logprobs: list = []  # accumulated across prefill chunks
        self.pending_input_logprobs = None
        self.pending_output_logprobs: list = []
        self.grammar = None
        self.thinking = None           # thinking.Thinking while the output may start inside a thinking block
        self.stop_regex_text_len = 0   # output text length at the last stop_regex search
        self.disk_keys = None          # disk tier: chain keys of fill_ids' whole blocks, computed once
        self.disk_written = 0          # disk tier: leading blocks already written (or queued)
        self.disk_tail_written = 0     # disk tier: end of the last tail block written (tokens)
        self.disk_span = None          # disk tier: (start, end) of the tokens loaded from disk for it
        self.host_ranges = []          # host tier: (start, end) of each block of disk_span it loaded from host memory
        self.spec = None               # speculative decoding: this request's SpecState (made at its first draft)
        self.spec_verify_ct = 0        # forward passes that verified a draft
        self.spec_accepted_tokens = 0  # draft tokens those passes accepted

    @property
    def seq_len(self) -> int:
        """Tokens of the sequence, counting those still in flight (overlap scheduling)."""
        return len(self.fill_ids) + self.in_flight

    @property
    def computed_len(self) -> int:
        return len(self.kv_slots)

    @property
    def pending_len(self) -> int:
        """Tokens still to feed before the next sample (1 while decoding)."""
        return self.seq_len - len(self.kv_slots)

    @property
    def settled_len(self) -> int:
        """Leading positions whose KV no step in flight is still computing (a request with a token in flight
        may hold a slot for the last known token, which the step in flight feeds)."""
        if self.in_flight and len(self.kv_slots) >= len(self.fill_ids):
            return len(self.fill_ids) - 1
        return len(self.kv_slots)

    @property
    def held_slots(self) -> list[int]:
        return self.kv_slots[self.cached_len:]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def output_len(self) -> int:
        """len(output_ids), without going through the view."""
        return len(self.fill_ids) - self.prompt_len

    def remaining_new_tokens(self) -> int:
        return max(0, self.sampling_params.max_new_tokens - (len(self.fill_ids) - self.prompt_len) - self.in_flight)

    def __repr__(self):
        return (f"Req({self.rid!r}, prompt={self.prompt_len}, out={len(self.output_ids)}+{self.in_flight}, "
                f"kv={len(self.kv_slots)}, cached={self.cached_len})")
