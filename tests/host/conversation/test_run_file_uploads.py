"""What a finished run attaches to its thread: the full output of a node its report shortened
and the files the agents left, named in the report instead of host paths, after the report's
reply; never through a planted link; within caps that the report says were applied. The
console prints a file's path."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from bot.console.adapter import ConsoleAdapter
from core.ids import ConversationRef
from core.store import Store
from host.conversation.outbox import Outbox
from host.conversation.run_events import ConversationRunEvents
from host.conversation.run_files import RunAttachments, report_turn_key
from host.graph.attachments import MAX_FILE_BYTES, MAX_FILES_PER_RUN, run_files
from host.graph.run_store import NodeRecord, RunRecord, RunStore
from host.runtime.attachment_bytes import attachment_bytes
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import InboundMessage, OutboundFile
from host.runtime.ports import FileRefused
from host.runtime.run_snapshot import NodeSnapshot, RunSnapshot
from tests.host.conversation.test_outbox_uploads import FileChannel

CONV = ConversationRef("test", "W", "C", "t1")
RUN = "run_files_1"


class ServicePort:
    """The conversation service as a run announces through it: a report turn is recorded
    like the service records it, and its reply goes out through the outbox."""

    def __init__(self, log: ConversationLog, outbox: Outbox) -> None:
        self.log = log
        self.outbox = outbox
        self.turns: list[str] = []

    async def notify(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> str:
        return await self.outbox.send(conv, text, idempotency_key=idempotency_key) or ""

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        return None

    async def system_turn(self, conv: ConversationRef, text: str, *, key: str) -> None:
        self.turns.append(text)
        msg = InboundMessage(
            platform=conv.platform,
            workspace=conv.workspace,
            channel=conv.channel,
            thread=conv.thread,
            message_id=key,
            author_id="raven-system",
            author_name="raven",
            text=text,
            event_id=f"system:{key}",
            origin="system",
        )
        message_id = await self.log.claim_inbound(
            conv,
            event_keys=msg.dedup_keys,
            ttl_seconds=60,
            author_id="raven-system",
            author_name="raven",
            text=text,
            payload=msg.model_dump_json(),
        )
        await self.log.start_turn(
            conv,
            turn_id="T",
            kind="system",
            author_id="raven-system",
            author_name="raven",
            inbound_message_id=message_id,
        )
        await self.log.finish_turn("T", status="completed")
        await self.outbox.send(conv, "the run is done", idempotency_key="turn:T:reply")


class Reports:
    def __init__(self, text: str) -> None:
        self.text = text

    async def report(self, run_id: str) -> str:
        return self.text


def _node(node_id: str, output: Path | None) -> NodeRecord:
    return NodeRecord(
        conversation_id=CONV.id,
        node_id=node_id,
        run_id=RUN,
        agent="shell",
        instance=None,
        summary="",
        template=node_id,
        deps=(),
        state="completed",
        attempts=1,
        max_attempts=1,
        continuation=None,
        output_path=output,
        error=None,
        verdict=None,
        deadline=None,
    )


async def test_a_run_attaches_its_shortened_output_and_its_files_after_the_report(
    store: Store, tmp_path: Path
) -> None:
    run_dir, workspace = tmp_path / "runs" / RUN, tmp_path / "workspace"
    (run_dir / "outputs").mkdir(parents=True)
    workspace.mkdir()
    output = run_dir / "outputs" / "s2.md"
    output.write_text("line\n" * 2000)  # longer than the report shows
    (run_dir / "graph.json").write_text("{}")  # the run's own record: not attached
    (workspace / "old.md").write_text("from before the run")
    os.utime(workspace / "old.md", (0, 0))
    (workspace / "design.svg").write_text("<svg/>")
    runs = RunStore(store)
    record = RunRecord(
        RUN, CONV, "draw", True, "completed", "U1", {}, run_dir, None, None, time.time() - 5, None
    )
    await runs.create_run(record, [_node("s2", None)])
    await runs.update_node(CONV.id, "s2", output_path=str(output), state="completed")
    log = ConversationLog(store)
    channel = FileChannel()
    outbox = Outbox(log, {"test": channel}, retry_delays=(0.0,))
    port = ServicePort(log, outbox)
    events = ConversationRunEvents(
        runs,
        port,
        Reports(f"Run done. Output of s2 truncated; full output at {output}"),
        attachments=RunAttachments(outbox, lambda _: workspace),
    )
    snapshot = RunSnapshot(
        RUN, CONV, "draw", True, "completed", "U1", (NodeSnapshot("s2", "shell", "completed", 1),)
    )
    await events.finished(snapshot)
    await outbox.idle()
    (report,) = port.turns
    assert str(output) not in report and "full output at s2-output.md" in report
    assert "📎 Attached to this thread: `s2-output.md`, `design.svg`." in report
    posts = [entry for entry in channel.timeline if entry.startswith("post:")]
    files = [entry.split(":")[1] for entry in channel.timeline if entry.startswith("file:")]
    assert files == ["s2-output.md", "design.svg"]
    # The status message, then the reply, then the files.
    assert channel.timeline.index(posts[-1]) < channel.timeline.index(channel.files[0])
    assert posts[-1] == "post:the run is done"


def test_the_report_turn_key_is_the_one_the_service_records() -> None:
    msg = InboundMessage(
        platform="slack",
        workspace="W",
        channel="C",
        thread="t",
        message_id="m",
        author_id="raven-system",
        author_name="raven",
        text="report",
        event_id="system:run:r1:report",
    )
    assert report_turn_key(msg.conversation, "run:r1:report") == f"in:{msg.dedup_keys[0]}"


def test_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa.md").write_text("SECRET")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.md").write_text("notes")
    (run_dir / "key.md").symlink_to(outside / "id_rsa.md")  # planted by a sandboxed agent
    (run_dir / "more").symlink_to(outside, target_is_directory=True)
    os.mkfifo(run_dir / "pipe.txt")
    chosen = run_files(run_dir, None, since=0.0)
    assert [f.name for f in chosen.attached] == ["notes.md"]
    assert chosen.left_out == ()


async def test_a_link_swapped_in_after_the_choice_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "secret.md").write_text("SECRET")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.md").write_text("notes!")
    (file,) = run_files(run_dir, None, since=0.0).attached
    assert await attachment_bytes(file) == b"notes!"
    (run_dir / "notes.md").unlink()
    (run_dir / "notes.md").symlink_to(tmp_path / "secret.md")
    with pytest.raises(FileRefused) as refused:
        await attachment_bytes(file)
    assert refused.value.reason == "unreadable"
    # A directory on the way swapped for a link is refused too.
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "a.md").write_text("a")
    (inner,) = [f for f in run_files(run_dir, None, since=0.0).attached if f.name == "sub-a.md"]
    (run_dir / "sub").rename(tmp_path / "moved")
    (run_dir / "sub").symlink_to(tmp_path / "moved", target_is_directory=True)
    with pytest.raises(FileRefused):
        await attachment_bytes(inner)


def test_caps_say_what_was_left_out(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for index in range(MAX_FILES_PER_RUN + 2):
        path = run_dir / f"f{index:02}.md"
        path.write_text("x")
        os.utime(path, (1000 + index, 1000 + index))
    big = run_dir / "huge.png"
    with big.open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: cheap to make
    os.utime(big, (0, 0))
    chosen = run_files(run_dir, None, since=0.0)
    assert len(chosen.attached) == MAX_FILES_PER_RUN
    assert chosen.left_out == ("huge.png", "f10.md", "f11.md")
    lines = chosen.report_lines(RUN)
    assert lines[1].startswith("3 more file(s) not attached: `huge.png`, `f10.md`, `f11.md`")
    assert f"raven-bot runs show {RUN}" in lines[1]


async def test_the_console_prints_the_path(tmp_path: Path) -> None:
    out = io.StringIO()
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=out)
    path = tmp_path / "design.svg"
    path.write_text("<svg/>")
    file = OutboundFile(name="design.svg", path=path, size=6)
    await console.upload(CONV, file, idempotency_key="k", redelivery=False)
    # One line; the path as code, so a terminal's Markdown leaves it as written.
    assert out.getvalue().splitlines() == [f"raven> 📎 design.svg: `{path}`"]
