"""Who may run rounds on a machine, and how much of the bot one person may hold (SPEC §12).

A machine's `users` and `roles` (machines.toml) say who may use it; unset, a local machine is
open to everyone the access policy admits and a remote one (ssh, slurm) to admins only. Admins
may use every machine. Limits on one person's campaigns keep a single member from taking every
slot or running unbounded work.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncall.model import MachineSpec

EVERYONE = "*"
DAY_SECONDS = 86400.0


@dataclass(frozen=True)
class Requester:
    """The person asking for work: their id, roles (Discord), and whether they are an admin."""

    id: str
    roles: tuple[str, ...] = ()
    admin: bool = False


@dataclass(frozen=True)
class CampaignLimits:
    """Bounds on what one person's campaigns may take."""

    max_budget_seconds: float = 7 * DAY_SECONDS
    max_active_per_user: int = 5


def machine_refusal(spec: MachineSpec, who: Requester) -> str | None:
    """Why `who` may not run rounds on the machine (naming who may), or None if they may."""
    if who.admin:
        return None
    users = spec.users
    if users is None and not spec.roles:
        if spec.kind == "local":
            return None
        return (
            f"`{spec.name}` is a {spec.kind} machine, open only to admins until machines.toml "
            "says who may use it (`users = [...]` or `roles = [...]` under "
            f"[machines.{spec.name}])."
        )
    if users is not None and (EVERYONE in users or who.id in users):
        return None
    if any(role in spec.roles for role in who.roles):
        return None
    allowed = ", ".join([*(users or ()), *(f"role {r}" for r in spec.roles)]) or "nobody"
    return f"You may not use machine `{spec.name}`: it is open to {allowed} and admins."


def user_slots(spec: MachineSpec) -> int:
    """How many of the machine's slots one person's campaigns may hold at once."""
    if spec.user_slots is not None:
        return min(spec.user_slots, spec.slots)
    return max(1, spec.slots // 2)
