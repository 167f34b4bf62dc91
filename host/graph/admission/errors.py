"""How a rejected submission is told: the failed group, where, why, and the repair — to the
Host (pointing at its guide tool) or to a person (pointing at the guide file)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from host.graph.model import GraphSubmission

AdmissionGroup = Literal["format", "structure", "capability", "status", "environment"]

GUIDE_POINTER: Final = "See the orchestration guide (call `load_orchestration_guide`)."
GUIDE_PATH: Final = Path(__file__).resolve().parents[2] / "agent" / "guides" / "orchestration.md"
# People read the guide as a file; only the Host can call the tool.
USER_GUIDE_POINTER: Final = f"Plan syntax and graph rules: `{GUIDE_PATH}`."

EditAction = Literal["add_dep", "remove_dep", "unquote", "drop_input", "rename"]


@dataclass(frozen=True)
class Edit:
    """One change to a submission that a repair asks for, exact enough to apply.

    `add_dep`/`remove_dep`: `value` is the dependency; `unquote`: the placeholder text,
    replaced by its words in backticks (the node no longer receives that output);
    `drop_input`: the input name (the input and its placeholders go); `rename`: the new id,
    also where this graph refers to the node.
    """

    node: str
    action: EditAction
    value: str


def _sentence(text: str) -> str:
    text = text.rstrip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


class AdmissionError(Exception):
    """A rejected submission: which check group failed, where, why, and how to repair it."""

    def __init__(
        self,
        group: AdmissionGroup,
        problem: str,
        *,
        node: str | None = None,
        field: str | None = None,
        repair: str | None = None,
        index: int | None = None,
        edits: Sequence[Edit] = (),
    ) -> None:
        super().__init__(problem)
        self.group: AdmissionGroup = group
        self.node = node
        self.field = field
        self.problem = problem
        self.repair = repair
        # The repair as edits, when it is a change of wiring (empty when it is not).
        self.edits = tuple(edits)
        # Position in `nodes`; set for format errors, where the id may be missing or invalid.
        self.index = index
        # How many other problems the later checks found in the same submission (set by
        # `admit`): told as a count, so a model knows one repair will not be the last.
        self.more = 0

    def __str__(self) -> str:
        """The rejection as the Host reads it (pointing at the guide tool)."""
        return f"{self._text()} {GUIDE_POINTER}"

    def for_user(self) -> str:
        """The rejection as a person reads it: the guide's path instead of a tool name."""
        return f"{self._text()} {USER_GUIDE_POINTER}"

    def _text(self) -> str:
        where: list[str] = []
        if self.index is not None:
            label = f"nodes[{self.index}]" + (f" ({self.node})" if self.node else "")
            where.append(f"`{label}`")
        elif self.node is not None:
            where.append(f"node `{self.node}`")
        if self.field is not None:
            where.append(f"field `{self.field}`")
        head = f"Graph rejected ({self.group})"
        if where:
            head += " at " + ", ".join(where)
        text = f"{head}: {_sentence(self.problem)}"
        if self.repair:
            text += f" Repair: {_sentence(self.repair)}"
        if self.more:
            noun = "problem" if self.more == 1 else "problems"
            text += f" ({self.more} more {noun} after this one; each is told when you resubmit.)"
        return text


class ApprovalRequired(AdmissionError):
    """The submission asks for user approval (`confirm`) and none was collected yet."""

    def __init__(self, submission: GraphSubmission) -> None:
        super().__init__(
            "environment",
            "the submission sets `confirm`, so the user must approve the listed nodes "
            "before dispatch",
            repair="ask the user for approval, then re-run admission with the approval collected",
        )
        self.submission = submission


def short(text: str, limit: int = 60) -> str:
    """`text` on one line, cut to `limit` characters, for quoting in a message."""
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"
