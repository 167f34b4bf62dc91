"""One evolution of one agent, assembled: its built-in (or promoted) harness as h0, the
specialist evaluator, the model proposer, the loop, and the winner stored as a version.
The CLI and the chat command both run this."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from agents.models.provider import ModelProvider
from agents.registry import AgentEntry
from agents.sandbox import Sandbox
from core.secret_names import SecretNames
from core.store import Store
from host.evaluation.evolution.proposer import ModelProposer
from host.evaluation.evolution.runtime import builtin_harness, specialist_for
from host.evaluation.evolution.search import Evolution, EvolutionResult, EvolveSettings
from host.evaluation.evolution.specialist import SpecialistEvaluator
from host.evaluation.evolution.store import EvolutionStore
from host.evaluation.evolution.tasks import EvolveTask
from host.evaluation.evolution.versions import HarnessVersions, store_selected


async def evolve_agent(
    *,
    store: Store,
    provider: ModelProvider,
    sandbox: Sandbox,
    secret_names: SecretNames,
    entry: AgentEntry,
    tasks: Sequence[EvolveTask],
    run_id: str,
    settings: EvolveSettings,
    caps: tuple[int, int],
    workspaces: Path,
    progress: Callable[[str], Awaitable[None]] | None = None,
    proposer: ModelProvider | None = None,
) -> tuple[EvolutionResult, int | None]:
    """Run (or continue) `run_id`; its result and the version it stored (None: h0 won).
    `caps`: the configured (max_iterations, max_tokens) of the built-in harness;
    `secret_names`: the settings', withheld from every command the specialist runs;
    `provider`: the agent's model; `proposer`: the proposer's (None: the agent's)."""
    specialist = specialist_for(entry.role, sandbox, secret_names=secret_names)
    builtin = builtin_harness(specialist, *caps)
    start = (await HarnessVersions(store).active()).get(entry.name, builtin)
    evaluator = SpecialistEvaluator(
        provider, entry, specialist, start, {t.id: t for t in tasks}, workspaces, sandbox
    )
    records = EvolutionStore(store)
    result = await Evolution(
        records, evaluator, ModelProposer(proposer or provider), settings, progress=progress
    ).run(
        run_id,
        entry.name,
        start,
        [t.id for t in tasks if t.split == "train"],
        [t.id for t in tasks if t.split == "test"],
    )
    return result, await store_selected(store, records, entry.name, result)
