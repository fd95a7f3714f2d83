"""Control replies of N data-parallel scheduler replicas merged into one (plain Python, no torch).

The front sends FlushCacheReq and GetServerInfoReq to every replica and waits for every answer:
server_info sums the counts (tokens, slots, requests, steps, seconds) and lists each replica's own
under "replicas"; a flush succeeds only if every replica flushed.
"""

from radixlm.runtime import io_struct as io

# Numbers that are settings, the same in every replica: taken from the first, never summed.
SETTINGS = frozenset({"context_length", "page_size", "chunked_prefill_size", "max_running_requests",
                      "disk_block_size"})


def merge_server_info(infos: list) -> dict:
    out = {}
    for key, value in infos[0].items():
        summed = isinstance(value, (int, float)) and not isinstance(value, bool) and key not in SETTINGS
        out[key] = sum(i.get(key, 0) for i in infos) if summed else value
    if "moe_expert_tokens" in out:   # {layer: [tokens per expert]}: summed expert by expert
        out["moe_expert_tokens"] = {layer: [sum(col) for col in zip(*(i["moe_expert_tokens"][layer] for i in infos))]
                                    for layer in out["moe_expert_tokens"]}
    out["replicas"] = [{**info, "dp_rank": rank} for rank, info in enumerate(infos)]
    return out


def merge_replies(kind: str, outs: list) -> io.ControlOut:
    """One ControlOut from each replica's (in rank order) -> the answer of the whole server."""
    if len(outs) == 1:
        return outs[0]
    if kind == "server_info":
        return io.ControlOut(kind=kind, info=merge_server_info([o.info for o in outs]))
    failed = [f"replica {o.replica}: {o.message}" for o in outs if not o.success]
    message = "; ".join(failed) if failed else outs[0].message
    return io.ControlOut(kind=kind, success=not failed, message=message)
