"""Capability, the third group: each node's agent can do what the node asks — keep a stateful
instance, and read local files when the node passes paths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from host.graph.admission.errors import AdmissionError
from host.graph.admission.grammar import Placeholder
from host.graph.model import (
    AdmissionContext,
    AgentCapabilities,
    GraphSubmission,
    NodeSpec,
    TextInput,
)


def check_capability(
    submission: GraphSubmission,
    placeholders: Mapping[str, list[Placeholder]],
    ctx: AdmissionContext,
) -> None:
    """Per node, in order: text-input paths, instance ownership, then file access."""
    owners: dict[str, tuple[str, str]] = {}  # instance -> (agent, where it was claimed)
    for prior in ctx.prior_nodes.values():
        if prior.instance is not None:
            owners.setdefault(prior.instance, (prior.agent, f"earlier node `{prior.id}`"))
    for spec in submission.nodes:
        agent = ctx.agents.get(spec.agent)
        _check_text_input_paths(spec, placeholders[spec.id])
        if spec.instance is not None:
            _check_instance(spec, spec.instance, agent, owners, ctx)
        if agent is not None and not agent.file_capable:
            _check_no_path_placeholders(spec, placeholders[spec.id])
        if spec.skills:
            _check_skills(spec, spec.skills, ctx.skills)
            # A command agent's task is the command, run byte for byte: nothing is added.
            if agent is not None and getattr(agent, "runs_commands", False):
                raise AdmissionError(
                    "capability",
                    f"agent `{spec.agent}` runs commands and takes no skills",
                    node=spec.id,
                    field="skills",
                    repair="leave the skills out of this node",
                )
        if spec.mcp:
            _check_tool_servers(spec, spec.mcp, agent, ctx.tool_servers)


# Backends whose agents can call the team's tools: the in-process loop, and ACP agents (given
# the tools as an MCP server of the bot's). A CLI or API agent has no way to take them.
_TOOL_BACKENDS = frozenset({"inproc", "acp"})


def _check_tool_servers(
    spec: NodeSpec,
    asked: Sequence[str],
    agent: AgentCapabilities | None,
    known: frozenset[str] | None,
) -> None:
    """A node's `mcp` override names configured servers, for an agent that can use them."""
    if not known:
        raise AdmissionError(
            "capability",
            "the node asks for tool servers, but none are configured here",
            node=spec.id,
            field="mcp",
            repair="leave `mcp` out (or add the servers to RAVEN_HOME/mcp.json)",
        )
    unknown = [name for name in asked if name not in known]
    if unknown:
        names = ", ".join(f"`{n}`" for n in unknown)
        some = ", ".join(f"`{n}`" for n in sorted(known))
        raise AdmissionError(
            "capability",
            f"no tool server named {names}",
            node=spec.id,
            field="mcp",
            repair=f"use servers from mcp.json ({some}; `raven-bot mcp list` shows them)",
        )
    backend = getattr(agent, "backend", "inproc")
    if agent is not None and (
        getattr(agent, "runs_commands", False) or backend not in _TOOL_BACKENDS
    ):
        raise AdmissionError(
            "capability",
            f"agent `{spec.agent}` cannot call tools from a tool server",
            node=spec.id,
            field="mcp",
            repair="leave `mcp` out of this node, or give it to an in-process or ACP agent "
            "(e.g. `code`, `research`)",
        )


def _check_skills(spec: NodeSpec, asked: Sequence[str], known: frozenset[str] | None) -> None:
    """A node's skills override names skills that exist (and skills are on)."""
    if known is None:
        raise AdmissionError(
            "capability",
            "the node asks for skills, but skills are off here",
            node=spec.id,
            field="skills",
            repair="leave the skills out (or turn skills on: RAVEN_SKILLS=true)",
        )
    unknown = [name for name in asked if name not in known]
    if unknown:
        names = ", ".join(f"`{n}`" for n in unknown)
        some = ", ".join(f"`{n}`" for n in sorted(known)[:12]) or "none"
        raise AdmissionError(
            "capability",
            f"no skill named {names}",
            node=spec.id,
            field="skills",
            repair=f"use skills that exist ({some}; `raven-bot skills list` shows them all)",
        )


def _check_text_input_paths(spec: NodeSpec, placeholders: Sequence[Placeholder]) -> None:
    """A text input has no path, so `{{inputs.k.path}}` cannot name one."""
    for ph in placeholders:
        binding = spec.inputs.get(ph.target)
        if ph.kind == "input_path" and isinstance(binding, TextInput):
            raise AdmissionError(
                "capability",
                f"`{ph.raw}` asks for the path of text input `{ph.target}`, "
                "but a text input has no path",
                node=spec.id,
                field="template",
                repair=f"use `{{{{inputs.{ph.target}}}}}` to insert the text",
            )


def _check_instance(
    spec: NodeSpec,
    instance: str,
    agent: AgentCapabilities | None,
    owners: dict[str, tuple[str, str]],
    ctx: AdmissionContext,
) -> None:
    """An instance needs a stateful agent and belongs to the first agent that claims it."""
    if agent is not None and not agent.stateful:
        stateful = sorted(n for n, a in ctx.agents.items() if a.stateful and a.enabled)
        raise AdmissionError(
            "capability",
            f"instance `{instance}` needs a stateful agent, but `{spec.agent}` is stateless",
            node=spec.id,
            field="instance",
            repair="remove `instance`, or use a stateful agent ("
            + (", ".join(f"`{n}`" for n in stateful) or "none available")
            + ")",
        )
    owner = owners.setdefault(instance, (spec.agent, f"node `{spec.id}`"))
    if owner[0] != spec.agent:
        raise AdmissionError(
            "capability",
            f"instance `{instance}` belongs to agent `{owner[0]}` ({owner[1]}), "
            f"but this node uses agent `{spec.agent}`",
            node=spec.id,
            field="instance",
            repair=f"use a different instance handle for `{spec.agent}`, or run this "
            f"node on `{owner[0]}`",
        )


def _check_no_path_placeholders(spec: NodeSpec, placeholders: Sequence[Placeholder]) -> None:
    """An agent without local-file access can only be given content, not paths."""
    for ph in placeholders:
        if ph.is_path:
            raise AdmissionError(
                "capability",
                f"agent `{spec.agent}` has no local-file access, so it cannot use the "
                f"path placeholder `{ph.raw}`",
                node=spec.id,
                field="template",
                repair=f"use the content form `{_content_form(ph)}` instead, or choose a "
                "file-capable agent",
            )


def _content_form(ph: Placeholder) -> str:
    if ph.kind == "output_path":
        return f"{{{{{ph.target}.output}}}}"
    if ph.kind == "input_path":
        return f"{{{{inputs.{ph.target}}}}}"
    return f"{{{{ref:{ph.target}}}}}"
