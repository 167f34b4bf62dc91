"""Per-user archives in SQLite and the offline episode rule."""

from __future__ import annotations

from core.store import Store
from memory.archive import Archive, NewFact, user_owner
from memory.episodes import from_turn, same_topic

ALICE = user_owner("slack", "T1", "U1")
BOB = user_owner("slack", "T1", "U2")


async def test_notes_episodes_and_facts_belong_to_their_owner(store: Store) -> None:
    archive = Archive(store)
    await archive.add_note(ALICE, "prefers answers in French")
    await archive.add_note(BOB, "likes long reports")
    episode = await archive.add_episode(
        ALICE, "alice set up CI", [NewFact("fact", "I use GitHub Actions")], conversation_id="c1"
    )
    assert [n.text for n in await archive.notes(ALICE)] == ["prefers answers in French"]
    (stored,) = await archive.episodes(ALICE)
    assert stored.id == episode.id and [f.text for f in stored.facts] == ["I use GitHub Actions"]
    assert await archive.episodes(BOB) == []
    docs = [d async for d in archive.documents()]
    assert {(d[1], d[2]) for d in docs} == {
        (ALICE, "note"),
        (BOB, "note"),
        (ALICE, "episode"),
        (ALICE, "fact"),
    }
    fact_doc = next(d for d in docs if d[2] == "fact")
    assert fact_doc[4] == f"episode:{episode.id}"


async def test_forget_matches_text_literally_and_only_for_the_owner(store: Store) -> None:
    archive = Archive(store)
    await archive.add_note(ALICE, "50% of my time is on-call")
    await archive.add_note(ALICE, "my editor is vim")
    await archive.add_note(BOB, "50% of my time is on-call")
    gone = await archive.forget(ALICE, containing="50%")
    assert len(gone) == 1
    assert [n.text for n in await archive.notes(ALICE)] == ["my editor is vim"]
    assert len(await archive.notes(BOB)) == 1  # another person's identical note stays
    await archive.forget(ALICE, containing="_")  # a wildcard character matches nothing here
    assert len(await archive.notes(ALICE)) == 1


async def test_forget_everything_removes_episodes_and_facts(store: Store) -> None:
    archive = Archive(store)
    episode = await archive.add_episode(
        ALICE,
        "n",
        [NewFact("fact", "I like tea"), NewFact("foresight", "I will move")],
        conversation_id="c1",
    )
    gone = await archive.forget(ALICE)
    assert set(gone) == {f"episode:{episode.id}", *(f"fact:{f.id}" for f in episode.facts)}
    assert await archive.episodes(ALICE) == []
    rows = await store.fetchall("SELECT COUNT(*) AS n FROM memory_facts")
    assert rows[0]["n"] == 0


async def test_a_profile_section_is_revised_in_place(store: Store) -> None:
    archive = Archive(store)
    first = await archive.set_profile(ALICE, "python", "writes Python")
    second = await archive.set_profile(ALICE, "python", "writes typed Python")
    assert first.id == second.id
    assert [n.text for n in await archive.notes(ALICE, kind="profile")] == ["writes typed Python"]


def test_the_offline_rule_keeps_self_statements_as_facts_and_future_ones_as_foresight() -> None:
    turn = from_turn(
        "alice",
        "I work on the billing service. Next week I will migrate it to Postgres. What is 2+2?",
        now=1000.0,
    )
    assert [(f.kind, f.text) for f in turn.facts] == [
        ("fact", "I work on the billing service."),
        ("foresight", "Next week I will migrate it to Postgres."),
    ]
    foresight = turn.facts[1]
    assert foresight.valid_from == 1000.0 and foresight.valid_until is not None
    assert foresight.valid_until > 1000.0
    assert turn.tag in {"billing", "service", "postgres", "migrate", "work", "week", "next"}


def test_topic_boundaries_follow_word_overlap() -> None:
    first = from_turn("alice", "the billing service postgres migration plan", now=0)
    same = from_turn("alice", "more on the postgres migration of billing", now=1)
    other = from_turn("alice", "recommend a good pasta recipe", now=2)
    assert same_topic(first.narrative, same)
    assert not same_topic(first.narrative, other)
