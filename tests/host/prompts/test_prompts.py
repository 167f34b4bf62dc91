"""The prompt broker: persistence, permissions, exactly-once decisions, expiry, restarts."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import pytest

from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Store
from host.prompts.broker import MAX_ANSWER_CHARS, DecisionHandler, PromptBroker, PromptPolicy
from host.runtime.prompt_record import APPROVE, DENY, Prompt
from tests.fakes.prompt_surface import RecordingPromptSurface
from tests.helpers import decision_bus

CONV = ConversationRef("test", "W1", "C1", "T1")
OTHER_CONV = ConversationRef("test", "W1", "C1", "T2")


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class HandlerLog:
    """Records every decision-handler call; can fail the first `fail` calls."""

    calls: list[Prompt] = field(default_factory=list)
    fail: int = 0

    async def __call__(self, prompt: Prompt) -> None:
        # Yield first, so concurrent answers really interleave around the handler.
        await asyncio.sleep(0)
        if self.fail > 0:
            self.fail -= 1
            raise RuntimeError("handler broke")
        self.calls.append(prompt)


@dataclass
class Rig:
    broker: PromptBroker
    surface: RecordingPromptSurface
    handler: HandlerLog
    clock: FakeClock


def make_rig(
    store: Store,
    *,
    surface: RecordingPromptSurface | None = None,
    handler: HandlerLog | None = None,
    clock: FakeClock | None = None,
    surfaces: Mapping[str, RecordingPromptSurface] | None = None,
) -> Rig:
    surface = surface or RecordingPromptSurface()
    handler = handler or HandlerLog()
    clock = clock or FakeClock()
    ids = itertools.count(1)
    handlers: dict[str, DecisionHandler] = {"ask_user": handler, "deploy": handler}
    broker = PromptBroker(
        store,
        surfaces=surfaces if surfaces is not None else {"test": surface},
        bus=decision_bus(handlers),
        policy=PromptPolicy(
            admins=frozenset({"root"}), approvers=("boss",), default_expiry_seconds=60
        ),
        clock=clock,
        new_id=lambda: f"p{next(ids)}-{id(clock)}",
    )
    return Rig(broker, surface, handler, clock)


async def approval(
    rig: Rig, *, expires_in: float | None = None, conversation: ConversationRef = CONV
) -> Prompt:
    return await rig.broker.create(
        conversation=conversation,
        kind="approval",
        question="Deploy to prod?",
        requester="alice",
        purpose="deploy",
        payload={"run": "r1"},
        expires_in=expires_in,
    )


async def choice(rig: Rig, conversation: ConversationRef = CONV) -> Prompt:
    return await rig.broker.create(
        conversation=conversation,
        kind="choice",
        question="Which region?",
        requester="alice",
        options=("eu-west", "us-east", "ap-south"),
    )


async def actions(rig: Rig, prompt_id: str) -> list[str]:
    return [a["action"] for a in await rig.broker.audit(prompt_id)]


async def test_prompt_is_persisted_before_it_is_shown(store: Store) -> None:
    seen: list[Prompt | None] = []

    async def on_show(prompt: Prompt) -> None:
        seen.append(await rig.broker.get(prompt.id))

    rig = make_rig(store, surface=RecordingPromptSurface(on_show=on_show))
    prompt = await approval(rig)

    assert seen[0] is not None and seen[0].state == "pending"
    assert prompt.options == (APPROVE, DENY)
    assert prompt.allowed_responders == ("alice", "boss")
    assert prompt.message_id == "pm1"
    stored = await rig.broker.get(prompt.id)
    assert stored is not None and stored.message_id == "pm1" and stored.payload == {"run": "r1"}
    assert await actions(rig, prompt.id) == ["created", "shown"]
    conv = await store.fetchone("SELECT id FROM conversations WHERE id = ?", (CONV.id,))
    assert conv is not None


async def test_requester_answer_is_accepted_closed_and_handled_once(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)

    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "alice", "approve")

    assert outcome.status == "accepted"
    assert outcome.prompt is not None and outcome.prompt.approved
    assert [(p.state, p.answer, p.answered_by) for p in rig.surface.closed] == [
        ("answered", APPROVE, "alice")
    ]
    assert [p.id for p in rig.handler.calls] == [prompt.id]
    assert rig.handler.calls[0].approved
    stored = await rig.broker.get(prompt.id)
    assert stored is not None and stored.state == "answered" and stored.decided_at == 1_000.0
    assert await actions(rig, prompt.id) == ["created", "shown", "answered", "handled"]
    assert await rig.broker.pending(CONV) == []


async def test_wrong_nonce_or_id_is_unknown(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)
    assert (await rig.broker.answer(prompt.id, "forged", "alice", APPROVE)).status == "unknown"
    assert (await rig.broker.answer("nope", prompt.nonce, "alice", APPROVE)).status == "unknown"
    assert (await rig.broker.get(prompt.id)).state == "pending"  # type: ignore[union-attr]


async def test_stranger_is_refused_privately_and_prompt_stays_pending(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)

    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "mallory", APPROVE)

    assert outcome.status == "not_allowed"
    assert outcome.notified
    assert rig.surface.private == [(CONV, "mallory", "Only alice or an approver can answer this.")]
    assert (await rig.broker.get(prompt.id)).state == "pending"  # type: ignore[union-attr]
    assert rig.handler.calls == []
    assert await actions(rig, prompt.id) == ["created", "shown", "refused"]


async def test_approver_and_admin_may_answer(store: Store) -> None:
    rig = make_rig(store)
    first = await approval(rig)
    second = await approval(rig)

    by_approver = await rig.broker.answer(first.id, first.nonce, "boss", DENY)
    by_admin = await rig.broker.answer(second.id, second.nonce, "root", "1")

    assert by_approver.status == "accepted" and by_approver.prompt is not None
    assert by_approver.prompt.answer == DENY and not by_approver.prompt.approved
    assert by_admin.status == "accepted" and by_admin.prompt is not None
    assert by_admin.prompt.approved and by_admin.prompt.answered_by == "root"


async def test_approvers_do_not_answer_plain_choices(store: Store) -> None:
    rig = make_rig(store)
    prompt = await choice(rig)
    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "boss", "1")
    assert outcome.status == "not_allowed"
    assert outcome.message == "Only alice can answer this."


async def test_extra_responders_may_answer(store: Store) -> None:
    rig = make_rig(store)
    prompt = await rig.broker.create(
        conversation=CONV,
        kind="choice",
        question="Pick",
        requester="alice",
        options=("a", "b"),
        extra_responders=("carol",),
    )
    assert (await rig.broker.answer(prompt.id, prompt.nonce, "carol", "b")).status == "accepted"


async def test_second_click_is_a_friendly_no_op(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)
    await rig.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE)

    again = await rig.broker.answer(prompt.id, prompt.nonce, "boss", DENY)

    assert again.status == "already_decided"
    assert again.message == "Already answered by alice: Approve."
    assert again.prompt is not None and again.prompt.approved
    assert len(rig.handler.calls) == 1 and len(rig.surface.closed) == 1
    assert (await actions(rig, prompt.id))[-1] == "duplicate"


async def test_concurrent_double_click_decides_once(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)

    outcomes = await asyncio.gather(
        rig.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE),
        rig.broker.answer(prompt.id, prompt.nonce, "boss", DENY),
        rig.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE),
    )

    statuses = sorted(o.status for o in outcomes)
    assert statuses == ["accepted", "already_decided", "already_decided"]
    assert len(rig.handler.calls) == 1
    assert len(rig.surface.closed) == 1
    assert (await actions(rig, prompt.id)).count("answered") == 1
    assert (await actions(rig, prompt.id)).count("handled") == 1


async def test_concurrent_answer_and_recover_run_the_handler_once(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)

    await asyncio.gather(
        rig.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE),
        rig.broker.recover(),
        rig.broker.recover(),
    )

    assert len(rig.handler.calls) == 1


async def test_answer_after_expiry_fails_closed(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)
    rig.clock.advance(60)  # exactly at the deadline counts as expired

    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE)

    assert outcome.status == "expired"
    assert "expired" in outcome.message
    assert outcome.prompt is not None and outcome.prompt.state == "expired"
    assert not outcome.prompt.approved
    assert [p.state for p in rig.handler.calls] == ["expired"]
    assert [p.state for p in rig.surface.closed] == ["expired"]
    # A later click still says expired and changes nothing.
    later = await rig.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE)
    assert later.status == "expired"
    assert len(rig.handler.calls) == 1


async def test_expire_due_fails_closed_and_runs_handler_once(store: Store) -> None:
    rig = make_rig(store)
    short = await approval(rig, expires_in=10)
    long = await approval(rig, expires_in=100)
    rig.clock.advance(30)

    expired = await rig.broker.expire_due()

    assert [p.id for p in expired] == [short.id]
    assert not expired[0].approved and expired[0].state == "expired"
    assert [(p.id, p.state) for p in rig.handler.calls] == [(short.id, "expired")]
    assert [p.id for p in rig.surface.closed] == [short.id]
    assert await rig.broker.expire_due() == []
    assert len(rig.handler.calls) == 1
    assert [p.id for p in await rig.broker.pending()] == [long.id]
    assert await actions(rig, short.id) == ["created", "shown", "expired", "handled"]


async def test_typed_reply_by_number_and_text(store: Store) -> None:
    rig = make_rig(store)
    region = await choice(rig)

    by_number = await rig.broker.answer_typed(CONV, "alice", " 2 ")
    assert by_number is not None and by_number.status == "accepted"
    assert by_number.prompt is not None and by_number.prompt.id == region.id
    assert by_number.prompt.answer == "us-east"

    deploy = await approval(rig)
    by_text = await rig.broker.answer_typed(CONV, "boss", "APPROVE")
    assert by_text is not None and by_text.status == "accepted"
    assert by_text.prompt is not None and by_text.prompt.id == deploy.id and by_text.prompt.approved


async def test_typed_reply_that_fits_several_prompts_answers_none_until_one_is_named(
    store: Store,
) -> None:
    rig = make_rig(store)
    older = await choice(rig)
    rig.clock.advance(1)
    newer = await approval(rig)

    # "1" fits both: neither is answered; the reply lists both by short id.
    both = await rig.broker.answer_typed(CONV, "alice", "1")
    assert both is not None and both.status == "ambiguous" and both.prompt is None
    assert f"`{older.id[:8]}`" in both.message and f"`{newer.id[:8]}`" in both.message
    assert len(await rig.broker.pending(CONV)) == 2
    # "ap-south" fits only the older choice; the confirmation names it.
    second = await rig.broker.answer_typed(CONV, "alice", "ap-south")
    assert second is not None and second.prompt is not None and second.prompt.id == older.id
    assert f"`{older.id[:8]}`" in second.message and "Which region?" in second.message
    # Now "1" fits one prompt only.
    third = await rig.broker.answer_typed(CONV, "alice", "1")
    assert third is not None and third.prompt is not None and third.prompt.id == newer.id


async def test_typed_reply_names_its_prompt_by_id_before_or_after_the_answer(
    store: Store,
) -> None:
    rig = make_rig(store)
    first, second = await choice(rig), await choice(rig)

    by_id_last = await rig.broker.answer_typed(CONV, "alice", f"2 {second.id[:8]}")
    assert by_id_last is not None and by_id_last.prompt is not None
    assert (by_id_last.prompt.id, by_id_last.prompt.answer) == (second.id, "us-east")
    by_id_first = await rig.broker.answer_typed(CONV, "alice", f"{first.id[:8]} ap-south")
    assert by_id_first is not None and by_id_first.prompt is not None
    assert (by_id_first.prompt.id, by_id_first.prompt.answer) == (first.id, "ap-south")
    # Naming a prompt already answered says so instead of starting a turn.
    again = await rig.broker.answer_typed(CONV, "alice", f"1 {first.id[:8]}")
    assert again is not None and again.status == "already_decided"


async def test_typed_reply_that_matches_nothing_is_a_normal_turn(store: Store) -> None:
    rig = make_rig(store)
    assert await rig.broker.answer_typed(CONV, "alice", "1") is None  # nothing pending
    await choice(rig)
    assert await rig.broker.answer_typed(CONV, "alice", "what does this do?") is None
    assert await rig.broker.answer_typed(CONV, "alice", "7") is None
    assert await rig.broker.answer_typed(OTHER_CONV, "alice", "1") is None
    assert len(await rig.broker.pending(CONV)) == 1


async def test_strangers_typed_answer_is_refused(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)

    outcome = await rig.broker.answer_typed(CONV, "mallory", "approve")

    assert outcome is not None and outcome.status == "not_allowed"
    assert rig.surface.private[-1][1] == "mallory"
    assert (await rig.broker.get(prompt.id)).state == "pending"  # type: ignore[union-attr]


async def test_free_text_prompt(store: Store) -> None:
    rig = make_rig(store)
    prompt = await rig.broker.create(
        conversation=CONV, kind="free_text", question="Which ticket?", requester="alice"
    )
    assert prompt.options == ()

    empty = await rig.broker.answer(prompt.id, prompt.nonce, "alice", "   ")
    assert empty.status == "invalid"
    too_long = await rig.broker.answer(
        prompt.id, prompt.nonce, "alice", "x" * (MAX_ANSWER_CHARS + 1)
    )
    assert too_long.status == "invalid" and str(MAX_ANSWER_CHARS) in too_long.message
    # A bystander's message is not an answer to someone else's free-text question.
    assert await rig.broker.answer_typed(CONV, "mallory", "hello all") is None

    typed = await rig.broker.answer_typed(CONV, "alice", "  OPS-1234, the flaky one ")

    assert typed is not None and typed.status == "accepted"
    assert typed.prompt is not None and typed.prompt.answer == "OPS-1234, the flaky one"
    assert [p.answer for p in rig.handler.calls] == ["OPS-1234, the flaky one"]


async def test_invalid_choice_lists_the_options(store: Store) -> None:
    rig = make_rig(store)
    prompt = await choice(rig)

    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "alice", "mars")

    assert outcome.status == "invalid"
    assert outcome.message == "Please answer with one of: 1. eu-west, 2. us-east, 3. ap-south."
    assert (await rig.broker.get(prompt.id)).state == "pending"  # type: ignore[union-attr]
    assert (await rig.broker.answer(prompt.id, prompt.nonce, "alice", "4")).status == "invalid"


async def test_create_validates_its_input(store: Store) -> None:
    rig = make_rig(store)
    with pytest.raises(ValueError):
        await rig.broker.create(conversation=CONV, kind="choice", question="?", requester="a")
    with pytest.raises(ValueError):
        await approval(rig, expires_in=0)
    assert await rig.broker.pending() == []


async def test_cancel_conversation(store: Store) -> None:
    rig = make_rig(store)
    first = await approval(rig)
    second = await choice(rig)
    elsewhere = await choice(rig, OTHER_CONV)

    assert await rig.broker.cancel_conversation(CONV) == 2

    assert sorted((p.id, p.state) for p in rig.handler.calls) == [
        (first.id, "cancelled"),
        (second.id, "cancelled"),
    ]
    assert {p.id for p in rig.surface.closed} == {first.id, second.id}
    assert [p.id for p in await rig.broker.pending()] == [elsewhere.id]
    late = await rig.broker.answer(first.id, first.nonce, "alice", APPROVE)
    assert late.status == "already_decided" and "cancelled" in late.message
    assert await rig.broker.cancel_conversation(CONV) == 0
    assert len(rig.handler.calls) == 2


async def test_show_failure_or_missing_surface_leaves_prompt_answerable(store: Store) -> None:
    rig = make_rig(store, surface=RecordingPromptSurface(fail_show=True, fail_close=True))
    prompt = await approval(rig)
    assert prompt.message_id is None
    assert await actions(rig, prompt.id) == ["created"]
    outcome = await rig.broker.answer_typed(CONV, "alice", "approve")
    assert outcome is not None and outcome.status == "accepted"  # a failed close is not fatal
    assert len(rig.handler.calls) == 1

    bare = make_rig(store, surfaces={})
    lone = await choice(bare)
    typed = await bare.broker.answer_typed(CONV, "alice", "eu-west")
    assert typed is not None and typed.status == "accepted"
    assert typed.prompt is not None and typed.prompt.id == lone.id


async def test_a_new_broker_answers_prompts_of_the_old_one(store: Store) -> None:
    old = make_rig(store)
    prompt = await approval(old)

    new = make_rig(store, clock=old.clock)
    outcome = await new.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE)

    assert outcome.status == "accepted"
    assert len(new.handler.calls) == 1 and new.surface.closed[0].message_id == "pm1"
    assert old.handler.calls == []


async def test_prompts_survive_reopening_the_database(store: Store) -> None:
    old = make_rig(store)
    prompt = await choice(old)
    await store.close()

    reopened = Store(store.path, all_migrations())
    await reopened.open()
    try:
        new = make_rig(reopened, clock=old.clock)
        await new.broker.recover()  # nothing to recover, nothing overdue
        assert [p.id for p in await new.broker.pending(CONV)] == [prompt.id]
        outcome = await new.broker.answer_typed(CONV, "alice", "3")
        assert outcome is not None and outcome.status == "accepted"
        assert outcome.prompt is not None and outcome.prompt.answer == "ap-south"
    finally:
        await reopened.close()


async def test_recover_reruns_a_failed_handler_exactly_once(store: Store) -> None:
    crashed = make_rig(store, handler=HandlerLog(fail=1))
    prompt = await approval(crashed)
    outcome = await crashed.broker.answer(prompt.id, prompt.nonce, "alice", APPROVE)
    assert outcome.status == "accepted"  # the decision stands even though its handler failed
    assert "handled" not in await actions(crashed, prompt.id)

    restarted = make_rig(store, clock=crashed.clock)
    await restarted.broker.recover()
    await restarted.broker.recover()

    assert [(p.id, p.approved) for p in restarted.handler.calls] == [(prompt.id, True)]
    assert (await actions(restarted, prompt.id)).count("handled") == 1


async def test_recover_expires_prompts_that_lapsed_while_down(store: Store) -> None:
    old = make_rig(store)
    prompt = await approval(old)
    old.clock.advance(3600)

    new = make_rig(store, clock=old.clock)
    await new.broker.recover()

    assert [(p.id, p.state) for p in new.handler.calls] == [(prompt.id, "expired")]


async def test_wait_returns_on_answer(store: Store) -> None:
    rig = make_rig(store)
    prompt = await choice(rig)
    waiter = asyncio.create_task(rig.broker.wait(prompt.id, poll_interval=60))
    await asyncio.sleep(0)

    await rig.broker.answer(prompt.id, prompt.nonce, "alice", "eu-west")

    async with asyncio.timeout(5):
        done = await waiter
    assert done.state == "answered" and done.answer == "eu-west"
    # Waiting on an already decided prompt returns at once.
    async with asyncio.timeout(5):
        assert (await rig.broker.wait(prompt.id)).state == "answered"


async def test_wait_returns_on_expiry_and_cancel(store: Store) -> None:
    rig = make_rig(store)
    expiring = await approval(rig, expires_in=10)
    cancelled = await choice(rig, OTHER_CONV)
    waiters = [
        asyncio.create_task(rig.broker.wait(expiring.id, poll_interval=60)),
        asyncio.create_task(rig.broker.wait(cancelled.id, poll_interval=60)),
    ]
    await asyncio.sleep(0)

    rig.clock.advance(11)
    await rig.broker.expire_due()
    await rig.broker.cancel_conversation(OTHER_CONV)

    async with asyncio.timeout(5):
        results = await asyncio.gather(*waiters)
    assert [p.state for p in results] == ["expired", "cancelled"]
    assert not results[0].approved


async def test_wait_notices_decisions_by_another_broker_and_deadlines(store: Store) -> None:
    one = make_rig(store)
    other = make_rig(store, clock=one.clock)
    answered = await choice(one)
    lapsing = await approval(one, expires_in=10)

    waiter = asyncio.create_task(one.broker.wait(answered.id, poll_interval=0.01))
    await other.broker.answer(answered.id, answered.nonce, "alice", "1")
    async with asyncio.timeout(5):
        assert (await waiter).answer == "eu-west"

    # Nobody sweeps: the waiter itself fails the lapsed prompt closed.
    lapse_waiter = asyncio.create_task(one.broker.wait(lapsing.id, poll_interval=0.01))
    await asyncio.sleep(0)
    one.clock.advance(10)
    async with asyncio.timeout(5):
        result = await lapse_waiter
    assert result.state == "expired" and not result.approved


async def test_wait_on_unknown_prompt_raises(store: Store) -> None:
    rig = make_rig(store)
    with pytest.raises(LookupError):
        await rig.broker.wait("missing")


async def test_audit_log_is_in_order(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)
    rig.clock.advance(1)
    await rig.broker.answer(prompt.id, prompt.nonce, "mallory", APPROVE)
    await rig.broker.answer(prompt.id, prompt.nonce, "boss", "deny")
    await rig.broker.answer(prompt.id, prompt.nonce, "alice", "approve")

    trail = await rig.broker.audit(prompt.id)

    assert [(a["action"], a["actor"]) for a in trail] == [
        ("created", "alice"),
        ("shown", "system"),
        ("refused", "mallory"),
        ("answered", "boss"),
        ("handled", "system"),
        ("duplicate", "alice"),
    ]
    assert trail[3]["detail"] == DENY
    assert [a["id"] for a in trail] == sorted(a["id"] for a in trail)
    assert all(set(a) == {"id", "prompt_id", "at", "actor", "action", "detail"} for a in trail)


async def test_migration_creates_prompt_tables(tmp_path: Path) -> None:
    db = Store(tmp_path / "fresh.db", all_migrations())
    await db.open()
    try:
        assert (await db.schema_versions())["prompts"] >= 1
        tables = {
            r["name"]
            for r in await db.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        assert {"prompts", "prompt_audit"} <= tables
        indexes = {
            r["name"]
            for r in await db.fetchall("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        assert {"prompts_by_state_expiry", "prompts_by_conversation"} <= indexes
    finally:
        await db.close()


async def test_recover_shows_a_prompt_stored_but_never_shown(store: Store) -> None:
    surface = RecordingPromptSurface(fail_show=True)
    broker = PromptBroker(store, surfaces=MappingProxyType({"test": surface}), bus=decision_bus({}))
    conv = ConversationRef("test", "W", "C", "T")
    prompt = await broker.create(
        conversation=conv, kind="approval", question="Ship it?", requester="U1"
    )
    assert surface.shown == [] and prompt.message_id is None
    again = RecordingPromptSurface()
    restarted = PromptBroker(
        store, surfaces=MappingProxyType({"test": again}), bus=decision_bus({})
    )
    await restarted.recover()
    assert [p.id for p in again.shown] == [prompt.id]
    stored = await restarted.get(prompt.id)
    assert stored is not None and stored.message_id == "pm1"
    await restarted.recover()
    assert len(again.shown) == 1


async def test_answer_before_the_message_id_is_recorded_still_closes_the_message(
    store: Store,
) -> None:
    # A typed answer lands while the post is in flight: its id is not stored yet, so the
    # decision cannot edit the message; recording the id must notice and close it.
    async def on_show(prompt: Prompt) -> None:
        outcome = await rig.broker.answer_typed(CONV, "alice", "approve")
        assert outcome is not None and outcome.status == "accepted"

    rig = make_rig(store, surface=RecordingPromptSurface(on_show=on_show))
    prompt = await approval(rig)

    assert prompt.state == "answered" and prompt.message_id == "pm1"
    assert [(p.state, p.message_id) for p in rig.surface.closed][-1] == ("answered", "pm1")
    stored = await rig.broker.get(prompt.id)
    assert stored is not None and stored.message_id == "pm1"
    assert len(rig.handler.calls) == 1


async def test_click_closes_the_message_it_came_from(store: Store) -> None:
    # The click carries its own message reference: the broker closes that message even
    # though the post that created it has not returned yet, and remembers its id.
    closed_during_show: list[str | None] = []

    async def on_show(prompt: Prompt) -> None:
        outcome = await rig.broker.answer(prompt.id, prompt.nonce, "alice", "1", message_id="pm1")
        assert outcome.status == "accepted" and outcome.prompt is not None
        assert outcome.prompt.message_id == "pm1"
        closed_during_show.extend(p.message_id for p in rig.surface.closed)
        stored = await rig.broker.get(prompt.id)
        assert stored is not None and stored.message_id == "pm1"

    rig = make_rig(store, surface=RecordingPromptSurface(on_show=on_show))
    prompt = await approval(rig)

    assert closed_during_show == ["pm1"]
    assert prompt.state == "answered" and prompt.approved


async def test_answer_reads_the_message_id_recorded_after_it_read_the_prompt(
    store: Store,
) -> None:
    # The prompt row is read before the id is recorded, then the decision commits: the
    # close must use the id as stored at decision time, not the stale copy's None.
    rig = make_rig(store)
    stale = await rig.broker.create(
        conversation=CONV, kind="approval", question="Ship?", requester="alice"
    )
    await store.execute("UPDATE prompts SET message_id = NULL WHERE id = ?", (stale.id,))
    copy = await rig.broker.get(stale.id)
    assert copy is not None and copy.message_id is None
    await store.execute("UPDATE prompts SET message_id = 'pm9' WHERE id = ?", (stale.id,))

    outcome = await rig.broker._decider.answer(copy, "alice", "approve")

    assert outcome.status == "accepted"
    assert [p.message_id for p in rig.surface.closed] == ["pm9"]
