"""Registered machines (`RAVEN_HOME/machines.toml`), building them, and sharing their slots.

    [machines.local]
    kind = "local"
    slots = 2
    workdir = "/srv/projects/toy"      # where commands run (else the conversation's workspace)
    mounts = ["/data/imagenet"]        # read-only extras a round may see

    [machines.gpu]
    kind = "ssh"
    host = "gpu1.example.org"
    user = "train"
    workdir = "/scratch/project"      # where commands run on that host
    ssh_options = ["IdentityFile=~/.ssh/raven"]
    users = ["U0123", "U0456"]   # remote machines are for admins only unless they say who
    approvers = ["U0999"]        # whose approval every command here also needs

    [machines.cluster]
    kind = "slurm"
    partition = "gpu"
    workdir = "/shared/project"   # where commands run; shared with the compute nodes
    slots = 8

Without the file there is one machine, `local`, with 2 slots, open to everyone the access
policy admits. `user_slots` caps the slots one person's campaigns hold (default: half).
A `workdir` or mount may not be, contain or lie inside RAVEN_HOME, nor be or contain the bot's
working directory (see oncall/workdirs.py).
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from core.errors import FieldError, describe_validation_error
from core.secret_names import SecretNames
from oncall.machines.local import CommandWrapper, LocalMachine
from oncall.machines.slurm import SlurmMachine
from oncall.machines.ssh import SshMachine
from oncall.model import Machine, MachineSpec
from oncall.workdirs import BotPaths

FILE_NAME: Final = "machines.toml"
DEFAULT_LOCAL_SLOTS: Final = 2
# The fields each kind uses; any other field set for it is a mistake worth naming.
# Who may use a machine (users, roles, approvers, user_slots) applies to every kind.
_ACCESS_FIELDS: Final = frozenset({"users", "roles", "approvers", "user_slots", "mounts"})
_KIND_FIELDS: Final = {
    "local": frozenset({"name", "kind", "slots", "workdir"}) | _ACCESS_FIELDS,
    "ssh": frozenset({"name", "kind", "slots", "host", "user", "port", "workdir", "ssh_options"})
    | _ACCESS_FIELDS,
    "slurm": frozenset({"name", "kind", "slots", "workdir", "partition"}) | _ACCESS_FIELDS,
}
# How to fix a bad value, per field (after pydantic's own words).
_HINTS: Final = {
    "name": "use letters, digits, '.', '_' or '-' in the table name, e.g. [machines.gpu-1]",
    "kind": 'set kind = "local", "ssh" or "slurm"',
    "slots": "set slots to a whole number from 1 to 4096, e.g. slots = 2",
    "port": "set port to a number from 1 to 65535, e.g. port = 22",
    "host": 'set host to the ssh host name, e.g. host = "gpu1.example.org"',
    "workdir": 'set workdir to the directory commands run in, e.g. workdir = "/srv/project"',
    "mounts": 'list absolute directories a round may read, e.g. mounts = ["/data/x"]',
    "ssh_options": 'write ssh -o options as a list of "Key=Value", e.g. ["IdentityFile=~/.ssh/k"]',
    "users": 'list the user ids who may run rounds here, e.g. users = ["U0123"] ("*": everyone)',
    "roles": 'list the role ids whose members may run rounds here, e.g. roles = ["1234"]',
    "approvers": 'list the user ids who must also approve commands here, e.g. approvers = ["U9"]',
    "user_slots": "set user_slots to how many slots one person may hold, e.g. user_slots = 1",
}
Clock = Callable[[], float]


class MachinesConfigError(ValueError):
    """machines.toml is invalid; the message names the file, the machine and the field."""


def default_machines() -> dict[str, MachineSpec]:
    """The machines without a machines.toml: this host, 2 slots."""
    return {"local": MachineSpec(name="local", kind="local", slots=DEFAULT_LOCAL_SLOTS)}


def load_machines(
    home: Path, bot_dir: Path | None = None, *, operator_dir: bool = False
) -> dict[str, MachineSpec]:
    """The machines registered in `home/machines.toml` (the default `local` if it is missing).

    Workdirs and mounts are checked against `home` and `bot_dir` (default: the current
    directory; `operator_dir`: a one-shot command's, which may itself be a workdir).
    Blocking (reads a file): call it at startup or in a thread.
    """
    path = home / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return default_machines()
    except OSError as exc:
        raise MachinesConfigError(f"{path}: cannot read the file: {exc}") from exc
    return parse_machines(
        text, label=str(path), paths=BotPaths.of(home, bot_dir, operator_dir=operator_dir)
    )


def parse_machines(
    text: str, *, label: str, paths: BotPaths | None = None
) -> dict[str, MachineSpec]:
    """MachineSpecs from machines.toml text; errors start with `label` (the file).

    With `paths`, a workdir or mount inside the bot's own files is refused."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MachinesConfigError(f"{label}: invalid TOML: {exc}") from exc
    extra = sorted(set(raw) - {"machines"})
    if extra:
        raise MachinesConfigError(
            f"{label}: unknown top-level key(s) {', '.join(extra)}: "
            "each machine is a [machines.NAME] table"
        )
    tables = raw.get("machines", {})
    if not isinstance(tables, dict) or not tables:
        raise MachinesConfigError(
            f"{label}: no machines: add at least one [machines.NAME] table, e.g. "
            '[machines.local] with kind = "local"'
        )
    problems: list[str] = []
    specs: dict[str, MachineSpec] = {}
    for name, table in tables.items():
        try:
            specs[name] = _machine(name, table, paths)
        except MachinesConfigError as exc:
            problems.append(f"{label}: [machines.{name}] {exc}")
    if problems:
        raise MachinesConfigError("\n".join(problems))
    return specs


def _machine(name: str, table: Any, paths: BotPaths | None = None) -> MachineSpec:
    """One [machines.NAME] table as a spec; `MachinesConfigError` (without the file) if bad."""
    if not isinstance(table, dict):
        raise MachinesConfigError('must be a table with at least kind = "local", "ssh" or "slurm"')
    if "name" in table and table["name"] != name:
        raise MachinesConfigError("name: the table name is the machine's name; drop `name`")
    try:
        context = {"bot_paths": paths} if paths is not None else None
        spec = MachineSpec.model_validate({**table, "name": name}, context=context)
    except ValidationError as exc:
        raise MachinesConfigError("; ".join(_describe(exc))) from None
    _check_kind(spec, set(table))
    return spec


def _describe(exc: ValidationError) -> list[str]:
    """pydantic's errors as `field: what is wrong (how to fix it)`; errors about the whole
    machine (workdir and mounts) without a field: their message names it."""
    rules = {"extra_forbidden": _not_a_field}
    return describe_validation_error(exc, label=_field, rules=rules, hints=_HINTS)


def _field(err: FieldError) -> str:
    return str(err.loc[0]) if err.loc else ""


def _not_a_field(err: FieldError) -> str:
    known = ", ".join(sorted(MachineSpec.model_fields))
    return f"{_field(err)}: not a machine field (known fields: {known})"


def _check_kind(spec: MachineSpec, given: set[str]) -> None:
    """What pydantic cannot see: fields a kind needs, or does not use."""
    unused = sorted(given - _KIND_FIELDS[spec.kind])
    if unused:
        raise MachinesConfigError(
            f"{', '.join(unused)}: not used by a {spec.kind} machine; remove it"
        )
    if spec.kind != "ssh":
        return
    if not spec.host or spec.host.startswith("-"):
        raise MachinesConfigError(f"host: an ssh machine needs one ({_HINTS['host']})")
    bad = [option for option in spec.ssh_options if "=" not in option or option.startswith("-")]
    if bad:
        raise MachinesConfigError(
            f"ssh_options: {bad[0]!r} is not Key=Value ({_HINTS['ssh_options']})"
        )


@dataclass(frozen=True)
class Confinement:
    """What remote rounds must not see, and whether a node without bubblewrap may run one."""

    hidden: tuple[Path, ...] = ()  # RAVEN_HOME and the bot's working directory
    unsandboxed: bool = False  # RAVEN_UNSANDBOXED: run on a Slurm node without bubblewrap


def build_machine(
    spec: MachineSpec,
    wrapper: CommandWrapper,
    *,
    secret_names: SecretNames,
    clock: Clock = time.time,
    confinement: Confinement | None = None,
) -> Machine:
    """The machine for `spec`; local rounds run inside `wrapper` (the sandbox, detached),
    remote ones confined as `confinement` says (default: from the process environment).
    `secret_names`: the settings' secret names, which no round or client command gets."""
    hidden = confinement.hidden if confinement is not None else None
    machine: Machine
    if spec.kind == "local":
        machine = LocalMachine(spec, wrapper, secret_names=secret_names, clock=clock)
    elif spec.kind == "ssh":
        machine = SshMachine(spec, secret_names=secret_names, clock=clock, hidden=hidden)
    else:
        unsandboxed = confinement.unsandboxed if confinement is not None else None
        machine = SlurmMachine(
            spec,
            secret_names=secret_names,
            clock=clock,
            hidden=hidden,
            unsandboxed=unsandboxed,
        )
    return machine


def build_machines(
    specs: Mapping[str, MachineSpec],
    wrapper: CommandWrapper,
    *,
    secret_names: SecretNames,
    clock: Clock = time.time,
    confinement: Confinement | None = None,
) -> dict[str, Machine]:
    """Every registered machine, by name."""
    return {
        name: build_machine(
            spec, wrapper, secret_names=secret_names, clock=clock, confinement=confinement
        )
        for name, spec in specs.items()
    }


class Allocator:
    """Capacity slots per machine, shared across campaigns; one slot per campaign and machine.

    In memory only: the campaign store persists who holds what and calls `restore` at startup.
    """

    def __init__(self, machines: Mapping[str, MachineSpec]) -> None:
        self._slots = {name: spec.slots for name, spec in machines.items()}
        self._held: dict[str, set[str]] = {name: set() for name in machines}

    async def acquire(self, machine: str, campaign_id: str) -> bool:
        """Take a slot on `machine` for the campaign without waiting; False when all are taken.

        A campaign that already holds one keeps it (True). `KeyError` for an unknown machine.
        """
        if machine not in self._slots:
            known = ", ".join(sorted(self._slots)) or "none"
            raise KeyError(f"unknown machine {machine!r} (registered: {known})")
        holders = self._held[machine]
        if campaign_id in holders:
            return True
        if len(holders) >= self._slots[machine]:
            return False
        holders.add(campaign_id)
        return True

    async def release(self, machine: str, campaign_id: str) -> None:
        """Give the campaign's slot on `machine` back (nothing if it holds none)."""
        self._held.get(machine, set()).discard(campaign_id)

    def restore(self, held: Iterable[tuple[str, str]]) -> None:
        """Re-take slots held before a restart, as (machine, campaign id) pairs.

        Kept even beyond capacity (those rounds are running) or on a machine no longer
        registered (so their release still works); new acquires wait for free slots.
        """
        for machine, campaign_id in held:
            self._held.setdefault(machine, set()).add(campaign_id)

    def holders(self, machine: str) -> frozenset[str]:
        """The campaigns holding a slot on `machine`."""
        return frozenset(self._held.get(machine, ()))

    def free(self, machine: str) -> int:
        """Slots on `machine` nobody holds (0 for an unknown machine)."""
        return max(0, self._slots.get(machine, 0) - len(self._held.get(machine, ())))
