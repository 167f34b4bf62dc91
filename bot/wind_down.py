"""Shutdown's grace: a stop (Ctrl-C, SIGTERM) lets what runs finish, up to
RAVEN_SHUTDOWN_GRACE seconds, and says so; a second stop, or the end of the grace, cancels
what is left, recorded as stopped by the shutdown (the next start never calls that a crash).

Runs before the runtime's exit stack closes anything: adapters still post, so a run that
finishes meanwhile reports in its thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Coroutine, Sequence
from typing import Any

from host.conversation.lanes import LaneManager
from host.conversation.service import ConversationService
from host.graph.executor.run import GraphRun
from host.graph.model import TERMINAL_STATES
from host.graph.runs import RunManager
from host.runtime.apscheduler_adapter import ApschedulerScheduler

log = logging.getLogger(__name__)

# What a node cancelled by the shutdown records (its run's report shows it).
SHUTDOWN_REASON = "stopped when the bot shut down"


async def wind_down(
    *,
    lanes: LaneManager,
    runs: RunManager,
    service: ConversationService,
    scheduler: ApschedulerScheduler,
    grace: float,
    now: asyncio.Event,
) -> None:
    """Stop taking new work, wait up to `grace` seconds (or until `now` is set) for what
    runs, then cancel what is left."""
    # No firing may start work the grace would then wait for; people's new messages are
    # refused (they stay recorded and run at the next start).
    await scheduler.stop()
    lanes.close_to_people()
    work = running_work(lanes, runs)
    if not work:
        return
    log.warning(
        "stopping: waiting up to %g s for %s to finish; Ctrl-C (or SIGTERM) again stops now",
        grace,
        work,
    )
    if await _first(_quiet(lanes, runs, service), now, grace):
        log.warning("stopping: everything running finished")
        return
    left = running_work(lanes, runs) or "what was left"
    why = "stop asked again" if now.is_set() else f"{grace:g} s grace over"
    log.warning("stopping now (%s): cancelled %s, recorded as %s", why, left, SHUTDOWN_REASON)
    # Turns first, lanes closed: a cancelled run's report then waits, recorded, for the
    # next start instead of starting a turn that would be cut short. Cancelled turns are
    # recorded as cancelled, never left running for the next start to call interrupted.
    await lanes.drain(0)
    await runs.cancel_all(SHUTDOWN_REASON)


def running_work(lanes: LaneManager, runs: RunManager) -> str:
    """What runs, in words: `graph run run_… (s1) and a request by alice`."""
    parts = [f"graph run {run.id} ({', '.join(_unfinished(run))})" for run in runs.executing()]
    for label, count in Counter(lanes.running()).items():
        parts.append(label if count == 1 else f"{count} × {label}")
    return _join(parts)


def _unfinished(run: GraphRun) -> list[str]:
    return [node for node in run.nodes if run.state(node) not in TERMINAL_STATES]


def _join(parts: Sequence[str]) -> str:
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else "".join(parts)


async def _quiet(lanes: LaneManager, runs: RunManager, service: ConversationService) -> None:
    """Until nothing runs: no turn, no run, and no report of an ended run on its way."""
    while True:
        await service.dispatched()
        await runs.idle()
        await lanes.idle()
        if not (service.dispatching() or runs.executing() or lanes.running()):
            return


async def _first(quiet: Coroutine[Any, Any, None], now: asyncio.Event, grace: float) -> bool:
    """True when `quiet` finished first; False when `now` was set or `grace` ran out."""
    done_quiet = asyncio.ensure_future(quiet)
    stop_now = asyncio.ensure_future(now.wait())
    try:
        await asyncio.wait(
            {done_quiet, stop_now}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for task in (done_quiet, stop_now):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await done_quiet
    return done_quiet.done() and not done_quiet.cancelled() and done_quiet.exception() is None
