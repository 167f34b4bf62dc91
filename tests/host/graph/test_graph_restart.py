"""Crash safety of graph runs and prompts with the real process: kill -9 during a run, restart,
and check completed nodes stay completed and reusable, the running node is marked interrupted
and reported, and a pending approval is still answerable. Offline: command-line agents really
run, so no model is needed. Also the offline console demo of a plan with `confirm`."""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
from pathlib import Path

import pytest

from host.graph.records import RunFiles, journal_records, read_output
from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run
from tests.helpers import eventually, write_agents

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

AGENTS_TOML = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt back (test agent)."
command = ["cat"]

[agents.sleeper]
backend = "cli"
description = "Sleeps for a minute (test agent)."
command = ["sh", "-c", "sleep 60"]
"""


def _states(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT node_id, state FROM graph_nodes").fetchall())


async def test_offline_plan_with_confirm_then_answer_in_a_new_session(isolated_env: Path) -> None:
    env = _env(isolated_env)
    plan = b"r1: research: find X\nc1: code: build Y after r1\nconfirm\n"
    code, out, err = await _run("chat", stdin=plan, env=env)
    assert code == 0, err
    assert "[approval] Run this graph?" in out
    assert "1) Approve   2) Deny" in out
    assert "This plan of 2 steps waits for approval (prompt" in out
    assert "nothing runs until it is approved." in out
    assert not (isolated_env / "runs").exists() or not any((isolated_env / "runs").iterdir())

    # The prompt survived the exit; a typed "1" in the next session approves it.
    code, out, err = await _run("chat", stdin=b"1\n", env=env)
    assert code == 0, err
    assert "Approved by" in out
    assert "run `run_" in out and "started (2 node(s))" in out
    assert "failed — Explicit plan" in out  # the run report
    assert "needs a language model" in out or "ANTHROPIC_API_KEY" in out
    assert "`c1` (code) skipped" in out


async def test_offline_deny_runs_nothing(isolated_env: Path) -> None:
    env = _env(isolated_env)
    await _run("chat", stdin=b"r1: research: find X\nconfirm\n", env=env)
    code, out, _ = await _run("chat", stdin=b"Deny\n", env=env)
    assert code == 0
    assert "Graph not approved (denied by" in out
    with sqlite3.connect(isolated_env / "raven.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM graph_runs").fetchone() == (0,)


async def test_kill_during_run_then_restart(isolated_env: Path) -> None:
    write_agents(isolated_env, AGENTS_TOML)
    env = _env(isolated_env)
    db = isolated_env / "raven.db"
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    # A pending approval first, then a run whose second node hangs.
    proc.stdin.write(b"p1: echo: approved later\nconfirm\n\n")
    await proc.stdin.drain()
    line = b""
    while b"Reply with a number" not in line:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
    proc.stdin.write(b"a: echo: alpha\nb: sleeper: wait [after a]\nc: echo: gamma [after b]\n\n")
    await proc.stdin.drain()
    await eventually(
        lambda: (
            db.exists()
            and _states(db).get("a") == "completed"
            and _states(db).get("b") == "running"
        ),
        within=30,
    )
    proc.send_signal(signal.SIGKILL)
    await proc.wait()

    code, out, err = await _run("chat", stdin=b"1\n", env=env)
    assert code == 0, err
    assert "A restart interrupted run" in out
    states = _states(db)
    assert states["a"] == "completed"
    assert states["b"] == "cancelled"
    assert states["c"] == "skipped"
    with sqlite3.connect(db) as conn:
        error = conn.execute("SELECT error FROM graph_nodes WHERE node_id = 'b'").fetchone()[0]
    assert "interrupted" in error
    # The approval made before the crash was answered after it, and its graph ran.
    assert "Approved by" in out
    assert states["p1"] == "completed"

    # A later graph reuses the completed node by reference, without running it again.
    code, out, err = await _run("chat", stdin=b"d: echo: reuse {{a.output}} [after a]\n", env=env)
    assert code == 0, err
    states = _states(db)
    assert states["d"] == "completed"
    output = next((isolated_env / "runs").glob("*/outputs/d.md"))
    assert "alpha" in output.read_text()
    journal = journal_records(output.parent.parent / "journal.jsonl")
    assert "alpha" in (journal["d"].latest.prompt or "")
    # The interruption is reported once only.
    assert "A restart interrupted run" not in out


ANNOUNCED_DONE = re.compile(r"^- ✅ `(\w+)` .*: completed$")


async def test_kill_9_keeps_every_announced_node_result(isolated_env: Path) -> None:
    write_agents(isolated_env, AGENTS_TOML)
    env = _env(isolated_env)
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(
        b"a1: echo: alpha one\na2: echo: alpha two\na3: echo: alpha three\n"
        b"s: sleeper: wait [after a1]\n\n"
    )
    await proc.stdin.drain()
    # The run's status message (edited in place; the console prints each version) is the
    # announcement: read it until it shows the three quick nodes completed.
    announced: set[str] = set()
    while not {"a1", "a2", "a3"} <= announced:
        raw = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert raw, "the chat ended before announcing the results"
        match = ANNOUNCED_DONE.match(raw.decode().rstrip("\n"))
        if match:
            announced.add(match.group(1))
    # And `s` has started: its start is on disk (written just before its agent runs), while
    # SQLite may not say `running` yet (that state waits up to 50 ms to share a commit).
    runs = RunFiles(isolated_env / "runs")
    await eventually(
        lambda: any("s" in runs.started(d.name) for d in runs.root.glob("run_*")),
        within=30,
    )
    proc.send_signal(signal.SIGKILL)
    await proc.wait()

    # Nothing ran after the kill: every announced result is in SQLite and in the run's
    # journal (prompt, output and transcript of the attempt). Its output file is a view
    # written off the critical path, so the kill may come before it: what readers get by
    # that path is the journal's copy either way.
    with sqlite3.connect(isolated_env / "raven.db") as conn:
        rows = {
            r[0]: r[1:]
            for r in conn.execute("SELECT node_id, state, output_path, run_id FROM graph_nodes")
        }
    for node_id in sorted(announced):
        state, output_path, run_id = rows[node_id]
        assert state == "completed", node_id
        journal = journal_records(isolated_env / "runs" / run_id / "journal.jsonl")
        attempt = journal[node_id].latest
        words = {"a1": "alpha one", "a2": "alpha two", "a3": "alpha three"}[node_id]
        assert attempt.output is not None and words in attempt.output
        assert read_output(Path(output_path)) == attempt.output
        assert attempt.prompt is not None and words in attempt.prompt
        assert attempt.transcript
    assert rows["s"][0] in {"pending", "queued", "running"}

    # The restart reports the interrupted run from those records, and `s` as interrupted
    # (cancelled), never as not started, whichever state SQLite had for it.
    code, out, err = await _run("chat", stdin=b"", env=env)
    assert code == 0, err
    assert "A restart interrupted run" in out
    for node_id in sorted(announced):
        assert f"`{node_id}` (echo) completed" in out
    assert "`s` (sleeper) cancelled" in out


async def test_offline_plan_confirm_and_answer_in_one_piped_session(isolated_env: Path) -> None:
    plan = b"r1: research: find X\nc1: code: build Y after r1\nconfirm\n1\n"
    code, out, err = await _run("chat", stdin=plan, env=_env(isolated_env))
    assert code == 0, err
    assert out.index("[approval] Run this graph?") < out.index("Approved by")
    assert "started (2 node(s))" in out
    assert "failed — Explicit plan" in out
    assert "needs a language model" in out
