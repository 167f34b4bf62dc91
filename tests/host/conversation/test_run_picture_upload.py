"""A finished run of more than three nodes sends its picture to the thread as a PNG after the
report, once, named `run-<short id>.png` and counted in the run's caps; a smaller run sends
none, and a picture that cannot be drawn never holds the report back."""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
from PIL import Image

from core.ids import ConversationRef
from core.store import Store
from host.conversation.outbox import Outbox
from host.conversation.run_events import ConversationRunEvents
from host.conversation.run_files import RunAttachments, picture_name
from host.graph.attachments import RUN_PICTURE
from host.graph.picture import RunPicture
from host.graph.run_store import NodeRecord, RunRecord, RunStore
from host.runtime.conversation_log import ConversationLog
from host.runtime.messages import OutboundFile, OutboundMessage
from host.runtime.run_snapshot import NodeSnapshot, RunSnapshot
from tests.fakes.recording_channel import RecordingChannel
from tests.host.conversation.test_run_file_uploads import Reports, ServicePort

CONV = ConversationRef("test", "W", "C", "t1")
RUN = "run_5c0ffee123"


class BytesChannel(RecordingChannel):
    """Takes files and keeps their bytes, in one timeline with the posts."""

    def __init__(self) -> None:
        super().__init__("test")
        self.timeline: list[str] = []
        self.uploaded: dict[str, bytes] = {}

    async def post(self, conv: ConversationRef, message: OutboundMessage) -> str:
        posted = await super().post(conv, message)
        self.timeline.append(f"post:{message.text}")
        return posted

    async def upload(
        self,
        conv: ConversationRef,
        file: OutboundFile,
        *,
        idempotency_key: str,
        redelivery: bool,
        earlier_copies: int = 0,
    ) -> str:
        self.timeline.append(f"file:{file.name}")
        self.uploaded[file.name] = file.path.read_bytes()
        return f"F{len(self.uploaded)}"


def _node(node_id: str, deps: tuple[str, ...]) -> NodeRecord:
    return NodeRecord(
        conversation_id=CONV.id,
        node_id=node_id,
        run_id=RUN,
        agent="shell",
        instance=None,
        summary="",
        template=node_id,
        deps=deps,
        state="completed",
        attempts=1,
        max_attempts=1,
        continuation=None,
        output_path=None,
        error=None,
        verdict=None,
        deadline=None,
    )


# a -> b, a -> c, (b, c) -> d: three layers, two nodes in the tallest.
DIAMOND = (("a", ()), ("b", ("a",)), ("c", ("a",)), ("d", ("b", "c")))


async def _finish(
    store: Store, tmp_path: Path, nodes: tuple[tuple[str, tuple[str, ...]], ...], **kw: object
) -> tuple[BytesChannel, ServicePort, Path]:
    run_dir, workspace = tmp_path / "runs" / RUN, tmp_path / "workspace"
    run_dir.mkdir(parents=True)
    workspace.mkdir()
    runs = RunStore(store)
    record = RunRecord(
        RUN, CONV, "draw", True, "completed", "U1", {}, run_dir, None, None, time.time() - 5, None
    )
    await runs.create_run(record, [_node(n, deps) for n, deps in nodes])
    log = ConversationLog(store)
    channel = BytesChannel()
    outbox = Outbox(log, {"test": channel}, retry_delays=(0.0,))
    port = ServicePort(log, outbox)
    events = ConversationRunEvents(
        runs,
        port,
        Reports("Run done."),
        attachments=RunAttachments(outbox, lambda _: workspace, **kw),  # type: ignore[arg-type]
    )
    snapshot = RunSnapshot(
        RUN,
        CONV,
        "draw",
        True,
        "completed",
        "U1",
        tuple(NodeSnapshot(n, "shell", "completed", 1) for n, _ in nodes),
    )
    await events.finished(snapshot)
    await outbox.idle()
    return channel, port, run_dir


async def test_a_four_node_run_sends_its_picture_once_after_the_report(
    store: Store, tmp_path: Path
) -> None:
    channel, port, run_dir = await _finish(store, tmp_path, DIAMOND)
    name = picture_name(RUN)
    assert name == "run-5c0ffee123.png"
    (report,) = port.turns
    assert f"📎 Attached to this thread: `{name}`." in report
    assert [e for e in channel.timeline if e.startswith("file:")] == [f"file:{name}"]
    # After the report's reply.
    assert channel.timeline.index("post:the run is done") < channel.timeline.index(f"file:{name}")
    image = Image.open(io.BytesIO(channel.uploaded[name]))
    image.load()
    assert image.format == "PNG" and image.size == (1080, 500)
    pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 50  # not blank
    # Written with the bot's own atomic write into the run's records, nothing half-written.
    assert (run_dir / RUN_PICTURE).read_bytes() == channel.uploaded[name]
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


async def test_a_three_node_run_sends_no_picture(store: Store, tmp_path: Path) -> None:
    channel, port, run_dir = await _finish(store, tmp_path, DIAMOND[:3])
    assert channel.uploaded == {}
    assert "📎" not in port.turns[0]
    assert not (run_dir / RUN_PICTURE).exists()


async def test_a_picture_that_cannot_be_drawn_leaves_the_report_alone(
    store: Store, tmp_path: Path
) -> None:
    def broken(picture: RunPicture) -> bytes:
        raise RuntimeError(f"no fonts for {picture.run_id}")

    channel, port, _ = await _finish(store, tmp_path, DIAMOND, draw=broken)
    assert port.turns == ["Run done."]
    assert "post:the run is done" in channel.timeline
    assert channel.uploaded == {}
