"""The model-backed campaign decider: one model call per wake-up (never while waiting).

It sees the campaign's goal, budget, rounds and recent measurements (the job's output lines
fenced as untrusted data) and answers with one `decide` tool call. A failed call, a
malformed answer or an offline provider falls back to the rule-based policy; a decision the
rules refuse is asked again once, with the refusal (the engine does that).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.models.provider import ModelProvider
from agents.models.types import Message, ToolSpec
from core.fence import fence, new_marker, untrusted_preface
from host.runtime.spending import SpendGate
from oncall.deciders import RuleBasedDecider
from oncall.model import DecisionAction
from oncall.policy import Decision, DecisionContext

log = logging.getLogger(__name__)

DECIDE_SYSTEM = """\
You are the Oncall agent of raven-bot. A long-running campaign woke up; choose what it does
next with one call to `decide`. Rules the tools enforce: wait, resubmit and terminate must
cite the newest measurement id; a report must state the baseline and use only recorded
values (quote them exactly). Prefer waiting while the metric improves within budget; stop a
diverging or stalled round; resubmit a crash at most once; report when done or out of budget.
"""

DECIDE_TOOL = ToolSpec(
    name="decide",
    description="The campaign's next action.",
    input_schema={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["wait", "resubmit", "terminate", "report"]},
            "cite": {"type": "integer", "description": "the newest measurement id"},
            "reason": {"type": "string", "description": "one sentence for the thread"},
            "wait_minutes": {"type": "number", "description": "wait: until the next wake-up"},
            "command": {"type": "string", "description": "resubmit: a changed command"},
            "report": {"type": "string", "description": "report/terminate: the final report"},
        },
        "required": ["action", "reason"],
    },
)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action: DecisionAction
    reason: str = Field(min_length=1, max_length=1000)
    cite: int | None = None
    wait_minutes: float | None = Field(default=None, gt=0, le=7 * 24 * 60)
    command: str | None = Field(default=None, max_length=8000)
    report: str | None = Field(default=None, max_length=20_000)


class ModelDecider:
    """Asks the model once per wake-up; the rule-based policy when that fails."""

    def __init__(
        self,
        provider: ModelProvider,
        *,
        timeout: float | None = None,
        spend: SpendGate | None = None,
    ) -> None:
        # No limit of its own by default: the provider's (RAVEN_MODEL_TIMEOUT) bounds the
        # call; a fixed 120 s here cut a slow local model off whatever that setting said.
        self._provider = provider
        self._timeout = timeout
        self._spend = spend
        self._fallback = RuleBasedDecider()

    @property
    def model_backed(self) -> bool:
        """True unless the provider is the offline stand-in."""
        return not self._provider.offline

    async def decide(self, context: DecisionContext) -> Decision:
        """The model's decision, validated; the policy's on any failure."""
        if self._provider.offline:
            return await self._fallback.decide(context)
        refusal = await self._over_budget(context)
        if refusal is not None:
            # The campaign goes on by the rules (no model call) until the budget renews.
            decision = await self._fallback.decide(context)
            note = f"decided by the rules, not the model: {refusal}"
            notes = (*decision.notes, note)
            # Said in the campaign's thread and record: why no model decided this time.
            reason = f"{decision.reason} (decided by the rules: the owner's model budget is spent)"
            return decision.model_copy(update={"notes": notes, "by_rules": True, "reason": reason})
        try:
            async with asyncio.timeout(self._timeout):
                reply = await self._provider.complete(
                    system=DECIDE_SYSTEM,
                    messages=[Message.user_text(campaign_brief(context))],
                    tools=[DECIDE_TOOL],
                    max_tokens=2048,
                )
            calls = [c for c in reply.tool_calls if c.name == DECIDE_TOOL.name]
            if not calls:
                raise ValueError("the model answered without calling `decide`")
            return _decision(_Answer.model_validate(calls[0].input))
        except Exception as exc:
            why = self._failure(exc)
            log.warning("campaign decision by the model failed (%s); using the policy", why)
            decision = await self._fallback.decide(context)
            return decision.model_copy(
                update={"notes": (*decision.notes, f"the model's decision failed: {why}")}
            )

    def _failure(self, exc: Exception) -> str:
        """Why the model's decision failed, never empty (a TimeoutError has no message)."""
        if isinstance(exc, ValidationError):
            return f"a malformed decision: {exc.error_count()} error(s)"
        if isinstance(exc, TimeoutError):
            after = "" if self._timeout is None else f" after {self._timeout:g} s"
            return (
                f"the call to {self._provider.name} timed out{after}; "
                "RAVEN_MODEL_TIMEOUT sets how long a model call may take"
            )
        return str(exc) or type(exc).__name__

    async def _over_budget(self, context: DecisionContext) -> str | None:
        """Why the campaign's owner may not spend on this decision (None: they may)."""
        if self._spend is None or context.conversation is None:
            return None
        return await self._spend.refusal(context.owner, context.conversation)


def _decision(answer: _Answer) -> Decision:
    changes = {"command": answer.command} if answer.command else {}
    until = answer.wait_minutes * 60 if answer.wait_minutes is not None else None
    return Decision(
        action=answer.action,
        cite=answer.cite,
        reason=answer.reason,
        until_seconds=until,
        changes=changes,
        report=answer.report,
    )


def campaign_brief(context: DecisionContext, *, recent: int = 20) -> str:
    """What the model sees at a wake-up: the campaign, its budget, rounds and measurements."""
    spec = context.spec
    marker = new_marker()
    lines = [
        untrusted_preface(marker),
        f"Goal: {spec.goal}",
        f"Metric: {spec.metric.name} ({spec.direction}); given baseline: {context.baseline}",
        f"Woke because: {context.reason}",
        f"Budget used: {context.wall_used_seconds / 60:.1f} of "
        f"{spec.budget.wall_seconds / 60:.1f} min wall, round {context.rounds_used} of "
        f"{spec.budget.rounds}; permitted actions: {', '.join(spec.permitted_actions)}",
        "Rounds:",
    ]
    lines += [
        f"- round {r.round}: {r.state or 'running'}, exit {r.exit_code}, woke: {r.wake_reason}"
        for r in context.rounds
    ]
    shown: list[dict[str, Any]] = [
        {"id": m.id, "round": m.round, "name": m.name, "value": _json_number(m.value)}
        for m in list(context.measurements)[-recent:]
    ]
    lines.append(f"Recent measurements (newest last): {shown}")
    source = "\n".join(m.source_line for m in list(context.measurements)[-5:])
    lines.append(fence(source, source="the job's output lines", marker=marker))
    if context.output_tail:
        # Why a round died is usually in its last lines (a traceback, "not found").
        lines.append(
            fence(context.output_tail, source="the last lines of the round's output", marker=marker)
        )
    if context.refused:
        # The engine's own words (not job output): what the rules refused and how to fix it.
        lines.append(
            f"Your previous decision at this wake-up was refused: {context.refused}\n"
            "Decide again with one call to `decide`, following that."
        )
    return "\n".join(lines)


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)
