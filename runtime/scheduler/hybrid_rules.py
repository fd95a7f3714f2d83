"""What the scheduler changes for a model with a recurrent state per request (gated delta nets, Mamba-2 mixers,
short convolutions: models/recurrent_state.py).  A row's state covers exactly the tokens whose KV the request holds,
and cannot be rebuilt from the KV pool: a request starts from a cached prefix only where the tree kept the state after
it (radix_cache/state_snapshots.py), and none may take back KV it computed: no speculative decoding (rejected
drafts), no host or disk tier (they bring prefixes back without their states).  The overlap schedule keeps only plain
decodes in flight for them (launcher.py)."""

import dataclasses
import logging

logger = logging.getLogger(__name__)


def scheduler_config_for(config, runner):
    """config (SchedulerConfig) as the runner's model can run it; ValueError for a setting it cannot."""
    if not getattr(runner, "recurrent_state", False):
        return config
    name = type(runner.model).__name__
    refused = [flag for flag, on in (("--speculative-algorithm", config.speculative_algorithm),
                                     ("--kv-disk-dir", config.kv_disk_dir), ("--kv-host-size", config.kv_host_size))
               if on]
    if refused:
        raise ValueError(f"{name} keeps a recurrent state per request, which {', '.join(refused)} would need to "
                         "rewind or rebuild: not supported")
    if not config.disable_radix_cache and not getattr(runner, "state_snapshot_slots", ()):
        logger.info("%s keeps a recurrent state per request and the runner keeps no snapshots of it: prefix caching "
                    "is off", name)
        config = dataclasses.replace(config, disable_radix_cache=True)
    return config
