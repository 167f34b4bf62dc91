"""What happens when a prompt is decided: approved graphs start, answers reach the Host."""

from __future__ import annotations

import json

from host.conversations import ConversationService
from host.graph.admission import AdmissionError
from host.graph.runs import RunManager
from host.prompt_model import Prompt


async def handle_graph_approval(
    prompt: Prompt, runs: RunManager, service: ConversationService
) -> None:
    """Start an approved graph (re-admitted, in the background); say so either way."""
    conv = prompt.conversation
    key = f"prompt:{prompt.id}:outcome"
    if not prompt.approved:
        who = f" by {prompt.answered_by}" if prompt.answered_by else ""
        outcome = "denied" if prompt.state == "answered" else prompt.state
        await service.notify(
            conv, f"Graph not approved ({outcome}{who}): nothing ran.", idempotency_key=key
        )
        return
    submission = json.loads(str(prompt.payload.get("submission", "{}")))
    # Nobody is waiting on the original tool call any more: report in the background.
    submission["background"] = True
    replaces = prompt.payload.get("replaces_run")
    try:
        result = await runs.submit(
            conv,
            submission,
            submitted_by=str(prompt.payload.get("submitted_by", prompt.requester)),
            approval_collected=True,
            replaces_run=str(replaces) if replaces else None,
        )
    except AdmissionError as exc:
        await service.notify(
            conv,
            f"Approved, but the graph no longer passes admission: {exc.for_user()}",
            idempotency_key=key,
        )
        return
    assert result.run is not None
    if replaces:
        await runs.supersede(conv, str(replaces))
    await service.notify(
        conv,
        f"Approved by {prompt.answered_by}: run `{result.run.id}` started "
        f"({len(result.run.nodes)} node(s)).",
        idempotency_key=key,
    )


async def handle_ask_user(prompt: Prompt, service: ConversationService) -> None:
    """Give the Host the user's answer (or the lack of one) as a proactive turn."""
    if prompt.state == "answered":
        who = prompt.answered_by
        text = f"{who} answered your question \u201c{prompt.question}\u201d: {prompt.answer}"
    else:
        text = f"Your question \u201c{prompt.question}\u201d was {prompt.state} without an answer."
    await service.system_turn(prompt.conversation, text, key=f"prompt:{prompt.id}:answer")
