"""The agent registry: defaults, presets by PATH, TOML overrides, and clear errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agents.registry import (
    AgentEntry,
    AgentRegistry,
    RegistryError,
    default_registry,
    load_registry,
)
from core.secret_names import SecretNames

ROSTER = ["raven", "research", "code", "design", "oncall"]


def nothing_on_path(name: str) -> str | None:
    return None


def everything_on_path(name: str) -> str | None:
    return f"/usr/local/bin/{name}"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    return path


def test_default_roster() -> None:
    registry = default_registry(which=nothing_on_path)
    assert [e.name for e in registry.enabled()] == ROSTER
    for name in ROSTER:
        entry = registry.get(name)
        assert entry is not None
        assert entry.backend == "inproc" and entry.role == name
        assert entry.stateful and entry.file_capable and entry.progress and entry.enabled
        assert len(entry.description) > 40


def test_presets_follow_path() -> None:
    off = default_registry(which=nothing_on_path)
    claude = off.get("claude-code")
    assert claude is not None and not claude.enabled
    assert "`claude` was not found on PATH" in claude.disabled_reason
    assert "claude-code" not in off.roster_text()

    on = default_registry(which=everything_on_path)
    claude, codex = on.get("claude-code"), on.get("codex")
    assert claude is not None and codex is not None
    assert claude.enabled and codex.enabled
    assert claude.command == ("claude", "-p") and claude.prompt_via == "arg"
    assert codex.command == ("codex", "exec")
    assert claude.backend == "cli" and not claude.stateful and claude.file_capable


def test_only_the_present_binary_is_enabled() -> None:
    registry = default_registry(which=lambda name: "/bin/codex" if name == "codex" else None)
    names = [e.name for e in registry.enabled()]
    assert "codex" in names and "claude-code" not in names


def test_roster_text_lists_enabled_agents_with_tags() -> None:
    text = default_registry(which=everything_on_path).roster_text()
    lines = text.splitlines()
    assert lines[0].startswith("- `raven` — General assistant")
    assert lines[0].endswith("[stateful, file-capable, progress]")
    claude = next(line for line in lines if line.startswith("- `claude-code`"))
    assert claude.endswith("[file-capable]")


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    registry = load_registry(
        tmp_path / "agents.toml", which=nothing_on_path, secret_names=SecretNames()
    )
    assert [e.name for e in registry.enabled()] == ROSTER


def test_file_overrides_field_wise_and_extends(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[agents.code]
description = "Our code agent"
timeout_seconds = 60

[agents.design]
enabled = false

[agents.aider]
backend = "cli"
description = "Aider pair programmer"
command = ["aider", "--yes", "--message"]
prompt_via = "arg"
api_key_env = "OPENAI_API_KEY"
env_allow = ["OPENAI_BASE_URL", "OPENAI_API_KEY"]

[agents.local-llm]
backend = "api"
description = "A local model"
api_style = "openai"
model = "qwen"
base_url = "http://127.0.0.1:8000/v1"
""",
    )
    registry = load_registry(path, which=everything_on_path, secret_names=SecretNames())
    code = registry.get("code")
    assert code is not None
    assert code.description == "Our code agent" and code.timeout_seconds == 60
    assert code.backend == "inproc" and code.stateful and code.role == "code"  # the rest kept
    design = registry.get("design")
    assert design is not None and not design.enabled
    assert "design" not in [e.name for e in registry.enabled()]
    aider = registry.get("aider")
    assert aider is not None and aider.enabled
    assert aider.command == ("aider", "--yes", "--message")
    assert not aider.stateful and aider.file_capable and not aider.progress  # cli defaults
    assert aider.env_allow == ("OPENAI_BASE_URL", "OPENAI_API_KEY")
    local = registry.get("local-llm")
    assert local is not None and local.backend == "api" and local.api_style == "openai"
    assert local.stateful and not local.file_capable and not local.progress  # no tools
    # Order: defaults first, then additions in file order.
    assert [e.name for e in registry.entries()][-2:] == ["aider", "local-llm"]


def test_anthropic_style_api_agents_get_loop_capabilities(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[agents.remote]\nbackend = "api"\ndescription = "Remote"\nmodel = "claude-x"\n'
        'role = "code"\nprogress = false\n',
    )
    remote = load_registry(path, which=nothing_on_path, secret_names=SecretNames()).get("remote")
    assert remote is not None and remote.stateful and remote.file_capable
    assert not remote.progress  # an explicit key still wins


def test_file_can_enable_a_preset_and_switch_a_default_backend(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[agents.research]
backend = "cli"
command = ["my-researcher"]
""",
    )
    registry = load_registry(path, which=everything_on_path, secret_names=SecretNames())
    research = registry.get("research")
    assert research is not None and research.backend == "cli"
    assert research.command == ("my-researcher",) and research.enabled


def test_an_acp_entry_runs_its_command_when_found_and_says_why_not_otherwise(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        '[agents.zed]\nbackend = "acp"\ndescription = "Zed over ACP"\n'
        'command = ["zed-acp"]\nargs = ["--stdio"]\nmode = "code"\nidle_seconds = 60\n'
        "network = false\n",
    )
    entry = load_registry(path, which=everything_on_path, secret_names=SecretNames()).require("zed")
    assert entry.command == ("zed-acp", "--stdio") and entry.stateful and entry.mode == "code"
    assert not entry.network
    missing = load_registry(path, which=nothing_on_path, secret_names=SecretNames()).get("zed")
    assert missing is not None and not missing.enabled
    assert missing.disabled_reason == "`zed-acp` was not found on PATH"
    # A preset says how to install it.
    claude = load_registry(None, which=nothing_on_path, secret_names=SecretNames()).get(
        "claude-acp"
    )
    assert claude is not None and "npm install -g @agentclientprotocol/claude-agent-acp" in (
        claude.disabled_reason
    )


def test_a_wrong_acp_entry_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path, '[agents.zed]\nbackend = "acp"\ndescription = "Zed"\n')
    with pytest.raises(RegistryError, match="an acp agent needs the command that starts it"):
        load_registry(path, which=everything_on_path, secret_names=SecretNames())
    path = _write(tmp_path, '[agents.raven]\nmode = "code"\n')
    with pytest.raises(RegistryError, match=r"\[agents.raven\] mode: only used by acp agents"):
        load_registry(path, which=everything_on_path, secret_names=SecretNames())


def test_require_names_the_available_agents() -> None:
    registry = default_registry(which=nothing_on_path)
    assert registry.require("code").name == "code"
    with pytest.raises(RegistryError, match=r"Unknown agent `coder`.*`code`"):
        registry.require("coder")
    with pytest.raises(RegistryError, match="not found on PATH"):
        registry.require("codex")


def test_registry_is_immutable() -> None:
    registry = default_registry(which=nothing_on_path)
    entry = registry.entries()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.enabled = False  # type: ignore[misc]
    assert isinstance(registry.entries(), tuple)
    with pytest.raises(RegistryError, match="duplicate"):
        AgentRegistry([entry, entry])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[agents.code]\ncomand = ["x"]\n',
            "[agents.code] unknown key 'comand' (did you mean 'command'?)",
        ),
        ("[agent.code]\nenabled = false\n", "unknown key 'agent' (did you mean 'agents'?)"),
        (
            '[agents.code]\nstateful = "yes"\n',
            "[agents.code] stateful: Input should be a valid boolean",
        ),
        (
            '[agents.code]\ntimeout_seconds = "fast"\n',
            "[agents.code] timeout_seconds: Input should be a valid number",
        ),
        (
            '[agents.code]\nbackend = "grpc"\n',
            "[agents.code] backend: Input should be 'inproc', 'cli', 'api' or 'acp'",
        ),
        (
            '[agents.code]\ncommand = "claude -p"\n',
            "[agents.code] command: Input should be a valid list",
        ),
        (
            '[agents.mine]\nbackend = "cli"\ndescription = "Mine"\n',
            "[agents.mine] command: a cli agent needs a command",
        ),
        (
            '[agents."Bad Name"]\ndescription = "x"\n',
            "[agents.Bad Name] invalid agent name",
        ),
        (
            '[agents.new]\nbackend = "inproc"\n',
            "[agents.new] description: required for a new agent",
        ),
        ('[agents.new]\ndescription = "x"\nrole = "chef"\n', "[agents.new] role: must be one of"),
        (
            '[agents.new]\nbackend = "api"\ndescription = "x"\n',
            "[agents.new] model: an api agent needs a model name",
        ),
        (
            '[agents.x]\nbackend = "cli"\ndescription = "x"\ncommand = ["x"]\n'
            'env_allow = ["GITHUB_TOKEN"]\n',
            "[agents.x] env_allow: 'GITHUB_TOKEN' looks like a secret",
        ),
        (
            "[agents.code]\noutput_cap_chars = 0\n",
            "[agents.code] output_cap_chars: Input should be greater than 0",
        ),
        ("agents = 3\n", "agents: must be a table of [agents.NAME] tables"),
        ("[agents]\ncode = 1\n", "[agents.code] must be a table of settings"),
    ],
)
def test_invalid_files_name_the_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(RegistryError) as info:
        load_registry(path, which=everything_on_path, secret_names=SecretNames())
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message


def test_invalid_toml_names_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, '[agents.code]\nenabled = false\ndescription = "unterminated\n')
    with pytest.raises(RegistryError) as info:
        load_registry(path, which=everything_on_path, secret_names=SecretNames())
    message = str(info.value)
    assert message.startswith(f"{path}: invalid TOML") and "line 3" in message
    assert "column" in message


def test_every_error_in_a_file_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, "[agents.code]\nstateful = 1\n\n[agents.design]\nprogres = true\n")
    with pytest.raises(RegistryError) as info:
        load_registry(path, which=everything_on_path, secret_names=SecretNames())
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and all(line.startswith(str(path)) for line in lines)


def test_entries_are_plain_dataclasses_with_the_documented_defaults() -> None:
    entry = AgentEntry(
        name="x",
        description="d",
        backend="inproc",
        stateful=True,
        file_capable=True,
        progress=True,
        enabled=True,
        role="raven",
    )
    assert entry.command == () and entry.prompt_via == "stdin" and entry.api_style == "anthropic"
    assert entry.timeout_seconds == 900 and entry.output_cap_chars == 200_000
