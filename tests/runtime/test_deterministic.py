"""--deterministic: a request's logits are the same bits alone, in a batch with others, and recomputed by
an extend after retraction; the scheduler's greedy tokens and their logprobs are the same submitted
together, one at a time, and under KV pressure with retraction.

Oracles: the request run alone (model level, float32 and bfloat16 tiny models) and the requests run one
at a time without a cache (engine level). With the mode off the same runs may differ in their last bits
(on the host measured, Intel AMX, they do: a GEMM's per-row result depends on its row count, and the
extend kernels sum in another order than decode), whether they do depends on the CPU; what holds on
every CPU, and is tested, is that they stay within rounding of the run alone.
"""

import random

import pytest
import torch
from scheduler_harness import collect, make_scheduler, run_until_idle, submit
from test_engine_consistency import workload

from radixlm.kernels import batch_invariant, cpu_native, torch_ref
from radixlm.runtime import io_struct as io
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.packed_linear import linear, pack, packing_available
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.memory_pool import ReqToTokenPool
from radixlm.runtime.runner.model_runner import ModelRunner
from radixlm.runtime.runner.model_setup import DETERMINISTIC_GEMM_ROWS, build_model
from radixlm.runtime.server_args import ServerArgs

pytestmark = pytest.mark.skipif(not cpu_native.available(), reason="deterministic mode needs the native kernels")
NUM_SLOTS, ROWS, MAX_CONTEXT = 1024, 8, 257


# ---- the parts: fixed-row GEMMs and per-token attention ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fixed_row_gemm_rows_do_not_depend_on_the_batch(dtype):
    """Every row of a fixed-row GEMM equals the row computed alone, whatever the row count, the row's
    position and the other rows (SmolLM2's shapes)."""
    g = torch.Generator().manual_seed(0)
    for n, k, w, x in _gemm_cases(dtype, g):
        alone = torch.cat([linear(x[i:i + 1], w, None, DETERMINISTIC_GEMM_ROWS) for i in range(0, 300, 37)])
        for m in (1, 5, 16, 17, 64, 300):
            perm = torch.randperm(m, generator=g)
            got = linear(x[:m][perm], w, None, DETERMINISTIC_GEMM_ROWS)[perm.argsort()]  # [m, N]
            assert torch.equal(got[::37], alone[:len(got[::37])]), (n, k, m)


def _gemm_cases(dtype, g):
    """SmolLM2's linear shapes: (N, K, weight [N, K] packed where packing applies, x [300, K])."""
    for n, k in ((960, 576), (3072, 576), (576, 1536), (4096, 576)):
        w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)          # [N, K]
        w = pack(w) if packing_available(dtype, "cpu") else w
        yield n, k, w, torch.randn(300, k, generator=g).to(dtype)


def test_per_token_attention_matches_the_reference_and_decode():
    """batch_invariant.extend_attention: close to the torch reference, and each token's output the same bits
    as a decode of that token alone (its own causal length), for float32 and bfloat16 KV."""
    g = torch.Generator().manual_seed(1)
    prefix, ext = torch.tensor([0, 40, 7]), torch.tensor([19, 3, 1])
    for dtype in (torch.float32, torch.bfloat16):
        k = torch.randn(512, 2, 32, generator=g).to(dtype)              # [S, Hkv, D]
        v = torch.randn(512, 2, 32, generator=g).to(dtype)
        table = torch.randperm(512, generator=g)[:3 * 64].view(3, 64).to(torch.int32).contiguous()  # [R, C]
        rows = torch.tensor([2, 0, 1])
        q = torch.randn(int(ext.sum()), 8, 32, generator=g).to(dtype)  # [T, Hq, D]
        got = batch_invariant.extend_attention(q, k, v, table, rows, prefix, ext, 32 ** -0.5)
        want = torch_ref.extend_attention(q, k, v, table, rows, prefix, ext, 32 ** -0.5)
        assert (got.float() - want.float()).abs().max() < (1e-5 if dtype == torch.float32 else 2e-2)
        t = 0
        for b in range(3):
            for i in range(int(ext[b])):
                one = cpu_native.decode_attention(q[t:t + 1], k, v, table, rows[b:b + 1],
                                                  prefix[b:b + 1] + i + 1, 32 ** -0.5)
                assert torch.equal(got[t:t + 1], one), (dtype, b, i)
                t += 1


# ---- model level: one request's logits alone, batched, and recomputed after retraction ----

class Paged:
    """A model over a KV pool with shuffled slots; requests are rows. step() runs one forward and returns
    each entry's last-token logits [V]."""

    def __init__(self, path, dtype, deterministic):
        self.model, self.config, self.pool = build_model(path, dtype, "cpu", "auto", lambda cfg: NUM_SLOTS,
                                                         deterministic)
        self.table = ReqToTokenPool(ROWS, MAX_CONTEXT).table            # [R, C]
        self.free = random.Random(0).sample(range(NUM_SLOTS), NUM_SLOTS)
        self.slots = {}                                                 # row -> slots of its positions

    def step(self, entries):
        """entries: (row, token ids of the request so far, prefix_len): the tokens after prefix_len are new
        (the row's slots past prefix_len are given back first: a retraction keeps only the prefix)."""
        ids, prefix, ext, rows, loc = [], [], [], [], []
        for row, tokens, p in entries:
            held = self.slots.setdefault(row, [])
            self.free.extend(held[p:])
            del held[p:]
            new = [self.free.pop() for _ in range(len(tokens) - p)]
            held.extend(new)
            self.table[row, :len(held)] = torch.tensor(held, dtype=torch.int32)
            ids += tokens[p:]
            prefix.append(p)
            ext.append(len(tokens) - p)
            rows.append(row)
            loc += new
        fb = ForwardBatch.build(ids, prefix, ext, rows, loc, self.table)
        return list(self.model.compute_logits(self.model.forward(fb)[fb.logits_indices]))  # [V] each


def _prompts(vocab, seed=0):
    rng = random.Random(seed)
    return {name: [rng.randrange(3, vocab) for _ in range(n)] for name, n in
            (("r", 45), ("a", 30), ("b", 70), ("c", 110), ("d", 12))}


def _three_runs(path, dtype, deterministic, steps=6):
    """Logits of request r's `steps` sampled positions: alone; batched with others (prefills, chunks, mixed
    steps); and prefilled in chunks, retracted after 3 tokens and recomputed by extends (the prompt's KV
    kept as a cache hit would, the generated tokens recomputed), then decoded on. Each run feeds r the
    tokens the alone run chose, so the runs compute the same positions."""
    runs = []
    m = Paged(path, dtype, deterministic)
    p = _prompts(m.config.vocab_size)
    r = list(p["r"])
    alone = [m.step([(0, r, 0)])[0]]
    for _ in range(steps - 1):
        r.append(int(alone[-1].argmax()))
        alone.append(m.step([(0, r, len(r) - 1)])[0])
    r.append(int(alone[-1].argmax()))
    runs.append(alone)
    toks = r[len(p["r"]):]                                              # the chosen tokens

    m = Paged(path, dtype, deterministic)
    a, b, c, d, r = list(p["a"]), list(p["b"]), list(p["c"]), list(p["d"]), list(p["r"])
    got = [m.step([(1, a, 0), (0, r, 0), (2, b[:33], 0)])[1]]
    for i in range(1, steps):
        r.append(toks[i - 1])
        others = [[(1, a + [5], len(a)), (2, b, 33)], [(3, c[:64], 0)], [(3, c, 64), (4, d, 0)],
                  [(4, d + [7], len(d)), (1, a + [5, 6], len(a) + 1)], []][i - 1]
        out = m.step(others[:1] + [(0, r, len(r) - 1)] + others[1:])
        got.append(out[1 if others else 0])
    runs.append(got)

    m = Paged(path, dtype, deterministic)
    a, c, r = list(p["a"]), list(p["c"]), list(p["r"])
    m.step([(0, r[:20], 0), (3, c[:50], 0)])
    got = [m.step([(1, a, 0), (0, r, 20)])[1]]
    for i in range(1, 3):
        r.append(toks[i - 1])
        got.append(m.step([(0, r, len(r) - 1), (1, a + [9] * i, len(a) + i - 1)])[0])
    r.append(toks[2])
    got.append(m.step([(3, c, 50), (0, r, len(p["r"]))])[1])           # retracted: generated tokens recomputed
    for i in range(4, steps):
        r.append(toks[i - 1])
        got.append(m.step([(0, r, len(r) - 1)])[0])
    runs.append(got)
    return runs


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_alone_batched_and_after_retraction(tiny_model, arch, dtype):
    path = str(tiny_model(arch))
    alone, batched, retracted = _three_runs(path, dtype, deterministic=True)
    for i, (x, y, z) in enumerate(zip(alone, batched, retracted)):
        assert torch.equal(x, y), f"position {i}: batched logits differ from alone"
        assert torch.equal(x, z), f"position {i}: recomputed logits differ from alone"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_within_rounding_with_the_mode_off(tiny_model, dtype):
    """Without --deterministic, batching and recomputation may change the logits' last bits, never more:
    the batched and recomputed runs stay within rounding of the run alone (relative to the logits' scale;
    bfloat16 rounds activations to 8 bits of mantissa)."""
    path = str(tiny_model("llama"))
    alone, batched, retracted = _three_runs(path, dtype, deterministic=False)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for i, (x, y, z) in enumerate(zip(alone, batched, retracted)):
        scale = x.float().abs().max()
        for other, what in ((y, "batched"), (z, "recomputed")):
            err = (other.float() - x.float()).abs().max() / scale
            assert err < tol, f"position {i}: {what} logits {err:.2e} (relative) from alone"


# ---- engine level: the engine-consistency request set through the real scheduler ----

def _serve(path, dtype, reqs, deterministic, one_at_a_time=False, max_total_tokens=8192, **config):
    """rid -> (greedy tokens, their logprobs) of the requests run by the real runner and scheduler."""
    runner = ModelRunner(path, dtype=dtype, max_total_tokens=max_total_tokens, num_rows=80,
                         deterministic=deterministic)
    sched = make_scheduler(runner, **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True}, return_logprob=True)
        if one_at_a_time:
            run_until_idle(sched)
    run_until_idle(sched)
    logprobs = {rid: [] for rid, _, _ in reqs}
    for msg in sched.outbox.msgs:
        if isinstance(msg, io.BatchTokenOut):
            for rid, lps in zip(msg.rids, msg.output_logprobs):
                logprobs[rid].extend(lp[0] for lp in lps or [])
    out = collect(sched)
    return sched, {rid: (out[rid]["tokens"], logprobs[rid]) for rid, _, _ in reqs}


@pytest.fixture
def one_thread():
    """Engine-level runs on one torch thread: on a shared 2-core host the OpenMP barriers of a two-thread
    step wait for descheduled threads and make these tiny-model runs 15x slower (measured: 0.7 s vs 11 s).
    The parts and model-level tests above run on the default threads."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


ALONE = {"one_at_a_time": True, "disable_radix_cache": True}
PRESSURE = {"max_total_tokens": 320, "chunked_prefill_size": 64, "new_token_ratio": 0.0}  # its "tight-kv" mode


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_consistency_set_together_alone_and_under_kv_pressure(tiny_model, dtype, one_thread):
    """Greedy tokens and their logprobs (exact floats) equal the one-at-a-time uncached run when submitted
    together with the radix cache, and under KV pressure with retraction: the 64 requests of
    test_engine_consistency.py."""
    path = str(tiny_model("llama"))
    reqs = workload(read_model_config(path).vocab_size)
    _, want = _serve(path, dtype, reqs, True, **ALONE)
    _, together = _serve(path, dtype, reqs, True)
    tight, pressured = _serve(path, dtype, reqs, True, **PRESSURE)
    assert tight.stats.retracted > 0
    assert all(len(lps) == len(toks) > 0 for toks, lps in want.values())
    assert together == want
    assert pressured == want


def test_flag_names_and_plumbing():
    """--deterministic and SGLang's --enable-deterministic-inference, on the CLI and as Engine kwargs, reach
    the scheduler process's ModelRunner; kernels that are not batch-invariant are refused."""
    from radixlm.kernels.dispatch import get_attention_ops
    from radixlm.runtime.cli import build_parser
    from radixlm.runtime.server.launch import scheduler_parts

    for flag in ("--deterministic", "--enable-deterministic-inference"):
        assert build_parser().parse_args(["serve", flag]).deterministic is True
    assert build_parser().parse_args(["serve"]).deterministic is False
    assert ServerArgs.from_kwargs(enable_deterministic_inference=True).deterministic is True
    assert ServerArgs.from_kwargs(deterministic=True).deterministic is True
    assert scheduler_parts(ServerArgs(deterministic=True))["runner"]["deterministic"] is True
    assert scheduler_parts(ServerArgs())["runner"]["deterministic"] is False
    assert get_attention_ops("auto", "cpu", deterministic=True).name == "cpu-deterministic"
    for backend, device in (("torch", "cpu"), ("triton", "cpu"), ("auto", "cuda")):
        with pytest.raises(ValueError, match="deterministic"):
            get_attention_ops(backend, device, deterministic=True)
