"""Oncall machines with real processes: local rounds run detached inside the real bubblewrap
sandbox (they outlive their parent, report their exit code, are terminated SIGTERM-then-SIGKILL),
ssh rounds fail clearly when the host is unreachable, machines.toml is validated with messages
that say how to fix it, and capacity slots are shared across campaigns."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from agents.sandbox import (
    Bubblewrap,
    DetachedSandbox,
    Refusing,
    SandboxUnavailable,
    Unsandboxed,
)
from core.secret_names import SecretNames
from oncall.machines import (
    Allocator,
    LocalMachine,
    MachinesConfigError,
    SlurmMachine,
    SshMachine,
    build_machine,
    load_machines,
)
from oncall.machines.common import MAX_LOG_CHUNK, round_env
from oncall.machines.registry import parse_machines
from oncall.machines.ssh import ssh_command
from oncall.model import JobHandle, JobRequest, JobStatus, Machine, MachineSpec, MachineUnavailable
from tests.helpers import eventually, processes_with
from tests.sandboxing import real_sandbox

LOCAL = MachineSpec(name="local", kind="local", slots=2)
FAKE_TOKEN = "xoxb-FAKE-" + "d4" * 12
FAKE_HOME_SECRET = "HOME-SECRET-" + "e5" * 12


def _request(workdir: Path, command: str, *, round_: int = 1) -> JobRequest:
    return JobRequest(campaign_id="c1", round=round_, command=command, workdir=workdir)


async def _until_state(
    machine: Machine, handle: JobHandle, state: str, within: float = 20.0
) -> JobStatus:
    """Poll until the job is in `state`; fail after `within` seconds (a hang guard)."""
    async with asyncio.timeout(within):
        # Polling is the point: the job lives in processes this test does not own.
        while (status := await machine.poll(handle)).state != state:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return status


async def _log_contains(machine: Machine, handle: JobHandle, text: bytes) -> bytes:
    """Wait until the round's log contains `text`; the whole log."""
    async with asyncio.timeout(20):
        while text not in (log := await machine.read_log(handle, 0)):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return log


def _own_start_time() -> str:
    """This process's start time (field 22 of /proc/self/stat)."""
    return Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19]


@pytest.fixture
def local(tmp_path: Path) -> LocalMachine:
    """The local machine over the real bubblewrap sandbox, detached."""
    return LocalMachine(
        LOCAL,
        DetachedSandbox(real_sandbox(hidden=(tmp_path / "hidden",))),
        secret_names=SecretNames(),
    )


# -- the sandbox's detached mode ------------------------------------------------------------


def test_a_detached_bwrap_still_dies_with_its_parent(tmp_path: Path) -> None:
    """The parent of a detached sandbox is the round's leader, which outlives the bot: the
    sandbox dies with that leader (a killed leader once left its round running, unwatched)."""
    sandbox = Bubblewrap("/usr/bin/bwrap", hidden=(tmp_path,))
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    attached = sandbox.launch(["true"], workspace=tmp_path / "w", env=env)
    detached = sandbox.launch(["true"], workspace=tmp_path / "w", env=env, detached=True)
    assert "--die-with-parent" in detached.argv
    assert attached.argv == detached.argv
    assert "--new-session" in detached.argv and "--unshare-pid" in detached.argv
    assert detached.preexec is None
    assert Unsandboxed().launch(["true"], workspace=tmp_path, env=env).preexec is not None
    assert (
        Unsandboxed().launch(["true"], workspace=tmp_path, env=env, detached=True).preexec is None
    )
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        Refusing("no bwrap").launch(["true"], workspace=tmp_path, env=env, detached=True)


async def test_a_refusing_sandbox_makes_the_machine_unavailable(tmp_path: Path) -> None:
    machine = LocalMachine(
        LOCAL,
        DetachedSandbox(Refusing("bubblewrap (`bwrap`) is not installed")),
        secret_names=SecretNames(),
    )
    with pytest.raises(MachineUnavailable) as caught:
        await machine.submit(_request(tmp_path / "r1", "echo never > ran.txt"))
    assert "apt-get install bubblewrap" in str(caught.value)
    assert not (tmp_path / "r1" / "ran.txt").exists()


# -- local rounds ---------------------------------------------------------------------------


async def test_a_round_runs_its_log_is_read_incrementally_and_its_code_lands(
    local: LocalMachine, tmp_path: Path
) -> None:
    workdir = tmp_path / "campaigns" / "c1" / "round-1"
    command = "echo 'loss 0.9'; while [ ! -e go ]; do sleep 0.02; done; echo 'loss 0.5'"
    handle = await local.submit(_request(workdir, command))
    assert handle.kind == "local" and handle.log_path == str(workdir / "round.log")
    assert (await local.poll(handle)).state in {"running", "exited"}
    first = await _log_contains(local, handle, b"loss 0.9\n")
    assert first == b"loss 0.9\n"
    assert (await local.poll(handle)).state == "running"
    assert await local.read_log(handle, len(first)) == b""
    (workdir / "work" / "go").touch()
    status = await _until_state(local, handle, "exited")
    assert status.exit_code == 0
    assert await local.read_log(handle, len(first)) == b"loss 0.5\n"
    assert (workdir / "exit_code").read_text() == "0\n"
    assert not (workdir / "exit_code.tmp").exists()


async def test_read_log_returns_bounded_chunks(local: LocalMachine, tmp_path: Path) -> None:
    size = MAX_LOG_CHUNK + 1000
    handle = await local.submit(_request(tmp_path / "r", f"head -c {size} /dev/zero | tr '\\0' x"))
    await _until_state(local, handle, "exited")
    first = await local.read_log(handle, 0)
    assert len(first) == MAX_LOG_CHUNK
    assert len(await local.read_log(handle, len(first))) == 1000


async def test_a_crashing_command_reports_its_exit_code(
    local: LocalMachine, tmp_path: Path
) -> None:
    handle = await local.submit(_request(tmp_path / "r1", "echo boom >&2; exit 7"))
    assert (await _until_state(local, handle, "exited")).exit_code == 7
    assert b"boom" in await local.read_log(handle, 0)  # stderr lands in the log too
    killed = await local.submit(_request(tmp_path / "r2", "kill -KILL $$"))
    assert (await _until_state(local, killed, "exited")).exit_code == 128 + signal.SIGKILL


async def test_terminate_sends_sigterm_and_a_gone_job_is_fine(
    local: LocalMachine, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex
    handle = await local.submit(_request(tmp_path / "r", f"echo ready; sleep 600; : {token}"))
    await _log_contains(local, handle, b"ready")
    await eventually(lambda: bool(processes_with(token)))
    await local.terminate(handle, grace_seconds=20)
    status = await local.poll(handle)
    assert status.state == "exited" and status.exit_code == 128 + signal.SIGTERM
    assert not processes_with(token)
    await local.terminate(handle, grace_seconds=1)  # already gone: nothing to do


async def test_terminate_escalates_to_sigkill_when_sigterm_is_ignored(
    local: LocalMachine, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex
    command = f"trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.02; done; : {token}"
    handle = await local.submit(_request(tmp_path / "r", command))
    await _log_contains(local, handle, b"ready")
    await local.terminate(handle, grace_seconds=0.5)
    # It saw the SIGTERM and carried on; only the SIGKILL that followed can have ended it.
    assert b"got TERM" in await local.read_log(handle, 0)
    assert not processes_with(token)
    assert (await local.poll(handle)).state == "exited"


_PARENT = textwrap.dedent(
    """\
    import asyncio, sys
    from pathlib import Path
    from agents.sandbox import DetachedSandbox, select_sandbox
    from core.secret_names import SecretNames
    from oncall.machines import LocalMachine
    from oncall.model import JobRequest, MachineSpec

    async def main() -> None:
        sandbox = select_sandbox(hidden=(), unsandboxed=False)
        assert sandbox.kind == "bwrap", sandbox.description
        machine = LocalMachine(
            MachineSpec(name="local", kind="local"),
            DetachedSandbox(sandbox),
            secret_names=SecretNames(),
        )
        request = JobRequest(campaign_id="c1", round=1, command=sys.argv[2],
                             workdir=Path(sys.argv[1]))
        handle = await machine.submit(request)
        print(handle.model_dump_json(), flush=True)
        await asyncio.to_thread(sys.stdin.read)  # until killed

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_a_round_survives_its_parent_and_a_fresh_machine_finds_it(
    local: LocalMachine, tmp_path: Path
) -> None:
    workdir = tmp_path / "r"
    # Heartbeats until told to stop, so its life after the parent's death is observable.
    command = "while [ ! -e go ]; do echo beat; sleep 0.02; done; echo 'loss 0.1'"
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PARENT,
        str(workdir),
        command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert parent.stdout is not None
    async with asyncio.timeout(30):
        line = await parent.stdout.readline()
    parent.send_signal(signal.SIGKILL)
    await parent.wait()
    handle = JobHandle.model_validate(json.loads(line))  # as a store would keep it
    log = workdir / "round.log"
    await eventually(log.exists)
    size = log.stat().st_size
    await eventually(lambda: log.stat().st_size > size)  # still writing, parent dead
    assert (await local.poll(handle)).state == "running"
    (workdir / "work" / "go").touch()
    status = await _until_state(local, handle, "exited")
    assert status.exit_code == 0
    assert (await local.read_log(handle, 0)).endswith(b"loss 0.1\n")


async def test_a_reused_pid_is_not_mistaken_for_the_round(
    local: LocalMachine, tmp_path: Path
) -> None:
    start = _own_start_time()
    mine = JobHandle(
        machine="local",
        kind="local",
        job_id=f"{os.getpid()}:{start}",
        host=os.uname().nodename,
        started_at=0.0,
        log_path=str(tmp_path / "round.log"),
        exit_path=str(tmp_path / "exit_code"),
    )
    assert (await local.poll(mine)).state == "running"  # this process, same start time
    # The same pid with another start time: another process now has it.
    reused = mine.model_copy(update={"job_id": f"{os.getpid()}:{int(start) - 1}"})
    status = await local.poll(reused)
    assert status.state == "vanished" and str(os.getpid()) in status.detail
    await local.terminate(reused, grace_seconds=0.1)  # must not signal this process


async def test_the_detached_sandbox_hides_raven_home_and_the_bots_environment(
    isolated_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = isolated_env
    (home / "secrets").mkdir(parents=True)
    (home / "secrets" / "token.txt").write_text(FAKE_HOME_SECRET)
    monkeypatch.setenv("SLACK_BOT_TOKEN", FAKE_TOKEN)
    monkeypatch.setenv("RAVEN_SECRET_THING", FAKE_TOKEN)
    machine = LocalMachine(
        LOCAL, DetachedSandbox(real_sandbox(hidden=(home, Path.cwd()))), secret_names=SecretNames()
    )
    workdir = home / "campaigns" / "c1" / "round-1"
    command = (
        f"cat {home}/secrets/token.txt; ls -a {home}; env; "
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; "
        f"echo leak > {home}/leak.txt; echo made > inside.txt; echo done"
    )
    handle = await machine.submit(_request(workdir, command))
    await _until_state(machine, handle, "exited")
    log = (await machine.read_log(handle, 0)).decode()
    assert "done" in log and "PATH=" in log
    assert FAKE_HOME_SECRET not in log and "\nsecrets\n" not in log  # neither read nor listed
    assert FAKE_TOKEN not in log and "SLACK_BOT_TOKEN" not in log
    assert not (home / "leak.txt").exists()
    assert (workdir / "work" / "inside.txt").read_text() == "made\n"


def test_round_env_keeps_base_variables_and_drops_secrets() -> None:
    env = round_env(
        {"PATH": "/bin", "HOME": "/h", "ANTHROPIC_API_KEY": "k", "SLURM_CONF": "/c", "X": "1"},
        allow=("SLURM_CONF", "GITHUB_TOKEN"),
        secret_names=SecretNames(),
    )
    assert env == {"PATH": "/bin", "HOME": "/h", "SLURM_CONF": "/c"}
    assert round_env({}, secret_names=SecretNames())["PATH"]  # a default PATH, so `sh` is found


# -- ssh ------------------------------------------------------------------------------------


def test_ssh_command_is_batch_mode_with_the_specs_options() -> None:
    spec = MachineSpec(
        name="gpu",
        kind="ssh",
        host="gpu1.example.org",
        user="train",
        port=2222,
        ssh_options=("IdentityFile=/keys/raven", "StrictHostKeyChecking=accept-new"),
    )
    argv = ssh_command(spec, 'echo "$1"', ["two words"])
    assert argv == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "IdentityFile=/keys/raven",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-p",
        "2222",
        "-l",
        "train",
        "--",
        "gpu1.example.org",
        "sh -c 'echo \"$1\"' raven 'two words'",
    ]


async def test_an_unreachable_ssh_host_is_unavailable_with_what_ssh_said(tmp_path: Path) -> None:
    if shutil.which("ssh") is None:
        pytest.skip("the ssh client is not installed (apt-get install openssh-client)")
    # A port nothing listens on: connect refused at once (no network needed).
    spec = MachineSpec(name="gpu", kind="ssh", host="127.0.0.1", port=_closed_port())
    machine = SshMachine(spec, connect_timeout=3, secret_names=SecretNames())
    with pytest.raises(MachineUnavailable) as caught:
        await machine.submit(_request(tmp_path / "r", "echo hi"))
    message = str(caught.value)
    assert "gpu" in message and "127.0.0.1" in message and "ssh failed" in message
    assert "refused" in message.lower() or "connect" in message.lower()


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends


# Runs the remote scripts through a local `sh` in place of ssh (no sshd here): it drops the
# options and the host and runs the remote words, as the remote login shell would.
_FAKE_SSH = """\
#!/bin/sh
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do shift; done
shift 2
exec sh -c "$*"
"""


@pytest.fixture
def loopback_ssh(tmp_path: Path) -> SshMachine:
    """An SshMachine whose `ssh` runs the remote command here (the remote scripts run for real)."""
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(_FAKE_SSH)
    fake.chmod(0o755)
    spec = MachineSpec(name="gpu", kind="ssh", host="gpu1")
    return SshMachine(spec, ssh=str(fake), secret_names=SecretNames())


@pytest.mark.slow
async def test_ssh_remote_scripts_run_poll_read_and_terminate(
    loopback_ssh: SshMachine, tmp_path: Path
) -> None:
    command = "echo 'loss 0.7'; while [ ! -e go ]; do sleep 0.02; done; echo 'loss 0.3'; exit 5"
    handle = await loopback_ssh.submit(_request(tmp_path / "ignored", command))
    try:
        await _remote_rounds(loopback_ssh, handle, tmp_path)
    finally:
        # A failed assertion must not leave the round waiting for `go` for ever.
        await loopback_ssh.terminate(handle, grace_seconds=0.2)


async def _remote_rounds(loopback_ssh: SshMachine, handle: JobHandle, tmp_path: Path) -> None:
    # Under the login directory (here: the test's working directory), apart from the command.
    workdir = Path.cwd().resolve() / "raven-rounds" / "c1" / "round-1"
    assert handle.kind == "ssh" and handle.host == "gpu1"
    assert handle.log_path == str(workdir / "round.log")
    first = await _log_contains(loopback_ssh, handle, b"loss 0.7\n")
    assert (await loopback_ssh.poll(handle)).state == "running"
    (workdir / "work" / "go").touch()
    status = await _until_state(loopback_ssh, handle, "exited")
    assert status.exit_code == 5
    assert await loopback_ssh.read_log(handle, len(first)) == b"loss 0.3\n"

    token = uuid.uuid4().hex
    stubborn = f"trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.02; done; : {token}"
    handle = await loopback_ssh.submit(_request(tmp_path / "x", stubborn, round_=2))
    await _log_contains(loopback_ssh, handle, b"ready")
    await loopback_ssh.terminate(handle, grace_seconds=0.4)
    assert b"got TERM" in await loopback_ssh.read_log(handle, 0)
    assert not processes_with(token)
    status = await loopback_ssh.poll(handle)
    assert status.state == "exited" and status.exit_code == 128 + signal.SIGKILL
    gone = handle.model_copy(update={"job_id": "999999999:1", "exit_path": "/nonexistent"})
    assert (await loopback_ssh.poll(gone)).state == "vanished"


# -- machines.toml --------------------------------------------------------------------------


def test_without_machines_toml_there_is_one_local_machine(isolated_env: Path) -> None:
    specs = load_machines(isolated_env)
    assert list(specs) == ["local"]
    assert specs["local"].kind == "local" and specs["local"].slots == 2


def test_machines_toml_registers_each_kind(isolated_env: Path) -> None:
    isolated_env.mkdir(parents=True, exist_ok=True)
    (isolated_env / "machines.toml").write_text(
        textwrap.dedent(
            """\
            [machines.local]
            kind = "local"
            slots = 3

            [machines.gpu]
            kind = "ssh"
            host = "gpu1.example.org"
            user = "train"
            port = 2222
            workdir = "/scratch/raven"
            ssh_options = ["IdentityFile=~/.ssh/raven"]

            [machines.cluster]
            kind = "slurm"
            partition = "gpu"
            workdir = "/shared/rounds"
            slots = 8
            """
        )
    )
    specs = load_machines(isolated_env)
    assert {n: s.kind for n, s in specs.items()} == {
        "local": "local",
        "gpu": "ssh",
        "cluster": "slurm",
    }
    assert specs["gpu"].port == 2222 and specs["cluster"].slots == 8
    wrapper = DetachedSandbox(Unsandboxed())
    assert isinstance(
        build_machine(specs["local"], wrapper, secret_names=SecretNames()), LocalMachine
    )
    assert isinstance(build_machine(specs["gpu"], wrapper, secret_names=SecretNames()), SshMachine)
    assert isinstance(
        build_machine(specs["cluster"], wrapper, secret_names=SecretNames()), SlurmMachine
    )


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            '[machines.gpu]\nkind = "ssh"\nhost = "h"\nslots = 0',
            ["[machines.gpu]", "slots", "slots = 2"],
        ),
        ('[machines.gpu]\nkind = "ssh"', ["[machines.gpu]", "host", "host = "]),
        ('[machines.gpu]\nkind = "gpu"', ["[machines.gpu]", "kind", '"local", "ssh" or "slurm"']),
        ('[machines.gpu]\nkind = "ssh"\nhost = "h"\nport = 70000', ["port", "65535"]),
        ('[machines.gpu]\nkind = "local"\nslotz = 2', ["slotz", "not a machine field", "slots"]),
        ('[machines.gpu]\nkind = "local"\nhost = "h"', ["host", "not used by a local machine"]),
        ('[machines.gpu]\nkind = "ssh"\nhost = "h"\nssh_options = ["-i k"]', ["Key=Value"]),
        ('[machines."bad name"]\nkind = "local"', ["bad name", "name"]),
        ("[machines.gpu\nkind = 1", ["invalid TOML", "line"]),
        ("[machine.gpu]\nkind = 'local'", ["unknown top-level key", "[machines.NAME]"]),
        ("", ["no machines"]),
    ],
)
def test_machines_toml_errors_name_the_file_machine_and_field(
    isolated_env: Path, toml: str, expected: list[str]
) -> None:
    isolated_env.mkdir(parents=True, exist_ok=True)
    path = isolated_env / "machines.toml"
    path.write_text(toml)
    with pytest.raises(MachinesConfigError) as caught:
        load_machines(isolated_env)
    message = str(caught.value)
    assert message.startswith(str(path))
    for part in expected:
        assert part in message, message


def test_every_bad_machine_is_reported_at_once() -> None:
    text = '[machines.a]\nkind = "ssh"\n\n[machines.b]\nkind = "local"\nslots = -1\n'
    with pytest.raises(MachinesConfigError) as caught:
        parse_machines(text, label="machines.toml")
    lines = str(caught.value).splitlines()
    assert len(lines) == 2 and "[machines.a]" in lines[0] and "[machines.b]" in lines[1]


# -- capacity -------------------------------------------------------------------------------


async def test_slots_are_shared_across_campaigns() -> None:
    allocator = Allocator({"local": MachineSpec(name="local", kind="local", slots=1)})
    assert await allocator.acquire("local", "camp-a")
    assert await allocator.acquire("local", "camp-a")  # already holds it: still one slot
    assert not await allocator.acquire("local", "camp-b")
    assert allocator.holders("local") == {"camp-a"} and allocator.free("local") == 0
    await allocator.release("local", "camp-a")
    assert await allocator.acquire("local", "camp-b")
    assert not await allocator.acquire("local", "camp-a")
    await allocator.release("local", "nobody")  # releasing what is not held is harmless
    with pytest.raises(KeyError, match="registered: local"):
        await allocator.acquire("gpu", "camp-a")


async def test_held_slots_are_restored_at_startup() -> None:
    allocator = Allocator({"local": MachineSpec(name="local", kind="local", slots=1)})
    allocator.restore([("local", "camp-a"), ("local", "camp-b"), ("gone", "camp-c")])
    assert allocator.holders("local") == {"camp-a", "camp-b"}  # over capacity: both running
    assert not await allocator.acquire("local", "camp-d")
    await allocator.release("local", "camp-a")
    assert not await allocator.acquire("local", "camp-d")  # camp-b still fills the one slot
    await allocator.release("local", "camp-b")
    assert await allocator.acquire("local", "camp-d")
    await allocator.release("gone", "camp-c")
    assert allocator.holders("gone") == frozenset()
