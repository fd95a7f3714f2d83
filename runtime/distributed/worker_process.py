"""Entry of a tp worker (a rank > 0): build this rank's shard of the model, then replay rank 0's steps.

Started by the launcher as `python -m radixlm.runtime.child tp_worker CONFIG_JSON`; it exits with its
parent, when rank 0 sends STOP (code 0) or when a peer's connection is lost (code 1).
"""

import logging
import os
import signal
import sys

logger = logging.getLogger(__name__)


def run_tp_worker_process(config: dict, ready) -> None:
    """config: {'model', 'runner' (ModelRunner kwargs with 'tp'), 'log_level', 'num_threads'}."""
    from radixlm.runtime.logging_setup import setup_logging
    from radixlm.runtime.scheduler.process import exit_with_parent

    rank = config["runner"]["tp"]["rank"]
    setup_logging(config["log_level"], f"tp-worker-{rank}")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    try:
        import torch

        from radixlm.runtime.distributed.step_sync import run_worker_steps
        from radixlm.runtime.runner.model_runner import ModelRunner

        torch.set_num_threads(config.get("num_threads") or os.cpu_count() or 1)
        runner = ModelRunner(config["model"], **config["runner"])
    except Exception as exc:
        logger.exception("tp worker %d failed to start", rank)
        ready({"status": "error", "error": f"{type(exc).__name__}: {exc}"})
        sys.exit(1)
    ready({"status": "ready", "info": {"rank": rank, "max_total_num_tokens": runner.num_slots}})
    code = run_worker_steps(runner)
    logging.shutdown()
    os._exit(code)
