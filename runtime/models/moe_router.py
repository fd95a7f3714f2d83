"""route(): router logits -> each token's experts and their weights, for every family's rule (moe_config.py).

One code path, in float32 as HF's routers run it (Laguna's logits soft-capped first: router_softcap):
  scores   softmax over all experts (Mixtral, Qwen2/3-MoE, DeepSeek-V2) or sigmoid of each logit (DeepSeek-V3,
           GLM-4.5, dots.llm1);
  choice   the scores plus e_score_correction_bias where the family has one (noaux_tc): the bias picks the experts,
           the weights stay the unbiased scores (Kolibri 1: the logits plus the bias, bias_on_logits);
  groups   with n_group > 1 the E experts form n_group groups of E/n_group; a group's score is the sum of its two
           best choice scores (V3) or its best one (V2's group_limited_greedy), only the topk_group best groups
           compete for the top k;
  weights  the chosen experts' scores, renormalised to sum to 1 when norm_topk_prob (plus topk_norm_eps in the sum),
           times routed_scaling_factor.
Mixtral's softmax over the top-k logits is the softmax over all renormalised over the top k.
Phi-3.5-MoE's sparsemixer (scoring "sparsemixer") and DBRX's p-norm (weight_norm_p) are their own rules, below.
Notation: T tokens, E experts, k top k, G groups.
"""

import torch


def route(router_logits: torch.Tensor, moe, correction_bias=None):
    """router_logits [T, E] -> (weights [T, k] float32, expert ids [T, k] int64) by `moe`'s rule (a MoEConfig:
    top_k, norm_topk_prob, scoring, n_group, topk_group, group_score, routed_scaling_factor); correction_bias [E]
    or None."""
    if moe.scoring == "sparsemixer":
        return sparsemixer(router_logits, moe.jitter_eps)
    if moe.weight_norm_p is not None:
        return _p_normed_top_k(router_logits, moe.top_k, moe.weight_norm_p)
    logits = router_logits.float()                                           # [T, E]
    if moe.router_softcap:                                                   # Laguna
        logits = torch.tanh(logits / moe.router_softcap) * moe.router_softcap   # [T, E]
    scores = torch.sigmoid(logits) if moe.scoring == "sigmoid" else torch.softmax(logits, dim=-1)   # [T, E]
    choice = logits if moe.bias_on_logits else scores                        # [T, E]
    choice = choice if correction_bias is None else choice + correction_bias.float()                # [T, E]
    if moe.n_group > 1:
        choice = _best_groups_only(choice, moe.n_group, moe.topk_group, moe.group_score,
                                   moe.outside_groups_score)                                      # [T, E]
    ids = torch.topk(choice, moe.top_k, dim=-1).indices                      # [T, k]
    weights = scores.gather(1, ids)                                          # [T, k]
    if moe.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + moe.topk_norm_eps)   # [T, k]
    if moe.routed_scaling_factor != 1.0:
        weights = weights * moe.routed_scaling_factor                        # [T, k]
    return weights, ids


def _best_groups_only(choice: torch.Tensor, n_group: int, topk_group: int, group_score: str,
                      outside: float = float("-inf")) -> torch.Tensor:
    """choice [T, E] -> [T, E] with `outside` (-inf; A.X K2's 0) on every expert outside the token's topk_group best
    groups."""
    t, e = choice.shape
    grouped = choice.view(t, n_group, e // n_group)                          # [T, G, E/G]
    if group_score == "top2_sum":
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)            # [T, G]
    else:
        group_scores = grouped.max(dim=-1).values                            # [T, G]
    best = torch.topk(group_scores, topk_group, dim=-1).indices              # [T, topk_group]
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)   # [T, G]
    keep = keep.unsqueeze(-1).expand(t, n_group, e // n_group).reshape(t, e)          # [T, E]
    return choice.masked_fill(~keep, outside)


def sparsemixer(scores: torch.Tensor, jitter_eps: float):
    """HF Phimoe's sparsemixer in eval mode, in the logits' dtype as HF runs it: scores [T, E] -> (weights [T, 2]
    float32, ids [T, 2]).  The first expert is the best; its weight is the softmax, at it, over the experts whose
    gap to it (relative to max(|score|, best)) is at most 2 * jitter_eps.  The second is the best of the rest, weighted
    by the softmax over the rest within that gap of it (the gap measured against max(|score|, second best))."""
    best, first = scores.max(dim=-1, keepdim=True)                           # [T, 1] each
    far = (best - scores) / scores.abs().clamp(min=best) > 2 * jitter_eps    # [T, E]
    w_first = torch.softmax(scores.masked_fill(far, float("-inf")), dim=-1).gather(-1, first)    # [T, 1]
    rest = scores.scatter(-1, first, float("-inf"))                          # [T, E]
    runner_up, second = rest.max(dim=-1, keepdim=True)                       # [T, 1] each
    far = (runner_up - scores) / scores.abs().clamp(min=runner_up) > 2 * jitter_eps                # [T, E]
    w_second = torch.softmax(rest.masked_fill(far, float("-inf")), dim=-1).gather(-1, second)     # [T, 1]
    return torch.cat((w_first, w_second), dim=-1).float(), torch.cat((first, second), dim=-1)


def _p_normed_top_k(router_logits: torch.Tensor, top_k: int, p: float):
    """DBRX: softmax in the logits' dtype, the top k divided by their p-norm -> (weights [T, k] float32, ids [T, k])."""
    scores = torch.softmax(router_logits, dim=-1)                            # [T, E]
    weights, ids = torch.topk(scores, top_k, dim=-1)                         # [T, k] each
    return (weights / torch.norm(weights, p=p, dim=-1, keepdim=True)).float(), ids
