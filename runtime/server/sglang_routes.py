"""The routes SGLang's gateway and tools probe, in SGLang's shapes: /get_load, /v1/loads (the one the
gateway `smg` polls), /version, and the bodies of /model_info and /server_info (http_server.py
registers those two)."""

import dataclasses
import datetime
import functools
import json
import pathlib
import time
from typing import Optional

from radixlm.runtime.api.errors import APIError
from radixlm.runtime.api.http import json_response

LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})


@functools.lru_cache(maxsize=4)
def _hf_config(model_path: str) -> dict:
    try:
        return json.loads((pathlib.Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _version() -> str:
    from radixlm import __version__
    return __version__


def model_info_payload(state) -> dict:
    """SGLang's /model_info keys (model_path, tokenizer_path, is_generation, ...) plus context_length."""
    info = _hf_config(str(state.model_path))
    return {"model_path": state.model_path, "tokenizer_path": state.model_path, "is_generation": True,
            "served_model_name": state.served_model_name, "preferred_sampling_params": None,
            "weight_version": "default", "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": info.get("model_type"), "architectures": info.get("architectures"),
            "context_length": state.tm.context_len}


def server_info_payload(state, scheduler_info: dict) -> dict:
    """The server's options and the scheduler's live state, flat (radixlm's clients read these) and as
    SGLang's `internal_states` (one entry per data-parallel rank)."""
    args = {k: v for k, v in dataclasses.asdict(state.args).items() if k != "api_key"}
    ranks = [dict(r) for r in scheduler_info.get("replicas", [scheduler_info])]
    return {**args, **scheduler_info, "internal_states": ranks, "version": _version(),
            "model_path": state.model_path, "tokenizer_path": state.model_path,
            "served_model_name": state.served_model_name, "frontend": "python"}


def load_payload(scheduler_info: dict) -> list:
    """SGLang's /get_load: one entry per data-parallel rank."""
    out = []
    for rank, info in enumerate(scheduler_info.get("replicas", [scheduler_info])):
        running, waiting = info.get("num_running_reqs", 0), info.get("num_waiting_reqs", 0)
        used = info.get("used_slots", 0) - info.get("evictable_slots", 0)
        out.append({"dp_rank": rank, "num_reqs": running + waiting, "num_waiting_reqs": waiting,
                    "num_tokens": max(used, 0)})
    return out


def _rank_load(rank: int, info: dict, now: float) -> dict:
    total = info.get("max_total_num_tokens", 0)
    used = max(info.get("used_slots", 0) - info.get("evictable_slots", 0), 0)
    cached, uncached = info.get("cached_prompt_tokens", 0), info.get("prefill_tokens", 0)
    return {"timestamp": now, "dp_rank": rank, "num_running_reqs": info.get("num_running_reqs", 0),
            "num_waiting_reqs": info.get("num_waiting_reqs", 0), "num_waiting_uncached_tokens": 0,
            "num_used_tokens": used, "num_total_tokens": used, "num_active_tokens": used,
            "num_prealloc_ready_tokens": 0, "max_total_num_tokens": total,
            "max_running_requests": info.get("max_running_requests", 0),
            "token_usage": round(used / total, 4) if total else 0.0, "gen_throughput": 0.0,
            "cache_hit_rate": round(cached / (cached + uncached), 4) if cached + uncached else 0.0,
            "utilization": 0.0, "total_prefill_uncached_tokens": uncached, "total_prefill_busy_us": 0,
            "decode_moments": None}


def loads_payload(scheduler_info: dict, include=None, dp_rank=None) -> dict:
    """SGLang's GET /v1/loads (sglang 0.5.23, srt/entrypoints/v1_loads.py), JSON only: one entry of the
    `core` keys per data-parallel rank. `include` is SGLang's comma-separated section list; the
    sections other than core (memory, spec, lora, disagg, queues) have no data here and are left out,
    as SGLang leaves out a section it has nothing for. Approximations: num_used_tokens is the KV held
    by requests (cached prefixes that can be evicted are free, as in SGLang); num_total_tokens and
    num_active_tokens equal it (SGLang adds the waiting requests' prompt tokens, which the scheduler
    does not report); the gauges radixlm does not measure (gen_throughput, utilization,
    num_waiting_uncached_tokens, total_prefill_busy_us) are 0. A bad section or dp_rank is a 400."""
    if include is not None:
        sections = {s.strip() for s in include.split(",")}
        if not sections <= LOAD_SECTIONS:
            raise APIError(400, f"invalid include section(s): {sorted(sections - LOAD_SECTIONS)}; valid: "
                                f"{sorted(LOAD_SECTIONS)}", param="include")
    ranks = scheduler_info.get("replicas", [scheduler_info])
    now = time.time()
    loads = [_rank_load(rank, info, now) for rank, info in enumerate(ranks)]
    if dp_rank is not None:
        if not (isinstance(dp_rank, int) and 0 <= dp_rank < len(loads)):
            raise APIError(400, f"dp_rank must be in [0, {len(loads)})", param="dp_rank")
        loads = [loads[dp_rank]]
    return {"timestamp": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(),
            "version": _version(), "accelerator": None, "num_accelerators": 1, "loads": loads}


def add_sglang_routes(app, state, scheduler_info) -> None:
    """scheduler_info(state) -> awaitable dict of the scheduler's live state."""

    @app.get("/get_load")
    async def get_load():
        return json_response(load_payload(await scheduler_info(state)))

    @app.get("/v1/loads")
    async def v1_loads(include: Optional[str] = None, dp_rank: Optional[int] = None,
                       format: Optional[str] = None):   # noqa: A002 (SGLang's parameter name)
        if format not in (None, "json"):
            raise APIError(400, "format: only 'json' is served here", param="format")
        return json_response(loads_payload(await scheduler_info(state), include, dp_rank))

    @app.get("/version")
    async def version():
        return json_response({"version": _version()})
