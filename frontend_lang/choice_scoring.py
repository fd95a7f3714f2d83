"""select(): score every choice by the log-probability of its tokens given the context.

The token boundary: the context and context+choice are tokenized as the runtime would (the tokenizer's
`encode`); the boundary B is the longest common token prefix of ctx_ids and every ctx+choice tokenization.
That handles a choice starting with a space (" Paris" may merge with the space) and a context ending
mid-word ("Par" + "is" retokenizes as "Paris"): the scored tokens of choice i are full_i[B:], the same
conditioning prefix full_i[:B] == ctx_ids[:B] for every choice.

Requests: ctx_ids[:B] with max_new_tokens=0 (cached once), then every choice in one batch with
input_ids=full_i, return_logprob=True, logprob_start_len=B, so each scores only its own tokens over the
cached prefix.

Methods (score; the highest wins; ties go to the first choice):
    token_length_normalized             mean logprob of the choice tokens (the default)
    greedy_token                        the choice tokens' logprobs compared lexicographically (first token
                                        first, within GREEDY_TIE equal, a strict prefix loses a tie); the
                                        score reported is the first token's logprob
    unconditional_likelihood_normalized mean over tokens of (conditional - unconditional logprob); the
                                        unconditional ones score full_i[B:] after one anchor token
                                        (bos, else eos), with no context
"""

import functools

GREEDY_TIE = 1e-4   # logprobs of the same token after the same tokens, from different batch rows, differ in float noise
CHOICE_METHODS = ("token_length_normalized", "greedy_token", "unconditional_likelihood_normalized")


def common_prefix_len(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def choice_tokens(tokenizer, context: str, choices: list) -> tuple:
    """(boundary B, [full token ids of context+choice]) with every choice scored from B."""
    ctx_ids = tokenizer.encode(context)
    fulls = [tokenizer.encode(context + c) for c in choices]
    boundary = min(common_prefix_len(ctx_ids, f) for f in fulls)
    boundary = max(boundary, 1)  # the first prompt token has no logprob
    if any(len(f) <= boundary for f in fulls):
        raise ValueError("a select() choice adds no tokens to the context (an empty choice, or an empty context)")
    return boundary, fulls


def _token_logprobs(out, boundary: int, full: list) -> list:
    entries = out["meta_info"]["input_token_logprobs"]
    if len(entries) != len(full) - boundary:
        raise RuntimeError(f"expected {len(full) - boundary} input logprobs, got {len(entries)}")
    return [float(e[0]) for e in entries]


def select_choice(backend, context: str, choices: list, method: str) -> tuple:
    """(index of the chosen choice, meta info) for `choices` after `context`."""
    boundary, fulls = choice_tokens(backend.tokenizer, context, choices)
    backend.cache_prefix(input_ids=fulls[0][:boundary])
    outs = backend.generate(input_ids=fulls, sampling_params=[{"max_new_tokens": 0} for _ in fulls],
                            return_logprob=True, logprob_start_len=boundary)
    cond = [_token_logprobs(o, boundary, f) for o, f in zip(outs, fulls)]
    meta = {"choices": list(choices), "boundary": boundary, "input_token_logprobs": cond,
            "sum_logprobs": [sum(c) for c in cond],
            "normalized_prompt_logprobs": [sum(c) / len(c) for c in cond]}
    if method == "token_length_normalized":
        scores = meta["normalized_prompt_logprobs"]
        key = scores.__getitem__
    elif method == "greedy_token":
        scores = [c[0] for c in cond]
        key = functools.cmp_to_key(lambda i, j: _greedy_cmp(cond[i], cond[j]))
    elif method == "unconditional_likelihood_normalized":
        uncond = _unconditional(backend, [f[boundary:] for f in fulls])
        meta["unconditional_token_logprobs"] = uncond
        scores = [sum(c - u for c, u in zip(cl, ul)) / len(cl) for cl, ul in zip(cond, uncond)]
        key = scores.__getitem__
    else:
        raise ValueError(f"unknown choices_method {method!r}; choose from {CHOICE_METHODS}")
    meta["scores"] = scores
    best = max(range(len(choices)), key=key)  # max keeps the first of equal keys
    meta["index"] = best
    return best, meta


def _greedy_cmp(a: list, b: list) -> int:
    """Lexicographic over token logprobs, values within GREEDY_TIE equal; a strict prefix loses a tie."""
    for x, y in zip(a, b):
        if abs(x - y) > GREEDY_TIE:
            return -1 if x < y else 1
    return (len(a) > len(b)) - (len(a) < len(b))


def _unconditional(backend, token_lists: list) -> list:
    tok = backend.tokenizer
    anchor = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    seqs = [[anchor] + t for t in token_lists]
    outs = backend.generate(input_ids=seqs, sampling_params=[{"max_new_tokens": 0} for _ in seqs],
                            return_logprob=True, logprob_start_len=1)
    return [_token_logprobs(o, 1, s) for o, s in zip(outs, seqs)]
