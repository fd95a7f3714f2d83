"""ServerArgs: every option of the runtime in one frozen dataclass; the CLI is generated from it.

Only runtime/server/launch.py reads the whole object; it hands each component just the values it uses.
"""

import argparse
import dataclasses
import inspect
import os
import re
import typing
from dataclasses import dataclass, fields
from typing import Optional

from radixlm.runtime.api.client_scope import ISOLATION_MODES, parse_api_keys

DEFAULT_MODEL = "smollm2-135m-instruct"

# Options with a fixed set of values, checked when parsed (the CLI lists them). Kept here without
# importing torch (the main process never does): tests compare them with the components' own lists.
CHOICES = {
    "dtype": ("auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16", "half"),
    "load_format": ("auto", "safetensors", "dummy"),
    "quantization": ("none", "fp8", "gguf"),
    "kv_cache_dtype": ("auto", "fp8_e4m3"),
    "attention_backend": ("auto", "torch", "cpu", "triton"),
    "grammar_backend": ("xgrammar", "llguidance", "auto", "none"),
    "schedule_policy": ("lpm", "dfs-weight", "fcfs"),
    "cache_isolation": tuple(ISOLATION_MODES),
    "tool_call_parser": ("hermes", "llama3_json", "generic"),
    "reasoning_parser": ("qwen3", "deepseek-r1", "gpt-oss"),
    "speculative_algorithm": ("ngram",),
    "thread_policy": ("adaptive", "fixed"),
    "kv_disk_write_policy": ("write_through", "write_back"),
    "log_level": ("debug", "info", "warning", "error", "critical"),
}
ALIASES = {"deterministic": "enable_deterministic_inference"}  # SGLang's names, accepted too (CLI and Engine)


@dataclass(frozen=True)
class ServerArgs:
    model: str = DEFAULT_MODEL                  # a folder, a .gguf file, or the alias smollm2-135m-instruct
    served_model_name: Optional[str] = None     # the name /v1/models reports (default: the model's)
    dtype: str = "auto"                         # auto (bfloat16 where the CPU has AVX512-BF16/AMX or on CUDA, else float32), float32, bfloat16, float16
    load_format: str = "auto"                   # auto: the folder's *.safetensors; dummy: random weights made on the device from a fixed seed (config.json and tokenizer only; benchmarks of a shape without its weights)
    quantization: str = "none"                  # none: weights at --dtype (a .gguf model dequantized; FP8 checkpoints, quant_method fp8, load as they are); fp8: the decoder's linear weights quantized to e4m3 at load, one scale per output channel (torch._scaled_mm on CUDA sm89+, dequantized weights elsewhere); gguf: a .gguf model's Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K weights stay in their blocks on the CPU, multiplied by int8 kernels for a few rows and dequantized tiles for more (other formats dequantized)
    kv_cache_dtype: str = "auto"                # fp8_e4m3: K and V stored in FP8 with one scale per layer for K and one for V (half the bytes of bfloat16: twice the tokens); the triton (CUDA) and torch attention backends; auto: the model dtype
    host: str = "127.0.0.1"                     # address the HTTP server binds
    port: int = 30000                           # HTTP port
    api_key: Optional[str] = None               # one key, or several separated by commas ("k1,k2")
    cache_isolation: str = "off"                # off: one shared radix cache; per-key: a namespace per API key
    allowed_hosts: Optional[str] = None         # Host names served besides loopback and the bind address ("a,b"; "*": any)
    allowed_origins: Optional[str] = None       # web origins given CORS ("https://a,https://b"); none by default
    max_request_bytes: int = 16 * 1024 * 1024   # request bodies above this are refused (413) before parsing
    health_step_timeout: float = 20.0           # /health fails when the scheduler answers no ping this long (<= 0: off)
    max_total_tokens: Optional[int] = None      # KV cache size in tokens (default: mem_fraction of free memory)
    mem_fraction: Optional[float] = None        # share of the memory free after the weights given to the KV cache when --max-total-tokens is unset (unset: 0.2 on CPU; on CUDA what weights, activations and graphs leave, ~0.8-0.92)
    context_length: Optional[int] = None        # longest prompt + output in tokens (default: the model's)
    max_running_requests: Optional[int] = None  # requests decoded together at most (unset: 128 on CPU; on CUDA as many as the KV pool holds at 512 tokens each, up to 1024)
    max_prefill_tokens: int = 4096              # new prompt tokens per scheduler step at most
    chunked_prefill_size: Optional[int] = None  # <= 0 disables chunked prefill (unset: 1024 on CPU; on CUDA by GPU memory, 2048-16384)
    schedule_policy: str = "lpm"                # lpm, dfs-weight, fcfs
    disable_radix_cache: bool = False           # never share KV between requests
    page_size: int = 1                          # KV slots per page; the radix cache shares whole pages
    attention_backend: str = "auto"             # auto, torch, cpu, triton
    disable_cuda_graph: bool = False            # on CUDA, run decode steps eagerly instead of replaying captured CUDA graphs (CPU: never used)
    cuda_graph_max_bs: Optional[int] = None     # largest decode batch replayed as a CUDA graph (graphs for 1, 2, 4, 8 and multiples of 16 up to it); larger batches run eagerly (unset: by GPU memory, 16-512, at most --max-running-requests)
    kv_disk_dir: Optional[str] = None           # keep KV blocks in this folder too: they outlive eviction and restarts; --dp-size replicas share it (default: off)
    kv_disk_size: str = "16G"                   # the disk tier's size bound (bytes, or with K/M/G/T); the least recently used blocks go first
    kv_disk_block: int = 64                     # tokens per disk block (a multiple of --page-size); a prefix is reused from disk in whole blocks
    kv_disk_write_policy: str = "write_through"  # write_through: every block when it enters the radix cache; write_back: only when evicted, and only blocks reused at least once
    kv_host_size: Optional[str] = None          # a host-memory tier between the device and disk, this big (bytes, or with K/M/G): blocks the device evicts wait there, then go to disk (GPU servers; default: off)
    grammar_backend: str = "xgrammar"           # xgrammar, llguidance (JSON schemas and regexes; EBNF and tool-call tags stay on xgrammar), auto (llguidance for a JSON schema xgrammar would not enforce whole), none
    grammar_timeout: float = 5.0                # seconds a grammar may take to compile before the request fails (a long one: CPU seconds of its niced worker, at most 6x that in wall time)
    disable_jump_forward: bool = False          # sample every token, even where the grammar allows one continuation
    json_indent: int = 2                        # a JSON-schema answer (XGrammar) is laid out one value per line, nested this many spaces deeper (0: compact, one line; small models loop far less on the layout they were trained on)
    json_unbounded_numbers: bool = False        # JSON numbers in grammars without the default bounds (integers in int64, at most 17 significant digits and exponent 308), so a model may write digits until max_tokens
    disable_overlap_schedule: bool = False      # on CUDA, plan each step only after the one before has finished (default: the host plans step N+1 while the GPU runs step N)
    enable_overlap_schedule: bool = False       # overlap scheduling on the CPU too (off there by default: host and model share the cores)
    speculative_algorithm: Optional[str] = None  # ngram: draft tokens from the request's own text and the radix tree's cached continuations, verified in one pass (default: off)
    speculative_num_draft_tokens: int = 8       # with --speculative-algorithm: draft tokens per request and step at most
    speculative_max_step_tokens: int = 32       # with --speculative-algorithm: a step's decodes plus drafts stay within this many tokens (drafts go to the requests whose drafts were accepted most); past it a verify pass costs more than it saves
    tool_call_parser: Optional[str] = None      # hermes, llama3_json, generic (default: chosen from the chat template)
    chat_template: Optional[str] = None         # a Jinja chat template file used instead of the model's (SGLang's --chat-template, file paths only)
    reasoning_parser: Optional[str] = None      # qwen3, deepseek-r1, gpt-oss: thinking returned as reasoning_content (default: chosen from the chat template, none when it has no thinking markers)
    log_level: str = "info"                     # debug, info, warning, error, critical
    log_interval: float = 5.0                   # seconds between progress log lines
    deterministic: bool = False                 # outputs independent of batch composition and retraction (CPU; README: Determinism has the guarantees and the cost)
    check_ledger: bool = False                  # prove the KV ledger after every step (tests, debugging)
    num_threads: Optional[int] = None           # torch threads in each scheduler replica and tp rank (default: all cores, split evenly over this node's --dp-size replicas x tp ranks)
    thread_policy: str = "adaptive"             # adaptive: run fewer threads (down to 1) while other processes keep cores busy, since a thread descheduled behind them stalls every parallel step; fixed: always --num-threads (also under --deterministic and --tp-size > 1)
    dp_size: int = 1                            # data-parallel scheduler replicas, each with its own KV cache and radix tree, behind one HTTP front that routes each request to the replica caching its longest prefix
    dp_balance_abs_threshold: int = 4           # with --dp-size > 1: a request follows its cached prefix only while that replica has at most this many requests in flight more than the least loaded (plus the relative part)
    dp_balance_rel_threshold: float = 0.25      # with --dp-size > 1: the relative part of that bound, as a share of the least loaded replica's requests in flight
    incremental_streaming_output: bool = False  # native /generate streams text deltas (SGLang's flag), not cumulative text
    tp_size: int = 1                            # tensor-parallel ranks: processes that split one model by heads, MLP width and vocabulary (gloo on CPU, NCCL on CUDA); must divide the query and KV heads
    ep_size: int = 1                            # with --tp-size: mixture-of-experts models split their experts over the tp ranks (each holds E/ep_size experts whole) instead of every expert's width; 1 or --tp-size
    nnodes: int = 1                             # with --tp-size: nodes the ranks are spread over, --tp-size / --nnodes on each
    node_rank: int = 0                          # with --nnodes > 1: this node's index; node 0 serves and runs rank 0, the others run only tp workers
    dist_init_addr: Optional[str] = None        # host:port where the tp ranks meet (rank 0 listens there; default: a free local port; needed with --nnodes > 1)

    def __post_init__(self):
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        if self.chat_template is not None and not os.path.isfile(self.chat_template):
            raise ValueError(f"chat_template {self.chat_template!r} is not a file (give a Jinja template's path)")
        if self.port <= 0 or self.port > 65535:
            raise ValueError(f"port {self.port} is outside 1..65535")
        if self.page_size < 1:
            raise ValueError("page_size must be >= 1")
        if not 0 <= self.json_indent <= 16:
            raise ValueError(f"json_indent {self.json_indent} is outside 0..16 (0: compact JSON)")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise ValueError("max_running_requests must be >= 1")
        if self.max_total_tokens is not None and self.max_total_tokens < 16:
            raise ValueError("max_total_tokens must be at least 16")
        if self.cuda_graph_max_bs is not None and self.cuda_graph_max_bs < 1:
            raise ValueError(f"cuda_graph_max_bs must be at least 1, not {self.cuda_graph_max_bs}")
        if self.max_request_bytes < 1024:
            raise ValueError("max_request_bytes must be at least 1024")
        if self.cache_isolation not in ISOLATION_MODES:
            raise ValueError(f"cache_isolation must be one of {', '.join(ISOLATION_MODES)}, not {self.cache_isolation!r}")
        if len(parse_api_keys(self.api_key)) < (1 if self.cache_isolation == "per-key" else 0):
            raise ValueError("--cache-isolation per-key needs --api-key (the keys it isolates)")
        parse_size(self.kv_disk_size)
        if self.kv_host_size is not None:
            parse_size(self.kv_host_size, "kv_host_size")
        if self.kv_disk_write_policy == "write_back" and not self.kv_disk_dir:
            raise ValueError("--kv-disk-write-policy write_back needs --kv-disk-dir (the disk tier it writes to)")
        if self.kv_disk_block < 1 or self.kv_disk_block % self.page_size:
            raise ValueError(f"kv_disk_block ({self.kv_disk_block}) must be a positive multiple of page_size "
                             f"({self.page_size})")
        if self.dp_size < 1:
            raise ValueError(f"dp_size must be at least 1 (the number of scheduler replicas), not {self.dp_size}")
        if self.dp_balance_abs_threshold < 0 or self.dp_balance_rel_threshold < 0:
            raise ValueError("dp_balance_abs_threshold and dp_balance_rel_threshold must be >= 0")
        if self.speculative_algorithm and self.page_size != 1:
            raise ValueError("--speculative-algorithm needs --page-size 1 (rejected draft tokens give back single slots)")
        if self.speculative_num_draft_tokens < 1 or self.speculative_max_step_tokens < 0:
            raise ValueError("speculative_num_draft_tokens must be >= 1 and speculative_max_step_tokens >= 0")
        _check_tensor_parallel(self)
        _check_low_precision(self)
        if self.schedule_policy not in ("lpm", "dfs-weight", "fcfs"):
            raise ValueError(f"schedule_policy must be lpm, dfs-weight or fcfs, not {self.schedule_policy!r}")

    @classmethod
    def from_kwargs(cls, **kwargs) -> "ServerArgs":
        for name, alias in ALIASES.items():
            if alias in kwargs:
                kwargs[name] = kwargs.pop(alias)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"unknown option(s): {', '.join(unknown)}")
        return cls(**kwargs)

    def replace(self, **changes) -> "ServerArgs":
        return dataclasses.replace(self, **changes)


def _check_tensor_parallel(a: ServerArgs) -> None:
    if a.tp_size < 1:
        raise ValueError(f"tp_size must be at least 1 (the number of tensor-parallel ranks), not {a.tp_size}")
    if a.ep_size not in (1, a.tp_size):
        raise ValueError(f"--ep-size must be 1 or equal to --tp-size ({a.tp_size}): the experts are split over the "
                         f"tensor-parallel ranks, not {a.ep_size}")
    if a.nnodes < 1 or not 0 <= a.node_rank < a.nnodes:
        raise ValueError(f"nnodes must be >= 1 and node_rank in 0..nnodes-1, not nnodes={a.nnodes} node_rank={a.node_rank}")
    if a.tp_size % a.nnodes:
        raise ValueError(f"tp_size ({a.tp_size}) must be a multiple of nnodes ({a.nnodes}): each node runs tp_size/nnodes ranks")
    if a.nnodes > 1 and not a.dist_init_addr:
        raise ValueError("--nnodes > 1 needs --dist-init-addr host:port (an address of node 0 that every node reaches)")
    if a.dist_init_addr is not None and not re.fullmatch(r"[^:\s]+:[0-9]{1,5}", a.dist_init_addr):
        raise ValueError(f"dist_init_addr must be host:port, not {a.dist_init_addr!r}")
    if a.tp_size > 1:
        for flag, on in (("--dp-size > 1", a.dp_size > 1), ("--kv-disk-dir", a.kv_disk_dir),
                         ("--kv-host-size", a.kv_host_size), ("--deterministic", a.deterministic)):
            if on:
                raise ValueError(f"--tp-size > 1 does not work with {flag} yet")


def _check_low_precision(a: ServerArgs) -> None:
    for flag, on in ((f"--quantization {a.quantization}", a.quantization != "none"),
                     ("--kv-cache-dtype fp8_e4m3", a.kv_cache_dtype != "auto")):
        if on and a.tp_size > 1:
            raise ValueError(f"{flag} does not work with --tp-size > 1 yet (the shards load dense weights)")
        if on and a.deterministic:
            raise ValueError(f"{flag} does not work with --deterministic (its batch-invariant kernels are dense)")
    if a.kv_cache_dtype != "auto" and (a.kv_disk_dir or a.kv_host_size):
        raise ValueError("--kv-cache-dtype fp8_e4m3 does not work with --kv-disk-dir or --kv-host-size yet (the tiers "
                         "copy blocks of the model dtype)")


def parse_size(text, option: str = "kv_disk_size") -> int:
    """'16G', '512M', '1.5T', '4096' -> bytes (binary units); ValueError naming the option otherwise."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)i?B?\s*", str(text), re.I)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{option} must be a positive size such as 16G or 512M, not {text!r}")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def field_help() -> dict:
    """Each field's meaning: the comment after it in ServerArgs's source."""
    source = inspect.getsource(ServerArgs)
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^    (\w+): [^\n]*?  # ([^\n]*)$", source, re.M)}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    meaning = field_help()
    for f in fields(ServerArgs):
        flag = "--" + f.name.replace("_", "-")
        text = meaning.get(f.name, f.name.replace("_", " ")).replace("%", "%%")
        if f.type in (bool, "bool"):
            aliases = ["--" + ALIASES[f.name].replace("_", "-")] if f.name in ALIASES else []
            parser.add_argument(flag, *aliases, action="store_true", default=f.default, help=f"{text} (default: off)")
            continue
        args = [a for a in typing.get_args(f.type) if a is not type(None)]
        kind = args[0] if args else f.type
        default = "unset" if f.default is None else f.default
        parser.add_argument(flag, type=kind, default=f.default, choices=CHOICES.get(f.name),
                            help=f"{text} (default: {default})")


def from_cli(ns: argparse.Namespace) -> ServerArgs:
    return ServerArgs(**{f.name: getattr(ns, f.name) for f in fields(ServerArgs)})
