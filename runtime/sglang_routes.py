"""The routes SGLang's gateway and tools probe, in SGLang's shapes: /get_load, /version, and the
bodies of /model_info and /server_info (http_server.py registers those two)."""

import dataclasses
import functools
import json
import pathlib

from radixlm.runtime.http_common import json_response


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


def add_sglang_routes(app, state, scheduler_info) -> None:
    """scheduler_info(state) -> awaitable dict of the scheduler's live state."""

    @app.get("/get_load")
    async def get_load():
        return json_response(load_payload(await scheduler_info(state)))

    @app.get("/version")
    async def version():
        return json_response({"version": _version()})
