"""Which model each role talks to: the Host, the judge, the episode former, evolution's
proposer, and each in-process agent that names its own in agents.toml.

Built once, by the assembly root. Each role names a model (its setting, else `RAVEN_MODEL`);
`RAVEN_MODEL_FALLBACKS` stands behind every one of them. Roles that name the same model share
one provider (one connection pool, closed once); a role whose model has no credentials gets
the honest offline provider, whatever the other roles get.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, get_args

from agents.models.fallback import FallbackProvider
from agents.models.metered import MeteredProvider, UsageRecorder
from agents.models.model_spec import (
    ModelSpec,
    build_model_provider,
    has_credentials,
    parse_model_spec,
)
from agents.models.provider import ClosableProvider, ModelProvider
from agents.registry import AgentEntry, AgentRegistry
from bot.settings import ModelRole, Settings

log = logging.getLogger(__name__)

ROLES: Final[tuple[ModelRole, ...]] = get_args(ModelRole)
# An in-process agent's role is named after it: `agent:research`.
AGENT_ROLE: Final = "agent:"
# Where each role's model is set, for `doctor` and error messages.
ROLE_SETTINGS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "host": "RAVEN_MODEL",
        "judge": "RAVEN_MODEL_JUDGE",
        "episodes": "RAVEN_MODEL_EPISODES",
        "proposer": "RAVEN_MODEL_PROPOSER",
    }
)


@dataclass(frozen=True)
class RoleModel:
    """One role's model: what it names, and the provider its calls go through."""

    role: str
    spec: ModelSpec
    provider: ModelProvider


@dataclass(frozen=True)
class RoleModels:
    """Every role's provider. `shared` holds each distinct model's provider once: the ones
    that hold connections, closed once at shutdown."""

    host: ModelProvider
    judge: ModelProvider
    episodes: ModelProvider
    proposer: ModelProvider
    # In-process agents with a `model` of their own, by agent name.
    agents: Mapping[str, ModelProvider]
    roles: tuple[RoleModel, ...]
    shared: tuple[ModelProvider, ...]
    # Where every role's calls are recorded (None: not metered, as in one-shot commands).
    recorder: UsageRecorder | None = None

    def for_agent(self, entry: AgentEntry) -> ModelProvider:
        """The provider an agent's in-process loop uses: its own model, else the Host's
        (its calls counted as `agent:<name>`)."""
        own = self.agents.get(entry.name)
        return own if own is not None else self.named(f"{AGENT_ROLE}{entry.name}")

    def named(self, role: str) -> ModelProvider:
        """The Host's model, its calls counted under `role` (the clarifier's, the campaign
        decider's, the skill gate's)."""
        host = self.host
        if self.recorder is None or host.offline:
            return host
        inner = host.inner if isinstance(host, MeteredProvider) else host
        return MeteredProvider(inner, role=role, recorder=self.recorder)

    async def aclose(self) -> None:
        """Release every distinct model's connections, each once."""
        for provider in self.shared:
            if isinstance(provider, ClosableProvider):
                try:
                    await provider.aclose()
                except Exception:  # one client's failed close leaves no other open
                    log.exception("closing the model client %s failed", provider.name)


def role_specs(
    settings: Settings, registry: AgentRegistry | None = None
) -> list[tuple[str, ModelSpec]]:
    """Each role and the model it names: the four roles with settings, then each
    in-process agent of `registry` with a `model` of its own (`agent:<name>`)."""
    roles: list[tuple[str, ModelSpec]] = [(role, settings.role_spec(role)) for role in ROLES]
    roles += [
        (f"{AGENT_ROLE}{entry.name}", parse_model_spec(entry.model))
        for entry in (registry or ())
        if entry.backend == "inproc" and entry.model is not None
    ]
    return roles


def build_role_models(
    settings: Settings,
    registry: AgentRegistry | None = None,
    recorder: UsageRecorder | None = None,
) -> RoleModels:
    """Each role's provider from the settings (and the in-process agents of `registry`
    that name a model of their own); with `recorder`, every call is recorded under its role."""
    cache = ModelCache(settings)
    roles = tuple(
        role_model(role, spec, cache, recorder) for role, spec in role_specs(settings, registry)
    )
    by_role = {r.role: r.provider for r in roles}
    return RoleModels(
        host=by_role["host"],
        judge=by_role["judge"],
        episodes=by_role["episodes"],
        proposer=by_role["proposer"],
        agents=MappingProxyType(
            {
                r.role.removeprefix(AGENT_ROLE): r.provider
                for r in roles
                if r.role.startswith(AGENT_ROLE)
            }
        ),
        roles=roles,
        shared=cache.clients(),
        recorder=recorder,
    )


def role_model(
    role: str, spec: ModelSpec, cache: ModelCache, recorder: UsageRecorder | None = None
) -> RoleModel:
    """The one place a role's provider is made: the model's shared provider, with the
    fallback chain behind it, and (with `recorder`) its calls recorded under the role."""
    chain = cache.chain(spec)
    if recorder is None or chain.offline:  # the offline stand-in makes no calls to count
        return RoleModel(role, spec, chain)
    return RoleModel(role, spec, MeteredProvider(chain, role=role, recorder=recorder))


class ModelCache:
    """Each model's provider built once: a model named by two roles, or by one role and as
    a fallback of another, is one client with one connection pool."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._clients: dict[ModelSpec, ModelProvider] = {}
        self._chains: dict[ModelSpec, ModelProvider] = {}
        self._left_out: set[ModelSpec] = set()

    def client(self, spec: ModelSpec) -> ModelProvider:
        """The provider of this one model (offline when it has no credentials)."""
        if spec not in self._clients:
            self._clients[spec] = build_model_provider(spec, self._settings.provider_options)
        return self._clients[spec]

    def chain(self, spec: ModelSpec) -> ModelProvider:
        """This model with `RAVEN_MODEL_FALLBACKS` behind it (less itself); a fallback with
        no key for its API is left out (said in the log): the offline stand-in is never a
        fallback, and an offline model gets none."""
        if spec in self._chains:
            return self._chains[spec]
        primary = self.client(spec)
        fallbacks: list[ModelProvider] = []
        if not primary.offline:
            options = self._settings.provider_options
            for fallback in self._settings.fallback_specs:
                if fallback == spec:
                    continue
                if has_credentials(fallback, options):
                    fallbacks.append(self.client(fallback))
                elif fallback not in self._left_out:  # said once, not once per role
                    self._left_out.add(fallback)
                    log.warning(
                        "fallback model %s has no key for its API; it is left out",
                        fallback.label,
                    )
        chain = FallbackProvider(primary, fallbacks) if fallbacks else primary
        self._chains[spec] = chain
        return chain

    def clients(self) -> tuple[ModelProvider, ...]:
        """Every model's own provider built so far, each once (what is closed at the end)."""
        return tuple(self._clients.values())


def build_provider(settings: Settings) -> ModelProvider:
    """The Host's provider alone (`RAVEN_MODEL` and its fallbacks): for commands that run
    the Host's part only (eval, campaign rounds). Close it with `close_provider`."""
    return role_model("host", settings.model_spec, ModelCache(settings)).provider
