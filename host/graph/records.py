"""File-backed run records. Per run, in `runs/<run>/`:

- `graph.json` (the admitted submission) and `manifest.json` (states, paths, accounting);
- `journal.jsonl`: one append-only journal holding every node record — the prompt, output
  and transcript of each attempt and the memory record of a completed node;
- the two files other agents read by path: `outputs/<node>.md` (a completed node's output)
  and `memory/<node>.md` (its memory record, paper Eq. 32).

The journal replaces a set of small fsynced files per node (and a directory per node, the
costliest part): lines are written in batches (off the event loop), and a batch is written
before the SQLite commit that settles the attempts it holds, so whatever was announced
survives a kill -9 (SQLite is the source of truth). The journal is fsynced just before the
store's checkpoint syncs SQLite's log (`core.store.checkpoints`), so after a power loss too
it holds whatever a surviving commit points at (without a store: at each `sync`). The
per-node files are views of the journal, written when the run ends, before its report (or
earlier for an agent that reads them from disk): readers fall back to the journal when one
is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from core.files import atomic_write
from core.store import BeforeCheckpoint

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a journal line nobody waits for may wait to share a synced write.
JOURNAL_DEFER_SECONDS = 0.05

JOURNAL = "journal.jsonl"
STARTED = "started.jsonl"


def write_view(path: Path, text: str) -> None:
    """Write one view file of a run, whole or not at all: written beside it and renamed over
    it, so a crash mid-write leaves no torn file that readers would take for the record.
    No fsync: the journal holds the durable copy, and readers fall back to it."""
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class GroupFlush(Generic[T]):
    """Group commit: items added while a flush runs go into the next flush, so a burst of
    changes costs one flush, and an idle one starts at once (no batching delay) — unless the
    items are deferred: nobody waits for them, so they wait up to `defer` seconds for a flush
    somebody waits for, and share it (a node's `running` state rides with its completion).

    One flush runs at a time, in a task owned by this object (`drain` awaits it); a waiter
    is resolved once every item added before it asked is flushed, or gets the flush's error.
    """

    def __init__(
        self, flush: Callable[[list[T]], Awaitable[None]], *, name: str, defer: float = 0.0
    ) -> None:
        self._flush = flush
        self._name = name
        self._defer = defer
        self._items: list[T] = []
        self._added = 0
        self._flushed = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = False  # something queued is waited for (or its deadline passed)
        # Set while a caller flushes a claimed batch itself; resolved at its release.
        self._claim: asyncio.Future[None] | None = None

    @property
    def idle(self) -> bool:
        """Nothing queued and no flush running."""
        return self._task is None and self._claim is None and not self._items

    def add(self, item: T) -> None:
        """Queue one item for the next flush (started now if none is running)."""
        self._items.append(item)
        self._added += 1
        self._start()

    def defer(self, item: T) -> None:
        """Queue one item nobody waits for: it shares the next flush somebody waits for, or
        is flushed `defer` seconds from now at the latest."""
        self._items.append(item)
        self._added += 1
        if self._task is None and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._defer, self._start)

    async def flushed(self) -> None:
        """Wait until every item added so far has been flushed (raises the flush's error)."""
        if self._flushed >= self._added:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((self._added, future))
        if self._items:
            self._start()  # deferred items (not in the flush that runs) are waited for now
        await future

    async def drain(self) -> None:
        """Wait until nothing is queued and no flush runs (errors were given to waiters)."""
        if self._items:
            self._start()
        while True:
            # A claim's release starts what was queued meanwhile.
            running = self._task or self._claim
            if running is None:
                return
            await asyncio.wait({running})

    def claim(self) -> Claim[T] | None:
        """Take everything queued, for a caller that flushes it itself as part of other work
        (one thread hop instead of two): None while a flush runs. Nothing else is flushed
        until the claim is released, so flushes keep their order."""
        if self._task is not None or self._claim is not None:
            return None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, self._items = self._items, []
        self._claim = asyncio.get_running_loop().create_future()
        self._due = False
        return Claim(items, self._added, self._release)

    def _release(self, upto: int, error: Exception | None) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.set_result(None)
        self._flushed = upto
        self._resolve(upto, error)
        if self._items:
            if self._due:
                self._start()
            elif self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self._defer, self._start)

    def _start(self) -> None:
        """What is queued is due: flush it now (or after the flush that runs)."""
        self._due = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is None and self._claim is None and self._items:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def _run(self) -> None:
        try:
            while self._items and self._due:
                self._due = False
                items, self._items = self._items, []
                upto = self._added
                error: Exception | None = None
                try:
                    await self._flush(items)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # handed to the waiters of this batch
                    error = exc
                self._flushed = upto
                self._resolve(upto, error)
        except asyncio.CancelledError:
            # The loop is closing: nobody will flush what is left.
            self._task = None
            self._items = []
            self._flushed = self._added
            for _, future in self._waiters:
                future.cancel()
            self._waiters = []
            raise
        self._task = None
        if self._items:
            # Only deferred items came in meanwhile: they wait for their own deadline.
            self._timer = asyncio.get_running_loop().call_later(self._defer, self._start)

    def _resolve(self, upto: int, error: Exception | None) -> None:
        keep: list[tuple[int, asyncio.Future[None]]] = []
        reported = error is None
        for target, future in self._waiters:
            if target > upto:
                keep.append((target, future))
            elif not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
                    reported = True
        self._waiters = keep
        if not reported:
            log.error("%s: a flush failed", self._name, exc_info=error)


class Claim(Generic[T]):
    """A batch a caller took from a `GroupFlush` to flush itself: `release` it once flushed,
    with the error when that failed (its waiters get it), exactly once."""

    def __init__(
        self, items: list[T], upto: int, release: Callable[[int, Exception | None], None]
    ) -> None:
        self.items = items
        self._upto = upto
        self._release: Callable[[int, Exception | None], None] | None = release

    def release(self, error: Exception | None = None) -> None:
        """The batch is flushed (or failed with `error`); later ones may go."""
        if self._release is not None:
            release, self._release = self._release, None
            release(self._upto, error)


@dataclass(frozen=True)
class _Line:
    record: dict[str, Any]


class _Barrier:
    """Asks the batch it lands in to fsync the journal (one per `sync` call)."""


class RunJournal:
    """The run's append-only journal (JSON lines).

    `record` queues a line and returns at once (written with the next sync, or within
    JOURNAL_DEFER_SECONDS, in a worker thread); `sync` waits until everything queued so far
    is written — the syncs of nodes settling together share one write. It is fsynced before
    each of `checkpoints`' checkpoints (without them: at each `sync`). `close` writes and
    fsyncs what is left.
    """

    def __init__(self, path: Path, checkpoints: BeforeCheckpoint | None = None) -> None:
        self.path = path
        self._handle: IO[bytes] | None = None
        # Guards the file handle: a batch thread may still run while `close` is called.
        self._io = threading.Lock()
        self._closed = False
        self._unsynced = False  # written since the last fsync
        # None: no store's checkpoints, so each `sync` fsyncs.
        self._stop_syncing = (
            None if checkpoints is None else checkpoints.before_checkpoint(self._fsync)
        )
        # Built once: `json.dumps` with options builds an encoder per call.
        self._encoder = json.JSONEncoder(ensure_ascii=False, default=str)
        # Lines nobody waits for share the next synced batch (a prompt, the answer and the
        # memory record of a short attempt: one write), or are written within this delay.
        self._now = GroupFlush[_Line | _Barrier](
            self._write, name=f"journal:{path.parent.name}", defer=JOURNAL_DEFER_SECONDS
        )

    def record(self, kind: str, node_id: str, attempt: int, **data: Any) -> None:
        """Append one record (`prompt`, `output`, `transcript`, `memory`) of a node attempt.

        Encoded in the batch thread: `data` must not change after this call."""
        self._now.defer(_Line({"kind": kind, "node": node_id, "attempt": attempt, **data}))

    async def sync(self) -> None:
        """Wait until every record queued so far is written (see the class)."""
        self._now.add(_Barrier())
        await self._now.flushed()

    def claim_sync(self) -> JournalSync | None:
        """What `sync` does, for a caller to run on a thread of its own as part of other work
        (a SQLite commit): None while a batch is being written (then `sync`)."""
        claim = self._now.claim()
        if claim is None:
            return None
        lines = [i.record for i in claim.items if isinstance(i, _Line)]
        return JournalSync(lambda: self._append(lines, durable=True), claim)

    async def close(self) -> None:
        """Write and sync what is queued, then close the file (idempotent)."""
        if not self._closed:
            await self.sync()
        await self._now.drain()
        if not self._closed:
            self._closed = True
            try:
                await asyncio.to_thread(self._close_handle)
            finally:
                if self._stop_syncing is not None:
                    self._stop_syncing()

    def _close_handle(self) -> None:
        with self._io:
            try:
                self._fsync_written()
            finally:
                if self._handle is not None:
                    self._handle.close()
                    self._handle = None

    def _fsync(self) -> None:
        """Before a checkpoint, on the store's writer thread: fsync what was written."""
        with self._io:
            self._fsync_written()

    def _fsync_written(self) -> None:
        # Holding `_io`.
        if self._handle is not None and self._unsynced:
            os.fdatasync(self._handle.fileno())
            self._unsynced = False

    async def _write(self, items: list[_Line | _Barrier]) -> None:
        lines = [i.record for i in items if isinstance(i, _Line)]
        # Written lines survive a kill -9 already; the fsync (for a power loss) is paid
        # before the store's next checkpoint, or (without a store) when somebody waits.
        durable = any(isinstance(i, _Barrier) for i in items)
        await asyncio.to_thread(self._append, lines, durable)

    def _append(self, lines: list[dict[str, Any]], durable: bool) -> None:
        with self._io:
            if lines:
                handle = self._open()
                encode = self._encoder.encode
                handle.write(b"".join(encode(r).encode() + b"\n" for r in lines))
                handle.flush()
                self._unsynced = True
            if durable and self._stop_syncing is None:
                self._fsync_written()

    def _open(self) -> IO[bytes]:
        if self._handle is None:
            if self._closed:
                raise RuntimeError(f"the journal {self.path} is closed")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            self._handle = self.path.open("ab")
            if created:
                # The new directory entry must survive too, not only the file's content.
                folder = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
        return self._handle


class JournalSync:
    """A claimed journal sync: `write` it on any thread (raises OSError when the journal
    could not be written), then `release` it on the event loop, exactly once, whether or not
    `write` ran."""

    def __init__(self, write: Callable[[], None], claim: Claim[_Line | _Barrier]) -> None:
        self._write = write
        self._claim = claim
        self._outcome: Exception | None = RuntimeError("the journal batch was not written")

    def write(self) -> None:
        """Append the claimed lines (fsynced as `RunJournal.sync` says)."""
        try:
            self._write()
        except Exception as exc:
            self._outcome = exc
            raise
        self._outcome = None

    def release(self) -> None:
        """Tell the journal's waiters how the write went (lines never written are lost, as
        when a batch fails)."""
        self._claim.release(self._outcome)


@dataclass
class AttemptRecords:
    """What the journal holds about one attempt of a node."""

    prompt: str | None = None
    output: str | None = None
    transcript: list[Any] | None = None
    memory: str | None = None


@dataclass
class NodeRecords:
    """A node's journal records, by attempt number."""

    attempts: dict[int, AttemptRecords] = field(default_factory=dict)

    def attempt(self, number: int) -> AttemptRecords:
        """The records of one attempt (empty when nothing was journaled)."""
        return self.attempts.get(number, AttemptRecords())

    @property
    def latest(self) -> AttemptRecords:
        """The records of the highest attempt journaled."""
        return self.attempts[max(self.attempts)] if self.attempts else AttemptRecords()


def read_journal(path: Path) -> Iterator[dict[str, Any]]:
    """Every record of a journal in order; a torn last line (a crash mid-write) is skipped."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        for raw in handle:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def journal_records(path: Path) -> dict[str, NodeRecords]:
    """The journal's records grouped by node and attempt."""
    nodes: dict[str, NodeRecords] = {}
    for record in read_journal(path):
        node_id, attempt, kind = record.get("node"), record.get("attempt"), record.get("kind")
        if not isinstance(node_id, str) or not isinstance(attempt, int):
            continue
        entry = nodes.setdefault(node_id, NodeRecords()).attempts.setdefault(
            attempt, AttemptRecords()
        )
        if kind == "transcript":
            items = record.get("items")
            entry.transcript = items if isinstance(items, list) else []
        elif kind in ("prompt", "output", "memory"):
            setattr(entry, kind, str(record.get("text", "")))
    return nodes


class RunFiles:
    """Where a run's records live on disk."""

    def __init__(self, runs_root: Path) -> None:
        self.root = runs_root

    def run_dir(self, run_id: str) -> Path:
        """`runs/<run>/`."""
        return self.root / run_id

    def outputs_dir(self, run_id: str) -> Path:
        """`runs/<run>/outputs/`: one `<node>.md` per completed node."""
        return self.run_dir(run_id) / "outputs"

    def memory_dir(self, run_id: str) -> Path:
        """`runs/<run>/memory/`: one `<node>.md` memory record per completed node."""
        return self.run_dir(run_id) / "memory"

    def output_path(self, run_id: str, node_id: str) -> Path:
        """The completed node's output file (what successors and reports reference)."""
        return self.outputs_dir(run_id) / f"{node_id}.md"

    def memory_path(self, run_id: str, node_id: str) -> Path:
        """The deterministic location of the node's memory record (paper Eq. 32)."""
        return self.memory_dir(run_id) / f"{node_id}.md"

    def memory_beside(self, output_path: Path) -> Path:
        """The memory record of the node whose output file this is."""
        if output_path.name == "output.md":
            # Recorded before the journal: runs/<run>/nodes/<node>/{output,memory}.md.
            return output_path.with_name("memory.md")
        return output_path.parent.parent / "memory" / output_path.name

    def started_path(self, run_id: str) -> Path:
        """`runs/<run>/started.jsonl`: each attempt, written just before its agent starts."""
        return self.run_dir(run_id) / STARTED

    def started(self, run_id: str) -> dict[str, int]:
        """The highest attempt of each node that was started (a torn last line skipped)."""
        latest: dict[str, int] = {}
        for record in read_journal(self.started_path(run_id)):
            node_id, attempt = record.get("node"), record.get("attempt")
            if isinstance(node_id, str) and isinstance(attempt, int):
                latest[node_id] = max(attempt, latest.get(node_id, 0))
        return latest

    def journal_path(self, run_id: str) -> Path:
        """`runs/<run>/journal.jsonl`: every node record of the run, in order."""
        return self.run_dir(run_id) / JOURNAL

    @staticmethod
    def memory_listing(memory_dir: Path, node_ids: list[str]) -> str:
        """The memory record paths of `node_ids` (sorted) of one run as one line.

        One node: its path. Several: the path pattern and the ids, so a node with a hundred
        ancestors gets one short line instead of a hundred full paths (prompts stayed
        quadratic in the graph size otherwise)."""
        if len(node_ids) == 1:
            return f"{memory_dir}{os.sep}{node_ids[0]}.md"
        return f"{memory_dir}{os.sep}<id>.md for each <id> in: {', '.join(node_ids)}"

    def open_journal(self, run_id: str, checkpoints: BeforeCheckpoint | None = None) -> RunJournal:
        """The run's journal (appended to, also after a restart)."""
        return RunJournal(self.journal_path(run_id), checkpoints)

    def records(self, run_id: str) -> dict[str, NodeRecords]:
        """Everything the run's journal holds, by node and attempt."""
        return journal_records(self.journal_path(run_id))

    def write_graph(self, run_id: str, submission: dict[str, Any]) -> Path:
        """`graph.json`: the admitted submission, exactly as run."""
        path = self.run_dir(run_id) / "graph.json"
        atomic_write(path, json.dumps(submission, indent=2, ensure_ascii=False))
        return path

    def write_manifest(self, run_id: str, manifest: dict[str, Any]) -> Path:
        """`manifest.json`: run state, node states, paths and accounting."""
        path = self.run_dir(run_id) / "manifest.json"
        atomic_write(path, json.dumps(manifest, indent=2, ensure_ascii=False, default=str))
        return path


def read_output(path: Path, *, restore: bool = False) -> str:
    """A completed node's output: its file, or the journal's copy when the file is gone
    (output files are not fsynced; the journal is). With `restore`, a missing file is
    written again from the journal (for a later graph that reads it by path). Raises
    OSError when neither has it."""
    return _read_view(path, "output", restore=restore)


def read_memory(path: Path) -> str:
    """A completed node's memory record (`memory/<node>.md`): its file, or the journal's
    copy. Raises OSError when neither has it."""
    return _read_view(path, "memory", restore=False)


def _read_view(path: Path, kind: str, *, restore: bool) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        # runs/<run>/<outputs|memory>/<node>.md → runs/<run>/journal.jsonl, node <node>
        journal = path.parent.parent / JOURNAL
        latest = journal_records(journal).get(path.stem, NodeRecords()).latest
        text: str | None = getattr(latest, kind)
        if text is None:
            raise
    if restore:
        try:
            write_view(path, text)
        except OSError:
            log.exception("restoring %s from the journal failed", path)
    return text
