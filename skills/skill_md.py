"""Parse one skill directory: `SKILL.md` (YAML frontmatter + Markdown body) and its resources.

The format follows the paper's §6.1 SKILL.md representation of a skill record (Eq. 66): `name`
and `description` in the frontmatter, the procedure as Markdown, and optional `scripts/`,
`references/` and `assets/` directories. Every refusal is a `SkillFormatError` naming the file,
what is wrong and how to fix it, so `doctor` and the catalog's log can show it as is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from skills.model import Skill

SKILL_FILE = "SKILL.md"
MAX_SKILL_MD_BYTES = 64 * 1024
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
RESOURCE_DIRS = ("scripts", "references", "assets")
# Kebab-case: lowercase letters and digits in runs joined by single hyphens.
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

_FENCE = "---"
_FRONTMATTER_HINT = "start the file with a line '---', then name: and description:, then '---'"
# Interpreter and editor droppings are not resources a skill means to ship.
_IGNORED_NAMES = frozenset({"__pycache__", ".DS_Store"})
_SHOWN_CHARS = 80  # of the offending YAML line quoted in an error


class SkillFormatError(ValueError):
    """A skill directory that cannot be loaded: `path` is the file, `problem` what to fix."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def load_skill_dir(directory: Path, origin: str = "bundled") -> Skill:
    """Parse `directory/SKILL.md` and list its resources; the skill's id is the directory name.

    Blocking file I/O: async callers run it with `asyncio.to_thread`.
    """
    path = directory / SKILL_FILE
    text = _read_skill_md(directory, path)
    name, description, metadata, body = parse_skill_md(text, path)
    return Skill(
        id=directory.name,
        name=name,
        description=description,
        body=body,
        directory=directory,
        scripts=list_resources(directory, "scripts"),
        references=list_resources(directory, "references"),
        assets=list_resources(directory, "assets"),
        metadata=metadata,
        origin=origin,
    )


def parse_skill_md(text: str, path: Path | str) -> tuple[str, str, dict[str, Any], str]:
    """Split SKILL.md text into (name, description, metadata, body), validating each field.

    Frontmatter keys other than name, description and metadata (e.g. `license`) are kept in
    the metadata; an explicit `metadata:` entry wins over a top-level key of the same name.
    """
    frontmatter, body = _split_frontmatter(text, path)
    fields = _load_yaml(frontmatter, path)
    name = _check_name(fields.get("name"), path)
    description = _check_description(fields.get("description"), path)
    metadata = _check_metadata(fields.get("metadata"), path)
    extras = {str(k): v for k, v in fields.items() if k not in ("name", "description", "metadata")}
    if not body:
        raise SkillFormatError(
            path, "empty body: write the procedure in Markdown after the closing '---' line"
        )
    return name, description, {**extras, **metadata}, body


def list_resources(directory: Path, kind: str) -> tuple[str, ...]:
    """Regular files under `directory/kind`, as sorted paths relative to `directory`.

    Symlinks are followed only when they stay inside the skill directory, so a skill cannot
    expose files from elsewhere on the machine; symlinked subdirectories are not entered.
    """
    root = directory / kind
    if not root.is_dir():
        return ()
    base = directory.resolve()
    if not _inside(root.resolve(), base):
        return ()
    found: list[str] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if not _ignored(d) and not Path(current, d).is_symlink()]
        for file_name in files:
            candidate = Path(current, file_name)
            if not _ignored(file_name) and _is_own_file(candidate, base):
                found.append(candidate.relative_to(directory).as_posix())
    return tuple(sorted(found))


def _read_skill_md(directory: Path, path: Path) -> str:
    if not path.is_file():
        raise SkillFormatError(
            path, f"no {SKILL_FILE} in this skill directory: create one, or remove the directory"
        )
    if not _inside(path.resolve(), directory.resolve()):
        raise SkillFormatError(
            path, f"{SKILL_FILE} is a symlink to a file outside the skill directory: copy it in"
        )
    size = path.stat().st_size
    if size > MAX_SKILL_MD_BYTES:
        raise SkillFormatError(path, _oversized(size))
    data = path.read_bytes()
    # The file may have grown between stat and read.
    if len(data) > MAX_SKILL_MD_BYTES:
        raise SkillFormatError(path, _oversized(len(data)))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFormatError(
            path, f"not valid UTF-8 (byte {exc.start}: {exc.reason}): save the file as UTF-8"
        ) from None


def _oversized(size: int) -> str:
    return (
        f"oversized: {size:,} bytes, over the {MAX_SKILL_MD_BYTES:,}-byte limit (64 KiB): "
        "keep the procedure short and move long material into references/"
    )


def _split_frontmatter(text: str, path: Path | str) -> tuple[str, str]:
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        raise SkillFormatError(path, f"no YAML frontmatter: {_FRONTMATTER_HINT}")
    for index in range(1, len(lines)):
        if lines[index].strip() == _FENCE:
            return "".join(lines[1:index]), "".join(lines[index + 1 :]).strip()
    raise SkillFormatError(
        path, "the YAML frontmatter is not closed: add a line '---' after the description"
    )


def _load_yaml(frontmatter: str, path: Path | str) -> Mapping[Any, Any]:
    try:
        fields = yaml.safe_load(frontmatter)
    except yaml.YAMLError as exc:
        raise SkillFormatError(path, _yaml_problem(exc, frontmatter)) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise SkillFormatError(
            path, "the YAML frontmatter is nested too deeply: keep it to a few levels"
        ) from None
    if fields is None:
        raise SkillFormatError(path, f"the YAML frontmatter is empty: {_FRONTMATTER_HINT}")
    if not isinstance(fields, Mapping):
        raise SkillFormatError(
            path,
            f"the YAML frontmatter is {_type_name(fields)}, not a mapping: "
            "write 'key: value' lines (name: ..., description: ...)",
        )
    return fields


def _yaml_problem(exc: yaml.YAMLError, frontmatter: str) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return f"invalid YAML in the frontmatter: {problem}"
    # The frontmatter starts on the file's second line; marks count lines from zero.
    line_no, column = mark.line + 2, mark.column + 1
    lines = frontmatter.splitlines()
    shown = lines[mark.line].strip() if mark.line < len(lines) else ""
    if len(shown) > _SHOWN_CHARS:
        shown = shown[: _SHOWN_CHARS - 1] + "…"
    return (
        f"invalid YAML in the frontmatter at line {line_no}, column {column} ({shown!r}): "
        f"{problem}: check the indentation, and quote values that contain ': ' or ' #'"
    )


def _check_name(value: object, path: Path | str) -> str:
    if value is None:
        raise SkillFormatError(
            path,
            "missing 'name' in the frontmatter: add a line 'name: my-skill' "
            "(lowercase letters, digits and hyphens)",
        )
    if not isinstance(value, str):
        raise SkillFormatError(
            path, f"'name' must be a string, got {_type_name(value)} {value!r}: quote it"
        )
    if not 1 <= len(value) <= MAX_NAME_CHARS:
        raise SkillFormatError(
            path,
            f"'name' is {len(value)} characters; it must be 1 to {MAX_NAME_CHARS}: shorten it",
        )
    if not NAME_PATTERN.match(value):
        raise SkillFormatError(
            path,
            f"'name' {value!r} is not kebab-case: use lowercase letters, digits and single "
            "hyphens between them (e.g. 'svg-chart')",
        )
    return value


def _check_description(value: object, path: Path | str) -> str:
    if value is None:
        raise SkillFormatError(
            path,
            "missing 'description' in the frontmatter: add 'description: ...' saying in one "
            "or two sentences what the skill does and when to use it",
        )
    if not isinstance(value, str):
        raise SkillFormatError(
            path,
            f"'description' must be a string, got {_type_name(value)} {value!r}: "
            "write it as text (quote it if it starts with a special character)",
        )
    text = value.strip()
    if not 1 <= len(text) <= MAX_DESCRIPTION_CHARS:
        raise SkillFormatError(
            path,
            f"'description' is {len(text)} characters; it must be 1 to "
            f"{MAX_DESCRIPTION_CHARS}: say what the skill does and when to use it",
        )
    return text


def _check_metadata(value: object, path: Path | str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SkillFormatError(
            path,
            f"'metadata' must be a mapping, got {_type_name(value)}: "
            "indent 'key: value' lines under 'metadata:'",
        )
    return {str(key): item for key, item in value.items()}


def _type_name(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", list: "a list"}
    return names.get(type(value), f"a {type(value).__name__}")


def _ignored(name: str) -> bool:
    return name in _IGNORED_NAMES or name.startswith(".")


def _inside(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


def _is_own_file(candidate: Path, base: Path) -> bool:
    try:
        resolved = candidate.resolve(strict=True)
    except OSError:  # a dangling symlink
        return False
    return resolved.is_file() and _inside(resolved, base)


__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "MAX_SKILL_MD_BYTES",
    "RESOURCE_DIRS",
    "SKILL_FILE",
    "SkillFormatError",
    "list_resources",
    "load_skill_dir",
    "parse_skill_md",
]
