"""Oncall's value types: campaigns, rounds, measurements, machines and jobs (SPEC §9, §7.6).

Validated with pydantic at every boundary (chat syntax, tools, CLI, machines.toml), so a bad
value is refused with a message that names the field and how to fix it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from core.patterns import PatternError, UserPattern
from oncall.workdirs import BotPaths, workdir_problem

# `approval`: its command awaits a person's approval; nothing has run.
CampaignState = Literal[
    "approval",
    "planning",
    "running",
    "waiting",
    "deciding",
    "reporting",
    # Its owner no longer passes the access rules: no round runs until it is resumed.
    "paused",
    "closed",
    "failed",
    "cancelled",
]
FINAL_STATES: frozenset[str] = frozenset({"closed", "failed", "cancelled"})
Direction = Literal["min", "max"]
MachineKind = Literal["local", "ssh", "slurm"]
# Why the agent was woken: its scheduled wake-up, or the monitor seeing something early.
WakeReason = Literal["scheduled", "finished", "died", "stalled", "diverged", "vanished", "budget"]
JobState = Literal["running", "exited", "vanished", "unknown"]
DecisionAction = Literal["wait", "resubmit", "terminate", "report"]


_PARTITION = re.compile(r"[A-Za-z0-9_.\-]+(,[A-Za-z0-9_.\-]+)*")


def check_partition(value: str) -> str:
    """`value` if it is a Slurm partition name (or a comma-separated list), else ValueError."""
    if not _PARTITION.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Slurm partition name (letters, digits, `_`, `.`, `-`; "
            "several separated by commas)"
        )
    return value


class MetricSpec(BaseModel):
    """How to read one metric from a round's output: a regex with one group, or a JSON key."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
    pattern: str | None = Field(
        default=None, description="regex whose first group is the value, e.g. `loss[=: ]+(\\S+)`"
    )
    json_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="key of a JSON-lines record (a dotted path for nested keys)",
    )

    @field_validator("pattern")
    @classmethod
    def _one_group(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            compiled = UserPattern(value)
        except PatternError as exc:
            raise ValueError(f"the pattern `{value}`: {exc}") from None
        if compiled.groups < 1:
            raise ValueError("the pattern needs one capture group around the value, e.g. (\\S+)")
        return value

    @field_validator("json_key")
    @classmethod
    def _one_key(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ValueError(f"{value!r}: a JSON key has no spaces (write a.b for a nested key)")
        return value

    def default_pattern(self) -> str:
        """The pattern in use: the given one, or `<name>` followed by a number."""
        if self.pattern is not None:
            return self.pattern
        name = re.escape(self.name)
        return rf"\b{name}\b\s*[=:]?\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf|-inf))"


# The longest campaign fields anyone may ask for (chat, the Host's tool, the CLI); the
# operator's own limit on budgets (RAVEN_CAMPAIGN_MAX_BUDGET_HOURS) is at most this one.
MAX_BUDGET_SECONDS = 90 * 86400.0
MAX_WAKE_SECONDS = 86400.0
MAX_POLL_SECONDS = 3600.0
MAX_ROUNDS = 1000


class Budget(BaseModel):
    """Limits of one campaign: wall clock, compute minutes (slot-minutes), rounds."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    wall_seconds: float = Field(gt=0, le=MAX_BUDGET_SECONDS, description="whole campaign, seconds")
    compute_minutes: float | None = Field(default=None, gt=0)
    rounds: int = Field(default=5, ge=1, le=MAX_ROUNDS)


class CampaignSpec(BaseModel):
    """What a user asks for when starting a campaign."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    goal: str = Field(min_length=1, max_length=2000)
    machine: str = Field(default="local", min_length=1, max_length=64)
    command: str = Field(min_length=1, max_length=8000)
    metric: MetricSpec
    direction: Direction = "min"
    baseline: float | None = None
    budget: Budget
    wake_every_seconds: float = Field(default=300.0, ge=1, le=MAX_WAKE_SECONDS)
    poll_seconds: float = Field(default=5.0, gt=0, le=MAX_POLL_SECONDS)
    stall_seconds: float = Field(default=600.0, gt=0)
    divergence_margin: float | None = Field(
        default=None, ge=0, description="wake when worse than baseline by more than this"
    )
    permitted_actions: tuple[DecisionAction, ...] = ("wait", "resubmit", "terminate", "report")
    partition: str | None = Field(default=None, max_length=64, description="Slurm partition")
    cpus: int | None = Field(default=None, ge=1, le=1024)
    round_time_limit_seconds: float | None = Field(default=None, gt=0)
    # Where the command runs (its working directory, writable), chosen when the campaign
    # starts: the operator's directory, the machine's `workdir` or the conversation's
    # workspace. None: an empty directory per round (only in tests of the engine).
    workdir: str | None = Field(default=None, max_length=4096)

    @field_validator("partition")
    @classmethod
    def _partition_name(cls, value: str | None) -> str | None:
        return None if value is None else check_partition(value)

    @field_validator("baseline")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("the baseline must be a finite number")
        return value


class RoundSummary(BaseModel):
    """One round as the decision policy and the report see it (how it ended, if it has)."""

    model_config = ConfigDict(frozen=True)
    round: int
    wake_reason: WakeReason | None = None  # the wake that ended the round; None while it runs
    exit_code: int | None = None
    state: str = ""  # the store's round state (submitting | running | ended | failed)


class Measurement(BaseModel):
    """One recorded value (append-only), with the output line it came from."""

    model_config = ConfigDict(frozen=True)
    id: int  # numbered within its campaign: #1 is the campaign's first value
    campaign_id: str
    round: int
    at: float
    name: str
    value: float
    source_line: str


class MachineSpec(BaseModel):
    """One registered machine (RAVEN_HOME/machines.toml), with its capacity in slots."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    kind: MachineKind
    slots: int = Field(default=1, ge=1, le=4096)
    host: str | None = Field(default=None, description="ssh: the host to connect to")
    user: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    workdir: str | None = Field(
        default=None,
        max_length=4096,
        description="where commands run (their working directory, writable); on ssh, a path "
        "on that host",
    )
    # Extra directories a round may read (bound read-only at the same path).
    mounts: tuple[str, ...] = ()
    partition: str | None = Field(default=None, description="slurm: default partition")
    ssh_options: tuple[str, ...] = ()
    # Who may run rounds here: user ids ("*" for everyone the access policy admits) and
    # roles. None (unset) means everyone on a local machine and admins only on a remote one.
    users: tuple[str, ...] | None = None
    roles: tuple[str, ...] = ()
    # Whose approval a command on this machine also needs (besides the requester's).
    approvers: tuple[str, ...] = ()
    # How many of its slots one person's campaigns may hold at once (None: half, at least 1).
    user_slots: int | None = Field(default=None, ge=1, le=4096)

    @model_validator(mode="after")
    def _out_of_the_bots_files(self, info: ValidationInfo) -> MachineSpec:
        """`workdir` and `mounts` stay out of RAVEN_HOME and the bot's directory; checked when
        the loader passes `context={"bot_paths": BotPaths}` (machines.toml)."""
        for mount in self.mounts:
            if not mount.startswith("/"):
                raise ValueError(f"mounts: {mount!r} is not an absolute path")
        context = info.context if isinstance(info.context, dict) else {}
        paths = context.get("bot_paths")
        if not isinstance(paths, BotPaths):
            return self
        problems = [workdir_problem(m, paths, what="mount") for m in self.mounts]
        # An ssh workdir is a path on another host: only its form is checked here.
        if self.workdir is not None and self.kind != "ssh":
            problems.insert(0, workdir_problem(self.workdir, paths))
        found = [p for p in problems if p is not None]
        if found:
            raise ValueError("; ".join(found))
        return self


class JobRequest(BaseModel):
    """One round to start on a machine."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    campaign_id: str
    round: int = Field(ge=1)
    command: str
    workdir: Path  # the round's directory (created by the machine): log and exit code
    # Where the command runs (writable); None: the round directory's own `work/`.
    cwd: str | None = None
    time_limit_seconds: float | None = None
    cpus: int | None = None
    partition: str | None = None


class JobHandle(BaseModel):
    """A started round: enough to find it again after a restart."""

    model_config = ConfigDict(frozen=True)
    machine: str
    kind: MachineKind
    job_id: str  # a pid (local, ssh) or a Slurm job id
    host: str
    started_at: float
    log_path: str
    exit_path: str  # where the exit code lands when the job ends


class JobStatus(BaseModel):
    """What a machine says about a job now."""

    model_config = ConfigDict(frozen=True)
    state: JobState
    exit_code: int | None = None
    detail: str = ""


class MachineUnavailable(RuntimeError):
    """A machine could not be reached or its scheduler refused: a recorded condition."""


class Machine(Protocol):
    """Runs rounds: submit, poll, read the log incrementally, terminate."""

    @property
    def spec(self) -> MachineSpec:
        """Its registration."""
        ...

    async def submit(self, request: JobRequest) -> JobHandle:
        """Start the round detached (it survives a bot restart); `MachineUnavailable` if not."""
        ...

    async def poll(self, handle: JobHandle) -> JobStatus:
        """Running, exited (with its code), or vanished (gone without an exit code)."""
        ...

    async def read_log(self, handle: JobHandle, offset: int) -> bytes:
        """Output written since byte `offset` (empty when nothing new)."""
        ...

    async def terminate(self, handle: JobHandle, *, grace_seconds: float = 10.0) -> None:
        """SIGTERM (or scancel), then SIGKILL after the grace; a gone job is not an error."""
        ...
