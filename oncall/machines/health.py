"""Whether a machine's scheduler answers, for `doctor`: short timeouts, one line per problem.

Installed client tools say nothing about a cluster: a Slurm machine is usable only when its
controller answers `scontrol ping` (and knows the machine's partition).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from core.secret_names import SecretNames
from oncall.machines.common import round_env, run_client
from oncall.model import MachineUnavailable

PING_SECONDS: Final = 10.0
# What the Slurm clients need to find their cluster (as the Slurm machine runs them).
_SLURM_ENV: Final = ("SLURM_CONF",)


async def slurm_problem(
    environ: Mapping[str, str],
    partition: str | None = None,
    *,
    secret_names: SecretNames,
    seconds: float = PING_SECONDS,
) -> str | None:
    """Why the Slurm controller cannot take rounds (it does not answer, or has no such
    `partition`), or None when it answers. `secret_names`: never passed to the clients."""
    env = round_env(environ, secret_names=secret_names, allow=_SLURM_ENV)
    problem = await _ask(["scontrol", "ping"], env, seconds)
    if problem is not None:
        return (
            f"the Slurm controller does not answer ({problem}); start slurmctld, or point "
            "SLURM_CONF at the cluster's slurm.conf"
        )
    if partition is not None:
        problem = await _ask(["scontrol", "show", "partition", partition], env, seconds)
        if problem is not None:
            return f"partition `{partition}`: {problem}"
    return None


async def _ask(argv: list[str], env: Mapping[str, str], seconds: float) -> str | None:
    """None when the command succeeds, else the line that says why."""
    shown = " ".join(argv)
    try:
        code, out, err = await run_client(
            argv, env=env, seconds=seconds, where=f"`{shown}`", silence="no answer"
        )
    except MachineUnavailable as exc:
        return str(exc)
    if code == 0:
        return None
    return f"`{shown}`: {_reason(out, err) or f'exit {code}'}"


def _reason(out: bytes, err: bytes) -> str:
    """The telling line: stderr's last, else stdout's first line that is not a banner."""
    for text, pick in ((err, -1), (out, 0)):
        lines = [
            line.strip()
            for line in text.decode(errors="replace").splitlines()
            if line.strip().strip("*").strip()
        ]
        if lines:
            return lines[pick][:300]
    return ""
