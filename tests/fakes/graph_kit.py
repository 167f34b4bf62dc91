"""Scripted fakes for the graph runtime: a backend, a judge model, an events recorder, a kit.

Everything real is real here — SQLite on a temporary path, run files on disk, the admission
checks, the scheduler and the `CompletionJudge` — only the agents and the judge's model are
scripted. Waits use events, never sleeps; every wait has a hang guard.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.backends.base import AgentBackend, AgentOutcome, AgentTask
from agents.models.types import Message, ModelReply, TextBlock, ToolCall, ToolSpec, Usage
from agents.registry import AgentEntry, AgentRegistry, default_registry
from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Store
from host.graph.executor import DispatchContext, GraphRun
from host.graph.judge import VERDICT_TOOL, CompletionJudge
from host.graph.records import NodeRecords, RunFiles
from host.graph.run_store import NodeRecord, RunStore
from host.graph.runs import RunAids, RunManager, RunParts, RunSettings
from host.runtime.events import EventBus, RunException, RunFinished, RunProgress
from host.runtime.run_snapshot import RunSnapshot

CONV = ConversationRef("console", "local", "main", "thread-1")
OTHER_CONV = ConversationRef("console", "local", "main", "thread-2")
GUARD_SECONDS = 10.0  # hang guard only: every wait below ends on an event long before this
START = 1_700_000_000.0


async def guarded(awaitable: Awaitable[Any]) -> Any:
    """Await with a hang guard (a deadlocked test fails instead of hanging)."""
    async with asyncio.timeout(GUARD_SECONDS):
        return await awaitable


async def settle(rounds: int = 20) -> None:
    """Let every ready task take a few steps (no time passes; this is not a timing wait)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeClock:
    """An injectable wall clock that moves only when told."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


# --------------------------------------------------------------------------- the backend


@dataclass
class Step:
    """What one backend call does: wait, raise, or return an outcome."""

    output: str | None = None  # None: "output of <node>"
    error: str | None = None
    raises: Exception | None = None
    gate: asyncio.Event | None = None
    offline: bool = False
    truncated: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 1
    seconds: float = 0.0
    # Whether the session (returned history) records this call.
    keep_session: bool = True
    # What the agent reports while it works (its task's `on_progress`), before the gate.
    notes: tuple[str, ...] = ()


def default_output(node_id: str) -> str:
    """The output an unscripted call returns."""
    return f"output of {node_id}"


class ScriptedBackend:
    """An `AgentBackend` whose behaviour per node and attempt is scripted by the test."""

    def __init__(self) -> None:
        self._scripts: dict[str, deque[Step]] = defaultdict(deque)
        self._started: dict[tuple[str, int], asyncio.Event] = {}
        self.tasks: list[AgentTask] = []
        self.cancelled: list[str] = []
        self.running = 0
        self.max_running = 0
        self._call_waiters: list[tuple[int, asyncio.Event]] = []

    def __call__(self, entry: AgentEntry) -> AgentBackend:
        """The backend factory the run manager takes (one backend for every agent)."""
        return self

    def script(self, node_id: str, *steps: Step) -> None:
        """Queue the behaviour of the next calls for `node_id` (later calls: defaults)."""
        self._scripts[node_id].extend(steps)

    def gate(self, node_id: str, **step: Any) -> asyncio.Event:
        """Script the next call for `node_id` to wait for the returned event."""
        event = asyncio.Event()
        self.script(node_id, Step(gate=event, **step))
        return event

    def started(self, node_id: str, attempt: int = 1) -> asyncio.Event:
        """Set when the `attempt`-th call for `node_id` begins."""
        return self._started.setdefault((node_id, attempt), asyncio.Event())

    def tasks_for(self, node_id: str) -> list[AgentTask]:
        """Every task received for `node_id`, in order."""
        return [t for t in self.tasks if t.node_id == node_id]

    def calls(self, node_id: str) -> int:
        """How many times `node_id` was dispatched."""
        return len(self.tasks_for(node_id))

    async def wait_calls(self, count: int) -> None:
        """Wait until `count` calls (over all nodes) have begun."""
        if len(self.tasks) >= count:
            return
        event = asyncio.Event()
        self._call_waiters.append((count, event))
        await guarded(event.wait())

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Play the next scripted step for this node."""
        queue = self._scripts[task.node_id]
        step = queue.popleft() if queue else Step()
        self.tasks.append(task)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.started(task.node_id, self.calls(task.node_id)).set()
        for count, event in self._call_waiters:
            if len(self.tasks) >= count:
                event.set()
        try:
            for note in step.notes:
                if task.on_progress is not None:
                    await task.on_progress(note)
            if step.gate is not None:
                await step.gate.wait()
            if step.raises is not None:
                raise step.raises
        except asyncio.CancelledError:
            self.cancelled.append(task.node_id)
            raise
        finally:
            self.running -= 1
        output = default_output(task.node_id) if step.output is None else step.output
        history = list(task.history)
        if step.keep_session and step.error is None:
            history += [Message.user_text(task.message), Message.assistant_text(output)]
        return AgentOutcome(
            output=output,
            transcript=[
                {"type": "user", "text": task.message[:200]},
                {"type": "assistant", "text": output},
            ],
            usage=Usage(input_tokens=step.input_tokens, output_tokens=step.output_tokens),
            model_calls=step.model_calls,
            seconds=step.seconds,
            history=history,
            truncated=step.truncated,
            offline=step.offline,
            error=step.error,
        )


# --------------------------------------------------------------------------- the judge model


def verdict(
    accomplished: bool = True,
    category: str | None = None,
    missing: str = "",
    evidence: str = "cited evidence",
) -> dict[str, Any]:
    """The input of a `record_verdict` tool call."""
    args: dict[str, Any] = {"accomplished": accomplished, "evidence": evidence}
    if category is not None:
        args["category"] = category
    if missing:
        args["missing"] = missing
    return args


REJECT = verdict(False, "missing_user_input", "the target repository", "it asked which repo")


@dataclass
class JudgeStep:
    """What one judge model call does."""

    verdict: dict[str, Any] | None = field(default_factory=verdict)
    reply: ModelReply | None = None  # a raw reply instead of a verdict call
    raises: Exception | None = None
    gate: asyncio.Event | None = None
    entered: asyncio.Event | None = None
    usage: Usage = field(default_factory=Usage)


def task_of(body: str) -> str:
    """The `<task>` section of a judge request."""
    start = body.find("<task>\n")
    end = body.find("\n</task>")
    return body[start + len("<task>\n") : end] if start != -1 and end != -1 else body


class ScriptedJudgeProvider:
    """A `ModelProvider` for the judge: per-task scripted replies (default: accomplished)."""

    def __init__(self, *, offline: bool = False) -> None:
        self._offline = offline
        self._rules: list[tuple[str, deque[JudgeStep]]] = []
        self.bodies: list[str] = []
        self.systems: list[str] = []
        self.tools: list[Sequence[ToolSpec]] = []

    @property
    def name(self) -> str:
        """Label for logs."""
        return "scripted-judge"

    @property
    def offline(self) -> bool:
        """Whether this stands in for a missing model."""
        return self._offline

    def on(self, needle: str, *steps: JudgeStep) -> None:
        """Calls whose task contains `needle` play `steps` in order (then the default)."""
        self._rules.append((needle, deque(steps)))

    def reject(self, needle: str, times: int = 1, **verdict_args: Any) -> None:
        """The next `times` calls for `needle` judge the attempt not accomplished."""
        args = verdict(False, **verdict_args) if verdict_args else REJECT
        self.on(needle, *[JudgeStep(verdict=args) for _ in range(times)])

    def calls_for(self, needle: str) -> int:
        """How many judge calls were about a task containing `needle`."""
        return sum(1 for b in self.bodies if needle in task_of(b))

    def _next(self, body: str) -> JudgeStep:
        task = task_of(body)
        for needle, steps in self._rules:
            if needle in task and steps:
                return steps.popleft()
        return JudgeStep()

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """Answer the judge's request as scripted."""
        body = "\n".join(b.text for m in messages for b in m.content if isinstance(b, TextBlock))
        self.bodies.append(body)
        self.systems.append(system)
        self.tools.append(tools)
        step = self._next(body)
        if step.entered is not None:
            step.entered.set()
        if step.gate is not None:
            await step.gate.wait()
        if step.raises is not None:
            raise step.raises
        if step.reply is not None:
            return step.reply
        assert step.verdict is not None
        return verdict_reply(step.verdict, usage=step.usage)


def verdict_reply(args: dict[str, Any], *, usage: Usage | None = None) -> ModelReply:
    """A model reply holding one `record_verdict` call."""
    call = ToolCall(id="toolu_verdict", name=VERDICT_TOOL.name, input=args)
    return ModelReply(content=[call], stop_reason="tool_use", usage=usage or Usage())


# --------------------------------------------------------------------------- run events


def pending_node(run_id: str, node_id: str, conversation_id: str = CONV.id) -> NodeRecord:
    """A node row as admission stores it: pending, not attempted."""
    return NodeRecord(
        conversation_id=conversation_id,
        node_id=node_id,
        run_id=run_id,
        agent="research",
        instance=None,
        summary="",
        template=f"Task <{node_id}>.",
        deps=(),
        state="pending",
        attempts=0,
        max_attempts=3,
        continuation=None,
        output_path=None,
        error=None,
        verdict=None,
        deadline=None,
    )


def committed_as(committed: Sequence[str], expected: Sequence[str]) -> bool:
    """`committed` is `expected`, except that a `queued` or `running` decision (which nobody
    waits for) may have shared its commit with the node's next state: only the newer one is
    written then."""
    position = 0
    for state in expected:
        if position < len(committed) and committed[position] == state:
            position += 1
        elif state not in {"queued", "running"}:
            return False
    return position == len(committed)


class TrackingRunStore(RunStore):
    """The real run store, also remembering each node's committed states in order."""

    def __init__(self, store: Store, *, clock: Callable[[], float]) -> None:
        super().__init__(store, clock=clock)
        self.committed: dict[str, list[str]] = defaultdict(list)
        # States being written: SQLite may already show one before its writer has resumed
        # (the batching writer commits in its thread; the awaiting task runs later).
        self.writing: dict[str, list[str]] = defaultdict(list)

    async def _tracked(self, states: Sequence[tuple[str, str]], write: Awaitable[None]) -> None:
        for node_id, state in states:
            self.writing[node_id].append(state)
        try:
            await write
        finally:
            for node_id, state in states:
                self.writing[node_id].remove(state)
        for node_id, state in states:
            self.committed[node_id].append(state)

    async def update_node(self, conversation_id: str, node_id: str, **fields: Any) -> None:
        """Update, then note the state (only once SQLite committed it)."""
        states = [(node_id, str(fields["state"]))] if "state" in fields else []
        await self._tracked(states, super().update_node(conversation_id, node_id, **fields))

    async def update_nodes(
        self, conversation_id: str, node_ids: Iterable[str], **fields: Any
    ) -> None:
        """Update several, then note their state."""
        ids = list(node_ids)
        states = [(n, str(fields["state"])) for n in ids] if "state" in fields else []
        await self._tracked(states, super().update_nodes(conversation_id, ids, **fields))

    async def commit_nodes(
        self, records: Sequence[NodeRecord], *, prepare: Callable[[], None] | None = None
    ) -> None:
        """Commit a batch of rows, then note their states."""
        states = [(r.node_id, r.state) for r in records]
        await self._tracked(states, super().commit_nodes(records, prepare=prepare))


class RecordingEvents:
    """Hears the run events on the bus, records them, and checks SQLite already holds them."""

    def subscribe(self, bus: EventBus) -> None:
        """Subscribe to the graph runtime's events."""

        async def progress(event: RunProgress) -> None:
            await self.progress(event.run)

        async def exception(event: RunException) -> None:
            await self.exception(event.run, event.node_id, event.report)

        async def finished(event: RunFinished) -> None:
            await self.finished(event.run)

        bus.subscribe(RunProgress, progress)
        bus.subscribe(RunException, exception)
        bus.subscribe(RunFinished, finished)

    def __init__(self, run_store: TrackingRunStore) -> None:
        self._store = run_store
        self.log: list[tuple[str, str, str | None]] = []
        self.exceptions: list[tuple[str, str, str]] = []
        self.finished_runs: list[str] = []
        self.seen_states: dict[str, list[str]] = defaultdict(list)
        self.mismatches: list[str] = []
        self.checked = 0
        self.on_exception: Callable[[RunSnapshot, str, str], Awaitable[None]] | None = None
        self.on_finished: Callable[[RunSnapshot], Awaitable[None]] | None = None
        self.fail_announcements = False
        self._exception_events: dict[str, asyncio.Event] = {}
        self._finished_events: dict[str, asyncio.Event] = {}
        self._state_events: dict[tuple[str, str], asyncio.Event] = {}
        self.last_progress: RunSnapshot | None = None

    async def wait_state(self, node_id: str, state: str) -> None:
        """Wait until a progress announcement shows `node_id` in `state`."""
        if state in self.seen_states[node_id]:
            return
        event = self._state_events.setdefault((node_id, state), asyncio.Event())
        await guarded(event.wait())

    def exception_event(self, node_id: str) -> asyncio.Event:
        """Set when an exception of `node_id` is announced."""
        return self._exception_events.setdefault(node_id, asyncio.Event())

    def finished_event(self, run_id: str) -> asyncio.Event:
        """Set when `run_id` announces its end."""
        return self._finished_events.setdefault(run_id, asyncio.Event())

    async def wait_exception(self, node_id: str) -> str:
        """The exception report of `node_id` (waits for its announcement)."""
        event = self.exception_event(node_id)
        await guarded(event.wait())
        event.clear()
        return next(r for _, n, r in reversed(self.exceptions) if n == node_id)

    async def _check(self, run: RunSnapshot, kind: str) -> None:
        # What is being announced, taken before reading SQLite (which yields to other tasks).
        announced = run.states()
        run_state = run.state
        committed = self._store.committed
        marks = {node_id: len(committed[node_id]) for node_id in announced}
        for node_id, state in announced.items():
            last = committed[node_id][-1] if committed[node_id] else "pending"
            if last != state:
                self.mismatches.append(
                    f"{kind}: {node_id} announced {state}, last committed {last}"
                )
        rows = {n.node_id: n for n in await self._store.nodes_of_run(run.id)}
        self.checked += 1
        for node_id, state in announced.items():
            stored = rows[node_id]
            # SQLite holds the announced state, or a state committed after the announcement
            # began (other nodes keep running while this one is announced).
            later = committed[node_id][marks[node_id] :] + self._store.writing[node_id]
            if stored.state != state and stored.state not in later:
                self.mismatches.append(
                    f"{kind}: {node_id} announced {state} but SQLite has {stored.state}"
                )
            if state == "completed" and stored.output_path is None:
                self.mismatches.append(f"{kind}: {node_id} completed without a stored output")
        if kind == "finished":
            record = await self._store.run(run.id)
            if record is None or record.state != run_state:
                stored_state = record.state if record else None
                self.mismatches.append(
                    f"finished: run announced {run_state} but SQLite has {stored_state}"
                )

    def _note_states(self, run: RunSnapshot) -> None:
        for node in run.nodes:
            node_id = node.node_id
            states = self.seen_states[node_id]
            if not states or states[-1] != node.state:
                states.append(node.state)
            event = self._state_events.get((node_id, node.state))
            if event is not None:
                event.set()

    async def progress(self, run: RunSnapshot) -> None:
        """Node states changed."""
        await self._check(run, "progress")
        self.log.append(("progress", run.id, None))
        self.last_progress = run
        self._note_states(run)
        if self.fail_announcements:
            raise RuntimeError("the chat API is down")

    async def exception(self, run: RunSnapshot, node_id: str, report: str) -> None:
        """A node was suspended."""
        await self._check(run, "exception")
        self.log.append(("exception", run.id, node_id))
        self._note_states(run)
        self.exceptions.append((run.id, node_id, report))
        self.exception_event(node_id).set()
        if self.on_exception is not None:
            await self.on_exception(run, node_id, report)
        if self.fail_announcements:
            raise RuntimeError("the chat API is down")

    async def finished(self, run: RunSnapshot) -> None:
        """The run ended."""
        await self._check(run, "finished")
        self.log.append(("finished", run.id, None))
        self.finished_runs.append(run.id)
        self.finished_event(run.id).set()
        if self.on_finished is not None:
            await self.on_finished(run)
        if self.fail_announcements:
            raise RuntimeError("the chat API is down")


# --------------------------------------------------------------------------- the kit


SCRIBE = AgentEntry(
    name="scribe",
    description="A stateless command-line writer (each task starts fresh).",
    backend="cli",
    stateful=False,
    file_capable=True,
    progress=False,
    enabled=True,
    role="raven",
    command=("scribe",),
    prompt_via="arg",
)


def graph_registry() -> AgentRegistry:
    """The default roster (stateful, file-capable inproc agents) plus stateless `scribe`."""
    return AgentRegistry([*default_registry(which=lambda _: None).entries(), SCRIBE])


def node(
    node_id: str,
    template: str | None = None,
    *,
    agent: str = "research",
    deps: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A raw node; the default template `Task <id>.` is what judge scripts match on."""
    raw: dict[str, Any] = {
        "id": node_id,
        "agent": agent,
        "template": template if template is not None else f"Task <{node_id}>.",
        "deps": list(deps),
        **extra,
    }
    return raw


def needle(node_id: str) -> str:
    """What the default template of `node_id` contains (for judge scripts)."""
    return f"Task <{node_id}>"


@dataclass
class GraphKit:
    """A run manager over real SQLite and real run files, with scripted agents and judge."""

    root: Path
    store: Store
    run_store: TrackingRunStore
    files: RunFiles
    registry: AgentRegistry
    backend: ScriptedBackend
    provider: ScriptedJudgeProvider
    judge: CompletionJudge
    events: RecordingEvents
    manager: RunManager
    clock: FakeClock
    workspace: Path
    conv: ConversationRef = CONV

    def graph(self, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """A raw submission."""
        return {
            "task_summary": extra.pop("task_summary", "test task"),
            "nodes": list(nodes),
            **extra,
        }

    async def submit(
        self, *nodes: dict[str, Any], conv: ConversationRef | None = None, **extra: Any
    ) -> GraphRun:
        """Admit and start a graph; return its run."""
        result = await self.manager.submit(
            conv or self.conv, self.graph(*nodes, **extra), submitted_by="U1"
        )
        assert result.status == "started" and result.run is not None
        return result.run

    async def finished(self, run: GraphRun) -> None:
        """Wait until the run ended and its task is gone."""
        await guarded(run.done.wait())
        await guarded(self.manager.idle())

    async def node(self, node_id: str, conv: ConversationRef | None = None) -> NodeRecord:
        """The stored row of a node."""
        record = await self.run_store.node((conv or self.conv).id, node_id)
        assert record is not None, node_id
        return record

    async def state_is(self, node_id: str, state: str) -> bool:
        """Whether SQLite holds `state` for the node now."""
        return (await self.node(node_id)).state == state

    async def states(self, run: GraphRun) -> dict[str, str]:
        """Stored node states of a run."""
        return {n.node_id: n.state for n in await self.run_store.nodes_of_run(run.id)}

    def output_path(self, run: GraphRun | str, node_id: str) -> Path:
        """`runs/<run>/outputs/<node>.md`."""
        run_id = run if isinstance(run, str) else run.id
        return self.files.output_path(run_id, node_id)

    def records(self, run: GraphRun | str, node_id: str) -> NodeRecords:
        """What the run's journal holds about `node_id`, by attempt."""
        run_id = run if isinstance(run, str) else run.id
        return self.files.records(run_id).get(node_id, NodeRecords())

    async def close(self) -> None:
        """Stop every run (records left as they are) and close the store."""
        await guarded(self.manager.shutdown())
        await self.store.close()


async def open_kit_parts(
    root: Path,
    *,
    settings: RunSettings | None = None,
    host_reachable: bool = True,
    judge_timeout: float = GUARD_SECONDS,
    provider: ScriptedJudgeProvider | None = None,
    registry: AgentRegistry | None = None,
    clock: FakeClock | None = None,
    prefetch: DispatchContext | None = None,
    files: RunFiles | None = None,
) -> GraphKit:
    """Assemble a kit (the caller closes it)."""
    clock = clock or FakeClock()
    store = Store(root / "db" / "raven.db", all_migrations())
    await store.open()
    run_store = TrackingRunStore(store, clock=clock)
    files = files or RunFiles(root / "runs")
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    provider = provider or ScriptedJudgeProvider()
    judge = CompletionJudge(provider, timeout=judge_timeout)
    backend = ScriptedBackend()
    events = RecordingEvents(run_store)
    bus = EventBus()
    events.subscribe(bus)
    bus.freeze()
    registry = registry or graph_registry()
    manager = RunManager(
        RunParts(
            store=run_store,
            files=files,
            registry=registry,
            judge=judge,
            backend=backend,
            workspace=lambda conv: workspace,
            bus=bus,
        ),
        host_reachable=host_reachable,
        settings=settings or RunSettings(),
        aids=RunAids(prefetch=prefetch),
        clock=clock,
        new_id=_ids(),
    )
    return GraphKit(
        root=root,
        store=store,
        run_store=run_store,
        files=files,
        registry=registry,
        backend=backend,
        provider=provider,
        judge=judge,
        events=events,
        manager=manager,
        clock=clock,
        workspace=workspace,
    )


@asynccontextmanager
async def open_kit(root: Path, **options: Any) -> AsyncIterator[GraphKit]:
    """A kit for the duration of a test."""
    kit = await open_kit_parts(root, **options)
    try:
        yield kit
    finally:
        await kit.close()


def _ids() -> Callable[[], str]:
    counter = iter(range(1, 1_000_000))
    return lambda: f"run_{next(counter):03d}"
