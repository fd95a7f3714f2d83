"""Torch reference for paged attention; also the CPU path.

Layout shared by every kernel in this package:
  k_buffer, v_buffer: [num_slots, num_kv_heads, head_dim]   one layer of the KV pool
  req_to_token:       [num_rows, max_context] int           position -> slot, per request row
  req_pool_indices:   [B] int                                row of each request in req_to_token
Query heads are grouped over KV heads: query head h reads KV head h // (num_q_heads // num_kv_heads).
FP8 KV (float8_e4m3fn buffers): a stored element is clamp(x / scale, +-448) in e4m3 and reads back as
element * scale, with one scale per layer for K (k_scale) and one for V (v_scale); other buffers ignore them.

Optional per-layer attention variants (Gemma 2/3, Phi-3), both off by default; they combine with FP8 KV:
  window:  sliding window; the query at position p sees keys at positions p - window < j <= p only.
  softcap: logit soft-capping; scores s = q.k * sm_scale become softcap * tanh(s / softcap) before softmax.
  chunk:   chunked attention (Llama 4); the query at position p sees keys at positions p // chunk * chunk <= j <= p.
  sinks:   attention sinks (gpt-oss), [Hq] float32: head h's learned logit joins its softmax's denominator and
           takes no value: out = sum_j e^(s_j) v_j / (sum_j e^(s_j) + e^(sinks[h])).
  alibi:   ALiBi (BLOOM, MPT), [Hq] float32 slopes: head h's score of the key at position j for the query at
           position p gains alibi[h] * (j - p) (after softcap).
  alibi_bf16: Falcon's ALiBi (with alibi), the scale of its bfloat16 biases: head h's score of the key at position j
           gains falcon_bias(alibi[h], j) * alibi_bf16 = bf16(bf16(alibi[h]) * bf16(j)) * alibi_bf16, as HF's
           build_alibi_tensor rounds them (1/sqrt(head_dim) for Falcon); the query's own bias is subtracted, which
           softmax does not see.
"""

import torch
import torch.nn.functional as F

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


def to_kv(x, dtype, scale=1.0):
    """x cast to a KV buffer's dtype; for e4m3, divided by scale and clamped to its range first."""
    if dtype == E4M3:
        return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return x.to(dtype)


def from_kv(x, dtype, scale=1.0):
    """KV elements read back in `dtype` (e4m3: times scale)."""
    if x.dtype == E4M3:
        return (x.float() * scale).to(dtype)
    return x.to(dtype)


def gather_rows(buf, idx):
    """buf.index_select(0, idx); float8 rows are gathered as bytes (not every device has float8 index_select)."""
    if buf.dtype == E4M3:
        return buf.view(torch.uint8).index_select(0, idx).view(E4M3)
    return buf.index_select(0, idx)


def store_kv(k_buffer, v_buffer, loc, k, v, k_scale=1.0, v_scale=1.0):
    """k_buffer[loc[i]] = k[i]; v_buffer[loc[i]] = v[i].  loc: [T], k, v: [T, Hkv, D]."""
    loc = loc.long()
    for buf, x, scale in ((k_buffer, k, k_scale), (v_buffer, v, v_scale)):
        if buf.dtype == E4M3:  # torch has no index_copy_ for float8: copy the bytes
            buf.view(torch.uint8).index_copy_(0, loc, to_kv(x, E4M3, scale).view(torch.uint8))
        else:
            buf.index_copy_(0, loc, x.to(buf.dtype))


def round_bf16(x):
    """float32 x rounded to the nearest bfloat16 (ties to even), kept in float32."""
    return x.float().bfloat16().float()


round_position = round_bf16   # positions as HF's bfloat16 product reads them (exact up to 256)


def falcon_bias(slopes, pos, scale):
    """Falcon's ALiBi bias bf16(bf16(slopes) * bf16(pos)) * scale in float32; slopes and pos broadcast."""
    return round_bf16(round_bf16(slopes) * round_position(pos.float())) * scale


def _alibi_bias(alibi, keys, queries, alibi_bf16):
    """The ALiBi bias of keys at positions `keys` for queries at `queries` (broadcast against alibi's shape):
    alibi * (keys - queries), or Falcon's (alibi_bf16) rounded biases of the keys less the query's."""
    if alibi_bf16 is None:
        return alibi.float() * (keys - queries).float()
    return falcon_bias(alibi, keys, alibi_bf16) - falcon_bias(alibi, queries, alibi_bf16)


def _capped_attention(q, k, v, keep, sm_scale, softcap, sinks=None, bias=None):
    """softmax(softcap * tanh(q k^T * sm_scale / softcap) + bias) v over the keys `keep` allows, in float32.
    q: [N, Hkv, G, D]; k, v: [N, Hkv, L, D]; keep: [N, 1, M, L] bool (M = G or broadcast); sinks: None or each
    query row's sink logit, [Hkv, G] (or broadcast to [N, Hkv, G]); bias: None or float32 broadcast to
    [N, Hkv, G, L] (ALiBi); -> [N, Hkv, G, D]."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * sm_scale  # [N, Hkv, G, L]
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~keep, float("-inf"))
    if sinks is None:
        return torch.matmul(torch.softmax(s, dim=-1), v.float())  # [N, Hkv, G, D]
    sink = sinks.float().expand(s.shape[:-1]).unsqueeze(-1)  # [N, Hkv, G, 1]
    p = torch.softmax(torch.cat((s, sink), dim=-1), dim=-1)[..., :-1]  # [N, Hkv, G, L] the sink's share dropped
    return torch.matmul(p, v.float())  # [N, Hkv, G, D]


def decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale, out=None,
                     window=None, softcap=None, k_scale=1.0, v_scale=1.0, sinks=None, chunk=None, alibi=None,
                     alibi_bf16=None):
    """One query token per request attends to the request's first seq_lens[b] cached tokens.

    q: [B, Hq, D]; seq_lens: [B]; returns out: [B, Hq, D] with
    out[b, h] = softmax(q[b, h] . K_b^T * sm_scale) V_b, K_b = k_buffer[req_to_token[row_b, :seq_lens[b]]]
    (with `window`: only the last `window` of those keys; `chunk`: only those of the query's chunk; `softcap`:
    capped scores; `sinks`: each head's sink logit in the denominator; `alibi`, `alibi_bf16`: see the module doc).
    """
    bsz, num_q_heads, head_dim = q.shape
    num_slots, num_kv_heads = k_buffer.shape[0], k_buffer.shape[1]
    group = num_q_heads // num_kv_heads
    max_len = int(seq_lens.max())
    valid = torch.arange(max_len, device=q.device)[None, :] < seq_lens[:, None]  # [B, L]
    rows = req_to_token[req_pool_indices.long(), :max_len].long().masked_fill(~valid, 0).reshape(-1)  # [B*L]
    # index_select on [S, Hkv*D] rows is a plain row gather: several times faster than k_buffer[rows]
    k = gather_rows(k_buffer.view(num_slots, -1), rows).view(bsz, max_len, num_kv_heads, head_dim)
    v = gather_rows(v_buffer.view(num_slots, -1), rows).view(bsz, max_len, num_kv_heads, head_dim)
    if k.dtype == E4M3:
        k, v = from_kv(k, q.dtype, k_scale), from_kv(v, q.dtype, v_scale)  # [B, L, Hkv, D] each
    # the G query heads of a KV head act as G queries of one (batch, kv head) attention
    qg = q.view(bsz, num_kv_heads, group, head_dim).to(k.dtype)  # [B, Hkv, G, D]
    if window or softcap or sinks is not None or chunk or alibi is not None:
        if window:
            valid &= torch.arange(max_len, device=q.device)[None, :] >= seq_lens[:, None] - window  # [B, L]
        if chunk:
            valid &= torch.arange(max_len, device=q.device)[None, :] >= (seq_lens[:, None] - 1) // chunk * chunk
        sink = None if sinks is None else sinks.view(num_kv_heads, group)  # [Hkv, G]
        bias = None
        if alibi is not None:
            keys = torch.arange(max_len, device=q.device)[None, None, None, :]  # [1, 1, 1, L]
            queries = (seq_lens - 1).view(bsz, 1, 1, 1)  # [B, 1, 1, 1]
            bias = _alibi_bias(alibi.view(1, num_kv_heads, group, 1), keys, queries, alibi_bf16)  # [B, Hkv, G, L]
        o = _capped_attention(qg, k.transpose(1, 2), v.transpose(1, 2), valid[:, None, None, :], sm_scale,
                              softcap, sink, bias)  # [B, Hkv, G, D]
    else:
        bias = torch.zeros((bsz, 1, 1, max_len), dtype=k.dtype, device=q.device)  # [B, 1, 1, L]
        bias.masked_fill_(~valid[:, None, None, :], float("-inf"))
        o = F.scaled_dot_product_attention(qg, k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias,
                                           scale=sm_scale)  # [B, Hkv, G, D]
    o = o.reshape(bsz, num_q_heads, head_dim).to(q.dtype)
    if out is None:
        return o
    out.copy_(o)
    return out


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None, window=None, softcap=None, k_scale=1.0, v_scale=1.0, sinks=None, chunk=None,
                     alibi=None, alibi_bf16=None):
    """New tokens of each request attend to its cached prefix and causally to themselves.

    q: [T, Hq, D], the requests' new tokens concatenated in batch order (T = sum(extend_lens)).
    The new tokens' K/V must already be stored in the pool, so request b's keys are
    k_buffer[req_to_token[row_b, :prefix_lens[b] + extend_lens[b]]]; new token i (0-based) of
    request b sees keys at positions <= prefix_lens[b] + i (and > prefix_lens[b] + i - window with a
    window; >= its chunk's start with a chunk; softcap: capped scores; sinks: each head's sink logit; alibi, alibi_bf16:
    see the module doc).  Returns out: [T, Hq, D].
    """
    num_q_heads = q.shape[1]
    num_kv_heads = k_buffer.shape[1]
    if out is None:
        out = torch.empty_like(q)
    start = 0
    rows_all = req_pool_indices.tolist()
    gqa = num_q_heads != num_kv_heads
    for row, prefix, ext in zip(rows_all, prefix_lens.tolist(), extend_lens.tolist()):
        if ext == 0:
            continue
        total = prefix + ext
        slots = req_to_token[row, :total].long()
        # 4-D inputs: torch's CPU flash kernel takes only those (3-D falls back to the slow math path)
        k = gather_rows(k_buffer, slots).transpose(0, 1).unsqueeze(0)  # [1, Hkv, S, D]
        v = gather_rows(v_buffer, slots).transpose(0, 1).unsqueeze(0)  # [1, Hkv, S, D]
        if k.dtype == E4M3:
            k, v = from_kv(k, q.dtype, k_scale), from_kv(v, q.dtype, v_scale)  # [1, Hkv, S, D] each
        qi = q[start:start + ext].transpose(0, 1).unsqueeze(0).to(k.dtype)  # [1, Hq, E, D]
        if window or softcap or sinks is not None or chunk or alibi is not None:
            o = _extend_variant(qi, k, v, prefix, sm_scale, window, softcap, sinks, chunk, alibi,
                                alibi_bf16)  # [1, Hq, E, D]
        elif prefix == 0:
            o = F.scaled_dot_product_attention(qi, k, v, is_causal=True, scale=sm_scale, enable_gqa=gqa)
        else:
            mask = (torch.arange(total, device=q.device)[None, :]
                    <= prefix + torch.arange(ext, device=q.device)[:, None])  # [E, S]
            o = F.scaled_dot_product_attention(qi, k, v, attn_mask=mask[None, None], scale=sm_scale,
                                               enable_gqa=gqa)  # [1, Hq, E, D]
        out[start:start + ext] = o[0].transpose(0, 1).to(out.dtype)  # [E, Hq, D]
        start += ext
    return out


def _extend_variant(qi, k, v, prefix, sm_scale, window, softcap, sinks=None, chunk=None, alibi=None, alibi_bf16=None):
    """One request's extend with a window, soft-capping, sinks, chunks (Llama 4: a token sees only keys at
    positions >= its own // chunk * chunk) and/or ALiBi.  qi: [1, Hq, E, D]; k, v: [1, Hkv, S, D]; sinks, alibi:
    None or [Hq]."""
    num_q_heads, ext, head_dim = qi.shape[1:]
    num_kv_heads = k.shape[1]
    group = num_q_heads // num_kv_heads
    lo = max(0, prefix - window + 1) if window else 0  # keys before lo are outside every new token's window
    if chunk:
        lo = max(lo, prefix // chunk * chunk)
    k, v = k[:, :, lo:], v[:, :, lo:]  # [1, Hkv, S', D]
    pos = prefix - lo + torch.arange(ext, device=qi.device)[:, None]  # [E, 1] each new token's position from lo
    keys = torch.arange(k.shape[2], device=qi.device)[None, :]  # [1, S']
    keep = keys <= pos  # [E, S']
    if window:
        keep &= keys > pos - window
    if chunk:
        keep &= keys >= (pos + lo) // chunk * chunk - lo  # [E, S']
    if not softcap and sinks is None and alibi is None:
        return F.scaled_dot_product_attention(qi, k, v, attn_mask=keep[None, None], scale=sm_scale,
                                              enable_gqa=group > 1)  # [1, Hq, E, D]
    qg = qi[0].reshape(num_kv_heads, group * ext, head_dim)  # [Hkv, G*E, D] (heads of a group are adjacent)
    keep = keep.repeat(group, 1)  # [G*E, S]
    sink = None if sinks is None else sinks.view(num_kv_heads, group).repeat_interleave(ext, dim=1)  # [Hkv, G*E]
    bias = None
    if alibi is not None:
        slopes = alibi.float().view(num_kv_heads, group).repeat_interleave(ext, dim=1)[..., None]  # [Hkv, G*E, 1]
        bias = _alibi_bias(slopes, keys + lo, (pos + lo).repeat(group, 1),
                           alibi_bf16)  # [Hkv, G*E, S'] (absolute positions: Falcon's rounding reads them)
    o = _capped_attention(qg[None], k, v, keep[None, None], sm_scale, softcap, sink, bias)  # [1, Hkv, G*E, D]
    return o.view(1, num_q_heads, ext, head_dim)  # [1, Hq, E, D]


def silu_and_mul(gate_up):
    """The SwiGLU of Mixtral and Qwen: gate_up [N, 2I] (gate columns, then up) -> silu(gate) * up [N, I]."""
    half = gate_up.shape[-1] // 2
    return F.silu(gate_up[..., :half]) * gate_up[..., half:]


def fused_moe(x, w13, w2, topk_weights, topk_ids, expert_offset=0, b13=None, b2=None, act=silu_and_mul):
    """The mixture-of-experts MLP, token by token: the oracle of triton_moe.fused_moe.

    x: [T, H]; w13: [E, 2I, H] (gate rows, then up rows); w2: [E, H, I]; topk_weights: [T, k] float32;
    topk_ids: [T, k] global expert ids, of which this holder has experts expert_offset..expert_offset+E-1 (the
    others contribute nothing: expert parallelism); b13 [E, 2I], b2 [E, H]: the experts' biases (gpt-oss), or None;
    act: [..., 2I] float32 -> [..., I], the gated activation (default silu(gate) * up).  Returns [T, H] in x.dtype:
    out[t] = sum_j w[t, j] * (w2[e] @ act(w13[e] @ x[t] + b13[e]) + b2[e]), e = topk_ids[t, j] - expert_offset.
    """
    num_experts = w13.shape[0]
    local = topk_ids.long() - expert_offset                        # [T, k]
    held = (local >= 0) & (local < num_experts)                    # [T, k]
    e = local.clamp(0, num_experts - 1)                            # [T, k]
    gate_up = torch.einsum("th,tkih->tki", x.float(), w13[e].float())   # [T, k, 2I]
    if b13 is not None:
        gate_up = gate_up + b13[e].float()                         # [T, k, 2I]
    y = torch.einsum("tki,tkhi->tkh", act(gate_up), w2[e].float())   # [T, k, I] -> [T, k, H]
    if b2 is not None:
        y = y + b2[e].float()                                      # [T, k, H]
    w = (topk_weights.float() * held).unsqueeze(-1)                # [T, k, 1]
    return (y * w).sum(1).to(x.dtype)                              # [T, H]
