"""The Host's "no reply" outcome: a follow-up that did not mention the bot may need no answer
(thanks, people talking to each other), and saying nothing is then the polite reply."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from agents.tools import Tool
from host.runtime.turn import TurnContext

NO_REPLY_TOOL = "no_reply"
NO_REPLY_NOTE = f"""\
The message to answer did not mention you: it is a follow-up in a thread you take part in. \
If it needs nothing from you (thanks, an acknowledgement, people talking to each other), \
call `{NO_REPLY_TOOL}` and end the turn: nothing is posted. Otherwise answer as usual."""
NO_REPLY_RESULT = "Recorded: nothing will be posted for this message. End the turn now."


class NoReplyInput(BaseModel):
    """Input of `no_reply`."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(
        default="", max_length=200, description="why the message needs no reply (for the log)"
    )


@dataclass
class Silence:
    """One turn's choice to say nothing, set when the Host calls `no_reply`."""

    chosen: bool = False
    reason: str = ""

    def tool(self) -> Tool[TurnContext]:
        """The `no_reply` tool bound to this turn."""

        async def no_reply(ctx: TurnContext, args: NoReplyInput) -> str:
            self.chosen = True
            self.reason = args.reason
            return NO_REPLY_RESULT

        return Tool(
            NO_REPLY_TOOL,
            "Say nothing to this message (it needs no answer from you). Only offered for a "
            "follow-up that did not mention you.",
            NoReplyInput,
            no_reply,
        )
