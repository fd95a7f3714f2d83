"""SGLang's /v1/loads body (runtime/sglang_routes.loads_payload), the route the gateway `smg` polls.
Oracles: the `core` keys and section names of SGLang's LoadSnapshot in the installed sglang package
(read with ast), hand-computed values from a scheduler_info dict, and smg's own reading of the body
(the sum of num_total_tokens over ranks)."""

import ast
import importlib.util
import pathlib

import pytest
from sglang_schema import sglang_fields

from radixlm.runtime.api.errors import APIError
from radixlm.runtime.server.sglang_routes import LOAD_SECTIONS, loads_payload

SNAPSHOT = "srt/managers/load_snapshot.py"


def _frozenset_assigned(name: str, inside: str = None) -> set:
    """The frozenset({...}) literal assigned to `name` in SGLang's load_snapshot.py (in class `inside`)."""
    root = pathlib.Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
    tree = ast.parse((root / SNAPSHOT).read_text())
    scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == inside) if inside else tree
    for node in scope.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return set(ast.literal_eval(node.value.args[0]))
    raise AssertionError(f"{name} not found in {SNAPSHOT}")


INFO = {"max_total_num_tokens": 1000, "used_slots": 300, "evictable_slots": 100, "num_running_reqs": 2,
        "num_waiting_reqs": 3, "max_running_requests": 128, "cached_prompt_tokens": 30, "prefill_tokens": 90}


def test_core_keys_are_sglangs():
    sections = _frozenset_assigned("_SECTION_FIELDS")
    core = [k for k in sglang_fields(SNAPSHOT, "LoadSnapshot") if k not in sections]
    body = loads_payload(INFO, "core")
    assert list(body["loads"][0]) == core
    assert set(body) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}


def test_values_from_the_scheduler_state():
    load = loads_payload(INFO)["loads"][0]
    assert (load["dp_rank"], load["num_running_reqs"], load["num_waiting_reqs"]) == (0, 2, 3)
    assert load["num_used_tokens"] == load["num_total_tokens"] == 200        # evictable cache is free
    assert load["token_usage"] == 0.2 and load["cache_hit_rate"] == 0.25
    assert load["max_total_num_tokens"] == 1000 and load["total_prefill_uncached_tokens"] == 90


def test_one_entry_per_replica_and_smgs_sum():
    infos = [{**INFO, "used_slots": 100 + 50 * r, "evictable_slots": 0} for r in range(2)]
    body = loads_payload({"replicas": infos})
    assert [x["dp_rank"] for x in body["loads"]] == [0, 1]
    assert sum(x["num_total_tokens"] for x in body["loads"]) == 250           # what smg routes on
    (one,) = loads_payload({"replicas": infos}, dp_rank=1)["loads"]
    assert {**one, "timestamp": 0} == {**body["loads"][1], "timestamp": 0}


def test_sections_are_sglangs_and_bad_ones_refused():
    assert LOAD_SECTIONS == _frozenset_assigned("VALID_SECTIONS", inside="LoadSnapshot")
    assert loads_payload(INFO, "core,queues,all")["loads"]
    with pytest.raises(APIError) as err:
        loads_payload(INFO, "core,bogus")
    assert err.value.status == 400 and "bogus" in err.value.message
    with pytest.raises(APIError):
        loads_payload(INFO, dp_rank=1)

