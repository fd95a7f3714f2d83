"""Wires the processes: the only place that sees the whole ServerArgs.

launch_backend(args) resolves the model (a GGUF is converted once, here), starts the scheduler
(model, KV, radix tree) and the detokenizer side by side as fresh Python processes talking over
ipc:// sockets in a private folder, waits until both are ready, and returns a Backend that the
Engine or the HTTP server builds a TokenizerManager on.  With --dp-size N there are N schedulers
("scheduler-0" ...), each with its own inbox, all pushing to the one detokenizer.  With --tp-size N the
scheduler is rank 0 and this node's other ranks are "tp-worker-R" children of their own (distributed/).
"""

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import time

from radixlm.runtime.distributed.topology import plan_topology
from radixlm.runtime.ipc import ipc_addresses, make_ipc_dir, remove_stale_ipc_dirs
from radixlm.runtime.scheduler.config import SchedulerConfig
from radixlm.runtime.server import device_defaults

logger = logging.getLogger(__name__)
STARTUP_TIMEOUT_S = 900


def sized_defaults(args, model_path: str = None, device: device_defaults.DeviceFacts = None) -> dict:
    """{name: Chosen} for the options sized by the device (device_defaults.NAMES): the user's value where
    given, else chosen from the device (probed when not given) and, on CUDA, the model's sizes per GPU."""
    device = device or device_defaults.probe_device()
    explicit = {name: getattr(args, name) for name in (*device_defaults.NAMES, "max_total_tokens")}
    if device.kind != "cuda":
        return device_defaults.choose_defaults(device.kind, None, 0, 0, explicit)
    if model_path is None:
        from radixlm.runtime.model_paths import resolve_model_path
        model_path = str(resolve_model_path(args.model))
    weights, kv_per_token = device_defaults.model_sizes(model_path, args.dtype, "cuda", args.quantization,
                                                        args.kv_cache_dtype)
    shards = args.tp_size          # each tp rank holds its share of the weights and of every token's KV heads
    total = device.total_bytes // args.dp_size if device.total_bytes else None   # dp replicas share the GPU
    return device_defaults.choose_defaults("cuda", total, weights // shards, kv_per_token // shards, explicit,
                                           gpu_name=device.name)


def scheduler_parts(args, model_path: str = None, device: device_defaults.DeviceFacts = None) -> dict:
    """device: the device facts (default: probed); model_path: the resolved folder (read on CUDA only)."""
    sched_fields = {f.name for f in dataclasses.fields(SchedulerConfig)}
    local_procs = args.dp_size * (args.tp_size // args.nnodes)     # model processes sharing this node's cores
    device = device or device_defaults.probe_device()
    chosen = sized_defaults(args, model_path, device)
    # overlap scheduling: on by default on CUDA; on the CPU the host and the "device" are the same cores
    # (RADIXLM_ENABLE_OVERLAP=1: on everywhere, so the whole suite can run with it)
    overlap = not args.disable_overlap_schedule and (
        args.enable_overlap_schedule or os.environ.get("RADIXLM_ENABLE_OVERLAP") == "1" or device.kind == "cuda")
    sized = {name: c.value for name, c in chosen.items()}
    return {
        "model": args.model,
        "log_level": args.log_level,
        "log_interval": args.log_interval,
        "num_threads": args.num_threads or (max(1, (os.cpu_count() or 1) // local_procs) if local_procs > 1
                                            else None),
        "thread_policy": "fixed" if args.deterministic or args.tp_size > 1 else args.thread_policy,
        "runner": {
            "dtype": args.dtype, "max_total_tokens": args.max_total_tokens, "mem_fraction": sized["mem_fraction"],
            "num_rows": sized["max_running_requests"] + 8, "attention_backend": args.attention_backend,
            "context_length": args.context_length, "deterministic": args.deterministic,
            "disable_cuda_graph": args.disable_cuda_graph, "cuda_graph_max_bs": sized["cuda_graph_max_bs"],
            "load_format": None if args.load_format == "auto" else args.load_format,
            "quantization": args.quantization if args.quantization == "fp8" else None,
            "kv_cache_dtype": args.kv_cache_dtype, "gguf": _gguf_to_keep(args),
            "state_snapshots": 0 if args.disable_radix_cache else None,
        },
        "scheduler": {k: v for k, v in dataclasses.asdict(args).items() if k in sched_fields}
        | {k: sized[k] for k in ("max_running_requests", "chunked_prefill_size")}
        | {"kv_host_on_cpu": os.environ.get("RADIXLM_KV_HOST_ON_CPU") == "1",   # tests/dev: a host tier on CPU
           "overlap_schedule": overlap},
        "device_defaults": device_defaults.as_info(chosen),   # what was chosen and why (server info, the log)
    }


def _gguf_to_keep(args):
    """The .gguf file whose weights stay quantized (--quantization gguf), else None; ValueError when the model is
    not a GGUF or runs on more than one rank."""
    if args.quantization != "gguf":
        return None
    from radixlm.runtime.model_paths import gguf_file

    path = gguf_file(args.model)
    if path is None:
        raise ValueError(f"--quantization gguf needs a .gguf model (or the default alias), not {args.model!r}")
    if args.tp_size > 1:
        raise ValueError("--quantization gguf does not work with --tp-size > 1 yet")
    return str(path)


class Backend:
    """The scheduler and detokenizer processes; stop() ends both (and is safe to call twice)."""

    def __init__(self, procs: dict, info: dict, addrs: dict, ipc_dir: str):
        self.procs, self.info, self.addrs, self.ipc_dir = procs, info, addrs, ipc_dir

    def dead_child(self):
        """Name of a child process that has exited, or None."""
        for name, p in self.procs.items():
            if p.poll() is not None:
                return name
        return None

    def stop(self, timeout: float = 5.0) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for name, p in self.procs.items():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("the %s did not stop within %g s of SIGTERM: killed", name, timeout)
                p.kill()
                p.wait()
            if name.startswith("scheduler") and p.returncode != 0:   # it drains its disk writes, then exits 0
                logger.warning("the %s exited with code %s", name, p.returncode)
        shutil.rmtree(self.ipc_dir, ignore_errors=True)


def _spawn(role: str, config: dict, ipc_dir: str, name: str = None) -> subprocess.Popen:
    path = os.path.join(ipc_dir, f"{name or role}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return subprocess.Popen([sys.executable, "-m", "radixlm.runtime.child", role, path])


def launch_backend(args) -> Backend:
    from radixlm.runtime.model_paths import resolve_model_path

    try:
        model_path = str(resolve_model_path(args.model))
    except FileNotFoundError as exc:
        raise RuntimeError(f"the scheduler failed to start: {exc}") from None
    if args.node_rank > 0:
        raise ValueError("--node-rank > 0 runs only tp workers: start it with `radixlm serve`, not an Engine")
    topology = plan_topology(args, model_path) if args.tp_size > 1 else None
    for stale in remove_stale_ipc_dirs():
        logger.info("removed the IPC folder of a dead server: %s", stale)
    ipc_dir = make_ipc_dir()
    addrs = ipc_addresses(ipc_dir, args.dp_size)
    schedulers = ["scheduler"] if args.dp_size == 1 else [f"scheduler-{i}" for i in range(args.dp_size)]
    ready = {name: os.path.join(ipc_dir, f"{name}.ready") for name in (*schedulers, "detokenizer")}
    device = device_defaults.probe_device()
    parts = {**scheduler_parts(args, model_path, device), "model": model_path}
    logger.info("%s", device_defaults.log_line(parts["device_defaults"], device.kind, device.name, device.total_bytes))
    if topology:
        parts["runner"]["tp"] = topology.rank_config(0)
    procs, workers = {}, []
    backend = Backend(procs, {}, addrs, ipc_dir)
    try:
        if topology:
            workers = spawn_tp_workers(args, parts, topology, ipc_dir, procs, ready)
        for rank, name in enumerate(schedulers):
            procs[name] = _spawn("scheduler", {"parts": {**parts, "dp_rank": rank},
                                               "addrs": {**addrs, "scheduler": addrs["replicas"][rank]},
                                               "ready_file": ready[name]}, ipc_dir, name)
        procs["detokenizer"] = _spawn("detokenizer", {"model_path": model_path, "addrs": addrs,
                                                      "log_level": args.log_level,
                                                      "ready_file": ready["detokenizer"]}, ipc_dir)
        infos = []
        for name in (*schedulers, "detokenizer", *workers):
            status = _wait_ready(name, procs[name], ready[name], procs)
            if status["status"] != "ready":
                raise RuntimeError(f"the {name} failed to start: {status.get('error')}")
            if name in schedulers:
                infos.append(status["info"])
        backend.info = {**(infos[0] if len(infos) == 1 else replicas_info(args, infos)),
                        **sized_info(parts["device_defaults"])}
    except BaseException:
        backend.stop()
        raise
    return backend


def spawn_tp_workers(args, parts: dict, topology, ipc_dir: str, procs: dict, ready: dict) -> list:
    """Starts this node's tp worker ranks (all but rank 0) into procs; -> their names (ready files added)."""
    names = []
    for rank in topology.local_ranks:
        if rank == 0:
            continue
        name = f"tp-worker-{rank}"
        ready[name] = os.path.join(ipc_dir, f"{name}.ready")
        runner = {**parts["runner"], "tp": topology.rank_config(rank)}
        procs[name] = _spawn("tp_worker", {"model": parts["model"], "runner": runner, "log_level": args.log_level,
                                           "num_threads": parts["num_threads"], "ready_file": ready[name]},
                             ipc_dir, name)
        names.append(name)
    return names


def check_tp_model(args) -> None:
    """ValueError when --tp-size does not split the model's heads (before anything starts)."""
    from radixlm.runtime.distributed.topology import check_heads
    from radixlm.runtime.model_paths import resolve_model_path

    check_heads(str(resolve_model_path(args.model)), args.tp_size, args.ep_size)


def run_tp_node(args) -> int:
    """--node-rank > 0: run this node's tp workers until they end (rank 0 on node 0 stops them); their exit code."""
    from radixlm.runtime.model_paths import resolve_model_path

    model_path = str(resolve_model_path(args.model))
    topology = plan_topology(args, model_path)
    ipc_dir = make_ipc_dir()
    parts = {**scheduler_parts(args, model_path), "model": model_path}
    procs, ready = {}, {}
    backend = Backend(procs, {}, {}, ipc_dir)
    try:
        spawn_tp_workers(args, parts, topology, ipc_dir, procs, ready)
        while backend.dead_child() is None:
            time.sleep(0.2)
        return max(p.returncode for p in procs.values() if p.poll() is not None)
    finally:
        backend.stop()


def sized_info(chosen: dict) -> dict:
    """The server info's part from the launch: each device-sized option's value, and under "device_defaults"
    each one's value and reason."""
    return {**{name: c["value"] for name, c in chosen.items()}, "device_defaults": chosen}


def replicas_info(args, infos: list) -> dict:
    """The ready info of N replicas: the first's, with the KV size of the smallest (a request must fit
    whichever replica gets it), each replica's under "replicas", and the router's options."""
    return {**infos[0], "max_total_num_tokens": min(i["max_total_num_tokens"] for i in infos), "replicas": infos,
            "dp_router": {"page_size": args.page_size, "abs_threshold": args.dp_balance_abs_threshold,
                          "rel_threshold": args.dp_balance_rel_threshold,
                          "disable_cache": any(i.get("disable_radix_cache", args.disable_radix_cache) for i in infos)}}


def _wait_ready(role: str, proc, ready_file: str, peers: dict = None) -> dict:
    """peers: the other children; one that exits first fails the start too (a tp rank waits for all ranks)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if os.path.exists(ready_file):
            with open(ready_file) as f:
                return json.load(f)
        if proc.poll() is not None:
            return {"status": "error", "error": f"the {role} process exited with code {proc.returncode}"}
        dead = next((name for name, p in (peers or {}).items() if p.poll() is not None), None)
        if dead:
            return {"status": "error", "error": f"the {dead} process exited with code {peers[dead].returncode}"}
        time.sleep(0.05)
    return {"status": "error", "error": f"timed out while starting the {role}"}
