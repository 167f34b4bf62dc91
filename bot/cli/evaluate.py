"""`raven-bot eval plans|score`: the Host's planning measured against reference graphs
(MAOB, `host.evaluation.maob`). Reports go to stdout, progress to stderr."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from bot.settings import Settings
from host.evaluation.maob.formats import (
    DOMAINS,
    EvalFileError,
    EvalTask,
    Prediction,
    read_predictions,
    read_tasks,
)
from host.evaluation.maob.planner import DEFAULT_DOMAINS, PlanAttempt, Planner
from host.evaluation.maob.scoring import METRICS, Report, score_predictions

STANDIN_TASKS = "standin_tasks.jsonl"


def eval_command(
    args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """`eval plans` or `eval score`: 0 when done, 2 for bad input or no model."""
    try:
        tasks = read_tasks(args.tasks or _standin())
        if args.eval_command == "score":
            report = score_predictions(tasks, read_predictions(args.predictions))
            _print(report, [], out, as_json=args.json)
            return 0
        domains = _domains(args.domain)
        if args.attempts < 1:
            raise EvalFileError("--attempts must be 1 or more")
    except EvalFileError as exc:
        err.write(f"raven-bot eval: {exc}\n")
        return 2
    if settings.offline:
        err.write(
            "raven-bot eval plans needs a model: none is configured (offline mode), and plans "
            "are never faked. Set ANTHROPIC_API_KEY, or an `openai:` RAVEN_MODEL with "
            "OPENAI_API_KEY or a server URL; or score existing predictions with "
            "`raven-bot eval score`.\n"
        )
        return 2
    attempts = asyncio.run(_plan(settings, tasks, domains, args.attempts, err))
    if args.predictions is not None:
        lines = "".join(json.dumps(a.prediction()) + "\n" for a in attempts)
        args.predictions.write_text(lines, encoding="utf-8")
    report = score_predictions(tasks, _as_predictions(attempts))
    _print(report, attempts, out, as_json=args.json)
    return 0


def _standin() -> Path:
    return Path(str(resources.files("host.evaluation.maob").joinpath(STANDIN_TASKS)))


def _domains(pairs: list[str]) -> dict[str, str]:
    domains = dict(DEFAULT_DOMAINS)
    for pair in pairs:
        agent, sep, domain = pair.partition("=")
        if not sep or not agent or domain not in DOMAINS:
            raise EvalFileError(
                f"--domain {pair!r}: write AGENT=DOMAIN with DOMAIN one of {', '.join(DOMAINS)}"
            )
        domains[agent] = domain
    return domains


async def _plan(
    settings: Settings, tasks: list[EvalTask], domains: dict[str, str], attempts: int, err: TextIO
) -> list[PlanAttempt]:
    from bot.app import build_provider, close_provider, load_agents

    provider = build_provider(settings)
    planner = Planner(provider, load_agents(settings), domains=domains)
    done: list[PlanAttempt] = []
    try:
        total = len(tasks) * attempts
        for task in tasks:
            for attempt in range(attempts):
                result = await planner.plan(task, attempt)
                done.append(result)
                err.write(
                    f"[{len(done)}/{total}] {task.id} #{attempt}: {result.outcome}, "
                    f"{len(result.graph.nodes)} node(s), {result.calls} call(s), "
                    f"{result.seconds:.1f} s"
                    + (f" ({result.error})" if result.error else "")
                    + "\n"
                )
                err.flush()
    finally:
        await close_provider(provider)
    return done


def _as_predictions(attempts: list[PlanAttempt]) -> list[Prediction]:
    return [Prediction.model_validate(a.prediction()) for a in attempts]


def _print(report: Report, attempts: list[PlanAttempt], out: TextIO, *, as_json: bool) -> None:
    cost = {(a.task_id, a.attempt): a for a in attempts}
    if as_json:
        data = report.as_json()
        for row in data["tasks"]:
            spent = cost.get((row["id"], row["attempt"]))
            if spent is not None:
                row.update(_spent(spent))
        if attempts:
            data["accounting"] = _accounting(attempts)
        out.write(json.dumps(data, indent=2) + "\n")
        return
    header = f"{'task':<24} {'#':>2} {'node':>5} {'edge':>5} {'poa':>5} {'EM':>3}"
    if attempts:
        header += f" {'calls':>5} {'tokens':>7} {'s':>6}"
    out.write(header + "\n")
    for record in report.records:
        s = record.scores
        line = (
            f"{record.task_id[:24]:<24} {record.attempt:>2} {_num(s.node_f1)} {_num(s.edge_f1)} "
            f"{_num(s.poa)} {_em(s.exact_match)}"
        )
        spent = cost.get((record.task_id, record.attempt))
        if spent is not None:
            tokens = spent.input_tokens + spent.output_tokens
            line += f" {spent.calls:>5} {tokens:>7} {spent.seconds:>6.1f}"
        notes = [
            n
            for n, on in (
                ("cyclic", record.cyclic),
                ("projection conflict", record.projection_conflict),
                ("not counted: reference has < 2 domains", not record.counted),
                (f"accepted variant {record.variant}", record.variant > 0),
            )
            if on
        ]
        out.write(line + (f"  ({'; '.join(notes)})" if notes else "") + "\n")
    means = "  ".join(
        f"{metric} {_num(report.mean[metric]).strip()} (n={report.defined[metric]})"
        for metric in METRICS
    )
    out.write(f"\nmean over records whose reference has 2+ domains: {means}\n")
    if attempts:
        acc = _accounting(attempts)
        out.write(
            f"model calls {acc['calls']}, tokens {acc['input_tokens']} in / "
            f"{acc['output_tokens']} out, latency per task mean {acc['seconds_mean']:.1f} s "
            f"(max {acc['seconds_max']:.1f} s); {acc['submitted']} of {len(attempts)} turns "
            "submitted a plan\n"
        )


def _spent(attempt: PlanAttempt) -> dict[str, Any]:
    return {
        "outcome": attempt.outcome,
        "calls": attempt.calls,
        "input_tokens": attempt.input_tokens,
        "output_tokens": attempt.output_tokens,
        "seconds": round(attempt.seconds, 3),
        "rejected_submissions": attempt.rejected,
        "error": attempt.error,
    }


def _accounting(attempts: list[PlanAttempt]) -> dict[str, Any]:
    seconds = [a.seconds for a in attempts]
    return {
        "calls": sum(a.calls for a in attempts),
        "input_tokens": sum(a.input_tokens for a in attempts),
        "output_tokens": sum(a.output_tokens for a in attempts),
        "seconds_mean": statistics.fmean(seconds),
        "seconds_max": max(seconds),
        "submitted": sum(1 for a in attempts if a.outcome == "submitted"),
    }


def _num(value: float | None) -> str:
    return "    -" if value is None else f"{value:5.3f}"


def _em(value: bool | None) -> str:
    return "  -" if value is None else (" ✓" if value else " ✗").rjust(3)
