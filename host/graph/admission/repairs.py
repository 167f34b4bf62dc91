"""Repairs: a submission with the `Edit`s a rejection proposes made, so a caller (or a
person) can apply the fix and submit again."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from host.graph.admission.errors import Edit
from host.graph.admission.grammar import rewrite


def apply_edits(raw: Mapping[str, Any], edits: Sequence[Edit]) -> dict[str, Any]:
    """A copy of the submission (its JSON form) with `edits` made, as a repair describes."""
    data: dict[str, Any] = copy.deepcopy(dict(raw))
    nodes: list[dict[str, Any]] = data["nodes"]
    for edit in edits:
        node = next(n for n in nodes if n.get("id") == edit.node)
        if edit.action == "add_dep":
            node["deps"] = [*node.get("deps", []), edit.value]
        elif edit.action == "remove_dep":
            node["deps"] = [d for d in node.get("deps", []) if d != edit.value]
        elif edit.action == "unquote":
            node["template"] = node["template"].replace(edit.value, _in_words(edit.value))
        elif edit.action == "drop_input":
            node.get("inputs", {}).pop(edit.value, None)
            node["template"] = _unquote_input(node["template"], edit.value)
        else:
            _rename(nodes, edit.node, edit.value)
    return data


def _in_words(placeholder: str) -> str:
    """A placeholder as plain words, so the node no longer receives it."""
    return f"`{placeholder.strip('{}').strip()}`"


def _unquote_input(template: str, name: str) -> str:
    """`template` with the placeholders of input `name` turned into words."""
    return rewrite(
        template,
        lambda ph: (
            _in_words(ph.raw) if ph.kind in ("input", "input_path") and ph.target == name else None
        ),
    )


def _rename(nodes: list[dict[str, Any]], old: str, new: str) -> None:
    """Rename node `old` and every reference to it in this graph."""
    for node in nodes:
        if node.get("id") == old:
            node["id"] = new
        node["deps"] = [new if d == old else d for d in node.get("deps", [])]
        for binding in node.get("inputs", {}).values():
            if isinstance(binding, dict) and binding.get("node") == old:
                binding["node"] = new
        node["template"] = rewrite(
            node["template"],
            lambda ph: (
                f"{{{{{new}.{ph.kind}}}}}"
                if ph.kind in ("output", "output_path") and ph.target == old
                else None
            ),
        )
