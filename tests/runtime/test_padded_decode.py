"""The padded static-buffer decode path (what CUDA graphs replay), run eagerly on CPU: a decode step
padded to a captured batch size gives the logits, tokens and KV of the same step unpadded (oracle:
a runner without it), padding writes no slot but the scratch slot, and the path is taken only for
pure decode steps (not prefills, drafts or prompt logprobs)."""

import pytest
import torch

from radixlm.runtime.runner.cuda_graph import capture_sizes
from radixlm.runtime.runner.model_runner import ModelRunner
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.plan import StepEntry, StepPlan
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.step_builder import StepBuilder

PROMPTS = [[5, 17, 42, 99, 7], [5, 17, 42, 8], [3, 4, 5], [60, 61, 62, 63, 64, 65], [9, 9, 9, 9]]


@pytest.fixture(scope="module")
def model_path(tiny_model):
    return str(tiny_model("llama"))


def test_capture_sizes():
    assert capture_sizes(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert capture_sizes(5) == [1, 2, 4, 5] and capture_sizes(40) == [1, 2, 4, 8, 16, 32, 40]
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        capture_sizes(0)


class Counting:
    """Wraps PaddedDecode.run to count the steps it ran."""

    def __init__(self, decode):
        self.decode, self.calls = decode, 0
        self.run_inner = decode.run
        decode.run = self.run

    def run(self, fb):
        self.calls += 1
        return self.run_inner(fb)


def _runner(model_path, padded):
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=128, num_rows=8)
    assert runner.decode_graphs is None          # not applicable on CPU by default
    counter = None
    if padded:
        runner.use_padded_decode(8, capture=False)
        counter = Counting(runner.decode_graphs)
    return runner, counter


def _requests(n):
    reqs, slot = [], 0
    for i, p in enumerate(PROMPTS[:n]):
        req = Req(f"r{i}", p, SamplingParams.from_dict({"max_new_tokens": 8, "temperature": 0}),
                  return_logprob=True, top_logprobs_num=2)
        req.kv_slots, req.row, req.table_len = list(range(slot, slot + len(p))), i, 0
        slot += 20
        reqs.append(req)
    return reqs


def _generate(runner, n, steps, mixed_step=None):
    """Prefill n requests, then decode `steps` steps; at mixed_step a new request's prefill with prompt
    logprobs joins the step (not a pure decode: not padded)."""
    reqs = _requests(n)
    outs = [runner.forward_step(StepBuilder(runner.vocab_size).build(StepPlan([StepEntry(r, 0, len(r.fill_ids), True) for r in reqs])))]
    for step in range(steps):
        for r, res in zip(reqs, outs[-1]):
            r.fill_ids.append(res.next_token)
            r.kv_slots.append(r.kv_slots[-1] + 1)
        entries = [StepEntry(r, len(r.fill_ids) - 1, 1, True) for r in reqs]
        if step == mixed_step:
            extra = Req("extra", [11, 12, 13], SamplingParams.from_dict({"max_new_tokens": 1, "temperature": 0}))
            extra.kv_slots, extra.row, extra.table_len = [100, 101, 102], 7, 0
            entries.append(StepEntry(extra, 0, 3, True, logprob_positions=[0, 1]))
        outs.append(runner.forward_step(StepBuilder(runner.vocab_size).build(StepPlan(entries)))[:n])
    return outs


@pytest.mark.parametrize("n", [3, 5])   # padded to 4 and to 8
def test_padded_decode_equals_unpadded(model_path, n):
    plain, _ = _runner(model_path, padded=False)
    padded, counter = _runner(model_path, padded=True)
    scratch = padded.num_slots
    before = [k.clone() for k in padded.kv_pool.k_buffers]
    want, got = _generate(plain, n, 4, mixed_step=2), _generate(padded, n, 4, mixed_step=2)
    assert counter.calls == 3                    # the decode steps but the mixed one
    for w, g in zip(want, got):
        assert [r.next_token for r in g] == [r.next_token for r in w]
        for rw, rg in zip(w, g):
            assert rg.output_logprob == pytest.approx(rw.output_logprob, abs=1e-5)
            assert [t for _, t in rg.output_top] == [t for _, t in rw.output_top]
    written = {s for i in range(n) for s in range(20 * i, 20 * i + len(PROMPTS[i]) + 4)} | {100, 101, 102}
    for layer, (k_plain, k_padded, k_before) in enumerate(zip(plain.kv_pool.k_buffers, padded.kv_pool.k_buffers,
                                                             before)):
        untouched = [s for s in range(padded.num_slots) if s not in written]
        assert torch.equal(k_padded[untouched], k_before[untouched]), f"layer {layer}: padding wrote a real slot"
        rows = sorted(written)
        torch.testing.assert_close(k_padded[rows], k_plain[rows], atol=1e-5, rtol=1e-5)
        assert not torch.equal(k_padded[scratch], k_before[scratch])   # padding rows wrote the scratch slot


def test_drafts_and_large_batches_take_the_plain_path(model_path):
    padded, counter = _runner(model_path, padded=True)
    padded.use_padded_decode(2, capture=False)   # batches above 2 are too large
    counter = Counting(padded.decode_graphs)
    _generate(padded, 3, 1)
    assert counter.calls == 0
    reqs = _requests(1)
    r = reqs[0]
    padded.forward_step(StepBuilder(padded.vocab_size).build(StepPlan([StepEntry(r, 0, len(r.fill_ids), True)])))
    r.fill_ids.append(7)
    r.kv_slots += [r.kv_slots[-1] + 1, r.kv_slots[-1] + 2]
    padded.forward_step(StepBuilder(padded.vocab_size).build(StepPlan([StepEntry(r, len(r.fill_ids) - 1, 2, True, draft=[8])])))
    assert counter.calls == 0


def test_cuda_graph_flags_reach_the_runner():
    from radixlm.runtime.server.launch import scheduler_parts
    from radixlm.runtime.server_args import ServerArgs

    runner = scheduler_parts(ServerArgs(disable_cuda_graph=True, cuda_graph_max_bs=24))["runner"]
    assert runner["disable_cuda_graph"] is True and runner["cuda_graph_max_bs"] == 24
    assert scheduler_parts(ServerArgs())["runner"]["disable_cuda_graph"] is False
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        ServerArgs(cuda_graph_max_bs=0)


def test_warm_up_steps_leave_no_trace(model_path):
    """The start-up warm-up (run on CUDA before the server is ready) changes nothing a request sees: after it,
    a step gives the same tokens and logprobs as on a runner that never warmed up, and table row 0 is clear."""
    cold, _ = _runner(model_path, padded=False)
    warm, _ = _runner(model_path, padded=False)
    warm._warm_up()
    assert not warm.req_to_token.table[0].any()
    outs = []
    for runner in (cold, warm):
        reqs = _requests(3)
        outs.append(runner.forward_step(StepBuilder(runner.vocab_size).build(
            StepPlan([StepEntry(r, 0, len(r.fill_ids), True) for r in reqs]))))
    assert [(o.next_token, o.output_logprob) for o in outs[0]] == [(o.next_token, o.output_logprob) for o in outs[1]]
