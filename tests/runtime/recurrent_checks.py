"""Checks shared by the tests of models with a recurrent state per request row: logits of every kind of step over
the rows' states (check_prefills_chunks_decodes_and_a_mixed_step), and a system prompt and a second turn served from
the radix cache's state snapshots as HF generates (assert_snapshots_serve_as_hf_generates)."""

import random

import torch
from logits_oracle import Paged, assert_close
from scheduler_harness import collect, make_scheduler, run_until_idle, submit


def check_prefills_chunks_decodes_and_a_mixed_step(path, ids, ref):
    """Rows 0 and 1 prefilled together, continued by a chunk each, decoded together, then row 1's decode beside a
    fresh prefill of row 2: every logit against HF's one run (ref) of the 24 or more tokens `ids`."""
    paged = Paged(path, seed=2)
    out = paged.step([(0, ids[:9]), (1, ids[:5])])
    assert_close(out[:9], ref[:9], "batched prefill, row 0")
    assert_close(out[9:], ref[:5], "batched prefill, row 1")
    out = paged.step([(0, ids[9:20]), (1, ids[5:14])])
    assert_close(out[:11], ref[9:20], "chunk after 9, row 0")
    assert_close(out[11:], ref[5:14], "chunk after 5, row 1")
    for i in range(3):
        out = paged.step([(0, [ids[20 + i]]), (1, [ids[14 + i]])])
        assert_close(out, ref[[20 + i, 14 + i]], f"decode step {i}")
    out = paged.step([(1, [ids[17]]), (2, ids[:6])])
    assert_close(out[0], ref[17], "decode beside a prefill")
    assert_close(out[1:], ref[:6], "prefill beside a decode")


def assert_snapshots_serve_as_hf_generates(path, **config):
    """A second user of a system prompt computes it and keeps its state there, a third starts from it, and a second
    turn starts where the first turn ended: each request one after another, with HF's greedy tokens and those cached
    tokens.  config: the scheduler's (overlap_schedule=True: plain decodes in flight)."""
    from tiny_models import hf_auto_class
    from transformers import AutoConfig, GenerationConfig

    from radixlm.runtime.runner.model_runner import ModelRunner
    from radixlm.runtime.scheduler.kv_manager import CACHE_POINT_MIN

    hf = hf_auto_class(AutoConfig.from_pretrained(str(path)).model_type).from_pretrained(
        str(path), dtype=torch.float32).eval()

    def generate(prompt, n):   # greedy with EOS an ordinary token, as ignore_eos serves it
        with torch.no_grad():
            out = hf.generate(torch.tensor([prompt]), generation_config=GenerationConfig(pad_token_id=0),
                              max_new_tokens=n, do_sample=False, eos_token_id=None)
        return out[0, len(prompt):].tolist()

    rng = random.Random(4)
    system = [rng.randrange(3, 300) for _ in range(CACHE_POINT_MIN + 4)]
    users = [[300 + i] + [rng.randrange(3, 300) for _ in range(3)] for i in range(3)]
    first = generate(system + users[0], 6)
    reqs = [(str(i), system + u, 6) for i, u in enumerate(users)] + [("turn2", system + users[0] + first + [7, 8], 5)]
    sched = make_scheduler(ModelRunner(str(path), dtype="float32", max_total_tokens=1024, num_rows=8), **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True})
        run_until_idle(sched)
    out = collect(sched)
    for rid, prompt, n in reqs:
        assert out[rid]["tokens"] == (first if rid == "0" else generate(prompt, n)), rid
    cached = {rid: out[rid]["cached_tokens"] for rid, _, _ in reqs}
    assert cached == {"0": 0, "1": 0, "2": len(system), "turn2": len(system + users[0] + first) - 1}
