"""The offline provider: honest and deterministic, never pretending to be a language model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

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

# What the notice tells a person to set, by the API the configured model speaks.
_ENABLE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "anthropic": (
            "To enable the model, add `ANTHROPIC_API_KEY=sk-ant-…` to `.env` (or export it) "
            "and restart; `ANTHROPIC_BASE_URL` can point at any Anthropic-compatible server."
        ),
        "openai": (
            "To enable the model, add `OPENAI_API_KEY=sk-…` to `.env` (or export it) and "
            "restart; for a local OpenAI-compatible server (vLLM, Ollama, llama.cpp), name it "
            "in the model instead, e.g. `RAVEN_MODEL=openai:<model>@http://127.0.0.1:8080/v1` "
            "(or set `OPENAI_BASE_URL`): it needs no key."
        ),
    }
)
# The short form, for one-line messages ("… did not run (set ANTHROPIC_API_KEY)").
_KEY_HELP: Final[Mapping[str, str]] = MappingProxyType(
    {
        "anthropic": "set ANTHROPIC_API_KEY",
        "openai": "set OPENAI_API_KEY, or name a local server as openai:<model>@<URL>",
    }
)
_WITHOUT_MODEL = (
    "Offline I can still run explicit plans, one node per line (`id: agent: task`, "
    "`[after id]` for dependencies), e.g. a command in the sandboxed workspace:\n"
    '```\ns1: shell: echo "hello from the sandbox" && uname -a\n```\n'
    "(the `shell` agent asks you to approve each command; a `confirm` line asks for approval "
    "of the whole plan first). Campaigns that watch a long job need no model either:\n"
    "```\ncampaign: train the model | machine: local | run: python train.py | "
    "metric: loss min | budget: 2h\n```\nSay `help` for more."
)


_NOTICE_OPENING = "I'm running in **offline mode**: "


def is_offline_notice(text: str) -> bool:
    """Whether `text` is an offline notice, for whichever model (the conversation service
    shows it once per conversation, then a one-line reminder)."""
    return text.startswith(_NOTICE_OPENING)


def offline_notice(api: str = "anthropic", model: str = "") -> str:
    """The offline notice for a model speaking `api` (`anthropic` or `openai`): it names the
    key that model needs (an `openai:` model's is not ANTHROPIC_API_KEY)."""
    if api == "openai":
        named = f" `{model}`" if model else ""
        missing = (
            f"the model{named} speaks the OpenAI API, but neither `OPENAI_API_KEY` nor a "
            "server URL is set"
        )
    else:
        missing = "no `ANTHROPIC_API_KEY` is set"
    return (
        f"{_NOTICE_OPENING}{missing}, so I can't answer free-form requests "
        f"(and I won't pretend to).\n\n{_ENABLE.get(api, _ENABLE['anthropic'])}\n\n"
        f"{_WITHOUT_MODEL}"
    )


# The notice for the default model (an Anthropic one).
OFFLINE_NOTICE = offline_notice()

# Said instead of the notice once a conversation has seen it (the conversation service
# keeps track): one line, not the whole notice again on every message.
OFFLINE_REMINDER = (
    "I'm in offline mode: no model key, so I can't answer free-form messages — "
    "`help` lists what works."
)

SUBMIT_GRAPH = "submit_graph"
START_CAMPAIGN = "start_campaign"


class OfflineProvider:
    """Stand-in provider used when no model key is configured.

    `api` and `model` are the configured model's (`openai`, `openai:gpt-5`): what it says
    to set names that model's key, not Anthropic's.
    """

    def __init__(self, *, api: str = "anthropic", model: str = "") -> None:
        self._api = api if api in _ENABLE else "anthropic"
        self.notice = offline_notice(self._api, model)

    @property
    def key_help(self) -> str:
        """What to set, in a few words, for one-line messages."""
        return _KEY_HELP[self._api]

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
            return _text(reminder_hint(text) or self.notice)
        if any(tool.name == SUBMIT_GRAPH for tool in tools):
            return _call(SUBMIT_GRAPH, plan)
        return _text(
            f"Offline mode: I recognised a plan of {len(plan['nodes'])} node(s), but graph runs "
            "are not available here, so nothing was run."
        )


def offline_key_help(provider: object) -> str:
    """What to set so `provider` gets a model, in a few words (the Anthropic key unless the
    provider is the offline stand-in built for another API)."""
    if isinstance(provider, OfflineProvider):
        return provider.key_help
    return _KEY_HELP["anthropic"]


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
