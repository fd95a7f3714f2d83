"""--tp-size 2 logits against --tp-size 1 and HF transformers in float64 (the oracle), on tiny Llama, Qwen2, Granite
and SmolLM3.

This process is rank 0 (a real ModelRunner in a gloo group); rank 1 is a real tp worker process
(`python -m radixlm.runtime.child tp_worker`) that replays each step rank 0 broadcasts.  The steps are a
batched prefill of two prompts over shuffled, non-contiguous KV slots, then decode steps of both.

The bound is derived, not guessed: float64 is exact here, so tp=1's float32 error against it is this
machine's float32 noise for this model.  Splitting a GEMM over two ranks and summing the halves is another
equally valid float32 summation order, so tp=2 must land within NOISE_FACTOR times that noise (plus a few
ulps of the largest logit, where tp=1's own error happens to be tiny); a wrong shard, head or slot moves the
logits by orders of magnitude more.
"""

import json
import random
import subprocess
import sys

import pytest
import torch

from radixlm.runtime.distributed.topology import TPTopology, free_port
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.model_runner import ModelRunner

NOISE_FACTOR = 4.0
NOISE_FLOOR_ULPS = 16
PROMPTS = [[5, 17, 42, 99, 3, 250, 7], [300, 12, 12, 64, 389]]
DECODES = [[11, 23, 35], [390, 0, 77]]     # tokens fed at the decode steps (390: in rank 1's vocabulary half)
RUNNER = {"dtype": "float32", "max_total_tokens": 256, "num_rows": 4, "attention_backend": "auto"}


def run_steps(runner) -> list:
    """Prefill both prompts in one step, then decode both; -> per request the logits [steps, V] float64."""
    rng = random.Random(0)
    slots = rng.sample(range(runner.num_slots), sum(len(p) + len(d) for p, d in zip(PROMPTS, DECODES)))
    table, rows, lens, out = runner.req_to_token.table, [2, 0], [0, 0], [[], []]
    steps = [PROMPTS] + [[[d[i]] for d in DECODES] for i in range(len(DECODES[0]))]   # token lists per request
    for step in steps:
        ids, loc, updates = [], [], []
        for r, tokens in enumerate(step):
            mine = [slots.pop() for _ in tokens]
            table[rows[r], lens[r]:lens[r] + len(tokens)] = torch.tensor(mine, dtype=torch.int32)
            updates.append((rows[r], lens[r], table[rows[r], lens[r]:lens[r] + len(tokens)]))
            ids += tokens
            loc += mine
        fb = ForwardBatch.build(ids, list(lens), [len(t) for t in step], rows, loc, table)
        if runner.tp_leader is not None:
            runner.tp_leader.send(fb, updates)
        with torch.inference_mode():
            logits = runner.model.compute_logits(runner.model.forward(fb)[fb.logits_indices])   # [2, V]
        for r, tokens in enumerate(step):
            lens[r] += len(tokens)
            out[r].append(logits[r].double())
    return [torch.stack(o) for o in out]                                                      # [steps, V] each


def hf_float64(path) -> list:
    from logits_oracle import _is_moe
    from transformers import AutoModelForCausalLM

    kw = {"experts_implementation": "eager"} if _is_moe(path) else {}     # HF's grouped_mm has no float64
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64, **kw).eval()
    out = []
    with torch.no_grad():
        for prompt, decode in zip(PROMPTS, DECODES):
            logits = hf(torch.tensor([prompt + decode])).logits[0]                            # [L, V]
            out.append(logits[len(prompt) - 1:len(prompt) + len(decode)])                     # [steps, V]
    return out


def run_tp2(path, tmp_path, ep_size: int = 1) -> list:
    topology = TPTopology(size=2, nnodes=1, node_rank=0, init_addr=f"127.0.0.1:{free_port()}", ep_size=ep_size)
    config = tmp_path / "tp-worker-1.json"
    config.write_text(json.dumps({"model": str(path), "runner": {**RUNNER, "tp": topology.rank_config(1)},
                                  "log_level": "warning", "num_threads": 1,
                                  "ready_file": str(tmp_path / "tp-worker-1.ready")}))
    worker = subprocess.Popen([sys.executable, "-m", "radixlm.runtime.child", "tp_worker", str(config)])
    runner = None
    try:
        runner = ModelRunner(str(path), **RUNNER, tp=topology.rank_config(0))
        got = run_steps(runner)
        runner.tp_leader.stop()
        assert worker.wait(60) == 0, "the worker did not end on STOP"
        return got
    finally:
        if runner is not None:
            runner.tp_leader.stop()
            runner.tp.close()
        if worker.poll() is None:
            worker.kill()
            worker.wait()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "granite", "smollm3", "ministral", "seed_oss"])
def test_tp2_logits_equal_tp1_within_float32_noise(arch, tiny_model, tmp_path):
    path = tiny_model(arch)
    exact = hf_float64(path)
    tp1 = run_steps(ModelRunner(str(path), **RUNNER))
    tp2 = run_tp2(path, tmp_path)
    for r in range(len(PROMPTS)):
        noise = (tp1[r] - exact[r]).abs().max().item()
        floor = NOISE_FLOOR_ULPS * torch.finfo(torch.float32).eps * exact[r].abs().max().item()
        err = (tp2[r] - exact[r]).abs().max().item()
        assert err <= NOISE_FACTOR * noise + floor, (arch, r, err, noise)
        assert torch.equal(tp2[r].argmax(-1), tp1[r].argmax(-1))
