"""Campaign fields as chat, the Host's tool and the CLI write them: a JSON-lines metric and
Slurm's partition, cpus and time limit reach the spec and the sbatch command line; a wrong
value is refused with what is wrong."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agents.campaign_syntax import parse_campaign
from bot.cli.campaign_run import run_spec
from bot.cli.parsers import parser
from host.features.oncall.tools import StartCampaignInput, campaign_spec
from oncall.machines.slurm import sbatch_argv
from oncall.model import (
    CampaignSpec,
    JobHandle,
    JobRequest,
    JobStatus,
    MachineSpec,
    MachineUnavailable,
)
from tests.oncall_kit import CONV, oncall_kit

LINE = (
    "campaign: tune on the cluster | machine: local | run: python train.py | "
    "metric: loss min | budget: 2h | json_key: metrics.loss | partition: debug | cpus: 4 | "
    "time: 30m"
)
SLURM = MachineSpec(name="local", kind="slurm", partition="batch", workdir="/shared")


def _chat(line: str) -> CampaignSpec:
    fields = parse_campaign(line)
    assert fields is not None
    return campaign_spec(StartCampaignInput(**fields))


def test_the_chat_syntax_sets_the_json_key_partition_cpus_and_time() -> None:
    spec = _chat(LINE)
    assert spec.metric.json_key == "metrics.loss" and spec.metric.pattern is None
    assert (spec.partition, spec.cpus, spec.round_time_limit_seconds) == ("debug", 4, 1800)
    assert spec.command == "python train.py"


def test_fields_go_in_any_order_the_goal_too() -> None:
    # Issue 39, finding 4: the goal had to come first; `campaign: machine: local | …` took
    # `machine: local` as the goal and the machine's default.
    spec = _chat(
        "campaign: machine: local | budget: 2h | goal: tune it | metric: loss min "
        "| run: python train.py"
    )
    assert (spec.goal, spec.machine, spec.command, spec.metric.name) == (
        "tune it",
        "local",
        "python train.py",
        "loss",
    )
    with pytest.raises(ValueError, match="the goal is missing"):
        _chat("campaign: machine: local | run: x | metric: loss min | budget: 2h")


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("cpus", "four", "`cpus: four` is not a whole number of cpus"),
        ("cpus", "0", "`cpus: 0`: between 1 and 1024"),
        ("time", "soon", "`time:` 'soon' is not a duration"),
        ("partition", "de bug", "'de bug' is not a Slurm partition name"),
        ("json_key", "metrics loss", "a JSON key has no spaces"),
    ],
)
def test_a_wrong_field_is_refused_with_what_is_wrong(field: str, value: str, problem: str) -> None:
    line = _replace_field(LINE, field, value)
    with pytest.raises(ValueError) as refused:
        _chat(line)
    assert problem in str(refused.value)
    assert "The syntax is:" in str(refused.value)


def _replace_field(line: str, name: str, value: str) -> str:
    parts = [p.strip() for p in line.split("|")]
    return " | ".join(f"{name}: {value}" if p.startswith(f"{name}:") else p for p in parts)


def _cli(*extra: str) -> argparse.Namespace:
    base = ["campaigns", "run", "--goal", "g", "--run", "python train.py"]
    return parser().parse_args([*base, "--metric", "loss:min", "--budget", "2h", *extra])


def test_the_cli_flags_set_the_same_fields() -> None:
    spec = run_spec(
        _cli("--json-key", "loss", "--partition", "debug", "--cpus", "8", "--time", "1h")
    )
    assert spec.metric.json_key == "loss"
    assert (spec.partition, spec.cpus, spec.round_time_limit_seconds) == ("debug", 8, 3600)


def test_wrong_cli_flags_are_named_by_their_flag() -> None:
    with pytest.raises(ValueError) as refused:
        run_spec(_cli("--cpus", "-1", "--time", "later", "--partition", "a b"))
    lines = str(refused.value).splitlines()
    assert any(line.startswith("--cpus -1: between 1 and 1024") for line in lines), lines
    assert any(line.startswith("--time: 'later' is not a duration") for line in lines), lines
    assert any(line.startswith("--partition:") and "Slurm partition" in line for line in lines)


@dataclass
class RecordingSlurm:
    """A Slurm machine that records the round it is asked to start and refuses it."""

    spec: MachineSpec = SLURM
    requests: list[JobRequest] = field(default_factory=list)

    async def submit(self, request: JobRequest) -> JobHandle:
        self.requests.append(request)
        raise MachineUnavailable("recorded, not run")

    async def poll(self, handle: JobHandle) -> JobStatus:
        raise AssertionError("never submitted")

    async def read_log(self, handle: JobHandle, offset: int) -> bytes:
        raise AssertionError("never submitted")

    async def terminate(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        raise AssertionError("never submitted")


async def test_the_fields_reach_sbatch_through_the_engine(tmp_path: Path) -> None:
    slurm = RecordingSlurm()
    async with oncall_kit(tmp_path, machine=slurm) as kit:
        record = await kit.engine.start("U1", CONV, _chat(LINE))
        final = await kit.until_final(record.id)
        assert final.state == "failed" and "recorded, not run" in (final.error or "")
    (request,) = slurm.requests
    argv = sbatch_argv(SLURM, request, tmp_path)
    assert argv[argv.index("--partition") + 1] == "debug"  # the campaign's, not the default
    assert argv[argv.index("--cpus-per-task") + 1] == "4"
    assert argv[argv.index("--time") + 1] == "30"  # minutes


def test_without_a_json_key_the_metric_is_read_with_the_default_pattern() -> None:
    spec = _chat(_replace_field(LINE, "json_key", ""))
    assert spec.metric.json_key is None
