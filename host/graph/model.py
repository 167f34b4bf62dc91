"""The graph submission format (what the Host sends to `submit_graph`) and node states."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import SkipJsonSchema

NODE_ID_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
INSTANCE_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
MAX_NODES = 200

NodeId = Annotated[str, StringConstraints(pattern=NODE_ID_PATTERN)]
SkillName = Annotated[str, StringConstraints(min_length=1, max_length=64)]
ServerName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")]
InputName = Annotated[str, StringConstraints(pattern=NODE_ID_PATTERN)]

# `queued`: submitted and waiting for its concurrency slot (or its instance); `running` only
# once it holds the slot. A queued node has not started, so stopping or a restart skips it
# like a pending one.
NodeState = Literal[
    "pending", "queued", "running", "completed", "exception", "failed", "skipped", "cancelled"
]
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "skipped", "cancelled"})
NOT_STARTED_STATES: frozenset[str] = frozenset({"pending", "queued"})


class TextInput(BaseModel):
    """A literal text input."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    text: str = Field(max_length=100_000)


class FileInput(BaseModel):
    """A file input: a path inside the conversation workspace."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str = Field(min_length=1, max_length=1000)


class NodeInput(BaseModel):
    """The output of another node (which must be listed in `deps`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    node: NodeId


InputBinding = TextInput | FileInput | NodeInput


class NodeSpec(BaseModel):
    """One node: which agent does what, after which nodes, with which inputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: NodeId
    agent: str = Field(min_length=1, max_length=64)
    template: str = Field(min_length=1, max_length=100_000)
    deps: list[NodeId] = Field(default_factory=list)
    inputs: dict[InputName, InputBinding] = Field(default_factory=dict)
    instance: Annotated[str, StringConstraints(pattern=INSTANCE_PATTERN)] | None = None
    summary: str = Field(default="", max_length=200)
    # The paper's capability override Cfg_v (Eq. 29): the skills this invocation gets.
    # Omitted: the agent's own configuration; []: none; names: exactly these. Not advertised
    # in the model-facing schema (as in the paper): explicit plans and graph files set it.
    skills: SkipJsonSchema[list[SkillName] | None] = Field(default=None, max_length=20)
    # The same for the team's tool servers (MCP, by their names in mcp.json).
    mcp: SkipJsonSchema[list[ServerName] | None] = Field(default=None, max_length=20)


class GraphSubmission(BaseModel):
    """A flat node list with a task summary and the `background` / `confirm` flags."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    task_summary: str = Field(min_length=1, max_length=2000)
    background: bool = True
    confirm: bool = False
    nodes: list[NodeSpec] = Field(min_length=1, max_length=MAX_NODES)


class AgentCapabilities(Protocol):
    """What admission needs to know about a registered agent."""

    @property
    def name(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def stateful(self) -> bool: ...
    @property
    def file_capable(self) -> bool: ...


@dataclass(frozen=True)
class PriorNode:
    """A node id already used in this conversation (any state), as admission sees it."""

    id: str
    agent: str
    state: NodeState
    output_path: Path | None = None
    instance: str | None = None

    @property
    def reusable(self) -> bool:
        """Completed with a recorded output: later graphs may depend on it."""
        return self.state == "completed" and self.output_path is not None


@dataclass(frozen=True)
class AdmissionContext:
    """Everything admission checks a submission against."""

    agents: Mapping[str, AgentCapabilities]
    workspace: Path
    prior_nodes: Mapping[str, PriorNode] = field(default_factory=dict)
    in_subagent: bool = False
    delegation_paused: bool = False
    dispatch_budget_remaining: int | None = None
    approval_collected: bool = False
    # The skill names a node may ask for (None: skills are off, so a node may ask for none).
    skills: frozenset[str] | None = None
    # The tool servers (mcp.json) a node may ask for (None: none are configured).
    tool_servers: frozenset[str] | None = None
