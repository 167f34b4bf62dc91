"""The placeholder grammar of node templates: the six `{{...}}` forms, parsed with their
spans, and helpers that read or rewrite a template by its placeholders."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from host.graph.admission.errors import short
from host.graph.model import NODE_ID_PATTERN

PlaceholderKind = Literal["output", "output_path", "input", "input_path", "ref", "ref_path"]

PATH_KINDS: Final[frozenset[str]] = frozenset({"output_path", "input_path", "ref_path"})
PLACEHOLDER_FORMS: Final = (
    "`{{id.output}}`, `{{id.output_path}}`, `{{inputs.k}}`, `{{inputs.k.path}}`, "
    "`{{ref:path}}`, `{{ref_path:path}}`"
)
NODE_ID_RE: Final = re.compile(NODE_ID_PATTERN)

_ID = r"[a-z][a-z0-9_]{0,39}"
_BRACES = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_NODE_FORM = re.compile(rf"({_ID})\.(output|output_path)")
_INPUT_FORM = re.compile(rf"inputs\.({_ID})(\.path)?")
_REF_FORM = re.compile(r"(ref|ref_path)\s*:(.*)", re.DOTALL)
_REF_PATH = re.compile(r"[^\s{}]+")


@dataclass(frozen=True)
class Placeholder:
    """One `{{...}}` occurrence in a template: its form, target, raw text and span."""

    kind: PlaceholderKind
    target: str
    raw: str
    span: tuple[int, int]

    @property
    def is_path(self) -> bool:
        """Whether it passes a filesystem path (needs a file-capable agent)."""
        return self.kind in PATH_KINDS


class PlaceholderSyntaxError(ValueError):
    """A `{{...}}` that is none of the six placeholder forms (or an unclosed `{{`)."""

    def __init__(self, raw: str, span: tuple[int, int], reason: str, repair: str) -> None:
        super().__init__(reason)
        self.raw = raw
        self.span = span
        self.reason = reason
        self.repair = repair


def _literal_braces_hint() -> str:
    return (
        f"Placeholders are {PLACEHOLDER_FORMS}. To keep literal `{{{{`…`}}}}` text, put it "
        "in a text input and insert it with `{{inputs.k}}` (input text is not parsed)"
    )


def _placeholder_suggestion(inner: str) -> str | None:
    """A likely intended placeholder for a malformed one, if we can guess it."""
    if NODE_ID_RE.fullmatch(inner) and inner != "inputs":
        return f"`{{{{{inner}.output}}}}` or `{{{{inputs.{inner}}}}}`"
    head, dot, tail = inner.partition(".")
    if not dot:
        return None
    if head == "inputs":
        name, _, rest = tail.partition(".")
        if NODE_ID_RE.fullmatch(name):
            return f"`{{{{inputs.{name}}}}}` or `{{{{inputs.{name}.path}}}}`" if rest else None
        return None
    if not NODE_ID_RE.fullmatch(head):
        lowered = re.sub(r"[^a-z0-9_]", "_", head.lower())
        if NODE_ID_RE.fullmatch(lowered) and tail in ("output", "output_path"):
            return f"`{{{{{lowered}.{tail}}}}}` (node ids are lowercase)"
        return None
    close = difflib.get_close_matches(tail, ["output", "output_path"], n=1, cutoff=0.6)
    return f"`{{{{{head}.{close[0]}}}}}`" if close else None


def _parse_one(raw: str, inner: str, span: tuple[int, int]) -> Placeholder:
    text = inner.strip()
    if match := _NODE_FORM.fullmatch(text):
        kind: PlaceholderKind = "output" if match.group(2) == "output" else "output_path"
        return Placeholder(kind, match.group(1), raw, span)
    if match := _INPUT_FORM.fullmatch(text):
        kind = "input_path" if match.group(2) else "input"
        return Placeholder(kind, match.group(1), raw, span)
    if match := _REF_FORM.fullmatch(text):
        kind = "ref" if match.group(1) == "ref" else "ref_path"
        path = match.group(2).strip()
        if not path:
            raise PlaceholderSyntaxError(
                raw, span, f"`{short(raw)}` has no path", f"write `{{{{{kind}:relative/path}}}}`"
            )
        if not _REF_PATH.fullmatch(path):
            raise PlaceholderSyntaxError(
                raw,
                span,
                f"the path in `{short(raw)}` contains spaces or braces, which placeholder "
                "paths cannot contain",
                'declare a file input (`"inputs": {"doc": {"file": "my file.md"}}`) and use '
                "`{{inputs.doc}}` or `{{inputs.doc.path}}`, or rename the file",
            )
        return Placeholder(kind, path, raw, span)
    suggestion = _placeholder_suggestion(text)
    repair = _literal_braces_hint()
    if suggestion:
        repair = f"did you mean {suggestion}? {repair}"
    raise PlaceholderSyntaxError(raw, span, f"unknown placeholder `{short(raw)}`", repair)


def parse_placeholders(template: str) -> list[Placeholder]:
    """Every placeholder in `template`, in order; raises `PlaceholderSyntaxError` on bad ones."""
    found: list[Placeholder] = []
    end = 0
    for match in _BRACES.finditer(template):
        found.append(_parse_one(match.group(0), match.group(1), match.span()))
        end = match.end()
    # A `{{` with a later `}}` is always matched above, so only the tail can hold an open one.
    tail = template.find("{{", end)
    if tail != -1:
        raw = template[tail:]
        raise PlaceholderSyntaxError(
            raw,
            (tail, len(template)),
            f"unclosed `{{{{` at character {tail}: `{short(raw, 40)}`",
            f"close it with `}}}}`. {_literal_braces_hint()}",
        )
    return found


def output_targets(template: str) -> set[str]:
    """The node ids whose outputs `template` names, read leniently (malformed placeholders
    are skipped, not raised)."""
    found = (_NODE_FORM.fullmatch(b.group(1).strip()) for b in _BRACES.finditer(template))
    return {m.group(1) for m in found if m}


def rewrite(template: str, replace: Callable[[Placeholder], str | None]) -> str:
    """`template` with each placeholder `replace` returns text for replaced by that text."""
    out, end = [], 0
    for ph in parse_placeholders(template):
        new = replace(ph)
        if new is not None:
            out += [template[end : ph.span[0]], new]
            end = ph.span[1]
    return "".join(out) + template[end:]
