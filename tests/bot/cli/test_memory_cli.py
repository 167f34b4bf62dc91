"""`raven-bot memory …` in a real process (keyword recall, so no model load)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import RAVEN, _env, _run

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


async def test_reindex_prints_one_line_and_no_warning_about_the_rebuild_it_was_asked_for(
    isolated_env: Path,
) -> None:
    env = _env(isolated_env)
    code, _, err = await _run("memory", "add", "--user", "U7", "I deploy on Fridays", env=env)
    assert code == 0, err
    shutil.rmtree(isolated_env / "index")  # gone, as after a disk cleanup
    # What a person at the terminal sees: stdout and stderr in one stream.
    proc = await asyncio.create_subprocess_exec(
        RAVEN,
        "memory",
        "reindex",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    shown, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    assert re.fullmatch(
        r"reindexed 1 document\(s\) from SQLite \((hybrid|keyword) recall\)\n", shown.decode()
    ), shown
    code, out, _ = await _run("memory", "search", "--user", "U7", "--json", "deploy", env=env)
    assert [h["text"] for h in json.loads(out)] == ["I deploy on Fridays"]
