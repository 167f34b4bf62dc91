"""The local SKILL.md catalog: parsing, refusals, overrides, hot reload, search, bundled skills."""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import skills.catalog as catalog_module
from skills.catalog import BUNDLED_DIR, LocalCatalog, tokenize
from skills.model import Skill, SkillSource
from skills.skill_md import MAX_SKILL_MD_BYTES, SkillFormatError, load_skill_dir

BODY = "# Steps\n\n1. Do the first thing.\n2. Check it worked.\n"


def write_skill(
    root: Path,
    directory: str,
    *,
    name: str | None = None,
    description: str = "Do a thing. Use when asked to do the thing.",
    body: str = BODY,
    extra: str = "",
) -> Path:
    """Write `root/directory/SKILL.md` with the given fields; returns the SKILL.md path."""
    path = root / directory / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"---\nname: {name or directory}\ndescription: {description}\n{extra}---\n{body}",
        encoding="utf-8",
    )
    return path


def write_raw(root: Path, directory: str, text: str) -> Path:
    """Write SKILL.md with exactly `text`."""
    path = root / directory / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def problem_of(directory: Path) -> SkillFormatError:
    """The error loading `directory` raises (fails the test if it loads)."""
    with pytest.raises(SkillFormatError) as info:
        load_skill_dir(directory, "user")
    return info.value


@pytest.fixture
def user_dir(isolated_env: Path) -> Path:
    """RAVEN_HOME/skills, not created yet."""
    return isolated_env / "skills"


# --- SKILL.md parsing ---------------------------------------------------------------------


def test_valid_skill_with_resources(tmp_path: Path) -> None:
    path = write_skill(
        tmp_path,
        "csv-tools",
        description="Convert CSV files. Use when a CSV must become JSON.",
        extra="license: MIT\nmetadata:\n  owner: alice\n  tags: [csv, json]\n",
    )
    skill_dir = path.parent
    (skill_dir / "scripts" / "lib").mkdir(parents=True)
    (skill_dir / "scripts" / "convert.py").write_text("print('hi')\n")
    (skill_dir / "scripts" / "lib" / "util.py").write_text("")
    (skill_dir / "scripts" / "__pycache__").mkdir()
    (skill_dir / "scripts" / "__pycache__" / "convert.cpython-311.pyc").write_bytes(b"\0")
    (skill_dir / "scripts" / ".hidden").write_text("")
    (skill_dir / "references").mkdir()
    (skill_dir / "references" / "format.md").write_text("# Format\n")
    (skill_dir / "assets").mkdir()
    (skill_dir / "assets" / "template.json").write_text("{}")
    (skill_dir / "notes.txt").write_text("not a resource directory")

    skill = load_skill_dir(skill_dir, "user")

    assert skill.id == "csv-tools" and skill.name == "csv-tools" and skill.origin == "user"
    assert skill.description == "Convert CSV files. Use when a CSV must become JSON."
    assert skill.body == BODY.strip()
    assert skill.scripts == ("scripts/convert.py", "scripts/lib/util.py")
    assert skill.references == ("references/format.md",)
    assert skill.assets == ("assets/template.json",)
    assert dict(skill.metadata) == {"license": "MIT", "owner": "alice", "tags": ["csv", "json"]}
    assert all(p.is_file() for p in skill.resources())


def test_resource_symlinks_must_stay_inside_the_skill(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("do not ship me")
    skill_dir = write_skill(tmp_path / "root", "linky").parent
    scripts = skill_dir / "scripts"
    scripts.mkdir()
    (scripts / "run.sh").write_text("echo run\n")
    (scripts / "inside.sh").symlink_to(scripts / "run.sh")
    (scripts / "escape.txt").symlink_to(outside)
    (scripts / "dangling").symlink_to(tmp_path / "missing")
    (skill_dir / "references").symlink_to(tmp_path)  # a whole directory outside

    skill = load_skill_dir(skill_dir)

    assert skill.scripts == ("scripts/inside.sh", "scripts/run.sh")
    assert skill.references == ()


def test_directory_name_is_the_id_and_name_comes_from_frontmatter(tmp_path: Path) -> None:
    skill = load_skill_dir(write_skill(tmp_path, "dir-name", name="display-name").parent)
    assert (skill.id, skill.name) == ("dir-name", "display-name")


def test_missing_frontmatter_says_how_to_start_the_file(tmp_path: Path) -> None:
    path = write_raw(tmp_path, "plain", "# Just Markdown\n\nname: x\n")
    error = problem_of(path.parent)
    assert error.path == path
    assert str(error) == (
        f"{path}: no YAML frontmatter: start the file with a line '---', "
        "then name: and description:, then '---'"
    )


def test_unclosed_frontmatter(tmp_path: Path) -> None:
    path = write_raw(tmp_path, "open", "---\nname: open\ndescription: x\n# Body\n")
    assert "not closed: add a line '---'" in str(problem_of(path.parent))


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    text = "---\nname: broken\ndescription: Use it: when things break\n---\nbody\n"
    path = write_raw(tmp_path, "broken", text)
    message = str(problem_of(path.parent))
    assert message.startswith(f"{path}: invalid YAML in the frontmatter at line 3")
    assert "description: Use it: when things break" in message
    assert "mapping values are not allowed here" in message
    assert "quote values" in message


def test_frontmatter_must_be_a_mapping(tmp_path: Path) -> None:
    path = write_raw(tmp_path, "listy", "---\n- name\n- description\n---\nbody\n")
    assert "is a list, not a mapping" in str(problem_of(path.parent))


def test_missing_name(tmp_path: Path) -> None:
    path = write_raw(tmp_path, "anon", "---\ndescription: Something.\n---\nbody\n")
    message = str(problem_of(path.parent))
    assert message == (
        f"{path}: missing 'name' in the frontmatter: add a line 'name: my-skill' "
        "(lowercase letters, digits and hyphens)"
    )


def test_missing_description(tmp_path: Path) -> None:
    path = write_raw(tmp_path, "mute", "---\nname: mute\n---\nbody\n")
    assert "missing 'description' in the frontmatter" in str(problem_of(path.parent))


def test_non_string_description(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "numeric", description="42")
    message = str(problem_of(path.parent))
    assert message.startswith(f"{path}: 'description' must be a string, got an integer 42")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Bad_Name", "is not kebab-case"),
        ("-leading", "is not kebab-case"),
        ("a" * 65, "'name' is 65 characters; it must be 1 to 64"),
        ("123", None),  # YAML reads it as an integer
    ],
)
def test_bad_names(tmp_path: Path, name: str, expected: str | None) -> None:
    path = write_skill(tmp_path, "skill", name=name)
    message = str(problem_of(path.parent))
    assert (expected or "'name' must be a string, got an integer 123") in message


def test_overlong_description(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "wordy", description="x" * 1025)
    assert "'description' is 1025 characters; it must be 1 to 1024" in str(problem_of(path.parent))


def test_metadata_must_be_a_mapping(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "meta", extra="metadata: [1, 2]\n")
    assert "'metadata' must be a mapping, got a list" in str(problem_of(path.parent))


def test_empty_body(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "hollow", body="\n   \n")
    assert str(problem_of(path.parent)) == (
        f"{path}: empty body: write the procedure in Markdown after the closing '---' line"
    )


def test_oversized_file_is_refused_with_size_and_limit(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "huge", body="x" * MAX_SKILL_MD_BYTES)
    size = path.stat().st_size
    message = str(problem_of(path.parent))
    assert message.startswith(f"{path}: oversized: {size:,} bytes, over the 65,536-byte limit")
    assert "references/" in message


def test_deeply_nested_yaml_is_refused_not_a_crash(tmp_path: Path) -> None:
    nested = "[" * 20_000 + "]" * 20_000
    path = write_skill(tmp_path, "deep", extra=f"metadata: {nested}\n")
    assert "nested too deeply" in str(problem_of(path.parent))


def test_missing_skill_md_and_bad_encoding(tmp_path: Path) -> None:
    (tmp_path / "empty-dir").mkdir()
    assert "no SKILL.md in this skill directory" in str(problem_of(tmp_path / "empty-dir"))
    path = tmp_path / "latin" / "SKILL.md"
    path.parent.mkdir()
    path.write_bytes(b"---\nname: latin\ndescription: caf\xe9\n---\nbody\n")
    assert "not valid UTF-8" in str(problem_of(path.parent))


def test_tokenizer_splits_cases_and_drops_stopwords() -> None:
    assert tokenize("How to run the pytest_suite for getHTTPResponse in kebab-case CSV2SVG") == [
        "run",
        "pytest",
        "suite",
        "get",
        "http",
        "response",
        "kebab",
        "case",
        "csv2svg",
    ]
    assert tokenize("") == [] and tokenize("the of and") == []


# --- the catalog --------------------------------------------------------------------------


async def test_catalog_is_a_skill_source(user_dir: Path) -> None:
    catalog: SkillSource = LocalCatalog(user_dir)
    assert catalog.name == "local"


async def test_all_bundled_skills_parse_cleanly(user_dir: Path) -> None:
    catalog = LocalCatalog(user_dir)  # the user directory does not exist: that is fine
    skills = await catalog.skills()
    assert catalog.load_problems == []
    assert len(skills) >= 8
    assert [s.name for s in skills] == sorted(s.name for s in skills)
    for skill in skills:
        assert skill.origin == "bundled" and skill.id == skill.name
        assert "Use when" in skill.description
        assert 15 <= len(skill.body.splitlines()) <= 60, skill.name
        assert all(path.is_file() for path in skill.resources())
    assert sum(1 for s in skills if s.scripts) >= 2
    assert any(s.references for s in skills)


async def test_broken_user_skill_is_skipped_with_one_warning(
    user_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_skill(user_dir, "good-one")
    broken = write_raw(user_dir, "bad-one", "no frontmatter here\n")
    catalog = LocalCatalog(user_dir, bundled_dir=None, reload_interval=0)
    with caplog.at_level(logging.INFO, logger="skills.catalog"):
        names = [s.name for s in await catalog.skills()]
        await catalog.search("anything", 3)  # a second look at an unchanged directory
    assert names == ["good-one"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(broken) in warnings[0].getMessage()
    assert "no YAML frontmatter" in warnings[0].getMessage()
    assert catalog.load_problems == [
        (broken, problem_of(broken.parent).problem),
    ]


async def test_user_skill_overrides_a_bundled_one(
    user_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_skill(user_dir, "svg-chart", description="Our house style for charts. Use when asked.")
    catalog = LocalCatalog(user_dir)
    with caplog.at_level(logging.INFO, logger="skills.catalog"):
        skill = await catalog.get("svg-chart")
    assert skill is not None
    assert skill.origin == "user" and skill.description.startswith("Our house style")
    assert [s.name for s in await catalog.skills()].count("svg-chart") == 1
    overrides = [r.getMessage() for r in caplog.records if "overrides" in r.getMessage()]
    assert len(overrides) == 1 and str(user_dir / "svg-chart" / "SKILL.md") in overrides[0]
    assert (await catalog.get("run-test-suite")) is not None  # the other bundled ones stay


async def test_duplicate_user_names_keep_the_first(user_dir: Path) -> None:
    write_skill(user_dir, "a-dir", name="same-name")
    second = write_skill(user_dir, "b-dir", name="same-name")
    catalog = LocalCatalog(user_dir, bundled_dir=None)
    skill = await catalog.get("same-name")
    assert skill is not None and skill.id == "a-dir"
    ((path, problem),) = catalog.load_problems
    assert path == second and "duplicate skill name 'same-name'" in problem


async def test_hot_reload_add_edit_delete(user_dir: Path) -> None:
    catalog = LocalCatalog(user_dir, bundled_dir=None, reload_interval=0)
    assert await catalog.skills() == []

    await asyncio.to_thread(write_skill, user_dir, "fresh", description="First words.")
    skill = await catalog.get("fresh")
    assert skill is not None and skill.description == "First words."

    # A longer description: the size changes even where mtimes are coarse.
    await asyncio.to_thread(
        write_skill, user_dir, "fresh", description="Second, longer words about zebras."
    )
    skill = await catalog.get("fresh")
    assert skill is not None and skill.description == "Second, longer words about zebras."
    assert [h.name for h in await catalog.search("zebras", 3)] == ["fresh"]

    await asyncio.to_thread(shutil.rmtree, user_dir / "fresh")
    assert await catalog.get("fresh") is None
    assert await catalog.search("zebras", 3) == []


async def test_reload_waits_for_the_interval(user_dir: Path) -> None:
    now = [100.0]
    catalog = LocalCatalog(user_dir, bundled_dir=None, reload_interval=2.0, clock=lambda: now[0])
    assert await catalog.skills() == []
    await asyncio.to_thread(write_skill, user_dir, "later")
    now[0] += 1.9
    assert await catalog.skills() == []  # checked at most once per interval
    now[0] += 0.2
    assert [s.name for s in await catalog.skills()] == ["later"]


async def test_refresh_rescans_whatever_the_interval(user_dir: Path) -> None:
    catalog = LocalCatalog(user_dir, bundled_dir=None, reload_interval=3600)
    assert await catalog.skills() == []
    await asyncio.to_thread(write_skill, user_dir, "forced")
    assert await catalog.skills() == []
    await catalog.refresh()
    assert [s.name for s in await catalog.skills()] == ["forced"]


async def test_a_fixed_skill_reloads_and_its_problem_clears(user_dir: Path) -> None:
    path = await asyncio.to_thread(write_raw, user_dir, "fixme", "---\nname: fixme\n---\nbody\n")
    catalog = LocalCatalog(user_dir, bundled_dir=None, reload_interval=0)
    assert await catalog.skills() == []
    assert [p for p, _ in catalog.load_problems] == [path]
    await asyncio.to_thread(write_skill, user_dir, "fixme")
    assert [s.name for s in await catalog.skills()] == ["fixme"]
    assert catalog.load_problems == []


async def test_stray_skill_md_at_the_root_is_reported(user_dir: Path) -> None:
    await asyncio.to_thread(write_skill, user_dir.parent, user_dir.name)  # user_dir/SKILL.md
    catalog = LocalCatalog(user_dir, bundled_dir=None)
    assert await catalog.skills() == []
    ((path, problem),) = catalog.load_problems
    assert path == user_dir / "SKILL.md" and "own directory" in problem


async def test_empty_catalog_searches_nothing(user_dir: Path) -> None:
    catalog = LocalCatalog(user_dir, bundled_dir=None)
    assert await catalog.search("svg chart", 5) == []
    assert await catalog.get("svg-chart") is None


async def test_search_ranks_by_name_and_description(user_dir: Path) -> None:
    catalog = LocalCatalog(user_dir)
    hits = await catalog.search("svg chart from csv", 5)
    assert hits[0].name == "svg-chart" and hits[0].source == "local"
    assert hits[0].qid == "local/svg-chart"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)

    top2 = [h.name for h in await catalog.search("pytest failures", 2)]
    assert {"run-test-suite", "fix-failing-test"} & set(top2)

    expectations = {
        "review this pull request": "code-review",
        "the training loss became NaN": "monitor-training-run",
        "write the campaign report with the baseline": "campaign-report",
        "production outage, triage the incident": "incident-triage",
        "research brief with citations": "research-brief",
        "write a small Python script": "python-script",
    }
    for query, expected in expectations.items():
        assert (await catalog.search(query, 1))[0].name == expected, query
    assert await catalog.search("xyzzy plugh", 5) == []
    assert await catalog.search("the of and", 5) == []
    assert len(await catalog.search("test", 2)) <= 2


async def test_concurrent_searches_share_one_scan(user_dir: Path) -> None:
    catalog = LocalCatalog(user_dir, reload_interval=0)
    results = await asyncio.gather(*(catalog.search("svg chart", 3) for _ in range(10)))
    assert all(r[0].name == "svg-chart" for r in results)


# --- bundled scripts ----------------------------------------------------------------------


async def _run(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


async def test_svg_chart_script_renders_parseable_svg(tmp_path: Path) -> None:
    skill = await LocalCatalog(None).get("svg-chart")
    assert skill is not None and skill.directory is not None
    script = skill.directory / "scripts" / "csv_to_svg.py"
    data = tmp_path / "data.csv"
    await asyncio.to_thread(_write, data, "month,sales,costs\nJan,120,80\nFeb,150,\nMar,-20,95\n")

    for kind in ("bar", "line"):
        out = tmp_path / f"{kind}.svg"
        args = [str(data), "-o", str(out), "--kind", kind, "--y", "sales", "--y", "costs"]
        code, stdout, stderr = await _run(str(script), *args, "--title", "Sales & costs")
        assert code == 0, stderr
        assert "wrote" in stdout
        root = (await asyncio.to_thread(ET.parse, out)).getroot()
        ns = "{http://www.w3.org/2000/svg}"
        assert root.tag == f"{ns}svg" and root.get("viewBox") == "0 0 640 400"
        assert root.findtext(f"{ns}title") == "Sales & costs"
        texts = {t.text for t in root.iter(f"{ns}text")}
        assert {"Jan", "Feb", "Mar", "month", "sales", "costs", "0"} <= texts
        marks = "rect" if kind == "bar" else "circle"
        # Bars: background + 5 values + 2 legend keys; circles: one per non-empty value.
        assert len(list(root.iter(f"{ns}{marks}"))) == (8 if kind == "bar" else 5)

    await asyncio.to_thread(_write, data, "month,sales\nJan,lots\n")
    code, _, stderr = await _run(str(script), str(data), "-o", str(tmp_path / "bad.svg"))
    assert code == 2 and "row 2, column 'sales': 'lots' is not a number" in stderr


async def test_check_metrics_script_flags_nan_and_stall(tmp_path: Path) -> None:
    script = BUNDLED_DIR / "monitor-training-run" / "scripts" / "check_metrics.py"
    log = tmp_path / "train.log"
    await asyncio.to_thread(_write, log, "step 1 loss=0.9\nstep 2 loss=0.5\nstep 3 loss=nan\n")
    code, stdout, _ = await _run(str(script), str(log), "--metric", "loss")
    assert code == 4 and "verdict: NAN" in stdout

    lines = "".join(f'{{"step": {i}, "loss": {max(1.0 - i / 10, 0.4)}}}\n' for i in range(40))
    await asyncio.to_thread(_write, log, lines)
    code, stdout, _ = await _run(str(script), str(log), "--patience", "20")
    assert code == 3 and "verdict: STALLED" in stdout

    lines = "".join(f"step {i} loss={1.0 / (i + 1):.4f}\n" for i in range(40))
    await asyncio.to_thread(_write, log, lines)
    code, stdout, _ = await _run(str(script), str(log), "--patience", "20")
    assert code == 0 and "verdict: HEALTHY" in stdout


async def test_unreadable_skill_is_a_problem_not_a_crash(
    user_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(write_skill, user_dir, "locked")
    await asyncio.to_thread(write_skill, user_dir, "open-one")
    real = load_skill_dir

    def load(directory: Path, origin: str = "bundled") -> Skill:
        # Root ignores file permissions, so a chmod cannot make this fail in every sandbox.
        if directory.name == "locked":
            raise PermissionError(13, "Permission denied", str(directory / "SKILL.md"))
        return real(directory, origin)

    monkeypatch.setattr(catalog_module, "load_skill_dir", load)
    catalog = LocalCatalog(user_dir, bundled_dir=None)
    assert [s.name for s in await catalog.skills()] == ["open-one"]
    ((path, problem),) = catalog.load_problems
    assert path == user_dir / "locked" / "SKILL.md"
    assert problem == "cannot read it: Permission denied"
