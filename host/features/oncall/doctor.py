"""`doctor`'s `machines` line: the campaign machines of RAVEN_HOME/machines.toml, whether
their client tools are installed, and whether a Slurm cluster's controller answers."""

from __future__ import annotations

import shutil

from host.features.feature import DoctorCheck, DoctorParts
from oncall.machines.health import slurm_problem
from oncall.machines.registry import load_machines

# The client programs each kind of machine runs on this host.
CLIENT_TOOLS = {"ssh": ("ssh",), "slurm": ("sbatch", "squeue", "scontrol", "scancel")}


async def check_machines(parts: DoctorParts) -> DoctorCheck:
    """Each machine with its kind and slots; a warning names what is missing or silent."""
    try:
        specs = load_machines(parts.home)
    except ValueError as exc:
        return DoctorCheck("machines", "fail", str(exc).replace("\n", "; "))
    shown, missing, problems = [], [], []
    for spec in specs.values():
        shown.append(f"{spec.name} ({spec.kind}, {spec.slots} slot(s))")
        absent = [t for t in CLIENT_TOOLS.get(spec.kind, ()) if shutil.which(t) is None]
        missing += absent
        if spec.kind == "slurm" and not absent:
            # Installed clients say nothing of the cluster: its controller must answer.
            problem = await slurm_problem(
                parts.environ, spec.partition, secret_names=parts.secret_names
            )
            if problem is not None:
                problems.append(f"{spec.name}: {problem}")
    detail = ", ".join(shown)
    if missing:
        problems.append(f"not installed: {', '.join(sorted(set(missing)))}")
    if problems:
        return DoctorCheck("machines", "warn", f"{detail}; {'; '.join(problems)}")
    return DoctorCheck("machines", "ok", detail)
