"""A task's `notify:` over its firings' results: `always` posts each, `failures` only a
firing that failed, `changes` only a result that differs from the previous firing's.

A firing failed when its turn failed or a run it started did not complete. Its result is
what its runs produced (each node's state and output, by the node's id without the firing's
suffix), or the reply itself when it started no run: run ids, times and paths, which differ at
every firing, do not make a result new.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from datetime import datetime

from host.features.schedules.store import ScheduledTask, TaskStore
from host.graph.records import read_output
from host.graph.run_store import RunRecord, RunStore
from host.nudges.policy import NudgePolicy
from host.runtime.turn import TurnContext

log = logging.getLogger(__name__)

# The suffix a firing gives its plan's node ids (`s1_2612240900`).
_FIRING_SUFFIX = re.compile(r"_\d{10}(?:\d\d)?$")


class NotifyGate:
    """The conversation service's `ReplyGate` for scheduled firings."""

    def __init__(
        self,
        tasks: TaskStore,
        runs: RunStore,
        *,
        clock: Callable[[], datetime],
        nudges: NudgePolicy | None = None,
    ) -> None:
        self._tasks = tasks
        self._runs = runs
        self._clock = clock
        self._nudges = nudges

    async def admit(self, ctx: TurnContext, text: str, *, failed: bool, since: float) -> str | None:
        task = await self._tasks.get(ctx.task)
        if task is None:
            return text
        if task.quiet(self._clock()):
            log.info("task %s is muted or snoozed: its result is not posted", task.id)
            return None
        posts, digest = await self._posts(task, text, failed=failed, since=since)
        if not posts:
            return None
        # Within the caps (a result is not deduplicated: `notify:` decides on repeats).
        now = self._clock().timestamp()
        if self._nudges is not None and not await self._nudges.admit(
            task.nudge(text), dedup=False, now=now
        ):
            return None
        if digest is not None:  # `changes` compares with the last result posted
            await self._tasks.update(task.id, last_digest=digest)
        return text

    async def _posts(
        self, task: ScheduledTask, text: str, *, failed: bool, since: float
    ) -> tuple[bool, str | None]:
        """Whether the task's `notify:` posts this result (and, for `changes`, its digest)."""
        if task.schedule.notify == "always":
            return True, None
        runs = await self._runs.runs_for_task(task.id, since=since)
        failed = failed or any(run.state != "completed" for run in runs)
        if task.schedule.notify == "failures":
            return failed, None
        digest = await self._digest(runs, text, failed)
        if digest == task.last_digest:
            log.info("task %s: same result as its last firing; not posted", task.id)
            return False, None
        return True, digest

    async def _digest(self, runs: list[RunRecord], text: str, failed: bool) -> str:
        parts: list[object] = [failed]
        for run in runs:
            for node in await self._runs.nodes_of_run(run.id):
                output = ""
                if node.output_path:
                    try:
                        output = read_output(node.output_path)
                    except OSError:
                        output = "(no output)"
                parts.append([_FIRING_SUFFIX.sub("", node.node_id), node.state, output])
        if not runs:
            parts.append(text)
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()
