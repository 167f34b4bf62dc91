"""`raven-bot eval` as a real process: `score` on prediction files, `plans` refusing to run
offline, and `plans` end to end against the fake Anthropic server with scripted graphs whose
scores are known (nothing is dispatched)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.slow

CHAIN = {
    "nodes": [
        {"id": "r", "domain": "research"},
        {"id": "k", "domain": "coding"},
        {"id": "w", "domain": "content"},
    ],
    "edges": [["r", "k"], ["k", "w"]],
}
PAIR = {
    "nodes": [{"id": "k", "domain": "coding"}, {"id": "o", "domain": "oncall"}],
    "edges": [["k", "o"]],
}
TASKS = [
    {
        "id": "chain",
        "request": "Benchmark three hashing libraries and brief the team.",
        "reference": CHAIN,
    },
    {
        "id": "pair",
        "request": "Port the loader and keep the nightly import alive.",
        "reference": PAIR,
    },
    {
        "id": "quiet",
        "request": "Summarize what a good incident review looks like.",
        "reference": CHAIN,
    },
]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


async def test_score_prints_per_record_and_mean_metrics(isolated_env: Path, tmp_path: Path) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", TASKS)
    predictions = _write(
        tmp_path / "pred.jsonl",
        [
            {"id": "chain", **CHAIN},
            {"id": "pair", "nodes": [{"id": "x", "domain": "coding"}], "edges": []},
        ],
    )
    code, out, err = await _run(
        "eval", "score", str(predictions), "--tasks", str(tasks), "--json", env=_env(isolated_env)
    )
    assert code == 0, err
    report = json.loads(out)
    rows = {r["id"]: r for r in report["tasks"]}
    assert rows["chain"]["exact_match"] is True and rows["chain"]["node_f1"] == 1.0
    assert rows["pair"]["node_f1"] == pytest.approx(2 / 3) and rows["pair"]["poa"] == 1.0
    assert rows["quiet"]["predicted"] is False and rows["quiet"]["node_f1"] == 0.0
    assert report["defined"]["poa"] == 3
    assert report["mean"]["exact_match"] == pytest.approx(1 / 3)
    code, out, err = await _run(
        "eval", "score", str(predictions), "--tasks", str(tasks), env=_env(isolated_env)
    )
    assert code == 0, err
    assert "mean over records whose reference has 2+ domains" in out


async def test_score_names_a_bad_line_and_the_fix(isolated_env: Path, tmp_path: Path) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", TASKS)
    bad = tmp_path / "pred.jsonl"
    bad.write_text('{"id": "chain", "nodes": "r"}\n', encoding="utf-8")
    code, _, err = await _run(
        "eval", "score", str(bad), "--tasks", str(tasks), env=_env(isolated_env)
    )
    assert code == 2
    assert "pred.jsonl:1: nodes:" in err and "eval --help" in err


async def test_plans_without_a_key_says_so_and_fails(isolated_env: Path, tmp_path: Path) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", TASKS)
    code, out, err = await _run("eval", "plans", "--tasks", str(tasks), env=_env(isolated_env))
    assert code == 2
    assert "needs a model" in err and "never faked" in err
    assert out == ""


def _submission(*nodes: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {
        "task_summary": "plan",
        "nodes": [{"id": i, "agent": a, "template": f"do {i}", "deps": d} for i, a, d in nodes],
    }


def _respond(body: dict[str, Any]) -> dict[str, Any] | None:
    """The scripted Host: by request, a graph (after one malformed try), a delegate call, or
    a plain answer; after a tool result, a closing text (never reached: capture ends it)."""
    last = body["messages"][-1]["content"]
    if any(block.get("type") == "tool_result" for block in last):
        # A refused graph comes back as an error result, as in the bot's own turns.
        if any(block.get("is_error") for block in last):
            return {
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_fixed",
                        "name": "submit_graph",
                        "input": _submission(
                            ("r1", "research", []), ("c1", "code", ["r1"]), ("d1", "design", ["c1"])
                        ),
                    }
                ],
                "stop_reason": "tool_use",
            }
        return {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}
    text = json.dumps(last)
    if "hashing libraries" in text:
        bad = {"task_summary": "plan", "nodes": []}  # refused: no nodes
        tool = {"type": "tool_use", "id": "toolu_bad", "name": "submit_graph", "input": bad}
    elif "nightly import" in text:
        tool = {
            "type": "tool_use",
            "id": "toolu_d",
            "name": "delegate",
            "input": {"agent": "code", "task": "port it"},
        }
    else:
        return {
            "content": [{"type": "text", "text": "Here is how I see it."}],
            "stop_reason": "end_turn",
        }
    return {
        "content": [tool],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


async def test_plans_end_to_end_against_the_fake_model(isolated_env: Path, tmp_path: Path) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", TASKS)
    saved = tmp_path / "predictions.jsonl"
    async with FakeAnthropic() as fake:
        fake.responder = _respond
        env = _env(
            isolated_env,
            ANTHROPIC_API_KEY="sk-ant-eval-0123456789",
            ANTHROPIC_BASE_URL=fake.base_url,
        )
        code, out, err = await _run(
            "eval",
            "plans",
            "--tasks",
            str(tasks),
            "--attempts",
            "2",
            "--json",
            "--predictions",
            str(saved),
            env=env,
            within=120,
        )
    assert code == 0, err
    report = json.loads(out)
    rows = {(r["id"], r["attempt"]): r for r in report["tasks"]}
    assert set(rows) == {(t["id"], a) for t in TASKS for a in (0, 1)}
    chain = rows[("chain", 0)]
    assert chain["exact_match"] is True and chain["outcome"] == "submitted"
    assert chain["rejected_submissions"] == 1 and chain["calls"] == 2
    pair = rows[("pair", 1)]
    assert pair["outcome"] == "submitted" and pair["node_f1"] == pytest.approx(2 / 3)
    quiet = rows[("quiet", 0)]
    assert quiet["outcome"] == "answered" and quiet["node_f1"] == 0.0 and quiet["calls"] == 1
    assert report["mean"]["exact_match"] == pytest.approx(2 / 6)
    assert report["accounting"]["calls"] == 2 * (2 + 1 + 1)
    assert "[6/6]" in err  # progress on stderr
    # Nothing was dispatched: no run, no agent call; every request was a Host planning turn.
    assert all("submit_graph" in json.dumps(r["json"].get("tools", [])) for r in fake.requests)
    assert not (isolated_env / "runs").exists()
    lines = [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == ["chain", "chain", "pair", "pair", "quiet", "quiet"]
    # Saved predictions score the same with `eval score`.
    code, again, err = await _run(
        "eval", "score", str(saved), "--tasks", str(tasks), "--json", env=_env(isolated_env)
    )
    assert code == 0, err
    assert json.loads(again)["mean"] == report["mean"]
