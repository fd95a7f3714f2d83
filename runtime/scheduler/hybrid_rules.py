"""What the scheduler changes for a model with a recurrent state per request (gated delta-net hybrids:
models/gated_delta_net.py).  A row's state covers exactly the tokens whose KV the request holds, and cannot be
rebuilt from the KV pool, so no request may start from another's cached prefix (the radix cache stores nothing), and
none may take back KV it computed: no speculative decoding (rejected drafts), no overlap schedule (forced text may
undo the token a step in flight fed), no host or disk tier (they bring prefixes back)."""

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
    if not config.disable_radix_cache or config.overlap_schedule:
        logger.info("%s keeps a recurrent state per request: prefix caching and the overlap schedule are off", name)
    return dataclasses.replace(config, disable_radix_cache=True, overlap_schedule=False)
