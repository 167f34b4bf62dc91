"""The explicit plan syntax: one line per node, `id: agent: task [after a, b]`.

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
_BRACKET_AFTER = re.compile(r"\[\s*after\s+(?P<deps>[^\]]*)\]\s*$", re.IGNORECASE)
_PLAIN_AFTER = re.compile(
    rf"\s+after\s+(?P<deps>{_ID}(?:\s*(?:,|and)\s*{_ID})*)\s*$", re.IGNORECASE
)
_CONFIRM = re.compile(r"^\s*(confirm|please confirm|ask (me )?first)\s*[.!]?\s*$", re.IGNORECASE)
# For `help`: everything the parser above (and admission's templates) understands.
HELP = (
    "one node per line, `id: agent: task`; `[after a, b]` at the end of a line waits for "
    "those nodes, and `{{id.output}}` in a task is that node's output; a line `confirm` asks "
    "for approval before the plan runs. For example:\n"
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
        task = match["task"]
        deps: list[str] = []
        after = _BRACKET_AFTER.search(task) or _PLAIN_AFTER.search(task)
        if after is not None:
            deps = _split_deps(after["deps"])
            task = task[: after.start()].rstrip()
        nodes.append(
            {
                "id": match["id"],
                "agent": match["agent"].lower(),
                "template": task,
                "deps": deps,
                "inputs": {},
                "instance": None,
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
        after = _BRACKET_AFTER.search(task) or _PLAIN_AFTER.search(task)
        head = task if after is None else task[: after.start()]
        tail = "" if after is None else ids.sub(name, task[after.start() :])
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


def is_plan_line(line: str) -> bool:
    """True for a node line or a `confirm` line (used to group a multi-line plan)."""
    return bool(_NODE_LINE.match(line) or _CONFIRM.match(line))
