"""Detokenizer: token ids -> text deltas, incrementally, per request.

Multi-byte characters split across tokens are held until complete; text that could be the start of a
stop string is held back until it is clear either way, and so are the last max_match_len - 1
characters while a stop_regex is set (a match the next tokens complete can start there; see
runtime/stop_regex.py); on finish the text is cut at the stop string or where the stop_regex match
starts (with no_stop_trim: after the stop string, where the match ends), and a matched stop token is
left out of the text.
"""

import logging

from radixlm.runtime import io_struct as io
from radixlm.runtime.stop_regex import first_match, hold_back

logger = logging.getLogger(__name__)


class _DecodeState:
    __slots__ = ("ids", "prefix_offset", "read_offset", "text", "sent")

    def __init__(self):
        self.ids: list = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""   # decoded so far (complete characters only)
        self.sent = ""   # what the tokenizer manager has received


def _held_back(text: str, stops) -> int:
    """Length of the longest suffix of text that is a proper prefix of a stop string."""
    best = 0
    for stop in stops or ():
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


class Detokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.states: dict = {}

    def handle(self, msg):
        if isinstance(msg, io.ControlOut):
            return msg
        out = io.BatchStrOut([], [], [], [], [], [], [], [], [], [])
        for i, rid in enumerate(msg.rids):
            state = self.states.setdefault(rid, _DecodeState())
            reason = msg.finish_reasons[i]
            skip = msg.skip_special_tokens[i]
            regexes = msg.stop_regexes[i] if i < len(msg.stop_regexes) else None
            state.ids.extend(msg.new_token_ids[i])
            if reason is None:
                self._advance(state, skip)
                held = max(_held_back(state.text, msg.stops[i]), min(hold_back(regexes), len(state.text)))
                visible = state.text[:len(state.text) - held]
            else:
                visible = self._final_text(state, reason, skip, msg.no_stop_trim[i], msg.stops[i], regexes)
                del self.states[rid]
            delta = visible[len(state.sent):] if visible.startswith(state.sent) else ""
            state.sent += delta
            out.rids.append(rid)
            out.text_deltas.append(delta)
            out.new_token_ids.append(msg.new_token_ids[i])
            out.finish_reasons.append(reason)
            out.prompt_tokens.append(msg.prompt_tokens[i])
            out.completion_tokens.append(msg.completion_tokens[i])
            out.cached_tokens.append(msg.cached_tokens[i])
            out.disk_cached_tokens.append(msg.disk_cached_tokens[i] if msg.disk_cached_tokens else None)
            out.host_cached_tokens.append(msg.host_cached_tokens[i] if msg.host_cached_tokens else None)
            out.spec_stats.append(msg.spec_stats[i] if msg.spec_stats else None)
            out.forward_passes.append(msg.forward_passes[i])
            out.output_logprobs.append(msg.output_logprobs[i])
            out.input_logprobs.append(msg.input_logprobs[i])
        return out

    def _decode(self, ids, skip) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip)

    def _advance(self, state, skip) -> None:
        prefix_text = self._decode(state.ids[state.prefix_offset:state.read_offset], skip)
        new_text = self._decode(state.ids[state.prefix_offset:], skip)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            state.text += new_text[len(prefix_text):]
            state.prefix_offset, state.read_offset = state.read_offset, len(state.ids)

    def _final_text(self, state, reason, skip, no_stop_trim, stops=None, regexes=None) -> str:
        ids = state.ids
        matched = reason.get("matched")
        if reason.get("type") == "stop" and isinstance(matched, int) and not no_stop_trim and ids and ids[-1] == matched:
            ids = ids[:-1]
        text = self._decode(ids, skip)
        if reason.get("type") != "stop" or not isinstance(matched, str):
            return text
        if regexes and matched in regexes and matched not in (stops or ()):
            found = first_match([matched], text)
            if found is not None:
                text = text[:found[1].end() if no_stop_trim else found[1].start()]
        elif not no_stop_trim:
            at = text.find(matched)
            if at >= 0:
                text = text[:at]
        return text


def run_detokenizer_process(model_path: str, addrs: dict, log_level: str = "warning", ready=None) -> None:
    """Process entry: PULL BatchTokenOut from the scheduler, PUSH BatchStrOut to the tokenizer manager.
    ready(payload), when given, is called once the tokenizer is loaded and the sockets are bound."""
    import signal

    import zmq
    from transformers import AutoTokenizer

    from radixlm.runtime.ipc import ZmqInbox, ZmqOutbox
    from radixlm.runtime.logging_setup import setup_logging

    setup_logging(log_level, "detokenizer")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    detok = Detokenizer(AutoTokenizer.from_pretrained(model_path, trust_remote_code=False))
    ctx = zmq.Context()
    inbox = ZmqInbox(ctx, addrs["detokenizer"], "detokenizer")
    outbox = ZmqOutbox(ctx, addrs["tokenizer"])
    if ready is not None:
        ready({"status": "ready"})
    while True:
        for msg in inbox.recv(block=True):
            try:
                outbox.send(detok.handle(msg))
            except Exception:
                logger.exception("detokenizer failed on a message; continuing")
