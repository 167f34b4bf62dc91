"""The real `raven-bot` process on broken input and configuration: one clear line and a
non-zero exit, never a traceback or a hang."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bot.settings import load_settings, unknown_variables
from core.url_secrets import mask_url
from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

WITHIN = 60.0  # hang guard: a hang at exit is one of the bugs under test


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _read_only_mount_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], check=False, capture_output=True)
    return probe.returncode == 0


def _read_only(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `raven-bot ARGS` with `home` bind-mounted read-only (root ignores chmod)."""
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(home), RAVEN, *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=WITHIN,
        stdin=subprocess.DEVNULL,
    )


async def test_graph_file_that_is_not_utf8(isolated_env: Path, tmp_path: Path) -> None:
    graph = tmp_path / "graph.json"
    graph.write_bytes(b'\xff\xfe{"nodes": []}')
    code, out, err = await _run("graph", "validate", str(graph), env=_env(isolated_env))
    assert code == 2
    assert "not UTF-8" in out and str(graph) in out
    assert "Traceback" not in out + err


async def test_graph_validate_with_missing_agents_file(isolated_env: Path, tmp_path: Path) -> None:
    graph = tmp_path / "graph.json"
    graph.write_text("{}")
    code, out, err = await _run(
        "graph", "validate", str(graph), "--agents", "/nonexistent", env=_env(isolated_env)
    )
    assert code == 2
    assert "/nonexistent" in out and "no such file" in out
    assert "Traceback" not in out + err


@pytest.mark.parametrize("action", [["list"], ["show", "run_x"]])
async def test_runs_with_raven_home_that_is_a_file(tmp_path: Path, action: list[str]) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a directory")
    code, _, err = await _run("runs", *action, env=_env(home), within=WITHIN)
    assert code == 2
    assert err.strip().splitlines() == [
        f"raven-bot: RAVEN_HOME={home} is not a directory (a file is in the way); "
        "point RAVEN_HOME at a directory."
    ]


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs unshare -m and mount")
async def test_read_only_raven_home_fails_clearly_without_hanging(isolated_env: Path) -> None:
    env = _env(isolated_env)
    # An existing database is the case that hung: it opens, then cannot be written.
    code, _, err = await _run("runs", "list", env=env)
    assert code == 0, err
    for action in (["list"], ["show", "run_x"]):
        result = _read_only(isolated_env, "runs", *action, env=env)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"RAVEN_HOME={isolated_env}" in lines[0], result.stderr
        assert "Read-only file system" in lines[0]
    doctor = _read_only(isolated_env, "doctor", env=env)
    assert doctor.returncode == 1
    assert "[FAIL] data dir" in doctor.stdout and "[FAIL] database" in doctor.stdout
    assert "Traceback" not in doctor.stdout + doctor.stderr
    chat = _read_only(isolated_env, "chat", env=env)
    assert chat.returncode == 2
    assert f"RAVEN_HOME={isolated_env} is not a writable directory" in chat.stderr


async def test_corrupt_database_fails_clearly_without_hanging(isolated_env: Path) -> None:
    _write(isolated_env / "raven.db", "this is not an SQLite database, just text\n" * 10)
    env = _env(isolated_env)
    for args in (["chat"], ["runs", "list"]):
        code, _, err = await _run(*args, env=env, within=WITHIN)
        assert code == 2, err
        assert "cannot open the database raven.db (file is not a database)" in err
        assert "Traceback" not in err
    code, out, err = await _run("doctor", env=env, within=WITHIN)
    assert code == 1
    assert "[FAIL] database" in out and "Traceback" not in out + err


async def test_doctor_fails_on_invalid_agents_toml(isolated_env: Path) -> None:
    _write(isolated_env / "agents.toml", "[agents.code]\nenabled = = true\n")
    code, out, _ = await _run("doctor", env=_env(isolated_env))
    assert code == 1
    assert "[FAIL] agents" in out and "agents.toml: invalid TOML" in out
    assert "FAILED: agents" in out


async def test_doctor_reports_a_valid_agents_toml(isolated_env: Path) -> None:
    _write(isolated_env / "agents.toml", "[agents.code]\nenabled = false\n")
    _, out, _ = await _run("doctor", env=_env(isolated_env))
    assert "[ok  ] agents" in out and "agents.toml" in out


async def test_base_url_credentials_are_masked(isolated_env: Path) -> None:
    env = _env(
        isolated_env,
        ANTHROPIC_API_KEY="sk-ant-test-key-0123456789",
        ANTHROPIC_BASE_URL="http://proxyuser:hunter2secret@127.0.0.1:9/v1",
        RAVEN_MODEL_MAX_RETRIES="0",
    )
    code, out, err = await _run("doctor", env=env)
    assert code == 1
    assert "http://****@127.0.0.1:9/v1" in out
    assert "[FAIL] model" in out
    assert "hunter2secret" not in out + err
    _, out, err = await _run("chat", stdin=b"hi\n", env=env)
    assert "hunter2secret" not in out + err
    assert "proxyuser" not in out + err


def test_url_masking_and_log_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    assert mask_url("https://u:p4ssw0rd@proxy.example/v1?key=abc") == (
        "https://****@proxy.example/v1?****"
    )
    assert mask_url("https://api.anthropic.com") == "https://api.anthropic.com"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://proxyuser:hunter2secret@proxy.example/")
    settings = load_settings()
    assert settings.masked()["ANTHROPIC_BASE_URL"] == "https://****@proxy.example/"
    assert "hunter2secret" in settings.secret_values()
    assert "proxyuser:hunter2secret" in settings.secret_values()


def test_unknown_variables_name_the_closest_setting(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("RAVEN_MODLE=claude-x\nSLACK_BOT_TOKN=xoxb-1\nEDITOR=vim\nRAVEN_HOME=/x\n")
    warnings = unknown_variables({"RAVEN_USER_POL": "3", "RAVEN_ADMINS": "U1", "PATH": "/"}, dotenv)
    assert warnings == [
        "RAVEN_USER_POL (in the environment) is not a setting and is ignored; "
        "did you mean RAVEN_USER_POOL?",
        f"RAVEN_MODLE (in {dotenv}) is not a setting and is ignored; did you mean RAVEN_MODEL?",
        f"SLACK_BOT_TOKN (in {dotenv}) is not a setting and is ignored; "
        "did you mean SLACK_BOT_TOKEN?",
    ]
    assert unknown_variables({"RAVEN_XYZZY_QUUX": "1"}, None) == [
        "RAVEN_XYZZY_QUUX (in the environment) is not a setting and is ignored; "
        "`.env.example` lists every setting."
    ]


async def test_unknown_variables_warn_at_startup_and_in_doctor(isolated_env: Path) -> None:
    # Settings read `.env` from the working directory (the test's empty cwd).
    _write(Path(".env"), "RAVEN_SYSTEM_POL=3\n")
    env = _env(isolated_env, RAVEN_USER_POL="3")
    code, out, err = await _run("chat", env=env)
    assert code == 0, err
    assert "RAVEN_USER_POL (in the environment) is not a setting" in err
    assert "did you mean RAVEN_USER_POOL?" in err
    assert "RAVEN_SYSTEM_POL (in .env) is not a setting" in err
    assert "did you mean RAVEN_SYSTEM_POOL?" in err
    code, out, _ = await _run("doctor", env=env)
    assert "[WARN] settings" in out and "did you mean RAVEN_USER_POOL?" in out
