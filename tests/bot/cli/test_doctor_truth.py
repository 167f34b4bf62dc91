"""`doctor` and start-up tell the truth (issue 18, finding 6): which agents are off and why,
a Slurm cluster whose controller does not answer, a CLI agent the sandbox cannot see, and a
broken permissions.toml that stops `chat` and `run` with the line doctor prints."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agents.permissions import rules_file_problem
from agents.registry import default_registry
from agents.sandbox import Bubblewrap, shown_by
from core.ids import ConversationRef
from core.store import Store
from host.features.permissions.gate import PermissionGates
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.sandboxing import real_sandbox
from tests.slurm_cluster import SlurmCluster, _write_config, missing

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

BROKEN_RULES = '[default]\nmode = "sometimes"\n'


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _check_line(out: str, name: str) -> str:
    """The doctor line of check `name`."""
    return next(line for line in out.splitlines() if line[9:].startswith(f"{name} "))


def _detail(line: str) -> str:
    """What a doctor line says after its mark and name."""
    return line[9:].split(None, 1)[1]


async def test_doctor_names_the_agents_that_are_off_and_why(isolated_env: Path) -> None:
    _write(isolated_env / "agents.toml", "[agents.code]\nenabled = false\n")
    code, out, err = await _run("doctor", env=_env(isolated_env, PATH="/usr/bin:/bin"))
    assert code == 0, out + err
    line = _check_line(out, "agents")
    assert "agents enabled" in line
    assert "code: disabled in config" in line
    assert "claude-code: `claude` was not found on PATH" in line
    assert "codex: `codex` was not found on PATH" in line
    # Switched off on purpose, and presets that are not installed: nothing to warn about.
    assert line.startswith("  [ok  ]"), line


async def test_doctor_shows_why_an_acp_agent_is_disabled(isolated_env: Path) -> None:
    _write(
        isolated_env / "agents.toml",
        '[agents.zed]\nbackend = "acp"\ndescription = "Zed\'s agent over ACP"\n'
        'command = ["zed-acp-missing"]\n',
    )
    code, out, _ = await _run("doctor", env=_env(isolated_env))
    line = _check_line(out, "agents")
    assert "zed: `zed-acp-missing` was not found on PATH" in line
    assert line.startswith("  [WARN]"), line
    assert code == 0  # the bot still serves; only that agent is off


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's clients are not installed")
async def test_doctor_warns_when_no_slurm_controller_answers(
    isolated_env: Path, tmp_path: Path
) -> None:
    conf = _write_config(tmp_path / "slurm")  # a cluster's config; no daemon was started
    _write(
        isolated_env / "machines.toml",
        '[machines.cluster]\nkind = "slurm"\npartition = "debug"\nslots = 2\n',
    )
    _, out, _ = await _run("doctor", env=_env(isolated_env, SLURM_CONF=str(conf)))
    line = _check_line(out, "machines")
    assert line.startswith("  [WARN]"), line
    assert "cluster: the Slurm controller does not answer" in line
    assert "`scontrol ping`" in line and "start slurmctld" in line


@pytest.mark.skipif(missing() is not None, reason=f"no Slurm cluster here: {missing()}")
async def test_doctor_is_ok_with_an_answering_slurm_controller(
    isolated_env: Path, slurm_cluster: SlurmCluster
) -> None:
    _write(
        isolated_env / "machines.toml",
        '[machines.cluster]\nkind = "slurm"\npartition = "debug"\nslots = 2\n',
    )
    env = _env(isolated_env, SLURM_CONF=str(slurm_cluster.conf))
    _, out, _ = await _run("doctor", env=env)
    assert _check_line(out, "machines").startswith("  [ok  ] machines         cluster (slurm")
    _write(
        isolated_env / "machines.toml",
        '[machines.cluster]\nkind = "slurm"\npartition = "nosuch"\nslots = 2\n',
    )
    _, out, _ = await _run("doctor", env=env)
    line = _check_line(out, "machines")
    assert line.startswith("  [WARN]") and "partition `nosuch`" in line, line


def _fake_cli(home: Path, name: str = "claude") -> Path:
    """A `claude` installed in the user's home, as `npm i -g` under nvm or ~/.local would."""
    program = home / ".local" / "bin" / name
    _write(program, "#!/bin/sh\necho from the home directory\n")
    program.chmod(0o755)
    return program


async def test_a_cli_agent_under_home_is_disabled_saying_where_it_is(
    isolated_env: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    program = _fake_cli(home)
    path = f"{program.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    code, out, err = await _run("doctor", env=_env(isolated_env, HOME=str(home), PATH=path))
    assert code == 0, out + err
    line = _check_line(out, "agents")
    assert line.startswith("  [WARN]"), line
    assert f"claude-code: `claude` was found at {program}" in line
    assert "cannot see" in line and "install it system-wide" in line


def test_the_registry_asks_the_sandboxs_view_of_the_real_path(tmp_path: Path) -> None:
    sandbox = real_sandbox()
    assert isinstance(sandbox, Bubblewrap)
    home = tmp_path / "home"
    program = _fake_cli(home)
    shows = shown_by(sandbox, {"HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert shows(Path("/bin/sh")) and not shows(program)
    # A link under a system path to a program in the home directory is hidden all the same.
    linked = tmp_path / "usr-local-bin-claude"
    linked.symlink_to(program)
    registry = default_registry(
        which=lambda name: str(linked) if name == "claude" else shutil.which(name), visible=shows
    )
    entry = registry.get("claude-code")
    assert entry is not None and not entry.enabled
    assert f"found at {linked}" in entry.disabled_reason
    assert "install it system-wide" in entry.disabled_reason
    # Without a sandbox's view (tests, `graph validate`) nothing changes.
    entry = default_registry(which=lambda name: str(program)).get("claude-code")
    assert entry is not None and entry.enabled


@pytest.mark.parametrize("command", ["chat", "run"])
async def test_a_broken_permissions_file_stops_the_start_with_doctors_line(
    isolated_env: Path, command: str
) -> None:
    _write(isolated_env / "permissions.toml", BROKEN_RULES)
    env = _env(isolated_env)
    code, out, _ = await _run("doctor", env=env)
    assert code == 1
    line = _check_line(out, "permissions")
    assert line.startswith("  [FAIL]")
    code, _, err = await _run(command, stdin=b"hello\n", env=env)
    assert code == 2, err
    (said,) = [line for line in err.splitlines() if "INFO" not in line]
    assert said == f"raven-bot: {_detail(line)}"
    assert str(isolated_env / "permissions.toml") in said and "'sometimes' is not a mode" in said


async def test_rules_broken_while_running_deny_until_fixed(
    isolated_env: Path, store: Store
) -> None:
    rules = isolated_env / "permissions.toml"
    _write(rules, '[default]\nmode = "full-access"\n')
    gates = PermissionGates(isolated_env, store)
    conv = ConversationRef("console", "local", "c1", "t1")
    first = await gates(conv, "U1", None)("run_shell", "make build")
    assert first.allowed
    _write(rules, BROKEN_RULES)  # edited into a broken file while the bot runs
    assert rules_file_problem(rules) is not None
    denied = await gates(conv, "U1", None)("run_shell", "make build")
    assert not denied.allowed and "nothing runs until it is fixed" in denied.reason
    _write(rules, '[default]\nmode = "full-access"\n')
    assert (await gates(conv, "U1", None)("run_shell", "make build")).allowed
