"""Group memory's deterministic parts: Eq. 35 use labels, every case of Eq. 36, attribution
blocks extracted and stripped, fallback verdicts, and the feedback relabelling (Eq. 38)."""

from __future__ import annotations

import pytest

from memory.group import (
    FALLBACK_PREFIX,
    Attribution,
    RoundNode,
    agent_outcomes,
    blocks_for_round,
    close_verdicts,
    extract_attribution,
    feedback_outcome,
    feedback_verdicts,
    node_use,
    outcome_entry,
    round_summary,
)


def test_use_is_terminal_consumed_or_unused() -> None:
    nodes = [
        RoundNode("a", "research", "completed"),
        RoundNode("b", "code", "failed", deps=("a",)),  # executed, even though it failed
        RoundNode("c", "code", "completed"),
        RoundNode("d", "design", "skipped", deps=("c",)),  # never executed
    ]
    assert node_use(nodes) == {"a": "consumed", "b": "terminal", "c": "unused", "d": "terminal"}


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        # cancelled wins over everything, even a failure of the same agent
        ([("x", "cancelled", ()), ("y", "failed", ())], "cancelled"),
        ([("x", "failed", ()), ("y", "completed", ())], "failed"),
        # a skipped node maps to cancelled (third case)
        ([("x", "skipped", ()), ("y", "completed", ())], "cancelled"),
        # all completed and every output used (terminal counts as adopted)
        ([("x", "completed", ())], "adopted"),
        # one used, one not
        ([("x", "completed", ()), ("y", "completed", ())], "partially_adopted"),
        # completed but nothing downstream ran
        ([("x", "completed", ())], "rejected"),
    ],
)
def test_every_case_of_the_outcome_rule(
    nodes: list[tuple[str, str, tuple[str, ...]]], expected: str
) -> None:
    round_nodes = [RoundNode(i, "worker", status, deps) for i, status, deps in nodes]
    if expected == "partially_adopted":
        # x feeds a completed successor (consumed); y feeds a skipped one (unused)
        round_nodes += [
            RoundNode("x2", "other", "completed", ("x",)),
            RoundNode("y2", "other", "skipped", ("y",)),
        ]
    if expected == "rejected":
        round_nodes.append(RoundNode("z", "other", "skipped", ("x",)))
    assert agent_outcomes(round_nodes)["worker"] == expected


def test_attribution_blocks_are_kept_as_verdicts_and_stripped_from_the_reply() -> None:
    reply = (
        "The run finished: both reports are in.\n"
        '<attribution agent="research">You found the right sources; cite versions.</attribution>\n'
        '<attribution agent="code" outcome="rejected">  </attribution>\n'
    )
    visible, blocks = extract_attribution(reply)
    assert visible == "The run finished: both reports are in."
    assert blocks[0] == Attribution("research", "You found the right sources; cite versions.")
    assert blocks[1].problem == "empty"
    nodes = [
        RoundNode("r1", "research", "completed"),
        RoundNode("c1", "code", "completed"),
        RoundNode("d1", "design", "completed"),
    ]
    chosen = blocks_for_round(blocks, "run_1", sole_round=True)
    verdicts = close_verdicts("run_1", nodes, agent_outcomes(nodes), chosen)
    by_agent = {v.agent: v for v in verdicts}
    assert by_agent["research"].body.startswith("You found")
    # unusable or missing blocks: the deterministic fallback, its header naming the reason
    assert by_agent["code"].body.startswith(f"{FALLBACK_PREFIX} empty attribution block]")
    assert "c1 completed (terminal)" in by_agent["code"].body
    assert by_agent["design"].body.startswith(f"{FALLBACK_PREFIX} no attribution block]")
    assert by_agent["code"].covered_nodes == ("c1",)
    assert by_agent["research"].header().startswith("[verdict by host on research, round run_1")


def test_an_unterminated_block_is_hidden_and_unusable() -> None:
    visible, blocks = extract_attribution(
        'Done.\n<attribution run="run_1" agent="code">You shipped the fix but'
    )
    assert visible == "Done."
    assert blocks == (
        Attribution("code", "You shipped the fix but", None, "run_1", "unterminated"),
    )
    (verdict,) = close_verdicts(
        "run_1",
        [RoundNode("c1", "code", "failed")],
        {"code": "failed"},
        blocks_for_round(blocks, "run_1", sole_round=False),
    )
    assert verdict.body.startswith(f"{FALLBACK_PREFIX} unterminated attribution block]")


def test_blocks_are_matched_to_their_round() -> None:
    _, blocks = extract_attribution(
        '<attribution run="r1" agent="code">one</attribution>\n'
        '<attribution run="r2" agent="code">two</attribution>\n'
        '<attribution agent="research">unnamed</attribution>'
    )
    assert {a: b.body for a, b in blocks_for_round(blocks, "r2", sole_round=False).items()} == {
        "code": "two"
    }
    # an unnamed block counts only when a single round is being assessed
    assert set(blocks_for_round(blocks, "r1", sole_round=True)) == {"code", "research"}


def test_feedback_relabels_only_with_a_valid_label() -> None:
    assert feedback_outcome("rejected", "adopted") == "rejected"
    assert feedback_outcome("great", "adopted") == "adopted"
    assert feedback_outcome(None, "failed") == "failed"


def test_feedback_verdicts_cover_reassessed_round_agents_only() -> None:
    nodes = [RoundNode("r1", "research", "completed"), RoundNode("c1", "code", "completed")]
    close = agent_outcomes(nodes)
    _, blocks = extract_attribution(
        '<attribution agent="research" outcome="rejected">The benchmark was outdated.</attribution>'
        '\n<attribution agent="code" outcome="superb">Fine.</attribution>'
        '\n<attribution agent="oncall" outcome="failed">Not in this round.</attribution>'
    )
    verdicts = feedback_verdicts(
        "run_1", nodes, close, blocks_for_round(blocks, "run_1", sole_round=True)
    )
    assert [(v.agent, v.phase, v.outcome) for v in verdicts] == [
        ("research", "feedback", "rejected"),
        ("code", "feedback", "adopted"),  # an invalid label keeps the close outcome (Eq. 38)
    ]
    entry = outcome_entry("run_1", [(v.agent, v.outcome, close[v.agent]) for v in verdicts])
    assert (
        entry
        == "Feedback on round run_1: research rejected (was adopted), code adopted (unchanged)"
    )


def test_the_round_summary_names_assignments_statuses_and_outcomes() -> None:
    nodes = [
        RoundNode("a", "research", "completed", task="find benchmarks"),
        RoundNode("b", "code", "completed", ("a",), task="plot them"),
    ]
    text = round_summary("run_9", nodes, agent_outcomes(nodes))
    assert "a → research: completed; task: find benchmarks" in text
    assert "b → code: completed after a" in text
    assert "research adopted" in text and "code adopted" in text
