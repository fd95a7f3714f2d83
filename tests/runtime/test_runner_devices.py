"""Every tensor the model runner makes while it runs a step is made on an explicit device.

A tensor made without `device=` lands on the CPU; on a CUDA runner it then meets CUDA data (the
logprob targets that `gather` reads, an index into CUDA logits) and PyTorch refuses, or it costs a
synchronous copy.  The oracle: a TorchFunctionMode records each tensor factory call of the runtime's
own step code (runner, forward batch, sampler, attention backend, KV copies, CUDA-graph buffers) that
names no device, or a device other than the runner's unless it is a host staging buffer (device="cpu"
with an explicit pin_memory=).
The step mixes everything that builds tensors: a prefill with input logprobs, decodes with output
logprobs and top-k, a grammar mask, penalties, logit bias, min_new_tokens, a seed and a draft.
"""

import os
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

from radixlm.runtime.runner.model_runner import ModelRunner
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.plan import StepEntry, StepPlan
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.step_builder import StepBuilder

FACTORIES = {torch.tensor, torch.as_tensor, torch.empty, torch.zeros, torch.ones, torch.full, torch.arange,
             torch.randn, torch.rand, torch.randint, torch.linspace, torch.eye, torch.frombuffer}
STEP_FILES = ("model_runner.py", "forward_batch.py", "sampler.py", "attention_backend.py", "kv_blocks.py",
              "memory_pool.py", "cuda_graph.py", "step_inputs.py")


class DeviceRecorder(TorchFunctionMode):
    """Records (file:line, function, device) of factory calls from the runtime's step files whose
    device is missing, or differs from `device` without being a (pinned) host staging buffer."""

    def __init__(self, device):
        super().__init__()
        self.device = torch.device(device)
        self.bad = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES:
            frame = sys._getframe(1)
            name = os.path.basename(frame.f_code.co_filename)
            in_runtime = "/runtime/" in frame.f_code.co_filename and name in STEP_FILES
            if in_runtime and not self._ok(func, kwargs):
                call = f"{name}:{frame.f_lineno} {func.__name__}(device={kwargs.get('device')!r})"
                if call not in self.bad:
                    self.bad.append(call)
        return func(*args, **kwargs)

    def _ok(self, func, kwargs) -> bool:
        if func is torch.frombuffer:
            return True            # wraps host bytes by definition (the disk tier's payloads)
        device = kwargs.get("device")
        if device is None:
            return False
        staging = torch.device(device).type == "cpu" and "pin_memory" in kwargs
        return torch.device(device) == self.device or staging


@pytest.fixture(scope="module")
def model_path(tiny_model):
    return str(tiny_model("llama"))


def _req(rid, prompt, slots, row, **params):
    sp = SamplingParams.from_dict({"max_new_tokens": 8, **params})
    req = Req(rid, prompt, sp, return_logprob=True, top_logprobs_num=3)
    req.kv_slots, req.row, req.table_len = list(slots), row, 0
    return req


class OneTokenGrammar:
    """A grammar that allows tokens 5..9 only, never terminates, forces nothing; accepts tokens 5..9."""

    def fill_bitmask(self, bitmask, row):
        bitmask[row] = 0
        bitmask[row, 0] = sum(1 << t for t in range(5, 10))

    def accept_token(self, token):
        return 5 <= token < 10

    def is_terminated(self):
        return False

    def rollback(self, n):
        pass

    def find_jump_forward_string(self):
        return ""


def _step_plan():
    """A prefill with input logprobs, then a decode step: penalties, bias, seed, grammar and a draft."""
    a = _req("a", [3, 4, 5, 6, 7, 8], range(0, 6), 0, temperature=0.8, seed=7, frequency_penalty=0.5,
             presence_penalty=0.2, repetition_penalty=1.3, logit_bias={"11": 2.0}, min_new_tokens=4)
    b = _req("b", [9, 10, 11, 12], range(10, 14), 1, temperature=0.0)
    b.grammar = OneTokenGrammar()
    prefill = StepPlan([StepEntry(a, 0, 6, True, logprob_positions=[0, 1, 2, 3, 4]),
                        StepEntry(b, 0, 4, True, logprob_positions=[1, 2])])
    return a, b, prefill


def _decode_plan(a, b, tok_a, tok_b):
    a.fill_ids.append(tok_a)
    b.fill_ids.append(tok_b)
    a.kv_slots += [6, 7, 8]          # its new token and a 2-token draft
    b.kv_slots += [14]
    return StepPlan([StepEntry(a, 6, 3, True, draft=[20, 21]), StepEntry(b, 4, 1, True)])


def test_step_tensors_are_made_on_the_runners_device(model_path):
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=64, num_rows=4, attention_backend="torch")
    a, b, prefill = _step_plan()
    recorder = DeviceRecorder(runner.device)
    with recorder:
        first = runner.forward_step(StepBuilder(runner.vocab_size).build(prefill))
        second = runner.forward_step(StepBuilder(runner.vocab_size).build(
            _decode_plan(a, b, first[0].next_token, first[1].next_token)))
        blocks = runner.read_kv([0, 1, 2, 3], 2)                 # the disk tier's copies, both ways
        runner.write_kv([30, 31, 40, 42], blocks)
    assert recorder.bad == [], "tensors made without the runner's device:\n" + "\n".join(recorder.bad)
    # the step really exercised what it claims: logprobs in and out with top-k, the grammar, the draft
    assert len(first[0].input_logprobs) == 5 and first[0].output_top and len(first[0].output_top) == 3
    assert 5 <= first[1].next_token < 10 and 5 <= second[1].next_token < 10
    assert second[0].next_tokens and runner.last_mask_seconds is not None
    assert torch.equal(runner.kv_pool.k_buffers[1][[30, 31, 40, 42]], runner.kv_pool.k_buffers[1][:4])


def test_padded_decode_tensors_are_made_on_the_runners_device(model_path):
    """The CUDA-graph path's static buffers (run eagerly here) and a decode step through them."""
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=64, num_rows=4)
    a, b, prefill = _step_plan()
    first = runner.forward_step(StepBuilder(runner.vocab_size).build(prefill))
    b.fill_ids.append(first[1].next_token)
    b.kv_slots.append(14)
    recorder = DeviceRecorder(runner.device)
    with recorder:
        runner.use_padded_decode(4, capture=False)
        out = runner.forward_step(StepBuilder(runner.vocab_size).build(StepPlan([StepEntry(b, 4, 1, True)])))
    assert recorder.bad == [], "tensors made without the runner's device:\n" + "\n".join(recorder.bad)
    assert 5 <= out[0].next_token < 10
    assert runner.decode_graphs.input_ids[0] == b.fill_ids[-1]   # the step ran through the static buffers


def test_recorder_catches_a_factory_without_device():
    """The oracle itself: a CPU index tensor made in a step file is reported."""
    recorder = DeviceRecorder("cpu")
    code = compile("torch.tensor([1, 2])", "/src/radixlm/runtime/model_runner.py", "eval")
    with recorder:
        eval(code, {"torch": torch})
        torch.tensor([1])          # not a step file: not the runner's business
    assert recorder.bad == ["model_runner.py:1 tensor(device=None)"]
