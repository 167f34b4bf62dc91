"""The README's planning-evaluation and harness-evolution examples, typed as written in a
shell with the bot installed: the prediction line scored with `eval score` against the shipped
stand-in set, `eval plans` refusing to run without a key, the evolve task line read by
`evolve` itself, and `harness list` on a fresh home. (`eval plans`, `evolve` and every
`harness` action against a model run in tests/bot/cli/test_cli_eval.py and
test_cli_evolve.py, against the fake Anthropic server.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.acceptance.harness import product_env, project_dir, sh
from tests.acceptance.readme import fenced_blocks, readme_text

pytestmark = pytest.mark.slow

PREDICTION = (
    '{"id": "standin-001", "nodes": [{"id": "r1", "domain": "research"}, {"id": "k1", '
    '"domain": "coding"}], "edges": [["r1", "k1"]]}'
)
SCORE = "raven-bot eval score predictions.jsonl --json"
TASK = '{"id": "sum", "prompt": "What is 2+3?", "verify": {"exact": "5"}}'
README_EXAMPLES = [
    PREDICTION,
    SCORE,
    TASK,
    "raven-bot harness list",
    "raven-bot eval plans [--tasks FILE] [--attempts K] [--json]",
    "raven-bot eval score PRED.jsonl [--tasks FILE] [--json]",
    "raven-bot evolve AGENT --tasks FILE",
    "raven-bot harness list\\|show\\|diff\\|promote\\|rollback",
    "raven-bot evolve code --tasks tasks.jsonl",
    "raven-bot eval",
    "raven-bot evolve",
]


def _block_with(text: str) -> str:
    return next(b for b in fenced_blocks(readme_text()) if text in b)


def test_readme_prediction_is_scored_against_the_standin_set(tmp_path: Path) -> None:
    cwd = project_dir(tmp_path / "project")
    (cwd / "predictions.jsonl").write_text(_block_with('"standin-001"') + "\n", encoding="utf-8")
    env = product_env(tmp_path / "home")
    done = sh(_block_with("eval score").strip(), env=env, cwd=cwd)
    assert done.code == 0, done.both
    report = json.loads(done.out)
    first = next(r for r in report["tasks"] if r["id"] == "standin-001")
    assert first["predicted"] and first["node_f1"] is not None
    assert report["defined"]["node_f1"] >= 44  # every stand-in task is a record
    # The other 43 tasks had no prediction: each scores as the empty graph.
    assert sum(r["predicted"] for r in report["tasks"]) == 1


def test_eval_plans_without_a_key_says_so(tmp_path: Path) -> None:
    cwd = project_dir(tmp_path / "project")
    done = sh("raven-bot eval plans --attempts 1", env=product_env(tmp_path / "home"), cwd=cwd)
    assert done.code == 2 and "needs a model" in done.err and done.out == ""


def test_readme_task_line_is_a_valid_evolve_task_file(tmp_path: Path) -> None:
    cwd = project_dir(tmp_path / "project")
    line = _block_with('"verify"').strip()
    (cwd / "tasks.jsonl").write_text(line + "\n" + line.replace('"sum"', '"sum2"') + "\n")
    done = sh(
        "raven-bot evolve code --tasks tasks.jsonl", env=product_env(tmp_path / "home"), cwd=cwd
    )
    # The file is read and accepted; what stops it is the missing model key.
    assert done.code == 2 and "needs a model" in done.err, done.both


def test_harness_list_on_a_fresh_home(tmp_path: Path) -> None:
    cwd = project_dir(tmp_path / "project")
    done = sh(_block_with("harness list").strip(), env=product_env(tmp_path / "home"), cwd=cwd)
    assert done.code == 0 and re.search(r"built-in", done.out), done.both
