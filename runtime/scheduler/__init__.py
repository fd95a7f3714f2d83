"""The scheduler process's decisions in plain Python: requests, queue policy, the step's plan, KV management, the disk and host tiers, finish checks, outputs and counters."""
