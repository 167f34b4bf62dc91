"""Offline provider honesty and the explicit plan syntax."""

from __future__ import annotations

import pytest

from agents.models.offline import OFFLINE_NOTICE, OfflineProvider
from agents.models.requester_text import answer_header
from agents.models.types import Message, TextBlock, ToolCall, ToolResult, ToolSpec
from agents.plan_syntax import (
    PlanSyntaxError,
    continues_plan,
    is_confirm_line,
    parse_plan,
    with_id_suffix,
)

SUBMIT = ToolSpec(name="submit_graph", description="d", input_schema={"type": "object"})


def test_plan_with_brackets_and_confirm() -> None:
    plan = parse_plan("r1: research: find X\nc1: code: build Y [after r1]\nconfirm")
    assert plan is not None
    assert plan["confirm"] is True
    assert [n["id"] for n in plan["nodes"]] == ["r1", "c1"]
    assert plan["nodes"][1]["deps"] == ["r1"]
    assert plan["nodes"][1]["template"] == "build Y"
    assert plan["nodes"][0]["agent"] == "research"


def test_plan_with_bare_after_and_many_deps() -> None:
    plan = parse_plan("a: research: one\nb: research: two\nc: code: merge after a, b")
    assert plan is not None
    assert plan["nodes"][2]["deps"] == ["a", "b"]
    assert plan["confirm"] is False


def test_after_in_the_middle_of_a_task_is_prose() -> None:
    plan = parse_plan("r1: research: what happened after Lunch-Break?")
    assert plan is not None
    assert plan["nodes"][0]["deps"] == []
    assert "after Lunch-Break" in plan["nodes"][0]["template"]


def test_a_plan_with_a_malformed_line_is_refused_whole_naming_the_line() -> None:
    # Issue 39, finding 4: `a2` lost its `:` and only `a1` ran, with nothing said of `a2`.
    with pytest.raises(PlanSyntaxError) as refused:
        parse_plan("a1: shell: echo one\na2 shell: echo two [after a1]")
    assert str(refused.value) == (
        "Nothing was run: line 2 of this plan is not a node.\n"
        "- line 2, `a2 shell: echo two [after a1]`: a `:` is missing after the id; write "
        "`a2: shell: echo two [after a1]`\n\n"
        "Every line of a plan is a node, `id: agent: task [after id, id]`, or `confirm`. "
        "Send the whole plan again once it is fixed."
    )


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("a2: shell:", "there is no task after the agent"),
        ("A2: shell: echo two", "`A2` is not a node id"),
        ("a2: shell echo two", "a node line has a `:` after the id and another after the agent"),
        ("a2: shell: echo two [after a1", "is not closed with `]`"),
        ("note: the build is red", "a node line has a `:` after the id"),
        ("thanks!", "it is neither a node nor `confirm`"),
    ],
)
def test_every_other_line_of_a_plan_must_be_a_node_or_confirm(line: str, why: str) -> None:
    with pytest.raises(PlanSyntaxError) as refused:
        parse_plan(f"a1: shell: echo one\n\n{line}\nconfirm")
    said = str(refused.value)
    assert said.startswith("Nothing was run: line 3 of this plan is not a node.\n"), said
    assert why in said and "`id: agent: task [after id, id]`" in said


def test_every_bad_line_is_named() -> None:
    with pytest.raises(PlanSyntaxError) as refused:
        parse_plan("hi\na1: shell: echo one\na2 shell: x\na3: shell: y")
    said = str(refused.value)
    assert said.startswith("Nothing was run: lines 1 and 3 of this plan are not nodes."), said
    assert "- line 1, `hi`:" in said and "- line 3, `a2 shell: x`:" in said


def test_a_sentence_with_a_colon_is_not_a_plan() -> None:
    assert parse_plan("note: the build is red") is None
    assert parse_plan("note: the build is red\nsee: https://ci.example/1") is None
    # Fences around a pasted plan and blank lines are not lines of it.
    plan = parse_plan("```\ns1: shell: echo hi\n\n```")
    assert plan is not None and [n["id"] for n in plan["nodes"]] == ["s1"]


def test_a_console_plan_block_keeps_a_mistyped_node_line() -> None:
    """The console reads a plan line by line: a mistyped node belongs to it (and refuses it),
    a word like `status` ends it."""
    assert continues_plan("a2 shell: echo two [after a1]")
    assert continues_plan("a2: shell:") and continues_plan("A2: shell: x")
    assert continues_plan("a2: shell: echo [after a1")
    assert not continues_plan("status") and not continues_plan("")
    assert is_confirm_line("confirm") and not is_confirm_line("a1: shell: echo")


def test_no_plan_in_plain_text() -> None:
    assert parse_plan("hello there") is None
    assert parse_plan("") is None


async def test_offline_says_offline_and_how_to_fix() -> None:
    reply = await OfflineProvider().complete(system="s", messages=[Message.user_text("hi")])
    assert reply.text == OFFLINE_NOTICE
    assert "ANTHROPIC_API_KEY" in reply.text
    assert "offline mode" in reply.text
    assert reply.tool_calls == []


async def test_offline_turns_plan_into_submit_graph_call() -> None:
    provider = OfflineProvider()
    msg = Message.user_text(
        f"{answer_header('me (u)')}\nr1: research: find X\nc1: code: y [after r1]"
    )
    reply = await provider.complete(system="s", messages=[msg], tools=[SUBMIT])
    assert reply.stop_reason == "tool_use"
    (call,) = reply.tool_calls
    assert call.name == "submit_graph"
    assert [n["id"] for n in call.input["nodes"]] == ["r1", "c1"]
    # Deterministic: same message, same call id.
    again = await provider.complete(system="s", messages=[msg], tools=[SUBMIT])
    assert again.tool_calls[0].id == call.id


async def test_offline_plan_without_graph_tool_runs_nothing() -> None:
    reply = await OfflineProvider().complete(
        system="s", messages=[Message.user_text("r1: research: x")]
    )
    assert "nothing was run" in reply.text


async def test_offline_says_what_happened_in_plain_words_not_the_tools() -> None:
    """Issue 39, finding 5: a result's people-facing summary is said, never "`submit_graph`:"."""
    call = ToolCall(id="t1", name="submit_graph", input={})
    started = "Started run `run_ab12` with 2 steps; I'll post the report here."
    messages = [
        Message.user_text("r1: research: x"),
        Message(role="assistant", content=[call]),
        Message(
            role="user",
            content=[
                ToolResult(tool_use_id="t1", content="Run `run_ab12` started …", summary=started)
            ],
        ),
    ]
    reply = await OfflineProvider().complete(system="s", messages=messages, tools=[SUBMIT])
    assert reply.text == started
    assert isinstance(reply.content[0], TextBlock)
    # A result without a summary (a run's report, a refusal saying what to fix) is said as it is.
    report = Message(role="user", content=[ToolResult(tool_use_id="t1", content="Run report")])
    reply = await OfflineProvider().complete(
        system="s", messages=[*messages[:2], report], tools=[SUBMIT]
    )
    assert reply.text == "Run report"


async def test_offline_refuses_a_malformed_plan_without_calling_a_tool() -> None:
    msg = Message.user_text("a1: shell: echo one\na2 shell: echo two [after a1]")
    reply = await OfflineProvider().complete(system="s", messages=[msg], tools=[SUBMIT])
    assert reply.tool_calls == []
    assert reply.text.startswith("Nothing was run: line 2 of this plan is not a node.")


def test_a_plan_renamed_for_another_run_keeps_its_commands_and_wiring() -> None:
    from agents.plan_syntax import parse_plan, with_id_suffix

    plan = (
        "a1: shell: echo a1 alpha\n"
        'b1: shell: echo "got {{a1.output}} in {{ a1.output_path }}" [after a1]\n'
        "c1: shell: echo done after b1\nconfirm"
    )
    renamed = parse_plan(with_id_suffix(plan, "2612240900"))
    assert renamed is not None and renamed["confirm"]
    nodes = {n["id"]: n for n in renamed["nodes"]}
    assert list(nodes) == ["a1_2612240900", "b1_2612240900", "c1_2612240900"]
    assert nodes["a1_2612240900"]["template"] == "echo a1 alpha"  # a word, not a node: kept
    assert nodes["b1_2612240900"]["template"] == (
        'echo "got {{a1_2612240900.output}} in {{ a1_2612240900.output_path }}"'
    )
    assert nodes["b1_2612240900"]["deps"] == ["a1_2612240900"]
    assert nodes["c1_2612240900"]["deps"] == ["b1_2612240900"]
    long_id = "n" * 40
    (node,) = parse_plan(with_id_suffix(f"{long_id}: shell: true", "x1"))["nodes"]  # type: ignore[index]
    assert node["id"] == "n" * 37 + "_x1" and len(node["id"]) == 40


def test_nodes_share_an_instance_with_a_bracket_in_any_order() -> None:
    plan = parse_plan(
        "a1: claude-acp: write the parser [instance work]\n"
        "a2: claude-acp: now add tests [instance work] [after a1]\n"
        "a3: claude-acp: review it [after a2]\n"
    )
    assert plan is not None
    got = [(n["id"], n["template"], n["deps"], n["instance"]) for n in plan["nodes"]]
    assert got == [
        ("a1", "write the parser", [], "work"),
        ("a2", "now add tests", ["a1"], "work"),
        ("a3", "review it", ["a2"], None),
    ]
    # Renamed for another run: node ids change, the instance handle does not.
    renamed = with_id_suffix("a1: c: x [instance a1]\na2: c: y [instance a1] [after a1]", "Z")
    assert renamed == "a1_Z: c: x [instance a1]\na2_Z: c: y [instance a1] [after a1_Z]"
