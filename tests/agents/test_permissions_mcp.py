"""The permission gate for tool server (MCP) calls: `mcp:SERVER:TOOL` rules, the server's
approval mode from mcp.json after the rules, "allow in this conversation" per server and
tool, unattended refusals that name the rule to add, and every decision audited."""

from __future__ import annotations

from typing import Literal

import pytest

from agents.permissions import (
    Answer,
    ListAudit,
    MemoryRemembered,
    PermissionGate,
    PermissionRule,
    PermissionRules,
    ToolCallRequest,
    ToolTrust,
)

Approval = Literal["ask", "smart", "auto"]


class ScriptedAsker:
    """Answers approval prompts from a script and records what it was asked."""

    def __init__(self, *answers: Answer) -> None:
        self._answers = list(answers)
        self.asked: list[tuple[ToolCallRequest, str]] = []

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        self.asked.append((call, question))
        if not self._answers:
            raise AssertionError(f"asked once too often: {question}")
        return self._answers.pop(0)


def mcp_call(
    subject: str,
    approval: Approval = "ask",
    *,
    read_only: bool = False,
    conversation: str = "C1:t1",
    detail: str = "",
) -> ToolCallRequest:
    trust = ToolTrust(approval, read_only)
    return ToolCallRequest("mcp", subject, conversation, "U1", "T1", detail, trust)


def gate(
    asker: ScriptedAsker | None,
    *,
    mode: Literal["ask-everything", "smart", "full-access"] = "smart",
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    remembered: MemoryRemembered | None = None,
    audit: ListAudit | None = None,
) -> PermissionGate:
    return PermissionGate(
        PermissionRules(mode=mode, allow=list(allow), deny=list(deny)),
        asker=asker,
        remembered=remembered or MemoryRemembered(),
        audit=audit or ListAudit(),
    )


# -- rules -----------------------------------------------------------------------------------


def test_an_mcp_rule_keeps_the_second_colon_in_its_glob() -> None:
    rule = PermissionRule.parse("mcp:github:get_*")
    assert (rule.tool, rule.glob) == ("mcp", "github:get_*")
    assert rule.matches("mcp", "github:get_issue")
    assert rule.matches("mcp", "github:get_pull_request_files")
    assert not rule.matches("mcp", "github:create_issue")
    assert not rule.matches("mcp", "gitlab:get_issue")
    assert not rule.matches("run_shell", "github:get_issue")
    assert PermissionRule.parse("mcp:*").matches("mcp", "any:thing")
    assert PermissionRule.parse("mcp").matches("mcp", "any:thing")


def test_an_mcp_rule_naming_only_a_server_says_how_to_name_its_tools() -> None:
    with pytest.raises(ValueError, match=r"`mcp:github:\*` for every tool of github"):
        PermissionRule.parse("mcp:github")


async def test_a_deny_rule_beats_the_server_approval_and_full_access() -> None:
    audit = ListAudit()
    checker = gate(None, mode="full-access", deny=("mcp:github:delete_*",), audit=audit)
    denied = await checker.check(mcp_call("github:delete_repo", "auto"))
    assert (denied.allowed, denied.tier, denied.rule) == (False, "user_deny", "mcp:github:delete_*")
    other = await checker.check(mcp_call("github:get_issue", "ask"))
    assert (other.allowed, other.tier) == (True, "mode")
    assert [d.allowed for d in audit.decisions] == [False, True]


async def test_an_allow_rule_lets_an_unattended_run_call_an_ask_server() -> None:
    checker = gate(None, allow=("mcp:github:get_*",))
    allowed = await checker.check(mcp_call("github:get_issue", "ask"))
    assert (allowed.allowed, allowed.tier, allowed.rule) == (True, "user_allow", "mcp:github:get_*")
    refused = await checker.check(mcp_call("github:create_issue", "ask"))
    assert not refused.allowed


async def test_a_builtin_deny_still_comes_first() -> None:
    checker = gate(None, mode="full-access", allow=("mcp",))
    decision = await checker.check(mcp_call("files:.env", "auto"))
    assert (decision.allowed, decision.tier) == (False, "builtin")


# -- the server's approval mode ----------------------------------------------------------------


async def test_auto_allows_without_asking_even_in_ask_everything_mode() -> None:
    audit = ListAudit()
    checker = gate(ScriptedAsker(), mode="ask-everything", audit=audit)
    decision = await checker.check(mcp_call("github:create_issue", "auto"))
    assert (decision.allowed, decision.tier) == (True, "mode")
    assert 'github\'s approval mode in mcp.json is "auto"' in decision.reason
    assert decision.rule == 'approval = "auto" for github in mcp.json'
    [(call, recorded)] = audit.entries
    assert call.trust == ToolTrust("auto") and recorded == decision


async def test_smart_allows_what_the_server_marks_read_only_and_asks_the_rest() -> None:
    asker = ScriptedAsker("allow_once")
    checker = gate(asker, mode="ask-everything")
    read = await checker.check(mcp_call("github:get_issue", "smart", read_only=True))
    assert read.allowed and "marks this tool read-only" in read.reason
    assert "mcp.json" in read.reason
    assert asker.asked == []

    detail = 'MCP server github, tool create_issue\n{\n  "title": "bug"\n}'
    write = await checker.check(mcp_call("github:create_issue", "smart", detail=detail))
    assert (write.allowed, write.tier) == (True, "human")
    [(_, question)] = asker.asked
    assert question.startswith("Allow `mcp` on `github:create_issue`? Approval is needed because")
    assert 'github\'s approval mode in mcp.json is "smart"' in question
    assert "does not mark this tool read-only" in question
    assert question.endswith(detail)


async def test_ask_asks_even_for_a_read_only_tool_in_smart_mode() -> None:
    asker = ScriptedAsker("deny")
    decision = await gate(asker).check(mcp_call("github:get_issue", "ask", read_only=True))
    assert (decision.allowed, decision.tier) == (False, "human")
    [(_, question)] = asker.asked
    assert 'github\'s approval mode in mcp.json is "ask", which asks before every call' in question
    assert "`mcp:github:get_issue`" in decision.reason


async def test_full_access_allows_an_ask_server_without_asking() -> None:
    asker = ScriptedAsker()
    decision = await gate(asker, mode="full-access").check(mcp_call("github:create_issue"))
    assert (decision.allowed, decision.tier) == (True, "mode")
    assert asker.asked == []


@pytest.mark.parametrize(("approval", "read_only"), [("ask", True), ("smart", False)])
async def test_unattended_refuses_naming_the_rule_to_add(
    approval: Approval, read_only: bool
) -> None:
    audit = ListAudit()
    decision = await gate(None, audit=audit).check(
        mcp_call("github:create_issue", approval, read_only=read_only)
    )
    assert (decision.allowed, decision.tier) == (False, "unattended")
    assert "unattended run" in decision.reason
    assert f'github\'s approval mode in mcp.json is "{approval}"' in decision.reason
    assert "add the allow rule `mcp:github:create_issue` to permissions.toml" in decision.reason
    assert audit.decisions == [decision]


async def test_a_tool_name_with_glob_characters_is_suggested_escaped() -> None:
    decision = await gate(None).check(mcp_call("odd:get*"))
    assert "`mcp:odd:get[*]`" in decision.reason
    assert PermissionRule.parse("mcp:odd:get[*]").matches("mcp", "odd:get*")
    assert not PermissionRule.parse("mcp:odd:get[*]").matches("mcp", "odd:getall")


# -- allow in this conversation ----------------------------------------------------------------


async def test_allow_in_this_conversation_covers_the_server_tool_whatever_the_arguments() -> None:
    asker = ScriptedAsker("allow_conversation", "allow_once", "allow_once")
    remembered = MemoryRemembered()
    audit = ListAudit()
    checker = gate(asker, remembered=remembered, audit=audit)

    first = await checker.check(mcp_call("github:create_issue", detail='{"title": "a"}'))
    again = await checker.check(mcp_call("github:create_issue", detail='{"title": "b"}'))
    other_tool = await checker.check(mcp_call("github:close_issue"))
    elsewhere = await checker.check(mcp_call("github:create_issue", conversation="C2:t9"))

    assert [first.tier, again.tier, other_tool.tier, elsewhere.tier] == [
        "human",
        "remembered",
        "human",
        "human",
    ]
    assert all(d.allowed for d in audit.decisions) and len(audit.decisions) == 4
    assert [call.subject for call, _ in asker.asked] == [
        "github:create_issue",
        "github:close_issue",
        "github:create_issue",
    ]
    assert await remembered.has("C1:t1", "mcp", "github:create_issue")
