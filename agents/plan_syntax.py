"""The explicit plan syntax: one line per node, `id: agent: task [after a, b] [instance h]`.

It lets anyone build a graph without a model (the offline provider turns such a message into a
`submit_graph` call). A line `confirm` asks for approval before the graph runs.

A plan is all or nothing. A message is a plan once one of its lines is a node line; then every
other non-empty line must be a node line or `confirm` (a line of three backticks, a Markdown
fence, is ignored), else the whole plan is refused (`PlanSyntaxError`) naming each bad line,
what is wrong with it and the syntax: a plan never runs with a line left out. A message with no
node line is not a plan at all, so a sentence with a colon ("note: the build is red") is never
refused as one.
"""

from __future__ import annotations

import re
from typing import Any

_ID = r"[a-z][a-z0-9_]{0,39}"
# (`see: https://…` is a link, not the agent `https`.)
_NODE_LINE = re.compile(
    rf"^\s*(?P<id>{_ID})\s*:\s*(?P<agent>[A-Za-z][\w-]*)\s*:(?!//)\s*(?P<task>.+?)\s*$"
)
# `[after a, b]`, `[instance NAME]`, `[skills a, b]` and `[mcp server, server]` (either with
# `none`), in any order, at the end of a node line.
_BRACKET = re.compile(
    r"\[\s*(?P<kind>after|instance|skills|mcp)\s+(?P<value>[^\]]*)\]\s*$", re.IGNORECASE
)
_AFTER_PART = re.compile(r"\[\s*after\s+[^\]]*\]|\s+after\s+.*$", re.IGNORECASE)
_PLAIN_AFTER = re.compile(
    rf"\s+after\s+(?P<deps>{_ID}(?:\s*(?:,|and)\s*{_ID})*)\s*$", re.IGNORECASE
)
_CONFIRM = re.compile(r"^\s*(confirm|please confirm|ask (me )?first)\s*[.!]?\s*$", re.IGNORECASE)
# For `help`: everything the parser above (and admission's templates) understands.
HELP = (
    "one node per line, `id: agent: task`; at the end of a line `[after a, b]` waits for "
    "those nodes and `[instance NAME]` shares one session of a stateful agent; "
    "`{{id.output}}` in a task is that node's output; a `confirm` line asks for approval "
    "first. For example:\n"
    "```\ns1: shell: uname -a\ns2: shell: echo done [after s1]\nconfirm\n```"
)


SYNTAX = "`id: agent: task [after id, id]`"
# A Markdown fence line around a pasted plan (three backticks, maybe a language): ignored.
_FENCE_LINE = re.compile(r"^\s*```[\w+-]*\s*$")
# Lines that read as a node with something wrong, most specific first (for the refusal).
_NO_TASK = re.compile(rf"^\s*(?P<id>{_ID})\s*:\s*(?P<agent>[A-Za-z][\w-]*)\s*:\s*$")
_BAD_ID = re.compile(r"^\s*(?P<id>[^\s:]+)\s*:\s*(?P<agent>[A-Za-z][\w-]*)\s*:\s*\S")
_NO_ID_COLON = re.compile(
    rf"^\s*(?P<id>{_ID})\s+(?P<agent>[A-Za-z][\w-]*)\s*:\s*(?P<task>\S.*?)\s*$"
)
_ONE_COLON = re.compile(rf"^\s*{_ID}\s*:\s*[A-Za-z][\w-]*\s+\S")
_OPEN_BRACKET = re.compile(r"\[\s*(?:after|instance|skills|mcp)\b[^\]]*$", re.IGNORECASE)
_TRAILING_BRACKET = re.compile(r"\[\s*(?:after|instance|skills|mcp)\b[^\]]*\]\s*$", re.IGNORECASE)
# `[skills none]` / `[mcp none]`: the node gets none at all (not even its agent's defaults).
_NONE = "none"
_SHOWN_LINE_CHARS = 120
_SHOWN_PROBLEMS = 5


class PlanSyntaxError(ValueError):
    """A plan with lines that are not nodes: nothing of it may run. The message names each bad
    line (number, text, what is wrong) and gives the syntax."""

    def __init__(self, problems: list[tuple[int, str]]) -> None:
        super().__init__(_refusal(problems))
        self.problems = problems

    def refusal(self, nothing: str = "run") -> str:
        """The message, saying nothing was `nothing` (`scheduled`, for a task's plan)."""
        return _refusal(self.problems, nothing=nothing)


def _split_deps(raw: str) -> list[str]:
    return [d for d in re.split(r"\s*(?:,|\band\b)\s*", raw.strip()) if d]


def parse_plan(text: str) -> dict[str, Any] | None:
    """Return a graph submission for a message written in plan syntax, else None.

    A message is a plan once one line is a node line; then every non-empty line must be a node
    line or `confirm` (or a Markdown fence line), else PlanSyntaxError names the bad lines:
    a plan runs whole or not at all. Dependencies in brackets are always taken; a bare
    trailing `after a, b` is taken when every name in it is a valid node id.
    """
    nodes: list[dict[str, Any]] = []
    confirm = False
    problems: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or _FENCE_LINE.match(line):
            continue
        if _CONFIRM.match(line):
            confirm = True
            continue
        match = _NODE_LINE.match(line)
        if match is None or _OPEN_BRACKET.search(match["task"]):
            problems.append(_problem(number, line))
            continue
        task, groups = _trailing(match["task"])
        deps = [d for kind, value in groups if kind == "after" for d in _split_deps(value)]
        instances = [value.strip() for kind, value in groups if kind == "instance"]
        node: dict[str, Any] = {
            "id": match["id"],
            "agent": match["agent"].lower(),
            "template": task,
            "deps": deps,
            "inputs": {},
            "instance": instances[-1] if instances else None,
            "summary": task[:80],
        }
        for kind in ("skills", "mcp"):  # the node's capability overrides: these only
            given = [value for k, value in groups if k == kind]
            if given:
                named = _split_deps(given[0])
                node[kind] = [] if [n.lower() for n in named] == [_NONE] else named
        nodes.append(node)
    if not nodes:
        return None
    if problems:
        raise PlanSyntaxError(problems)
    summary = "; ".join(f"{n['id']} ({n['agent']})" for n in nodes)
    return {
        "task_summary": f"Explicit plan: {summary}"[:200],
        "background": True,
        "confirm": confirm,
        "nodes": nodes,
    }


def _problem(number: int, line: str) -> tuple[int, str]:
    """A line of a plan that is not a node line: its number and what is wrong with it."""
    if _NO_TASK.match(line):
        why = "there is no task after the agent"
    elif (bad := _BAD_ID.match(line)) is not None and not re.fullmatch(_ID, bad["id"]):
        why = (
            f"{_span(bad['id'])} is not a node id: an id is lower-case letters, digits and `_`, "
            "starting with a letter (at most 40)"
        )
    elif (near := _NO_ID_COLON.match(line)) is not None:
        fixed = f"{near['id']}: {near['agent']}: {near['task']}"
        why = f"a `:` is missing after the id; write {_span(_shortened(fixed))}"
    elif _ONE_COLON.match(line):
        why = "a node line has a `:` after the id and another after the agent"
    elif _OPEN_BRACKET.search(line) and not _TRAILING_BRACKET.search(line):
        why = "its `[after …]` or `[instance …]` is not closed with `]`"
    else:
        why = "it is neither a node nor `confirm`"
    return number, f"line {number}, {_span(_shortened(line.strip()))}: {why}"


def _refusal(problems: list[tuple[int, str]], *, nothing: str = "run") -> str:
    numbers = [str(n) for n, _ in problems]
    if len(numbers) == 1:
        heading = f"Nothing was {nothing}: line {numbers[0]} of this plan is not a node."
    else:
        which = ", ".join(numbers[:-1]) + f" and {numbers[-1]}"
        heading = f"Nothing was {nothing}: lines {which} of this plan are not nodes."
    lines = [f"- {said}" for _, said in problems[:_SHOWN_PROBLEMS]]
    if len(problems) > _SHOWN_PROBLEMS:
        lines.append(f"- and {len(problems) - _SHOWN_PROBLEMS} more")
    # A blank line after the list, so Markdown does not read the last line as part of it.
    return "\n".join(
        [
            heading,
            *lines,
            "",
            f"Every line of a plan is a node, {SYNTAX}, or `confirm`. Send the whole plan "
            "again once it is fixed.",
        ]
    )


def _shortened(text: str) -> str:
    return text if len(text) <= _SHOWN_LINE_CHARS else text[: _SHOWN_LINE_CHARS - 1] + "…"


def _span(text: str) -> str:
    """`text` as inline code, whatever backticks it holds."""
    if "`" not in text:
        return f"`{text}`"
    return f"`` {text} ``" if "``" not in text else f"`{text.replace('`', chr(0x2035))}`"


def with_id_suffix(text: str, suffix: str) -> str:
    """The plan `text` with every node id `x` renamed `x_<suffix>` where it names a node: a
    line's id, its `after` dependencies and `{{x.output}}` / `{{x.output_path}}`
    placeholders; everything else, commands included, is kept as written. (A plan run again,
    as each firing of a scheduled task does, needs fresh ids: ids are unique per
    conversation.) An id too long for the suffix is shortened."""
    try:
        plan = parse_plan(text)
    except PlanSyntaxError:
        return text  # refused as written, with its lines named, where it is read
    if plan is None:
        return text
    keep = 39 - len(suffix)
    renamed = {str(n["id"]): f"{str(n['id'])[:keep]}_{suffix}" for n in plan["nodes"]}

    def name(match: re.Match[str]) -> str:
        return renamed.get(match[0], match[0])

    ids = re.compile(r"\b(?:" + "|".join(map(re.escape, renamed)) + r")\b")
    placeholder = re.compile(r"(\{\{\s*)(" + ids.pattern + r")(?=\.output(?:_path)?\s*\}\})")
    lines = []
    for line in text.splitlines():
        match = _NODE_LINE.match(line)
        if match is None:
            lines.append(line)
            continue
        task = match["task"]
        head, _ = _trailing(task)
        head = task[: len(head)]
        # Only `after` names nodes; an instance handle is kept as written.
        tail = _AFTER_PART.sub(lambda m: ids.sub(name, m[0]), task[len(head) :])
        head = placeholder.sub(lambda m: m[1] + renamed[m[2]], head)
        lines.append(
            line[: match.start("id")]
            + renamed[match["id"]]
            + line[match.end("id") : match.start("task")]
            + head
            + tail
            + line[match.end("task") :]
        )
    return "\n".join(lines)


def _trailing(task: str) -> tuple[str, list[tuple[str, str]]]:
    """The task without its trailing `[after …]`/`[instance …]` groups (or a bare trailing
    `after a, b`), and those groups as (kind, value), last first."""
    groups: list[tuple[str, str]] = []
    rest = task
    while (found := _BRACKET.search(rest)) is not None:
        groups.append((found["kind"].lower(), found["value"]))
        rest = rest[: found.start()].rstrip()
    if not any(kind == "after" for kind, _ in groups):
        plain = _PLAIN_AFTER.search(rest)
        if plain is not None:
            groups.append(("after", plain["deps"]))
            rest = rest[: plain.start()].rstrip()
    return rest, groups


def is_plan_line(line: str) -> bool:
    """True for a node line or a `confirm` line (a line that starts a multi-line plan)."""
    return bool(_NODE_LINE.match(line) or _CONFIRM.match(line))


def is_confirm_line(line: str) -> bool:
    """True for a `confirm` line (`confirm`, `please confirm`, `ask me first`)."""
    return _CONFIRM.match(line) is not None


def continues_plan(line: str) -> bool:
    """True for a line that belongs to a plan being typed line by line: a node or `confirm`
    line, or one that reads as a mistyped node (`a2 shell: echo two`, `a2: shell:`, an
    unclosed `[after a1`), so the plan is refused naming it rather than run without it."""
    return (
        is_plan_line(line)
        or any(p.match(line) for p in (_NO_TASK, _NO_ID_COLON, _BAD_ID))
        or bool(_OPEN_BRACKET.search(line) or _TRAILING_BRACKET.search(line))
    )
