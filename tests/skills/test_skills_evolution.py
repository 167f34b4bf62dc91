"""Experience → skill evolution (paper §6.3): case modes, intent clustering (Eqs. 75–76),
operation parsing and the exact validation of add/update operations (Eq. 81)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from skills.evolution import (
    Case,
    Cluster,
    ExtractLimits,
    Operation,
    OperationsError,
    SkillRecord,
    apply_operations,
    assign,
    body_ok,
    cosine,
    extract_update,
    format_context,
    merge,
    mode,
    parse_confidence,
    parse_operations,
    singleton,
    support_ids,
    support_pool,
)

GOOD_BODY = "\n".join(f"{i}. do step number {i} carefully" for i in range(1, 6))
OTHER_BODY = "\n".join(f"- revised step {i} of the procedure" for i in range(1, 7))


def case(cid: str = "c9", quality: float = 0.8, timestamp: float = 100.0, **kw: Any) -> Case:
    fields = {"intent": f"intent {cid}", "approach": f"approach {cid}", "insight": "lesson"}
    fields.update(kw)
    return Case(id=cid, timestamp=timestamp, quality=quality, **fields)


def skill(name: str = "deploy", lineage: tuple[str, ...] = ("c1",), **kw: Any) -> SkillRecord:
    fields: dict[str, Any] = {"description": f"when {name}", "body": GOOD_BODY, "confidence": 0.6}
    fields.update(kw)
    return SkillRecord(name=name, lineage=lineage, **fields)


def add(**fields: Any) -> Operation:
    return Operation(action="add", **fields)


def update(index: int | None, **fields: Any) -> Operation:
    return Operation(action="update", index=index, **fields)


def cluster(centroid: list[float], count: int = 1, **kw: Any) -> Cluster:
    fields: dict[str, Any] = {
        "id": "k",
        "members": tuple(f"m{i}" for i in range(count)),
        "timestamp": 50.0,
        "previews": ("p",),
    }
    fields.update(kw)
    return Cluster(centroid=np.array(centroid, dtype=np.float64), count=count, **fields)


# --- cases and modes (Eqs. 74, 79) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("quality", "expected"),
    [(0.0, "skip"), (0.19, "skip"), (0.2, "failure"), (0.49, "failure"), (0.5, "success")],
)
def test_mode_thresholds(quality: float, expected: str) -> None:
    assert mode(quality) == expected


def test_mode_with_a_custom_skip_threshold() -> None:
    assert mode(0.3, theta_skip=0.35) == "skip"
    assert mode(1.0, theta_skip=0.35) == "success"


def test_case_quality_is_clipped() -> None:
    assert case(quality=1.7).quality == 1.0
    assert case(quality=-0.3).quality == 0.0
    assert case(quality=float("nan")).quality == 0.0
    assert case(quality=0.42).quality == 0.42


# --- clustering (Eqs. 75-76) ---------------------------------------------------------------


def test_cosine_uses_the_epsilon_in_both_norms() -> None:
    assert cosine([3.0, 4.0], [4.0, 3.0]) == pytest.approx(24 / 25)
    assert cosine([1.0, 0.0], [1.0, 0.0]) == 1 / (1 + 1e-9) ** 2
    assert cosine([1.0, 0.0], [0.0, 2.0]) == 0.0
    assert cosine([0.0, 0.0], [1.0, 1.0]) == 0.0  # no division by zero
    assert cosine([2.0, 0.0], [1.0, 0.0], eps=1.0) == pytest.approx(2 / (3 * 2))


def test_merge_updates_the_mean_members_timestamp_and_previews() -> None:
    base = cluster([1.0, 0.0], count=3, timestamp=50.0, previews=("a", "b", "c", "d", "e"))
    merged = merge(base, [0.0, 1.0], case("new", timestamp=40.0, intent="latest"))
    # (3·[1, 0] + [0, 1]) / 4
    np.testing.assert_allclose(merged.centroid, [0.75, 0.25])
    assert merged.count == 4
    assert merged.members == ("m0", "m1", "m2", "new")
    assert merged.timestamp == 50.0  # the case is older: the latest timestamp stays
    assert merged.previews == ("b", "c", "d", "e", "latest")  # at most five, newest kept
    assert merged.id == base.id
    np.testing.assert_allclose(base.centroid, [1.0, 0.0])  # the input is not mutated
    newer = merge(base, [1.0, 0.0], case("n2", timestamp=70.0))
    assert newer.timestamp == 70.0


def test_singleton_holds_only_the_case() -> None:
    c = case("c5", timestamp=12.0, intent="write a report")
    made = singleton([0.5, 0.5], c)
    assert (made.count, made.members, made.timestamp, made.previews) == (
        1,
        ("c5",),
        12.0,
        ("write a report",),
    )
    np.testing.assert_allclose(made.centroid, [0.5, 0.5])


async def test_assign_merges_into_the_most_similar_cluster_over_the_threshold() -> None:
    near = cluster([1.0, 0.1], id="near")
    nearer = cluster([1.0, 0.0], count=2, id="nearer")
    joined, created = await assign([1.0, 0.0], case(), [near, nearer])
    assert not created
    assert joined.id == "nearer" and joined.count == 3


async def test_assign_without_eligible_clusters_makes_a_singleton() -> None:
    empty_count = cluster([1.0, 0.0], count=0, id="zero")
    empty_vec = Cluster(
        id="void",
        centroid=np.array([], dtype=np.float64),
        count=2,
        members=("a", "b"),
        timestamp=1.0,
        previews=(),
    )
    joined, created = await assign([1.0, 0.0], case("c1"), [empty_count, empty_vec])
    assert created and joined.members == ("c1",)
    alone, created = await assign([1.0, 0.0], case("c2"), [])
    assert created and alone.members == ("c2",)


async def test_below_the_threshold_without_a_decider_makes_a_singleton() -> None:
    joined, created = await assign([1.0, 0.0], case("c1"), [cluster([0.0, 1.0])])
    assert created and joined.count == 1


async def test_below_the_threshold_the_decider_picks_among_recalled_clusters() -> None:
    far = cluster([0.0, 1.0], id="far")
    mid = cluster([1.0, 1.5], id="mid")
    seen: list[list[str]] = []

    async def decide(recalled: list[Cluster], c: Case) -> int | None:
        seen.append([k.id for k in recalled])
        return 1

    joined, created = await assign([1.0, 0.0], case(), [far, mid], decide=decide)
    assert seen == [["mid", "far"]]  # recalled best first
    assert not created and joined.id == "far" and joined.count == 2


@pytest.mark.parametrize("answer", [None, 2, -1])
async def test_a_new_cluster_or_invalid_index_decision_makes_a_singleton(
    answer: int | None,
) -> None:
    async def decide(recalled: list[Cluster], c: Case) -> int | None:
        return answer

    joined, created = await assign(
        [1.0, 0.0], case("c3"), [cluster([0.0, 1.0]), cluster([1.0, 2.0])], decide=decide
    )
    assert created and joined.members == ("c3",)


async def test_a_decider_error_propagates_for_retry() -> None:
    async def decide(recalled: list[Cluster], c: Case) -> int | None:
        raise ValueError("unparseable")

    with pytest.raises(ValueError):
        await assign([1.0, 0.0], case(), [cluster([0.0, 1.0])], decide=decide)


# --- parsing operations --------------------------------------------------------------------


def test_parse_operations_skips_malformed_items_and_unknown_actions() -> None:
    items = [
        1,
        "add",
        {"action": "delete", "index": 0},
        {"name": "no action"},
        {"action": "update", "index": "0", "body": GOOD_BODY},
        {"action": "update", "index": True, "name": "x"},
        {"action": "add", "body": 5, "name": "x"},
        {"action": "none"},
        {"action": "add", "name": "n", "body": GOOD_BODY, "confidence": "0.7"},
        {"action": "update", "index": 1, "description": None, "confidence": True},
    ]
    ops = parse_operations("Operations:\n```json\n" + json.dumps(items) + "\n```")
    assert ops == [
        Operation(action="none"),
        Operation(action="add", name="n", body=GOOD_BODY, confidence=0.7),
        Operation(action="update", index=1),
    ]


@pytest.mark.parametrize("text", ['{"action": "add"}', "no json at all", '"add"', "[1, 2"])
def test_parse_operations_raises_on_a_malformed_top_level(text: str) -> None:
    with pytest.raises(OperationsError):
        parse_operations(text)


def test_parse_operations_accepts_an_empty_list_and_prose_around_it() -> None:
    assert parse_operations("[]") == []
    assert parse_operations('Sure. [{"action": "none"}] That is all.') == [Operation("none")]


def test_parse_confidence() -> None:
    assert parse_confidence(0.7) == 0.7
    assert parse_confidence("0.25") == 0.25
    assert parse_confidence(3) == 1.0
    assert parse_confidence(-0.5) == 0.0
    for bad in ("high", None, True, float("nan"), "inf", [0.5]):
        assert parse_confidence(bad) is None


def test_body_checks_count_non_empty_lines_and_trimmed_length() -> None:
    assert body_ok(GOOD_BODY)
    assert not body_ok("\n".join(GOOD_BODY.splitlines()[:4]))  # four lines
    assert not body_ok("a\nb\nc\nd\ne")  # five lines, under fifty characters
    four_with_blanks = "\n\n".join(GOOD_BODY.splitlines()[:4]) + "\n   \n"
    assert not body_ok(four_with_blanks)
    assert not body_ok("   " + "x" * 30 + "\n1\n2\n3\n4   " + " " * 40)  # padding not counted


# --- apply_operations: additions -----------------------------------------------------------


def test_a_valid_addition_starts_its_lineage_with_the_case() -> None:
    (made,) = apply_operations(
        [add(name=" deploy ", description="ship it", body=f"\n{GOOD_BODY}\n", confidence=0.8)],
        [],
        case("c9"),
    )
    assert made == SkillRecord("deploy", "ship it", GOOD_BODY, 0.8, ("c9",))


def test_an_addition_with_a_short_body_is_rejected() -> None:
    ops = [
        add(name="a", body="1\n2\n3\n4\n5"),
        add(name="b", body="\n".join(GOOD_BODY.splitlines()[:4])),
        add(name="c"),
    ]
    assert apply_operations(ops, [], case()) == []


def test_an_addition_needs_a_name_or_a_description() -> None:
    assert apply_operations([add(body=GOOD_BODY), add(name="  ", body=GOOD_BODY)], [], case()) == []
    (made,) = apply_operations([add(description="Use when shipping", body=GOOD_BODY)], [], case())
    assert made.description == "Use when shipping"
    assert made.name == "Use when shipping"  # named after its description


def test_addition_confidence_defaults_to_one_half_when_malformed_or_missing() -> None:
    parsed = parse_operations(
        json.dumps(
            [
                {"action": "add", "name": "a", "body": GOOD_BODY, "confidence": "sure"},
                {"action": "add", "name": "b", "body": GOOD_BODY},
                {"action": "add", "name": "c", "body": GOOD_BODY, "confidence": 1.4},
                {"action": "add", "name": "d", "body": GOOD_BODY, "confidence": -2},
            ]
        )
    )
    made = apply_operations(parsed, [], case())
    assert [m.confidence for m in made] == [0.5, 0.5, 1.0, 0.0]


# --- apply_operations: updates -------------------------------------------------------------


def test_an_update_replaces_the_given_fields_and_appends_the_case() -> None:
    old = skill(lineage=("c1", "c2"))
    (new,) = apply_operations(
        [update(0, description="when shipping services", body=OTHER_BODY, confidence=0.9)],
        [old],
        case("c3"),
    )
    assert new == SkillRecord(
        "deploy", "when shipping services", OTHER_BODY, 0.9, ("c1", "c2", "c3")
    )


@pytest.mark.parametrize("index", [None, -1, 1, 5])
def test_an_update_outside_the_input_list_is_ignored(index: int | None) -> None:
    assert apply_operations([update(index, name="renamed")], [skill()], case()) == []


def test_a_second_update_of_an_index_is_ignored_even_after_a_rejected_first() -> None:
    ops = [update(0, body="too\nshort"), update(0, body=OTHER_BODY)]
    assert apply_operations(ops, [skill()], case()) == []


def test_a_second_update_of_an_accepted_index_is_ignored() -> None:
    ops = [update(0, name="first"), update(0, name="second")]
    assert [r.name for r in apply_operations(ops, [skill()], case())] == ["first"]


def test_empty_or_omitted_text_fields_keep_their_values() -> None:
    old = skill(description="keep me", confidence=0.6)
    (new,) = apply_operations(
        [update(0, name="", description="   ", body="", confidence=0.2)], [old], case("c2")
    )
    assert (new.name, new.description, new.body) == (old.name, "keep me", old.body)
    assert new.confidence == 0.2


def test_an_update_that_changes_nothing_is_rejected() -> None:
    old = skill()
    ops = [update(0, name=f"  {old.name} ", description=old.description, body=old.body)]
    assert apply_operations(ops, [old], case()) == []
    assert apply_operations([update(0)], [old], case()) == []


def test_a_malformed_confidence_keeps_the_prior_and_adds_no_evidence() -> None:
    old = skill(confidence=0.6)
    parsed = parse_operations(
        json.dumps(
            [
                {"action": "update", "index": 0, "confidence": "very"},
                {"action": "update", "index": 1, "name": "renamed", "confidence": "very"},
            ]
        )
    )
    (new,) = apply_operations(parsed, [old, skill("other")], case())
    assert (new.name, new.confidence) == ("renamed", 0.6)


def test_a_confidence_only_update_is_accepted_even_with_the_same_value() -> None:
    old = skill(confidence=0.6, lineage=("c1",))
    (new,) = apply_operations([update(0, confidence=0.6)], [old], case("c2"))
    assert new == SkillRecord(old.name, old.description, old.body, 0.6, ("c1", "c2"))


def test_update_confidence_is_clipped() -> None:
    parsed = parse_operations('[{"action": "update", "index": 0, "confidence": 7}]')
    (new,) = apply_operations(parsed, [skill(confidence=0.1)], case())
    assert new.confidence == 1.0


def test_a_replacement_body_must_pass_the_length_checks() -> None:
    assert apply_operations([update(0, body="1\n2\n3\n4\n5", name="x")], [skill()], case()) == []


def test_lineage_stays_unique() -> None:
    old = skill(lineage=("c1", "c2", "c1"))
    (new,) = apply_operations([update(0, name="renamed")], [old], case("c2"))
    assert new.lineage == ("c1", "c2")


def test_indices_address_the_input_list_and_output_follows_operation_order() -> None:
    skills = [skill("zero"), skill("one")]
    ops = [
        Operation("none"),
        update(1, name="one+"),
        add(name="fresh", body=GOOD_BODY),
        update(2, name="not the addition"),
        update(0, confidence=0.9),
    ]
    emitted = apply_operations(ops, skills, case("c7"))
    assert [r.name for r in emitted] == ["one+", "fresh", "zero"]
    assert emitted[1].lineage == ("c7",)
    assert skills[0].confidence == 0.6  # inputs untouched


# --- update context and the extraction call ------------------------------------------------


def test_support_ids_and_pool_follow_eqs_77_and_78() -> None:
    target = case("c3")
    skills = [skill(lineage=("c1", "c3", "c2")), skill("b", lineage=("c2", "c4"))]
    assert support_ids(skills, target) == ["c1", "c2", "c4"]
    fetched = [
        case("c1", quality=0.6, timestamp=1.0),
        case("c2", quality=0.9, timestamp=1.0),
        case("c4", quality=0.6, timestamp=5.0),
        case("c3", quality=1.0),
    ]
    assert [c.id for c in support_pool(fetched, target, k_case=2)] == ["c2", "c4"]


class FakeCompleter:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str]] = []

    async def complete(self, system: str, user: str) -> str:
        self.calls.append((system, user))
        return self.answer


async def test_extract_update_makes_one_call_and_validates_its_operations() -> None:
    ops = [
        {"action": "update", "index": 0, "confidence": 0.9},
        {"action": "add", "name": "short", "body": "too short"},
    ]
    model = FakeCompleter("```json\n" + json.dumps(ops) + "\n```")
    target = case("c5", intent="deploy a service", quality=0.9)
    old = skill(lineage=("c1", "c2", "c3", "c4"), body="B" * 100)
    support = [case(i, approach="A" * 50) for i in ("c1", "c2", "c3", "c4")]
    emitted = await extract_update(
        model,
        target,
        [old],
        support,
        mode="success",
        limits=ExtractLimits(body_chars=10, approach_chars=8, support_per_skill=2),
    )
    assert emitted == [
        SkillRecord(old.name, old.description, old.body, 0.9, ("c1", "c2", "c3", "c4", "c5"))
    ]
    ((system, user),) = model.calls
    assert "JSON list" in system and "succeeded" in system
    assert "intent: deploy a service" in user
    assert "\nname: deploy\n" in user and "[0] confidence: 0.60" in user
    assert "B" * 10 + " …[truncated]" in user and "B" * 11 not in user
    assert "case c3" in user and "case c4" in user and "case c2" not in user  # last two
    assert "A" * 8 + " …[truncated]" in user


async def test_extract_update_in_failure_mode_and_skip_mode() -> None:
    model = FakeCompleter("[]")
    assert await extract_update(model, case(quality=0.3), [], [], mode="failure") == []
    assert "went poorly" in model.calls[0][0]
    assert await extract_update(model, case(quality=0.1), [], [], mode="skip") == []
    assert len(model.calls) == 1  # a skipped case makes no call


async def test_extract_update_propagates_a_malformed_answer() -> None:
    with pytest.raises(OperationsError):
        await extract_update(FakeCompleter("{}"), case(), [], [], mode="success")


def test_format_context_lists_no_skills_and_excludes_the_target_from_support() -> None:
    target = case("c1")
    text = format_context(target, [skill(lineage=("c1",))], [target])
    assert "supporting cases" not in text
    assert "Existing skills: none" in format_context(target, [], [])
