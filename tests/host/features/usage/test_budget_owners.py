"""Work the bot starts on someone's behalf counts against them: a scheduled firing's model
calls are recorded under its task's owner, and once the owner's day is spent the next firing
is refused before any model call and said as the task's `notify:` says for a failure; a
campaign's wake-up is decided by its model under role `oncall` (person: the owner, run: the
campaign) and, over budget, by the rules without a call. The assembled runtime, the real
Anthropic SDK and a loopback fake."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agents.models.metered import ModelCall
from agents.models.types import Usage
from core.call_scope import CallScope
from host.features.oncall.decider import DECIDE_SYSTEM, ModelDecider
from host.features.schedules.feature import SchedulesFeature
from host.features.usage.feature import UsageFeature
from oncall.model import RoundSummary
from oncall.policy import DecisionContext
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import approve_campaigns, db_rows, eventually
from tests.host.features.schedules.kit import CONV, Bot, FakeClock
from tests.oncall_kit import spec
from tests.runtime_kit import chat_runtime, online

DAY_BUDGET = 50_000
JOB = "echo loss=0.9; echo loss=0.5"
REPORT = "From the baseline loss of 1.0 the loss reached 0.5."
# One firing's Host call spends more than the owner's day.
LARGE = {"input_tokens": 60_000, "output_tokens": 40}


def _system(body: dict[str, Any]) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else json.dumps(system)


@pytest.fixture
async def budgeted(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Bot, FakeAnthropic]]:
    async with online(monkeypatch) as fake:
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
        monkeypatch.setenv("RAVEN_BUDGET_PERSON_DAY", str(DAY_BUDGET))
        chat = FakeChatAdapter()
        async with chat_runtime(chat, serving=True) as rt:
            clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
            rt.feature(SchedulesFeature).tasks.clock = clock
            yield Bot(rt, chat, clock), fake


def _person_rows(bot: Bot, role: str) -> list[tuple[Any, ...]]:
    return db_rows(
        bot.rt.settings.home,
        "SELECT person, conversation, run_id, input_tokens FROM model_calls WHERE role = ? "
        "ORDER BY id",
        role,
    )


async def test_a_firing_over_its_owners_budget_is_refused_and_said_as_a_failure(
    budgeted: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = budgeted
    reply = await bot.say("schedule: every 1h | summarise the open incidents | notify: failures")
    assert "waits for approval" in reply, reply
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    assert not fake.requests  # the schedule line is a command: no model call yet

    # The first firing's Host call spends the owner's whole day; a success is not posted.
    fake.queue_message({"content": "Two incidents are open.", "usage": LARGE})
    posted = len(bot.chat.texts)
    bot.clock.advance(hours=1)
    await bot.fire_due()
    assert len(fake.requests) == 1
    assert "This turn is a scheduled firing" in _system(fake.requests[0]["json"])
    assert bot.chat.texts[posted:] == []  # notify: failures, and it did not fail
    host = _person_rows(bot, "host")
    assert [(person, conversation) for person, conversation, _, _ in host] == [("U1", CONV.id)]
    assert host[0][3] == LARGE["input_tokens"]
    # Every call the firing led to is the owner's (once its memory write is done).
    await bot.rt.memory_writer.idle()
    everyone = db_rows(bot.rt.settings.home, "SELECT DISTINCT person FROM model_calls")
    assert everyone == [("U1",)]

    # The next firing is refused before any model call, and said: it failed.
    bot.clock.advance(hours=1)
    await bot.fire_due()
    assert len(fake.requests) == 1
    said = bot.chat.texts[posted:]
    assert len(said) == 1, said
    assert said[0].startswith("⛔ Your daily model budget is spent: 60,"), said
    assert f"of {DAY_BUDGET:,} tokens today" in said[0]
    (task,) = await bot.tasks.store.active()
    assert task.fired == 2
    ((status, error),) = db_rows(
        bot.rt.settings.home, "SELECT status, error FROM turns ORDER BY started_at DESC LIMIT 1"
    )
    assert status == "failed" and error.startswith("Your daily model budget is spent"), error


async def test_a_firing_with_budget_left_is_answered(budgeted: tuple[Bot, FakeAnthropic]) -> None:
    """The same firing under the limit reaches the model (the refusal above is the budget's)."""
    bot, fake = budgeted
    await bot.say("schedule: every 1h | summarise the open incidents | notify: always")
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    for answer in ("Two incidents are open.", "One incident is open."):
        fake.queue_message({"content": answer, "usage": {"input_tokens": 900}})
        bot.clock.advance(hours=1)
        await bot.fire_due()
        assert bot.chat.texts[-1] == answer
    assert len(fake.requests) == 2


def _decide(body: dict[str, Any]) -> dict[str, Any] | None:
    """The campaign decider's call: file a report."""
    if DECIDE_SYSTEM[:60] not in _system(body):
        return None
    report = {"action": "report", "reason": "the round finished", "report": REPORT}
    tool = {"type": "tool_use", "id": "toolu_decide", "name": "decide", "input": report}
    return {"content": [tool], "usage": {"input_tokens": 700, "output_tokens": 30}}


def _decider_calls(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in fake.requests if DECIDE_SYSTEM[:60] in _system(r["json"])]


async def test_a_campaign_decision_is_the_owners_model_call(
    budgeted: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = budgeted
    fake.responder = _decide
    record = await bot.rt.campaigns.start("U1", CONV, spec(JOB, baseline=1.0))
    await approve_campaigns(bot.rt.broker)
    final = await _until_final(bot, record.id)
    assert final.state == "closed" and final.report == REPORT
    assert len(_decider_calls(fake)) == 1
    assert _person_rows(bot, "oncall") == [("U1", CONV.id, record.id, 700)]


async def test_a_campaign_over_its_owners_budget_decides_by_the_rules(
    budgeted: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = budgeted
    fake.responder = _decide
    await _spend_the_day(bot, "U1")

    record = await bot.rt.campaigns.start("U1", CONV, spec(JOB, baseline=1.0))
    await approve_campaigns(bot.rt.broker)
    final = await _until_final(bot, record.id)
    assert final.state == "closed"
    assert final.report is not None and "0.5" in final.report  # the rules' factual report
    assert not fake.requests  # no model call reached the API
    assert _person_rows(bot, "oncall") == []

    # The decider the feature builds, asked as the engine asks it: the rules' decision, with
    # a note that says why the model was not asked (what the owner spent, of what).
    decider = ModelDecider(
        bot.rt.models.named("oncall"), spend=bot.rt.feature(UsageFeature).accounting.gate
    )
    context = DecisionContext(
        spec=final.spec,
        baseline=None,
        measurements=await bot.rt.campaigns.store.measurements(record.id),
        rounds=[RoundSummary(round=1, wake_reason="finished", exit_code=0)],
        wall_used_seconds=1.0,
        compute_used_minutes=0.0,
        rounds_used=1,
        reason="finished",
        owner="U1",
        conversation=CONV,
    )
    decision = await decider.decide(context)
    assert decision.action == "report"
    (note,) = [n for n in decision.notes if n.startswith("decided by the rules")]
    assert note.startswith(
        "decided by the rules, not the model: Your daily model budget is spent: 50,001 tokens "
        f"of {DAY_BUDGET:,} tokens today."
    ), note
    # The thread and the campaign's record say why no model decided.
    assert decision.reason.endswith("(decided by the rules: the owner's model budget is spent)")
    assert not fake.requests
    # Another owner's campaign, with budget left, is decided by the model.
    decision = await decider.decide(dataclasses.replace(context, owner="U2"))
    assert decision.report == REPORT and len(_decider_calls(fake)) == 1
    assert not any(n.startswith("decided by the rules") for n in decision.notes)


async def test_a_campaign_decided_by_the_rules_counts_no_model_call(
    budgeted: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = budgeted
    fake.responder = _decide
    await _spend_the_day(bot, "U1")
    record = await bot.rt.campaigns.start("U1", CONV, spec(JOB, baseline=1.0))
    await approve_campaigns(bot.rt.broker)
    final = await _until_final(bot, record.id)
    assert not fake.requests
    shown = await bot.rt.campaigns.describe(record.id)
    assert final.model_calls == 0, shown


async def _spend_the_day(bot: Bot, person: str) -> None:
    """`person` spent their day already (a call recorded as any role's would be)."""
    ledger = bot.rt.feature(UsageFeature).accounting.ledger
    scope = CallScope(person=person, conversation=CONV.id, channel=CONV.channel_key)
    usage = Usage(input_tokens=DAY_BUDGET, output_tokens=1)
    await ledger.record(ModelCall("host", "claude-fake", scope, usage, time.time()))


async def _until_final(bot: Bot, campaign_id: str) -> Any:
    store = bot.rt.campaigns.store

    async def final() -> bool:
        record = await store.get(campaign_id)
        return record is not None and record.state in ("closed", "failed", "cancelled")

    await eventually(final, 60, what=f"campaign {campaign_id} to end", every=0.05)
    return await store.get(campaign_id)
