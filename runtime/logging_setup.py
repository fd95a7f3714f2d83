"""One short log format for all three processes."""

import logging


def setup_logging(level: str = "info", process: str = "main") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format=f"[%(asctime)s {process}] %(message)s", datefmt="%H:%M:%S", force=True)
