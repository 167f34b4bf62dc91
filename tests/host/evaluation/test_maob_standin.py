"""The stand-in task set shipped with raven-bot: it loads, covers every combination of two
or more domains, mixes serial and parallel references, and its requests pass the leakage
filter (they name neither steps nor domains)."""

from __future__ import annotations

import itertools
import re
from importlib import resources
from pathlib import Path

from host.evaluation.maob.formats import DOMAINS, read_tasks
from host.evaluation.maob.scoring import fold

LEAKAGE = re.compile(
    r"\b(first|then|finally|afterwards|next|steps?|research(er)?|cod(e|ing)|program|script|"
    r"deck|slides|presentation|content|on-?call|monitor(ing)?|domain|agent|specialist|"
    r"subagent)\b",
    re.IGNORECASE,
)


def _tasks() -> list:  # type: ignore[type-arg]
    path = resources.files("host.evaluation.maob").joinpath("standin_tasks.jsonl")
    return read_tasks(Path(str(path)))


def test_the_standin_set_covers_every_combination_and_both_shapes() -> None:
    tasks = _tasks()
    assert len(tasks) >= 44
    combos = {frozenset(c) for n in (2, 3, 4) for c in itertools.combinations(DOMAINS, n)}
    seen = [fold(t.reference).domains for t in tasks]
    assert combos <= set(seen)
    parallel = 0
    for task in tasks:
        folded = fold(task.reference)
        pairs = itertools.combinations(sorted(folded.domains), 2)
        parallel += any(folded.relation(u, v) == "unordered" for u, v in pairs)
        assert 2 <= len(task.reference.nodes) <= 4 and task.accepted
    assert 0.2 <= parallel / len(tasks) <= 0.4  # about 30 % with parallel branches


def test_standin_requests_name_neither_steps_nor_domains() -> None:
    leaks = [(t.id, m.group(0)) for t in _tasks() if (m := LEAKAGE.search(t.request))]
    assert not leaks
