"""A campaign's approval prompt warns when its command runs a file its working directory
does not hold (`python train.py` with no `train.py` there): approved, every round would only
fail the same way. Which words of a command name such a file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.home import workspace_for
from bot.settings import load_settings
from core.ids import ConversationRef
from host.features.oncall.named_files import missing_files, named_files
from host.runtime.messages import InboundMessage
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually

CONV = ConversationRef("test", "W", "C", "T")
WARNING = "`train.py` is not in the working directory"


def _campaign(goal: str, event: str) -> InboundMessage:
    text = (
        f"campaign: {goal} | machine: local | run: python train.py | metric: loss min | budget: 1h"
    )
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread="T",
        message_id=event,
        author_id="U1",
        author_name="alice",
        text=text,
        event_id=event,
    )


@pytest.fixture
async def runtime(isolated_env: Path) -> AsyncIterator[Any]:
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    yield rt
    await shutdown(rt)


async def _question(rt: Any, goal: str, event: str) -> str:
    """Start a campaign from the thread; the question of its approval prompt."""
    turn = await rt.service.accept(_campaign(goal, event))
    assert turn is not None
    await turn

    async def asked() -> list[str]:
        return [
            p.question
            for p in await rt.broker.pending()
            if p.purpose == "campaign_command" and goal in p.question
        ]

    await eventually(asked)
    (question,) = await asked()
    return question


async def test_the_prompt_warns_when_the_script_is_not_in_the_workdir(
    runtime: Any, isolated_env: Path
) -> None:
    question = await _question(runtime, "no script yet", "e1")
    assert WARNING in question, question
    assert "every round would fail the same way" in question, question

    # Put there (as a `shell` node or an attachment would), nothing to warn about.
    (workspace_for(isolated_env)(CONV) / "train.py").write_text("print('loss 0.5')\n")
    question = await _question(runtime, "script in place", "e2")
    assert "python train.py" in question and "not in the working directory" not in question


@pytest.mark.parametrize(
    ("command", "files"),
    [
        ("python train.py", ["train.py"]),
        ("python3 -u train.py --lr 0.1 > log 2>&1", ["train.py"]),
        ("bash run.sh", ["run.sh"]),
        ("./x", ["./x"]),
        ("A=1 nohup ./go.sh &", ["./go.sh"]),
        ("env A=1 python t.py; python eval.py", ["t.py", "eval.py"]),
        (".venv/bin/python tr.py", [".venv/bin/python", "tr.py"]),
        ('python "my train.py"', ["my train.py"]),
        # Inline code, a module, what the words cannot tell, what runs elsewhere: nothing.
        ("python -m pytest", []),
        ('python -c "print(1)"', []),
        ('bash -lc "./a"', []),
        ("node -e 1", []),
        ("echo loss 0.5", []),
        ("cd sub && python t.py", []),
        ("python ../t.py", []),
        ("python $HOME/t.py", []),
        ("python /abs/t.py", []),
        ("python 'unbalanced", []),
    ],
)
def test_the_files_a_command_runs(command: str, files: list[str]) -> None:
    assert named_files(command) == files


def test_missing_files_looks_in_the_workdir_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "dangling.sh").symlink_to(tmp_path / "nowhere")
    command = "python train.py && bash dangling.sh && bash run.sh"
    assert missing_files(command, tmp_path) == ["run.sh"]
    assert missing_files(command, tmp_path / "not-there") == []
