"""The memory service: per-user archives in SQLite plus the derived hybrid index.

Records written in a DM live in the owner's DM partition (`<owner>#dm`): a channel turn
recalls only the owner's shared partition, so a DM-only preference never surfaces there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.pipe_table import pipe_table
from memory.archive import Archive, Note, Scope
from memory.episodes import EpisodeFormer, RuleFormer, content_words, overlap
from memory.erasure import UserErasure
from memory.index import Doc, Hit, HybridIndex

log = logging.getLogger(__name__)

PROFILE_AFTER_NOTES = 3  # notes sharing a tag that (re)write its profile section
SAME_EPISODE_SECONDS = 1800.0
INDEX_SAVE_DELAY_SECONDS = 2.0  # index writes of a burst of turns coalesce into one save


def partition(owner: str, scope: Scope) -> str:
    """The index partition of an owner's records of one scope."""
    return f"{owner}#dm" if scope == "dm" else owner


class DocumentSource(Protocol):
    """Records kept elsewhere in SQLite that the derived index also holds."""

    async def documents(self) -> list[Doc]:
        """Every record as an index document."""
        ...

    async def forget_owner(self, owner: str) -> list[str]:
        """Erase what this source keeps derived from a user; the index partitions to drop."""
        ...


@dataclass(frozen=True)
class Recalled:
    """Context for one turn: the closest archive sections and the recalled records."""

    sections: tuple[Note, ...]
    hits: tuple[Hit, ...]


class MemoryService:
    """Remember, recall and forget one person's records; keep the index in step."""

    def __init__(
        self,
        archive: Archive,
        index: HybridIndex,
        *,
        sources: Sequence[DocumentSource] = (),
        former: EpisodeFormer | None = None,
        clock: Callable[[], float] = time.time,
        save_delay: float = INDEX_SAVE_DELAY_SECONDS,
        erasure: UserErasure | None = None,
    ) -> None:
        self._former = former or RuleFormer()
        # `forget everything` through it erases every row and run record derived from the
        # user (memory.erasure lists them); without it only memory's own records go.
        self._erasure = erasure
        self._archive = archive
        self._index = index
        self._sources = tuple(sources)  # other SQLite records a rebuild indexes (group memory)
        self._clock = clock
        self._save_delay = save_delay
        self._save_task: asyncio.Task[None] | None = None
        self._save_now = asyncio.Event()

    @property
    def archive(self) -> Archive:
        """The SQLite records."""
        return self._archive

    @property
    def index(self) -> HybridIndex:
        """The derived recall index."""
        return self._index

    async def load_index(self) -> None:
        """Open the derived index from its files, rebuilt from SQLite when they are missing,
        corrupt or built with another embedder (after the store is open)."""
        await self._load()
        await self.finish_erasures()

    async def finish_erasures(self) -> None:
        """Finish the erasures a crash (or a live run) left unfinished."""
        if self._erasure is not None:
            # An erasure a crash (or a live run) left unfinished is finished before serving.
            for owner in await self._erasure.unfinished():
                await self._erase(owner, self._erasure)

    async def _load(self) -> None:
        current = self._index
        assert current.directory is not None, "the index needs a directory to load from"
        self._index = await HybridIndex.load(
            current.directory, current.embedder, self._source(), current.settings
        )

    async def warm_up(self) -> None:
        """Load the embedder's model now: loaded by the first turn that needs it instead, it
        stalls that turn and leaves its objects to the cyclic collector's full passes."""
        if self._index.embedder is not None:
            await self._index.embedder.embed(["warm-up"])

    async def reindex(self) -> int:
        """Rebuild the index from SQLite without reading its files (`raven-bot memory
        reindex`, an erasure); the documents count. Asked for, it is no warning: no file can
        be found missing or stale."""
        current = self._index
        assert current.directory is not None
        await asyncio.to_thread(shutil.rmtree, current.directory, True)
        fresh = HybridIndex(current.embedder, current.directory, current.settings)
        await fresh.add([doc async for doc in self._source()])
        await fresh.save()
        self._index = fresh
        return self._index.count()

    async def save_index(self) -> None:
        """Write the index's changed partitions now (at shutdown; it is derived, so a crash
        only costs a re-encode of what changed): a pending save runs at once instead."""
        if self._save_task is None:
            await self._index.save()
            return
        self._save_now.set()
        try:
            while (task := self._save_task) is not None:
                await asyncio.gather(task, return_exceptions=True)
        finally:
            self._save_now.clear()

    def _save_soon(self) -> None:
        """Save within `save_delay`: per turn, the manifest of every owner was rewritten and
        fsynced; a burst of turns now costs one save."""
        if self._save_task is None:
            self._save_task = asyncio.get_running_loop().create_task(
                self._delayed_save(), name="memory-index-save"
            )

    async def _delayed_save(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._save_now.wait(), self._save_delay)
        self._save_task = None  # what changes from here on gets the next save
        try:
            await self._index.save()
        except Exception:
            log.exception("memory: saving the recall index failed (it is rebuilt at start)")

    async def _source(self) -> AsyncIterator[Doc]:
        for doc in await self.documents():
            yield doc

    async def remember(
        self, owner: str, name: str, text: str, *, dm: bool, conversation_id: str | None = None
    ) -> Note:
        """Store an explicit note (`remember …`) and index it."""
        scope: Scope = "dm" if dm else "any"
        await self._archive.ensure_user(owner, name)
        note = await self._archive.add_note(
            owner, text, tag="remembered", scope=scope, conversation_id=conversation_id
        )
        await self._index.add([Doc(f"note:{note.id}", partition(owner, scope), "note", text, None)])
        self._save_soon()
        return note

    async def record_turn(
        self,
        owner: str,
        name: str,
        request: str,
        *,
        conversation_id: str,
        turn_id: str,
        dm: bool,
    ) -> None:
        """Fold a completed turn into an episode (new, or continuing the topic), its note,
        and the profile section of its tag once enough notes share it. A turn already
        recorded is skipped (recovery after a crash may offer it again)."""
        if await self._archive.has_turn(owner, turn_id):
            return
        scope: Scope = "dm" if dm else "any"
        await self._archive.ensure_user(owner, name)
        last = await self._archive.last_episode(owner, conversation_id)
        recent = last is not None and self._clock() - last.created_at < SAME_EPISODE_SECONDS
        if last is None or not recent or last.scope != scope:
            last = None  # nothing this turn may continue
        # Only the author's words: the bot's reply (an offline notice included) is not memory
        # of the person, so it is not even taken.
        formed = await self._former.form(
            name, request, previous=last.narrative if last else None, now=self._clock()
        )
        turn = formed.memory
        docs: list[Doc] = []
        part = partition(owner, scope)
        if last is not None and formed.continues:
            narrative = f"{last.narrative}\n{turn.narrative}"[-2000:]
            facts = await self._archive.extend_episode(last.id, narrative, turn.facts, turn_id)
            episode_doc = f"episode:{last.id}"
            await self._index.remove([episode_doc])
            docs.append(Doc(episode_doc, part, "episode", narrative, None))
        else:
            episode = await self._archive.add_episode(
                owner,
                turn.narrative,
                turn.facts,
                conversation_id=conversation_id,
                scope=scope,
                source_turns=(turn_id,),
            )
            facts = list(episode.facts)
            episode_doc = f"episode:{episode.id}"
            docs.append(Doc(episode_doc, part, "episode", episode.narrative, None))
        docs += [Doc(f"fact:{f.id}", part, "fact", f.text, episode_doc) for f in facts]
        if turn.facts:
            note = await self._archive.add_note(
                owner,
                "; ".join(f.text for f in turn.facts),
                tag=turn.tag,
                scope=scope,
                conversation_id=conversation_id,
                source_turn=turn_id,
            )
            docs.append(Doc(f"note:{note.id}", part, "note", note.text, None))
            await self._revise_profile(owner, turn.tag, docs)
        await self._index.add(docs)
        # Derived, but saving soon spares a re-encode of this turn at the next start.
        self._save_soon()

    async def _revise_profile(self, owner: str, tag: str, docs: list[Doc]) -> None:
        if not tag:
            return
        notes = [n for n in await self._archive.notes(owner, kind="note") if n.tag == tag]
        shared = [n for n in notes if n.scope == "any"]
        if len(shared) < PROFILE_AFTER_NOTES or len(shared) % PROFILE_AFTER_NOTES:
            return
        text = f"About {tag}: " + "; ".join(n.text for n in shared[-8:])
        profile = await self._archive.set_profile(owner, tag, text[:1500])
        await self._index.remove([f"note:{profile.id}"])
        docs.append(Doc(f"note:{profile.id}", owner, "profile", profile.text, None))

    async def recall(self, owner: str, query: str, *, dm: bool, k: int = 5) -> Recalled:
        """The two archive sections closest to `query` and the top-k hybrid hits, from the
        owner's own partitions only (the DM one only in a DM)."""
        partitions = [owner, partition(owner, "dm")] if dm else [owner]
        hits: list[Hit] = []
        for part in partitions:
            hits += await self._index.search(part, query, k)
        hits.sort(key=lambda h: h.score, reverse=True)
        notes = [n for n in await self._archive.notes(owner) if dm or n.scope == "any"]
        words = content_words(query)
        ranked = sorted(notes, key=lambda n: overlap(content_words(n.text), words), reverse=True)
        sections = tuple(n for n in ranked[:2] if overlap(content_words(n.text), words) > 0)
        return Recalled(sections, tuple(hits[:k]))

    async def describe(self, owner: str, *, dm: bool) -> str:
        """`what do you remember about me`: the owner's notes and facts (DM ones only in a DM)."""
        notes = [n for n in await self._archive.notes(owner) if dm or n.scope == "any"]
        episodes = [e for e in await self._archive.episodes(owner) if dm or e.scope == "any"]
        facts = [f for e in episodes for f in e.facts]
        rows = [["profile", n.text] for n in notes if n.kind == "profile"]
        rows += [
            ["you told me", n.text] for n in notes if n.kind == "note" and n.tag == "remembered"
        ]
        rows += [["plan" if f.kind == "foresight" else "fact", f.text] for f in facts[-15:]]
        if not rows:
            return "I don't remember anything about you yet."
        hidden = "" if dm else " (things you told me in a DM stay there)"
        # A table (Kind, Remembered): drawn natively in chat, aligned on the console.
        table = pipe_table(("Kind", "Remembered"), rows[:30])
        return f"Here is what I remember about you{hidden}:\n\n{table}"

    async def forget(self, owner: str, containing: str | None = None) -> int:
        """Delete the owner's records (all, or those containing `containing`) and their
        index entries; return how many records went. Everything (`containing` None) with an
        erasure: every row and run record derived from the user, then a rebuilt index."""
        if containing is None and self._erasure is not None:
            return await self._erase(owner, self._erasure)
        gone = await self._archive.forget(owner, containing=containing)
        if containing is None:
            partitions = [owner, partition(owner, "dm")]
            for source in self._sources:
                partitions += await source.forget_owner(owner)
            for part in partitions:
                await self._index.remove_owner(part)
        elif gone:
            await self._index.remove(gone)
        return len(gone)

    async def _erase(self, owner: str, erasure: UserErasure) -> int:
        erased = await erasure.erase(owner)
        # Rebuilt, not patched: derived documents of the user live in many partitions
        # (their own, their host libraries, conversations' verdict audiences).
        await self.reindex()
        if erased.complete:
            await erasure.finish(owner)
        else:
            log.info("memory: a run of %s is still going; its erasure finishes later", owner)
        return erased.records

    async def documents(self) -> list[Doc]:
        """Every record as an index document (what a rebuild indexes)."""
        docs = [
            Doc(doc_id, partition(owner, scope), kind, text, parent)  # type: ignore[arg-type]
            async for doc_id, owner, kind, text, parent, scope in self._archive.documents()
        ]
        for source in self._sources:
            docs += await source.documents()
        return docs


def render_recalled(recalled: Recalled, *, budget_chars: int, fence: Callable[[str], str]) -> str:
    """The memory block for the Host's system prompt, fenced, within `budget_chars`."""
    if not recalled.sections and not recalled.hits:
        return ""
    lines: list[str] = []
    for note in recalled.sections:
        lines.append(f"[archive: {note.tag or note.kind}] {note.text}")
    for hit in recalled.hits:
        lines.append(f"[{hit.doc.kind}, score {hit.score:.2f}] {hit.doc.text}")
        lines += [f"    [{c.doc.kind}] {c.doc.text}" for c in hit.children]
    body, used = [], 0
    for line in lines:
        if used + len(line) > budget_chars:
            break
        body.append(line)
        used += len(line) + 1
    return fence("\n".join(body))
