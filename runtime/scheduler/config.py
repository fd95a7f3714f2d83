"""The scheduler's own settings (only the values it uses)."""

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class SchedulerConfig:
    max_running_requests: int = 256
    max_prefill_tokens: int = 4096
    chunked_prefill_size: int = 1024       # <= 0: no chunking
    schedule_policy: str = "lpm"
    schedule_age_limit: int = 256          # scheduler steps a request may wait before it goes first
    disable_radix_cache: bool = False
    page_size: int = 1
    check_ledger: bool = False             # tests: prove the KV ledger after every step
    new_token_ratio: float = 0.5           # share of max_new_tokens reserved for running requests at admission
    grammar_backend: str = "xgrammar"      # xgrammar, llguidance, auto, none (constrained requests are refused)
    grammar_timeout: float = 5.0           # wall-clock seconds a grammar may take to compile
    disable_jump_forward: bool = False     # append grammar-forced text without decode steps unless set
    json_unbounded_numbers: bool = False   # JSON numbers without the grammar's default digit bounds
    json_indent: int = 2                   # JSON-schema grammars (XGrammar): one value per line, this indent (0: compact)
    kv_disk_dir: Optional[str] = None      # disk tier folder (None: no disk tier)
    kv_disk_size: str = "16G"              # its size bound (server_args.parse_size)
    kv_disk_block: int = 64                # tokens per disk (and host) block
    kv_disk_write_policy: str = "write_through"   # write_through (on insert) or write_back (reused blocks, on eviction)
    kv_host_size: Optional[str] = None     # host tier size bound (server_args.parse_size; None: no host tier)
    kv_host_on_cpu: bool = False           # tests/dev: allow a host tier although the KV pool is in host memory
    speculative_algorithm: Optional[str] = None   # ngram, or None: no speculative decoding
    speculative_num_draft_tokens: int = 8          # draft tokens per request and step at most
    speculative_max_step_tokens: int = 32          # a step's decodes plus drafts stay within this many tokens
    overlap_schedule: bool = False         # plan and stage step N+1 while the device runs step N
