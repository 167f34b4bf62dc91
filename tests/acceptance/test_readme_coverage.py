"""Every runnable example of the README is run by an acceptance test.

Each acceptance test module lists the README text it runs in `README_EXAMPLES` (exact
snippets; a part of a block is fine). This check extracts every fenced code block and every
inline `raven-bot …` command from README.md and fails for one no module lists (unless exempt
below, with the reason), and for a listed snippet the README no longer contains (the test
would run something else)."""

from __future__ import annotations

import importlib
import pkgutil

import tests.acceptance
from tests.acceptance.readme import examples, fenced_blocks, inline_spans, readme_text

# README examples no acceptance test runs, by their first line, each with the reason.
EXEMPT: dict[str, str] = {
    "make run    # creates .venv if missing, installs, starts the bot": (
        "`make run` (re)installs into .venv and then runs `raven-bot run`, which the platform "
        "and console tests run; `make test` is the whole suite this check is part of"
    ),
    "bot/      the edge: settings, assembly root (bot/app.py), channel contract and registry": (
        "the source tree's layout, not something to run"
    ),
}


def _declared() -> dict[str, list[str]]:
    """Each snippet the acceptance modules declare, with the modules declaring it."""
    declared: dict[str, list[str]] = {}
    for info in pkgutil.iter_modules(tests.acceptance.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"tests.acceptance.{info.name}")
        for snippet in getattr(module, "README_EXAMPLES", ()):
            declared.setdefault(snippet, []).append(info.name)
    return declared


def _exempt(example: str) -> bool:
    return example.splitlines()[0] in EXEMPT


def test_the_extraction_sees_the_readme_examples() -> None:
    # Guards the check itself: a broken extraction would make it pass vacuously.
    found = examples()
    assert "printf 'hello\\n' | .venv/bin/raven-bot chat" in found
    assert any(block.startswith("[agents.reviewer]") for block in found)
    assert "raven-bot runs list" in found
    assert len(fenced_blocks(readme_text())) >= 8


def test_every_readme_example_is_run_by_an_acceptance_test() -> None:
    declared = _declared()
    missing = [e for e in examples() if e not in declared and not _exempt(e)]
    assert not missing, "README examples no acceptance test runs:\n" + "\n---\n".join(missing)


def test_every_declared_example_is_in_the_readme() -> None:
    text = readme_text()
    blocks = fenced_blocks(text)
    spans = set(inline_spans(text))
    stale = [
        f"{modules}: {snippet!r}"
        for snippet, modules in _declared().items()
        if snippet not in spans and not any(snippet in block for block in blocks)
    ]
    assert not stale, "declared but not in README.md (inline code, or in a block):\n" + "\n".join(
        stale
    )


def test_every_exemption_still_names_a_readme_example() -> None:
    firsts = {example.splitlines()[0] for example in examples()}
    assert not set(EXEMPT) - firsts, set(EXEMPT) - firsts
