"""The full campaign on a real one-node Slurm: sbatch, measurements from the job's output
file, an early wake on exit, and scancel when a diverging round is terminated."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from core.secret_names import SecretNames
from oncall.machines import SlurmMachine
from oncall.model import MachineSpec
from tests.oncall_kit import CONV, oncall_kit, spec
from tests.slurm_cluster import SlurmCluster

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

CLUSTER = MachineSpec(name="local", kind="slurm", slots=2)
DECREASING = 'for v in 0.9 0.7 0.5 0.42; do echo "loss $v"; sleep 0.2; done'


async def test_a_campaign_on_slurm_reads_its_output_wakes_on_exit_and_reports(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    machine = SlurmMachine(CLUSTER, environ=slurm_cluster.environ, secret_names=SecretNames())
    async with oncall_kit(tmp_path, machine=machine) as kit:
        record = await kit.engine.start("U1", CONV, spec(DECREASING, poll_seconds=0.2))
        final = await kit.until_final(record.id, within=120)
        assert final.state == "closed", slurm_cluster.log_tail()
        values = [m.value for m in await kit.campaigns.measurements(record.id)]
        assert values == [0.9, 0.7, 0.5, 0.42]
        (round_,) = await kit.campaigns.rounds(record.id)
        assert (round_.exit_code, round_.wake_reason) == (0, "finished")
        assert round_.handle is not None and round_.handle.kind == "slurm"


async def test_a_diverging_slurm_round_is_scancelled(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    machine = SlurmMachine(CLUSTER, environ=slurm_cluster.environ, secret_names=SecretNames())
    command = "echo loss 0.8; echo loss nan; sleep 120"
    async with oncall_kit(tmp_path, machine=machine) as kit:
        record = await kit.engine.start("U1", CONV, spec(command, poll_seconds=0.2))
        await kit.until_final(record.id, within=120)
        values = [m.value for m in await kit.campaigns.measurements(record.id)]
        assert values[0] == 0.8 and math.isnan(values[1])
        (round_,) = await kit.campaigns.rounds(record.id)
        assert round_.wake_reason == "diverged" and round_.handle is not None
        status = await machine.poll(round_.handle)
        assert status.state != "running"  # scancelled, not left holding the node
