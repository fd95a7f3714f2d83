"""The host's cost of one decode step: the real Scheduler and ModelRunner loop around a model whose
forward costs nothing, at decode batches of 1, 64, 256 and 1,024, without and with a JSON schema on
every request (through the real xgrammar backend).

The runner is built on a tiny Llama folder (one layer, written here) and its `model` is then replaced
by NullCostModel: forward(fb) returns a preallocated hidden state and compute_logits(h) the first
rows of a fixed random [max_rows, V] table, so each step costs only what the host does around the
model (planning, input tensors, sampling from fixed logits, grammar masks, request updates, output
messages encoded as the scheduler process encodes them). The schema is one string field, and the
table ranks every token that contains a quote or a backslash last, so greedy picks stay inside the
string and every request decodes to its max_new_tokens: the measured steps are steady decode.

`--device-ms X` gives each forward X ms of a virtual device: the forward returns at once and the step's
collect sleeps until the device would be done, as a GPU's stream runs behind the host (sampling is taken as
free), so the figures are then wall milliseconds per step with what the host does beside the device hidden.

Reported per batch and mode: host milliseconds per step, median and p90 over the measured steps, and the
share of those steps launched while the step before was still in flight (`--overlap`; a grammar step is
collected between its forward and its sampling, since its masks need the tokens the step before sampled).
`--vocab tiny` (default): a 512-token byte-level BPE, so sampling over the vocabulary (device work
on a GPU) costs next to nothing; `--vocab smollm2`: the embedded model's 49,152-token tokenizer (the
grammar masks' real size; the [B, V] argmax then runs on the CPU too).

    .venv/bin/python bench/step_host.py --out bench/results/step_host.json
    .venv/bin/python bench/step_host.py --batches 1,64 --steps 40 --vocab smollm2
    .venv/bin/python bench/step_host.py --modes json --batches 64,256 --device-ms 4
"""

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from _common import machine_info, print_table, write_json  # noqa: E402

# bench/kernels.py would shadow Hugging Face's `kernels`, which transformers' Llama config imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
          "additionalProperties": False}
PROMPT_LEN = 8
_CORPUS = ["The quick brown fox jumps over the lazy dog.", "Hello, world! How are you today?",
           '{"name": "Alice", "age": 30, "tags": ["a", "b"]}', "def add(a, b):\n    return a + b\n",
           "0123456789 +-*/=<>()[]{} :;,.'\""]


def _tokenizer(vocab: str):
    if vocab == "smollm2":
        from transformers import AutoTokenizer

        from radixlm.runtime.model_paths import resolve_model_path
        return AutoTokenizer.from_pretrained(str(resolve_model_path()))
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, show_progress=False, special_tokens=["<|endoftext|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def make_model_folder(folder: str, vocab: str = "tiny", context: int = 2048) -> str:
    """A one-layer random Llama with the chosen tokenizer, saved as a loadable folder."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = _tokenizer(vocab)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=context,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=None)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).float().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def fixed_logits(tokenizer, vocab_size: int, rows: int, seed: int = 0):
    """[rows, V] float32, random per row; tokens whose text holds a quote or a backslash ranked last
    (so a JSON string, once open, never closes) and ids past the tokenizer's vocabulary never picked."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(rows, vocab_size, generator=gen)                  # [R, V]
    texts = tokenizer.batch_decode([[i] for i in range(min(len(tokenizer), vocab_size))])
    last = [i for i, t in enumerate(texts) if '"' in t or "\\" in t]
    table[:, last] -= 100.0
    table[:, len(texts):] = -1e4
    return table


class VirtualDevice:
    """A device that runs each forward for `ms` milliseconds behind the host, one after another: run() queues
    one, wait() sleeps until the oldest forward not yet waited for is done (a step's collect waits for its
    own forward, not for one launched after it)."""

    def __init__(self, ms: float):
        self.seconds, self.busy_until = ms / 1e3, 0.0
        self.done_at = collections.deque()

    def run(self) -> None:
        self.busy_until = max(time.perf_counter(), self.busy_until) + self.seconds
        self.done_at.append(self.busy_until)

    def wait(self) -> None:
        left = self.done_at.popleft() - time.perf_counter()
        if left > 0:
            time.sleep(left)


class NullCostModel:
    """Stands in for ModelRunner.model with the interface the runner calls: forward(fb) -> hidden
    [T, H] (a preallocated zero tensor, sliced), compute_logits(hidden [N, H]) -> [N, V] float32 (the
    first N rows of a fixed table, so row i of every step gets the same greedy pick); attn_backend
    and native_decode are the replaced model's."""

    def __init__(self, model, logits, hidden_size: int, max_tokens: int = 8192, device=None):
        import torch

        self.device = device                                              # a VirtualDevice, or None
        self.attn_backend = getattr(model, "attn_backend", None)
        self.native_decode = None
        self.logits = logits                                              # [R, V]
        self.hidden = torch.zeros(max_tokens, hidden_size)                # [T_max, H]
        self.forwards = 0

    def forward(self, fb):
        import torch

        self.forwards += 1
        if self.device is not None:
            self.device.run()
        t = fb.input_ids.shape[0]
        if t > self.hidden.shape[0]:
            self.hidden = torch.zeros(t, self.hidden.shape[1])            # [T, H]
        return self.hidden[:t]                                            # [T, H]

    def compute_logits(self, hidden):
        n = hidden.shape[0]
        if n > self.logits.shape[0]:
            raise ValueError(f"{n} logits rows asked of a fixed table of {self.logits.shape[0]}")
        return self.logits[:n]                                            # [N, V]

    def __call__(self, *args, **kwargs):
        raise TypeError("NullCostModel is called through forward() and compute_logits() only")


class EncodingOutbox:
    """Keeps every message and encodes it as the scheduler process does before its ZMQ push."""

    def __init__(self):
        from radixlm.runtime import io_struct as io

        self.encode, self.msgs = io.encode, []

    def send(self, msg):
        self.encode(msg)
        self.msgs.append(msg)


class EmptyInbox:
    def recv(self, block=False):
        return []


def build(folder: str, batch: int, grammar: bool, max_new_tokens: int, seed: int = 0, overlap: bool = False,
          device_ms: float = 0.0):
    """-> (scheduler, null model, fixed logits): a real Scheduler and ModelRunner (CPU, float32) on the
    folder's tiny model, the model replaced by NullCostModel, `batch` requests submitted.  overlap: the
    scheduler's overlap_schedule (left to its default when False); device_ms: each forward's time on a
    VirtualDevice, which the runner's collect waits for (0: none)."""
    from transformers import AutoTokenizer

    from radixlm.runtime import io_struct as io
    from radixlm.runtime.runner.model_runner import ModelRunner
    from radixlm.runtime.scheduler.config import SchedulerConfig
    from radixlm.runtime.scheduler.process import freeze_startup_objects
    from radixlm.runtime.scheduler.scheduler import Scheduler

    tokenizer = AutoTokenizer.from_pretrained(folder)
    per_req = PROMPT_LEN + max_new_tokens + 16
    runner = ModelRunner(folder, dtype="float32", max_total_tokens=batch * per_req + 256, num_rows=batch + 8,
                         device="cpu")
    logits = fixed_logits(tokenizer, runner.vocab_size, max(batch, 64), seed)
    hidden_size = runner.config.hidden_size
    device = VirtualDevice(device_ms) if device_ms > 0 else None
    runner.model = NullCostModel(runner.model, logits, hidden_size, device=device)
    if device is not None:
        collect = runner.collect
        runner.collect = lambda step: (device.wait(), collect(step))[1]
    config = SchedulerConfig(max_running_requests=batch, grammar_backend="xgrammar" if grammar else "none",
                             grammar_timeout=60.0, **({"overlap_schedule": True} if overlap else {}))
    sched = Scheduler(config, runner, tokenizer if grammar else None, EmptyInbox(), EncodingOutbox())
    freeze_startup_objects()   # as the scheduler process does once it is built (runtime/scheduler/process.py)
    params = {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}
    if grammar:
        params["json_schema"] = json.dumps(SCHEMA)
    low = min(100, runner.vocab_size // 4)
    for i in range(batch):
        ids = [low + (i * 7 + k * 13) % (len(tokenizer) - low) for k in range(PROMPT_LEN)]
        sched.handlers[io.TokenizedGenerateReq](io.TokenizedGenerateReq(f"r{i}", ids, dict(params), stream=True))
    return sched, runner.model, logits


def start_decoding(sched, batch: int, timeout_s: float = 300.0) -> int:
    """Steps until every request is running with its prompt computed; -> steps taken."""
    deadline, steps = time.monotonic() + timeout_s, 0
    while len(sched.running) < batch or not all(r.prefill_done for r in sched.running):
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(sched.running)} of {batch} requests started within {timeout_s} s")
        if sched.has_work():
            sched.step()
            steps += 1
        else:
            time.sleep(0.001)
    return steps


def measure(folder: str, batch: int, grammar: bool, steps: int, warmup: int, overlap: bool = False,
            device_ms: float = 0.0) -> dict:
    """Host seconds of each of `steps` decode steps of `batch` requests, after `warmup` steps."""
    sched, model, logits = build(folder, batch, grammar, max_new_tokens=warmup + steps + 24, overlap=overlap,
                                 device_ms=device_ms)
    saved = logits.clone()
    started = time.perf_counter()
    start_decoding(sched, batch)
    for _ in range(warmup):
        sched.step()
    launched, overlapped = sched.stats.launched_steps, sched.stats.overlapped_steps
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        sched.step()
        times.append(time.perf_counter() - t0)
        if len(sched.running) != batch:
            raise RuntimeError(f"a request left the batch during the measured steps ({len(sched.running)} of {batch})")
    total = time.perf_counter() - started
    launched, overlapped = sched.stats.launched_steps - launched, sched.stats.overlapped_steps - overlapped
    if not logits.equal(saved):
        raise RuntimeError("the runner wrote into the null model's logits")
    _close(sched)
    return {"batch": batch, "grammar": grammar, "steps": steps, **summary(times), "forwards": model.forwards,
            "run_s": total, "times_ms": [1e3 * t for t in times], "launched": launched, "overlapped": overlapped}


def summary(times: list) -> dict:
    """Median, p90 and min of step times in seconds, in milliseconds."""
    times = sorted(times)
    p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
    return {"median_ms": 1e3 * statistics.median(times), "p90_ms": 1e3 * p90, "min_ms": 1e3 * times[0]}


def run_outputs(folder: str, batch: int, grammar: bool, max_new_tokens: int) -> tuple:
    """Runs `batch` requests to the end; -> ({rid: tokens}, fixed logits, tokenizer's vocab size)."""
    from radixlm.runtime import io_struct as io

    sched, _, logits = build(folder, batch, grammar, max_new_tokens)
    deadline = time.monotonic() + 120
    while sched.has_work() and time.monotonic() < deadline:
        sched.step()
    _close(sched)
    out: dict = {}
    for msg in sched.outbox.msgs:
        if isinstance(msg, io.BatchTokenOut):
            for i, rid in enumerate(msg.rids):
                out.setdefault(rid, []).extend(msg.new_token_ids[i])
    return out, logits


def _close(sched) -> None:
    if sched.grammar_queue is not None:
        sched.grammar_queue.backend.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,64,256,1024")
    ap.add_argument("--modes", default="plain,json", help="plain (no grammar), json (a JSON schema on every request)")
    ap.add_argument("--steps", type=int, default=60, help="measured decode steps per batch and mode")
    ap.add_argument("--warmup", type=int, default=10, help="decode steps run before the measured ones")
    ap.add_argument("--vocab", choices=("tiny", "smollm2"), default="tiny")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the loop's tensors are small)")
    ap.add_argument("--overlap", action="store_true", help="the scheduler's overlap_schedule on")
    ap.add_argument("--device-ms", type=float, default=0.0,
                    help="each forward's time on a virtual device that runs behind the host (0: none)")
    ap.add_argument("--runs", type=int, default=1,
                    help="rounds over every batch and mode; each cell's figures pool the steps of all rounds")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cells = {(mode, int(b)): [] for mode in args.modes.split(",") for b in args.batches.split(",")}
    with tempfile.TemporaryDirectory() as folder:
        make_model_folder(folder, args.vocab)
        for run in range(args.runs):
            for (mode, batch), runs in cells.items():
                row = measure(folder, batch, mode == "json", args.steps, args.warmup, args.overlap, args.device_ms)
                runs.append(row)
                print(f"round {run + 1}: {mode} batch {batch}: median {row['median_ms']:.3f} ms, "
                      f"p90 {row['p90_ms']:.3f} ms ({row['run_s']:.1f} s)", flush=True)
    results = [{"mode": mode, "batch": batch, "steps": sum(r["steps"] for r in runs),
                **summary([t / 1e3 for r in runs for t in r["times_ms"]]),
                "run_medians_ms": [r["median_ms"] for r in runs],
                "overlapped_share": sum(r["overlapped"] for r in runs) / max(1, sum(r["launched"] for r in runs))}
               for (mode, batch), runs in cells.items()]
    machine = machine_info()
    print(f"{machine.get('lscpu', {}).get('model_name', machine.get('cpu'))}, load {machine.get('loadavg_1_5_15')}, "
          f"vocab {args.vocab}, torch threads {args.threads}, virtual device {args.device_ms} ms a forward")
    print_table(results, [("mode", "mode", "{}"), ("batch", "batch", "{}"),
                          ("median_ms", "ms/step (median)", "{:.3f}"),
                          ("p90_ms", "p90", "{:.3f}"), ("min_ms", "min", "{:.3f}"),
                          ("overlapped_share", "steps overlapped", "{:.0%}")])
    write_json(args.out, {"machine": machine, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
