"""Defaults sized by the device: running requests, prefill chunk, largest CUDA-graph batch, KV share.

`choose_defaults` decides with plain numbers (no torch, no device access): the device kind, its
total memory, the model's weight bytes and KV bytes per token (per GPU), and the user's explicit
values, which always win.  On CPU it returns the CPU defaults the CPU benchmarks were tuned with; on
CUDA it sizes them by GPU memory, as SGLang's server_args does per GPU class, then gives the KV pool
what the weights, activations and graphs leave, and lets as many requests run as that pool holds.
`probe_device` (nvidia-smi, no torch) and `model_sizes` (config.json and safetensors headers) gather
the inputs in the launcher; launch.py logs the choice once and puts it into /get_server_info.
"""

import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from radixlm.runtime.models.multimodal_text import MULTIMODAL_TEXT_ARCHITECTURES, is_vision_weight

GiB, MiB = 1 << 30, 1 << 20
NAMES = ("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs", "mem_fraction")
CPU_DEFAULTS = {"max_running_requests": 128, "chunked_prefill_size": 1024, "cuda_graph_max_bs": 64,
                "mem_fraction": 0.2}
# (GPU memory below this many GiB, prefill chunk, largest graph batch, class): SGLang's tiers per GPU class,
# graph batches rounded to ours (1, 2, 4, 8, then multiples of 16)
GPU_TIERS = ((20, 2048, 16, "T4 / RTX 4080 class"), (35, 2048, 32, "A10 / RTX 4090 class"),
             (60, 4096, 64, "A100-40G / L40 class"), (90, 8192, 256, "H100 / A100-80G class"),
             (160, 8192, 256, "H200 / H20 class"), (float("inf"), 16384, 512, "B200 / MI300 class"))
SMALL_MODEL_BYTES = 4 * GiB        # weights under this prefill a doubled chunk (up to 16k tokens) cheaply
KV_TOKEN_CAP = 1 << 19             # the runner's MAX_DEFAULT_TOKENS: a KV pool sized from memory stops here
TOKENS_PER_REQUEST = 512           # KV tokens counted per running request when the pool sets their number
MAX_RUNNING_CAP = 1024
CUDA_CONTEXT_BYTES = GiB // 2      # what the CUDA context and the allocator hold besides weights and KV
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}


@dataclass(frozen=True)
class Chosen:
    value: object
    reason: str


def choose_defaults(device: str, total_bytes: Optional[int], param_bytes: int, kv_bytes_per_token: int,
                    explicit: dict, gpu_name: str = "") -> dict:
    """-> {name: Chosen} for every name in NAMES.  device: "cpu" or "cuda"; total_bytes: the GPU's
    memory (None: unknown); param_bytes, kv_bytes_per_token: this GPU's share of the weights and of a
    token's KV; explicit: the user's values by name (None or absent: choose); explicit
    "max_total_tokens" fixes the KV pool's size; gpu_name goes into the reasons."""
    given = {k: v for k, v in explicit.items() if v is not None}
    out = {k: Chosen(given[k], "set explicitly") for k in NAMES if k in given}
    if device != "cuda":
        for k in NAMES:
            out.setdefault(k, Chosen(CPU_DEFAULTS[k], f"{device} default (the CPU benchmarks are tuned for it)"))
        return out
    where = f"{gpu_name or 'GPU'} with {total_bytes / GiB:.1f} GiB" if total_bytes else "GPU of unknown memory"
    if total_bytes:
        _, chunk, graph_bs, tier = next(t for t in GPU_TIERS if total_bytes < t[0] * GiB)
        tier = f"{where}: {tier}"
    else:
        chunk, graph_bs, tier = 4096, 128, where
    if "chunked_prefill_size" not in out:
        why = f"{tier} (SGLang's tier)"
        if chunk >= 8192 and param_bytes < SMALL_MODEL_BYTES:
            chunk, why = 16384, f"{tier}, doubled: {param_bytes / GiB:.2f} GiB of weights prefill 16k tokens cheaply"
        out["chunked_prefill_size"] = Chosen(chunk, why)
    chunk = out["chunked_prefill_size"].value
    graph_bs = out["cuda_graph_max_bs"].value if "cuda_graph_max_bs" in out else graph_bs
    if "mem_fraction" not in out:
        out["mem_fraction"] = _kv_share(total_bytes, param_bytes, chunk, graph_bs)
    free_after_weights = max(0, (total_bytes or 0) - param_bytes - CUDA_CONTEXT_BYTES)
    if given.get("max_total_tokens"):
        kv_tokens, kv_why = int(given["max_total_tokens"]), "--max-total-tokens"
    else:
        kv_tokens = min(KV_TOKEN_CAP, int(out["mem_fraction"].value * free_after_weights // max(1, kv_bytes_per_token)))
        kv_why = f"{kv_tokens} KV tokens ({out['mem_fraction'].value:g} of the ~{free_after_weights / GiB:.1f} GiB " \
                 f"left after the weights, {kv_bytes_per_token} B a token, at most {KV_TOKEN_CAP})"
    if "max_running_requests" not in out:
        n = min(MAX_RUNNING_CAP, kv_tokens // TOKENS_PER_REQUEST)
        n = n - n % 16 if n >= 16 else max(1, n)
        out["max_running_requests"] = Chosen(n, f"{kv_why} / {TOKENS_PER_REQUEST} tokens a request, "
                                                f"at most {MAX_RUNNING_CAP}")
    if "cuda_graph_max_bs" not in out:
        running = out["max_running_requests"].value
        out["cuda_graph_max_bs"] = Chosen(min(graph_bs, running), f"{tier} (SGLang's tier)" if graph_bs <= running
                                          else f"{tier}, capped at max_running_requests")
    return {k: out[k] for k in NAMES}


def _kv_share(total_bytes, param_bytes, chunk, graph_bs) -> Chosen:
    """mem_fraction: the runner gives the KV pool this share of the memory free after the weights load (and
    after a 4k-token warm-up's activations), so that weights + KV fill the GPU but for a reserve that SGLang
    estimates as 0.5 GiB + 1.5 MiB a prefill-chunk token + 2 MiB a graph batch row (at least 10 GiB on a GPU
    above 60 GiB); the per-token part is SGLang's for models of 8B and up (16 GiB of bf16 weights) and
    shrinks with the square root of the weights' size below that (activations grow with the width)."""
    if not total_bytes:
        return Chosen(0.8, "GPU memory unknown: 0.8 of the memory free after the weights")
    per_token = 1.5 * MiB * min(1.0, param_bytes / (16 * GiB)) ** 0.5
    reserve = 0.5 * GiB + max(chunk if chunk > 0 else 4096, 2048) * per_token + graph_bs * 2 * MiB
    if total_bytes > 60 * GiB:
        reserve = max(reserve, 10 * GiB)
    free_after_weights = total_bytes - param_bytes - CUDA_CONTEXT_BYTES
    if free_after_weights <= reserve:
        return Chosen(0.3, f"{param_bytes / GiB:.1f} GiB of weights leave {free_after_weights / GiB:.1f} GiB, under "
                           f"the {reserve / GiB:.1f} GiB reserve: 0.3 of it")
    share = round(min(0.92, (free_after_weights - reserve) / free_after_weights), 3)
    return Chosen(share, f"weights {param_bytes / GiB:.2f} GiB + KV fill {total_bytes / GiB:.1f} GiB but "
                         f"{reserve / GiB:.1f} GiB for activations (chunk {chunk}) and graphs ({graph_bs})")


def as_info(chosen: dict) -> dict:
    """JSON-ready {name: {"value", "reason"}} (server info, the parts file)."""
    return {k: asdict(c) for k, c in chosen.items()}


def log_line(info: dict, device: str, gpu_name: str = "", total_bytes: Optional[int] = None) -> str:
    """The start-up log line from as_info's dict."""
    where = device + (f" ({gpu_name}, {total_bytes / GiB:.1f} GiB)" if total_bytes else "")
    return f"defaults for {where}: " + "; ".join(f"{k}={c['value']} ({c['reason']})" for k, c in info.items())


# ---- the inputs, gathered without torch ----

@dataclass(frozen=True)
class DeviceFacts:
    kind: str                          # "cpu" or "cuda"
    total_bytes: Optional[int] = None  # the GPU's memory
    name: str = ""


def probe_device(env=None) -> DeviceFacts:
    """cuda (with the first visible GPU's memory and name, from nvidia-smi) when the installed torch is a
    CUDA build, CUDA_VISIBLE_DEVICES hides no GPU and nvidia-smi lists one; else cpu (the runner's own
    choice: it takes cuda when torch sees a GPU)."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if (visible is not None and visible.strip() in ("", "-1")) or not torch_has_cuda():
        return DeviceFacts("cpu")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return DeviceFacts("cpu")
    cmd = [smi, "--query-gpu=memory.total,name", "--format=csv,noheader,nounits"]
    if visible:
        cmd.append(f"--id={visible.split(',')[0].strip()}")
    try:
        lines = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout.splitlines()
        mib, name = lines[0].split(",", 1)
        return DeviceFacts("cuda", int(float(mib)) * MiB, name.strip())
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return DeviceFacts("cpu")


def torch_has_cuda() -> bool:
    """Whether the installed torch is a CUDA build, read from torch/version.py without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        try:
            text = (Path(folder) / "version.py").read_text()
        except OSError:
            continue
        m = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        return m is not None
    return False


def model_sizes(model_path: str, dtype: str, device: str, quantization: Optional[str] = None,
                kv_cache_dtype: str = "auto") -> tuple:
    """-> (weight bytes, KV bytes per token) of a model folder at the runtime dtype
    ("auto": bfloat16 on CUDA, float32 elsewhere), from config.json and the safetensors headers.
    quantization "fp8": the decoder's linear weights (the Llama shape's count) take 1 byte each;
    kv_cache_dtype "fp8_e4m3": 1 byte per K/V element."""
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    multimodal = bool(set(cfg.get("architectures") or ()) & set(MULTIMODAL_TEXT_ARCHITECTURES))
    cfg = {**cfg, **cfg.get("text_config", {})}
    # the heads left to the config class's defaults (Gemma 3's text_config); a multimodal config's text fields at
    # its top level or in text_config, as its config class reads them
    if multimodal or "num_attention_heads" not in cfg:
        cfg.update(_geometry_from_transformers(model_path))
    width = DTYPE_BYTES.get(dtype, 2 if device == "cuda" else 4)
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    layers = cfg["num_hidden_layers"]
    numel = _safetensors_numel(Path(model_path))
    if numel is None:    # no weights on disk (--load-format dummy): the Llama shape's count, biases left out
        h, vocab = cfg["hidden_size"], cfg["vocab_size"]
        numel = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2) + h + _mlp_numel(cfg) + layers * (
            2 * h * heads * head_dim + 2 * h * kv_heads * head_dim + 2 * h)
    weights = numel * width
    if quantization == "fp8" or (cfg.get("quantization_config") or {}).get("quant_method") == "fp8":
        h, inter = cfg["hidden_size"], cfg["intermediate_size"]
        linears = layers * (2 * h * heads * head_dim + 2 * h * kv_heads * head_dim + 3 * h * inter)
        weights -= min(linears, numel) * (width - 1)
    kv_width = 1 if kv_cache_dtype == "fp8_e4m3" else width
    if cfg.get("kv_lora_rank"):   # multi-head latent attention: one vector per token and layer, read as K and V
        return weights, layers * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * kv_width
    return weights, 2 * layers * kv_heads * head_dim * kv_width


def _geometry_from_transformers(model_path: str) -> dict:
    """The config.json fields model_sizes reads, as transformers fills them in (it imports torch: only for configs
    that leave them to the class's defaults)."""
    from radixlm.runtime.models.loader import read_model_config

    c = read_model_config(Path(model_path))
    return {"num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim,
            "num_hidden_layers": c.num_layers, "hidden_size": c.hidden_size, "vocab_size": c.vocab_size,
            "intermediate_size": c.intermediate_size}


def _mlp_numel(cfg: dict) -> int:
    """Parameters of every layer's MLP: dense SwiGLU, or for mixture-of-experts configs (Mixtral, Qwen2/3-MoE, and the
    DeepSeek style: GLM-4.5, dots.llm1, DeepSeek-V2/V3) the router, the experts and any shared expert in the sparse
    layers (runtime/models/moe_config.py's rules)."""
    h, layers, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    if cfg.get("n_routed_experts"):
        return _deepseek_style_mlp_numel(cfg)
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    if not experts:
        return layers * 3 * h * inter
    mixtral = "num_local_experts" in cfg and "moe_intermediate_size" not in cfg
    width = inter if mixtral else cfg["moe_intermediate_size"]
    dense_only, step = set(cfg.get("mlp_only_layers") or ()), cfg.get("decoder_sparse_step") or 1
    sparse = sum(1 for i in range(layers) if mixtral or (i not in dense_only and (i + 1) % step == 0))
    shared = cfg.get("shared_expert_intermediate_size") or 0
    per_sparse = experts * (3 * h * width + h) + (3 * h * shared + h if shared else 0)
    return sparse * per_sparse + (layers - sparse) * 3 * h * inter


def _deepseek_style_mlp_numel(cfg: dict) -> int:
    """Layers first_k_dense_replace.. (every moe_layer_freq-th) sparse: router [E, H] and its correction bias [E],
    E experts, n_shared_experts * moe_intermediate_size of un-gated shared expert; the others dense."""
    h, layers, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    first, freq = cfg.get("first_k_dense_replace") or 0, cfg.get("moe_layer_freq") or 1
    sparse = sum(1 for i in range(layers) if i >= first and i % freq == 0)
    experts, width = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    shared = width * (cfg.get("n_shared_experts") or 0)
    per_sparse = experts * (3 * h * width + h + 1) + 3 * h * shared
    return sparse * per_sparse + (layers - sparse) * 3 * h * inter


def _safetensors_numel(folder: Path) -> Optional[int]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, meta in header.items():
            if name != "__metadata__" and not is_vision_weight(name):   # vision towers are not loaded
                n = 1
                for d in meta["shape"]:
                    n *= d
                total += n
    return total
