"""The task file `raven-bot evolve` reads: one JSON object per line,
`{"id", "prompt", "verify": VERIFIER, "split": "train" | "test"}`, where VERIFIER is one of
`{"exact": TEXT}` (the output, stripped, equals it), `{"regex": PATTERN}` (it matches the
output), `{"command": SHELL}` (exit code 0, run in the sandbox on the agent's workspace, no
network) or `{"judge": CRITERION}` (a model call answers PASS or FAIL). The test split is
sealed: scored once at the end and never shown to the proposer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from host.evaluation.maob.formats import EvalFileError, read_lines


class Verifier(BaseModel):
    """Exactly one way of scoring an attempt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exact: str | None = None
    regex: str | None = None
    command: str | None = Field(default=None, min_length=1)
    judge: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> Verifier:
        given = [k for k in ("exact", "regex", "command", "judge") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of exact, regex, command, judge")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex does not compile: {exc}") from None
        return self


class EvolveTask(BaseModel):
    """One task with its verifier and split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.-]+$")
    prompt: str = Field(min_length=1)
    verify: Verifier
    split: Literal["train", "test"] = "train"


def read_evolve_tasks(path: Path) -> list[EvolveTask]:
    """Every task of the file (ids unique; at least two training tasks)."""
    tasks = list(read_lines(path, "task", EvolveTask, command="evolve"))
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise EvalFileError(f"{path}: task ids must be unique")
    if sum(t.split == "train" for t in tasks) < 2:
        raise EvalFileError(f"{path}: evolution needs at least two training tasks")
    return tasks
