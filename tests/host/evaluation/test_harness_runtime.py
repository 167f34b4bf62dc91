"""A promoted harness is what the bot's agent runs: its prompt as the system prompt, its
knowledge notes before the tasks they apply to, its iteration cap; rolled back, the built-in
harness runs again."""

from __future__ import annotations

from pathlib import Path

from agents.backends import AcpProcesses
from agents.backends.base import AgentTask
from agents.models.types import Message, ModelReply, TextBlock, ToolSpec
from agents.registry import default_registry
from bot.app import backend_factory, build_sandbox
from bot.schema import all_migrations
from bot.settings import load_settings
from core.secret_names import SecretNames
from core.store import Store
from host.evaluation.evolution.harness import Harness
from host.evaluation.evolution.runtime import ActiveHarnesses
from host.evaluation.evolution.versions import HarnessVersions
from tests.fakes.providers import TestProvider

EVOLVED = Harness(
    prompt="You are the evolved code agent.",
    knowledge=("WHEN flaky: rerun the test twice before blaming the code.", "Cite file paths."),
    runtime={"max_iterations": 3, "max_tokens": 1024},
)


class Recording(TestProvider):
    """Answers at once and keeps what each call was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    async def complete(
        self,
        *,
        system: str,
        messages: list[Message],  # type: ignore[override]
        tools: list[ToolSpec] = [],  # noqa: B006 - never mutated
        max_tokens: int = 4096,
    ) -> ModelReply:
        text = messages[-1].content[0].text  # type: ignore[union-attr]
        self.calls.append((system, text, max_tokens))
        return ModelReply(content=[TextBlock(text="done")], stop_reason="end_turn")


async def _run_code(store: Store, provider: Recording, tmp_path: Path, prompt: str) -> None:
    settings = load_settings()
    harnesses = ActiveHarnesses()
    await harnesses.load(store)
    sandbox = build_sandbox(settings)
    entry = default_registry().get("code")
    assert entry is not None
    backend = backend_factory(
        provider, settings, sandbox, AcpProcesses(sandbox, secret_names=SecretNames()), harnesses
    )(entry)
    await backend.run(AgentTask("n1", entry, prompt, tmp_path / "ws"))


async def test_the_promoted_harness_runs_and_rollback_restores_the_builtin(
    isolated_env: Path, tmp_path: Path
) -> None:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        versions = HarnessVersions(store)
        version = await versions.add("code", EVOLVED, ["run/h0", "run/h3"], {"run_id": "run"})
        provider = Recording()
        await _run_code(store, provider, tmp_path, "Fix the flaky test in tests/")
        assert "evolved" not in provider.calls[-1][0]  # proposed, not promoted: built-in
        await versions.promote("code", version, "admin")
        await _run_code(store, provider, tmp_path, "Fix the flaky test in tests/")
        system, message, max_tokens = provider.calls[-1]
        assert system == EVOLVED.prompt and max_tokens == 1024
        assert "rerun the test twice" in message and "Cite file paths." in message
        assert message.endswith("Fix the flaky test in tests/")
        await _run_code(store, provider, tmp_path, "Rename a variable")
        assert "rerun the test twice" not in provider.calls[-1][1]  # the note's WHEN fails
        assert await versions.rollback("code", "admin") is None
        await _run_code(store, provider, tmp_path, "Rename a variable")
        assert "evolved" not in provider.calls[-1][0]
    finally:
        await store.close()
