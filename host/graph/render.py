"""Prompt rendering: resolve a node's template against upstream artifacts, inputs and files.

Implements the paper's Render (Eq. 30) plus the memory path block (§3.3 Eq. 32). Content
taken from files or other agents is fenced as untrusted data under a random per-render marker.

A command node's template (an agent whose task is its shell command) renders differently: each
placeholder becomes its raw value, shell-quoted as one word, and nothing else is added, so the
command shown for approval is exactly the command that runs and pasted data stays data.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

# The fence helpers live in core/ (skills/ fences too); re-exported for existing imports.
from core.fence import Markers, fence, new_marker, untrusted_preface
from host.graph.admission import (
    Placeholder,
    PlaceholderSyntaxError,
    confine_path,
    parse_placeholders,
)
from host.graph.model import FileInput, InputBinding, NodeInput, NodeSpec, TextInput

CONTENT_CAP: Final = 60_000
INPUTS_HEADING: Final = "Inputs:"
MEMORY_HEADING: Final = "Memory records of upstream nodes (read if useful):"


class RenderError(Exception):
    """A prompt cannot be rendered (missing artifact, unreadable file, undeclared input)."""


@dataclass(frozen=True)
class Artifact:
    """A completed node's recorded output and the file holding it."""

    node_id: str
    output: str
    output_path: Path


@dataclass(frozen=True)
class RenderedPrompt:
    """The prompt text, the fence marker used, and the node ids whose outputs it consumed."""

    text: str
    marker: str
    consumed: tuple[str, ...]


def _cap(text: str, full_path: Path) -> str:
    if len(text) <= CONTENT_CAP:
        return text
    return f"{text[:CONTENT_CAP]}\n[truncated; full text at {full_path}]"


@dataclass
class _Render:
    """State of one render: what was fenced and which upstream nodes were used."""

    node: NodeSpec
    artifacts: Mapping[str, Artifact]
    workspace: Path
    marker: str
    # The template is a shell command: placeholders become raw values, shell-quoted.
    command: bool = False
    fenced: bool = False
    consumed: list[str] = field(default_factory=list)

    def _fence(self, content: str, source: str) -> str:
        self.fenced = True
        return fence(content, source=source, marker=self.marker)

    def _content(self, text: str, full_path: Path, source: str) -> str:
        """Content for the prompt: fenced for a model; for a command, the raw text whole (a
        cut would change the data, so a text too long for one argument is refused)."""
        if not self.command:
            return self._fence(_cap(text, full_path), source)
        if len(text) > CONTENT_CAP:
            raise RenderError(
                f"node `{self.node.id}` runs its task as a command, and the {source} is "
                f"{len(text):,} characters, more than the {CONTENT_CAP:,} a command may carry; "
                "have that data written to a file in the workspace and the command read it"
            )
        if "\0" in text:
            raise RenderError(
                f"node `{self.node.id}` runs its task as a command, and the {source} contains a "
                "NUL character, which no command argument can hold"
            )
        return text

    def _artifact(self, node_id: str) -> Artifact:
        artifact = self.artifacts.get(node_id)
        if artifact is None:
            raise RenderError(
                f"node `{self.node.id}` needs the output of `{node_id}`, but no artifact is "
                "recorded for it"
            )
        if node_id not in self.consumed:
            self.consumed.append(node_id)
        return artifact

    def _artifact_path(self, artifact: Artifact) -> Path:
        path = artifact.output_path
        return path if path.is_absolute() else self.workspace.resolve() / path

    def _file(self, raw: str) -> Path:
        try:
            return confine_path(self.workspace, raw)
        except ValueError as exc:
            raise RenderError(f"node `{self.node.id}`: {exc}") from None

    def _file_content(self, raw: str) -> str:
        path = self._file(raw)
        try:
            with path.open(encoding="utf-8", errors="replace") as handle:
                # Read one char past the cap only: enough to know truncation is needed.
                text = handle.read(CONTENT_CAP + 1)
        except OSError as exc:
            raise RenderError(f"node `{self.node.id}`: cannot read `{raw}`: {exc}") from None
        rel = path.relative_to(self.workspace.resolve()).as_posix()
        return self._content(text, path, f"file {rel}")

    def _output_content(self, node_id: str) -> str:
        artifact = self._artifact(node_id)
        return self._content(
            artifact.output, self._artifact_path(artifact), f"node {node_id} output"
        )

    def _binding(self, name: str) -> InputBinding:
        binding = self.node.inputs.get(name)
        if binding is None:
            raise RenderError(f"node `{self.node.id}` has no input `{name}`")
        return binding

    def substitute(self, ph: Placeholder) -> str:
        """The text that replaces one placeholder (in a command: one shell word)."""
        value = self._value(ph)
        # One word whatever it holds: quotes, `$(`, newlines and fences stay data.
        return shlex.quote(value) if self.command else value

    def _value(self, ph: Placeholder) -> str:
        if ph.kind == "output":
            return self._output_content(ph.target)
        if ph.kind == "output_path":
            return str(self._artifact_path(self._artifact(ph.target)))
        if ph.kind == "ref":
            return self._file_content(ph.target)
        if ph.kind == "ref_path":
            return str(self._file(ph.target))
        binding = self._binding(ph.target)
        if ph.kind == "input":
            return self.input_content(binding)
        if isinstance(binding, FileInput):
            return str(self._file(binding.file))
        if isinstance(binding, NodeInput):
            return str(self._artifact_path(self._artifact(binding.node)))
        raise RenderError(f"node `{self.node.id}`: text input `{ph.target}` has no path")

    def input_content(self, binding: InputBinding) -> str:
        """Content of an input: text as written (the Host's own words), the rest fenced
        (raw in a command)."""
        if isinstance(binding, TextInput):
            return binding.text
        if isinstance(binding, FileInput):
            return self._file_content(binding.file)
        return self._output_content(binding.node)

    def appended(self, name: str, binding: InputBinding) -> str:
        """One entry of the trailing `Inputs:` section for an unreferenced input."""
        if isinstance(binding, TextInput):
            return f"{name}: {binding.text}"
        if isinstance(binding, FileInput):
            return f"{name} (file {binding.file}):\n{self.input_content(binding)}"
        return f"{name} (output of node {binding.node}):\n{self.input_content(binding)}"


def render_prompt(
    node: NodeSpec,
    *,
    artifacts: Mapping[str, Artifact],
    workspace: Path,
    file_capable: bool,
    memory_paths: Sequence[Path | str] = (),
    marker: str | None = None,
    command: bool = False,
    placeholders: Sequence[Placeholder] | None = None,
) -> RenderedPrompt:
    """Render `node`'s task prompt; raises RenderError when a needed artifact or file is gone.

    `memory_paths`: one line each in the memory block (a path, or a listing of several).
    `command`: the template is a shell command (placeholders become shell-quoted raw values,
    nothing is appended, no fence preface).
    `placeholders`: the template's, as admission parsed them (parsed here when not given)."""
    state = _Render(node, artifacts, workspace, marker or new_marker(), command=command)
    if placeholders is None:
        try:
            placeholders = parse_placeholders(node.template)
        except PlaceholderSyntaxError as exc:
            raise RenderError(f"node `{node.id}`: {exc.reason}") from None

    # Single pass over the template: substituted text is never re-scanned for placeholders.
    parts: list[str] = []
    position = 0
    for ph in placeholders:
        parts.append(node.template[position : ph.span[0]])
        parts.append(state.substitute(ph))
        position = ph.span[1]
    parts.append(node.template[position:])
    body = "".join(parts)

    used = {ph.target for ph in placeholders if ph.kind in ("input", "input_path")}
    unused = [k for k in node.inputs if k not in used]
    if command:
        if unused:
            # Appended text would become part of the command: refuse instead.
            names = ", ".join(f"`{k}`" for k in unused)
            raise RenderError(
                f"node `{node.id}` runs its task as a command, and its input(s) {names} do not "
                f"appear in it; place each where it belongs, e.g. `{{{{inputs.{unused[0]}}}}}`"
            )
        return RenderedPrompt(text=body, marker=state.marker, consumed=tuple(state.consumed))
    extra = [state.appended(k, node.inputs[k]) for k in unused]
    if extra:
        body += f"\n\n{INPUTS_HEADING}\n" + "\n".join(extra)
    if file_capable and memory_paths:
        body += f"\n\n{MEMORY_HEADING}\n" + "\n".join(str(p) for p in memory_paths)

    text = f"{untrusted_preface(state.marker)}\n\n{body}" if state.fenced else body
    return RenderedPrompt(text=text, marker=state.marker, consumed=tuple(state.consumed))


__all__ = [
    "CONTENT_CAP",
    "INPUTS_HEADING",
    "MEMORY_HEADING",
    "Artifact",
    "Markers",
    "RenderError",
    "RenderedPrompt",
    "fence",
    "new_marker",
    "render_prompt",
    "untrusted_preface",
]
