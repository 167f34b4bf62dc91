"""Harness evolution from chat: an admin types `evolve AGENT TASKS` and the run of
RAVEN_HOME/evolve/tasks/TASKS.jsonl goes on in the background, its progress in the thread.
The winner is stored as a new harness version and offered with an approval prompt only admins
can answer; approving it makes it the agent's harness from the bot's next start. A restart
resumes an unfinished run where its records stop (nothing finished is run again)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import ClassVar

from host.conversation.service import CommandHandler
from host.evaluation.evolution.search import EvolveSettings
from host.evaluation.evolution.session import evolve_agent
from host.evaluation.evolution.tasks import read_evolve_tasks
from host.evaluation.evolution.versions import HarnessVersions, VersionError
from host.evaluation.maob.formats import EvalFileError
from host.features.evolution.chat_runs import ChatRun, ChatRuns
from host.features.evolution.migrations import MIGRATIONS
from host.features.feature import BaseFeature, HostParts
from host.nudges.notices import LaneNotifier
from host.runtime.events import EventBus, subscribe_decision
from host.runtime.messages import InboundMessage
from host.runtime.prompt_record import Prompt

log = logging.getLogger(__name__)

HARNESS_PROMOTION = "harness_promotion"
_EVOLVE = re.compile(
    r"^\s*evolve\s+([A-Za-z0-9_-]{1,64})\s+([A-Za-z0-9_-]{1,64})(?:\.jsonl)?\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class EvolutionSection:
    """The caps the built-in harnesses start from (named as in Settings)."""

    max_iterations: int
    max_tokens: int


class EvolutionFeature(BaseFeature):
    """`evolve AGENT TASKS` for admins; promotion by approval (see the module docstring)."""

    Section: ClassVar[type[EvolutionSection]] = EvolutionSection
    # Harness evolution's tables (host/evaluation/evolution/): its runs and the harness
    # versions the runtime loads at open.
    migrations = MIGRATIONS

    def __init__(self, parts: HostParts, section: EvolutionSection) -> None:
        self._parts = parts
        self._section = section
        self._runs = ChatRuns(parts.store)
        self._versions = HarnessVersions(parts.store)
        # Progress and results are said on the bot's own: recorded, then posted in the lane.
        self._notices = LaneNotifier(parts.conversation_log, parts.outbox, parts.lanes)
        self._tasks: set[asyncio.Task[None]] = set()

    def commands(self) -> CommandHandler | None:
        return _EvolveCommand(self)

    def subscribe(self, bus: EventBus) -> None:
        subscribe_decision(bus, HARNESS_PROMOTION, self._decided)

    async def start(self, stack: AsyncExitStack) -> None:
        for run in await self._runs.unfinished():
            await self._say(
                run, f"Resuming evolution run `{run.run_id}` after a restart.", "resume"
            )
            self._launch(run)
        stack.push_async_callback(self._stop)

    async def begin(self, msg: InboundMessage, agent: str, tasks: str) -> str:
        """Check and start one run; the reply to the command."""
        p = self._parts
        if msg.author_id not in p.roles.admins:
            return "Only admins (RAVEN_ADMINS) can start harness evolution."
        entry = p.registry.get(agent)
        if entry is None or entry.backend != "inproc":
            return f"`{agent}` is not an in-process specialist (research, code, design, oncall)."
        # The agent runs on its model and the proposer on its own: both must be real.
        models = {
            f"`{agent}`'s model": p.models.for_agent(entry),
            "the proposer's model (RAVEN_MODEL_PROPOSER, else RAVEN_MODEL)": p.models.proposer,
        }
        offline = [role for role, model in models.items() if model.offline]
        if offline:
            lack = "have" if offline[1:] else "has"
            return (
                f"Harness evolution needs a model: {' and '.join(offline)} {lack} no key for "
                "its API (offline mode), and scores are never faked."
            )
        path = p.home / "evolve" / "tasks" / f"{tasks}.jsonl"
        if path.is_symlink() or not path.is_file():
            return f"There is no task file `{tasks}.jsonl` in RAVEN_HOME/evolve/tasks/."
        try:
            found = read_evolve_tasks(path)
        except EvalFileError as exc:
            return f"The task file cannot be used: {exc}"
        train = sum(t.split == "train" for t in found)
        run = ChatRun(
            run_id=f"{agent}-chat-{uuid.uuid4().hex[:8]}",
            conversation=msg.conversation,
            requested_by=msg.author_id,
            agent=agent,
            tasks=tasks,
            settings=EvolveSettings(subset=min(4, train)),
        )
        await self._runs.add(run)  # recorded before it is announced
        self._launch(run)
        return (
            f"Evolving `{agent}` on {train} training and {len(found) - train} held-out tasks "
            f"(run `{run.run_id}`). Progress follows here; the result comes with a question "
            "only admins can answer: whether the agent should use it."
        )

    def _launch(self, run: ChatRun) -> None:
        task = asyncio.create_task(self._run(run), name=f"evolve:{run.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, run: ChatRun) -> None:
        try:
            await self._evolve(run)
        except asyncio.CancelledError:
            raise  # shutdown: the run stays `running` and resumes at the next start
        except Exception as exc:
            log.exception("evolution run %s failed", run.run_id)
            await self._runs.finish(run.run_id, "failed")
            await self._say(run, f"⚠️ Evolution run `{run.run_id}` failed: {exc}", "failed")

    async def _evolve(self, run: ChatRun) -> None:
        p, s = self._parts, self._section
        entry = p.registry.get(run.agent)
        assert entry is not None
        result, version = await evolve_agent(
            store=p.store,
            provider=p.models.for_agent(entry),
            proposer=p.models.proposer,
            sandbox=p.sandbox,
            secret_names=p.secret_names,
            entry=entry,
            tasks=read_evolve_tasks(p.home / "evolve" / "tasks" / f"{run.tasks}.jsonl"),
            run_id=run.run_id,
            settings=run.settings,
            caps=(s.max_iterations, s.max_tokens),
            workspaces=p.home / "evolve" / run.run_id,
            progress=functools.partial(self._progress, run),
        )
        held_out = (
            f"; held-out Util {result.test_before:.3f} → {result.test_after:.3f}"
            if result.test_before is not None and result.test_after is not None
            else ""
        )
        summary = (
            f"training Util {result.train_before:.3f} → {result.train_after:.3f}{held_out}; "
            f"{result.attempts_used} scored attempts of the bound {result.attempts_bound}"
        )
        if version is None:
            nothing = f"Evolution run `{run.run_id}` found nothing better ({summary})."
            await self._say(run, nothing, "done")
        elif not await self._asked(run):
            await p.broker.create(
                conversation=run.conversation,
                kind="approval",
                question=(
                    f"Evolution run `{run.run_id}` improved `{run.agent}` ({summary}; cell "
                    f"{result.selected_cell}). Make harness v{version} the one `{run.agent}` "
                    "runs (from the next start)?"
                ),
                requester=run.requested_by,
                purpose=HARNESS_PROMOTION,
                payload={"agent": run.agent, "version": version, "run_id": run.run_id},
                responders=list(p.roles.admins),  # admins only
            )
        await self._runs.finish(run.run_id, "finished")

    async def _asked(self, run: ChatRun) -> bool:
        """A promotion question for this run is already open (asked before a restart)."""
        return any(
            prompt.purpose == HARNESS_PROMOTION and prompt.payload.get("run_id") == run.run_id
            for prompt in await self._parts.broker.pending(run.conversation)
        )

    async def _progress(self, run: ChatRun, line: str) -> None:
        await self._say(run, f"Evolution `{run.run_id}`: {line}", line.split(":", maxsplit=1)[0])

    async def _decided(self, prompt: Prompt) -> None:
        agent, version = str(prompt.payload["agent"]), int(prompt.payload["version"])
        by = prompt.answered_by or ""
        if not prompt.approved or by not in self._parts.roles.admins:
            text = f"`{agent}` keeps its harness (v{version} was not promoted)."
        else:
            try:
                await self._versions.promote(agent, version, by)
                text = f"`{agent}` runs harness v{version} from the bot's next start."
            except VersionError as exc:
                text = f"v{version} was not promoted: {exc}"
        await self._notices.send(
            prompt.conversation, text, idempotency_key=f"harness:{prompt.id}", essential=True
        )

    async def _say(self, run: ChatRun, text: str, step: str) -> None:
        await self._notices.send(
            run.conversation,
            text,
            idempotency_key=f"evolve:{run.run_id}:{step}",
            recipient=run.requested_by,
            essential=True,
        )

    async def _stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)


class _EvolveCommand:
    """The chat command."""

    def __init__(self, feature: EvolutionFeature) -> None:
        self._feature = feature

    @property
    def help(self) -> str:
        return "**Evolution** (admins): `evolve AGENT TASKS`."

    async def handle(self, msg: InboundMessage) -> str | None:
        match = _EVOLVE.match(msg.text)
        if match is None:
            return None
        return await self._feature.begin(msg, match.group(1), match.group(2))
