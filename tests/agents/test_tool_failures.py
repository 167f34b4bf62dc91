"""A failed tool call is said once: `submit_graph` failed: …, never twice over; offline, as a
sentence of what could not be done."""

from __future__ import annotations

import errno
import os

from pydantic import BaseModel, ConfigDict

from agents.loop import AgentLoop
from agents.models.offline import OfflineProvider
from agents.models.types import Message
from agents.tool_failures import failed_text
from agents.tools import Tool, ToolRegistry


class _Graph(BaseModel):
    model_config = ConfigDict(extra="allow")


async def _disk_full(_ctx: None, _args: _Graph) -> str:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


async def test_the_offline_model_says_a_failed_tool_once() -> None:
    tools = ToolRegistry([Tool("submit_graph", "graphs", _Graph, _disk_full)])
    result = await AgentLoop[None](OfflineProvider()).run(
        system="", messages=[Message.user_text("s1: shell: echo hi")], tools=tools, ctx=None
    )
    # In plain words (what could not be done, and why), not the tool's name.
    assert (
        result.text == "The plan could not be started: OSError: [Errno 28] No space left on device"
    )


def test_failed_text_adds_the_prefix_only_when_missing() -> None:
    assert failed_text("run_shell", "exit 2") == "`run_shell` failed: exit 2"
    said = "`run_shell` failed: exit 2"
    assert failed_text("run_shell", said) == said
    # Another tool's failure, or the word in passing, is not this tool's prefix.
    assert failed_text("run_shell", "`grep` failed: x") == "`run_shell` failed: `grep` failed: x"
    assert failed_text("run_shell", "`run_shell` failedover") == (
        "`run_shell` failed: `run_shell` failedover"
    )
