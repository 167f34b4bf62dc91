"""`raven-bot memory …` in a real process (keyword recall, so no model load)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import _env, _run

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow


async def test_add_search_show_forget_and_reindex(isolated_env: Path) -> None:
    env = _env(isolated_env)
    code, out, err = await _run(
        "memory", "add", "--user", "U7", "deploys with helm charts", env=env
    )
    assert code == 0, err
    assert "user:cli:local:U7" in out
    code, out, _ = await _run("memory", "search", "--user", "U7", "--json", "helm", env=env)
    (hit,) = json.loads(out)
    assert {"text", "score", "kind"} <= set(hit) and hit["text"] == "deploys with helm charts"
    shutil.rmtree(isolated_env / "index")  # derived: a missing index is rebuilt from SQLite
    code, out, _ = await _run("memory", "search", "--user", "U7", "--json", "helm", env=env)
    assert [h["kind"] for h in json.loads(out)] == ["note"]
    code, out, _ = await _run("memory", "reindex", env=env)
    assert code == 0 and "reindexed 1 document(s)" in out
    code, out, _ = await _run("memory", "show", "--user", "U7", env=env)
    assert "deploys with helm charts" in out
    code, out, _ = await _run("memory", "forget", "--user", "U7", env=env)
    assert code == 0 and "forgot 1 record(s)" in out
    code, out, _ = await _run(
        "memory", "search", "--user", "user:cli:local:U7", "--json", "helm", env=env
    )
    assert json.loads(out) == []


async def test_an_unknown_user_is_a_clear_error(isolated_env: Path) -> None:
    code, out, _ = await _run("memory", "show", "--user", "nobody", env=_env(isolated_env))
    assert code == 2
    assert "no memory for user 'nobody'" in out
