"""The completion judge: verdicts through the constrained tool, and the availability fallback
whenever the judge cannot answer (error, timeout, offline, no or malformed verdict)."""

from __future__ import annotations

import asyncio

from agents.models.types import ModelError, ModelReply, TextBlock, ToolCall, Usage
from host.graph.judge import JUDGE_SYSTEM, VERDICT_TOOL, CompletionJudge, Verdict
from tests.fakes.graph_kit import JudgeStep, ScriptedJudgeProvider, verdict, verdict_reply


def scripted(*steps: JudgeStep, offline: bool = False) -> ScriptedJudgeProvider:
    """A judge model playing `steps` for every request."""
    provider = ScriptedJudgeProvider(offline=offline)
    provider.on("", *steps)
    return provider


async def judge_once(
    provider: ScriptedJudgeProvider,
    *,
    error: str | None = None,
    judge_timeout: float = 10.0,
    **kw: object,
) -> Verdict:
    """One verdict on a small attempt."""
    judge = CompletionJudge(provider, timeout=judge_timeout)
    args: dict[str, object] = {"prompt": "Find X.", "output": "X is 4.", "transcript": "[...]"}
    args.update(kw)
    return await judge.judge(error=error, **args)  # type: ignore[arg-type]


async def test_accomplished() -> None:
    provider = scripted(
        JudgeStep(verdict=verdict(True, evidence="says X is 4"), usage=Usage(input_tokens=40))
    )
    result = await judge_once(provider)
    assert result == Verdict(
        accomplished=True, category=None, evidence="says X is 4", calls=1, tokens=40
    )
    assert result.fallback is False


async def test_accomplished_drops_a_category() -> None:
    provider = scripted(JudgeStep(verdict=verdict(True, "tool_failure")))
    result = await judge_once(provider)
    assert result.accomplished is True and result.category is None


async def test_not_accomplished_with_category() -> None:
    args = verdict(False, "missing_credential", "a GitHub token", "401 from the API")
    provider = scripted(JudgeStep(verdict=args, usage=Usage(input_tokens=30, output_tokens=12)))
    result = await judge_once(provider)
    assert result == Verdict(
        accomplished=False,
        category="missing_credential",
        missing="a GitHub token",
        evidence="401 from the API",
        calls=1,
        tokens=42,
    )


async def test_unknown_or_missing_category_becomes_other() -> None:
    unknown = await judge_once(scripted(JudgeStep(verdict=verdict(False, "gremlins"))))
    missing = await judge_once(scripted(JudgeStep(verdict=verdict(False))))
    assert (unknown.accomplished, unknown.category) == (False, "other")
    assert (missing.accomplished, missing.category) == (False, "other")


async def test_missing_tool_call_falls_back() -> None:
    reply = ModelReply(
        content=[TextBlock(text="Looks fine to me.")],
        stop_reason="end_turn",
        usage=Usage(input_tokens=9, output_tokens=1),
    )
    result = await judge_once(scripted(JudgeStep(reply=reply)))
    assert result.accomplished is True
    assert result.fallback is True
    assert result.fallback_reason == "the judge answered without a verdict"
    assert (result.calls, result.tokens) == (1, 10)


async def test_a_call_of_another_tool_is_no_verdict() -> None:
    reply = ModelReply(
        content=[ToolCall(id="t1", name="something_else", input={"accomplished": False})],
        stop_reason="tool_use",
    )
    result = await judge_once(scripted(JudgeStep(reply=reply)))
    assert result.fallback is True and result.accomplished is True


async def test_malformed_verdict_falls_back() -> None:
    reply = verdict_reply({"accomplished": "no", "evidence": "x"})
    result = await judge_once(scripted(JudgeStep(reply=reply)))
    assert result.accomplished is True
    assert (result.fallback, result.fallback_reason) == (True, "the judge's verdict was malformed")


async def test_judge_exception_falls_back() -> None:
    result = await judge_once(scripted(JudgeStep(raises=ModelError("529 overloaded"))))
    assert result.accomplished is True
    assert result.fallback is True
    assert result.fallback_reason == "the judge failed: 529 overloaded"
    assert result.calls == 0


async def test_fallback_after_a_backend_error_is_a_tool_failure() -> None:
    provider = scripted(JudgeStep(raises=ModelError("529 overloaded")))
    result = await judge_once(provider, error="RuntimeError: disk full")
    assert result.accomplished is False
    assert result.category == "tool_failure"
    assert result.evidence == "RuntimeError: disk full"
    assert result.fallback is True


async def test_offline_provider_falls_back_without_a_call() -> None:
    provider = scripted(offline=True)
    result = await judge_once(provider)
    assert result.accomplished is True
    assert (result.fallback, result.fallback_reason) == (
        True,
        "the judge needs a model (offline mode)",
    )
    assert provider.bodies == []
    failed = await judge_once(provider, error="boom")
    assert (failed.accomplished, failed.category) == (False, "tool_failure")


async def test_timeout_falls_back() -> None:
    provider = scripted(JudgeStep(gate=asyncio.Event()))  # never answers
    result = await judge_once(provider, judge_timeout=0.05)
    assert result.accomplished is True
    assert (result.fallback, result.fallback_reason) == (
        True,
        "the judge timed out after 0.05 s (RAVEN_JUDGE_TIMEOUT)",
    )


async def test_request_holds_task_output_transcript_flags_and_error() -> None:
    provider = scripted()
    await judge_once(
        provider,
        prompt="Find X.",
        output="X is 4.",
        transcript="step one\nstep two",
        truncated=True,
        error="exit status 2",
    )
    assert provider.systems == [JUDGE_SYSTEM]
    assert list(provider.tools[0]) == [VERDICT_TOOL]
    body = provider.bodies[0]
    assert "<task>\nFind X.\n</task>" in body
    assert '<output truncated="true">\nX is 4.\n</output>' in body
    assert '<transcript_tail complete="true">\nstep one\nstep two\n</transcript_tail>' in body
    assert "<backend_error>\nexit status 2\n</backend_error>" in body


async def test_long_inputs_are_clipped_keeping_what_matters() -> None:
    provider = scripted()
    prompt = "INSTRUCTIONS: do X." + "p" * 30_000 + "(inputs end)"
    output = "Intro." + "o" * 30_000 + "CONCLUSION: done."
    transcript = "OLD" + "t" * 10_000 + "LATEST STEP"
    await judge_once(provider, prompt=prompt, output=output, transcript=transcript)
    body = provider.bodies[0]
    # The task's instructions open the prompt; the answer's conclusion closes the output.
    assert "INSTRUCTIONS: do X." in body and "(inputs end)" in body
    assert "Intro." in body and "CONCLUSION: done." in body
    assert "characters omitted" in body
    # The transcript is a tail.
    assert "LATEST STEP" in body and "OLD" not in body
    assert len(body) < 31_000


async def test_verdict_texts_are_capped() -> None:
    args = verdict(False, "other", "m" * 5000, "e" * 5000)
    result = await judge_once(scripted(JudgeStep(verdict=args)))
    assert len(result.missing) == 2000 and len(result.evidence) == 2000


async def test_verdict_as_dict_is_json_ready() -> None:
    result = Verdict(accomplished=False, category="other", missing="m", evidence="e")
    assert result.as_dict() == {
        "accomplished": False,
        "category": "other",
        "missing": "m",
        "evidence": "e",
        "fallback": False,
        "fallback_reason": "",
        "calls": 0,
        "tokens": 0,
    }
