"""A campaign's news on the assembled bot with the default settings: fifteen rounds inside one
hour are all seen, edited into the campaign's one status message (the per-person cap of
proactive posts never drops one, nothing is posted twice), and a typed approval is
confirmed before the campaign it starts says anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.settings import load_settings
from core.ids import ConversationRef
from host.runtime.messages import InboundMessage
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import approve_campaigns, db_rows, eventually
from tests.oncall_kit import spec

CONV = ConversationRef("test", "W", "C", "T")
ROUNDS = 15
# Each round prints a lower loss than the last (a counter in the campaign's working
# directory), so the policy resubmits until the round budget is used up.
IMPROVING = 'n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo "loss=$((100-n))"'


def _msg(text: str, event: str) -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread="T",
        message_id=event,
        author_id="U1",
        author_name="alice",
        text=text,
        event_id=event,
    )


@pytest.fixture
async def runtime(isolated_env: Path) -> Any:
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    yield rt, adapter
    await shutdown(rt)


async def test_fifteen_rounds_in_an_hour_are_all_seen_in_the_one_status_message(
    runtime: Any,
) -> None:
    rt, adapter = runtime
    record = await rt.campaigns.start(
        "U1",
        CONV,
        spec(IMPROVING, budget={"wall_seconds": 3600, "rounds": ROUNDS}, baseline=100.0),
    )
    await approve_campaigns(rt.broker)
    report = f"📋 Campaign `{record.id}` report"
    await eventually(lambda: any(t.startswith(report) for t in adapter.texts), within=120)
    await rt.service.quiesce(CONV)
    final = await rt.campaigns.store.get(record.id)
    assert final is not None and final.state == "closed" and final.round == ROUNDS

    # Three posts in all, each once: the start, the status message and the report.
    keys = [m.idempotency_key for _, m in adapter.posts]
    status_key = f"campaign:{record.id}:status"
    assert keys == [f"campaign:{record.id}:started", status_key, f"campaign:{record.id}:report"]
    # Every round's news is in the status message's versions, in order; nothing held back.
    (status_at,) = [i for i, k in enumerate(keys) if k == status_key]
    message_id = f"m{status_at + 1}"
    assert final.status_message == message_id
    versions = [adapter.posts[status_at][1].text]
    versions += [m.text for mid, m in adapter.edits if mid == message_id]
    for n in range(1, ROUNDS + 1):
        running = f"▶️ Campaign `{record.id}` round {n}/{ROUNDS} running on `local`"
        assert any(v.startswith(running) for v in versions), (n, versions)
        assert any(
            v.startswith(f"🏁 Campaign `{record.id}` round {n}/{ROUNDS} finished")
            and f"loss={100 - n} (#{n})" in v
            for v in versions
        ), (n, versions)
        assert any(f"🔔 Woke early: round {n} finished (exit code 0)." in v for v in versions)
    for n in range(1, ROUNDS):
        assert any(f"🔁 Resubmitting: Round {n} finished with a new best" in v for v in versions), (
            n,
            versions,
        )
    last = versions[-1]
    assert last.startswith(f"🏁 Campaign `{record.id}` round {ROUNDS}/{ROUNDS} finished"), last
    home = rt.settings.home
    assert db_rows(home, "SELECT COUNT(*) FROM held_back") == [(0,)]
    # The report numbers this campaign's measurements from #1, its rounds in one line.
    assert final.report is not None and f"#{ROUNDS}, round {ROUNDS}" in final.report
    assert f"Rounds: rounds 1–{ROUNDS} finished (exit code 0)." in final.report, final.report


async def test_a_typed_approval_is_confirmed_before_the_campaign_it_starts_speaks(
    runtime: Any,
) -> None:
    rt, adapter = runtime
    line = (
        "campaign: watch the toy training | machine: local | run: echo loss 0.5 | "
        "metric: loss min | budget: 10m | rounds: 1"
    )
    turn = await rt.service.accept(_msg(line, "e1"))
    assert turn is not None
    await turn
    await eventually(lambda: bool(adapter.shown))
    await rt.service.accept(_msg("1", "e2"))  # the typed answer: approve
    await eventually(lambda: any(t.startswith("📋 Campaign") for t in adapter.texts), within=60)
    await rt.service.quiesce(CONV)
    texts = adapter.texts
    answered = next(i for i, t in enumerate(texts) if t.startswith("✔ Answered prompt"))
    started = next(i for i, t in enumerate(texts) if "started:" in t and "🛰️" in t)
    status = next(i for i, t in enumerate(texts) if "round 1/1" in t)
    assert answered < started < status, texts


# The chat line a team types for a campaign of fifteen fast rounds (also what the team-thread
# acceptance scenario types): each round prints a lower loss than the baseline and the last.
FIFTEEN_ROUNDS = (
    "campaign: fifteen quick rounds | machine: local | "
    'run: n=$(cat n 2>/dev/null); n=$((n+1)); echo $n > n; echo "loss $((100-n))" | '
    "metric: loss min | budget: 1h | rounds: 15 | baseline: 100 | poll: 1s"
)


async def test_the_chat_line_of_fifteen_rounds_shows_every_round_in_one_message(
    runtime: Any,
) -> None:
    rt, adapter = runtime
    turn = await rt.service.accept(_msg(FIFTEEN_ROUNDS, "e1"))
    assert turn is not None
    await turn
    await eventually(lambda: bool(adapter.shown))
    await rt.service.accept(_msg("1", "e2"))  # approved by a typed answer
    await eventually(lambda: any(t.startswith("📋 Campaign") for t in adapter.texts), within=300)
    await rt.service.quiesce(CONV)
    (record,) = await rt.campaigns.store.recent()
    assert record.state == "closed" and record.round == ROUNDS
    status_key = f"campaign:{record.id}:status"
    keys = [m.idempotency_key for _, m in adapter.posts]
    assert keys.count(status_key) == 1
    assert [k for k in keys if k.startswith(f"campaign:{record.id}")] == [
        f"campaign:{record.id}:started",
        status_key,
        f"campaign:{record.id}:report",
    ]
    message_id = f"m{keys.index(status_key) + 1}"
    versions = [m.text for mid, m in adapter.edits if mid == message_id]
    for n in range(2, ROUNDS + 1):
        assert any(
            v.startswith(f"▶️ Campaign `{record.id}` round {n}/{ROUNDS} running") for v in versions
        ), (n, versions)
    assert versions[-1].startswith(f"🏁 Campaign `{record.id}` round {ROUNDS}/{ROUNDS} finished")
    assert f"loss=85 (#{ROUNDS})" in versions[-1], versions[-1]


async def test_after_a_restart_the_same_status_message_is_edited_never_a_new_one(
    isolated_env: Path,
) -> None:
    settings = load_settings()
    first = FakeChatAdapter()
    rt = await build_runtime(settings, [lambda: first])
    await start_serving(rt)
    try:
        record = await rt.campaigns.start("U1", CONV, spec("echo loss=0.9; sleep 600"))
        await approve_campaigns(rt.broker)

        async def measured() -> bool:
            current = await rt.campaigns.store.get(record.id)
            return current is not None and "loss=0.9 (#1)" in (current.status_view or "")

        await eventually(measured, within=60)
        await rt.service.quiesce(CONV)
    finally:
        await shutdown(rt)  # the round keeps running, detached
    ((message_id,),) = db_rows(
        isolated_env, f"SELECT status_message FROM campaigns WHERE id = '{record.id}'"
    )
    assert message_id is not None
    for attempt in range(2):
        again = FakeChatAdapter()
        rt = await build_runtime(settings, [lambda adapter=again: adapter])  # type: ignore[misc]
        await start_serving(rt)
        try:
            await rt.service.quiesce(CONV)
            # Brought up to date in place: the same message, edited; nothing posted again.
            assert not [m for _, m in again.posts if m.idempotency_key.endswith(":status")]
            shown = [m.text for mid, m in again.edits if mid == message_id]
            assert shown and "loss=0.9 (#1)" in shown[-1], again.edits
            if attempt == 1:
                await rt.service.accept(_msg("stop", "stop-1"))
                await eventually(
                    lambda adapter=again: any(  # type: ignore[misc]
                        mid == message_id and m.text.startswith("🏁") for mid, m in adapter.edits
                    ),
                    within=30,
                )
        finally:
            await shutdown(rt)
    assert db_rows(
        isolated_env,
        "SELECT COUNT(*) FROM messages WHERE idempotency_key = ?",
        f"campaign:{record.id}:status",
    ) == [(1,)]
