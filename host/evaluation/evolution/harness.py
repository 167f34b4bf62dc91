"""A harness's editable parts θ, the patches that change them, and what makes a patch invalid.

θ is the specialist's prompt, its knowledge (default skills or notes given with every task),
runtime values (iteration caps, context budgets) and config values. The kernel (the agent
loop, its tools, the sandbox and the evaluator) is not part of θ: a patch naming it is
invalid, as is one whose edits do not belong to the category of the cell it declares.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EditKind = Literal["prompt", "knowledge", "runtime", "config"]
EDIT_KINDS: tuple[EditKind, ...] = ("prompt", "knowledge", "runtime", "config")
# The protected kernel: named so a patch that reaches for it is refused by name.
KERNEL_PARTS = ("loop", "tools", "sandbox", "evaluator")
# Runtime values a patch may set, with the range each may take.
RUNTIME_LIMITS: dict[str, tuple[float, float]] = {
    "max_iterations": (1, 200),
    "max_tokens": (256, 64_000),
}
Value = int | float | str | bool


class Harness(BaseModel):
    """One complete harness (θ)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    knowledge: tuple[str, ...] = ()
    runtime: dict[str, Value] = Field(default_factory=dict)
    config: dict[str, Value] = Field(default_factory=dict)

    def digest(self) -> str:
        """A short content hash (two harnesses with the same θ share it)."""
        raw = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:12]


@dataclass(frozen=True)
class Rendered:
    """A harness applied to one task: the system prompt, the task message and the events
    that show which of its parts beyond h0 were injected (what activation predicates read)."""

    system: str
    message: str
    events: frozenset[str]


def render(harness: Harness, base: Harness, task: str) -> Rendered:
    """`harness` for `task`: its prompt (and config block) as the system prompt; its knowledge
    notes whose `WHEN word, word:` condition the task meets (or that have none) before the
    task. Events: `prompt:appended` when the prompt differs from h0's, `knowledge:<note>` per
    injected note, `config:<key>` per config value differing from h0's."""
    events: set[str] = set()
    system = harness.prompt
    if harness.prompt != base.prompt:
        events.add("prompt:appended")
    if harness.config:
        lines = [f"- {key}: {value}" for key, value in sorted(harness.config.items())]
        system = f"{system}\n\n## Settings\n" + "\n".join(lines)
        events.update(
            f"config:{key}"
            for key, value in harness.config.items()
            if base.config.get(key) != value
        )
    notes = [note for note in harness.knowledge if _applies(note, task)]
    events.update(f"knowledge:{note}" for note in notes)
    message = task
    if notes:
        block = "\n".join(f"- {_note_text(note)}" for note in notes)
        message = f"Notes for this task:\n{block}\n\n{task}"
    return Rendered(system, message, frozenset(events))


def _applies(note: str, task: str) -> bool:
    match = _WHEN.match(note)
    if match is None:
        return True
    words = [w.strip().lower() for w in match.group(1).split(",") if w.strip()]
    return any(word in task.lower() for word in words)


def _note_text(note: str) -> str:
    match = _WHEN.match(note)
    return note[match.end() :].strip() if match else note


_WHEN = re.compile(r"^WHEN ([^:]+):")


class Edit(BaseModel):
    """One change: `part` names what it edits (a kernel part makes the patch invalid)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    part: str
    op: Literal["append", "replace", "add", "remove", "set"]
    key: str = ""  # runtime/config: the value's name; prompt `replace`: the text replaced
    value: Value = ""


class Proposal(BaseModel):
    """A patch with its declared cell (edit kind × failure label) and activation event, all
    fixed before the candidate is evaluated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EditKind
    failure: str = Field(min_length=1, max_length=120)
    edits: tuple[Edit, ...] = Field(min_length=1)
    activation: str = Field(min_length=1, description="the recorded event that shows it ran")
    description: str = ""
    donors: tuple[str, ...] = ()  # harness ids recombined into this one

    @property
    def cell(self) -> str:
        """`kind::failure`."""
        return f"{self.kind}::{self.failure}"


class InvalidPatch(ValueError):
    """The patch cannot be applied; the message says why."""


def apply(parent: Harness, proposal: Proposal) -> Harness:
    """The parent with the proposal's edits (InvalidPatch when any is not allowed)."""
    data = parent.model_dump()
    for edit in proposal.edits:
        if edit.part in KERNEL_PARTS:
            raise InvalidPatch(f"the kernel ({edit.part}) cannot be edited")
        if edit.part != proposal.kind:
            raise InvalidPatch(
                f"an edit of {edit.part!r} in a {proposal.kind!r} proposal: a patch edits only "
                "the category of the cell it declares"
            )
        _edit(data, edit)
    return Harness.model_validate(data)


def _edit(data: dict[str, object], edit: Edit) -> None:
    if edit.part == "prompt":
        data["prompt"] = _edit_prompt(str(data["prompt"]), edit)
    elif edit.part == "knowledge":
        data["knowledge"] = _edit_knowledge(list(data["knowledge"]), edit)  # type: ignore[call-overload]
    elif edit.part in ("runtime", "config"):
        if edit.op != "set" or not edit.key:
            raise InvalidPatch(f"{edit.part} takes `set` with a key")
        if edit.part == "runtime":
            _check_runtime(edit.key, edit.value)
        values = dict(data[edit.part])  # type: ignore[call-overload]
        values[edit.key] = edit.value
        data[edit.part] = values
    else:
        raise InvalidPatch(f"unknown harness part {edit.part!r} (one of {', '.join(EDIT_KINDS)})")


def _edit_prompt(prompt: str, edit: Edit) -> str:
    if edit.op == "append":
        return f"{prompt.rstrip()}\n\n{edit.value}"
    if edit.op == "replace":
        if not edit.key or edit.key not in prompt:
            raise InvalidPatch("a prompt `replace` must name text the prompt contains")
        return prompt.replace(edit.key, str(edit.value), 1)
    raise InvalidPatch(f"the prompt takes append or replace, not {edit.op}")


def _edit_knowledge(notes: list[str], edit: Edit) -> tuple[str, ...]:
    if edit.op == "add":
        return (*notes, str(edit.value))
    if edit.op == "remove" and edit.value in notes:
        notes.remove(str(edit.value))
        return tuple(notes)
    raise InvalidPatch(f"knowledge takes add or remove (of a present note), not {edit.op}")


def _check_runtime(key: str, value: Value) -> None:
    limits = RUNTIME_LIMITS.get(key)
    if limits is None:
        raise InvalidPatch(f"unknown runtime value {key!r} (one of {', '.join(RUNTIME_LIMITS)})")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidPatch(f"runtime {key} must be a number")
    low, high = limits
    if not low <= value <= high:
        raise InvalidPatch(f"runtime {key} must be within {low:g}..{high:g}")
