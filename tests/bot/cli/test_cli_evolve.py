"""`raven-bot evolve` and `raven-bot harness` as real processes against the fake Anthropic
server: a task model that answers tersely only when its harness says so, an Evolver that
proposes that fix among an inert note and a kernel edit; the winner is stored as a version,
shown, diffed, promoted (and then used by the bot's backend) and rolled back; `kill -9`
mid-run and the same command again finishes without redoing recorded attempts."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import db_rows

pytestmark = pytest.mark.slow

TERSE = "Answer with the number only."
INERT_NOTE = "WHEN kubernetes: pods restart when they run out of memory."
PROPOSALS = [
    {
        "kind": "knowledge",
        "failure": "cluster::pod restarts",
        "edits": [{"part": "knowledge", "op": "add", "value": INERT_NOTE}],
        "activation": f"knowledge:{INERT_NOTE}",
        "description": "a note no task needs",
    },
    {
        "kind": "runtime",
        "failure": "sandbox::no network",
        "edits": [{"part": "sandbox", "op": "set", "key": "network", "value": True}],
        "activation": "runtime:network",
    },
    {
        "kind": "prompt",
        "failure": "final answer::extra words around the number",
        "edits": [{"part": "prompt", "op": "append", "value": TERSE}],
        "activation": "prompt:appended",
        "description": "answer tersely",
    },
]


def _tasks(path: Path) -> Path:
    rows: list[dict[str, Any]] = [
        {"id": f"sum-{a}-{b}", "prompt": f"What is {a}+{b}?", "verify": {"exact": str(a + b)}}
        for a, b in ((2, 3), (4, 4), (7, 1))
    ]
    rows.append({"id": "regex-9", "prompt": "What is 4+5?", "verify": {"regex": r"^9$"}})
    rows.append({"id": "sandboxed", "prompt": "What is 1+1?", "verify": {"command": "true"}})
    rows += [
        {
            "id": f"held-{a}",
            "prompt": f"What is {a}+{a}?",
            "verify": {"exact": str(2 * a)},
            "split": "test",
        }
        for a in (3, 6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _respond(body: dict[str, Any]) -> dict[str, Any]:
    system = body.get("system")
    text = system if isinstance(system, str) else json.dumps(system)
    if "You improve an agent's harness" in text:
        answer = "Diagnosis done.\n" + json.dumps(PROPOSALS)
    else:
        asked = json.dumps(body["messages"][-1]["content"])
        a, b = map(int, re.search(r"What is (\d+)\+(\d+)", asked).groups())  # type: ignore[union-attr]
        answer = str(a + b) if TERSE in text else f"The answer is {a + b}."
    return {"content": [{"type": "text", "text": answer}], "stop_reason": "end_turn"}


ARGS = (
    "--rounds",
    "2",
    "--candidates",
    "3",
    "--subset",
    "3",
    "--keep",
    "1",
    "--patience",
    "1",
    "--attempts",
    "2",
)


def _key_env(home: Path, fake: FakeAnthropic) -> dict[str, str]:
    return _env(
        home, ANTHROPIC_API_KEY="sk-ant-evolve-0123456789", ANTHROPIC_BASE_URL=fake.base_url
    )


async def test_evolve_stores_the_improvement_and_harness_promotes_it(
    isolated_env: Path, tmp_path: Path
) -> None:
    tasks = _tasks(tmp_path / "tasks.jsonl")
    async with FakeAnthropic() as fake:
        fake.responder = _respond
        env = _key_env(isolated_env, fake)
        code, out, err = await _run(
            "evolve", "code", "--tasks", str(tasks), *ARGS, "--json", env=env, within=180
        )
        assert code == 0, err
        result = json.loads(out)
        assert result["selected_cell"] == "prompt::final answer::extra words around the number"
        assert result["train_before"] == pytest.approx(0.2) and result["train_after"] == 1.0
        assert (result["test_before"], result["test_after"]) == (0.0, 1.0)
        assert result["version"] == 1 and result["attempts_used"] <= result["attempts_bound"]
        assert "round 1:" in err and "evolve run code-" in err
        # The inert note never activated; the kernel edit never ran a task.
        decisions = json.loads(
            db_rows(isolated_env, "SELECT decisions FROM evo_rounds WHERE round = 0")[0][0]
        )
        reasons = " | ".join(v["reason"] for v in decisions["screens"].values())
        assert "never activated" in reasons and "kernel (sandbox) cannot be edited" in reasons
        # The same command again: the finished run is read back, nothing is asked again.
        asked = len(fake.requests)
        code, again, err = await _run(
            "evolve", "code", "--tasks", str(tasks), *ARGS, "--json", env=env
        )
        assert code == 0, err
        assert json.loads(again) == result and len(fake.requests) == asked

    plain = _env(isolated_env)
    code, out, err = await _run("harness", "list", env=plain)
    assert code == 0 and "code v1  proposed" in out, out + err
    code, out, _ = await _run("harness", "diff", "code", "0", "1", env=plain)
    assert f"+{TERSE}" in out
    code, out, _ = await _run("harness", "show", "code", "1", env=plain)
    shown = json.loads(out)
    assert shown["lineage"][-1].endswith("/h0") and TERSE in shown["harness"]["prompt"]
    code, out, _ = await _run("harness", "promote", "code", "1", env=plain)
    assert code == 0 and "now runs harness v1" in out
    assert "code v1  active" in (await _run("harness", "list", "code", env=plain))[1]
    code, out, err = await _run("harness", "promote", "code", "7", env=plain)
    assert code == 2 and "no harness version 7" in err
    code, out, _ = await _run("harness", "rollback", "code", env=plain)
    assert code == 0 and "built-in harness" in out


async def test_harness_show_0_is_the_built_in_harness_diff_compares_against(
    isolated_env: Path,
) -> None:
    env = _env(isolated_env)
    code, out, err = await _run("harness", "show", "code", "0", env=env)
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["agent"], shown["version"], shown["state"]) == ("code", 0, "active")
    assert shown["harness"]["prompt"]  # the specialist's own system prompt
    code, out, err = await _run("harness", "show", "nosuch", "0", env=env)
    assert code == 2 and "no agent 'nosuch'" in err


async def test_evolve_refuses_offline_and_bad_task_files(
    isolated_env: Path, tmp_path: Path
) -> None:
    tasks = _tasks(tmp_path / "tasks.jsonl")
    code, _, err = await _run("evolve", "code", "--tasks", str(tasks), env=_env(isolated_env))
    assert code == 2 and "needs a model" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"id": "a", "prompt": "x", "verify": {"exact": "1", "regex": "1"}}\n', encoding="utf-8"
    )
    code, _, err = await _run("evolve", "code", "--tasks", str(bad), env=_env(isolated_env))
    assert code == 2 and "bad.jsonl:1: verify" in err and "exactly one of" in err


async def test_kill_9_mid_run_and_the_same_command_finishes_without_redoing(
    isolated_env: Path, tmp_path: Path
) -> None:
    tasks = _tasks(tmp_path / "tasks.jsonl")
    async with FakeAnthropic() as fake:
        fake.responder = _respond
        env = _key_env(isolated_env, fake)
        proc = await asyncio.create_subprocess_exec(
            RAVEN,
            "evolve",
            "code",
            "--tasks",
            str(tasks),
            *ARGS,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await fake.wait_for_requests(14, timeout=120)  # h0's training log is under way
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        recorded = db_rows(isolated_env, "SELECT COUNT(*) FROM evo_attempts")[0][0]
        assert recorded >= 10
        before = len(fake.requests)
        code, out, err = await _run(
            "evolve", "code", "--tasks", str(tasks), *ARGS, "--json", env=env, within=180
        )
        assert code == 0, err
        assert json.loads(out)["version"] == 1
        total = db_rows(isolated_env, "SELECT COUNT(*) FROM evo_attempts")[0][0]
        # Every attempt is recorded once; the restart only ran what was not recorded (plus
        # the proposer's call), so at most the one attempt in flight at the kill ran twice.
        task_calls = [
            r
            for r in fake.requests[before:]
            if "improve an agent" not in json.dumps(r["json"].get("system"))
        ]
        assert len(task_calls) <= total - recorded + 1
