"""The Host's tools: delegate, submit_graph, the orchestration guide, exceptions, status,
cancellation and questions to the user."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from agents.models.types import ToolCall
from agents.registry import AgentRegistry
from agents.text_tool_calls import CallRewrite
from agents.tools import Tool, ToolOutput
from host.graph.admission import AdmissionError
from host.graph.executor import GraphRun
from host.graph.model import NODE_ID_PATTERN, GraphSubmission
from host.graph.run_store import RunRecord
from host.graph.runs import RunManager, submission_json
from host.prompts.broker import PromptBroker
from host.runtime.people import People
from host.runtime.prompt_record import Prompt
from host.runtime.roles import Roles
from host.runtime.turn import TurnContext

GUIDE_FLAG = "orchestration_guide_pinned"
# What the tools' descriptions say is not repeated here (every call sends both).
GUIDE_SUMMARY = (
    "Answer directly when no specialist is needed; `delegate` one agent for a single job; "
    "`submit_graph` when the work splits across agents or needs ordering (call "
    "`load_orchestration_guide` before your first graph)."
)
# The planning tools' descriptions, shared with `raven-bot eval plans` (its Host plans with the
# same words as the bot's).
DELEGATE_DESCRIPTION = "Run one agent on one task and return its result."
SUBMIT_GRAPH_DESCRIPTION = "Start a graph of agent nodes: a run id (background) or the run report."
GUIDE_DESCRIPTION = (
    "The orchestration guide: node fields, placeholders, limits. It stays pinned in this "
    "conversation."
)
# Roster tags the Host decides on: `instance` needs a stateful agent, the path placeholders a
# file-capable one (`progress` is how an agent reports, nothing to choose by).
ROSTER_TAGS = ("stateful", "file-capable")


def load_guide() -> str:
    """The full orchestration guide shipped in the package."""
    return resources.files("host.agent").joinpath("guides/orchestration.md").read_text("utf-8")


class SubmitGraphInput(RootModel[dict[str, Any]]):
    """Accepts any object; admission (not the tool layer) reports what is wrong with it."""

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Advertise the real submission schema to the model (sent lean, as every tool's)."""
        return GraphSubmission.model_json_schema(*args, **kwargs)


class DelegateInput(BaseModel):
    """Input of `delegate`."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(description="an agent of the roster")
    task: str = Field(min_length=1, description="everything the agent needs to know")
    id: str | None = Field(default=None, description="node id (default: generated)")
    instance: str | None = Field(default=None, description="continue this stateful session")
    deps: list[str] = Field(default_factory=list, description="earlier completed nodes used")


class NoInput(BaseModel):
    """A tool without arguments."""

    model_config = ConfigDict(extra="forbid")


class ResolveInput(BaseModel):
    """Input of `resolve_exception`."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    node_id: str
    action: Literal["continue", "abandon", "replan"]
    message: str = Field(default="", description="for continue: what to do differently")
    graph: dict[str, Any] | None = Field(default=None, description="for replan: new graph")


class RunRef(BaseModel):
    """A run id, optional."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = None


class AskInput(BaseModel):
    """Input of `ask_user`."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000)
    kind: Literal["approval", "choice", "free_text"] = "free_text"
    options: list[str] = Field(default_factory=list, max_length=10)


@dataclass(frozen=True)
class HostToolDeps:
    """What the host tools work with."""

    runs: RunManager
    broker: PromptBroker
    registry: AgentRegistry
    # True when tool results reach people unchanged (the offline model relays them): then
    # messages name files and fixes, not the Host's tools.
    results_reach_users: bool = False
    # Group memory's request for the attribution blocks of a closed round (run id, its
    # agents): appended to a foreground report. None: group memory is off. Injected, so the
    # Host's tools reach the memory capability only through what its Feature hands over.
    close_request: Callable[[str, Sequence[str]], str] | None = None
    # Who besides a run's submitter may read its report or act on it.
    roles: Roles = field(default_factory=Roles)
    # How people are named in what people read (refusals): display names, not ids.
    people: People = field(default_factory=People)
    # A closed foreground run's files (a design's SVG, a patch): queued to follow the reply
    # of the turn that waited for it, given (turn, run id, report); returns the report
    # naming them. None: a foreground run attaches nothing.
    attach_files: Callable[[TurnContext, str, str], Awaitable[str]] | None = None


def shown_id(prompt: Prompt) -> str:
    """A prompt's id as people read it (offline, tool results are shown as they are): its
    first 8 characters, which a typed answer may use to name it."""
    return prompt.id[:8]


def _node_id_for(agent: str) -> str:
    base = re.sub(r"[^a-z0-9_]", "_", agent.lower()) or "node"
    if not base[0].isalpha():
        base = f"n_{base}"
    return f"{base[:28]}_{uuid.uuid4().hex[:8]}"


def _steps(count: int) -> str:
    """`1 step`, `2 steps`: a graph's nodes as people count them."""
    return f"{count} step{'' if count == 1 else 's'}"


def approval_question(submission: GraphSubmission) -> str:
    """The question shown when a graph asks for approval: the nodes it will run."""
    lines = [f"Run this graph? {submission.task_summary}"]
    for node in submission.nodes:
        after = f" (after {', '.join(node.deps)})" if node.deps else ""
        lines.append(f"• `{node.id}` → {node.agent}: {node.summary or node.template[:120]}{after}")
    return "\n".join(lines)


class HostTools:
    """The Host's tool implementations, bound to one generation's runs and prompt broker."""

    def __init__(self, deps: HostToolDeps) -> None:
        self.deps = deps
        self.runs = deps.runs
        self.broker = deps.broker

    async def submit(self, ctx: TurnContext, raw: dict[str, Any]) -> str | ToolOutput:
        """Admit and start a graph, or ask for approval when it needs one (what happened is
        also said in plain words, for when no model writes the answer)."""
        if ctx.origin == "scheduled":
            # A firing says its result once, when its work is done (what `notify:` decides
            # on), not a status message and a report per run.
            raw = {**raw, "background": False}
        try:
            result = await self.runs.submit(
                ctx.conversation,
                raw,
                submitted_by=ctx.author_id,
                for_task=ctx.task or None,
                starts_after=ctx.replied,
            )
        except AdmissionError as exc:
            # An error result, so the model reads it as a failed call to repair and resubmit.
            text = exc.for_user() if self.deps.results_reach_users else str(exc)
            return ToolOutput(text, exc.for_user(), is_error=True)
        if result.status == "needs_approval":
            assert result.submission is not None
            prompt = await self.broker.create(
                conversation=ctx.conversation,
                kind="approval",
                question=approval_question(result.submission),
                requester=ctx.author_id,
                purpose="graph_approval",
                payload={
                    "submission": submission_json(result.submission),
                    "submitted_by": ctx.author_id,
                },
            )
            steps = _steps(len(result.submission.nodes))
            return ToolOutput(
                f"Approval requested from the user (prompt `{shown_id(prompt)}`); nothing runs "
                "until they approve. The outcome will arrive as a new message.",
                f"This plan of {steps} waits for approval (prompt `{shown_id(prompt)}`): "
                "nothing runs until it is approved.",
            )
        run = result.run
        assert run is not None
        if run.record.background:
            return ToolOutput(
                f"Run `{run.id}` started with {len(run.nodes)} node(s) in the background. "
                "Progress, exceptions and the final report will arrive as messages.",
                f"Started run `{run.id}` with {_steps(len(run.nodes))}; I'll post the report here.",
            )
        return await self.wait(ctx, run)

    async def wait(self, ctx: TurnContext, run: GraphRun) -> str:
        """Foreground: the report at the next decision point, naming the files that follow
        this turn's reply once the run is over; a closed round asks for its attribution
        blocks (never when results reach people unchanged)."""
        text = await self.runs.wait_for_decision_point(run)
        if run.done.is_set() and self.deps.attach_files is not None:
            text = await self.deps.attach_files(ctx, run.id, text)
        closed = run.done.is_set() and run.record.state != "cancelled"
        close_request = self.deps.close_request
        if closed and close_request is not None and not self.deps.results_reach_users:
            agents = list(dict.fromkeys(n.agent for n in run.nodes.values()))
            text = f"{text}\n\n---\n{close_request(run.id, agents)}"
        return text

    async def submit_graph(self, ctx: TurnContext, args: SubmitGraphInput) -> str | ToolOutput:
        """The `submit_graph` tool."""
        return await self.submit(ctx, args.root)

    async def delegate(self, ctx: TurnContext, args: DelegateInput) -> str | ToolOutput:
        """The `delegate` tool: a single-node graph run in the foreground."""
        # An optional id that is no node id (a weak model invents `123`) is left out, not an
        # error: nothing refers to a delegated node before it exists.
        given = args.id if args.id and re.fullmatch(NODE_ID_PATTERN, args.id) else None
        node: dict[str, Any] = {
            "id": given or _node_id_for(args.agent),
            "agent": args.agent,
            "template": args.task,
            "deps": args.deps,
            "summary": args.task[:120],
        }
        if args.instance:
            node["instance"] = args.instance
        graph = {"task_summary": f"delegate to {args.agent}", "background": False, "nodes": [node]}
        return await self.submit(ctx, graph)

    async def load_orchestration_guide(self, ctx: TurnContext, _: NoInput) -> str:
        """The `load_orchestration_guide` tool (pins the guide)."""
        await self.runs.store.set_flag(ctx.conversation.id, GUIDE_FLAG, "1")
        return load_guide() + "\n\n(The guide is now pinned for the rest of this conversation.)"

    async def replan_with_approval(self, ctx: TurnContext, args: ResolveInput) -> str:
        """Replace a waiting run's graph once a person approves the new one."""
        problem = self.runs.unresolvable(ctx.conversation, args.run_id, args.node_id)
        if problem is not None:
            return problem
        assert args.graph is not None
        try:
            result = await self.runs.submit(
                ctx.conversation,
                args.graph,
                submitted_by=ctx.author_id,
                replaces_run=args.run_id,
            )
        except AdmissionError as exc:
            reason = exc.for_user() if self.deps.results_reach_users else str(exc)
            return f"Replan rejected; run `{args.run_id}` is unchanged. {reason}"
        if result.status == "started":  # not reachable with confirm, kept for safety
            await self.runs.supersede(ctx.conversation, args.run_id)
            assert result.run is not None
            return f"Run `{args.run_id}` replaced by `{result.run.id}`."
        assert result.submission is not None
        prompt = await self.broker.create(
            conversation=ctx.conversation,
            kind="approval",
            question=approval_question(result.submission),
            requester=ctx.author_id,
            purpose="graph_approval",
            payload={
                "submission": submission_json(result.submission),
                "submitted_by": ctx.author_id,
                "replaces_run": args.run_id,
            },
        )
        return (
            f"Approval requested for the replanned graph (prompt `{shown_id(prompt)}`). Run "
            f"`{args.run_id}` keeps waiting until then; if approved it is replaced, if not it "
            "stays as it is (the node's decision deadline still applies)."
        )

    async def resolve_exception(self, ctx: TurnContext, args: ResolveInput) -> str:
        """The `resolve_exception` tool: continue, abandon or replan a suspended node."""
        if refusal := await self._run_refusal(ctx, args.run_id, "decide on"):
            return refusal
        if args.action == "replan" and args.graph is not None and args.graph.get("confirm"):
            return await self.replan_with_approval(ctx, args)
        text, run = await self.runs.resolve(
            ctx.conversation,
            run_id=args.run_id,
            node_id=args.node_id,
            action=args.action,
            message=args.message,
            graph=args.graph,
            submitted_by=ctx.author_id,
        )
        if run is None or run.record.background:
            return text
        return f"{text}\n\n{await self.wait(ctx, run)}"

    async def run_status(self, ctx: TurnContext, args: RunRef) -> str:
        """The `run_status` tool."""
        if args.run_id:
            if refusal := await self._run_refusal(ctx, args.run_id, "see the report of"):
                return refusal
            return await self.runs.report(args.run_id)
        return await self.runs.status(ctx.conversation)

    async def cancel_run(self, ctx: TurnContext, args: RunRef) -> str:
        """The `cancel_run` tool: the runs here that this turn's author may cancel."""
        if args.run_id and (refusal := await self._run_refusal(ctx, args.run_id, "cancel")):
            return refusal
        live = [
            r
            for r in self.runs.live_runs(ctx.conversation.id)
            if (args.run_id is None or r.id == args.run_id) and self._may_act(ctx, r.record)
        ]
        cancelled = [c for r in live for c in await self.runs.cancel(ctx.conversation, r.id)]
        if not cancelled:
            return "No matching run of yours is executing in this conversation."
        return f"Cancelled: {', '.join(f'`{r}`' for r in cancelled)}."

    def _may_act(self, ctx: TurnContext, record: RunRecord) -> bool:
        """The run's submitter, an approver or an admin; or the bot's own turn about it."""
        return (
            ctx.origin == "system"
            or ctx.author_id == record.submitted_by
            or self.deps.roles.privileged(ctx.author_id)
        )

    async def _run_refusal(self, ctx: TurnContext, run_id: str, action: str) -> str | None:
        """Why this turn may not act on the run (its author is also told privately)."""
        record = await self.runs.store.run(run_id)
        if record is None:
            return f"Refused: No run `{run_id}`."
        if record.conversation.id != ctx.conversation.id:
            reason = "it belongs to another conversation; act on it from its own thread."
        elif not self._may_act(ctx, record):
            submitter = await self.deps.people.name(record.conversation, record.submitted_by)
            reason = f"only its submitter ({submitter}), an approver or an admin can."
        else:
            return None
        text = f"You may not {action} run `{run_id}`: {reason}"
        if ctx.origin == "user":
            await self.broker.notify_private(ctx.conversation, ctx.author_id, text)
        return f"Refused: {text}"

    async def ask_user(self, ctx: TurnContext, args: AskInput) -> str:
        """The `ask_user` tool: a prompt to the requester, answered later."""
        if args.kind == "choice" and len(args.options) < 2:
            return "A `choice` question needs at least two `options`."
        prompt: Prompt = await self.broker.create(
            conversation=ctx.conversation,
            kind=args.kind,
            question=args.question,
            options=tuple(args.options),
            requester=ctx.author_id,
            purpose="ask_user",
        )
        return (
            f"Asked the user (prompt `{shown_id(prompt)}`). Their answer will arrive as a new "
            "message; end this turn now instead of waiting."
        )


def build_host_tools(deps: HostToolDeps) -> list[Tool[TurnContext]]:
    """Every tool the Host can call, bound to this generation's runtime."""
    t = HostTools(deps)
    return [
        Tool(
            "delegate",
            DELEGATE_DESCRIPTION,
            DelegateInput,
            t.delegate,
        ),
        Tool(
            "submit_graph",
            SUBMIT_GRAPH_DESCRIPTION,
            SubmitGraphInput,
            t.submit_graph,
        ),
        Tool(
            "load_orchestration_guide",
            GUIDE_DESCRIPTION,
            NoInput,
            t.load_orchestration_guide,
        ),
        Tool(
            "resolve_exception",
            "Decide on a suspended node, with the ids its exception report gave.",
            ResolveInput,
            t.resolve_exception,
        ),
        Tool(
            "run_status",
            "Report of one run, or the recent runs of this conversation.",
            RunRef,
            t.run_status,
        ),
        Tool(
            "cancel_run", "Cancel one run, or every run of this conversation.", RunRef, t.cancel_run
        ),
        Tool(
            "ask_user",
            "Ask the requester a question with buttons. Do not wait: the answer arrives as "
            "a new message.",
            AskInput,
            t.ask_user,
        ),
    ]


@dataclass(frozen=True)
class OrchestrationContext:
    """Context source: the agent roster and the guide summary, or the guide once pinned."""

    deps: HostToolDeps

    async def context(self, ctx: TurnContext) -> str:
        """The roster and guide block for this turn's conversation (the summary only until
        the guide, which says it all, is pinned)."""
        pinned = await self.deps.runs.store.get_flag(ctx.conversation.id, GUIDE_FLAG) == "1"
        return planning_context(self.deps.registry, guide_pinned=pinned)


def planning_context(registry: AgentRegistry, *, guide_pinned: bool = False) -> str:
    """The roster and the guide summary (or the pinned guide) as every Host call reads them;
    shared with `raven-bot eval plans`, whose Host plans from the same words."""
    parts = ["## Agents you can use", roster(registry), ""]
    if guide_pinned:
        parts += ["## Orchestration guide (pinned)", load_guide()]
    else:
        parts.append(GUIDE_SUMMARY)
    return "\n".join(parts)


def roster(registry: AgentRegistry) -> str:
    """`- `name` — description [tags]` per enabled agent, with the tags the Host uses."""
    lines = []
    for entry in registry.enabled():
        tags = [t for t in entry.tags if t in ROSTER_TAGS]
        shown = f" [{', '.join(tags)}]" if tags else ""
        lines.append(f"- `{entry.name}` — {entry.description}{shown}")
    return "\n".join(lines)


# Where a weak model puts an agent's task when it calls the agent as a tool.
_TASK_KEYS = ("task", "command", "prompt", "message", "input", "query", "request")


def agent_calls_as_delegate(registry: AgentRegistry) -> CallRewrite:
    """A call to an enabled agent by its name (`shell` with `{"command": "…"}`), which a weak
    model makes instead of `delegate`, read as `delegate` to that agent with that task; the
    delegation then passes every check and approval a `delegate` call passes. With no task
    found it stays unknown, and `agent_tool_hint` says how to run the agent."""

    def rewrite(call: ToolCall) -> ToolCall | None:
        entry = registry.get(call.name)
        if entry is None or not entry.enabled:
            return None
        task = _task_of(call.input)
        if task is None:  # no task to delegate: `agent_tool_hint` says how to call it
            return None
        return ToolCall(id=call.id, name="delegate", input={"agent": entry.name, "task": task})

    return rewrite


def _task_of(arguments: Mapping[str, object]) -> str | None:
    """The task a call to an agent carries: under a usual key, or its one string argument."""
    for key in _TASK_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
    strings = [v for v in arguments.values() if isinstance(v, str) and v.strip()]
    return strings[0] if len(strings) == 1 and len(arguments) == 1 else None


def agent_tool_hint(registry: AgentRegistry) -> Callable[[str], str | None]:
    """What the Host hears when it calls an agent by its name with no task: how to run it."""

    def hint(name: str) -> str | None:
        entry = registry.get(name)
        if entry is None or not entry.enabled:
            return None
        return (
            f"`{name}` is an agent, not a tool: run it with the `delegate` tool, as in "
            f'{{"agent": "{name}", "task": "<what it should do, e.g. the exact command>"}}.'
        )

    return hint
