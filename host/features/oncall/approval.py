"""A campaign's command runs only after a person allowed to approve it says yes (SPEC §12).

The engine asks through `PromptCommandApprovals` (an approval prompt that shows the exact
command, where it runs, its budget and what it can see); the decision comes back as a
`PromptDecided` event and `handle_campaign_command` tells the engine. A machine with
`approvers` in machines.toml needs one of them too: a second prompt only they (or an admin)
can answer, unless one of them gave the first approval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Literal, cast

from core.markdown import code_block
from host.features.oncall.named_files import missing_files
from host.prompts.broker import PromptBroker
from host.prompts.clarify import sandbox_view
from host.runtime.people import People
from host.runtime.prompt_record import Prompt
from oncall.engine import CampaignEngine, CampaignError
from oncall.model import MachineSpec
from oncall.ports import CommandApproval

CAMPAIGN_COMMAND = "campaign_command"


def visibility(machine: MachineSpec, workdir: str = "its working directory") -> str:
    """What a round on `machine` running in `workdir` can see, in words for the person
    approving it: the working directory writable, the machine's `mounts` read-only."""
    view = sandbox_view(workdir)
    if machine.mounts:
        shown = ", ".join(f"`{m}`" for m in machine.mounts)
        view += f" Also readable (read-only): {shown}."
    if machine.kind == "local":
        return f"this host, sandboxed (bubblewrap): {view}"
    if machine.kind == "slurm":
        where = f"partition `{machine.partition}`" if machine.partition else "the default partition"
        return (
            f"a Slurm job on {where}, with a scrubbed environment (nothing of the bot's), "
            f"sandboxed by bubblewrap on the node: {view} A node without bubblewrap refuses "
            "the round."
        )
    account = f" as `{machine.user}`" if machine.user else ""
    return (
        f"`{machine.host}`{account}, with a scrubbed environment (nothing of the bot's) and, "
        f"where bubblewrap is installed there, sandboxed: {view} Without bubblewrap on that "
        "host it can read whatever that account can."
    )


def missing_warning(missing: Sequence[str]) -> str:
    """What to say when the command runs files its working directory does not hold: every
    round would fail the same way, so approving it would only repeat the failure."""
    if not missing:
        return ""
    names = ", ".join(f"`{name}`" for name in missing)
    verb = "is" if len(missing) == 1 else "are"
    return (
        f"⚠️ {names} {verb} not in the working directory: every round would fail the same way. "
        "Put it there first (a file attached to the thread, or one a `shell` node writes, lands "
        "in this conversation's workspace), or deny and set the machine's `workdir` in "
        "machines.toml to your project.\n"
    )


async def files_missing(approval: CommandApproval) -> list[str]:
    """The files the command runs that its working directory (on this host) lacks."""
    if approval.directory is None:
        return []
    return await asyncio.to_thread(missing_files, approval.command, Path(approval.directory))


def approval_question(approval: CommandApproval, missing: Sequence[str] = ()) -> str:
    """The prompt: the exact command, where it runs, its budget and what it can see, and a
    warning naming the files it runs that are `missing` from where it runs."""
    machine = approval.machine
    if approval.kind == "start":
        head = f"Start campaign `{approval.campaign_id}` ({approval.goal[:200]}) with this command?"
    else:
        cited = f"; cites #{approval.cite}" if approval.cite is not None else ""
        why = approval.reason[:300] or "a changed command"
        head = (
            f"Campaign `{approval.campaign_id}` wants to resubmit with a changed command "
            f"({why}{cited}). Run this?"
        )
    return (
        f"{head}\n{code_block(approval.command)}\n"
        f"- Machine: `{machine.name}` ({machine.kind})\n"
        f"- Runs in: {approval.workdir} (its working directory)\n"
        f"- Budget: {approval.budget}\n"
        f"- It can see: {visibility(machine, approval.workdir)}\n"
        f"{missing_warning(missing)}"
        "Exactly this command runs, in every round, and nothing runs unless approved."
    )


class PromptCommandApprovals:
    """The engine's `CommandApprovals`, as approval prompts through the broker."""

    def __init__(self, broker: PromptBroker) -> None:
        self._broker = broker

    async def request(self, approval: CommandApproval) -> str:
        """Persist and show the first approval prompt; its id.

        Asked again at startup for a campaign still awaiting approval (the bot may have died
        between recording it and asking): a start that was already asked is not asked twice."""
        if approval.kind == "start":
            asked = await self._broker.with_payload(
                CAMPAIGN_COMMAND, "campaign_id", approval.campaign_id
            )
            if any(p.payload.get("kind") == "start" for p in asked):
                return asked[0].id
        prompt = await self._broker.create(
            conversation=approval.conversation,
            kind="approval",
            question=approval_question(approval, await files_missing(approval)),
            requester=approval.requester,
            purpose=CAMPAIGN_COMMAND,
            payload=_payload(approval, stage=1),
        )
        return prompt.id


def _payload(approval: CommandApproval, *, stage: int) -> dict[str, object]:
    return {
        "campaign_id": approval.campaign_id,
        "kind": approval.kind,
        "command": approval.command,
        "cite": approval.cite,
        "reason": approval.reason,
        "stage": stage,
        "machine_approvers": list(approval.machine.approvers),
    }


async def handle_campaign_command(
    prompt: Prompt,
    engine: CampaignEngine,
    broker: PromptBroker,
    admins: Collection[str],
    people: People | None = None,
) -> None:
    """Tell the engine what was decided; ask the machine's approvers when they must agree.
    `people` names who decided in what the thread reads (display names, not ids)."""
    payload = prompt.payload
    campaign_id = str(payload["campaign_id"])
    kind = cast(Literal["start", "resubmit"], str(payload["kind"]))
    decider = await (people or People()).name(prompt.conversation, prompt.answered_by or "")
    if not prompt.approved:
        who = f" by {decider}" if decider else ""
        outcome = f"denied{who}" if prompt.state == "answered" else str(prompt.state)
        await engine.not_approved(campaign_id, kind=kind, outcome=outcome)
        return
    machine_approvers = [str(a) for a in payload.get("machine_approvers") or ()]
    by = prompt.answered_by or "?"
    if (
        payload.get("stage") == 1
        and machine_approvers
        and by not in machine_approvers
        and by not in admins
    ):
        await broker.create(
            conversation=prompt.conversation,
            kind="approval",
            question=f"{decider} approved; the machine's approvers must agree too.\n"
            f"{prompt.question}",
            requester=prompt.requester,
            purpose=CAMPAIGN_COMMAND,
            payload={**payload, "stage": 2},
            responders=machine_approvers,
        )
        return
    cite = payload.get("cite")
    try:
        await engine.approved(
            campaign_id,
            kind=kind,
            command=str(payload["command"]),
            by=by,
            cite=int(cite) if isinstance(cite, int) else None,
            reason=str(payload.get("reason") or ""),
        )
    except CampaignError as exc:
        # Approved, but the campaign moved on (round budget used up, say): nothing ran.
        await engine.not_approved(campaign_id, kind=kind, outcome=f"approved, but refused: {exc}")
