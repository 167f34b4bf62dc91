"""Group memory's deterministic parts: Eq. 35 use labels, every case of Eq. 36, attribution
blocks extracted and stripped, fallback verdicts, and the feedback relabelling (Eq. 38)."""

from __future__ import annotations

import pytest

from memory.group import (
    FALLBACK_HEADER,
    RoundNode,
    agent_outcomes,
    close_verdicts,
    extract_attribution,
    feedback_outcome,
    node_use,
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
    assert blocks == {"research": ("You found the right sources; cite versions.", None)}
    nodes = [RoundNode("r1", "research", "completed"), RoundNode("c1", "code", "completed")]
    verdicts = close_verdicts("run_1", nodes, agent_outcomes(nodes), blocks)
    by_agent = {v.agent: v for v in verdicts}
    assert by_agent["research"].body.startswith("You found")
    # an empty block is unusable: the deterministic fallback, under its distinct header
    assert by_agent["code"].body.startswith(FALLBACK_HEADER)
    assert "c1 completed" in by_agent["code"].body
    assert by_agent["code"].covered_nodes == ("c1",)
    assert by_agent["research"].header().startswith("[verdict by host on research, round run_1")


def test_feedback_relabels_only_with_a_valid_label() -> None:
    assert feedback_outcome("rejected", "adopted") == "rejected"
    assert feedback_outcome("great", "adopted") == "adopted"
    assert feedback_outcome(None, "failed") == "failed"


def test_the_round_summary_names_assignments_statuses_and_outcomes() -> None:
    nodes = [
        RoundNode("a", "research", "completed", task="find benchmarks"),
        RoundNode("b", "code", "completed", ("a",), task="plot them"),
    ]
    text = round_summary("run_9", nodes, agent_outcomes(nodes))
    assert "a → research: completed; task: find benchmarks" in text
    assert "b → code: completed after a" in text
    assert "research adopted" in text and "code adopted" in text
