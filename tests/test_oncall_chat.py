"""A campaign started from a thread with the offline syntax (no model key): watched,
reported in the thread, listed by `status`, cancelled by `stop`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.settings import load_settings
from host.messages import InboundMessage
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually

CAMPAIGN = (
    "campaign: watch the toy training | machine: local | "
    'run: for v in 0.9 0.6 0.45; do echo "loss $v"; done | metric: loss min | budget: 10m '
    "| poll: 0.05s"
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
    assert any("started" in t and "cmp_" in t for t in adapter.texts)
    await eventually(lambda: any(t.startswith("📋 Campaign") for t in adapter.texts), within=60)
    report = next(t for t in adapter.texts if t.startswith("📋 Campaign"))
    assert "0.45" in report and "0.9" in report
    (record,) = await rt.campaigns.store.recent()
    assert record.state == "closed" and record.model_calls == 0
    await rt.service.accept(_msg("status", "e2"))
    assert any(f"campaign `{record.id}` closed" in t for t in adapter.texts)


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
    await rt.service.accept(_msg("stop", "e2"))
    (record,) = await rt.campaigns.store.recent()
    await eventually(lambda: any("cancelled by stop" in t for t in adapter.texts))
    assert (await rt.campaigns.store.get(record.id)).state == "cancelled"  # type: ignore[union-attr]


def _write_machines(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "machines.toml").write_text(text)


async def test_doctor_names_a_broken_machines_file(isolated_env: Path) -> None:
    from tests.test_cli_end_to_end import _env, _run

    _write_machines(isolated_env, '[machines.gpu]\nkind = "slurm"\nslots = 0\n')
    code, out, _ = await _run("doctor", env=_env(isolated_env))
    assert code == 1
    line = next(line for line in out.splitlines() if "machines" in line and "FAIL" in line)
    assert "[machines.gpu]" in line and "slots" in line
