"""Small test helpers shared across test modules."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from host.runtime.events import EventBus, subscribe_decision, subscribe_job
from host.runtime.messages import InboundMessage
from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import JobHandler

# The repository and the tests' data files, wherever a test module sits.
REPO = Path(__file__).resolve().parent.parent
TEST_DATA = REPO / "tests" / "data"


def inbound(text: str, event: str, author: str = "U1", *, thread: str = "T") -> InboundMessage:
    """A user's message in the test platform's thread (W/C/T unless told), with its own
    event id."""
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread=thread,
        message_id=event,
        author_id=author,
        author_name=f"user-{author}",
        text=text,
        event_id=event,
    )


def db_rows(home: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Rows of one query against the bot's raven.db (read from outside the bot; closed after,
    and waiting out the bot's write lock rather than failing on it)."""
    with contextlib.closing(sqlite3.connect(home / "raven.db", timeout=30)) as db:
        return list(db.execute(sql, params))


Condition = Callable[[], object] | Callable[[], Awaitable[object]]
Description = str | Callable[[], str] | None


def _describe(cond: Callable[..., object], what: Description) -> str:
    """What a wait was for: the caller's words (computed now, if a callable: the state at
    the failure), else the condition's source line."""
    if callable(what):
        return what()
    if what is not None:
        return what
    try:
        return inspect.getsource(cond).strip()
    except (OSError, TypeError):
        return getattr(cond, "__qualname__", repr(cond))


async def eventually(
    cond: Condition, within: float = 10.0, *, what: Description = None, every: float = 0.01
) -> None:
    """Wait until `cond()` holds (a coroutine function is awaited each time), checking every
    `every` seconds; after `within` seconds (a hang guard, not a timing) fail naming `what`
    (or the condition's source). The one async poll loop of the suite: polling is right where
    the state lives in another process or a library we do not get signals from."""

    async def holds() -> bool:
        result = cond()
        # An async predicate returns a coroutine, which is always truthy: await it.
        return bool(await result) if inspect.isawaitable(result) else bool(result)

    try:
        async with asyncio.timeout(within) as guard:
            while not await holds():  # noqa: ASYNC110
                await asyncio.sleep(every)
    except TimeoutError:
        if not guard.expired():
            raise  # the condition's own timeout, not ours
        raise AssertionError(
            f"timed out after {within:g}s waiting for {_describe(cond, what)}"
        ) from None


def wait_until(
    cond: Callable[[], object], what: Description = None, within: float = 10.0, every: float = 0.05
) -> None:
    """`eventually` for synchronous code (a test driving a pty or a thread): block until
    `cond()` holds; fail naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {_describe(cond, what)}")
        time.sleep(every)


def write_agents(home: Path, toml: str) -> Path:
    """Write RAVEN_HOME/agents.toml (the home made if missing); its path."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "agents.toml"
    path.write_text(toml)
    return path


def decision_bus(handlers: Mapping[str, Callable[[Prompt], Awaitable[None]]]) -> EventBus:
    """An event bus on which each prompt purpose's decisions reach its handler."""
    bus = EventBus()
    for purpose, handler in handlers.items():
        subscribe_decision(bus, purpose, handler)
    return bus


def wake_up_bus(handlers: Mapping[str, JobHandler]) -> EventBus:
    """An event bus on which each job kind's wake-ups reach its handler."""
    bus = EventBus()
    for kind, handler in handlers.items():
        subscribe_job(bus, kind, handler)
    return bus


async def approve_campaigns(broker: Any, by: str = "U1", *, within: float = 10.0) -> list[Prompt]:
    """Wait for a pending campaign-command approval, approve every one pending (as `by`);
    the prompts answered."""

    async def pending() -> list[Prompt]:
        return [p for p in await broker.pending() if p.purpose == "campaign_command"]

    async def any_pending() -> bool:
        return bool(await pending())

    await eventually(any_pending, within=within)
    prompts = await pending()
    for prompt in prompts:
        outcome = await broker.answer(prompt.id, prompt.nonce, by, "Approve")
        assert outcome.status == "accepted", outcome.message
    return prompts


def processes_with(token: str) -> list[int]:
    """Host pids of live processes whose command line contains `token` (a path, a unique
    word), this process aside. Sandboxed ones count too: their PID namespace hides the host
    from them, not them from the host."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def _awaiting(task: asyncio.Task[Any]) -> list[str]:
    names = []
    coro: Any = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None)
        if frame is not None:
            names.append(frame.f_code.co_name)
        coro = getattr(coro, "cr_await", None)
    return names


async def cancel_while_spawning(task: asyncio.Task[Any], after: int) -> None:
    """Cancel `task` `after` loop iterations into asyncio's start of a child process (while
    it connects the pipes: the window of CPython's gh-103847 hang)."""
    # Polled each loop iteration: asyncio's own progress has no event to wait on.
    while not any("_make_subprocess_transport" in _awaiting(t) for t in asyncio.all_tasks()):  # noqa: ASYNC110
        await asyncio.sleep(0)
    for _ in range(after):
        await asyncio.sleep(0)
    task.cancel()
