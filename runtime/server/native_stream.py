"""SGLang's streaming shape for native /generate: cumulative results in, SSE event payloads out.

    default                         each event carries the cumulative `text` and `output_ids`
    --incremental-streaming-output  each event carries only the new `text` and `output_ids`

In both modes every event has the full `meta_info`, whose output logprob lists (`output_token_logprobs`,
`output_top_logprobs`) hold only that event's new entries, with `output_token_logprobs_length` the
count so far (SGLang's frontend merges them: sglang/lang/interpreter.py `_merge_stream_meta_info`).
Input logprobs come whole in every event.  A batch (or n > 1) is a list; each changed item becomes
one event with its "index".
"""

DELTA_KEYS = ("output_token_logprobs", "output_top_logprobs")


class NativeStreamShaper:
    def __init__(self, incremental: bool = False):
        self.incremental = incremental
        self._sent: dict = {}   # index -> (text length, output ids, logprob entries) already sent

    def events(self, out, prev) -> list:
        """SSE payloads for one cumulative result: a dict, or a list whose changed items get "index"."""
        if not isinstance(out, list):
            return [self._shape(out, None)]
        before = prev if isinstance(prev, list) else []
        events = []
        for i, item in enumerate(out):
            if item is not None and (i >= len(before) or item is not before[i]):
                index = item.get("index", i)
                events.append({**self._shape(item, index), "index": index})
        return events

    def _shape(self, item: dict, index) -> dict:
        text_len, ids_len, lp_len = self._sent.get(index, (0, 0, 0))
        event = dict(item)
        meta = event["meta_info"] = dict(item["meta_info"]) if "meta_info" in item else {}
        if "output_token_logprobs" in meta:
            total = len(meta["output_token_logprobs"])
            for key in DELTA_KEYS:
                if key in meta:
                    meta[key] = meta[key][lp_len:]
            meta["output_token_logprobs_length"] = total
            lp_len = total
        if not meta and "meta_info" not in item:
            del event["meta_info"]
        text, ids = item.get("text", ""), item.get("output_ids", [])
        if self.incremental:   # the detokenizer only ever appends to a request's text
            event["text"], event["output_ids"] = text[text_len:], ids[ids_len:]
        self._sent[index] = (len(text), len(ids), lp_len)
        return event
