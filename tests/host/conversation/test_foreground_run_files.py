"""A foreground run (the Host's `delegate`) has no report turn of its own: its report is the
tool's answer inside the turn that waited for it. What it made (the design agent's SVG) is
named in that answer and follows that turn's reply into the thread, once (regression: only
background runs used to attach their files)."""

from __future__ import annotations

import time
from pathlib import Path

from core.ids import ConversationRef
from core.store import Store
from host.conversation.outbox import Outbox
from host.conversation.run_files import RunAttachments
from host.graph.run_store import NodeRecord, RunRecord, RunStore
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import InboundMessage
from tests.host.conversation.test_outbox_uploads import FileChannel

CONV = ConversationRef("test", "W", "C", "t1")
RUN = "run_delegated_1"
SVG = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"/>\n'


def _design_node() -> NodeRecord:
    return NodeRecord(
        conversation_id=CONV.id,
        node_id="design_1",
        run_id=RUN,
        agent="design",
        instance=None,
        summary="",
        template="Draw it.",
        deps=(),
        state="completed",
        attempts=1,
        max_attempts=1,
        continuation=None,
        output_path=None,
        error=None,
        verdict=None,
        deadline=None,
    )


async def _user_turn(log: ConversationLog) -> str:
    """Alice's message taken up by turn T, as the service records it; its inbound key (what
    `TurnContext.inbound_key` carries)."""
    msg = InboundMessage(
        platform=CONV.platform,
        workspace=CONV.workspace,
        channel=CONV.channel,
        thread=CONV.thread,
        message_id="m1",
        author_id="U1",
        author_name="alice",
        text="design a chart",
        event_id="e1",
    )
    message_id = await log.claim_inbound(
        CONV,
        event_keys=msg.dedup_keys,
        ttl_seconds=60,
        author_id="U1",
        author_name="alice",
        text=msg.text,
        payload=msg.model_dump_json(),
    )
    await log.start_turn(
        CONV,
        turn_id="T",
        kind="user",
        author_id="U1",
        author_name="alice",
        inbound_message_id=message_id,
    )
    return f"in:{msg.dedup_keys[0]}"


async def test_a_delegated_design_is_named_in_the_tool_answer_and_follows_the_reply(
    store: Store, tmp_path: Path
) -> None:
    run_dir, workspace = tmp_path / "runs" / RUN, tmp_path / "workspace"
    run_dir.mkdir(parents=True)
    workspace.mkdir()
    (workspace / "design.svg").write_text(SVG)
    runs = RunStore(store)
    record = RunRecord(
        RUN, CONV, "draw", False, "completed", "U1", {}, run_dir, None, None, time.time() - 5, None
    )
    await runs.create_run(record, [_design_node()])
    log = ConversationLog(store)
    channel = FileChannel()
    outbox = Outbox(log, {"test": channel}, retry_delays=(0.0,))
    inbound_key = await _user_turn(log)
    attachments = RunAttachments(outbox, lambda _: workspace)

    answer = await attachments.follow_turn(
        runs, CONV, RUN, "Run done.", after=inbound_key, audience="host"
    )
    assert answer == "Run done.\n\n📎 Attached to this thread: `design.svg`."
    # Asked again (a retried tool call): recorded once.
    await attachments.follow_turn(runs, CONV, RUN, "Run done.", after=inbound_key, audience="host")
    await log.finish_turn("T", status="completed")
    await outbox.send(CONV, "Here is your chart.", idempotency_key="turn:T:reply", turn_id="T")
    await outbox.idle()

    # The file once, with the bytes the agent wrote, after the reply.
    assert channel.files == [f"file:design.svg:{SVG}"], channel.timeline
    assert channel.timeline.index("post:Here is your chart.") < channel.timeline.index(
        channel.files[0]
    )
