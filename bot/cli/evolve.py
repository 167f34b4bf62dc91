"""`raven-bot evolve AGENT --tasks FILE` and `raven-bot harness list|show|diff|promote|
rollback`: a specialist's harness improved from evidence (`host.evaluation.evolution`),
stored as a new version that runs only once an admin promotes it.

The same command again continues the same run (its id comes from the agent, the task file
and the settings): finished attempts are read back from raven.db, never redone.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import sys
from dataclasses import asdict
from typing import Any, TextIO

from bot.cli.database import open_database
from bot.home import HomeError
from bot.settings import Settings, declared_secret_names
from host.evaluation.evolution.harness import Harness
from host.evaluation.evolution.search import EvolutionResult, EvolveSettings
from host.evaluation.evolution.session import evolve_agent
from host.evaluation.evolution.tasks import EvolveTask, read_evolve_tasks
from host.evaluation.evolution.versions import (
    HarnessVersions,
    VersionError,
    diff,
)
from host.evaluation.maob.formats import EvalFileError

OPERATOR = "cli:local"


def evolve_command(
    args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Run (or continue) one evolution; 0 when done, 2 for bad input or no model."""
    try:
        tasks = read_evolve_tasks(args.tasks)
    except EvalFileError as exc:
        err.write(f"raven-bot evolve: {exc}\n")
        return 2
    train = [t.id for t in tasks if t.split == "train"]
    evolve = EvolveSettings(
        rounds=args.rounds,
        candidates=args.candidates,
        subset=args.subset if args.subset is not None else min(4, len(train)),
        keep=args.keep,
        patience=args.patience,
        attempts=args.attempts,
    )
    problem = evolve.problem(len(train))
    if problem is not None:
        err.write(f"raven-bot evolve: {problem}\n")
        return 2
    try:
        return asyncio.run(_evolve(args, settings, evolve, tasks, out, err))
    except (HomeError, RuntimeError) as exc:
        err.write(f"raven-bot evolve: {exc}\n")
        return 2


async def _evolve(
    args: argparse.Namespace,
    settings: Settings,
    evolve: EvolveSettings,
    tasks: list[EvolveTask],
    out: TextIO,
    err: TextIO,
) -> int:
    from bot.app import build_sandbox, load_agents
    from bot.models import build_role_models

    registry = load_agents(settings)
    entry = registry.get(args.agent)
    if entry is None or entry.backend != "inproc":
        raise RuntimeError(
            f"`{args.agent}` is not an in-process specialist; evolve one of: "
            + ", ".join(e.name for e in registry.entries() if e.backend == "inproc")
        )
    # The agent runs on its own model (agents.toml `model`, else RAVEN_MODEL), the proposer
    # on RAVEN_MODEL_PROPOSER (else RAVEN_MODEL).
    models = build_role_models(settings, registry)
    offline = [
        name
        for name, model in (
            (f"`{entry.name}`'s model", models.for_agent(entry)),
            ("the proposer's model (RAVEN_MODEL_PROPOSER, else RAVEN_MODEL)", models.proposer),
        )
        if model.offline
    ]
    if offline:
        await models.aclose()
        lack = "have" if offline[1:] else "has"
        raise RuntimeError(
            f"evolving needs a model: {' and '.join(offline)} {lack} no key for its API "
            "(offline mode), and scores are never faked. Set ANTHROPIC_API_KEY, or an "
            "`openai:` model with OPENAI_API_KEY or a server URL."
        )
    run_id = _run_id(args.agent, args.tasks.read_bytes(), evolve)
    try:
        async with open_database(settings.home) as store:
            err.write(f"evolve run {run_id} (the same command continues it)\n")
            result, version = await evolve_agent(
                store=store,
                provider=models.for_agent(entry),
                proposer=models.proposer,
                sandbox=build_sandbox(settings),
                secret_names=declared_secret_names(),
                entry=entry,
                tasks=tasks,
                run_id=run_id,
                settings=evolve,
                caps=(settings.max_iterations, settings.max_tokens),
                workspaces=settings.home / "evolve" / run_id,
                progress=functools.partial(_say, err),
            )
    finally:
        await models.aclose()
    _report(result, version, args.agent, out, as_json=args.json)
    return 0


async def _say(err: TextIO, line: str) -> None:
    print(line, file=err, flush=True)


def _run_id(agent: str, tasks: bytes, evolve: EvolveSettings) -> str:
    raw = json.dumps([agent, hashlib.sha256(tasks).hexdigest(), asdict(evolve)]).encode()
    return f"{agent}-{hashlib.sha256(raw).hexdigest()[:10]}"


def _report(
    result: EvolutionResult, version: int | None, agent: str, out: TextIO, *, as_json: bool
) -> None:
    if as_json:
        out.write(json.dumps({**result.as_json(), "version": version}, indent=2) + "\n")
        return
    out.write(
        f"selected {result.selected}"
        + (f" ({result.selected_cell})" if result.selected_cell else " (the starting harness)")
        + f" after {result.rounds} round(s)\n"
        f"training Util {result.train_before:.3f} → {result.train_after:.3f}\n"
    )
    if result.test_before is not None and result.test_after is not None:
        out.write(f"held-out Util {result.test_before:.3f} → {result.test_after:.3f}\n")
    out.write(
        f"scored attempts {result.attempts_used} of the bound {result.attempts_bound} "
        f"(+{result.test_attempts} on the test split)\n"
    )
    if version is not None:
        out.write(
            f"stored as {agent} harness version {version}; it runs only once an admin "
            f"promotes it: raven-bot harness promote {agent} {version}\n"
        )


def harness_command(
    args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """`harness list|show|diff|promote|rollback`; 2 for an unknown version."""
    try:
        return asyncio.run(_harness(args, settings, out))
    except (VersionError, HomeError) as exc:
        err.write(f"raven-bot harness: {exc}\n")
        return 2


async def _harness(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    async with open_database(settings.home) as store:
        versions = HarnessVersions(store)
        action = args.harness_command
        if action == "list":
            rows = await versions.list(args.agent)
            if not rows:
                out.write("no evolved harness versions; every agent runs its built-in one\n")
            for v in rows:
                r = v.result
                out.write(
                    f"{v.agent} v{v.version}  {v.state:<8}  train {_num(r.get('train_before'))}"
                    f"→{_num(r.get('train_after'))}  test {_num(r.get('test_before'))}"
                    f"→{_num(r.get('test_after'))}  {r.get('selected_cell') or ''}\n"
                )
        elif action == "show":
            shown = await _shown(versions, settings, args.agent, args.version)
            out.write(json.dumps(shown, indent=2) + "\n")
        elif action == "diff":
            old = await _spec(versions, settings, args.agent, args.old)
            new = await _spec(versions, settings, args.agent, args.new)
            out.write(
                diff(old, new, f"{args.agent} v{args.old}", f"{args.agent} v{args.new}") + "\n"
            )
        elif action == "promote":
            replaced = await versions.promote(args.agent, args.version, OPERATOR)
            was = f"v{replaced.version}" if replaced else "the built-in harness"
            out.write(
                f"{args.agent} now runs harness v{args.version} (it replaced {was}); a running "
                "bot picks it up at its next start\n"
            )
        else:
            back = await versions.rollback(args.agent, OPERATOR)
            now = f"v{back}" if back is not None else "its built-in harness"
            out.write(f"{args.agent} runs {now} again (from the next start)\n")
    return 0


async def _shown(
    versions: HarnessVersions, settings: Settings, agent: str, version: int
) -> dict[str, Any]:
    """One version as JSON; version 0 is the built-in harness (as `diff` takes it), active
    while no evolved version is."""
    if version == 0:
        builtin = await _spec(versions, settings, agent, 0)
        running = agent not in await versions.active()
        return {
            "agent": agent,
            "version": 0,
            "state": "active" if running else "inactive",
            "lineage": [],
            "result": {},
            "harness": builtin.model_dump(mode="json"),
        }
    v = await versions.get(agent, version)
    return {
        "agent": v.agent,
        "version": v.version,
        "state": v.state,
        "lineage": v.lineage,
        "result": v.result,
        "harness": v.spec.model_dump(mode="json"),
    }


async def _spec(versions: HarnessVersions, settings: Settings, agent: str, version: int) -> Harness:
    if version != 0:
        return (await versions.get(agent, version)).spec
    from bot.app import build_sandbox, load_agents
    from host.evaluation.evolution.runtime import builtin_harness, specialist_for

    entry = load_agents(settings).get(agent)
    if entry is None:
        raise VersionError(f"no agent {agent!r} in the registry")
    specialist = specialist_for(
        entry.role, build_sandbox(settings), secret_names=declared_secret_names()
    )
    return builtin_harness(specialist, settings.max_iterations, settings.max_tokens)


def _num(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "-"
