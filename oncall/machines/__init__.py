"""Machines that run oncall rounds: local (sandboxed), ssh hosts, and Slurm clusters.

`registry` loads `RAVEN_HOME/machines.toml`, builds each `Machine` and shares their capacity
slots across campaigns (`Allocator`).
"""

from oncall.machines.local import CommandWrapper, LocalMachine
from oncall.machines.registry import (
    Allocator,
    MachinesConfigError,
    build_machine,
    build_machines,
    default_machines,
    load_machines,
)
from oncall.machines.slurm import SlurmMachine
from oncall.machines.ssh import SshMachine

__all__ = [
    "Allocator",
    "CommandWrapper",
    "LocalMachine",
    "MachinesConfigError",
    "SlurmMachine",
    "SshMachine",
    "build_machine",
    "build_machines",
    "default_machines",
    "load_machines",
]
