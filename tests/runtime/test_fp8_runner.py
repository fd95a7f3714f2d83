"""--quantization fp8 and --kv-cache-dtype fp8_e4m3 through the runner, the sizing and the options.

The generation oracle: the Triton kernels (under the interpreter on a CPU) and the torch reference, both on
an e4m3 KV pool with FP8 weights, decode the same greedy tokens.  The kernels themselves are checked against
the reference in tests/kernels/test_triton_fp8_kv.py, the weights in test_fp8_linear.py / test_fp8_model.py.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.runner.memory_pool import KVPool, resolve_kv_dtype
from radixlm.runtime.runner.model_setup import kv_budget
from radixlm.runtime.server import device_defaults as dd
from radixlm.runtime.server_args import ServerArgs


def test_fp8_kv_refused_by_the_cpu_attention_backend(tiny_model):
    from radixlm.runtime.runner.model_runner import ModelRunner
    with pytest.raises(ValueError, match="fp8_e4m3 KV cache needs the triton attention backend"):
        ModelRunner(str(tiny_model("qwen2")), dtype="float32", max_total_tokens=64, num_rows=2,
                    attention_backend="cpu", kv_cache_dtype="fp8_e4m3")


def test_engine_on_cpu_refuses_fp8_kv_with_the_reason(tiny_model):
    """Through the launch path: the user sees why, and which backend would take it."""
    from radixlm import Engine
    with pytest.raises(RuntimeError, match="fp8_e4m3 KV cache needs the triton attention backend.*--attention-backend torch"):
        Engine(model=str(tiny_model("qwen2")), dtype="float32", kv_cache_dtype="fp8_e4m3", log_level="warning")


def test_fp8_kv_pool_holds_twice_the_tokens_of_bfloat16(tiny_model):
    config: ModelConfig = read_model_config(tiny_model("llama"))
    fp8, bf16 = resolve_kv_dtype("fp8_e4m3", torch.bfloat16), resolve_kv_dtype("auto", torch.bfloat16)
    assert fp8 == torch.float8_e4m3fn and bf16 == torch.bfloat16
    per_token = [KVPool.bytes_per_token(config.num_layers, config.num_kv_heads, config.head_dim, d) for d in (fp8, bf16)]
    assert 2 * per_token[0] == per_token[1]
    free = 3 * 2**20
    assert kv_budget(config, fp8, None, 0.5, "cpu", free) == 2 * kv_budget(config, bf16, None, 0.5, "cpu", free)
    pool = KVPool(config.num_layers, 16, config.num_kv_heads, config.head_dim, dtype=fp8)
    assert pool.k_buffers[0].dtype == fp8 and pool.k_scales == [1.0] * config.num_layers
    with pytest.raises(ValueError, match="kv cache dtype"):
        resolve_kv_dtype("int4", torch.bfloat16)


def test_device_defaults_count_fp8_bytes(tiny_model):
    folder = str(tiny_model("llama"))
    weights, kv = dd.model_sizes(folder, "bfloat16", "cuda")
    weights_fp8, kv_fp8 = dd.model_sizes(folder, "bfloat16", "cuda", "fp8", "fp8_e4m3")
    assert 2 * kv_fp8 == kv
    cfg = json.loads(open(os.path.join(folder, "config.json")).read())
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    q, kvd = h, cfg["num_key_value_heads"] * (h // cfg["num_attention_heads"])
    linears = layers * (2 * h * q + 2 * h * kvd + 3 * h * inter)
    assert weights - weights_fp8 == linears  # one byte saved per linear weight
    h200 = 141 * 2**30
    want = dd.choose_defaults("cuda", h200, weights, kv, {n: None for n in (*dd.NAMES, "max_total_tokens")})
    got = dd.choose_defaults("cuda", h200, weights, kv_fp8, {n: None for n in (*dd.NAMES, "max_total_tokens")})
    assert got["max_running_requests"].value >= want["max_running_requests"].value


@pytest.mark.parametrize("kwargs,match", [
    ({"quantization": "fp8", "tp_size": 2}, "--quantization"),
    ({"kv_cache_dtype": "fp8_e4m3", "deterministic": True}, "--kv-cache-dtype"),
    ({"kv_cache_dtype": "fp8_e4m3", "kv_disk_dir": "/tmp/x"}, "--kv-disk-dir"),
    ({"quantization": "gptq"}, "quantization must be one of"),
    ({"kv_cache_dtype": "fp8_e5m2"}, "kv_cache_dtype must be one of"),
])
def test_options_refused_where_they_do_not_work(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ServerArgs(**kwargs)


def test_launch_hands_the_options_to_the_runner():
    from radixlm.runtime.server.launch import scheduler_parts
    args = ServerArgs(quantization="fp8", kv_cache_dtype="fp8_e4m3", attention_backend="torch")
    runner = scheduler_parts(args, device=dd.DeviceFacts("cpu"))["runner"]
    assert runner["quantization"] == "fp8" and runner["kv_cache_dtype"] == "fp8_e4m3"


@pytest.mark.parametrize("arch", ["llama", "gemma2"])  # gemma2: windows and soft-caps over the e4m3 pool
def test_fp8_weights_and_kv_triton_matches_torch_token_for_token(tiny_model, arch):
    path = str(tiny_model(arch))
    script = textwrap.dedent(f"""
        import json, sys
        import torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from radixlm.runtime.runner.model_runner import ModelRunner
        from scheduler_harness import collect, make_scheduler, run_until_idle, submit
        prompts = [[5, 17, 42, 99, 7], [5, 17, 42, 8], list(range(3, 40))]
        result = {{}}
        for backend in ("torch", "triton"):
            runner = ModelRunner({path!r}, dtype="bfloat16", max_total_tokens=512, num_rows=8,
                                 attention_backend=backend, quantization="fp8", kv_cache_dtype="fp8_e4m3")
            assert runner.model.attn_backend.name == backend and runner.model.quantized
            assert runner.kv_pool.k_buffers[0].dtype == torch.float8_e4m3fn
            sched = make_scheduler(runner, chunked_prefill_size=16)
            for i, p in enumerate(prompts):
                submit(sched, f"r{{i}}", p, 6, params={{"ignore_eos": True}})
            run_until_idle(sched)
            out = collect(sched)
            result[backend] = [out[f"r{{i}}"]["tokens"] for i in range(len(prompts))]
        print(json.dumps(result))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["torch"] == result["triton"]
    assert all(len(t) == 6 for t in result["torch"])
