"""Offline provider honesty and the explicit plan syntax."""

from __future__ import annotations

from agents.models.offline import OFFLINE_NOTICE, OfflineProvider
from agents.models.types import Message, TextBlock, ToolCall, ToolResult, ToolSpec
from agents.plan_syntax import parse_plan, with_id_suffix

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


def test_plan_ignores_prose_lines_and_keeps_after_in_prose() -> None:
    plan = parse_plan("Alice (U1) says:\nr1: research: what happened after Lunch-Break?")
    assert plan is not None
    assert plan["nodes"][0]["deps"] == []
    assert "after Lunch-Break" in plan["nodes"][0]["template"]


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
    msg = Message.user_text("me (u):\nr1: research: find X\nc1: code: y [after r1]")
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


async def test_offline_reports_tool_results_verbatim() -> None:
    call = ToolCall(id="t1", name="submit_graph", input={})
    messages = [
        Message.user_text("r1: research: x"),
        Message(role="assistant", content=[call]),
        Message(role="user", content=[ToolResult(tool_use_id="t1", content="admitted run R1")]),
    ]
    reply = await OfflineProvider().complete(system="s", messages=messages, tools=[SUBMIT])
    assert "`submit_graph`: admitted run R1" in reply.text
    assert "Offline mode" in reply.text
    assert isinstance(reply.content[0], TextBlock)


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
