"""Scheduler process entry: load the model, then loop recv -> schedule -> forward -> send."""

import gc
import logging
import os
import signal
import threading
import time

logger = logging.getLogger(__name__)


def exit_with_parent() -> None:
    """A child whose parent died exits instead of lingering as an orphan."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def run_scheduler_process(parts: dict, addrs: dict, ready) -> None:
    """parts: {'runner': {...}, 'scheduler': SchedulerConfig fields, 'log_level', 'log_interval', 'num_threads',
    'thread_policy' (adaptive or fixed), 'dp_rank' (which data-parallel replica this is; its control replies say so)}."""
    from radixlm.runtime.logging_setup import setup_logging

    rank = parts.get("dp_rank", 0)
    setup_logging(parts["log_level"], f"scheduler-{rank}" if rank else "scheduler")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    try:
        if parts["scheduler"].get("grammar_backend", "xgrammar") == "xgrammar":
            from radixlm.constrained.compile_pool import prespawn_worker
            prespawn_worker()
        import torch
        import zmq
        from transformers import AutoTokenizer

        from radixlm.runtime.ipc import ReplicaOutbox, ZmqInbox
        from radixlm.runtime.models.loader import resolve_model_path
        from radixlm.runtime.runner.model_runner import ModelRunner
        from radixlm.runtime.scheduler.config import SchedulerConfig
        from radixlm.runtime.scheduler.progress_log import ProgressLog
        from radixlm.runtime.scheduler.scheduler import Scheduler
        from radixlm.runtime.scheduler.thread_governor import ThreadGovernor

        threads = parts.get("num_threads") or os.cpu_count() or 1
        torch.set_num_threads(threads)
        model_path = str(resolve_model_path(parts["model"]))
        runner = ModelRunner(model_path, **parts["runner"])
        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
        ctx = zmq.Context()
        scheduler = Scheduler(SchedulerConfig(**parts["scheduler"]), runner, tokenizer,
                              ZmqInbox(ctx, addrs["scheduler"], "scheduler"),
                              ReplicaOutbox(ctx, addrs["detokenizer"], rank))
        ProgressLog(scheduler, parts.get("log_interval", 5.0)).attach()
        if parts.get("thread_policy", "fixed") == "adaptive" and threads > 1:
            ThreadGovernor(threads, torch.set_num_threads).attach(scheduler)
        if scheduler.grammar_queue is not None:
            # ready only once the worker's start-up is over: its CPU burst would stall the first requests' steps
            # (a worker that fails to start is logged and started again at first use; the server still starts)
            from concurrent.futures import wait

            from radixlm.constrained.compile_pool import STARTUP_TIMEOUT_S
            wait([scheduler.grammar_queue.backend.pool.warm()], timeout=STARTUP_TIMEOUT_S)
        freeze_startup_objects()
        if os.environ.get("RADIXLM_CUDA_SYNC_DEBUG") == "1" and str(runner.device).startswith("cuda"):
            # every call site that makes the host wait for the device from here on: a warning, once each
            torch.cuda.set_sync_debug_mode("warn")
    except Exception as exc:
        logger.exception("scheduler failed to start")
        ready({"status": "error", "error": f"{type(exc).__name__}: {exc}"})
        return
    ready({"status": "ready", "info": {
        "model_path": model_path, "context_length": runner.context_len, "vocab_size": runner.vocab_size,
        "max_total_num_tokens": runner.num_slots, "dtype": str(runner.dtype).replace("torch.", ""),
        "device": runner.device, "architecture": runner.config.architecture,
        "cuda_graph_batch_sizes": sorted(runner.decode_graphs.graphs) if runner.decode_graphs else [],
        "disable_radix_cache": scheduler.config.disable_radix_cache,   # hybrid_rules.py may turn it off
    }})
    # SIGTERM (Backend.stop(), also on Ctrl-C of the server): stop taking work, let the disk tier's writer
    # finish what is queued (bounded), exit 0
    signal.signal(signal.SIGTERM, lambda signum, frame: scheduler.request_stop())
    scheduler.run_forever()
    scheduler.shutdown()
    if runner.tp_leader is not None:
        runner.tp_leader.stop()   # tp workers (on other nodes too) end with code 0
    logger.info("stopped")
    logging.shutdown()
    os._exit(0)   # daemon threads and ZMQ sockets need no teardown; a blocking one must not hold the exit


def freeze_startup_objects() -> None:
    """Everything built at start (model, tokenizer, grammar compiler, ...) leaves the garbage collector's view:
    a full collection would otherwise walk it all, a pause of tens of milliseconds in some step (measured with
    bench/step_host.py: batch 256 about 1.5x faster on average with it).  Requests' objects are still collected."""
    gc.collect()
    gc.freeze()
