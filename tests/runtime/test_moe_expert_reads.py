"""A tiny-MoE decode step reads each expert's weights once per layer, however many tokens chose it.

Counted, not timed: moe.expert_ffn (the only code that touches an expert's weights on the CPU) is wrapped to
record which weight it was given.  A decode step of 12 requests over 8 experts with top 2 gives 24 (token,
choice) rows, so several tokens share most experts; each chosen expert must be called exactly once per sparse
layer with all of its rows, experts nobody chose not at all, and the logits must still match HF.
"""

import random

from logits_oracle import HF, Paged, assert_close

from radixlm.runtime.models import moe


def test_decode_step_reads_each_chosen_expert_once(tiny_model, monkeypatch):
    path = tiny_model("qwen3_moe")
    hf = HF(path)
    paged = Paged(path, seed=6, rows=12)
    model = paged.model
    blocks = dict(model.sparse_blocks())
    weight_of = {}   # id of a packed expert weight -> (layer, expert)
    for layer, block in blocks.items():
        for e, w in enumerate(block.packed_experts[0]):
            weight_of[id(w)] = (layer, e)
    seqs = [random.Random(200 + r).choices(range(300), k=7) for r in range(12)]
    paged.step([(r, seqs[r][:6]) for r in range(12)])                            # prefill 12 requests
    calls, real = [], moe.expert_ffn
    monkeypatch.setattr(moe, "expert_ffn", lambda x, w13, w2, *rest: calls.append((weight_of[id(w13)], x.shape[0]))
                        or real(x, w13, w2, *rest))
    before = {layer: block.expert_tokens.clone() for layer, block in blocks.items()}
    out = paged.step([(r, [seqs[r][6]]) for r in range(12)])                     # one decode step, 12 tokens
    for layer, block in blocks.items():
        routed = block.expert_tokens - before[layer]                             # [E] rows routed this step
        mine = [(e, n) for (lay, e), n in calls if lay == layer]
        chosen = [e for e, n in mine]
        assert sorted(chosen) == sorted(set(chosen)), f"layer {layer}: an expert was called twice: {chosen}"
        assert {e: n for e, n in mine} == {e: int(n) for e, n in enumerate(routed) if n}, layer
        assert sum(n for _, n in mine) == 12 * model.config.moe.top_k
    assert len(calls) < 12 * model.config.moe.top_k * len(blocks)                # tokens did share experts
    for r in range(12):
        assert_close(out[r], hf(seqs[r])[6], f"decode row {r}")
