"""The files `raven-bot eval` reads, validated line by line (pydantic), with errors that
name the file, the line and what to fix.

Task lines: `{"id", "request", "reference": GRAPH, "accepted": [GRAPH, ...]}` ("accepted"
optional); prediction lines: `{"id", "nodes": [...], "edges": [...]}`; GRAPH is
`{"nodes": [{"id", "domain"}], "edges": [[src, dst], ...]}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DOMAINS = ("research", "coding", "content", "oncall")
_Line = TypeVar("_Line", bound=BaseModel)


class EvalFileError(ValueError):
    """A task or prediction file that cannot be read; the message says where and why."""


class PlanNode(BaseModel):
    """One invocation of a plan: its id and the domain it maps to (any text: only the four
    domains count when scoring)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    domain: str | None = None


class PlanGraph(BaseModel):
    """A plan's invocations and dependencies (`[src, dst]`: dst waits for src)."""

    model_config = ConfigDict(extra="allow")

    nodes: list[PlanNode] = Field(default_factory=list)
    edges: list[tuple[str, str]] = Field(default_factory=list)


class Prediction(PlanGraph):
    """One prediction line: a task id and the graph a system proposed for it."""

    id: str = Field(min_length=1)


class EvalTask(BaseModel):
    """One task: the request, its reference graph and the alternatives also accepted."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    request: str = Field(min_length=1)
    reference: PlanGraph
    accepted: list[PlanGraph] = Field(default_factory=list)

    @field_validator("reference", "accepted")
    @classmethod
    def _well_formed(cls, value: PlanGraph | list[PlanGraph]) -> PlanGraph | list[PlanGraph]:
        from host.evaluation.maob.scoring import reference_problem

        for graph in value if isinstance(value, list) else [value]:
            problem = reference_problem(graph)
            if problem is not None:
                raise ValueError(problem)
        return value


def read_tasks(path: Path) -> list[EvalTask]:
    """Every task of a task file (ids unique)."""
    tasks = list(read_lines(path, "task", EvalTask))
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise EvalFileError(f"{path}: task id {task.id!r} appears twice; ids must be unique")
        seen.add(task.id)
    if not tasks:
        raise EvalFileError(f"{path}: no tasks (one JSON object per line)")
    return tasks


def read_predictions(path: Path) -> list[Prediction]:
    """Every prediction line, in file order (a repeated id is another attempt)."""
    return list(read_lines(path, "prediction", Prediction))


def read_lines(
    path: Path, what: str, model: type[_Line], *, command: str = "eval"
) -> Iterator[_Line]:
    """Each non-blank line of a JSON Lines file as `model`; errors name the file, the line,
    the field and where the format is described (`raven-bot COMMAND --help`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalFileError(f"cannot read the {what} file {path}: {exc}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            parsed = model.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise EvalFileError(
                f"{path}:{number}: not JSON ({exc.msg}); write one {what} object per line"
            ) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the line"
            raise EvalFileError(
                f"{path}:{number}: {where}: {first['msg']} (see `raven-bot {command} --help` "
                f"for the {what} format)"
            ) from None
        yield parsed
