"""A campaign round cannot escape its sandbox (issue 17, findings 2 and 3).

Each test is an attack a round made, tried against the real machines: local rounds in the real
bubblewrap sandbox, Slurm rounds on the real one-node cluster, ssh rounds through a loopback
`ssh` that runs the remote scripts here. The bot must never follow a path the round could have
created (an exit-code symlink it would write through, a log symlink or hard link it would read,
a FIFO it would hang on), and Slurm and ssh rounds see nothing of the bot's environment, its
RAVEN_HOME or its working directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.sandbox import DetachedSandbox
from core.secret_names import SecretNames
from oncall.machines import LocalMachine, SlurmMachine, SshMachine
from oncall.model import JobHandle, JobRequest, JobStatus, Machine, MachineSpec
from tests.helpers import eventually
from tests.oncall_kit import CONV, oncall_kit, spec
from tests.sandboxing import real_sandbox
from tests.slurm_cluster import SlurmCluster

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

BOT_TOKEN = "xoxb-secret-test"
DB_TEXT = "SQLite format 3 stand-in for raven.db"
HIDDEN_LOSS = "loss 0.0001\n"
LOCAL = MachineSpec(name="local", kind="local", slots=2)
CLUSTER = MachineSpec(name="cluster", kind="slurm", slots=2)
# Plant NAME -> TARGET where a round's control files are: its cwd (the old layout) and the
# directory above it (where they are now); a failure to plant is what the sandbox should do.
_PLANT = 'for d in . ..; do rm -f "$d/{name}"; ln -s {target} "$d/{name}"; done 2>/dev/null; '


def _request(workdir: Path, command: str) -> JobRequest:
    return JobRequest(campaign_id="c1", round=1, command=command, workdir=workdir)


def _plant(name: str, target: Path) -> str:
    return _PLANT.format(name=name, target=target)


async def _until_exited(machine: Machine, handle: JobHandle, within: float = 60.0) -> JobStatus:
    """Wait until the round has ended (a hang guard, not a timing); its final status."""

    async def ended() -> bool:
        return (await machine.poll(handle)).state == "exited"

    await eventually(ended, within=within)
    return await machine.poll(handle)


async def _log_contains(machine: Machine, handle: JobHandle, text: bytes) -> None:
    async def logged() -> bool:
        return text in await machine.read_log(handle, 0)

    await eventually(logged, within=60)


@pytest.fixture
def home(isolated_env: Path) -> Path:
    """The bot's RAVEN_HOME with a stand-in database and a secret file in it."""
    isolated_env.mkdir(parents=True, exist_ok=True)
    (isolated_env / "raven.db").write_text(DB_TEXT)
    (isolated_env / "secret.txt").write_text(HIDDEN_LOSS * 200)
    return isolated_env


@pytest.fixture
def local(home: Path) -> LocalMachine:
    """The local machine over the real sandbox, hiding RAVEN_HOME as the bot does."""
    return LocalMachine(
        LOCAL, DetachedSandbox(real_sandbox(hidden=(home, Path.cwd()))), secret_names=SecretNames()
    )


def _round_dir(home: Path) -> Path:
    return home / "campaigns" / "c1" / "round-1"


# -- local: control files --------------------------------------------------------------------


async def test_an_exit_code_symlink_does_not_make_the_leader_write_through_it(
    local: LocalMachine, home: Path
) -> None:
    db = home / "raven.db"
    command = _plant("exit_code.tmp", db) + _plant("exit_code", db) + "echo planted"
    handle = await local.submit(_request(_round_dir(home), command))
    status = await _until_exited(local, handle)
    assert db.read_text() == DB_TEXT  # not truncated, not overwritten with the code
    assert status.exit_code == 0
    assert b"planted" in await local.read_log(handle, 0)


async def test_a_log_symlink_to_a_hidden_file_is_not_read_as_measurements(home: Path) -> None:
    secret = home / "secret.txt"
    # The bot may read "loss 0.5" first: whatever it reads next must still be the round's own.
    command = "echo 'loss 0.5'; sleep 0.3; " + _plant("round.log", secret) + "sleep 0.5"
    machine = LocalMachine(
        LOCAL, DetachedSandbox(real_sandbox(hidden=(home, Path.cwd()))), secret_names=SecretNames()
    )
    async with oncall_kit(home / "kit", machine=machine) as kit:
        record = await kit.engine.start("U1", CONV, spec(command, poll_seconds=0.05))
        await kit.until_final(record.id, within=60)
        values = [m.value for m in await kit.campaigns.measurements(record.id)]
    assert values == [0.5]
    assert secret.read_text() == HIDDEN_LOSS * 200


async def test_a_tampered_round_directory_is_not_followed_when_a_round_starts(
    local: LocalMachine, home: Path
) -> None:
    """What an earlier round (or an older layout) left in the directory: never followed."""
    directory = _round_dir(home)
    directory.mkdir(parents=True)
    (directory / "work").symlink_to(home)  # bound as the writable workspace if followed
    (directory / "round.log").symlink_to(home / "secret.txt")
    (directory / "exit_code.tmp").symlink_to(home / "raven.db")
    handle = await local.submit(_request(directory, "echo leak > leak.txt; echo ran"))
    status = await _until_exited(local, handle)
    assert status.exit_code == 0
    assert await local.read_log(handle, 0) == b"ran\n"
    assert not (home / "leak.txt").exists()
    assert (home / "secret.txt").read_text() == HIDDEN_LOSS * 200
    assert (home / "raven.db").read_text() == DB_TEXT


@contextlib.contextmanager
def _released(fifo: Path) -> Iterator[None]:
    """Open `fifo` for writing at the end, so a reader blocked on it (old code) is let go."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def test_a_fifo_or_hard_link_in_place_of_a_control_file_neither_hangs_nor_redirects(
    local: LocalMachine, home: Path
) -> None:
    """Planted beside the log (as a round without a sandbox could): the bot ignores them."""
    directory = _round_dir(home)
    command = "echo 'loss 0.9'; while [ ! -e go ]; do sleep 0.02; done; echo 'loss 0.4'"
    handle = await local.submit(_request(directory, command))
    await _log_contains(local, handle, b"loss 0.9")
    fifo = directory / "exit_code"
    os.mkfifo(fifo)
    with _released(fifo):
        status = await asyncio.wait_for(local.poll(handle), timeout=10)
    assert status.state == "running"
    (directory / "round.log").unlink()
    os.link(home / "secret.txt", directory / "round.log")
    assert await asyncio.wait_for(local.read_log(handle, 0), timeout=10) == b""
    (directory / "round.log").unlink()
    (directory / "round.log").symlink_to(home / "secret.txt")
    assert await local.read_log(handle, 0) == b""
    (directory / "work" / "go").touch()
    assert (await _until_exited(local, handle)).exit_code == 0  # the leader's code replaced it
    assert (home / "secret.txt").read_text() == HIDDEN_LOSS * 200


# -- Slurm -------------------------------------------------------------------------------------


@pytest.fixture
def bot_process() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in for the bot: a process whose environment holds the Slack token."""
    proc = subprocess.Popen(
        ["sleep", "600"], env={"PATH": "/usr/bin:/bin", "SLACK_BOT_TOKEN": BOT_TOKEN}
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_a_slurm_round_sees_no_bot_secret_raven_home_or_bot_directory(
    slurm_cluster: SlurmCluster,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bot_process: subprocess.Popen[bytes],
) -> None:
    bot_cwd = tmp_path / "bot-cwd"
    bot_cwd.mkdir()
    (bot_cwd / ".env").write_text("SLACK_APP_TOKEN=xapp-dotenv-secret\n")
    monkeypatch.chdir(bot_cwd)
    environ = {**slurm_cluster.environ, "SLACK_BOT_TOKEN": BOT_TOKEN, "RAVEN_HOME": str(home)}
    machine = SlurmMachine(CLUSTER, environ=environ, secret_names=SecretNames())
    command = (
        "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; "
        f"cat {home}/raven.db {home}/secret.txt {bot_cwd}/.env ../../../../raven.db; "
        f"ls -a {home} {bot_cwd}; echo finished"
    )
    handle = await machine.submit(_request(_round_dir(home), command))
    await _until_exited(machine, handle)
    log = (await machine.read_log(handle, 0)).decode(errors="replace")
    assert "finished" in log and "PATH=" in log, slurm_cluster.log_tail()
    assert BOT_TOKEN not in log and "SLACK_BOT_TOKEN" not in log
    assert "SLURM_CONF" not in log  # nothing of the bot's, not even its cluster config
    assert DB_TEXT not in log and "loss 0.0001" not in log and "xapp-dotenv-secret" not in log
    assert "\nsecret.txt\n" not in log and "\n.env\n" not in log  # not even listed


async def test_a_slurm_round_cannot_make_the_batch_script_write_through_a_symlink(
    slurm_cluster: SlurmCluster, home: Path
) -> None:
    machine = SlurmMachine(CLUSTER, environ=slurm_cluster.environ, secret_names=SecretNames())
    db = home / "raven.db"
    command = _plant("exit_code.tmp", db) + _plant("exit_code", db) + "echo planted"
    handle = await machine.submit(_request(_round_dir(home), command))
    status = await _until_exited(machine, handle)
    assert db.read_text() == DB_TEXT, slurm_cluster.log_tail()
    assert status.exit_code == 0


# -- ssh ---------------------------------------------------------------------------------------

# Runs the remote scripts through a local `sh` in place of ssh (no sshd here), with the
# environment the ssh client got: what would reach a remote login that accepts SendEnv.
_FAKE_SSH = """\
#!/bin/sh
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do shift; done
shift 2
exec sh -c "$*"
"""


@pytest.fixture
def loopback_ssh(tmp_path: Path, home: Path) -> SshMachine:
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(_FAKE_SSH)
    fake.chmod(0o755)
    machine_spec = MachineSpec(name="gpu", kind="ssh", host="gpu1", workdir=str(home / "remote"))
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "login-home"),
        "SSH_AUTH_SOCK": str(tmp_path / "agent-of-the-bot.sock"),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
    }
    return SshMachine(machine_spec, ssh=str(fake), environ=environ, secret_names=SecretNames())


async def test_an_ssh_round_gets_nothing_of_the_bots_environment_and_runs_in_bubblewrap(
    loopback_ssh: SshMachine, home: Path, tmp_path: Path
) -> None:
    command = f"echo pid=$$; env; cat {home}/raven.db; echo finished"
    handle = await loopback_ssh.submit(_request(tmp_path / "ignored", command))
    await _until_exited(loopback_ssh, handle)
    log = (await loopback_ssh.read_log(handle, 0)).decode(errors="replace")
    assert "finished" in log and "PATH=" in log
    assert "agent-of-the-bot" not in log and "SSH_AUTH_SOCK" not in log
    assert BOT_TOKEN not in log
    # Its own PID namespace (bubblewrap is installed here): the shell is pid 2 under bwrap's init.
    assert "pid=2\n" in log
    assert DB_TEXT not in log  # RAVEN_HOME is not in its view


async def test_an_ssh_round_cannot_make_the_bot_read_a_hidden_file_as_its_log(
    loopback_ssh: SshMachine, home: Path, tmp_path: Path
) -> None:
    command = "echo 'loss 0.5'; " + _plant("round.log", home / "secret.txt") + "echo planted"
    handle = await loopback_ssh.submit(_request(tmp_path / "ignored", command))
    status = await _until_exited(loopback_ssh, handle)
    log = await loopback_ssh.read_log(handle, 0)
    assert b"0.0001" not in log
    assert log == b"loss 0.5\nplanted\n" and status.exit_code == 0
