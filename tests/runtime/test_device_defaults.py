"""Defaults sized by the device (runtime/server/device_defaults.py and its wiring in launch.py), on CPU with
synthetic GPUs. Oracles: SGLang's GPU tiers (chunk, graph batch per memory class), the memory budget
(weights + KV + reserve within the GPU), the KV pool holding the running requests, explicit values
unchanged, the CPU values as they were, the runner's own KV sizing constants, the loaded model's
parameter count, and a fake nvidia-smi's output."""

import os
import stat

import pytest

from radixlm.runtime.server import device_defaults as dd
from radixlm.runtime.server.device_defaults import DeviceFacts, GiB, MiB, choose_defaults
from radixlm.runtime.server.launch import scheduler_parts, sized_info
from radixlm.runtime.server_args import ServerArgs

H200, H100, A10 = 143771 * MiB, 81559 * MiB, 23028 * MiB      # nvidia-smi's memory.total of each
SMOLLM2 = (134_515_008 * 2, 2 * 30 * 3 * 64 * 2)                # bf16 weights, KV bytes a token
LLAMA_8B = (8_030_261_248 * 2, 2 * 32 * 8 * 128 * 2)
NONE = dict.fromkeys(dd.NAMES)


def values(chosen: dict) -> dict:
    return {k: c.value for k, c in chosen.items()}


def kv_tokens(total, weights, kv_per_token, share) -> int:
    return min(dd.KV_TOKEN_CAP, int(share * (total - weights - dd.CUDA_CONTEXT_BYTES) // kv_per_token))


@pytest.mark.parametrize("gpu,total,model,expect", [
    ("H200", H200, SMOLLM2, {"chunked_prefill_size": 16384, "cuda_graph_max_bs": 256, "max_running_requests": 1024}),
    ("H200", H200, LLAMA_8B, {"chunked_prefill_size": 8192, "cuda_graph_max_bs": 256, "max_running_requests": 1024}),
    ("H100", H100, SMOLLM2, {"chunked_prefill_size": 16384, "cuda_graph_max_bs": 256, "max_running_requests": 1024}),
    ("H100", H100, LLAMA_8B, {"chunked_prefill_size": 8192, "cuda_graph_max_bs": 256}),
    ("A10", A10, SMOLLM2, {"chunked_prefill_size": 2048, "cuda_graph_max_bs": 32, "max_running_requests": 1024}),
    ("A10", A10, LLAMA_8B, {"chunked_prefill_size": 2048, "cuda_graph_max_bs": 32}),
])
def test_cuda_defaults_follow_the_gpu_and_fit_its_memory(gpu, total, model, expect):
    weights, per_token = model
    chosen = choose_defaults("cuda", total, weights, per_token, NONE, gpu_name=f"NVIDIA {gpu}")
    got = values(chosen)
    assert {k: got[k] for k in expect} == expect
    share = got["mem_fraction"]
    assert 0.3 <= share <= 0.92
    free = total - weights - dd.CUDA_CONTEXT_BYTES
    reserve = 0.5 * GiB + got["chunked_prefill_size"] * 0.2 * MiB     # activations of a chunk, at the least
    assert weights + share * free + reserve <= total                    # weights + KV + reserve fit the GPU
    if total > 60 * GiB:
        assert share >= 0.8                                             # a big GPU gives most of it to the KV
    tokens = kv_tokens(total, weights, per_token, share)
    assert got["max_running_requests"] * dd.TOKENS_PER_REQUEST <= tokens   # the pool holds the running requests
    assert got["max_running_requests"] >= min(1024, tokens // dd.TOKENS_PER_REQUEST) - 16
    assert got["cuda_graph_max_bs"] <= got["max_running_requests"]
    assert all(c.reason for c in chosen.values()) and gpu in chosen["chunked_prefill_size"].reason


def test_the_8b_model_on_small_gpus_runs_fewer_requests_with_a_smaller_kv_share():
    a10 = values(choose_defaults("cuda", A10, *LLAMA_8B, NONE))
    h100 = values(choose_defaults("cuda", H100, *LLAMA_8B, NONE))
    assert a10["max_running_requests"] < h100["max_running_requests"] <= 1024
    assert a10["mem_fraction"] < h100["mem_fraction"]
    tiny = values(choose_defaults("cuda", 16 * GiB, *LLAMA_8B, NONE))        # the weights leave no room
    assert tiny["mem_fraction"] == 0.3 and tiny["max_running_requests"] <= 2


@pytest.mark.parametrize("total,model", [(None, SMOLLM2), (H200, LLAMA_8B), (0, (0, 0))])
def test_cpu_defaults_are_unchanged(total, model):
    chosen = choose_defaults("cpu", total, *model, NONE)
    assert values(chosen) == {"max_running_requests": 128, "chunked_prefill_size": 1024, "cuda_graph_max_bs": 64,
                              "mem_fraction": 0.2}
    assert all("cpu" in c.reason for c in chosen.values())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_explicit_values_win(device):
    given = {"max_running_requests": 40, "chunked_prefill_size": -1, "cuda_graph_max_bs": 24, "mem_fraction": 0.5}
    chosen = choose_defaults(device, H200, *LLAMA_8B, given)
    assert values(chosen) == given and {c.reason for c in chosen.values()} == {"set explicitly"}
    capped = values(choose_defaults("cuda", H200, *LLAMA_8B, {**NONE, "max_running_requests": 8}))
    assert capped["max_running_requests"] == 8 and capped["cuda_graph_max_bs"] == 8   # graphs no larger than a batch
    fixed_kv = values(choose_defaults("cuda", H200, *LLAMA_8B, {**NONE, "max_total_tokens": 40960}))
    assert fixed_kv["max_running_requests"] == 40960 // dd.TOKENS_PER_REQUEST == 80


def test_the_kv_cap_is_the_runners():
    from radixlm.runtime.runner.model_setup import MAX_DEFAULT_TOKENS

    assert dd.KV_TOKEN_CAP == MAX_DEFAULT_TOKENS


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_model_sizes_match_the_loaded_model(tiny_model, arch):
    import torch
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.runner.memory_pool import KVPool

    folder = tiny_model(arch)
    hf = AutoModelForCausalLM.from_pretrained(folder)
    numel = sum(p.numel() for p in hf.parameters())
    cfg = ModelConfig.from_hf(hf.config)
    for dtype, torch_dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("auto", torch.bfloat16)):
        weights, per_token = dd.model_sizes(str(folder), dtype, "cuda")
        assert weights == numel * torch_dtype.itemsize
        assert per_token == KVPool.bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, torch_dtype)
    assert dd.model_sizes(str(folder), "auto", "cpu")[0] == numel * 4


def test_model_sizes_without_weights_count_the_llama_shape(tiny_model, tmp_path):
    import shutil

    from transformers import AutoModelForCausalLM

    folder = tiny_model("llama")                       # untied, no biases: the count is exact
    shutil.copy(folder / "config.json", tmp_path / "config.json")   # a shape without weights (dummy load)
    numel = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(folder).parameters())
    assert dd.model_sizes(str(tmp_path), "bfloat16", "cuda") == dd.model_sizes(str(folder), "bfloat16", "cuda")
    assert dd.model_sizes(str(tmp_path), "bfloat16", "cuda")[0] == numel * 2



def test_model_sizes_without_weights_count_deepseek_style_experts(tiny_model, tmp_path):
    """GLM-4.5's shape (first layer dense, routed experts, correction bias, shared expert) without its attention
    biases and q/k norms, which the Llama shape's count leaves out: exact."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    config = json.loads((tiny_model("glm4_moe") / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "attention_bias": False, "use_qk_norm": False}))
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path))
    numel = sum(p.numel() for p in hf.parameters()) + sum(
        b.numel() for n, b in hf.named_buffers() if n.endswith("e_score_correction_bias"))
    assert dd.model_sizes(str(tmp_path), "bfloat16", "cuda")[0] == numel * 2

def _fake_smi(tmp_path, text: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\nprintf '{text}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(tmp_path)


def test_probe_reads_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, "143771, NVIDIA H200\\n143771, NVIDIA H200\\n") + os.pathsep
                       + os.environ["PATH"])
    monkeypatch.setattr(dd, "torch_has_cuda", lambda: True)
    assert dd.probe_device({}) == DeviceFacts("cuda", H200, "NVIDIA H200")
    assert dd.probe_device({"CUDA_VISIBLE_DEVICES": "3,1"}).kind == "cuda"
    assert "--id=3" in (tmp_path / "args").read_text()
    assert dd.probe_device({"CUDA_VISIBLE_DEVICES": ""}).kind == "cpu"          # every GPU hidden
    assert dd.probe_device({"CUDA_VISIBLE_DEVICES": "-1"}).kind == "cpu"
    monkeypatch.setattr(dd, "torch_has_cuda", lambda: False)                    # a CPU build of torch
    assert dd.probe_device({}).kind == "cpu"


def test_torch_has_cuda_agrees_with_torch():
    import torch

    assert dd.torch_has_cuda() == (torch.version.cuda is not None)


def test_launch_hands_the_chosen_values_to_the_scheduler_and_runner(tiny_model):
    folder = str(tiny_model("llama"))
    cpu = scheduler_parts(ServerArgs(), folder, DeviceFacts("cpu"))
    runner = cpu["runner"]
    assert (runner["num_rows"], runner["mem_fraction"], runner["cuda_graph_max_bs"]) == (136, 0.2, 64)
    assert (cpu["scheduler"]["max_running_requests"], cpu["scheduler"]["chunked_prefill_size"]) == (128, 1024)
    gpu = DeviceFacts("cuda", H200, "NVIDIA H200")
    parts = scheduler_parts(ServerArgs(tp_size=1), folder, gpu)
    want = values(choose_defaults("cuda", H200, *dd.model_sizes(folder, "auto", "cuda"), NONE, gpu_name=gpu.name))
    assert parts["runner"]["num_rows"] == want["max_running_requests"] + 8
    assert parts["runner"]["mem_fraction"] == want["mem_fraction"]
    assert parts["runner"]["cuda_graph_max_bs"] == want["cuda_graph_max_bs"]
    assert parts["scheduler"]["max_running_requests"] == want["max_running_requests"]
    assert parts["scheduler"]["chunked_prefill_size"] == want["chunked_prefill_size"]
    info = sized_info(parts["device_defaults"])
    assert {k: info[k] for k in dd.NAMES} == want and info["device_defaults"]["mem_fraction"]["reason"]
    explicit = scheduler_parts(ServerArgs(max_running_requests=5, chunked_prefill_size=64), folder, gpu)
    assert explicit["runner"]["num_rows"] == 13 and explicit["scheduler"]["chunked_prefill_size"] == 64
    assert explicit["runner"]["cuda_graph_max_bs"] == 5
    halves = scheduler_parts(ServerArgs(dp_size=2), folder, gpu)        # two replicas share the GPU
    assert halves["device_defaults"]["chunked_prefill_size"]["reason"].count("70.2 GiB") == 1


def test_server_info_shows_what_was_chosen_and_why(tiny_model):
    from radixlm.runtime.engine import Engine

    with Engine(model=str(tiny_model("llama")), max_total_tokens=512, max_running_requests=12,
                log_level="warning") as engine:
        info = engine.get_server_info()
    chosen = info["device_defaults"]
    assert {k: c["value"] for k, c in chosen.items()} == {"max_running_requests": 12, "chunked_prefill_size": 1024,
                                                         "cuda_graph_max_bs": 64, "mem_fraction": 0.2}
    assert chosen["max_running_requests"]["reason"] == "set explicitly" and "cpu" in chosen["mem_fraction"]["reason"]
    # the values in force, not the unset options: the scheduler's and the launch's
    assert (info["max_running_requests"], info["chunked_prefill_size"], info["cuda_graph_max_bs"],
            info["mem_fraction"]) == (12, 1024, 64, 0.2)


def test_model_sizes_of_a_config_that_leaves_the_heads_to_the_class_defaults(tmp_path):
    """A released Gemma 3 multimodal config.json names no heads or head_dim in its text_config (Gemma3TextConfig's
    defaults: 8 heads, 4 KV heads, head_dim 256, not hidden / heads); the KV per token follows those defaults."""
    import json

    from radixlm.runtime.models.loader import read_model_config

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
                        "num_hidden_layers": 2, "vocab_size": 400}}))
    c = read_model_config(tmp_path)
    assert (c.num_heads, c.num_kv_heads, c.head_dim) == (8, 4, 256)
    weights, per_token = dd.model_sizes(str(tmp_path), "bfloat16", "cuda")
    assert per_token == 2 * 2 * 4 * 256 * 2 and weights > 0
