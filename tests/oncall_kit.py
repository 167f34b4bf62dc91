"""A campaign engine over real parts for tests: SQLite, the local machine in the real
detached sandbox, the rule-based decider; an in-memory scheduler and notifier."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from agents.sandbox import DetachedSandbox
from bot.schema import all_migrations
from core.ids import ConversationRef
from core.secret_names import SecretNames
from core.store import Store
from oncall.deciders import RuleBasedDecider
from oncall.engine import CampaignEngine, Decider, EngineConfig, EngineDeps, EngineSettings
from oncall.machines.local import LocalMachine
from oncall.machines.registry import Allocator
from oncall.model import FINAL_STATES, Budget, CampaignSpec, Machine, MachineSpec, MetricSpec
from oncall.ports import JSONScalar, OwnerAccess, PostedHook
from oncall.store import CampaignRecord, CampaignStore
from tests.helpers import eventually
from tests.sandboxing import real_sandbox

CONV = ConversationRef("test", "W", "C", "T")
WITHIN = 60.0  # hang guard for a whole campaign


@dataclass
class MemoryScheduler:
    """Wake-ups kept in a dict; `fire` runs one as the real scheduler would."""

    jobs: dict[str, tuple[datetime, str, dict[str, JSONScalar]]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)

    async def schedule_at(
        self,
        job_id: str,
        when: datetime,
        kind: str,
        payload: Mapping[str, JSONScalar],
        *,
        replace_existing: bool = True,
    ) -> bool:
        self.jobs[job_id] = (when, kind, dict(payload))
        return True

    async def cancel(self, job_id: str) -> bool:
        self.cancelled.append(job_id)
        return self.jobs.pop(job_id, None) is not None

    async def pending_job_ids(self) -> list[str]:
        return list(self.jobs)


@dataclass
class RecordingNotifier:
    """Every notice and edit, in order; a notice is posted at once, its key as its id."""

    posts: list[tuple[str, str]] = field(default_factory=list)  # (key, text)
    edits: list[str] = field(default_factory=list)
    # Every post's and edit's text, in order: what a reader of the thread saw, version by
    # version (a campaign's rounds are news edited into its one status message).
    news: list[str] = field(default_factory=list)

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        on_posted: PostedHook | None = None,
        recipient: str = "",
        essential: bool = False,
    ) -> None:
        if any(key == idempotency_key for key, _ in self.posts):
            return
        self.posts.append((idempotency_key, text))
        self.news.append(text)
        if on_posted is not None:
            await on_posted(idempotency_key)

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        return idempotency_key if any(k == idempotency_key for k, _ in self.posts) else None

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        self.edits.append(text)
        self.news.append(text)

    def texts(self) -> list[str]:
        return [text for _, text in self.posts]


@dataclass
class OncallKit:
    """The engine and what it runs on."""

    engine: CampaignEngine
    store: Store
    campaigns: CampaignStore
    scheduler: MemoryScheduler
    notifier: RecordingNotifier
    root: Path
    # Builds another engine on the same store, machine, scheduler and notifier (a restart).
    new_engine: Callable[[], CampaignEngine]
    machine: Machine  # the machine named `local`

    async def restart(self) -> None:
        """Close the engine (its jobs keep running, detached) and recover a new one."""
        await self.engine.close()
        self.engine = self.new_engine()
        await self.engine.recover()

    async def until_final(self, campaign_id: str, within: float = WITHIN) -> CampaignRecord:
        """Wait until the campaign closed, failed or was cancelled (a hang guard)."""

        async def final() -> bool:
            record = await self.campaigns.get(campaign_id)
            assert record is not None
            return record.state in FINAL_STATES

        # The state lives in SQLite: poll it.
        await eventually(final, within, what=f"campaign {campaign_id} to end", every=0.02)
        record = await self.campaigns.get(campaign_id)
        assert record is not None
        return record

    async def until(self, cond: Callable[[], object], within: float = WITHIN) -> None:
        """Poll an async condition (records live in SQLite) until it holds."""
        # Polling is right: the state lives in SQLite and in the job's processes.
        await eventually(cond, within, every=0.02)

    async def fire_scheduled(self, campaign_id: str) -> None:
        """Fire the campaign's pending scheduled wake-up now (as APScheduler would)."""
        for job_id, (_, _, payload) in list(self.scheduler.jobs.items()):
            if payload.get("campaign_id") == campaign_id:
                del self.scheduler.jobs[job_id]
                await self.engine.on_wake_job(campaign_id, str(payload["wake_id"]))


def spec(command: str, **overrides: object) -> CampaignSpec:
    """A campaign spec with test-friendly timings."""
    options: dict[str, object] = {
        "goal": "watch the test job",
        "machine": "local",
        "command": command,
        "metric": MetricSpec(name="loss"),
        "direction": "min",
        "budget": Budget(wall_seconds=600, rounds=3),
        "wake_every_seconds": 3600,
        "poll_seconds": 0.05,
        "stall_seconds": 30,
    }
    options.update(overrides)
    return CampaignSpec.model_validate(options)


@asynccontextmanager
async def oncall_kit(
    tmp: Path,
    *,
    slots: int = 2,
    clock: Callable[[], float] | None = None,
    machine: Machine | None = None,
    decider: Decider | None = None,
    settings: EngineSettings | None = None,
    owners: OwnerAccess | None = None,
) -> AsyncIterator[OncallKit]:
    """An engine on a fresh database with one machine named `local`: by default the local
    machine of `slots` slots in the real sandbox."""
    store = Store(tmp / "raven.db", all_migrations())
    await store.open()
    campaigns = CampaignStore(store)
    local = MachineSpec(name="local", kind="local", slots=slots)
    if machine is None:
        machine = LocalMachine(
            local,
            DetachedSandbox(real_sandbox(hidden=(tmp / "hidden",))),
            secret_names=SecretNames(),
        )
    scheduler = MemoryScheduler()
    notifier = RecordingNotifier()
    options: dict[str, object] = {}
    if clock is not None:
        options["clock"] = clock
    if settings is not None:
        options["settings"] = settings

    def new_engine() -> CampaignEngine:
        deps = EngineDeps(
            store=campaigns,
            machines={"local": machine},
            allocator=Allocator({"local": local}),
            scheduler=scheduler,
            notifier=notifier,
            decider=decider or RuleBasedDecider(),
            owners=owners,
        )
        return CampaignEngine(deps, EngineConfig(root=tmp / "campaigns", **options))  # type: ignore[arg-type]

    kit = OncallKit(
        new_engine(), store, campaigns, scheduler, notifier, tmp / "campaigns", new_engine, machine
    )
    try:
        yield kit
    finally:
        for record in await campaigns.recent(active_only=True):
            await kit.engine.stop(record.id, by="test teardown")
        await kit.engine.close()
        await store.close()
