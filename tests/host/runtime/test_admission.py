"""The one admission rule for work the bot starts on someone's behalf: judged by the
platform's live policy, machine access for the roles it reports, refusals audited, and a
platform that cannot answer only delays the work."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.ids import ConversationRef
from core.store import Store
from host.runtime.admission import Admission, Standing

SLACK = ConversationRef("slack", "T1", "C1", "1.0")
CONSOLE = ConversationRef("console", "local", "console", "console-1")


@dataclass
class Directory:
    """A platform's access policy as the admission sees it (Slack's and Discord's adapters
    in the bot), answering from `standings` or raising `failure`."""

    standings: dict[str, Standing] = field(default_factory=dict)
    failure: Exception | None = None
    asked: list[str] = field(default_factory=list)

    async def standing(self, user_id: str, conv: ConversationRef) -> Standing:
        self.asked.append(user_id)
        if self.failure is not None:
            raise self.failure
        return self.standings.get(user_id, Standing())


async def _audit(store: Store) -> list[tuple[str, str, str, str]]:
    rows = await store.fetchall("SELECT origin, subject, owner, outcome FROM admission_audit")
    return [(r["origin"], r["subject"], r["owner"], r["outcome"]) for r in rows]


async def test_a_refused_owner_is_audited_and_told_who_may_resume(store: Store) -> None:
    directory = Directory({"U2": Standing("not among the allowed users or roles")})
    admission = Admission(store, {"slack": directory}, served=["slack"], admins=["U9"])
    verdict = await admission.admit("firing", "U2", SLACK, subject="t_1", owner_name="bob")
    assert not verdict.admitted and not verdict.standing.transient
    assert "bob no longer passes" in verdict.notice and "An admin can resume" in verdict.notice
    assert await _audit(store) == [("firing", "t_1", "U2", "refused")]
    # Others, and admins whatever the lists say, pass; nothing more is audited.
    assert (await admission.admit("firing", "U1", SLACK, subject="t_2")).admitted
    assert (await admission.admit("firing", "U9", SLACK, subject="t_3")).admitted
    assert directory.asked == ["U2", "U1"]
    assert len(await _audit(store)) == 1


async def test_machine_access_is_judged_with_the_roles_the_platform_reports_now(
    store: Store,
) -> None:
    directory = Directory({"U2": Standing(None, ("R-now",))})
    admission = Admission(store, {"slack": directory}, served=["slack"])
    seen: list[tuple[str, ...]] = []

    def machine(roles: tuple[str, ...]) -> str | None:
        seen.append(roles)
        return None if "R-box" in roles else "You may not use machine `box`"

    verdict = await admission.admit("check", "U2", SLACK, subject="t_1", machine=machine)
    assert seen == [("R-now",)]
    assert verdict.standing.refusal == "You may not use machine `box`"
    assert await _audit(store) == [("check", "t_1", "U2", "refused")]


async def test_a_platform_that_cannot_answer_only_delays_the_work(store: Store) -> None:
    down = Directory(failure=ConnectionError("discord is unreachable"))
    admission = Admission(store, {"slack": down}, served=["slack", "console"])
    failed = await admission.admit("firing", "U2", SLACK, subject="t_1")
    assert not failed.admitted and failed.standing.transient
    # A platform the bot does not serve right now cannot judge anyone either.
    unserved = Admission(store, {}, served=["console"])
    elsewhere = await unserved.admit("firing", "U2", SLACK, subject="t_2")
    assert not elsewhere.admitted and elsewhere.standing.transient
    assert [o for *_, o in await _audit(store)] == ["skipped", "skipped"]
    # The console's ingress judges nobody, and so does its admission.
    assert (await admission.admit("firing", "me", CONSOLE, subject="t_3")).admitted
