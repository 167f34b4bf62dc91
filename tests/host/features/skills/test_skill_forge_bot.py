"""Skill Forge in the assembled bot: the gate picks skills for a request and their ids,
names and descriptions reach the Host fenced, with resource paths, recorded per turn (the
bodies go to the dispatched nodes, not to every Host call); a failing gate falls back;
finished runs leave cases (offline too) and, with a model and embeddings, revise the agent's
experience skills, which the memory source then returns; and the `skills` CLI."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bot.app import build_runtime, shutdown
from bot.schema import all_migrations
from bot.settings import load_settings
from core.store import Store
from host.features.skills.experience import ExperienceWriter
from host.features.skills.store import ExperienceSkillSource, ExperienceStore
from memory.embeddings import Vectors, normalize_rows
from skills.evolution import Case
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.fakes.anthropic_server import EPISODE_FORMER, FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, inbound, write_agents

GOOD_BODY = "\n".join(
    [
        "1. Read the failing test's assertion and the code it calls.",
        "2. Reproduce the failure with the single test.",
        "3. Change the code under test, not the assertion.",
        "4. Re-run the single test, then the whole suite.",
        "5. Report the command and its result.",
    ]
)


class Models:
    """A Host that answers plainly, and a gate whose answer the test chooses."""

    def __init__(self, gate_answer: str) -> None:
        self.gate_answer = gate_answer
        self.host_systems: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = json.dumps(body.get("system"))
        if "You select procedures (skills)" in system:
            return {"content": self.gate_answer}
        self.host_systems.append(system)
        return {"content": "ok"}


async def _turn_with(
    monkeypatch: pytest.MonkeyPatch, gate_answer: str, text: str
) -> tuple[Models, Path, Any]:
    models = Models(gate_answer)
    fake = FakeAnthropic(side_calls=(EPISODE_FORMER,))
    await fake.start()
    fake.responder = models
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    monkeypatch.setenv("RAVEN_SKILLS", "true")
    settings = load_settings()
    runtime = await build_runtime(settings, [FakeChatAdapter])
    try:
        turn = await runtime.service.accept(inbound(text, "e1"))
        assert turn is not None
        outcome = await turn
    finally:
        await shutdown(runtime)
        await fake.stop()
    return models, settings.home, outcome


async def test_the_gate_picks_a_skill_that_reaches_the_host_fenced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = '{"plan": "chart it", "selected": ["local/svg-chart", "local/nonexistent"]}'
    models, home, outcome = await _turn_with(
        monkeypatch, answer, "please make an svg chart from this csv of latencies"
    )
    (system,) = models.host_systems
    assert "local/svg-chart" in system and "untrusted-data" in system
    assert "scripts/csv_to_svg.py" in system  # resource paths resolved
    assert "Produce an SVG bar or line chart" in system  # its description, not its body
    assert "Understand the data" not in system
    assert "local/run-test-suite" not in system
    assert db_rows(home, "SELECT turn_id, qid FROM skill_injections") == [
        (outcome.turn_id, "local/svg-chart")
    ]


async def test_a_failing_gate_falls_back_to_the_top_of_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    models, home, _ = await _turn_with(
        monkeypatch, "I cannot decide, sorry.", "please make an svg chart from this csv"
    )
    injected = [q for (q,) in db_rows(home, "SELECT qid FROM skill_injections ORDER BY position")]
    assert injected[0] == "local/svg-chart" and 1 <= len(injected) <= 3  # k_fb = 3
    assert "local/svg-chart" in models.host_systems[0]


async def test_skills_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    monkeypatch.setenv("RAVEN_SKILLS", "false")
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        assert not any(type(s).__name__ == "SkillContext" for s in runtime.host.context_sources)
    finally:
        await shutdown(runtime)


class HashEmbedder:
    """Feature-hashed token counts, normalized (same text, same vector)."""

    name = "hash/32"
    dimension = 32

    async def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), 32), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in text.lower().split():
                out[row, int(hashlib.sha1(token.encode()).hexdigest(), 16) % 32] += 1.0
        return normalize_rows(out)


class OpsCompleter:
    """The skill-extraction call: always proposes one new skill."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, system: str, user: str) -> str:
        self.calls += 1
        op = {
            "action": "add",
            "name": "fix-flaky-parser-test",
            "description": "Use when the parser test fails intermittently.",
            "body": GOOD_BODY,
            "confidence": 1.7,
        }
        return json.dumps([op])


async def test_experience_revises_an_agents_skills(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        experience = ExperienceStore(store)
        completer = OpsCompleter()
        writer = ExperienceWriter(experience, completer=completer, embedder=HashEmbedder())
        case = await experience.add_case(
            "code",
            "run_1",
            "n1",
            Case("", 1.0, "fix the parser test that fails", "code completed the task", "", 0.9),
        )
        await writer._revise("code", case)
        (stored,) = await experience.skills("code")
        assert stored.record.name == "fix-flaky-parser-test"
        assert stored.record.confidence == 1.0  # clipped
        assert stored.record.lineage == (case.id,)
        hits = await ExperienceSkillSource(experience, "code").search("parser test fails", 3)
        assert [h.qid for h in hits] == [f"memory/code/{stored.id}"]
        # A low-quality case makes no model call.
        low = Case("", 2.0, "x", "y", "", 0.1)
        await writer._revise("code", await experience.add_case("code", "run_2", "n1", low))
        assert completer.calls == 1
    finally:
        await store.close()


ECHO_AGENTS = '[agents.echo]\nbackend = "cli"\ndescription = "Echoes."\ncommand = ["cat"]\n'


async def test_a_finished_run_leaves_cases_offline(isolated_env: Path) -> None:
    write_agents(isolated_env, ECHO_AGENTS)
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        turn = await runtime.service.accept(inbound("b1: echo: build the benchmark table", "e1"))
        assert turn is not None
        await turn
        await runtime.service.quiesce(inbound("x", "x").conversation)
        await runtime.experience_writer.idle()
        rows = db_rows(isolated_env, "SELECT agent, node_id, intent, quality FROM agent_cases")
        assert rows == [("echo", "b1", "build the benchmark table", 0.9)]
        assert db_rows(isolated_env, "SELECT COUNT(*) FROM experience_skills") == [(0,)]
    finally:
        await shutdown(runtime)


@pytest.mark.slow
async def test_the_skills_cli_lists_and_ranks(isolated_env: Path) -> None:
    env = _env(isolated_env)
    code, out, err = await _run("skills", "list", "--json", env=env)
    assert code == 0, err
    listed = {s["name"]: s["source"] for s in json.loads(out)}
    assert listed["svg-chart"] == "bundled" and len(listed) >= 8
    code, out, err = await _run("skills", "search", "--json", "svg chart from csv", env=env)
    assert code == 0, err
    (first, *_) = json.loads(out)
    assert first["name"] == "svg-chart" and first["ranks"] == {"local": [1]}
    assert first["rrf"] == pytest.approx(1.0 / 61, abs=1e-6)
    code, out, _ = await _run("skills", "search", "svg chart", env=env)
    assert "svg-chart" in out and "local #1" in out
    assert sys.executable  # the CLI ran from this venv


async def test_a_dispatched_node_gets_its_specialists_default_skills(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    monkeypatch.setenv("RAVEN_SKILLS", "true")
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        turn = await runtime.service.accept(inbound("c1: code: add a parser test", "e1"))
        assert turn is not None
        await turn
        await runtime.service.quiesce(inbound("x", "x").conversation)
        prompts = [
            json.loads(line)["text"]
            for path in (isolated_env / "runs").glob("*/journal.jsonl")
            for line in path.read_text().splitlines()
            if json.loads(line).get("kind") == "prompt"
        ]
        (prompt,) = prompts
        assert prompt.index("add a parser test") < prompt.index("local/run-test-suite")
        assert "untrusted-data" in prompt
        # Recorded as the node's injections: the default skill first, then the selection.
        rows = db_rows(isolated_env, "SELECT turn_id, qid FROM skill_injections ORDER BY id")
        node = [q for turn, q in rows if turn.endswith(":c1")]
        assert node[0] == "local/run-test-suite" and "local/fix-failing-test" in node
    finally:
        await shutdown(runtime)


class ClusteringCompleter(OpsCompleter):
    """Also answers the cluster choice: always the first recalled cluster."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster_questions = 0

    async def complete(self, system: str, user: str) -> str:
        if "group an agent's tasks by intent" in system:
            self.cluster_questions += 1
            return 'Sure: {"cluster": 0}'
        return await super().complete(system, user)


async def test_a_close_intent_joins_a_cluster_by_the_models_choice(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        experience = ExperienceStore(store)
        completer = ClusteringCompleter()
        writer = ExperienceWriter(experience, completer=completer, embedder=HashEmbedder())
        for n, intent in enumerate(("fix the flaky parser test", "fix the slow lexer test now")):
            case = Case("", float(n), intent, "code completed the task", "", 0.9)
            await writer._revise("code", await experience.add_case("code", "r", f"n{n}", case))
        (cluster,) = await experience.clusters("code")
        assert cluster.count == 2 and completer.cluster_questions == 1
    finally:
        await store.close()


async def test_cases_recorded_offline_are_revised_once_a_model_is_there(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        experience = ExperienceStore(store)
        offline = ExperienceWriter(experience, completer=None, embedder=None)
        case = Case("", 1.0, "fix the parser test that fails", "code completed the task", "", 0.9)
        stored = await experience.add_case("code", "run_1", "n1", case)
        await offline._revise("code", stored)
        assert await offline.catch_up() == 0  # still no model: the case keeps waiting
        assert [c.id for _, c in await experience.unrevised()] == [stored.id]
        completer = OpsCompleter()
        online = ExperienceWriter(experience, completer=completer, embedder=HashEmbedder())
        assert await online.catch_up() == 1
        await online.idle()
        assert [s.record.name for s in await experience.skills("code")] == ["fix-flaky-parser-test"]
        assert await experience.unrevised() == [] and completer.calls == 1
        assert await online.catch_up() == 0  # revised once only
    finally:
        await store.close()


def _break_config(home: Path) -> None:
    (home / "skills" / "broken").mkdir(parents=True)
    (home / "skills" / "broken" / "SKILL.md").write_text("no frontmatter here\n")
    (home / "permissions.toml").write_text('[default]\nmode = "yolo"\n')


@pytest.mark.slow
async def test_doctor_reports_broken_skills_and_permission_rules(isolated_env: Path) -> None:
    _break_config(isolated_env)
    code, out, _ = await _run("doctor", env=_env(isolated_env, RAVEN_SKILLS="true"))
    skills = next(line for line in out.splitlines() if "] skills" in line)
    assert "[WARN]" in skills and "broken/SKILL.md: no YAML frontmatter" in skills
    permissions = next(line for line in out.splitlines() if "] permissions" in line)
    assert "[FAIL]" in permissions and "mode" in permissions
    assert code != 0  # a broken rules file denies everything: a required check
