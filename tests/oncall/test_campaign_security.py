"""Campaigns and runs are safe in a crowd (issue 17, findings 1, 4 and 10), on the assembled
bot with its default settings (Skill Forge, group memory and the default embedder on):

- nothing a campaign would run runs before a person allowed to approve that exact command
  approves it (start and a changed resubmit alike); machines say who may use them, remote
  ones are closed to everyone but admins unless configured, and a machine's approvers must
  agree too;
- only the owner, an approver or an admin, from the campaign's own thread, reads its details
  or decides on it; others are refused privately;
- a poll faster than a second, a budget over the limit, too many campaigns for one person and
  one person holding every slot of a machine are refused or held back with the limit named.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Runtime, build_runtime, shutdown, start_serving
from bot.settings import load_settings
from core.ids import ConversationRef
from host.agent.tools import HostToolDeps, HostTools, RunRef
from host.features.oncall.tools import (
    CampaignRef,
    CampaignTools,
    ResubmitInput,
    StartCampaignInput,
    TerminateInput,
    campaign_spec,
)
from host.runtime.prompt_record import Prompt
from host.runtime.roles import Roles
from host.runtime.turn import TurnContext
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import (
    approve_campaigns,
    db_rows,
    eventually,
    inbound,
)
from tests.slurm_cluster import SlurmCluster

CONV = ConversationRef("test", "W", "C", "T")
OTHER_THREAD = ConversationRef("test", "W", "C", "T2")
LONG = "echo loss 1; sleep 60"
COMMAND_PURPOSE = "campaign_command"


def _line(run: str, *, machine: str = "local", extra: str = "") -> str:
    return (
        f"campaign: try it | machine: {machine} | run: {run} | metric: loss min | budget: 10m "
        f"| poll: 1s{extra}"
    )


@pytest.fixture
def defaults(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> Path:
    """The product defaults: Skill Forge, the default embedder and episode former on."""
    monkeypatch.setenv("RAVEN_ADMINS", "U9")
    return isolated_env


async def _runtime(home: Path, machines: str | None = None) -> tuple[Runtime, FakeChatAdapter]:
    if machines is not None:
        await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread((home / "machines.toml").write_text, machines)
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    return rt, adapter


@pytest.fixture
async def bot(defaults: Path) -> AsyncIterator[tuple[Runtime, FakeChatAdapter]]:
    rt, adapter = await _runtime(defaults)
    yield rt, adapter
    await shutdown(rt)


async def _say(rt: Runtime, text: str, event: str, author: str = "U2") -> None:
    turn = await rt.service.accept(inbound(text, event, author))
    assert turn is not None
    await turn


async def _pending(rt: Runtime) -> list[Prompt]:
    return [p for p in await rt.broker.pending() if p.purpose == COMMAND_PURPOSE]


def _rounds(home: Path) -> int:
    return int(db_rows(home, "SELECT COUNT(*) FROM campaign_rounds")[0][0])  # type: ignore[call-overload]


async def test_a_campaign_line_runs_nothing_until_its_exact_command_is_approved(
    bot: tuple[Runtime, FakeChatAdapter], defaults: Path
) -> None:
    rt, adapter = bot
    await _say(rt, _line("touch ran-it; " + LONG), "e1")
    (prompt,) = await _pending(rt)
    (record,) = await rt.campaigns.store.recent()
    # Shown exactly, with where it runs, its budget and what it can see; recorded (audit).
    assert "```\ntouch ran-it; echo loss 1; sleep 60\n```" in prompt.question
    for part in ("Machine: `local`", "Runs in:", "Budget: 10m", "It can see:", "RAVEN_HOME"):
        assert part in prompt.question, prompt.question
    assert prompt.requester == "U2"
    assert [a["action"] for a in await rt.broker.audit(prompt.id)] == ["created", "shown"]
    assert record.state == "approval"
    assert _rounds(defaults) == 0
    assert not (defaults / "campaigns" / record.id).exists()
    # Someone else in the channel cannot approve it.
    stranger = await rt.broker.answer(prompt.id, prompt.nonce, "U3", "Approve")
    assert stranger.status == "not_allowed"
    # Denied: nothing ran, and the thread is told.
    await rt.broker.answer(prompt.id, prompt.nonce, "U2", "Deny")
    await eventually(lambda: any("not started (denied by U2)" in t for t in adapter.texts))
    cancelled = await rt.campaigns.store.get(record.id)
    assert cancelled is not None and cancelled.state == "cancelled"
    assert _rounds(defaults) == 0
    # Approved: the approved command runs.
    await _say(rt, _line(LONG), "e2")
    await approve_campaigns(rt.broker, by="U2")
    await eventually(lambda: _rounds(defaults) == 1)
    assert any("started: try it" in t for t in adapter.texts)


async def test_an_expired_approval_runs_nothing(
    defaults: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_PROMPT_EXPIRY_SECONDS", "1")
    rt, adapter = await _runtime(defaults)
    try:
        await _say(rt, _line(LONG), "e1")
        (record,) = await rt.campaigns.store.recent()

        async def cancelled() -> bool:
            await rt.broker.expire_due()
            current = await rt.campaigns.store.get(record.id)
            return current is not None and current.state == "cancelled"

        await eventually(cancelled)
        assert _rounds(defaults) == 0
        await eventually(lambda: any("not started (expired)" in t for t in adapter.texts))
    finally:
        await shutdown(rt)


async def test_a_changed_command_runs_only_once_approved(
    bot: tuple[Runtime, FakeChatAdapter], defaults: Path
) -> None:
    rt, adapter = bot
    await _say(rt, _line(LONG), "e1", author="U2")
    await approve_campaigns(rt.broker, by="U2")
    (record,) = await rt.campaigns.store.recent()

    async def measured() -> bool:
        return bool(await rt.campaigns.store.measurements(record.id))

    await eventually(measured, within=30)
    (value,) = await rt.campaigns.store.measurements(record.id)
    tools = CampaignTools(rt.campaigns)
    ctx = TurnContext(CONV, "turn-x", "U2", "user-U2")
    asked = await tools.campaign_resubmit(
        ctx,
        ResubmitInput(campaign_id=record.id, cite=value.id, changes="echo changed; " + LONG),
    )
    assert "needs approval" in asked
    (prompt,) = await _pending(rt)
    assert "```\necho changed; echo loss 1; sleep 60\n```" in prompt.question
    assert "resubmit" in prompt.question
    # Denied: round 1 goes on, nothing new ran.
    await rt.broker.answer(prompt.id, prompt.nonce, "U2", "Deny")
    await eventually(lambda: any("changed command was not approved" in t for t in adapter.texts))
    assert _rounds(defaults) == 1
    # Approved: round 2 runs exactly the approved command.
    await tools.campaign_resubmit(
        ctx, ResubmitInput(campaign_id=record.id, cite=value.id, changes="echo changed; " + LONG)
    )
    await approve_campaigns(rt.broker, by="U2")
    await eventually(lambda: _rounds(defaults) == 2, within=30)
    log = defaults / "campaigns" / record.id / "round-2"

    async def said_changed() -> bool:
        found = await asyncio.to_thread(
            lambda: [p.read_text() for p in log.rglob("round.log") if p.is_file()]
        )
        return any("changed" in text for text in found)

    await eventually(said_changed, within=30)


MACHINES = """
[machines.local]
kind = "local"
slots = 2

[machines.cluster]
kind = "slurm"
workdir = "{home}-cluster"

[machines.team]
kind = "local"
users = ["U2"]

[machines.guarded]
kind = "local"
approvers = ["U7"]
"""


async def test_machines_say_who_may_use_them_and_remote_ones_are_for_admins(
    defaults: Path,
) -> None:
    rt, adapter = await _runtime(defaults, MACHINES.format(home=defaults))
    try:
        await _say(rt, _line(LONG, machine="cluster"), "e1", author="U2")
        assert "open only to admins" in adapter.texts[-1]
        await _say(rt, _line(LONG, machine="team"), "e2", author="U3")
        assert "You may not use machine `team`: it is open to U2 and admins" in adapter.texts[-1]
        assert await rt.campaigns.store.recent() == []
        # The admin may use the remote machine, and still approves the exact command first.
        await _say(rt, _line(LONG, machine="cluster"), "e3", author="U9")
        (prompt,) = await _pending(rt)
        assert "Machine: `cluster` (slurm)" in prompt.question
        assert "scrubbed environment" in prompt.question
        await _say(rt, _line(LONG, machine="team"), "e4", author="U2")
        assert len(await _pending(rt)) == 2
    finally:
        await shutdown(rt)


async def test_a_machines_approvers_must_agree_too(defaults: Path) -> None:
    rt, _ = await _runtime(defaults, MACHINES.format(home=defaults))
    try:
        await _say(rt, _line(LONG, machine="guarded"), "e1", author="U2")
        (first,) = await _pending(rt)
        await rt.broker.answer(first.id, first.nonce, "U2", "Approve")

        async def second_prompt() -> bool:
            return len(await _pending(rt)) == 1 and (await _pending(rt))[0].id != first.id

        await eventually(second_prompt)
        (second,) = await _pending(rt)
        assert second.allowed_responders == ("U7",)
        refused = await rt.broker.answer(second.id, second.nonce, "U2", "Approve")
        assert refused.status == "not_allowed"
        assert _rounds(defaults) == 0
        await rt.broker.answer(second.id, second.nonce, "U7", "Approve")
        await eventually(lambda: _rounds(defaults) == 1)
    finally:
        await shutdown(rt)


async def test_only_a_persons_own_message_starts_a_campaign(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, _ = bot
    tools = CampaignTools(rt.campaigns)
    system = TurnContext(CONV, "turn-s", "system", "raven", origin="system")
    args = StartCampaignInput(goal="x", run=LONG, metric="loss min", budget="10m")
    answer = await tools.start_campaign(system, args)
    assert answer.startswith("Refused:")
    assert await rt.campaigns.store.recent() == []


async def test_only_the_owner_an_approver_or_an_admin_acts_on_a_campaign_from_its_thread(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, _line(LONG), "e1", author="U1")
    await approve_campaigns(rt.broker, by="U1")
    (record,) = await rt.campaigns.store.recent()
    tools = CampaignTools(
        rt.campaigns, roles=Roles(admins=("U9",)), private=rt.broker.notify_private
    )
    elsewhere = TurnContext(OTHER_THREAD, "t1", "U1", "user-U1")
    stranger = TurnContext(CONV, "t2", "U3", "user-U3")
    ref = CampaignRef(campaign_id=record.id)
    stop = TerminateInput(campaign_id=record.id, reason="mine now")
    for ctx in (elsewhere, stranger):
        assert (await tools.campaign_status(ctx, ref)).startswith("Refused:")
        assert (await tools.campaign_terminate(ctx, stop)).startswith("Refused:")
        changed = ResubmitInput(campaign_id=record.id, cite=1, changes="rm -rf ~")
        assert (await tools.campaign_resubmit(ctx, changed)).startswith("Refused:")
    # Told privately, naming who can.
    notes = [text for _, user, text in adapter.private if user == "U3"]
    assert notes and all("only its owner (U1), an approver or an admin" in n for n in notes)
    assert await _pending(rt) == []
    current = await rt.campaigns.store.get(record.id)
    assert current is not None and current.state not in ("cancelled", "reporting")
    # The owner and an admin may.
    admin = TurnContext(CONV, "t3", "U9", "admin")
    assert "Campaign `" in await tools.campaign_status(admin, ref)
    owner = TurnContext(CONV, "t4", "U1", "user-U1")
    assert "Campaign `" in await tools.campaign_status(owner, ref)


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (" | poll: 0.0001s", "at least 1s"),
        (" | poll: 0.5s", "at least 1s"),
    ],
)
async def test_a_poll_faster_than_a_second_is_refused(
    bot: tuple[Runtime, FakeChatAdapter], extra: str, problem: str
) -> None:
    rt, adapter = bot
    await _say(rt, _line(LONG, extra="").replace(" | poll: 1s", extra), "e1")
    assert problem in adapter.texts[-1]
    assert await rt.campaigns.store.recent() == []


async def test_budgets_and_campaigns_per_person_are_bounded(
    defaults: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_CAMPAIGN_MAX_PER_USER", "2")
    rt, adapter = await _runtime(defaults)
    try:
        await _say(rt, _line(LONG).replace("budget: 10m", "budget: 90d"), "e1")
        assert "over the limit of 7d" in adapter.texts[-1]
        assert "RAVEN_CAMPAIGN_MAX_BUDGET_HOURS" in adapter.texts[-1]
        await _say(rt, _line(LONG), "e2")
        await _say(rt, _line(LONG), "e3")
        await _say(rt, _line(LONG), "e4")
        assert "RAVEN_CAMPAIGN_MAX_PER_USER = 2" in adapter.texts[-1]
        assert len(await rt.campaigns.store.recent()) == 2
        # An admin is not bound by the per-person count.
        await _say(rt, _line(LONG), "e5", author="U9")
        assert len(await rt.campaigns.store.recent()) == 3
    finally:
        await shutdown(rt)


async def test_one_person_cannot_hold_every_slot_of_a_machine(
    bot: tuple[Runtime, FakeChatAdapter], defaults: Path
) -> None:
    rt, adapter = bot
    await _say(rt, _line(LONG), "e1", author="U2")
    await _say(rt, _line(LONG), "e2", author="U2")
    await approve_campaigns(rt.broker, by="U2")
    await eventually(lambda: any("user_slots = 1" in t for t in adapter.texts))
    assert _rounds(defaults) == 1
    # Someone else still gets the second slot of `local`.
    await _say(rt, _line(LONG), "e3", author="U3")
    await approve_campaigns(rt.broker, by="U3")
    await eventually(lambda: _rounds(defaults) == 2)
    states: Any = sorted(r.state for r in await rt.campaigns.store.recent())
    assert states.count("planning") == 1


@pytest.mark.slow
async def test_an_approved_campaign_runs_on_the_real_slurm_for_its_allowed_user(
    defaults: Path, monkeypatch: pytest.MonkeyPatch, slurm_cluster: SlurmCluster
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    # Where its commands run: a project directory beside RAVEN_HOME, never inside it.
    project = defaults.with_name(f"{defaults.name}-cluster")
    await asyncio.to_thread(project.mkdir)
    machines = f'[machines.cluster]\nkind = "slurm"\nworkdir = "{project}"\nusers = ["U2"]\n'
    rt, adapter = await _runtime(defaults, machines)
    try:
        run = 'for v in 0.9 0.5; do echo "loss $v"; done'
        await _say(rt, _line(run, machine="cluster"), "e1", author="U3")
        assert "You may not use machine `cluster`" in adapter.texts[-1]
        await _say(rt, _line(run, machine="cluster"), "e2", author="U2")
        assert _rounds(defaults) == 0
        await approve_campaigns(rt.broker, by="U2")
        await eventually(lambda: any(t.startswith("📋 Campaign") for t in adapter.texts), 120)
        (record,) = await rt.campaigns.store.recent()
        assert record.state == "closed", slurm_cluster.log_tail()
        values = [m.value for m in await rt.campaigns.store.measurements(record.id)]
        assert values == [0.9, 0.5]
    finally:
        await shutdown(rt)


async def test_a_campaign_recorded_before_a_crash_is_asked_about_once_after_the_restart(
    defaults: Path,
) -> None:
    rt, _ = await _runtime(defaults)
    line = StartCampaignInput(goal="g", run=LONG, metric="loss min", budget="10m", poll="1s")
    # What a kill -9 between recording the campaign and asking leaves: no prompt yet.
    record = await rt.campaigns.store.create(
        "cmp_crashed", "U2", CONV, campaign_spec(line), state="approval"
    )
    await shutdown(rt)
    for _ in range(2):  # asked at the first restart, not again at the second
        rt, _ = await _runtime(defaults)
        try:
            (prompt,) = await _pending(rt)
            assert prompt.payload["campaign_id"] == record.id and prompt.requester == "U2"
            assert _rounds(defaults) == 0
        finally:
            await shutdown(rt)


async def test_only_the_submitter_an_approver_or_an_admin_acts_on_a_run_from_its_thread(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    # Alice's run waits on her approval of its command: live, and hers.
    await _say(rt, "s1: shell: sleep 30", "e1", author="U1")

    async def live() -> bool:
        return bool(rt.runs.live_runs(CONV.id))

    await eventually(live)
    (run,) = rt.runs.live_runs(CONV.id)
    tools = HostTools(
        HostToolDeps(
            runs=rt.runs, broker=rt.broker, registry=rt.registry, roles=Roles(admins=("U9",))
        )
    )
    ref = RunRef(run_id=run.id)
    stranger = TurnContext(CONV, "t1", "U3", "user-U3")
    elsewhere = TurnContext(OTHER_THREAD, "t2", "U1", "user-U1")
    for ctx in (stranger, elsewhere):
        assert (await tools.run_status(ctx, ref)).startswith("Refused:")
        assert (await tools.cancel_run(ctx, ref)).startswith("Refused:")
    # Without an id, a stranger's cancel reaches only their own runs: none here.
    assert "No matching run of yours" in await tools.cancel_run(stranger, RunRef())
    assert rt.runs.live_runs(CONV.id)
    notes = [text for _, user, text in adapter.private if user == "U3"]
    assert notes and all("only its submitter (U1), an approver or an admin" in n for n in notes)
    admin = TurnContext(CONV, "t3", "U9", "admin")
    assert not (await tools.run_status(admin, ref)).startswith("Refused:")
    owner = TurnContext(CONV, "t4", "U1", "user-U1")
    assert f"`{run.id}`" in await tools.cancel_run(owner, ref)
