"""Extend attention for one request through torch's CPU flash kernel (GEMM tiles: AMX for bf16 where the
CPU has it), for the extends where matrix products pay: a prefill chunk, or many new tokens on a long
cached prefix.

The new tokens' attention splits into two parts that flash attention computes without a mask: all of
them against the cached prefix (no mask; the query heads of one KV head are folded into the rows, so
the prefix keys are not repeated per head), and each against the new tokens up to itself (causal,
square: the top-left alignment is_causal means).  The two partial results merge exactly through their
log-sum-exps: o = (o1 e^l1 + o2 e^l2) / (e^l1 + e^l2).
"""

from itertools import accumulate

import torch

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


_gqa = {"native": True}


def row_starts(extend_lens: list) -> list:
    """Each request's first row in a step's concatenated new tokens."""
    return [0, *accumulate(extend_lens[:-1])] if extend_lens else []


def _causal(qh, k, v, G: int, sm_scale: float):
    """Causal flash attention of qh [1, Hq, E, D] on k, v [1, Hkv, E, D]: the kernel reads each KV head for its
    G query heads (40% faster than repeating K/V G times); a torch whose kernel cannot is given them repeated."""
    if G > 1 and _gqa["native"]:
        try:
            return _flash(qh, k, v, 0.0, True, scale=sm_scale)
        except RuntimeError:
            _gqa["native"] = False
    if G > 1:
        k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)              # [1, Hq, E, D]
    return _flash(qh, k, v, 0.0, True, scale=sm_scale)


def request_attention(q, k_buffer, v_buffer, slots, prefix: int, sm_scale: float):
    """q [E, Hq, D] of one request whose keys are k_buffer[slots] (prefix cached ones, then the E new
    ones, already stored) -> [E, Hq, D] in q's dtype."""
    E, Hq, D = q.shape
    Hkv = k_buffer.shape[1]
    G = Hq // Hkv
    dtype = k_buffer.dtype
    qh = q.to(dtype).transpose(0, 1).unsqueeze(0)                                  # [1, Hq, E, D]
    new = slots[prefix:prefix + E]
    kn = k_buffer.index_select(0, new).transpose(0, 1)                             # [Hkv, E, D]
    vn = v_buffer.index_select(0, new).transpose(0, 1)
    o2, l2 = _causal(qh, kn.unsqueeze(0), vn.unsqueeze(0), G, sm_scale)           # [1, Hq, E, D], [1, Hq, E]
    if prefix == 0:
        return o2[0].transpose(0, 1).to(q.dtype)
    old = slots[:prefix]
    kp = k_buffer.index_select(0, old).transpose(0, 1).unsqueeze(0)               # [1, Hkv, P, D]
    vp = v_buffer.index_select(0, old).transpose(0, 1).unsqueeze(0)
    qf = qh[0].reshape(Hkv, G, E, D).transpose(1, 2).reshape(1, Hkv, E * G, D)    # rows (token, head in group)
    o1, l1 = _flash(qf, kp, vp, 0.0, False, scale=sm_scale)                       # [1, Hkv, E*G, D], [1, Hkv, E*G]
    o1 = o1.view(Hkv, E, G, D).transpose(1, 2).reshape(Hq, E, D)                  # [Hq, E, D]
    l1 = l1.view(Hkv, E, G).transpose(1, 2).reshape(Hq, E)                        # [Hq, E]
    o2, l2 = o2[0], l2[0]
    m = torch.maximum(l1, l2)
    w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)                                 # [Hq, E]
    o = (o1.float() * w1.unsqueeze(-1) + o2.float() * w2.unsqueeze(-1)) / (w1 + w2).unsqueeze(-1)
    return o.transpose(0, 1).to(q.dtype)                                          # [E, Hq, D]


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale,
                     out=None, starts=None):
    """Same contract as torch_ref.extend_attention, one flash pair per request.  starts: each request's first
    row in q and out (other rows, of requests not given, are left alone); default: the requests' rows in order."""
    if out is None:
        out = torch.empty_like(q)
    ext_list = extend_lens.tolist()
    if starts is None:
        starts = row_starts(ext_list)
    for row, prefix, ext, start in zip(req_pool_indices.tolist(), prefix_lens.tolist(), ext_list, starts):
        if ext:
            slots = req_to_token[row, :prefix + ext].long()
            out[start:start + ext] = request_attention(q[start:start + ext], k_buffer, v_buffer, slots, prefix,
                                                       sm_scale)
    return out
