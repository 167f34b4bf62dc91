"""The in-process backend: the Raven agent loop configured by a specialist."""

from __future__ import annotations

from typing import Any

from agents.backends.base import AgentOutcome, AgentTask, Progress, cap_output, failed
from agents.harness import Harness
from agents.loop import AgentLoop, EventSink
from agents.models.offline import offline_key_help
from agents.models.provider import ModelProvider
from agents.models.types import Message, ModelError, Usage
from agents.specialists import Specialist
from agents.tool_failures import failed_text
from agents.workspace_tools import ASK_REQUESTER, ToolContext

PROGRESS_PREVIEW_CHARS = 160


class InProcessBackend:
    """Runs a task through `AgentLoop` with the specialist's prompt, tools and harness."""

    def __init__(
        self,
        provider: ModelProvider,
        specialist: Specialist,
        *,
        max_iterations: int = 40,
        max_tokens: int = 4096,
        harness: Harness | None = None,
    ) -> None:
        self._provider = provider
        self._specialist = specialist
        self._loop: AgentLoop[ToolContext] = AgentLoop(
            provider,
            harness=harness or specialist.harness,
            max_iterations=max_iterations,
            max_tokens=max_tokens,
        )

    async def run(self, task: AgentTask) -> AgentOutcome:
        """Run the loop over history + this message; return the answer and the new session."""
        name = task.agent.name
        if self._provider.offline:
            # No model: say so honestly instead of pretending to have done the work.
            return AgentOutcome(
                output=(
                    f"Offline mode: the `{name}` agent needs a language model and did not run "
                    f"({offline_key_help(self._provider)}). Task received: {task.message[:200]}"
                ),
                transcript=[{"type": "offline", "agent": name}],
                usage=Usage(),
                model_calls=0,
                seconds=0.0,
                history=list(task.history),
                offline=True,
            )
        task.workspace.mkdir(parents=True, exist_ok=True)
        workspace = task.workspace.resolve()
        tools = self._specialist.tools(workspace)
        if task.granted.tools:
            tools = tools.with_tools(task.granted.tools)
        if task.ask is not None and "ask_requester" not in tools.names():
            tools = tools.with_tools([ASK_REQUESTER])
        messages = [*task.history, Message.user_text(task.message)]
        try:
            result = await self._loop.run(
                system=self._specialist.system_prompt,
                messages=messages,
                tools=tools,
                ctx=ToolContext(
                    workspace=workspace, ask=task.ask, permit=task.permit, records=task.records
                ),
                on_event=_progress_events(task.on_progress),
            )
        except ModelError as exc:
            return failed(task, f"The `{name}` agent could not reach its model: {exc}")
        output, truncated = cap_output(result.text, task.agent.output_cap_chars)
        return AgentOutcome(
            output=output,
            transcript=result.transcript,
            usage=result.usage,
            model_calls=result.model_calls,
            seconds=result.seconds,
            history=result.messages,
            truncated=truncated,
            fallback=result.fallback or None,
        )


def _progress_events(on_progress: Progress | None) -> EventSink | None:
    """Loop events as short progress lines: the model's interim notes and each tool it runs."""
    if on_progress is None:
        return None
    report = on_progress

    async def sink(event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "model_call" and not event.get("final") and event.get("text"):
            await report(_short(str(event["text"])))
        elif kind == "tool_start":
            await report(_short(f"`{event['name']}` {event.get('input', '')}"))
        elif kind == "tool_end" and event.get("is_error"):
            await report(_short(failed_text(str(event["name"]), str(event.get("output", "")))))

    return sink


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= PROGRESS_PREVIEW_CHARS else line[: PROGRESS_PREVIEW_CHARS - 1] + "…"
