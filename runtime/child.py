"""Entry point of the scheduler, detokenizer and tp worker processes: `python -m radixlm.runtime.child ROLE CONFIG_JSON`.

Started as fresh interpreters (never fork, never re-import the user's __main__).  Each reports
readiness by writing CONFIG_JSON's "ready_file" atomically.
"""

import json
import os
import sys


def _write_ready(path: str):
    def ready(payload: dict) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(payload, f)
        os.replace(tmp, path)
    return ready


def main() -> None:
    role, config_path = sys.argv[1], sys.argv[2]
    with open(config_path) as f:
        config = json.load(f)
    if role == "scheduler":
        from radixlm.runtime.scheduler.process import run_scheduler_process
        run_scheduler_process(config["parts"], config["addrs"], _write_ready(config["ready_file"]))
    elif role == "detokenizer":
        from radixlm.runtime.scheduler.process import exit_with_parent
        from radixlm.runtime.server.detokenizer import run_detokenizer_process
        exit_with_parent()
        run_detokenizer_process(config["model_path"], config["addrs"], config["log_level"],
                                _write_ready(config["ready_file"]))
    elif role == "tp_worker":
        from radixlm.runtime.distributed.worker_process import run_tp_worker_process
        run_tp_worker_process(config, _write_ready(config["ready_file"]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
