"""A chat adapter owns its settings and secrets: a new adapter's folder declares a model in its
`settings.py`, and with no other edit its variables are known and masked, and its secret is
redacted from logs and withheld from a sandboxed child (one list, `secret_names`, which the
assembly root hands every scrubber: nothing is withheld because some process read settings)."""

from __future__ import annotations

import io
import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import bot
from agents.backends import AcpProcesses
from agents.backends.base import AgentTask
from agents.models.offline import OfflineProvider
from agents.models.types import ToolCall
from agents.process import scrub_env
from agents.registry import AgentEntry, RegistryError, load_registry
from agents.tools import ToolRegistry
from agents.workspace_tools import ShellPolicy, ToolContext, shell_tool
from bot.app import backend_factory, load_agents
from bot.discord.settings import DiscordSettings
from bot.logging_setup import REDACTED, SecretRedactor
from bot.settings import (
    adapter_settings,
    declared_secret_names,
    known_variables,
    load_settings,
    secret_names,
    unknown_variables,
)
from bot.slack.settings import SlackSettings
from core.secret_names import SECRET_NAME, SecretNames
from host.evaluation.evolution.runtime import ActiveHarnesses
from oncall.machines.common import round_env
from tests.sandboxing import real_sandbox

PASSPHRASE = "correct-horse-battery-" + uuid.uuid4().hex
ADAPTER_SETTINGS = """
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class MatrixSettings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    matrix_passphrase: SecretStr | None = Field(
        default=None, validation_alias="MATRIX_PASSPHRASE", description="Login passphrase."
    )
    matrix_room: str = Field(
        default="", validation_alias="RAVEN_MATRIX_ROOM", description="Room to join."
    )
"""


@pytest.fixture
def new_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A `bot/<platform>/` folder holding only a settings model, as a new adapter starts."""
    name = f"matrix{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "more-adapters" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""A new chat adapter."""\n')
    (folder / "settings.py").write_text(ADAPTER_SETTINGS)
    monkeypatch.setattr(bot, "__path__", [*bot.__path__, str(folder.parent)])
    yield name
    for module in [m for m in sys.modules if m.startswith(f"bot.{name}")]:
        del sys.modules[module]


def test_slack_and_discord_declare_their_settings_in_their_folders() -> None:
    assert {SlackSettings, DiscordSettings} <= set(adapter_settings())
    names = secret_names()
    for secret in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "DISCORD_TOKEN"):
        assert secret in names
    # The model key and the skill hub's token are secrets too; plain knobs are not.
    assert {"ANTHROPIC_API_KEY", "RAVEN_SKILLS_HUB_TOKEN"} <= set(names)
    assert "RAVEN_SLACK_API_URL" not in names and "RAVEN_DISCORD_THREADS" not in names


def test_adapter_settings_keep_their_variables_and_errors(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_SLACK_HTTP_PATH", "events")
    with pytest.raises(ValueError, match=r"RAVEN_SLACK_HTTP_PATH: .*must start with /"):
        load_settings()
    monkeypatch.setenv("RAVEN_SLACK_HTTP_PATH", "/x")
    monkeypatch.setenv("RAVEN_DISCORD_ALLOWED_GUILDS", "1, 2,,3")
    monkeypatch.setenv("RAVEN_DISCORD_API_URL", "https://user:pw-in-url@proxy.example/api")
    settings = load_settings()
    shown = settings.masked()
    assert shown["RAVEN_SLACK_HTTP_PATH"] == "/x"
    assert shown["RAVEN_DISCORD_ALLOWED_GUILDS"] == "1,2,3"
    assert "pw-in-url" not in shown["RAVEN_DISCORD_API_URL"]
    assert "user:pw-in-url" in settings.secret_values()


async def test_a_new_adapters_secret_is_redacted_and_withheld(
    new_adapter: str, isolated_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A name no pattern would call secret: only its declaration says so.
    assert SECRET_NAME.search("MATRIX_PASSPHRASE") is None
    monkeypatch.setenv("MATRIX_PASSPHRASE", PASSPHRASE)
    monkeypatch.setenv("RAVEN_MATRIX_ROOM", "team-room")
    settings = load_settings()
    assert "MATRIX_PASSPHRASE" in secret_names()
    assert {"MATRIX_PASSPHRASE", "RAVEN_MATRIX_ROOM"} <= set(known_variables())
    assert unknown_variables({"RAVEN_MATRIX_ROOM": "x"}, None) == []
    assert PASSPHRASE not in str(settings.masked())
    assert settings.masked()["RAVEN_MATRIX_ROOM"] == "team-room"

    # Logs: the redactor built from the settings' secrets, as `configure_logging` builds it.
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.addFilter(SecretRedactor(settings.secret_values()))
    logger = logging.getLogger(f"test.{new_adapter}")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("login failed with %s", PASSPHRASE)
    finally:
        logger.removeHandler(handler)
    assert PASSPHRASE not in written.getvalue() and REDACTED in written.getvalue()

    # A sandboxed child: even an allow-list naming the secret does not pass it; a plain
    # variable on the same list does (so the list itself works).
    workspace = tmp_path / "ws"
    workspace.mkdir()
    policy = ShellPolicy(
        env_allow=("MATRIX_PASSPHRASE", "RAVEN_MATRIX_ROOM"),
        sandbox=real_sandbox(),
        secret_names=declared_secret_names(),
    )
    tools = ToolRegistry([shell_tool(policy)])
    result = await tools.dispatch(
        ToolCall(id="t", name="run_shell", input={"command": "env"}),
        ToolContext(workspace=workspace.resolve()),
    )
    assert "RAVEN_MATRIX_ROOM=team-room" in result.content
    assert PASSPHRASE not in result.content and "MATRIX_PASSPHRASE" not in result.content

    # An agent as the bot's own assembly builds it (`backend_factory`): the same.
    sandbox = real_sandbox()
    spy = AgentEntry(
        name="spy",
        description="prints its environment",
        backend="cli",
        stateful=False,
        file_capable=True,
        progress=False,
        enabled=True,
        role="raven",
        command=("env",),
        env_allow=("MATRIX_PASSPHRASE", "RAVEN_MATRIX_ROOM"),
    )
    processes = AcpProcesses(sandbox, secret_names=declared_secret_names())
    backend = backend_factory(OfflineProvider(), settings, sandbox, processes, ActiveHarnesses())
    outcome = await backend(spy).run(AgentTask("n1", spy, "go", workspace))
    assert "RAVEN_MATRIX_ROOM=team-room" in outcome.output
    assert PASSPHRASE not in outcome.output and "MATRIX_PASSPHRASE" not in outcome.output


def test_a_declared_name_is_withheld_only_where_the_assembly_passes_it(
    new_adapter: str, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each scrubber withholds an adapter's plain-named secret when handed the settings'
    names, and passes it when handed names without it: the names are injected, not
    remembered from `load_settings`."""
    assert SECRET_NAME.search("MATRIX_PASSPHRASE") is None  # only the declaration says so
    load_settings()  # read first, as the bot does: it must not make the names stick
    environ = {"PATH": "/usr/bin", "MATRIX_PASSPHRASE": PASSPHRASE}
    allow = ["MATRIX_PASSPHRASE"]
    declared, fresh = declared_secret_names(), SecretNames()
    assert declared.looks_secret("MATRIX_PASSPHRASE")

    assert "MATRIX_PASSPHRASE" not in scrub_env(environ, secret_names=declared, allow=allow)
    assert "MATRIX_PASSPHRASE" not in round_env(environ, secret_names=declared, allow=allow)
    assert scrub_env(environ, secret_names=fresh, allow=allow)["MATRIX_PASSPHRASE"] == PASSPHRASE
    assert round_env(environ, secret_names=fresh, allow=allow)["MATRIX_PASSPHRASE"] == PASSPHRASE

    # agents.toml may not allow it either: the bot's registry (as the assembly loads it)
    # refuses the file; the same file checked against names without it is accepted.
    isolated_env.mkdir(parents=True, exist_ok=True)
    agents_file = isolated_env / "agents.toml"
    agents_file.write_text(
        '[agents.matrix]\ndescription = "x"\nbackend = "cli"\ncommand = ["env"]\n'
        'env_allow = ["MATRIX_PASSPHRASE"]\n',
        encoding="utf-8",
    )
    with pytest.raises(RuntimeError, match="MATRIX_PASSPHRASE' looks like a secret"):
        load_agents(load_settings())
    with pytest.raises(RegistryError, match="looks like a secret"):
        load_registry(agents_file, secret_names=declared)
    entry = load_registry(agents_file, secret_names=fresh).require("matrix")
    assert entry.env_allow == ("MATRIX_PASSPHRASE",)


def test_credentials_in_a_model_entrys_url_are_masked_and_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model entry names its server's URL (`openai:m@http://user:pass@host/v1`): doctor
    shows it masked and the log redactor knows its credentials, as for any URL setting."""
    monkeypatch.setenv("RAVEN_MODEL", "openai:qwen@http://ops:pw-in-model@127.0.0.1:9/v1")
    monkeypatch.setenv(
        "RAVEN_MODEL_FALLBACKS", "claude-haiku-4-5,openai:b@http://u:pw-in-fallback@10.0.0.1/v1"
    )
    settings = load_settings()
    shown = settings.masked()
    assert "pw-in-model" not in shown["RAVEN_MODEL"] and "openai:qwen@" in shown["RAVEN_MODEL"]
    assert "pw-in-fallback" not in shown["RAVEN_MODEL_FALLBACKS"]
    assert shown["RAVEN_MODEL_FALLBACKS"].startswith("claude-haiku-4-5,openai:b@")
    secrets = settings.secret_values()
    assert "ops:pw-in-model" in secrets and "u:pw-in-fallback" in secrets
