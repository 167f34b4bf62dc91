"""Where campaigns run, for the serving bot and a one-shot `raven-bot campaigns run` alike:
the machines of RAVEN_HOME/machines.toml, confined like the agents' sandbox."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agents.sandbox import DetachedSandbox, Sandbox
from core.ids import ConversationRef
from core.secret_names import SecretNames
from oncall.engine import CampaignEngine, Decider, EngineConfig, EngineDeps, EngineSettings
from oncall.machines.registry import Allocator, Confinement, build_machines, load_machines
from oncall.model import Machine, MachineSpec
from oncall.ports import CampaignNotifier, CommandApprovals, OwnerAccess, WakeScheduler
from oncall.store import CampaignStore
from oncall.workdirs import BotPaths


def machine_specs(home: Path, cwd: Path, *, one_shot: bool) -> dict[str, MachineSpec]:
    """RAVEN_HOME/machines.toml (a RuntimeError naming the problem). Blocking: it reads a
    file. `one_shot`: `cwd` is the operator's project (it may itself be a workdir)."""
    try:
        return load_machines(home, cwd, operator_dir=one_shot)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None


@dataclass(frozen=True)
class Wiring:
    """What differs between the bot's engine and a one-shot run's."""

    store: CampaignStore
    scheduler: WakeScheduler
    notifier: CampaignNotifier
    decider: Decider
    # None for `campaigns run`: the operator typed the command, which is the approval.
    approvals: CommandApprovals | None = None
    # None for `campaigns run`: the operator acting directly.
    owners: OwnerAccess | None = None


@dataclass(frozen=True)
class CampaignSite:
    """RAVEN_HOME, the directory the process started in, and how rounds are confined."""

    home: Path
    cwd: Path
    one_shot: bool
    sandbox: Sandbox
    hidden: tuple[Path, ...]
    unsandboxed: bool

    def machine_specs(self) -> dict[str, MachineSpec]:
        return machine_specs(self.home, self.cwd, one_shot=self.one_shot)

    def machines(
        self, specs: Mapping[str, MachineSpec], *, secret_names: SecretNames
    ) -> dict[str, Machine]:
        """Each machine, its rounds detached from this process and confined, given none of
        the variables `secret_names` (the settings') calls secret."""
        return build_machines(
            dict(specs),
            DetachedSandbox(self.sandbox),
            secret_names=secret_names,
            confinement=Confinement(hidden=self.hidden, unsandboxed=self.unsandboxed),
        )

    def engine(
        self,
        specs: Mapping[str, MachineSpec],
        wiring: Wiring,
        settings: EngineSettings,
        *,
        machines: Mapping[str, Machine],
        workspace: Callable[[ConversationRef], Path] | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> CampaignEngine:
        """The campaign engine on these `machines` (of `specs`), one slot allocator over
        them."""
        deps = EngineDeps(
            wiring.store,
            machines,
            Allocator(dict(specs)),
            wiring.scheduler,
            wiring.notifier,
            wiring.decider,
            wiring.approvals,
            wiring.owners,
        )
        config = EngineConfig(
            root=self.home / "campaigns",
            settings=settings,
            workspace=workspace,
            # Never in RAVEN_HOME or the bot's own directory.
            bot_paths=BotPaths.of(self.home, self.cwd, operator_dir=self.one_shot),
        )
        if new_id is not None:
            config = EngineConfig(**{**config.__dict__, "new_id": new_id})
        return CampaignEngine(deps, config)
