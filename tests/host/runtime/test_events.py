"""The host's event bus: order, topics, failure isolation, freezing."""

from __future__ import annotations

import pytest

from core.ids import ConversationRef
from host.runtime.events import EventBus, TurnCompleted, WakeUp, subscribe_job
from host.runtime.scheduling import FiredJob

CONV = ConversationRef("test", "w", "c", "t")


def _turn(reply: str = "hi") -> TurnCompleted:
    return TurnCompleted(CONV, "turn1", "U1", "user", "hello", reply)


def _job(kind: str) -> FiredJob:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return FiredJob(job_id=f"{kind}-1", kind=kind, payload={}, scheduled_at=now, fired_at=now)


async def test_subscribers_run_in_order_and_a_failure_does_not_stop_the_rest() -> None:
    bus, heard = EventBus(), []

    async def first(event: TurnCompleted) -> None:
        heard.append(("first", event.reply))

    async def broken(event: TurnCompleted) -> None:
        raise RuntimeError("boom")

    async def last(event: TurnCompleted) -> None:
        heard.append(("last", event.reply))

    for handler in (first, broken, last):
        bus.subscribe(TurnCompleted, handler)
    assert await bus.publish(_turn()) is False
    assert heard == [("first", "hi"), ("last", "hi")]


async def test_topics_select_wake_ups_by_kind() -> None:
    bus, fired = EventBus(), []

    async def expiry(job: FiredJob) -> None:
        fired.append(job.kind)

    subscribe_job(bus, "prompt_expiry", expiry)
    assert bus.has_subscriber(WakeUp, "prompt_expiry")
    assert not bus.has_subscriber(WakeUp, "system_turn")
    assert await bus.publish(WakeUp(_job("system_turn"))) is True
    assert await bus.publish(WakeUp(_job("prompt_expiry"))) is True
    assert fired == ["prompt_expiry"]


def test_a_frozen_bus_refuses_new_subscribers() -> None:
    bus = EventBus()
    bus.freeze()

    async def late(event: TurnCompleted) -> None: ...

    with pytest.raises(RuntimeError, match="frozen"):
        bus.subscribe(TurnCompleted, late)
