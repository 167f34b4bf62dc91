"""Deciders: who chooses a woken campaign's next action."""

from __future__ import annotations

from dataclasses import dataclass

from oncall.policy import Decision, DecisionContext, decide


@dataclass(frozen=True)
class RuleBasedDecider:
    """The offline policy (continue while improving within budget, stop on divergence or
    budget, resubmit a crash once): no model calls, ever."""

    @property
    def model_backed(self) -> bool:
        """False: deciding costs no model call."""
        return False

    async def decide(self, context: DecisionContext) -> Decision:
        """The policy's decision for `context`."""
        return decide(context)
