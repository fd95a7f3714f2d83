"""Control replies of several replicas merged into the server's answer.  Oracle: hand-computed sums
of two replicas' server_info, and a flush that succeeds only when every replica flushed."""

from radixlm.runtime import io_struct as io
from radixlm.runtime.dp.control import merge_replies


def info(running, tree, steps, seconds):
    return {"max_total_num_tokens": 2048, "tree_slots": tree, "num_running_reqs": running, "steps": steps,
            "forward_seconds": seconds, "context_length": 256, "page_size": 1, "max_running_requests": 128,
            "schedule_policy": "lpm", "disable_radix_cache": False}


def test_server_info_sums_counts_and_lists_each_replica():
    a, b = info(2, 100, 10, 0.5), info(1, 30, 4, 0.25)
    out = merge_replies("server_info", [io.ControlOut(kind="server_info", info=a),
                                         io.ControlOut(kind="server_info", info=b, replica=1)]).info
    assert (out["max_total_num_tokens"], out["tree_slots"], out["num_running_reqs"], out["steps"]) == (4096, 130, 3, 14)
    assert out["forward_seconds"] == 0.75
    assert (out["context_length"], out["page_size"], out["max_running_requests"]) == (256, 1, 128)   # settings
    assert out["schedule_policy"] == "lpm" and out["disable_radix_cache"] is False
    assert out["replicas"] == [{**a, "dp_rank": 0}, {**b, "dp_rank": 1}]


def test_flush_succeeds_only_if_every_replica_flushed():
    ok = io.ControlOut(kind="flush_cache", success=True, message="cache flushed")
    busy = io.ControlOut(kind="flush_cache", success=False, message="cache is in use", replica=1)
    assert merge_replies("flush_cache", [ok, ok]).success
    out = merge_replies("flush_cache", [ok, busy])
    assert not out.success and out.message == "replica 1: cache is in use"
    assert merge_replies("flush_cache", [busy]) is busy          # one replica: its own reply
