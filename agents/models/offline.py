"""The offline provider: honest and deterministic, never pretending to be a language model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents.campaign_syntax import parse_campaign
from agents.models.reminder_hint import reminder_hint
from agents.models.requester_text import requester_text
from agents.models.types import (
    Message,
    ModelReply,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from agents.plan_syntax import PlanSyntaxError, parse_plan
from agents.tool_failures import failure_detail

OFFLINE_NOTICE = (
    "I'm running in **offline mode**: no `ANTHROPIC_API_KEY` is set, so I can't answer "
    "free-form requests (and I won't pretend to).\n\n"
    "To enable the model, add `ANTHROPIC_API_KEY=sk-ant-…` to `.env` (or export it) and restart; "
    "`ANTHROPIC_BASE_URL` can point at any Anthropic-compatible server.\n\n"
    "Offline I can still run explicit plans, one node per line (`id: agent: task`, "
    "`[after id]` for dependencies), e.g. a command in the sandboxed workspace:\n"
    '```\ns1: shell: echo "hello from the sandbox" && uname -a\n```\n'
    "(the `shell` agent asks you to approve each command; a `confirm` line asks for approval "
    "of the whole plan first). Campaigns that watch a long job need no model either:\n"
    "```\ncampaign: train the model | machine: local | run: python train.py | "
    "metric: loss min | budget: 2h\n```\nSay `help` for more."
)

# Said instead of the notice once a conversation has seen it (the conversation service
# keeps track): one line, not the whole notice again on every message.
OFFLINE_REMINDER = (
    "I'm in offline mode: no model key, so I can't answer free-form messages — "
    "`help` lists what works."
)

SUBMIT_GRAPH = "submit_graph"
START_CAMPAIGN = "start_campaign"


class OfflineProvider:
    """Stand-in provider used when no model key is configured."""

    @property
    def name(self) -> str:
        """Label shown in logs and `doctor`."""
        return "offline"

    @property
    def offline(self) -> bool:
        """Always True: this is not a model."""
        return True

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 4096,
    ) -> ModelReply:
        """Answer deterministically from the last message; see the module docstring.

        Control syntax is read only from what the requester wrote: never from earlier
        messages or thread context merged into the same user message.
        """
        last = messages[-1] if messages else Message.user_text("")
        results = [b for b in last.content if isinstance(b, ToolResult)]
        if results:
            return _text(_describe_results(results, messages))
        text = requester_text("\n".join(b.text for b in last.content if isinstance(b, TextBlock)))
        campaign = parse_campaign(text)
        if campaign is not None and any(tool.name == START_CAMPAIGN for tool in tools):
            return _call(START_CAMPAIGN, campaign)
        try:
            plan = parse_plan(text)
        except PlanSyntaxError as exc:
            return _text(str(exc))
        if plan is None:
            return _text(reminder_hint(text) or OFFLINE_NOTICE)
        if any(tool.name == SUBMIT_GRAPH for tool in tools):
            return _call(SUBMIT_GRAPH, plan)
        return _text(
            f"Offline mode: I recognised a plan of {len(plan['nodes'])} node(s), but graph runs "
            "are not available here, so nothing was run."
        )


# What each tool the offline provider calls is about, for a failure said in plain words.
_WHAT_FAILED = {
    SUBMIT_GRAPH: "The plan could not be started",
    START_CAMPAIGN: "The campaign could not be started",
}


def _describe_results(results: list[ToolResult], messages: Sequence[Message]) -> str:
    """What happened, in plain words: each result's people-facing summary, else its text
    (a run report, a refusal that says what to fix); a failure as a sentence. Never the
    tools' names: people asked for a plan or a campaign, not for `submit_graph`."""
    names = {
        b.id: b.name
        for m in messages
        if m.role == "assistant"
        for b in m.content
        if isinstance(b, ToolCall)
    }
    parts = []
    for result in results:
        tool = names.get(result.tool_use_id, "tool")
        if result.summary:
            parts.append(result.summary)
        elif result.is_error:
            what = _WHAT_FAILED.get(tool, "That did not work")
            parts.append(f"{what}: {failure_detail(tool, result.content)}")
        else:
            parts.append(result.content)
    return "\n\n".join(parts)


def _call(name: str, arguments: Mapping[str, Any]) -> ModelReply:
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:12]
    call = ToolCall(id=f"offline_{digest}", name=name, input=dict(arguments))
    return ModelReply(content=[call], stop_reason="tool_use", model="offline")


def _text(text: str) -> ModelReply:
    return ModelReply(content=[TextBlock(text=text)], stop_reason="end_turn", usage=Usage())
