"""ForcedText: tokens the scheduler appends to an output without sampling them.

Two sources: grammar jump-forward (the text every continuation must start with) and a thinking
budget that ran out (the end-of-thinking ids), plus the end ids that replace a stop token sampled while
a constrained request still thinks.  The next step extends the appended tokens in one forward pass.
"""

from radixlm.constrained.jump_forward import forced_text, jump_forward


class ForcedText:
    def __init__(self, tokenizer, finish, context_len: int, disable_jump_forward: bool):
        self.tokenizer = tokenizer
        self.finish = finish
        self.context_len = context_len
        self.disable_jump_forward = disable_jump_forward
        self.jump_forward_tokens = 0      # tokens appended by jump-forward (net of replaced ones)
        self.forced_thinking_tokens = 0   # end-of-thinking ids appended when a thinking budget ran out

    def room(self, req) -> int:
        """Tokens the request may still add to its output."""
        return min(req.sampling_params.max_new_tokens - req.output_len, self.context_len - req.seq_len)

    def jump_forward_on(self, req) -> bool:
        return not self.disable_jump_forward and req.sampling_params.jump_forward and not req.return_logprob

    def after_token(self, req):
        """After a sampled token left the request running: force the end of its thinking when over budget,
        then the grammar's forced text.  Returns a finish reason the appended tokens caused, or None."""
        if req.thinking is not None and req.thinking.over_budget(req):   # budget forcing, like jump-forward
            added = req.thinking.force_if_room(req, self.room(req))
            self.forced_thinking_tokens += added
            reason = self.finish.check_appended(req, added) if added else None
            if reason is not None:
                return reason
        if req.grammar is not None and self.jump_forward_on(req):
            added = self._jump_forward(req)
            if added:
                length = len(req.output_ids)
                reason = self.finish.check_appended(req, added)  # may cut the output after a stop token
                self.jump_forward_tokens -= length - len(req.output_ids)
                return reason
        return None

    def _jump_forward(self, req) -> int:
        """Append the grammar-forced tokens (returns how many now end the output, 0 if none).

        Only tokens not yet sent and whose KV is not computed (in practice the token just sampled; a step in
        flight that feeds it is undone by the caller) may be retokenized, so no streamed text changes."""
        forced = forced_text(req.grammar)
        if not forced:
            return 0
        start = max(req.sent_len, req.settled_len - len(req.origin_input_ids),
                    (req.thinking.answer_start or 0) if req.thinking is not None else 0)
        budget = min(req.sampling_params.max_new_tokens - len(req.output_ids),
                     self.context_len - req.seq_len) - 1
        done = jump_forward(req.grammar, self.tokenizer, req.output_ids[start:], max(budget, 0), forced)
        if done is None:
            return 0
        removed, added = done
        del req.output_ids[len(req.output_ids) - removed:]
        req.output_ids.extend(added)
        self.jump_forward_tokens += len(added) - removed
        return len(added)

    def answer_instead_of_stop(self, req, entry, reason, kv):
        """A constrained request sampled a stop token while thinking: the end-of-thinking ids replace it
        (its KV was never computed; a draft's KV from that position on goes back), then the grammar."""
        at = len(req.fill_ids) - 1
        added = req.thinking.replace_stop(req, self.room(req))
        if not added:
            return reason
        if entry.draft:
            kv.trim(req, min(len(req.kv_slots), at))
        self.forced_thinking_tokens += added
        return self.finish.check_appended(req, added)
