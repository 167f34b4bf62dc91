"""Campaigns run the user's own code (issue 18, finding 3): `run: python train.py` works as the
README writes it. A round runs in a working directory the user chose and can see (the
machine's `workdir`, the conversation's workspace, or `campaigns run`'s current directory or
--workdir), mounted writable at its own path, with the machine's `mounts` read-only and
`python` present where the host only has `python3`; its log and exit code stay under
RAVEN_HOME, out of its reach. The bot's own files are refused as a workdir. A round that dies
is explained by its last lines: plain for people, fenced for models."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.sandbox import DetachedSandbox
from bot.app import Runtime
from bot.home import workspace_for
from core.ids import ConversationRef
from core.secret_names import SecretNames
from host.features.oncall.decider import campaign_brief
from host.runtime.messages import InboundMessage
from oncall.access import Requester
from oncall.engine import CampaignError
from oncall.machines import LocalMachine, MachinesConfigError, SlurmMachine, load_machines
from oncall.machines.confine import confine_function
from oncall.model import Budget, JobRequest, MachineSpec
from oncall.policy import Decision, DecisionContext, decide
from oncall.store import CampaignRecord
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import approve_campaigns, eventually
from tests.oncall_kit import CONV, oncall_kit, spec
from tests.runtime_kit import chat_runtime
from tests.sandboxing import real_sandbox
from tests.slurm_cluster import SlurmCluster

CHAT = ConversationRef("test", "W", "C", "T")
RAVEN = str(Path(sys.executable).with_name("raven-bot"))
StartRuntime = Callable[[], Awaitable[tuple[Runtime, FakeChatAdapter]]]
WITHIN = 90.0
LINE = (
    "campaign: tune the toy model | machine: local | run: python train.py | "
    "metric: loss min | budget: 2h | poll: 1s"
)


def _train_py(directory: Path, *, extra: str = "") -> None:
    """A user's training script: prints `loss <x>` lines and writes a file where it runs."""
    directory.mkdir(parents=True, exist_ok=True)
    body = f"""\
        import pathlib
        {extra}
        for value in (1.0, 0.8, 0.6):
            print(f"loss {{value}}", flush=True)
        pathlib.Path("trained.txt").write_text("done\\n")
        """
    (directory / "train.py").write_text(textwrap.dedent(body))


def _msg(text: str, event: str) -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread="T",
        message_id=event,
        author_id="U1",
        author_name="alice",
        text=text,
        event_id=event,
    )


async def _chat_campaign(rt: Runtime, adapter: FakeChatAdapter) -> tuple[CampaignRecord, str]:
    """Start the README's line from the thread, approve it; (record, the prompt's question)."""
    turn = await rt.service.accept(_msg(LINE, "e1"))
    assert turn is not None
    await turn
    (prompt,) = await approve_campaigns(rt.broker)
    await eventually(lambda: any(t.startswith("📋 Campaign") for t in adapter.texts), within=60)
    (record,) = await rt.campaigns.store.recent()
    return record, prompt.question


@pytest.fixture
async def runtime(isolated_env: Path) -> AsyncIterator[StartRuntime]:
    """Starts the serving runtime when called (after the test wrote its settings files)."""
    adapter = FakeChatAdapter()
    async with AsyncExitStack() as started:

        async def make() -> tuple[Runtime, FakeChatAdapter]:
            return await started.enter_async_context(chat_runtime(adapter, serving=True)), adapter

        yield make


async def test_a_chat_campaign_approved_without_its_script_fails_once_instead_of_repeating(
    runtime: StartRuntime,
) -> None:
    # The prompt warned that train.py is not there; approved anyway, the first round dies on
    # it and the campaign is reported as failed, not resubmitted into the same failure.
    rt, adapter = await runtime()
    record, question = await _chat_campaign(rt, adapter)
    assert "`train.py` is not in the working directory" in question
    report = next(t for t in adapter.texts if t.startswith("📋 Campaign"))
    assert record.state == "failed" and record.round == 1, report
    assert "because `train.py` was not found in its working directory" in report, report


async def test_a_chat_campaign_runs_python_train_py_in_the_conversation_workspace(
    runtime: StartRuntime, isolated_env: Path
) -> None:
    workspace = workspace_for(isolated_env)(CHAT)
    campaigns = isolated_env / "campaigns"
    _train_py(
        workspace, extra=f"print('campaigns visible:', pathlib.Path({str(campaigns)!r}).exists())"
    )
    rt, adapter = await runtime()
    record, question = await _chat_campaign(rt, adapter)
    report = next(t for t in adapter.texts if t.startswith("📋 Campaign"))
    assert record.state == "closed", report
    assert [m.value for m in await rt.campaigns.store.measurements(record.id)] == [1.0, 0.8, 0.6]
    assert "1" in report and "0.6" in report
    assert (workspace / "trained.txt").read_text() == "done\n"  # ran there, writable
    # Named, not shown as a path on the bot's host nobody in the thread can open.
    assert "Runs in: this conversation's workspace, on the bot's host" in question
    assert str(workspace) not in question
    # The log and exit code are kept under RAVEN_HOME, out of the command's sight.
    round_dir = campaigns / record.id / "round-1"
    log = (round_dir / "round.log").read_text()
    assert "campaigns visible: False" in log
    assert (round_dir / "exit_code").read_text() == "0\n"
    assert not (workspace / "round.log").exists()


async def test_a_chat_campaign_runs_in_the_machine_workdir_with_its_mounts(
    runtime: StartRuntime, isolated_env: Path, tmp_path: Path
) -> None:
    project, data = tmp_path / "project", tmp_path / "data"
    data.mkdir()
    (data / "lr.txt").write_text("0.1\n")
    _train_py(project, extra=f"print('lr', pathlib.Path({str(data / 'lr.txt')!r}).read_text())")
    _machines_toml(
        isolated_env,
        f'[machines.local]\nkind = "local"\nworkdir = "{project}"\nmounts = ["{data}"]\n',
    )
    rt, adapter = await runtime()
    record, question = await _chat_campaign(rt, adapter)
    assert record.state == "closed"
    assert (project / "trained.txt").read_text() == "done\n"
    assert (
        "lr 0.1" in (isolated_env / "campaigns" / record.id / "round-1" / "round.log").read_text()
    )
    # What the command can see: its working directory and the read-only mounts.
    assert f"`{project}`" in question and f"`{data}`" in question
    assert "read-only" in question


def _machines_toml(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "machines.toml").write_text(text)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["RAVEN_HOME"] = str(home)
    return env


async def _cli(cwd: Path, home: Path, *extra: str) -> tuple[int, str, str]:
    args = ["campaigns", "run", "--goal", "tune", "--run", "python train.py"]
    args += ["--metric", "loss:min", "--budget", "10m", "--poll", "0.1s", "--json", *extra]
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        *args,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(home),
    )
    out, err = await asyncio.wait_for(proc.communicate(), WITHIN)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_campaigns_run_runs_python_train_py_from_the_current_directory(
    isolated_env: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    _train_py(project)
    code, out, err = await _cli(project, isolated_env)
    assert code == 0, err
    record = json.loads(out)
    assert record["state"] == "closed" and record["report"]
    assert [m["value"] for m in record["measurements"]] == [1.0, 0.8, 0.6]
    assert record["spec"]["workdir"] == str(project.resolve())
    assert (project / "trained.txt").exists()
    assert record["rounds"][0]["log_path"].startswith(str(isolated_env / "campaigns"))


@pytest.mark.slow
async def test_campaigns_run_workdir_flag_and_its_refusals(
    isolated_env: Path, tmp_path: Path
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    _train_py(project)
    elsewhere.mkdir()
    code, out, err = await _cli(elsewhere, isolated_env, "--workdir", str(project))
    assert code == 0, err
    assert json.loads(out)["state"] == "closed" and (project / "trained.txt").exists()
    _machines_toml(isolated_env, '[machines.local]\nkind = "local"\n')
    code, _, err = await _cli(elsewhere, isolated_env, "--workdir", str(isolated_env))
    assert code == 2
    assert "RAVEN_HOME" in err and "Traceback" not in err
    code, _, err = await _cli(elsewhere, isolated_env, "--workdir", str(tmp_path / "missing"))
    assert code == 2 and "--workdir" in err and "no such directory" in err


@pytest.mark.parametrize(
    ("field", "where", "said"),
    [
        ("workdir", "home", "RAVEN_HOME"),
        ("workdir", "cwd", ".env"),
        ("workdir", "above", "RAVEN_HOME"),
        ("workdir", "campaigns", "RAVEN_HOME"),
        ("mounts", "home", "RAVEN_HOME"),
    ],
)
def test_a_machine_workdir_or_mount_in_the_bots_own_files_is_refused(
    isolated_env: Path, field: str, where: str, said: str
) -> None:
    paths = {
        "home": isolated_env,
        "cwd": Path.cwd(),
        "above": isolated_env.parent,
        "campaigns": isolated_env / "campaigns",
    }
    value = f'"{paths[where]}"' if field == "workdir" else f'["{paths[where]}"]'
    _machines_toml(isolated_env, f'[machines.local]\nkind = "local"\n{field} = {value}\n')
    with pytest.raises(MachinesConfigError) as refused:
        load_machines(isolated_env)
    message = str(refused.value)
    assert "[machines.local]" in message and said in message, message


def test_a_one_shot_command_may_name_the_operators_directory_as_a_machine_workdir(
    isolated_env: Path, tmp_path: Path
) -> None:
    """`cd project && raven-bot campaigns run` with machines.toml naming that project as the
    local workdir: the operator's current directory is theirs, not the bot's."""
    project = tmp_path / "project"
    project.mkdir()
    _machines_toml(isolated_env, f'[machines.local]\nkind = "local"\nworkdir = "{project}"\n')
    specs = load_machines(isolated_env, project, operator_dir=True)
    assert specs["local"].workdir == str(project)
    # Still nothing that contains it, and the serving bot's own directory stays refused.
    _machines_toml(isolated_env, f'[machines.local]\nkind = "local"\nworkdir = "{tmp_path}"\n')
    with pytest.raises(MachinesConfigError):
        load_machines(isolated_env, project, operator_dir=True)
    _machines_toml(isolated_env, f'[machines.local]\nkind = "local"\nworkdir = "{project}"\n')
    with pytest.raises(MachinesConfigError):
        load_machines(isolated_env, project)


async def test_a_chat_campaign_cannot_choose_its_own_workdir(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        with pytest.raises(CampaignError) as refused:
            await kit.engine.start(
                "U1", CONV, spec("echo loss 1", workdir=str(tmp_path)), requester=Requester("U1")
            )
    assert "workdir" in str(refused.value) or "working directory" in str(refused.value)


async def _exited(machine: LocalMachine, handle: Any) -> bool:
    return (await machine.poll(handle)).state == "exited"


async def test_a_local_round_runs_in_its_workdir_sees_its_mounts_read_only_not_its_log(
    tmp_path: Path,
) -> None:
    home, project, data = tmp_path / "home", tmp_path / "project", tmp_path / "data"
    project.mkdir()
    data.mkdir()
    (data / "in.txt").write_text("from the mount\n")
    round_dir = home / "campaigns" / "c1" / "round-1"
    machine = LocalMachine(
        MachineSpec(name="local", kind="local", mounts=(str(data),)),
        DetachedSandbox(real_sandbox(hidden=(home,))),
        secret_names=SecretNames(),
    )
    command = (
        f"cat {data}/in.txt; touch {data}/new 2>/dev/null || echo mount read-only; "
        f"echo made > out.txt; ls {round_dir} 2>/dev/null | wc -l; python -c 'print(6 * 7)'"
    )
    request = JobRequest(
        campaign_id="c1", round=1, command=command, workdir=round_dir, cwd=str(project)
    )
    handle = await machine.submit(request)
    await eventually(lambda: _exited(machine, handle), within=30)
    log = (round_dir / "round.log").read_text()
    assert log.split() == ["from", "the", "mount", "mount", "read-only", "0", "42"], log
    assert (project / "out.txt").read_text() == "made\n"
    assert not (data / "new").exists() and not (project / "round.log").exists()


def _host_lacks_python(path: str) -> None:
    if shutil.which("python", path=path) is not None or shutil.which("python3", path=path) is None:
        pytest.skip(f"this host has `python` (or no `python3`) on {path}")


def test_python_resolves_in_the_sandbox_where_the_host_has_only_python3(tmp_path: Path) -> None:
    path = "/usr/bin:/bin"
    _host_lacks_python(path)
    env = {"PATH": path, "HOME": str(tmp_path / "home")}
    launch = real_sandbox().launch(
        ["sh", "-c", "python -c 'print(6 * 7)'"], workspace=tmp_path, env=env
    )
    done = subprocess.run(launch.argv, env=env, capture_output=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"42\n"


def test_remote_rounds_get_python_and_read_only_mounts_too(tmp_path: Path) -> None:
    # The confinement of Slurm and ssh rounds, run here with this host's bubblewrap.
    path = "/usr/bin:/bin"
    _host_lacks_python(path)
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    data.mkdir()
    (data / "in.txt").write_text("mounted\n")
    command = f"python -c 'print(6 * 7)'; cat {data}/in.txt; touch {data}/x || echo read-only"
    script = confine_function([], without_bwrap="refuse", mounts=[str(data)])
    script += f"raven_confined {work} {json.dumps(command)}\n"
    done = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": path, "HOME": str(tmp_path / "home")},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.stdout.split() == [b"42", b"mounted", b"read-only"], done.stderr
    assert not (data / "x").exists()


@pytest.mark.slow
async def test_a_slurm_round_runs_python_train_py_in_its_workdir(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    project = tmp_path / "project"
    _train_py(project)
    machine = SlurmMachine(
        MachineSpec(name="local", kind="slurm"),
        environ=slurm_cluster.environ,
        secret_names=SecretNames(),
    )
    # The kit's data directory (its RAVEN_HOME) beside the project, not around it.
    (tmp_path / "kit").mkdir()
    async with oncall_kit(tmp_path / "kit", machine=machine) as kit:
        record = await kit.engine.start(
            "U1", CONV, spec("python train.py", poll_seconds=0.2, workdir=str(project))
        )
        final = await kit.until_final(record.id, within=120)
        assert final.state == "closed", slurm_cluster.log_tail()
        values = [m.value for m in await kit.campaigns.measurements(record.id)]
    assert values == [1.0, 0.8, 0.6]
    assert (project / "trained.txt").exists()


@dataclass
class RecordingDecider:
    """The rule-based policy, keeping each context it was asked about."""

    contexts: list[DecisionContext] = field(default_factory=list)

    @property
    def model_backed(self) -> bool:
        return False

    async def decide(self, context: DecisionContext) -> Decision:
        self.contexts.append(context)
        return decide(context)


async def test_a_died_round_is_explained_by_its_last_lines(tmp_path: Path) -> None:
    crash = "echo loss 1.5; echo 'RuntimeError: CUDA out of memory' >&2; exit 3"
    decider = RecordingDecider()
    async with oncall_kit(tmp_path, decider=decider) as kit:
        one = spec(crash, budget=Budget(wall_seconds=600, rounds=1))
        record = await kit.engine.start("U1", CONV, one)
        final = await kit.until_final(record.id)
        texts = kit.notifier.news
    assert final.state == "failed"
    woke = next(t for t in texts if "Woke early" in t)
    report = next(t for t in texts if "report:" in t)
    for text in (woke, report):
        assert "RuntimeError: CUDA out of memory" in text, text
        assert "untrusted-data" not in text
    # To the model the same lines arrive fenced as untrusted data.
    (context,) = decider.contexts
    assert "RuntimeError: CUDA out of memory" in context.output_tail
    brief = campaign_brief(context)
    fenced = brief[brief.index("last lines of the round's output") :]
    assert "RuntimeError: CUDA out of memory" in fenced.split("</untrusted-data")[0]
