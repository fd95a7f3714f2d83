"""How the HTTP server knows the backend is alive, and how it ends in-flight requests on shutdown.

    watchdog(state)     a child process that exits fails every pending request (503), then asks the
                        server to exit non-zero.
    Heartbeat(tm, s)    pings the scheduler every second through the detokenizer; the scheduler answers
                        between steps, so a ping unanswered for s seconds means it is stuck (or frozen)
                        and /health fails until it answers again.
    shutdown_deadline   after a stop signal, requests still running are answered 503 JSON a second
                        before uvicorn's graceful window ends (it would cancel them with no answer).
"""

import asyncio
import logging
import time

from radixlm.runtime import io_struct as io

logger = logging.getLogger(__name__)

WATCHDOG_PERIOD_S = 0.5
DEAD_CHILD_GRACE_S = 2.0       # /health answers 503 this long before the process exits
HEARTBEAT_PERIOD_S = 1.0


async def watchdog(state) -> None:
    while True:
        await asyncio.sleep(WATCHDOG_PERIOD_S)
        dead = state.backend.dead_child()
        if dead is None or state.stopping:
            continue
        state.dead = dead
        logger.error("the %s process exited (code %s); shutting down", dead, state.backend.procs[dead].returncode)
        state.tm.fail_pending(f"the {dead} process has exited")
        await asyncio.sleep(DEAD_CHILD_GRACE_S)
        state.exit_code = 1
        state.request_exit()
        return


class Heartbeat:
    def __init__(self, tm, timeout_s: float):
        self.tm, self.timeout_s = tm, timeout_s
        self.pending_since = None      # monotonic time of the ping not yet answered

    def problem(self):
        """Why the scheduler counts as stuck, or None."""
        if self.pending_since is None or self.timeout_s <= 0:
            return None
        waited = time.monotonic() - self.pending_since
        if waited <= self.timeout_s:
            return None
        return (f"the scheduler has not answered for {waited:.0f} s (more than {self.timeout_s:g} s): it is "
                f"stuck in a step or not running")

    async def run(self) -> None:
        while True:
            self.pending_since = time.monotonic()
            try:
                await self.tm.control(io.GetServerInfoReq(), "server_info", timeout=None)
            except Exception:
                logger.exception("heartbeat failed")
            waited = time.monotonic() - self.pending_since
            if waited > self.timeout_s > 0:
                logger.warning("the scheduler answered after %.1f s", waited)
            self.pending_since = None
            await asyncio.sleep(HEARTBEAT_PERIOD_S)


def shutdown_deadline(state, loop, grace_s: float) -> None:
    """Called from the signal handler: schedule the 503 answers for what is still running."""
    def fail():
        if state.tm is not None:
            state.tm.fail_pending("the server is shutting down; retry on another server", 503)

    loop.call_soon_threadsafe(loop.call_later, max(grace_s - 1.0, 0.1), fail)
