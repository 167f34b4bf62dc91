"""The Slurm machine against a real one-node cluster (slurmctld + slurmd started for the session):
a round's decreasing loss is read from its output file as it runs, exit codes arrive (from the
job's exit-code file, also once Slurm has forgotten it), scancel stops a sleeping job, and a
refused submission is a clear `MachineUnavailable`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.secret_names import SecretNames
from oncall.machines import SlurmMachine
from oncall.machines.slurm import batch_script, exit_code_of, sbatch_argv
from oncall.model import JobHandle, JobRequest, JobStatus, MachineSpec, MachineUnavailable
from tests.helpers import eventually
from tests.slurm_cluster import SlurmCluster, missing

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

SPEC = MachineSpec(name="cluster", kind="slurm", slots=2)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> SlurmMachine:
    """The machine, its client commands pointed at the session's cluster."""
    return SlurmMachine(SPEC, environ=slurm_cluster.environ, secret_names=SecretNames())


def _request(workdir: Path, command: str, **extra: object) -> JobRequest:
    return JobRequest.model_validate(
        {"campaign_id": "c1", "round": 1, "command": command, "workdir": workdir, **extra}
    )


async def _until(
    slurm: SlurmMachine, handle: JobHandle, state: str, within: float = 60.0
) -> JobStatus:
    """Poll until the job is in `state` (Slurm has no completion callback without accounting)."""
    seen: list[JobStatus] = []

    async def reached() -> bool:
        seen[:] = [await slurm.poll(handle)]
        return seen[0].state == state

    await eventually(reached, within, what=lambda: f"job state {state!r}, last {seen}", every=0.05)
    return seen[0]


async def _output_contains(slurm: SlurmMachine, handle: JobHandle, text: bytes) -> bytes:
    log = [b""]

    async def shown() -> bool:
        log[0] = await slurm.read_log(handle, 0)
        return text in log[0]

    await eventually(shown, 60, what=lambda: f"{text!r} in the job's log {log[0]!r}", every=0.05)
    return log[0]


def test_sbatch_command_and_script(tmp_path: Path) -> None:
    request = _request(
        tmp_path, "python train.py --lr 0.1", time_limit_seconds=61, cpus=2, partition="gpu"
    )
    argv = sbatch_argv(SPEC, request, tmp_path)
    assert argv[:2] == ["sbatch", "--parsable"]
    joined = " ".join(argv)
    assert "--job-name raven-c1-1" in joined and f"--chdir {tmp_path}/work" in joined
    assert f"--output {tmp_path}/round.log" in joined
    assert "--partition gpu" in joined and "--time 2" in joined  # 61 s: 2 minutes, rounded up
    assert "--cpus-per-task 2" in joined and argv[-1] == str(tmp_path / "round.sbatch")
    script = batch_script("echo 'it''s'", tmp_path)
    assert script.startswith("#!/bin/sh\n") and "mv -f" in script
    assert exit_code_of("3:0") == 3 and exit_code_of("0:15") == 143 and exit_code_of("") is None


async def test_a_round_prints_decreasing_loss_read_as_it_runs(
    slurm: SlurmMachine, tmp_path: Path
) -> None:
    workdir = tmp_path / "round-1"
    command = (
        'for loss in 0.9 0.7 0.5; do echo "loss $loss"; done; '
        "while [ ! -e go ]; do sleep 0.05; done; echo 'loss 0.2'"
    )
    handle = await slurm.submit(_request(workdir, command, time_limit_seconds=300))
    assert handle.kind == "slurm" and handle.job_id.isdigit()
    first = await _output_contains(slurm, handle, b"loss 0.5\n")
    losses = [float(v) for v in re.findall(rb"loss (\S+)", first)]
    assert losses == sorted(losses, reverse=True) == [0.9, 0.7, 0.5]
    status = await slurm.poll(handle)
    assert status.state == "running" and "RUNNING" in status.detail
    (workdir / "work" / "go").touch()
    status = await _until(slurm, handle, "exited")
    assert status.exit_code == 0
    assert await slurm.read_log(handle, len(first)) == b"loss 0.2\n"


async def test_a_failing_command_gives_its_exit_code(slurm: SlurmMachine, tmp_path: Path) -> None:
    handle = await slurm.submit(_request(tmp_path / "r", "echo oops >&2; exit 3"))
    assert (await _until(slurm, handle, "exited")).exit_code == 3
    assert b"oops" in await slurm.read_log(handle, 0)


async def test_terminate_cancels_a_sleeping_job(slurm: SlurmMachine, tmp_path: Path) -> None:
    handle = await slurm.submit(_request(tmp_path / "r", "echo started; sleep 600"))
    await _output_contains(slurm, handle, b"started")
    await slurm.terminate(handle, grace_seconds=20)
    status = await _until(slurm, handle, "exited", within=20)
    assert status.exit_code == 143  # the command died of scancel's SIGTERM
    await slurm.terminate(handle, grace_seconds=1)  # already ended: nothing to do


async def test_a_job_slurm_forgot_is_read_from_its_exit_file_or_vanished(
    slurm: SlurmMachine, tmp_path: Path
) -> None:
    (tmp_path / "exit_code").write_text("4\n")
    forgotten = JobHandle(
        machine="cluster",
        kind="slurm",
        job_id="999999",  # never submitted: unknown to Slurm
        host="vm",
        started_at=0.0,
        log_path=str(tmp_path / "round.log"),
        exit_path=str(tmp_path / "exit_code"),
    )
    assert (await slurm.poll(forgotten)).exit_code == 4
    (tmp_path / "exit_code").unlink()
    status = await slurm.poll(forgotten)
    assert status.state == "vanished" and "999999" in status.detail


async def test_an_invalid_partition_is_unavailable_with_sbatchs_words(
    slurm: SlurmMachine, tmp_path: Path
) -> None:
    with pytest.raises(MachineUnavailable) as caught:
        await slurm.submit(_request(tmp_path / "r", "true", partition="no-such-partition"))
    message = str(caught.value)
    assert message.startswith("cluster: sbatch refused the round")
    assert "invalid partition" in message.lower()


async def test_a_controller_that_is_down_is_unavailable(tmp_path: Path) -> None:
    reason = missing()
    if reason is not None:
        pytest.skip(f"Slurm tests skipped: {reason}")
    conf = tmp_path / "slurm.conf"
    # A cluster whose controller port nobody listens on (a short timeout: no long retries).
    conf.write_text(
        "ClusterName=down\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n"
    )
    machine = SlurmMachine(
        SPEC, environ={"PATH": "/usr/bin:/bin", "SLURM_CONF": str(conf)}, secret_names=SecretNames()
    )
    with pytest.raises(MachineUnavailable) as caught:
        await machine.submit(_request(tmp_path / "r", "true"))
    assert "sbatch refused" in str(caught.value)
    assert "Unable to contact slurm controller" in str(caught.value)
    handle = JobHandle(
        machine="cluster",
        kind="slurm",
        job_id="1",
        host="vm",
        started_at=0.0,
        log_path=str(tmp_path / "round.log"),
        exit_path=str(tmp_path / "exit_code"),
    )
    with pytest.raises(MachineUnavailable, match=r"squeue failed.*Unable to contact"):
        await machine.poll(handle)
