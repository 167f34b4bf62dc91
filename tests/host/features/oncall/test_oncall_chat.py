"""A campaign started from a thread with the offline syntax (no model key): watched,
reported in the thread (its notices as system work in the thread's lane, recorded before
they post), listed by `status`, cancelled by `stop`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.settings import load_settings
from core.ids import ConversationRef
from host.conversation.lanes import LaneKind
from host.runtime.messages import InboundMessage
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import approve_campaigns, db_rows, eventually
from tests.oncall_kit import spec

CONV = ConversationRef("test", "W", "C", "T")

CAMPAIGN = (
    "campaign: watch the toy training | machine: local | "
    'run: for v in 0.9 0.6 0.45; do echo "loss $v"; done | metric: loss min | budget: 10m '
    "| poll: 1s"
)


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


async def test_an_offline_campaign_runs_from_a_thread_and_reports_there(runtime: Any) -> None:
    rt, adapter = runtime
    turn = await rt.service.accept(_msg(CAMPAIGN, "e1"))
    assert turn is not None
    await turn
    await approve_campaigns(rt.broker)
    await eventually(lambda: any(t.startswith("🛰️ Campaign `cmp_") for t in adapter.texts))
    await eventually(lambda: any(t.startswith("📋 Campaign") for t in adapter.texts), within=60)
    report = next(t for t in adapter.texts if t.startswith("📋 Campaign"))
    assert "0.45" in report and "0.9" in report
    (record,) = await rt.campaigns.store.recent()
    assert record.state == "closed" and record.model_calls == 0
    await rt.service.accept(_msg("status", "e2"))
    # Finished: no longer listed as live, counted in the one line of recent work.
    status = adapter.texts[-1]
    assert f"- campaign `{record.id}`" not in status
    assert f"1 campaign(s) ended in the last 24 h (latest `{record.id}`, closed)" in status


async def test_a_bad_campaign_line_says_what_is_wrong(runtime: Any) -> None:
    rt, adapter = runtime
    turn = await rt.service.accept(_msg("campaign: nothing to run | metric: loss up", "e1"))
    assert turn is not None
    await turn
    reply = adapter.texts[-1]
    assert "`run:` is missing" in reply
    assert "`metric: loss up`" in reply
    assert "`budget:` is missing" in reply
    assert "campaign: <goal> | machine: local" in reply


async def test_stop_in_the_thread_cancels_its_campaign(runtime: Any) -> None:
    rt, adapter = runtime
    line = CAMPAIGN.replace(
        'for v in 0.9 0.6 0.45; do echo "loss $v"; done', "echo loss 1; sleep 60"
    )
    turn = await rt.service.accept(_msg(line, "e1"))
    assert turn is not None
    await turn
    await approve_campaigns(rt.broker)
    await rt.service.accept(_msg("stop", "e2"))
    (record,) = await rt.campaigns.store.recent()
    await eventually(lambda: any(f"`{record.id}` cancelled by" in t for t in adapter.texts))
    assert (await rt.campaigns.store.get(record.id)).state == "cancelled"  # type: ignore[union-attr]


async def test_notices_enter_the_lane_as_system_work_after_the_turn_that_started_it(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, adapter = runtime
    submitted: list[tuple[str, LaneKind, str]] = []
    running_when_posted: dict[str, str | None] = {}
    ids: dict[str, str] = {}
    real_submit, real_post = rt.lanes.submit, adapter.post

    def spy(
        key: str,
        work: Callable[[], Awaitable[Any]],
        *,
        kind: LaneKind = "user",
        label: str = "",
        owner: str = "",
    ) -> Any:
        submitted.append((key, kind, label))
        return real_submit(key, work, kind=kind, label=label, owner=owner)

    async def post(conv: ConversationRef, message: Any) -> str:
        running_when_posted[message.idempotency_key] = rt.lanes.status(conv.id).running
        posted_id = str(await real_post(conv, message))
        ids[message.idempotency_key] = posted_id
        return posted_id

    monkeypatch.setattr(rt.lanes, "submit", spy)
    monkeypatch.setattr(adapter, "post", post)
    turn = await rt.service.accept(_msg(CAMPAIGN, "e1"))
    assert turn is not None
    await turn
    await approve_campaigns(rt.broker)
    await eventually(lambda: any(t.startswith("📋 Campaign") for t in adapter.texts), within=60)
    (record,) = await rt.campaigns.store.recent()
    started = f"campaign:{record.id}:started"
    notices = [(key, kind) for key, kind, label in submitted if label.startswith("notice ")]
    assert (CONV.id, "system") in notices and {n[1] for n in notices} == {"system"}
    assert {n[0] for n in notices} == {CONV.id}  # the campaign's own thread, nowhere else
    # Each notice was posted by its own job in the lane, not by the turn that started it.
    assert running_when_posted[started] == f"notice {started}"
    # Posted after the reply of the turn that started the campaign, in the lane's order.
    keys = [m.idempotency_key for _, m in adapter.posts]
    reply = next(i for i, k in enumerate(keys) if k.endswith(":reply"))
    assert reply < keys.index(started) < keys.index(f"campaign:{record.id}:status")
    # The status message's id was recorded when its lane job posted it, for in-place edits.
    status_at = keys.index(f"campaign:{record.id}:status")
    current = await rt.campaigns.store.get(record.id)
    assert current is not None and current.status_message == f"m{status_at + 1}", (keys, ids)
    assert current.status_message == ids[f"campaign:{record.id}:status"]


async def test_a_notice_recorded_before_a_crash_is_posted_once_after_the_restart(
    isolated_env: Path,
) -> None:
    settings = load_settings(shutdown_grace=0)  # the queued notice must not run at shutdown
    first = FakeChatAdapter()
    rt = await build_runtime(settings, [lambda: first])
    await start_serving(rt)
    # A long turn holds the thread's lane, so the notice is recorded and its post queued.
    hold = asyncio.Event()
    rt.lanes.submit(CONV.id, hold.wait, kind="user", label="a long turn")
    record = await rt.campaigns.start("U1", CONV, spec("echo loss=0.9; sleep 60"))
    await approve_campaigns(rt.broker)
    key = f"campaign:{record.id}:started"
    query = f"SELECT delivery FROM messages WHERE idempotency_key = '{key}'"
    # On disk now exactly what a kill -9 here would leave: the notice, pending.
    await eventually(lambda: db_rows(isolated_env, query) == [("pending",)])
    await shutdown(rt)
    assert not any(m.idempotency_key == key for _, m in first.posts)
    assert db_rows(isolated_env, query) == [("pending",)]

    for attempt in range(2):  # the restart posts it; a second restart does not again
        again = FakeChatAdapter()
        rt = await build_runtime(settings, [lambda adapter=again: adapter])  # type: ignore[misc]
        await start_serving(rt)
        await rt.service.quiesce(CONV)
        posted = [m for _, m in again.posts if m.idempotency_key == key]
        assert len(posted) == (1 if attempt == 0 else 0), again.texts
        if attempt == 0:
            assert posted[0].text.startswith(f"🛰️ Campaign `{record.id}` started")
        assert db_rows(isolated_env, query) == [("sent",)]
        if attempt == 1:
            await rt.campaigns.stop(record.id, by="test")
        await shutdown(rt)


def _write_machines(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "machines.toml").write_text(text)


@pytest.mark.slow
async def test_doctor_names_a_broken_machines_file(isolated_env: Path) -> None:
    from tests.bot.cli.test_cli_end_to_end import _env, _run

    _write_machines(isolated_env, '[machines.gpu]\nkind = "slurm"\nslots = 0\n')
    code, out, _ = await _run("doctor", env=_env(isolated_env))
    assert code == 1
    line = next(line for line in out.splitlines() if "machines" in line and "FAIL" in line)
    assert "[machines.gpu]" in line and "slots" in line
