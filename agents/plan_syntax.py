"""The explicit plan syntax: one line per node, `id: agent: task [after a, b] [instance h]`.

It lets anyone build a graph without a model (the offline provider turns such a message into a
`submit_graph` call). A line `confirm` asks for approval before the graph runs.
"""

from __future__ import annotations

import re
from typing import Any

_ID = r"[a-z][a-z0-9_]{0,39}"
_NODE_LINE = re.compile(
    rf"^\s*(?P<id>{_ID})\s*:\s*(?P<agent>[A-Za-z][\w-]*)\s*:\s*(?P<task>.+?)\s*$"
)
# `[after a, b]` and `[instance NAME]`, in any order, at the end of a node line.
_BRACKET = re.compile(r"\[\s*(?P<kind>after|instance)\s+(?P<value>[^\]]*)\]\s*$", re.IGNORECASE)
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


def _split_deps(raw: str) -> list[str]:
    return [d for d in re.split(r"\s*(?:,|\band\b)\s*", raw.strip()) if d]


def parse_plan(text: str) -> dict[str, Any] | None:
    """Return a graph submission for a message written in plan syntax, else None.

    Lines that are not node lines (greetings, a `From:` header) are ignored; at least one node
    line is needed. Dependencies in brackets are always taken; a bare trailing `after a, b`
    is taken when every name in it is a valid node id.
    """
    nodes: list[dict[str, Any]] = []
    confirm = False
    for line in text.splitlines():
        if _CONFIRM.match(line):
            confirm = True
            continue
        match = _NODE_LINE.match(line)
        if match is None:
            continue
        task, groups = _trailing(match["task"])
        deps = [d for kind, value in groups if kind == "after" for d in _split_deps(value)]
        instances = [value.strip() for kind, value in groups if kind == "instance"]
        nodes.append(
            {
                "id": match["id"],
                "agent": match["agent"].lower(),
                "template": task,
                "deps": deps,
                "inputs": {},
                "instance": instances[-1] if instances else None,
                "summary": task[:80],
            }
        )
    if not nodes:
        return None
    summary = "; ".join(f"{n['id']} ({n['agent']})" for n in nodes)
    return {
        "task_summary": f"Explicit plan: {summary}"[:200],
        "background": True,
        "confirm": confirm,
        "nodes": nodes,
    }


def with_id_suffix(text: str, suffix: str) -> str:
    """The plan `text` with every node id `x` renamed `x_<suffix>` where it names a node: a
    line's id, its `after` dependencies and `{{x.output}}` / `{{x.output_path}}`
    placeholders; everything else, commands included, is kept as written. (A plan run again,
    as each firing of a scheduled task does, needs fresh ids: ids are unique per
    conversation.) An id too long for the suffix is shortened."""
    plan = parse_plan(text)
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
    """True for a node line or a `confirm` line (used to group a multi-line plan)."""
    return bool(_NODE_LINE.match(line) or _CONFIRM.match(line))
