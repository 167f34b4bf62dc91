"""The permission gate: every tier of the waterfall, smart-mode risk, rules files and globs."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.permissions import (
    Answer,
    Decision,
    ListAudit,
    MemoryRemembered,
    PermissionConfigError,
    PermissionGate,
    PermissionRule,
    PermissionRules,
    ToolCallRequest,
    load_rules,
    parse_rules,
    risk,
    subject_of,
    suggest_rule,
)

# -- fakes -----------------------------------------------------------------------------------


class ScriptedAsker:
    """Answers approval prompts from a script and records what it was asked."""

    def __init__(self, *answers: Answer) -> None:
        self._answers = list(answers)
        self.asked: list[tuple[ToolCallRequest, str]] = []

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        self.asked.append((call, question))
        return self._answers.pop(0)


class NeverAsk:
    """An asker for tiers that must decide before asking; being called fails the test."""

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        raise AssertionError(f"asked about {call.tool} {call.subject!r}: {question}")


class BrokenAsker:
    """The approval prompt cannot be posted."""

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        raise ConnectionError("channel unreachable")


class SilentAsker:
    """Nobody ever answers."""

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        await asyncio.sleep(3600)
        return "allow_once"


class OddAsker:
    """Returns something that is not an Answer (a bug in the prompt layer)."""

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        return "yes please"  # type: ignore[return-value]


class CountingRemembered(MemoryRemembered):
    """MemoryRemembered that counts calls, to show an unattended gate touches nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def has(self, conversation_id: str, tool: str, subject: str) -> bool:
        self.calls.append("has")
        return await super().has(conversation_id, tool, subject)

    async def add(self, conversation_id: str, tool: str, subject: str) -> None:
        self.calls.append("add")
        await super().add(conversation_id, tool, subject)


class BrokenRemembered:
    """The approvals store is down."""

    async def has(self, conversation_id: str, tool: str, subject: str) -> bool:
        raise OSError("database is locked")

    async def add(self, conversation_id: str, tool: str, subject: str) -> None:
        raise OSError("database is locked")


class BrokenAudit:
    """The audit log cannot be written."""

    async def record(self, call: ToolCallRequest, decision: Decision) -> None:
        raise OSError("disk full")


def call(tool: str, subject: str = "", conversation: str = "C1:t1") -> ToolCallRequest:
    return ToolCallRequest(tool, subject, conversation, requester="U1", workspace="T0123")


def gate(
    mode: str = "smart",
    *,
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    asker: object | None = None,
    remembered: object | None = None,
    audit: object | None = None,
    **kwargs: object,
) -> PermissionGate:
    rules = PermissionRules.model_validate({"mode": mode, "allow": allow, "deny": deny})
    return PermissionGate(
        rules,
        asker=asker,  # type: ignore[arg-type]
        remembered=remembered or MemoryRemembered(),  # type: ignore[arg-type]
        audit=audit or ListAudit(),  # type: ignore[arg-type]
        clock=lambda: 0.0,
        **kwargs,  # type: ignore[arg-type]
    )


# -- (1) builtin deny ------------------------------------------------------------------------


@pytest.mark.parametrize("allow", [("run_shell:*",), ("run_shell",)])
async def test_builtin_deny_beats_full_access_and_allow_rules(allow: tuple[str, ...]) -> None:
    audit = ListAudit()
    g = gate("full-access", allow=allow, asker=NeverAsk(), audit=audit)
    decision = await g.check(call("run_shell", "rm -rf /"))
    assert not decision.allowed
    assert decision.tier == "builtin"
    assert decision.rule == "deleting the filesystem root or a home directory"
    assert "builtin deny rule" in decision.reason
    assert "`rm -rf /`" in decision.reason
    assert audit.decisions == [decision]


@pytest.mark.parametrize(
    ("tool", "subject"),
    [
        ("read_file", ".env"),
        ("read_file", "config/.env.local"),
        ("read_file", "docs/../.env"),
        ("search_files", "../../.raven-bot/raven.db"),
        ("run_shell", "cat .env"),
        ("run_shell", "sqlite3 ~/.raven-bot/raven.db .dump"),
        ("run_shell", "cp $HOME/.raven-bot/raven.db-wal x"),
        ("run_shell", "cat /proc/1/environ"),
        ("run_python", "print(open('/proc/self/environ').read())"),
        ("run_python", "print(open('.env').read())"),
    ],
)
async def test_builtin_deny_of_the_bots_secrets(tool: str, subject: str) -> None:
    g = gate("full-access", allow=(tool,), asker=NeverAsk())
    decision = await g.check(call(tool, subject))
    assert (decision.allowed, decision.tier) == (False, "builtin")
    assert "secrets" in decision.reason


@pytest.mark.parametrize(
    ("tool", "subject"),
    [
        ("read_file", ".env.example"),
        ("run_shell", "python -m venv .venv"),
        ("run_python", "import os; print(sorted(os.environ))"),
        ("read_file", "notes/raven.dbx"),
        ("run_shell", "echo reboot"),
    ],
)
async def test_builtin_deny_leaves_lookalikes_alone(tool: str, subject: str) -> None:
    decision = await gate("full-access").check(call(tool, subject))
    assert (decision.allowed, decision.tier) == (True, "mode")


async def test_builtin_shell_rules_apply_only_to_shell_commands() -> None:
    # `rm -rf /` as a file's text is data, not a command.
    decision = await gate("full-access").check(call("write_file", "notes/rm -rf ~.txt"))
    assert decision.allowed


# -- (2) user deny / (3) user allow ----------------------------------------------------------


async def test_user_deny_beats_user_allow() -> None:
    g = gate("full-access", allow=("run_shell", "run_shell:git *"), deny=("run_shell:git push*",))
    decision = await g.check(call("run_shell", "git push --force origin main"))
    assert (decision.allowed, decision.tier) == (False, "user_deny")
    assert decision.rule == "run_shell:git push*"
    assert "deny rule `run_shell:git push*` in permissions.toml" in decision.reason
    assert "Remove that rule" in decision.reason


async def test_user_deny_catches_a_command_chained_after_another() -> None:
    g = gate("full-access", deny=("run_shell:rm *",))
    for subject in ("ls; rm -rf build", "make && rm x", "echo $(rm y)", "ls\nrm z"):
        decision = await g.check(call("run_shell", subject))
        assert decision.tier == "user_deny", subject


async def test_user_deny_on_a_directory_covers_its_contents() -> None:
    g = gate("full-access", deny=("read_file:private/*",))
    assert (await g.check(call("read_file", "private/a/b.txt"))).tier == "user_deny"
    assert (await g.check(call("read_file", "./private/../private/x"))).tier == "user_deny"
    assert (await g.check(call("read_file", "public/a.txt"))).tier == "mode"


async def test_user_allow_skips_the_prompt() -> None:
    g = gate(
        "ask-everything", allow=("run_shell:git status", "write_file:docs/**"), asker=NeverAsk()
    )
    decision = await g.check(call("run_shell", "git   status"))
    assert (decision.allowed, decision.tier, decision.rule) == (
        True,
        "user_allow",
        "run_shell:git status",
    )
    assert (await g.check(call("write_file", "docs/guide/intro.md"))).tier == "user_allow"


async def test_user_allow_does_not_stretch_over_shell_operators() -> None:
    g = gate("ask-everything", allow=("run_shell:git *",))
    assert (await g.check(call("run_shell", "git log -3"))).tier == "user_allow"
    for subject in (
        "git status && make deploy",
        "git log; rm a",
        "git log `rm a`",
        "git log\nrm a",
    ):
        decision = await g.check(call("run_shell", subject))
        assert (decision.allowed, decision.tier) == (False, "unattended"), subject


async def test_a_path_allow_rule_cannot_be_escaped_with_dotdot() -> None:
    g = gate("ask-everything", allow=("write_file:docs/**",))
    decision = await g.check(call("write_file", "docs/../src/app.py"))
    assert decision.tier == "unattended"


# -- (4) remembered "for this conversation" --------------------------------------------------


async def test_allow_for_conversation_is_remembered_for_that_conversation_only() -> None:
    asker = ScriptedAsker("allow_conversation", "allow_once", "deny")
    remembered = MemoryRemembered()
    g = gate("smart", asker=asker, remembered=remembered)
    make = call("run_shell", "make deploy", conversation="C1:t1")

    first = await g.check(make)
    assert (first.allowed, first.tier) == (True, "human")
    assert "for this conversation" in first.reason
    assert await remembered.has("C1:t1", "run_shell", "make deploy")

    second = await g.check(make)
    assert (second.allowed, second.tier) == (True, "remembered")
    assert len(asker.asked) == 1

    other_conversation = await g.check(call("run_shell", "make deploy", conversation="C2:t9"))
    assert other_conversation.tier == "human"
    assert len(asker.asked) == 2

    other_command = await g.check(call("run_shell", "make clean", conversation="C1:t1"))
    assert (other_command.allowed, other_command.tier) == (False, "human")
    assert len(asker.asked) == 3


async def test_allow_once_is_not_remembered() -> None:
    asker = ScriptedAsker("allow_once", "allow_once")
    g = gate("smart", asker=asker)
    for _ in range(2):
        assert (await g.check(call("run_python", "print(1)"))).tier == "human"
    assert len(asker.asked) == 2


async def test_user_deny_beats_a_remembered_allow() -> None:
    remembered = MemoryRemembered()
    await remembered.add("C1:t1", "run_shell", "make deploy")
    g = gate("smart", deny=("run_shell:make deploy",), remembered=remembered)
    assert (await g.check(call("run_shell", "make deploy"))).tier == "user_deny"


async def test_a_broken_remembered_store_asks_again_rather_than_allowing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    asker = ScriptedAsker("allow_conversation")
    g = gate("smart", asker=asker, remembered=BrokenRemembered())
    with caplog.at_level(logging.ERROR, logger="agents.permissions"):
        decision = await g.check(call("run_shell", "make"))
    # The requester approved, so this call runs even though the approval could not be stored.
    assert (decision.allowed, decision.tier) == (True, "human")
    assert len(asker.asked) == 1
    unattended = gate("smart", remembered=BrokenRemembered())
    assert not (await unattended.check(call("run_shell", "make"))).allowed


# -- (5) modes -------------------------------------------------------------------------------


async def test_full_access_allows_high_risk_calls_without_asking() -> None:
    decision = await gate("full-access", asker=NeverAsk()).check(call("run_python", "import os"))
    assert (decision.allowed, decision.tier, decision.rule) == (True, "mode", "mode = full-access")


async def test_smart_allows_low_risk_without_asking() -> None:
    g = gate("smart", asker=NeverAsk())
    for tool, subject in [
        ("read_file", "src/app.py"),
        ("write_file", "src/app.py"),
        ("run_shell", "git diff"),
        ("run_shell", "ls -la src"),
    ]:
        decision = await g.check(call(tool, subject))
        assert (decision.allowed, decision.tier) == (True, "mode"), subject
        assert "low risk" in decision.reason


async def test_smart_asks_for_high_risk_and_obeys_the_answer() -> None:
    asker = ScriptedAsker("deny")
    decision = await gate("smart", asker=asker).check(call("run_shell", "ls; rm -rf x"))
    assert (decision.allowed, decision.tier) == (False, "human")
    assert "declined" in decision.reason
    ((asked_call, question),) = asker.asked
    assert asked_call.subject == "ls; rm -rf x"
    assert "`ls; rm -rf x`" in question
    assert "high-risk" in question


async def test_ask_everything_asks_even_for_read_only_calls() -> None:
    asker = ScriptedAsker("allow_once")
    decision = await gate("ask-everything", asker=asker).check(call("read_file", "README.md"))
    assert (decision.allowed, decision.tier) == (True, "human")
    assert "ask-everything" in asker.asked[0][1]


@pytest.mark.parametrize(
    ("tool", "subject", "expected"),
    [
        ("read_file", "anything/at/all", "low"),
        ("list_files", ".", "low"),
        ("search_files", "src", "low"),
        ("write_file", "src/a.py", "low"),
        ("edit_file", "./notes.md", "low"),
        ("write_file", "../outside.txt", "high"),
        ("write_file", "a/../../outside.txt", "high"),
        ("write_file", "/etc/passwd", "high"),
        ("edit_file", ".git/hooks/pre-commit", "high"),
        ("run_shell", "ls -la", "low"),
        ("run_shell", "cat README.md", "low"),
        ("run_shell", "head -n 5 a.txt", "low"),
        ("run_shell", "tail a.log", "low"),
        ("run_shell", "wc -l *.py", "low"),
        ("run_shell", "grep -rn TODO src", "low"),
        ("run_shell", "rg TODO", "low"),
        ("run_shell", "find . -name '*.py'", "low"),
        ("run_shell", "pwd", "low"),
        ("run_shell", "echo hello", "low"),
        ("run_shell", "git status", "low"),
        ("run_shell", "git log --oneline -5", "low"),
        ("run_shell", "git show HEAD", "low"),
        ("run_shell", "python -m pytest -q tests", "high"),  # runs conftest.py & tests
        ("run_shell", "pytest -x", "high"),
        ("run_shell", "ls; rm -rf x", "high"),
        ("run_shell", "ls && rm -rf x", "high"),
        ("run_shell", "ls || rm -rf x", "high"),
        ("run_shell", "cat a | sh", "high"),
        ("run_shell", "echo hi > a.txt", "high"),
        ("run_shell", "cat < /dev/sda", "high"),
        ("run_shell", "echo `rm x`", "high"),
        ("run_shell", "echo $(rm x)", "high"),
        ("run_shell", "ls\nrm -rf x", "high"),
        ("run_shell", "ls &", "high"),
        ("run_shell", "find . -delete", "high"),
        ("run_shell", "find . -exec rm {} +", "high"),
        ("run_shell", "rg --pre=sh x", "high"),
        ("run_shell", "git push", "high"),
        ("run_shell", "git diff --output=/tmp/x", "high"),
        ("run_shell", "git", "high"),
        ("run_shell", "python script.py", "high"),
        ("run_shell", "rm -rf build", "high"),
        ("run_shell", "cat 'unbalanced", "high"),
        ("run_shell", "", "high"),
        ("run_python", "print(1)", "high"),
        ("web_fetch", "https://example.com", "high"),
        ("some_new_tool", "", "high"),
    ],
)
def test_risk(tool: str, subject: str, expected: str) -> None:
    assert risk(tool, subject) == expected


# -- unattended gates ------------------------------------------------------------------------


async def test_unattended_gate_denies_where_it_would_ask_and_touches_nothing() -> None:
    remembered, audit = CountingRemembered(), ListAudit()
    g = gate("smart", asker=None, remembered=remembered, audit=audit)
    assert g.unattended
    decision = await g.check(call("run_shell", "make deploy"))
    assert (decision.allowed, decision.tier) == (False, "unattended")
    assert "unattended run" in decision.reason
    assert "`run_shell:make deploy`" in decision.reason
    assert 'mode = "full-access"' in decision.reason
    assert remembered.calls == ["has"]  # looked up, never written
    assert audit.decisions == [decision]


async def test_unattended_ask_everything_names_smart_for_low_risk_calls() -> None:
    decision = await gate("ask-everything").check(call("read_file", "src/*.py"))
    assert decision.tier == "unattended"
    assert "`read_file:src/[*].py`" in decision.reason  # glob characters escaped: exact match
    assert 'mode = "smart"' in decision.reason


async def test_unattended_gate_still_allows_what_rules_and_mode_allow() -> None:
    g = gate("smart", allow=("run_shell:make *",))
    assert (await g.check(call("run_shell", "make test"))).tier == "user_allow"
    assert (await g.check(call("read_file", "a.txt"))).tier == "mode"


async def test_unattended_is_fixed_at_construction() -> None:
    attended = gate("smart", asker=ScriptedAsker("allow_once"))
    unattended = gate("smart", asker=None)
    assert not attended.unattended
    assert (await attended.check(call("run_python", "1"))).tier == "human"
    assert (await unattended.check(call("run_python", "1"))).tier == "unattended"


# -- asker failures --------------------------------------------------------------------------


async def test_an_asker_that_raises_counts_as_deny(caplog: pytest.LogCaptureFixture) -> None:
    audit = ListAudit()
    with caplog.at_level(logging.WARNING, logger="agents.permissions"):
        decision = await gate("smart", asker=BrokenAsker(), audit=audit).check(
            call("run_python", "print(1)")
        )
    assert (decision.allowed, decision.tier) == (False, "human")
    assert "approval prompt failed (ConnectionError: channel unreachable)" in decision.reason
    assert "counts as no" in decision.reason
    assert audit.decisions == [decision]


async def test_an_asker_that_times_out_counts_as_deny() -> None:
    g = gate("smart", asker=SilentAsker(), ask_timeout_seconds=0.01)
    decision = await g.check(call("run_python", "print(1)"))
    assert (decision.allowed, decision.tier) == (False, "human")
    assert "no answer came within" in decision.reason


async def test_an_unknown_answer_counts_as_deny() -> None:
    decision = await gate("smart", asker=OddAsker()).check(call("run_python", "print(1)"))
    assert (decision.allowed, decision.tier) == (False, "human")


# -- audit -----------------------------------------------------------------------------------


async def test_audit_records_every_decision_of_every_tier() -> None:
    remembered = MemoryRemembered()
    await remembered.add("C1:t1", "run_shell", "make")
    audit = ListAudit()
    g = gate(
        "smart",
        allow=("run_shell:git status",),
        deny=("web_fetch",),
        asker=ScriptedAsker("deny", "allow_once"),
        remembered=remembered,
        audit=audit,
    )
    calls = [
        call("run_shell", "rm -rf ~"),
        call("web_fetch", "https://x.example"),
        call("run_shell", "git status"),
        call("run_shell", "make"),
        call("read_file", "a.txt"),
        call("run_python", "1"),
        call("run_python", "2"),
    ]
    returned = [await g.check(c) for c in calls]
    assert [d.tier for d in returned] == [
        "builtin",
        "user_deny",
        "user_allow",
        "remembered",
        "mode",
        "human",
        "human",
    ]
    assert [d.allowed for d in returned] == [False, False, True, True, True, False, True]
    assert audit.entries == list(zip(calls, returned, strict=True))


async def test_a_failing_audit_never_changes_the_decision(caplog: pytest.LogCaptureFixture) -> None:
    g = gate("smart", audit=BrokenAudit())
    with caplog.at_level(logging.ERROR, logger="agents.permissions"):
        denied = await g.check(call("run_shell", "rm -rf /"))
        unattended = await g.check(call("run_python", "1"))
        allowed = await g.check(call("read_file", "a.txt"))
    assert (denied.allowed, unattended.allowed, allowed.allowed) == (False, False, True)
    assert sum("permission audit failed" in r.message for r in caplog.records) == 3


# -- rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "tool", "subject", "expected"),
    [
        ("web_fetch", "web_fetch", "https://anything", True),
        ("web_fetch", "run_shell", "https://anything", False),
        ("web_fetch:https://docs.python.org/*", "web_fetch", "https://docs.python.org/3/x", True),
        ("web_fetch:https://docs.python.org/*", "web_fetch", "https://evil.example/", False),
        ("run_shell:git *", "run_shell", "git log -p src/app.py", True),
        ("run_shell:git *", "run_shell", "gitk", False),
        ("run_shell:pytest*", "run_shell", "pytest -q tests/test_x.py", True),
        ("run_shell:git status", "run_shell", "git status --short", False),
        ("run_shell:ls ?", "run_shell", "ls a", True),
        ("run_shell:make [!d]*", "run_shell", "make test", True),
        ("run_shell:make [!d]*", "run_shell", "make deploy", False),
        ("run_shell:echo [ab", "run_shell", "echo [ab", True),  # an unclosed [ is literal
        ("run_shell:cat *|grep x", "run_shell", "cat a.txt|grep x", True),  # literal operators
        ("write_file:docs/**", "write_file", "docs/a/b/c.md", True),
        ("write_file:docs/**", "write_file", "src/docs/a.md", False),
        ("write_file:docs/*", "write_file", "docs/a.md", True),
        ("write_file:docs/*", "write_file", "docs/a/b.md", False),
        ("write_file:**/*.md", "write_file", "README.md", True),
        ("write_file:**/*.md", "write_file", "a/b/README.md", True),
        ("write_file:docs/**/*.md", "write_file", "docs/a.md", True),
        ("write_file:./docs/*.md", "write_file", "docs/a.md", True),
        ("read_file:*.py", "read_file", "./app.py", True),
    ],
)
def test_rule_glob_matching(rule: str, tool: str, subject: str, expected: bool) -> None:
    assert PermissionRule.parse(rule).matches(tool, subject) is expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "an empty rule does not start with a tool name"),
        ("run_shell:", "has no glob after `:`"),
        ("run_shell:   ", "has no glob after `:`"),
        ("run shell:ls", "`run shell:ls` does not start with a tool name"),
        (":ls", "does not start with a tool name"),
    ],
)
def test_rule_parse_errors(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        PermissionRule.parse(text)
    assert problem in str(excinfo.value)


def test_rule_parse_round_trips() -> None:
    rule = PermissionRule.parse("  run_shell: git * ")
    assert (rule.tool, rule.glob, str(rule)) == ("run_shell", "git *", "run_shell:git *")
    assert PermissionRule.parse("web_fetch") == PermissionRule("web_fetch")


def test_bad_rules_are_refused_by_the_model() -> None:
    with pytest.raises(ValidationError, match="has no glob after"):
        PermissionRules(allow=["run_shell:"])
    with pytest.raises(ValidationError):
        PermissionRules.model_validate({"mode": "yolo"})


def test_suggest_rule_and_subject_of() -> None:
    assert suggest_rule("run_shell", "ls  *.py") == "run_shell:ls [*].py"
    assert suggest_rule("write_file", "./docs/a.md") == "write_file:docs/a.md"
    assert suggest_rule("ask_requester", "") == "ask_requester"
    assert subject_of({"command": "ls", "timeout_seconds": 3}) == "ls"
    assert subject_of({"code": "print(1)"}) == "print(1)"
    assert subject_of({"path": "a.txt", "content": "x"}) == "a.txt"
    assert subject_of({"url": "https://x"}) == "https://x"
    assert subject_of({"question": "why?"}) == ""


# -- rules files -----------------------------------------------------------------------------

RULES_TOML = """
[default]
mode = "smart"
deny = ["run_shell:curl * | sh", "run_shell:git push*"]
allow = ["run_shell:git status"]

[workspace."T0123"]
mode = "ask-everything"
allow = ["run_shell:pytest*", "run_shell:git status"]
"""


def test_a_missing_rules_file_gives_the_defaults(tmp_path: Path) -> None:
    rules = load_rules(tmp_path / "permissions.toml", "T0123")
    assert rules == PermissionRules()
    assert (rules.mode, rules.allow, rules.deny) == ("smart", [], [])


def test_workspace_section_overrides_mode_and_adds_rules(tmp_path: Path) -> None:
    path = tmp_path / "permissions.toml"
    path.write_text(RULES_TOML, encoding="utf-8")
    rules = load_rules(path, "T0123")
    assert rules.mode == "ask-everything"
    assert rules.allow == ["run_shell:git status", "run_shell:pytest*"]
    assert rules.deny == ["run_shell:curl * | sh", "run_shell:git push*"]
    other = load_rules(path, "G999")
    assert (other.mode, other.allow) == ("smart", ["run_shell:git status"])


def test_a_workspace_section_without_mode_keeps_the_default_mode() -> None:
    text = '[default]\nmode = "full-access"\n[workspace.T1]\ndeny = ["web_fetch"]\n'
    rules = parse_rules(text, "T1", label="p.toml")
    assert (rules.mode, rules.deny) == ("full-access", ["web_fetch"])


async def test_loaded_rules_drive_the_gate(tmp_path: Path) -> None:
    path = tmp_path / "permissions.toml"
    path.write_text(RULES_TOML, encoding="utf-8")
    g = PermissionGate(
        load_rules(path, "T0123"), asker=None, remembered=MemoryRemembered(), audit=ListAudit()
    )
    assert (await g.check(call("run_shell", "pytest -q"))).tier == "user_allow"
    assert (await g.check(call("run_shell", "git push"))).tier == "user_deny"
    assert (await g.check(call("read_file", "a.txt"))).tier == "unattended"  # ask-everything


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[default\nmode = 1", "invalid TOML"),
        (
            '[workspace."T0123"]\nmode = "yolo"',
            '[workspace."T0123"] mode: \'yolo\' is not a mode; use one of "ask-everything", '
            '"smart", "full-access"',
        ),
        ('[default]\nallow = ["git status", "run_shell:"]', "[default] allow[0]: `git status`"),
        ('[default]\nallow = ["run_shell:"]', "[default] allow[0]: `run_shell:` has no glob"),
        ('[default]\ndeny = "web_fetch"', "[default] deny: Input should be a valid list"),
        (
            '[default]\nallows = ["web_fetch"]',
            "[default] unknown key 'allows' (did you mean 'allow'?)",
        ),
        ("[defaults]\nmode = 'smart'", "unknown key 'defaults' (did you mean 'default'?)"),
        ("[workspace]\nT1 = 3", '[workspace."T1"] must be a table of settings'),
        ("default = 3", "[default] must be a table of settings"),
    ],
)
def test_malformed_rules_files_name_file_key_and_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "permissions.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PermissionConfigError) as excinfo:
        load_rules(path, "T0123")
    message = str(excinfo.value)
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_an_unreadable_rules_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "permissions.toml"
    path.mkdir()
    with pytest.raises(PermissionConfigError, match="cannot read the file"):
        load_rules(path, "T0123")


async def test_the_detail_of_a_call_is_shown_under_the_question() -> None:
    asker = ScriptedAsker("allow_once")
    shown = "The agent's call: **Write notes.md** (edit)\n```\n+hello\n```"
    request = dataclasses.replace(call("edit_file", "../notes.md"), detail=shown)
    decision = await gate(asker=asker).check(request)
    assert decision.allowed
    ((_, question),) = asker.asked
    assert question.startswith("Allow `edit_file` on `../notes.md`?")
    assert question.endswith(shown)
