"""Structure, the second group (files): every file a node names is inside the workspace and
exists, and is a regular file where its content is to be inserted."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping

from host.graph.admission.errors import AdmissionError
from host.graph.admission.grammar import Placeholder
from host.graph.admission.paths import confine_path
from host.graph.model import AdmissionContext, FileInput, GraphSubmission, NodeSpec


def _check_file(
    spec: NodeSpec, raw: str, field: str, need_content: bool, ctx: AdmissionContext
) -> None:
    try:
        path = confine_path(ctx.workspace, raw)
    except ValueError as exc:
        raise AdmissionError(
            "structure",
            str(exc),
            node=spec.id,
            field=field,
            repair="use a path inside the conversation workspace (relative paths are resolved "
            "against it); copy the file there first if needed",
        ) from None
    if not path.exists():
        repair = "create the file first or fix the path"
        if path.parent.is_dir():
            close = difflib.get_close_matches(path.name, os.listdir(path.parent), n=1)
            if close:
                rel = (path.parent / close[0]).relative_to(ctx.workspace.resolve())
                repair = f"did you mean `{rel.as_posix()}`? Otherwise {repair}"
        raise AdmissionError(
            "structure",
            f"file `{raw}` does not exist in the workspace",
            node=spec.id,
            field=field,
            repair=repair,
        )
    if need_content and not path.is_file():
        raise AdmissionError(
            "structure",
            f"`{raw}` is not a regular file, so its content cannot be inserted",
            node=spec.id,
            field=field,
            repair="pass a directory by path (`{{ref_path:...}}` or `{{inputs.k.path}}`) to a "
            "file-capable agent, or name a file",
        )


def check_files(
    submission: GraphSubmission,
    placeholders: Mapping[str, list[Placeholder]],
    ctx: AdmissionContext,
) -> None:
    for spec in submission.nodes:
        phs = placeholders[spec.id]
        for name, binding in spec.inputs.items():
            if isinstance(binding, FileInput):
                uses = {
                    ph.kind
                    for ph in phs
                    if ph.kind in ("input", "input_path") and ph.target == name
                }
                # Only a path is passed when every use is `.path`; otherwise content is read
                # (unreferenced inputs are appended to the prompt as content).
                need_content = uses != {"input_path"}
                _check_file(spec, binding.file, f"inputs.{name}", need_content, ctx)
        for ph in phs:
            if ph.kind in ("ref", "ref_path"):
                _check_file(spec, ph.target, "template", ph.kind == "ref", ctx)
