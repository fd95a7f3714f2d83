"""Offline throughput: radixlm Engine against HF transformers `generate`, in one run.

The same seeded requests (random token-id prompts of 128 to 512 tokens, 128 new tokens each,
greedy, ignore_eos) go through radixlm (all submitted at once; continuous batching) and through
HF transformers in static batches of 8 (left padding + attention mask, min_new_tokens =
max_new_tokens so every sequence produces exactly the same number of tokens).  The HF peer
always runs in float32, the baseline of every ratio; --hf-bf16 adds HF in bfloat16.  Prints a
table and writes JSON (--out).

On a GPU (issue 34): --shape llama-3.1-8b writes a Llama-3.1-8B-shaped config folder with the tokenizer of
--model (SmolLM2's: 49,152 ids) and loads it with random weights made on the device (--load-format dummy);
--workload sglang-ci runs SGLang's CI offline workload (random prompts, input length uniform in 1..4,096,
output length uniform in 1..2,048, 500 prompts; --num-prompts N takes the first N of that seeded set and
the JSON says it was cut); --batch-1 first decodes one request alone (ms per output token).
Issue 37: --quantization fp8 / --kv-cache-dtype fp8_e4m3 run radixlm with FP8 weights / an FP8 KV cache;
--fp8-compare runs each radixlm dtype twice, plain and then with both, and reports the FP8 run's output
tok/s over the plain one's (target 1.4x on the 8B shape) and how far their greedy outputs agree.

    python bench/offline_throughput.py [--dtype float32,bfloat16] [--quick] [--out offline.json]
    python bench/offline_throughput.py --model SMOLLM2_DIR --shape llama-3.1-8b --dtype bfloat16 --skip-hf \
        --batch-1 --workload sglang-ci --num-prompts 100 --out llama8b.json
    python bench/offline_throughput.py --model SMOLLM2_DIR --shape llama-3.1-8b --dtype bfloat16 --skip-hf \
        --fp8-compare --num-requests 32 --cuda-graph-max-bs 32 --out fp8.json
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import MODEL, machine_info, phase, print_table, random_prompts, write_json

# bench/kernels.py would shadow Hugging Face's `kernels` package, which transformers imports where it is installed
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

# radixlm output tok/s over HF float32 (issue 18): float32 3.5x on an AMX machine, 3x on one without AMX
# (AVX2); bfloat16 15x where AMX exists (without it bf16 is not the fast path and has no target)
TARGETS = {"float32": 3.5, "bfloat16": 15.0}
TARGETS_NO_AMX = {"float32": 3.0}
# issue 34, on an H200: output tok/s of the default workload (SmolLM2 shape) and of SGLang's CI workload
# (Llama-3.1-8B shape); ms per output token at batch 1 (8B shape)
GPU_TARGETS = {"default": 19000.0, "sglang-ci": 6000.0, "batch-1 ms": 4.9}
FP8_TARGET = 1.4   # issue 37: output tok/s with FP8 weights (and KV) over bf16, Llama-3.1-8B shape, on an H200
FP8 = {"quantization": "fp8", "kv_cache_dtype": "fp8_e4m3"}
SGLANG_CI = {"num_prompts": 500, "max_input": 4096, "max_output": 2048}
BATCH_1 = {"input": 128, "output": 512, "recompute": 2000}   # recompute: prompt tokens of the prefill probe
# Llama-3.1-8B's shape (config.json of meta-llama/Llama-3.1-8B); vocabulary and special ids stay the tokenizer's
SHAPES = {"llama-3.1-8b": {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "attention_bias": False,
    "mlp_bias": False, "hidden_act": "silu", "initializer_range": 0.02,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json", "vocab.json", "merges.txt")


def write_shape(shape: str, tokenizer_dir, out_dir) -> Path:
    """A config-only model folder: SHAPES[shape] with the vocabulary and special ids of tokenizer_dir's
    config.json, and its tokenizer files copied (load it with --load-format dummy)."""
    from radixlm.runtime.models.loader import resolve_model_path

    src, out = resolve_model_path(str(tokenizer_dir)), Path(out_dir)
    base = json.loads((src / "config.json").read_text())
    keep = {k: base[k] for k in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id") if k in base}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({**SHAPES[shape], **keep, "dtype": "bfloat16"}, indent=2))
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    return out


def sglang_ci_requests(num, vocab_size, seed, low=100):
    """The first num of SGLang's CI offline set (SGLANG_CI["num_prompts"] seeded draws): random token ids,
    input length uniform in 1..max_input, output length uniform in 1..max_output -> (prompts, max_new_tokens)."""
    rng = random.Random(seed)
    prompts, outs = [], []
    for _ in range(num):
        n_in, n_out = rng.randint(1, SGLANG_CI["max_input"]), rng.randint(1, SGLANG_CI["max_output"])
        prompts.append([rng.randrange(low, vocab_size) for _ in range(n_in)])
        outs.append(n_out)
    return prompts, outs


def run_radixlm(prompts, dtype, max_new_tokens, max_total_tokens, progress_s, disable_cuda_graph=False, model=MODEL,
                load_format=None, batch_1=None, deadline=None, engine_kwargs=None, workload_s=None):
    """max_new_tokens: one number, or one per prompt.  -> ([record], outputs of the workload, None when cut).
    batch_1: a callable that gets, first, the record of one request decoded alone (BATCH_1 sizes; ms per output
    token), so it is kept even when the workload is cut short.  deadline (time.monotonic()): the workload stops
    there and the record says how far it got ("partial": decode tokens per second while it ran).  engine_kwargs:
    more Engine options (quantization, kv_cache_dtype, cuda_graph_max_bs), kept in the record.  workload_s: the
    workload also stops this many seconds after it starts (the same cut for every run of a comparison)."""
    from radixlm import Engine

    if load_format:  # the scheduler child reads it from the environment it inherits
        os.environ["RADIXLM_LOAD_FORMAT"] = load_format
    per_req = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
    params = [{"max_new_tokens": n, "temperature": 0, "ignore_eos": True} for n in per_req]
    engine_kwargs = engine_kwargs or {}
    base = {"system": "radixlm", "dtype": dtype, "disable_cuda_graph": disable_cuda_graph,
            "load_format": load_format or "auto", **engine_kwargs}
    start = {}
    with phase(f"radixlm {dtype}: start engine {engine_kwargs or ''}", start):
        engine = Engine(model=model, dtype=dtype, max_total_tokens=max_total_tokens, log_level="warning",
                        disable_cuda_graph=disable_cuda_graph, **engine_kwargs)
    try:
        with phase(f"radixlm {dtype}: warm-up"):
            engine.generate(input_ids=[p[:64] for p in prompts[:2]], sampling_params={**params[0], "max_new_tokens": 4})
        if batch_1 is not None:
            batch_1(_batch_1(engine, dtype, {**base, "engine_start_s": start["seconds"]}))
        record = {**base, "workload": "requests", "engine_start_s": start["seconds"]}
        before = engine.get_server_info()
        done, box = threading.Event(), {}
        watcher = threading.Thread(target=_watch, args=(engine, before, len(prompts), done, progress_s), daemon=True)
        worker = threading.Thread(target=_generate_into, args=(engine, prompts, params, box), daemon=True)
        print(f"[{time.strftime('%H:%M:%S')}] radixlm {dtype}: {len(prompts)} requests ...", flush=True)
        t0 = time.perf_counter()
        watcher.start()
        worker.start()
        stop = min((t for t in (deadline, workload_s and time.monotonic() + workload_s) if t), default=None)
        try:
            worker.join(None if stop is None else max(0.0, stop - time.monotonic()))
            cut = worker.is_alive()
        finally:
            done.set()
            watcher.join()
        record["wall_s"] = time.perf_counter() - t0
        after = engine.get_server_info()
    finally:
        engine.shutdown()
    if not cut and "error" in box:
        raise box["error"]
    record["requests"] = len(prompts)
    record["input_tokens"] = sum(map(len, prompts))
    outs = None if cut else box["outs"]
    if cut:   # at the deadline: what it did until then
        record.update(partial=True, finished_requests=after["finished"] - before["finished"],
                      output_tokens=after["decode_tokens"] - before["decode_tokens"], output_tokens_are="decode tokens")
        print(f"    deadline reached: {record['finished_requests']}/{len(prompts)} requests finished, "
              f"{record['output_tokens']} decode tokens in {record['wall_s']:.1f} s", flush=True)
    else:
        record["output_tokens"] = sum(o["meta_info"]["completion_tokens"] for o in outs)
        print(f"[{time.strftime('%H:%M:%S')}] radixlm {dtype}: {len(prompts)} requests: {record['wall_s']:.1f} s",
              flush=True)
    record["forward_s"] = after["forward_seconds"] - before["forward_seconds"]
    record["steps"] = after["steps"] - before["steps"]
    record["ms_per_step"] = 1e3 * record["wall_s"] / max(record["steps"], 1)
    record["kv_tokens"] = after["max_total_num_tokens"]
    # where a step's time goes: host launch work, waiting for the device, steps launched under another in flight
    for key in ("launch_seconds", "collect_wait_seconds", "launched_steps", "overlapped_steps"):
        if key in after:
            record[key] = after[key] - before[key]
    record["server_info"] = {k: after[k] for k in ("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs",
                                                   "device_defaults") if k in after}
    return [record], None if outs is None else [o["output_ids"] for o in outs]


def _generate_into(engine, prompts, params, box) -> None:
    try:
        box["outs"] = engine.generate(input_ids=prompts, sampling_params=params)
    except BaseException as exc:   # re-raised by the caller, unless the deadline came first
        box["error"] = exc


def _batch_1(engine, dtype, base) -> dict:
    """One request alone, BATCH_1["input"] random ids and BATCH_1["output"] new tokens, after one of 8 tokens
    (which compiles and warms its shapes): ms per output token over the whole request, and over its decode
    alone (the 1-token prefill's time subtracted).  Then the time to first token of fresh BATCH_1["recompute"]-token
    prompts (median of 3 after one): what recomputing a prefix of that length costs, the host tier's yardstick."""
    rng = random.Random(1)
    ids = [rng.randrange(100, 32000) for _ in range(BATCH_1["input"])]
    p = {"temperature": 0, "ignore_eos": True}
    engine.generate(input_ids=ids[::-1], sampling_params={**p, "max_new_tokens": 8})
    t0 = time.perf_counter()
    engine.generate(input_ids=ids[1:] + ids[:1], sampling_params={**p, "max_new_tokens": 1})
    prefill_s = time.perf_counter() - t0
    record = {**base, "workload": "batch-1", "input_tokens": len(ids)}
    with phase(f"radixlm {dtype}: batch 1, {BATCH_1['output']} tokens", record):
        out = engine.generate(input_ids=ids, sampling_params={**p, "max_new_tokens": BATCH_1["output"]})
    record["wall_s"] = record.pop("seconds")
    record["output_tokens"] = n = out["meta_info"]["completion_tokens"]
    record["ms_per_token"] = 1e3 * record["wall_s"] / n
    record["decode_ms_per_token"] = 1e3 * max(record["wall_s"] - prefill_s, 0.0) / max(n - 1, 1)
    record["target_ms_per_token"] = GPU_TARGETS["batch-1 ms"]
    times = []
    for _ in range(4):
        fresh = [rng.randrange(100, 32000) for _ in range(BATCH_1["recompute"])]
        t0 = time.perf_counter()
        engine.generate(input_ids=fresh, sampling_params={**p, "max_new_tokens": 1})
        times.append(time.perf_counter() - t0)
    record["recompute_tokens"] = BATCH_1["recompute"]
    record["recompute_ms"] = 1e3 * sorted(times[1:])[1]
    print(f"    batch 1: {record['ms_per_token']:.2f} ms per output token "
          f"({record['decode_ms_per_token']:.2f} ms in decode); a {BATCH_1['recompute']}-token prompt's first token "
          f"in {record['recompute_ms']:.1f} ms", flush=True)
    return record


def _watch(engine, before, total, done, every):
    """A line every `every` seconds: finished requests and decode tokens so far."""
    while not done.wait(every):
        try:
            info = engine.get_server_info()
        except Exception as exc:  # the scheduler answers between steps; a long step may time it out
            print(f"    (progress unavailable: {type(exc).__name__})", flush=True)
            continue
        print(f"    {info['finished'] - before['finished']}/{total} finished, "
              f"{info['decode_tokens'] - before['decode_tokens']} decode tokens, "
              f"{info['steps'] - before['steps']} steps", flush=True)


def run_hf(prompts, dtype, max_new_tokens, batch_size, model_name=MODEL, load_format=None):
    """HF transformers `generate` on the GPU where there is one, else on every core; load_format dummy: the
    config's random initialisation (no weight files)."""
    import torch
    from tqdm import tqdm
    from transformers import AutoConfig, AutoModelForCausalLM

    from radixlm.runtime.models.loader import resolve_model_path

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(os.cpu_count())
    record = {"system": f"hf transformers (batch {batch_size})", "dtype": dtype, "device": device}
    path = str(resolve_model_path(model_name))
    with phase(f"hf {dtype}: load"):
        if load_format == "dummy":
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=getattr(torch, dtype))
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
        model = model.to(device).eval()
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else model.config.eos_token_id
    batches = [prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)]

    def generate(batch, n):
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=device)  # [b, width], left padded
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)  # [b, width]
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=pad)  # [b, width + n]
        return out[:, width:].tolist()

    outputs = []
    with torch.inference_mode():
        with phase(f"hf {dtype}: warm-up"):
            generate([p[:64] for p in prompts[:2]], 4)
        with phase(f"hf {dtype}: {len(prompts)} requests", record):
            for batch in tqdm(batches, desc=f"hf {dtype} batches", mininterval=5):
                outputs.extend(generate(batch, max_new_tokens))
    record["wall_s"] = record.pop("seconds")
    record["output_tokens"] = sum(len(o) for o in outputs)
    return record, outputs


def agreement(a, b) -> dict:
    """How far two runs' greedy outputs agree: identical sequences, and the mean fraction of each
    sequence before the first differing token."""
    same = sum(x == y for x, y in zip(a, b))
    prefix = []
    for x, y in zip(a, b):
        n = next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), min(len(x), len(y)))
        prefix.append(n / max(len(x), 1))
    return {"identical": same, "of": len(a), "mean_common_prefix": sum(prefix) / max(len(prefix), 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL, help="model folder, .gguf or alias (default: %(default)s); with "
                    "--shape, where the tokenizer comes from")
    ap.add_argument("--dtype", default="float32,bfloat16", help="radixlm dtypes, comma separated")
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--min-prompt", type=int, default=128)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--hf-batch-size", type=int, default=8)
    ap.add_argument("--hf-bf16", action="store_true", help="also run HF transformers in bfloat16")
    ap.add_argument("--hf-dtype", default="float32", help="HF transformers dtypes, comma separated; the first is "
                    "the baseline (default: %(default)s)")
    ap.add_argument("--max-total-tokens", type=int, default=65536,
                    help="radixlm KV cache size in tokens (0: the engine's own sizing)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 requests, 32 new tokens")
    ap.add_argument("--progress-s", type=float, default=30.0, help="seconds between radixlm progress lines")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--disable-cuda-graph", action="store_true", help="radixlm decodes eagerly on CUDA")
    ap.add_argument("--skip-hf", action="store_true", help="no HF transformers peer (no ratios)")
    ap.add_argument("--skip-radixlm", action="store_true", help="only the HF transformers peer")
    ap.add_argument("--load-format", choices=("auto", "safetensors", "dummy"), default=None,
                    help="dummy: random weights made on the device (default: auto; dummy with --shape)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default=None,
                    help="a config-only folder of this shape with --model's tokenizer, random weights")
    ap.add_argument("--shape-dir", default=None, help="where --shape writes its folder (default: a temporary one)")
    ap.add_argument("--workload", choices=("default", "sglang-ci"), default="default",
                    help="sglang-ci: SGLang's CI offline workload (see above)")
    ap.add_argument("--num-prompts", type=int, default=SGLANG_CI["num_prompts"],
                    help="with --workload sglang-ci: the first N of its prompts (default: all %(default)s)")
    ap.add_argument("--batch-1", action="store_true", help="first time one request decoded alone")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="stop the radixlm workload this many seconds after start and report how far it got")
    ap.add_argument("--quantization", choices=("fp8",), default=None, help="radixlm with FP8 weights")
    ap.add_argument("--kv-cache-dtype", choices=("auto", "fp8_e4m3"), default="auto", help="radixlm's KV cache dtype")
    ap.add_argument("--fp8-compare", action="store_true",
                    help="each radixlm dtype plain, then with --quantization fp8 --kv-cache-dtype fp8_e4m3")
    ap.add_argument("--cuda-graph-max-bs", type=int, default=None, help="radixlm's largest CUDA-graph batch")
    ap.add_argument("--workload-deadline-s", type=float, default=None,
                    help="stop each radixlm workload this many seconds after it starts (runs compared alike)")
    args = ap.parse_args()
    deadline = None if args.deadline_s is None else time.monotonic() + args.deadline_s
    if args.quick:
        args.num_requests, args.max_new_tokens = min(args.num_requests, 16), min(args.max_new_tokens, 32)
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    hf_dtypes = [d.strip() for d in args.hf_dtype.split(",") if d.strip()] + (["bfloat16"] if args.hf_bf16 else [])
    for d in dtypes + hf_dtypes:
        if d not in TARGETS:
            ap.error(f"unknown dtype {d!r}: use float32 and/or bfloat16")
    if args.shape:
        if args.load_format not in (None, "dummy"):
            ap.error("--shape has no weights: it loads with --load-format dummy")
        args.load_format = "dummy"
        shape_dir = args.shape_dir or tempfile.mkdtemp(prefix=f"radixlm-{args.shape}-")
        args.model = str(write_shape(args.shape, args.model, shape_dir))
        print(f"{args.shape}: config-only folder {args.model} (random weights on the device)")

    machine = machine_info()
    print(f"machine: {machine.get('cpu')}, {machine['cores']} cores, bf16 flags {machine.get('bf16_flags')}, "
          f"load {machine.get('loadavg_1_5_15')}")
    vocab = _vocab_size(args.model)
    workload = {"name": args.workload}
    if args.workload == "sglang-ci":
        prompts, new_tokens = sglang_ci_requests(args.num_prompts, vocab, args.seed)
        workload.update(SGLANG_CI, num_prompts=len(prompts), full_set=SGLANG_CI["num_prompts"],
                        cut=len(prompts) < SGLANG_CI["num_prompts"], output_tokens_asked=sum(new_tokens))
        print(f"SGLang CI workload: {len(prompts)} of its {SGLANG_CI['num_prompts']} prompts"
              f"{' (cut to fit the time limit)' if workload['cut'] else ''}, {sum(map(len, prompts))} input tokens, "
              f"{sum(new_tokens)} output tokens asked")
    else:
        prompts = random_prompts(args.num_requests, args.min_prompt, args.max_prompt, vocab, args.seed)
        new_tokens = args.max_new_tokens
        print(f"{len(prompts)} requests, prompts {min(map(len, prompts))}..{max(map(len, prompts))} tokens "
              f"({sum(map(len, prompts))} in all), {args.max_new_tokens} new tokens each")

    runs, outputs = [], {}
    result = {"bench": "offline_throughput", "config": vars(args), "workload": workload, "machine": machine,
              "runs": runs}

    def finished(recs, outs=None, key=None):
        """Keep a run and rewrite the JSON, so a run killed later still leaves what it measured."""
        for rec in recs:
            rec["load_1m_after"] = round(os.getloadavg()[0], 2)
            runs.append(rec)
        if key is not None and outs is not None:
            outputs[key] = outs
        summarize(runs, args.workload)
        result["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
        result["agreement"] = {f"radixlm {d} vs hf {d}": agreement(outputs[("radixlm", d)], outputs[("hf", d)])
                               for d in dtypes if ("radixlm", d) in outputs and ("hf", d) in outputs}
        result["agreement"].update({f"radixlm {d} fp8 vs plain": agreement(outputs[("radixlm", d, "fp8")],
                                                                             outputs[("radixlm", d)])
                                    for d in dtypes if ("radixlm", d) in outputs and ("radixlm", d, "fp8") in outputs})
        write_json(args.out, result)

    for dtype in [] if args.skip_hf else hf_dtypes:  # the baseline first
        rec, outs = run_hf(prompts, dtype, new_tokens if isinstance(new_tokens, int) else max(new_tokens),
                           args.hf_batch_size, args.model, args.load_format)
        finished([rec], outs, ("hf", dtype))
    for dtype, variant in [] if args.skip_radixlm else radixlm_variants(args, dtypes):
        kwargs = {**variant, **({"cuda_graph_max_bs": args.cuda_graph_max_bs} if args.cuda_graph_max_bs else {})}
        finished(*run_radixlm(prompts, dtype, new_tokens, args.max_total_tokens or None, args.progress_s,
                              args.disable_cuda_graph, args.model, args.load_format,
                              (lambda rec: finished([rec])) if args.batch_1 else None, deadline, kwargs,
                              args.workload_deadline_s),
                 ("radixlm", dtype) + (("fp8",) if variant else ()))

    print()
    print_table(runs, [("system", "system", "{}"), ("dtype", "dtype", "{}"), ("workload", "workload", "{}"),
                       ("wall_s", "wall s", "{:.1f}"), ("output_tokens", "out tokens", "{}"),
                       ("output_tok_s", "out tok/s", "{:.1f}"), ("ms_per_token", "ms/token", "{:.2f}"),
                       ("quantization", "weights", "{}"), ("kv_cache_dtype", "kv", "{}"),
                       ("ratio_vs_hf", "x hf", "{:.2f}"), ("target", "target", "{:.1f}"),
                       ("fp8_speedup", "x plain", "{:.2f}"),
                       ("forward_share", "fwd share", "{:.0%}")])
    for name, c in result["agreement"].items():
        print(f"{name}: {c['identical']}/{c['of']} identical outputs, "
              f"mean common prefix {c['mean_common_prefix']:.0%}")


def radixlm_variants(args, dtypes) -> list:
    """[(dtype, Engine options)]: each dtype with --quantization / --kv-cache-dtype as given, or with
    --fp8-compare plain and then with FP8 weights and KV."""
    given = {k: v for k, v in (("quantization", args.quantization), ("kv_cache_dtype", args.kv_cache_dtype))
             if v not in (None, "auto")}
    if args.fp8_compare:
        return [(d, v) for d in dtypes for v in ({}, FP8)]
    return [(d, given) for d in dtypes]


def _vocab_size(model) -> int:
    """The model's vocabulary size (config.json), 49,152 (SmolLM2's) where it cannot be read."""
    try:
        from radixlm.runtime.model_paths import resolve_model_path
        return int(json.loads((resolve_model_path(str(model)) / "config.json").read_text())["vocab_size"])
    except (OSError, KeyError, ValueError):
        return 49152


def summarize(runs, workload="default") -> None:
    """Adds tokens/s, the ratio to the first HF run (the baseline: float32 unless --hf-dtype says otherwise;
    ratio_vs_hf_fp32 too when it is float32) and, for radixlm, the target (CPU: the ratio to HF float32; CUDA:
    GPU_TARGETS' tok/s) and forward share."""
    import torch

    base = next((r for r in runs if r["system"].startswith("hf")), None)
    from radixlm.kernels.cpu_native import cpu_features
    cuda = torch.cuda.is_available()
    targets = TARGETS if "amx_bf16" in cpu_features() else TARGETS_NO_AMX
    for r in runs:
        r["output_tok_s"] = r["output_tokens"] / r["wall_s"]
    for r in runs:
        plain = next((p for p in runs if p["system"] == "radixlm" and p["dtype"] == r["dtype"]
                      and p.get("workload") == r.get("workload") and not p.get("quantization")
                      and p.get("kv_cache_dtype", "auto") == "auto"), None)
        if r["system"] == "radixlm" and r.get("quantization") and plain is not None:
            r["fp8_speedup"] = r["output_tok_s"] / plain["output_tok_s"]
            r["fp8_target"] = FP8_TARGET
        if base is not None:
            r["ratio_vs_hf"] = r["output_tok_s"] / (base["output_tokens"] / base["wall_s"])
            r["hf_baseline"] = f"{base['system']} {base['dtype']}"
            if base["dtype"] == "float32":
                r["ratio_vs_hf_fp32"] = r["ratio_vs_hf"]
        if r["system"] == "radixlm" and r.get("workload") != "batch-1":
            r["forward_share"] = r["forward_s"] / r["wall_s"]
            if cuda:
                r["target_tok_s"] = GPU_TARGETS.get(workload)
                if r["target_tok_s"]:
                    r["meets_target"] = r["output_tok_s"] >= r["target_tok_s"]
                continue
            r["target"] = targets.get(r["dtype"])
            if base is not None and base["dtype"] == "float32" and r["target"] is not None:
                r["meets_target"] = r["ratio_vs_hf_fp32"] >= r["target"]


if __name__ == "__main__":
    main()
