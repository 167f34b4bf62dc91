"""`raven-bot campaigns` as a real process: headless runs on the local machine (real sandbox,
real APScheduler), decided by the rule-based policy or by a configured model (a loopback
Anthropic API), argument errors, and list/show/stop of a campaign another process runs."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import db_rows, eventually

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

RAVEN = str(Path(sys.executable).with_name("raven-bot"))
WITHIN = 90.0  # hang guard for one command
DECREASING = 'for v in 0.9 0.7 0.5 0.42; do echo "step loss=$v"; done'
SLOW = "for i in 1 2 3 4; do echo loss 0.$((9-i)); sleep 1; done"
LONG = "echo loss=0.5; sleep 600"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["RAVEN_HOME"] = str(home)
    return env


async def _run(*args: str, env: dict[str, str], within: float = WITHIN) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), within)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _run_args(command: str, *extra: str) -> list[str]:
    return [
        "campaigns",
        "run",
        "--goal",
        "watch the test job",
        "--run",
        command,
        "--metric",
        "loss:min",
        "--budget",
        "10m",
        "--poll",
        "0.1s",
        "--json",
        *extra,
    ]


async def test_a_decreasing_loss_closes_with_its_measurements_and_no_model_calls(
    isolated_env: Path,
) -> None:
    code, out, err = await _run(*_run_args(DECREASING), env=_env(isolated_env))
    assert code == 0, err
    record = json.loads(out)
    assert record["state"] == "closed"
    assert [m["value"] for m in record["measurements"]] == [0.9, 0.7, 0.5, 0.42]
    assert record["baseline"] == 0.9 and record["baseline_source"].startswith("first")
    assert [(r["state"], r["exit_code"], r["wake_reason"]) for r in record["rounds"]] == [
        ("ended", 0, "finished")
    ]
    finished = [w for w in record["wakeups"] if w["reason"] == "finished"]
    assert [w["state"] for w in finished] == ["fired"]
    assert finished[0]["lateness"] == 0
    assert record["model_calls"] == 0
    assert record["decider"] == "policy" and record["model_calls_while_waiting"] == 0
    assert "0.42" in record["report"] and "0.9" in record["report"]
    # Each notice is one line on stderr, after the time.
    notices = [line for line in err.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert any("Woke early" in line and "finished" in line for line in notices)
    assert any(line[9:].startswith("📋") and "0.42" in line for line in notices)


async def test_a_configured_model_decides_once_at_the_wake_up_and_never_while_waiting(
    isolated_env: Path,
) -> None:
    key = "sk-ant-test-0123456789"
    report = "From the baseline loss of 0.9 the loss reached 0.42."
    async with FakeAnthropic(api_key=key) as fake:
        fake.queue_tool_use("decide", {"action": "report", "reason": "done", "report": report})
        env = _env(isolated_env) | {
            "ANTHROPIC_API_KEY": key,
            "ANTHROPIC_BASE_URL": fake.base_url,
            "RAVEN_MODEL_MAX_RETRIES": "0",
        }
        code, out, err = await _run(*_run_args(DECREASING), env=env)
        assert code == 0, err
        record = json.loads(out)
        assert len(fake.requests) == 1
        assert fake.requests[0]["json"]["tools"][0]["name"] == "decide"
    assert record["decider"] == "model" and record["state"] == "closed"
    assert record["report"] == report
    assert record["model_calls"] == 1  # the engine's count, the total
    assert record["model_calls_while_waiting"] == 0  # measured at the provider


async def test_a_json_lines_metric_is_read_by_its_key(isolated_env: Path) -> None:
    lines = "; ".join(f'echo \'{{"step": {i}, "loss": {v}}}\'' for i, v in enumerate((0.9, 0.6)))
    code, out, err = await _run(*_run_args(lines, "--json-key", "loss"), env=_env(isolated_env))
    assert code == 0, err
    record = json.loads(out)
    assert [m["value"] for m in record["measurements"]] == [0.9, 0.6]
    assert record["spec"]["metric"]["json_key"] == "loss"
    assert record["measurements"][0]["source_line"] == '{"step": 0, "loss": 0.9}'


async def test_nan_divergence_terminates_the_round_and_reports(isolated_env: Path) -> None:
    command = "echo loss=0.8; echo loss=0.6; echo loss=nan; sleep 600; echo loss=0.1"
    code, out, err = await _run(*_run_args(command), env=_env(isolated_env))
    record = json.loads(out)
    assert code == (0 if record["state"] == "closed" else 1), err
    assert record["state"] in ("closed", "failed")
    assert [m["value"] for m in record["measurements"]] == [0.8, 0.6, "nan"]
    fired = [w["reason"] for w in record["wakeups"] if w["state"] == "fired"]
    assert fired == ["diverged"]
    assert [d["action"] for d in record["decisions"]][:1] == ["terminate"]
    (round_,) = record["rounds"]
    assert round_["state"] == "ended"  # the sleeping job was terminated, not waited for
    assert record["model_calls"] == 0


async def test_scheduled_wake_ups_fire_through_apscheduler_with_their_lateness(
    isolated_env: Path,
) -> None:
    code, out, err = await _run(*_run_args(SLOW, "--wake-every", "1s"), env=_env(isolated_env))
    assert code == 0, err
    record = json.loads(out)
    assert [m["value"] for m in record["measurements"]] == [0.8, 0.7, 0.6, 0.5]
    scheduled = [
        w for w in record["wakeups"] if w["reason"] == "scheduled" and w["state"] == "fired"
    ]
    assert scheduled, record["wakeups"]
    for wake in scheduled:
        assert wake["apscheduler"] is not None, wake  # APScheduler's job fired it
        assert wake["lateness"] >= 0 and math.isfinite(wake["apscheduler"]["lateness"])
    assert any(d["action"] == "wait" for d in record["decisions"])
    assert [w["state"] for w in record["wakeups"] if w["reason"] == "finished"] == ["fired"]
    assert record["model_calls"] == 0


async def test_invalid_arguments_exit_2_with_one_clear_message_each(isolated_env: Path) -> None:
    env = _env(isolated_env)
    args = _run_args(DECREASING)
    args[args.index("loss:min")] = "loss"
    code, out, err = await _run(*args, env=env)
    assert code == 2 and out == ""
    assert "--metric loss: write NAME:min or NAME:max, e.g. loss:min" in err

    args = _run_args(DECREASING)
    args[args.index("10m")] = "soon"
    code, out, err = await _run(*args, "--baseline", "high", env=env)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert "--budget: 'soon' is not a duration: write it like 90s, 15m, 2h" in lines[0]
    assert "--baseline high is not a number" in lines[1]

    code, out, _ = await _run("campaigns", "list", "--json", env=env)
    assert code == 0 and json.loads(out) == []  # nothing was started


async def test_list_show_and_stop_a_campaign_running_in_another_process(
    isolated_env: Path,
) -> None:
    env = _env(isolated_env)
    runner = await asyncio.create_subprocess_exec(
        RAVEN,
        *_run_args(LONG, "--poll", "0.2s"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        listed = await _wait_listed(env)
        campaign_id = listed["id"]
        assert listed["machine"] == "local" and listed["metric"] == "loss"
        assert listed["round"] == 1 and listed["goal"] == "watch the test job"

        code, out, err = await _run("campaigns", "show", campaign_id, "--json", env=env)
        assert code == 0, err
        shown = json.loads(out)
        assert shown["state"] in ("running", "waiting")
        assert shown["rounds"][0]["state"] == "running"
        assert shown["spec"]["command"] == LONG

        code, out, err = await _run("campaigns", "list", env=env)
        assert code == 0 and campaign_id in out and "latest 0.5" in out

        code, out, err = await _run("campaigns", "stop", campaign_id, env=env)
        assert code == 0, err
        assert len(out.strip().splitlines()) == 1
        assert "cancelled" in out and "terminated" in out

        background_out, background_err = await asyncio.wait_for(runner.communicate(), WITHIN)
    finally:
        if runner.returncode is None:
            runner.kill()
            await runner.wait()
    assert runner.returncode == 1, background_err.decode()
    assert json.loads(background_out)["state"] == "cancelled"

    code, out, _ = await _run("campaigns", "show", campaign_id, "--json", env=env)
    shown = json.loads(out)
    assert shown["state"] == "cancelled"
    (round_,) = shown["rounds"]
    assert round_["state"] == "ended" and round_["exit_code"] is not None
    assert [d["action"] for d in shown["decisions"]] == ["cancel"]
    assert all(w["state"] != "pending" for w in shown["wakeups"])

    code, out, _ = await _run("campaigns", "show", campaign_id, env=env)
    assert code == 0 and f"Campaign {campaign_id} (cancelled)" in out
    code, out, _ = await _run("campaigns", "stop", campaign_id, env=env)
    assert code == 0 and "already cancelled" in out


async def test_unknown_campaign_ids_exit_2(isolated_env: Path) -> None:
    env = _env(isolated_env)
    for action in ("show", "stop"):
        code, out, err = await _run("campaigns", action, "cmp_nope", env=env)
        assert code == 2 and out == ""
        assert "no campaign `cmp_nope`" in err and "campaigns list" in err


async def test_ctrl_c_terminates_the_round_cancels_and_exits_130(isolated_env: Path) -> None:
    env = _env(isolated_env)
    runner = await asyncio.create_subprocess_exec(
        RAVEN,
        *_run_args(LONG, "--poll", "0.2s"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        await _wait_listed(env)
        runner.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(runner.communicate(), WITHIN)
    finally:
        if runner.returncode is None:
            runner.kill()
            await runner.wait()
    assert runner.returncode == 130, err.decode()
    record = json.loads(out)
    assert record["state"] == "cancelled"
    (round_,) = record["rounds"]
    assert round_["state"] == "ended" and round_["exit_code"] is not None
    assert "cancelled by Ctrl-C" in err.decode()


def _measured_running(home: Path) -> bool:
    """Whether a campaign runs with a measurement, read from the runner's database (one
    poll is a query, not a `campaigns list` process start, which costs seconds of CPU)."""
    if not (home / "raven.db").exists():
        return False  # not opened yet: connecting would create it
    try:
        return bool(
            db_rows(
                home,
                "SELECT 1 FROM campaigns c JOIN campaign_measurements m ON m.campaign_id = c.id"
                " WHERE c.state IN ('running', 'waiting')",
            )
        )
    except sqlite3.OperationalError:
        return False  # the runner is still creating its tables


async def _wait_listed(env: dict[str, str]) -> dict[str, Any]:
    """The one campaign `list --json` shows once its round runs and has a measurement."""
    home = Path(env["RAVEN_HOME"])
    await eventually(
        lambda: _measured_running(home), within=WITHIN, what="a measured running campaign"
    )
    code, out, err = await _run("campaigns", "list", "--json", env=env)
    assert code == 0, err
    (row,) = [r for r in json.loads(out) if r["state"] in ("running", "waiting") and r["latest"]]
    return row


async def test_the_model_call_count_tells_calls_while_waiting_from_decisions(
    tmp_path: Path,
) -> None:
    from agents.models.offline import OfflineProvider
    from agents.models.types import Message
    from bot.cli.campaign_run import CountingProvider
    from bot.schema import all_migrations
    from core.store import Store
    from oncall.store import CampaignStore
    from tests.oncall_kit import CONV, spec

    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        campaigns = CampaignStore(store)
        await campaigns.create("cmp_1", "U1", CONV, spec("true"))
        counting = CountingProvider(OfflineProvider(), campaigns, "cmp_1")
        ask = [Message.user_text("hello")]
        for state in ("waiting", "deciding", "running", "deciding"):
            await campaigns.update("cmp_1", state=state)
            await counting.complete(system="", messages=ask)
        assert (counting.calls, counting.while_waiting) == (4, 2)
    finally:
        await store.close()
