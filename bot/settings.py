"""One `Settings` object read from `.env` and the environment; every knob has a default.

A feature's own knobs are declared in its folder (`host/features/<name>/settings.py`), a chat
adapter's in its own (`bot/<platform>/settings.py`), and read the same way; `unit_settings`
finds them, so they are checked, listed, known and redacted with these. A `SecretStr` field of
any of them is a secret: `secret_names` is the one list every scrubber uses.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dotenv import dotenv_values
from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

import bot
import host.features
from agents.models.model_spec import (
    ModelSpec,
    ModelSpecError,
    ProviderOptions,
    has_credentials,
    parse_model_spec,
)
from core.errors import FieldError, describe_validation_error
from core.secret_names import SecretNames
from core.url_secrets import mask_url, url_credentials
from host.nudges.quiet import parse_quiet_hours

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

CsvList = Annotated[list[str], NoDecode]
# The roles with a model setting of their own (agents name theirs in agents.toml).
ModelRole = Literal["host", "judge", "episodes", "proposer"]
T = TypeVar("T", bound="DataclassInstance")
# Settings named `*_url` may carry credentials (`https://user:token@proxy/`): masked and
# redacted, whichever model declares them.
_URL_SUFFIX = "_url"


class SettingsError(ValueError):
    """Invalid configuration; the message names each offending variable and how to fix it."""


class Settings(BaseSettings):
    """Effective configuration of one raven-bot process."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
    )

    raven_home: Path = Field(
        default=Path("~/.raven-bot"),
        validation_alias="RAVEN_HOME",
        description="Data directory: raven.db, scheduler.db, index/, runs/, workspaces/.",
    )
    log_level: str = Field(
        default="INFO", validation_alias="RAVEN_LOG_LEVEL", description="Python logging level."
    )

    anthropic_api_key: SecretStr | None = Field(
        default=None,
        validation_alias="ANTHROPIC_API_KEY",
        description="Anthropic API key; without it the bot runs on the offline model.",
    )
    anthropic_base_url: str | None = Field(
        default=None,
        validation_alias="ANTHROPIC_BASE_URL",
        description="Point the provider at any Anthropic-compatible server (proxy, local).",
    )
    openai_api_key: SecretStr | None = Field(
        default=None,
        validation_alias="OPENAI_API_KEY",
        description="Key for openai: models (RAVEN_MODEL); a local server at a URL needs none.",
    )
    openai_base_url: str | None = Field(
        default=None,
        validation_alias="OPENAI_BASE_URL",
        description="Default server for openai: models (vLLM, Ollama, llama.cpp, OpenRouter).",
    )
    model: str = Field(
        default="claude-sonnet-5",
        validation_alias=AliasChoices("RAVEN_MODEL", "ANTHROPIC_MODEL"),
        description="Model for the Host, and for each role that names none of its own: <model> "
        "(Anthropic), anthropic:<model>, openai:<model> or openai:<model>@<base URL>.",
    )
    model_judge: str = Field(
        default="",
        validation_alias="RAVEN_MODEL_JUDGE",
        description="Model of the completion judge (is each node's result done?), in "
        "RAVEN_MODEL's forms. Empty: RAVEN_MODEL.",
    )
    model_episodes: str = Field(
        default="",
        validation_alias="RAVEN_MODEL_EPISODES",
        description="Model that forms memory episodes from finished turns, in RAVEN_MODEL's "
        "forms. Empty: RAVEN_MODEL.",
    )
    model_proposer: str = Field(
        default="",
        validation_alias="RAVEN_MODEL_PROPOSER",
        description="Model that proposes harness edits in harness evolution, in RAVEN_MODEL's "
        "forms. Empty: RAVEN_MODEL.",
    )
    model_timeout: float = Field(
        default=120.0, gt=0, validation_alias="RAVEN_MODEL_TIMEOUT", description="Seconds per call."
    )
    model_max_retries: int = Field(
        default=4,
        ge=0,
        le=20,
        validation_alias="RAVEN_MODEL_MAX_RETRIES",
        description="Retries on 429/5xx/connection errors before a model call fails.",
    )
    model_fallbacks: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_MODEL_FALLBACKS",
        description="Models tried in order (comma-separated, in RAVEN_MODEL's forms) when a call "
        "fails on overload, a server error, a timeout or a rate limit, never on a refusal or a "
        "bad request; a turn stays on the model it fell back to. Empty: no fallback.",
    )
    model_stream: bool = Field(
        default=False,
        validation_alias="RAVEN_MODEL_STREAM",
        description="Receive each model reply as a stream: RAVEN_MODEL_TIMEOUT then limits the "
        "silence between tokens, not the whole answer, so a slow local model still writing is "
        "not cut off. Off: whole replies (less work per call; the bot uses replies whole).",
    )
    max_tokens: int = Field(
        default=4096, gt=0, validation_alias="RAVEN_MAX_TOKENS", description="Per-call max tokens."
    )
    max_iterations: int = Field(
        default=40,
        gt=0,
        validation_alias="RAVEN_MAX_ITERATIONS",
        description="Tool-use iterations per turn before a final no-tools answer.",
    )
    history_messages: int = Field(
        default=40,
        ge=0,
        validation_alias="RAVEN_HISTORY_MESSAGES",
        description="How many earlier conversation messages a turn sees.",
    )
    thread_replies: Literal["requester", "anyone", "mentions"] = Field(
        default="requester",
        validation_alias="RAVEN_THREAD_REPLIES",
        description="In a thread, whose messages without a mention are answered: the "
        "requester's, anyone's, or none (mentions only).",
    )

    user_pool: int = Field(
        default=4, gt=0, validation_alias="RAVEN_USER_POOL", description="Concurrent user turns."
    )
    system_pool: int = Field(
        default=2,
        gt=0,
        validation_alias="RAVEN_SYSTEM_POOL",
        description="Concurrent system turns (wake-ups, run reports, notifications).",
    )
    lane_idle_seconds: float = Field(
        default=300.0,
        gt=0,
        validation_alias="RAVEN_LANE_IDLE_SECONDS",
        description="Reap a conversation lane after this many idle seconds.",
    )
    lane_queue_cap: int = Field(
        default=50,
        gt=0,
        validation_alias="RAVEN_LANE_QUEUE_CAP",
        description="Queued turns per conversation before replying 'busy'.",
    )
    shutdown_grace: float = Field(
        default=10.0,
        ge=0,
        validation_alias="RAVEN_SHUTDOWN_GRACE",
        description="Seconds running turns get to finish on shutdown before they are cancelled.",
    )
    memory_embedder: Literal["auto", "semantic", "keyword"] = Field(
        default="auto",
        validation_alias="RAVEN_MEMORY_EMBEDDER",
        description="Recall mode: auto (MiniLM when installed), semantic (require it), keyword.",
    )
    memory_episodes: Literal["model", "rule"] = Field(
        default="model",
        validation_alias="RAVEN_MEMORY_EPISODES",
        description="Episode formation: model (one call per user turn when online) or rule.",
    )
    memory_recall_k: int = Field(
        default=5,
        ge=0,
        le=50,
        validation_alias="RAVEN_MEMORY_RECALL_K",
        description="How many recalled records a turn's context gets (0 turns recall off).",
    )
    memory_budget_chars: int = Field(
        default=2000,
        ge=0,
        validation_alias="RAVEN_MEMORY_BUDGET_CHARS",
        description="Character budget of the recalled-memory block in a turn's context.",
    )
    group_memory: bool = Field(
        default=True,
        validation_alias="RAVEN_GROUP_MEMORY",
        description="Round summaries and agent verdicts after each run, recalled before turns.",
    )
    group_recall_k: int = Field(
        default=2,
        ge=1,
        le=20,
        validation_alias="RAVEN_GROUP_RECALL_K",
        description="Group memory records per library recalled before a turn or a node (k_group).",
    )
    group_verdicts_k: int = Field(
        default=3,
        ge=1,
        le=20,
        validation_alias="RAVEN_GROUP_VERDICTS_K",
        description="Most recent verdicts about its agent a dispatched node gets (k_verdict).",
    )
    group_budget_chars: int = Field(
        default=1500,
        ge=100,
        validation_alias="RAVEN_GROUP_BUDGET_CHARS",
        description="Character budget of a group memory block, for the Host and for a node.",
    )
    web_fetch: bool = Field(
        default=False,
        validation_alias="RAVEN_WEB_FETCH",
        description="Give the research agent web_fetch (public http(s) pages as text).",
    )
    web_search_url: str | None = Field(
        default=None,
        validation_alias="RAVEN_WEB_SEARCH_URL",
        description="A JSON search endpoint for web_search (e.g. SearXNG's /search; unset: none).",
    )
    skills: bool = Field(
        default=True,
        validation_alias="RAVEN_SKILLS",
        description="Skill Forge: select SKILL.md procedures for each request (false: off).",
    )
    skills_gate: bool = Field(
        default=True,
        validation_alias="RAVEN_SKILLS_GATE",
        description="One model call picks the skills from the fused pool (false: inject it all).",
    )
    skills_rewriter: bool = Field(
        default=False,
        validation_alias="RAVEN_SKILLS_REWRITER",
        description="One model call rewrites the request into a skill query (or skips skills).",
    )
    skills_blocked: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_SKILLS_BLOCKED",
        description="Comma-separated skill names never injected.",
    )
    skills_hub_url: str | None = Field(
        default=None,
        validation_alias="RAVEN_SKILLS_HUB_URL",
        description="A remote skill hub's base URL (unset: no hub is queried).",
    )
    skills_hub_token: SecretStr | None = Field(
        default=None,
        validation_alias="RAVEN_SKILLS_HUB_TOKEN",
        description="Bearer token for the skill hub, if it needs one.",
    )
    skills_hub_allow_unscored: bool = Field(
        default=False,
        validation_alias="RAVEN_SKILLS_HUB_ALLOW_UNSCORED",
        description="Admit hub skills that carry no safety verdict (false: they are left out).",
    )
    dedup_ttl_seconds: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        validation_alias="RAVEN_DEDUP_TTL_SECONDS",
        description="How long an inbound event id is remembered to drop redeliveries.",
    )

    graph_concurrency: int = Field(
        default=4,
        gt=0,
        validation_alias="RAVEN_GRAPH_CONCURRENCY",
        description="Nodes running at once per conversation (graphs and delegations together).",
    )
    node_max_attempts: int = Field(
        default=3,
        gt=0,
        validation_alias="RAVEN_NODE_MAX_ATTEMPTS",
        description="Attempts per graph node (the first plus continuations).",
    )
    decision_seconds: float = Field(
        default=1800.0,
        gt=0,
        validation_alias="RAVEN_DECISION_SECONDS",
        description="How long a suspended node waits for a Host decision before it fails.",
    )
    dispatch_budget_per_hour: int = Field(
        default=200,
        gt=0,
        validation_alias="RAVEN_DISPATCH_BUDGET_PER_HOUR",
        description="Graph nodes and delegations one conversation may dispatch per hour.",
    )
    judge_timeout: float | None = Field(
        default=None,
        gt=0,
        validation_alias="RAVEN_JUDGE_TIMEOUT",
        description="Seconds the completion judge may take before the availability fallback. "
        "Unset: RAVEN_MODEL_TIMEOUT bounds each judge call, as it does every model call.",
    )
    unsandboxed: bool = Field(
        default=False,
        validation_alias="RAVEN_UNSANDBOXED",
        description="UNSAFE: run CLI agents and run_shell without the bubblewrap sandbox (they "
        "can then read the bot's secrets, .env and database). Only where bwrap cannot run.",
    )

    # Each chat adapter's own settings (SLACK_*, DISCORD_*, RAVEN_SLACK_*, RAVEN_DISCORD_*)
    # are declared in its folder: bot/<platform>/settings.py (see `adapter_settings`). What
    # every platform shares stays here.
    dm_enabled: bool = Field(
        default=True,
        validation_alias="RAVEN_DM_ENABLED",
        description="Answer direct messages (on every chat platform).",
    )
    attachment_max_bytes: int = Field(
        default=20_000_000,
        ge=0,
        validation_alias="RAVEN_ATTACHMENT_MAX_BYTES",
        description="Largest shared file downloaded into the conversation workspace.",
    )
    thread_context_messages: int = Field(
        default=20,
        ge=0,
        le=200,
        validation_alias="RAVEN_THREAD_CONTEXT_MESSAGES",
        description="Newest thread messages re-read on each mention for context.",
    )

    allowed_users: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_ALLOWED_USERS",
        description="Comma-separated user ids allowed to use the bot (empty: everyone).",
    )
    allowed_channels: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_ALLOWED_CHANNELS",
        description="Comma-separated channel ids the bot answers in (empty: all).",
    )
    admins: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_ADMINS",
        description="Comma-separated admin user ids (may answer any prompt).",
    )
    approvers: CsvList = Field(
        default_factory=list,
        validation_alias="RAVEN_APPROVERS",
        description="Comma-separated user ids allowed to answer approvals besides the requester.",
    )
    prompt_expiry_seconds: float = Field(
        default=1800.0,
        gt=0,
        validation_alias="RAVEN_PROMPT_EXPIRY_SECONDS",
        description="Approvals and clarifications expire (fail closed) after this long.",
    )
    prompt_on_expiry: Literal["deny", "hold"] = Field(
        default="deny",
        validation_alias="RAVEN_PROMPT_ON_EXPIRY",
        description="What an unanswered prompt's deadline does: deny (it expires; approvals "
        "count as denied) or hold (the run keeps waiting, listed in status, until someone "
        "answers or types stop).",
    )
    campaign_report_tolerance: float = Field(
        default=1e-3,
        ge=0,
        le=1,
        validation_alias="RAVEN_CAMPAIGN_REPORT_TOLERANCE",
        description=(
            "How far (relative) a campaign report's number may be from the recorded "
            "measurement it claims (0.001 = 0.1%)."
        ),
    )
    campaign_max_budget_hours: float = Field(
        default=168.0,
        gt=0,
        le=90 * 24,
        validation_alias="RAVEN_CAMPAIGN_MAX_BUDGET_HOURS",
        description="The longest wall-clock budget one campaign may ask for, in hours.",
    )
    campaign_max_per_user: int = Field(
        default=5,
        ge=1,
        validation_alias="RAVEN_CAMPAIGN_MAX_PER_USER",
        description="How many active campaigns one person may have at once (admins: no limit).",
    )
    # Scheduled tasks' own settings (RAVEN_SCHEDULE_*) are declared in their folder:
    # host/features/schedules/settings.py (see `feature_settings`).
    nudge_channel_per_hour: int = Field(
        default=20,
        ge=1,
        validation_alias="RAVEN_NUDGE_CHANNEL_PER_HOUR",
        description="How many posts the bot may make on its own (scheduled tasks, checks, "
        "campaign notices) in one channel per hour (beyond, a post is held back; a notice said "
        "once a day is not said again that day); final reports and failures always post.",
    )
    nudge_owner_per_hour: int = Field(
        default=10,
        ge=1,
        validation_alias="RAVEN_NUDGE_OWNER_PER_HOUR",
        description="How many posts the bot may make on its own about one person's work "
        "per hour (beyond, a post is held back); final reports and failures always post.",
    )
    quiet_hours: str = Field(
        default="",
        validation_alias="RAVEN_QUIET_HOURS",
        description="Daily quiet hours of what the bot says on its own (22:00-07:00), in "
        "the owner's zone (Slack profile; else the task's zone, else RAVEN_TIMEZONE): a "
        "scheduled firing due then runs when they end; a campaign notice (not a final report "
        "or failure) waits for their end. Empty: none.",
    )
    timezone: str = Field(
        default="UTC",
        validation_alias="RAVEN_TIMEZONE",
        description="The time zone of schedules that name none and of quiet hours, for people "
        "whose platform does not say theirs (Discord, the console): an IANA name.",
    )
    scheduler_misfire_grace_seconds: int = Field(
        default=3600,
        gt=0,
        validation_alias="RAVEN_SCHEDULER_MISFIRE_GRACE_SECONDS",
        description="Scheduled jobs overdue (e.g. after downtime) by more than this are dropped.",
    )

    @field_validator("quiet_hours")
    @classmethod
    def _quiet_hours(cls, value: str) -> str:
        parse_quiet_hours(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{value!r} is not a time zone: use an IANA name such as Europe/Paris"
            ) from None
        return value

    @field_validator(
        "allowed_users",
        "allowed_channels",
        "admins",
        "approvers",
        "skills_blocked",
        "model_fallbacks",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("model_fallbacks")
    @classmethod
    def _fallback_specs(cls, value: list[str], info: ValidationInfo) -> list[str]:
        specs: list[ModelSpec] = []
        for entry in value:
            try:
                specs.append(parse_model_spec(entry))
            except ModelSpecError as exc:
                raise ValueError(f"{entry!r}: {exc}") from None
        # `model` is declared first: present here unless it was itself invalid.
        primary = info.data.get("model")
        if primary is not None and parse_model_spec(primary) in specs:
            raise ValueError(f"{primary!r} is RAVEN_MODEL, which is always tried first")
        if len(set(specs)) != len(specs):
            raise ValueError("a model is named twice; name each fallback once")
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("use one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return level

    @field_validator("raven_home")
    @classmethod
    def _absolute_home(cls, value: Path) -> Path:
        # Made absolute once, at start-up: every path under it reaches sandboxes and child
        # processes that run elsewhere, where a relative one means another directory.
        return value if value.expanduser().is_absolute() else Path(os.path.abspath(value))

    @field_validator("model")
    @classmethod
    def _model_spec(cls, value: str) -> str:
        parse_model_spec(value)  # a ModelSpecError (a ValueError) names the accepted forms
        return value.strip()

    @field_validator("model_judge", "model_episodes", "model_proposer")
    @classmethod
    def _role_model_spec(cls, value: str) -> str:
        if value.strip():
            parse_model_spec(value)  # as RAVEN_MODEL: the error names the accepted forms
        return value.strip()

    @field_validator("anthropic_base_url", "openai_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value or None

    @property
    def home(self) -> Path:
        """The data directory with `~` expanded."""
        return self.raven_home.expanduser()

    @property
    def model_spec(self) -> ModelSpec:
        """`RAVEN_MODEL` parsed (checked at start-up)."""
        return parse_model_spec(self.model)

    def role_spec(self, role: ModelRole) -> ModelSpec:
        """The model a role names (`RAVEN_MODEL_JUDGE`, …), or `RAVEN_MODEL` when unset."""
        entry = {
            "host": "",
            "judge": self.model_judge,
            "episodes": self.model_episodes,
            "proposer": self.model_proposer,
        }[role]
        return parse_model_spec(entry) if entry else self.model_spec

    @property
    def fallback_specs(self) -> tuple[ModelSpec, ...]:
        """`RAVEN_MODEL_FALLBACKS` parsed, in order (checked at start-up)."""
        return tuple(parse_model_spec(entry) for entry in self.model_fallbacks)

    @property
    def provider_options(self) -> ProviderOptions:
        """What building any model's provider needs: keys, default URLs, limits."""
        return ProviderOptions(
            anthropic_api_key=_secret(self.anthropic_api_key),
            anthropic_base_url=self.anthropic_base_url,
            openai_api_key=_secret(self.openai_api_key),
            openai_base_url=self.openai_base_url,
            timeout=self.model_timeout,
            max_retries=self.model_max_retries,
            stream=self.model_stream,
        )

    @property
    def offline(self) -> bool:
        """True when the chosen model cannot be called: no key for its API (an
        OpenAI-compatible server at a URL of its own needs none)."""
        return not has_credentials(self.model_spec, self.provider_options)

    def section(self, kind: type[T], *, prefix: str = "", reveal: bool = False) -> T:
        """A part's settings section: a dataclass whose fields are named as here, or as here
        after `prefix` (`SlackConfig.bot_token` is `slack_bot_token`). The part declares what
        it reads and nothing is copied field by field. A field with no setting keeps its
        default (a tunable no one configures) only when `prefix` is given, or when its
        default is built by a feature's own settings model (`feature_settings`: that model
        reads .env and the environment itself); a capability's section must otherwise name
        real settings. `reveal`: secrets as plain strings (an adapter's tokens), else as
        SecretStr."""
        # An adapter's own settings (`adapter_settings`) are found as if they were here.
        owner: dict[str, BaseSettings] = {}
        for model in (self, *read_unit_settings()):
            owner |= {n: model for n in type(model).model_fields if n not in owner}
        values: dict[str, Any] = {}
        missing: list[str] = []
        for f in dataclasses.fields(kind):
            name = next((n for n in (prefix + f.name, f.name) if n in owner), None)
            if name is None and _own_settings(f):
                continue
            if name is None:
                missing.append(f.name)
                continue
            value = getattr(owner[name], name)
            values[f.name] = (
                value.get_secret_value() if reveal and isinstance(value, SecretStr) else value
            )
        if missing and not prefix:
            raise TypeError(f"{kind.__name__} names settings that do not exist: {missing}")
        return kind(**values)

    def is_set(self, variable: str) -> bool:
        """True when the setting read from environment variable `variable` has a value."""
        for model in (self, *read_unit_settings()):
            for name, field in type(model).model_fields.items():
                alias = field.validation_alias
                names = alias.choices if isinstance(alias, AliasChoices) else [alias]
                if variable in names:
                    value = getattr(model, name)
                    return value is not None and value != ""
        raise KeyError(f"no setting reads {variable}")

    def secret_values(self) -> list[str]:
        """Every secret this configuration holds, for the log redactor: the values of the
        variables `secret_names` lists, and credentials inside URL settings."""
        secrets: list[str] = []
        for model in (self, *read_unit_settings()):
            for name, field in type(model).model_fields.items():
                value = getattr(model, name)
                if is_secret_field(field):  # the fields `secret_names` names, so the two agree
                    if isinstance(value, SecretStr) and value.get_secret_value():
                        secrets.append(value.get_secret_value())
                elif name.endswith(_URL_SUFFIX) and isinstance(value, str):
                    secrets += url_credentials(value)
                elif name in _MODEL_ENTRY_FIELDS:
                    for entry in _model_entries(value):
                        secrets += url_credentials(parse_model_spec(entry).base_url)
        return secrets

    def masked(self) -> dict[str, str]:
        """Effective configuration by environment variable name, secrets masked."""
        out: dict[str, str] = {}
        fields: list[tuple[BaseSettings, str, FieldInfo]] = [
            (self, n, f) for n, f in type(self).model_fields.items()
        ]
        for model in read_unit_settings():
            fields += [(model, n, f) for n, f in type(model).model_fields.items()]
        for model, name, field in fields:
            alias = field.validation_alias
            env = alias.choices[0] if isinstance(alias, AliasChoices) else alias
            value = getattr(model, name)
            if isinstance(value, SecretStr):
                shown = mask_secret(value.get_secret_value())
            elif name.endswith(_URL_SUFFIX) and isinstance(value, str):
                shown = mask_url(value)
            elif name in _MODEL_ENTRY_FIELDS:
                shown = ",".join(_masked_entry(e) for e in _model_entries(value)) or "(empty)"
            elif value is None:
                shown = "(unset)"
            elif isinstance(value, list):
                shown = ",".join(value) or "(empty)"
            else:
                shown = str(value)
            out[str(env)] = shown
        return out


# Settings holding model entries, whose `@<base URL>` may carry credentials.
_MODEL_ENTRY_FIELDS = frozenset(
    {"model", "model_judge", "model_episodes", "model_proposer", "model_fallbacks"}
)


def _model_entries(value: object) -> list[str]:
    """A model setting's entries (one, or a fallback list), empty ones left out."""
    entries = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [str(e) for e in entries if e]


def _masked_entry(entry: str) -> str:
    """A model entry with its URL's credentials masked (as `doctor` shows it)."""
    url = parse_model_spec(entry).base_url
    return entry.replace(url, mask_url(url)) if url else entry


def known_variables() -> list[str]:
    """Every environment variable name some setting reads."""
    names: list[str] = []
    models: tuple[type[BaseSettings], ...] = (Settings, *unit_settings())
    for model in models:
        for field in model.model_fields.values():
            names += field_variables(field)
    return names


def secret_names() -> list[str]:
    """Every environment variable that holds a secret: those read by a `SecretStr` field of
    any settings model (the model key, the skill hub's token, each adapter's and feature's
    own). The one list the log redactor (through `secret_values`) and the child-process
    environment scrubbers (through `declared_secret_names`) both use, so a secret an
    adapter or feature declares is scrubbed everywhere without another edit."""
    names: list[str] = []
    models: tuple[type[BaseSettings], ...] = (Settings, *unit_settings())
    for model in models:
        for field in model.model_fields.values():
            if is_secret_field(field):
                names += field_variables(field)
    return names


def declared_secret_names() -> SecretNames:
    """`secret_names` as the value the assembly root hands every scrubber of a child's
    environment (agent commands, ACP agents, checks, campaign rounds)."""
    return SecretNames.of(secret_names())


def field_variables(field: FieldInfo) -> list[str]:
    """The environment variable names a settings field reads."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [] if alias is None else [str(alias)]


def is_secret_field(field: FieldInfo) -> bool:
    """Is the field declared as a secret (`SecretStr`, optional or not)?"""
    kind = field.annotation
    return kind is SecretStr or SecretStr in get_args(kind)


def feature_settings() -> tuple[type[BaseSettings], ...]:
    """Every feature's own settings model: the `BaseSettings` classes of each
    `host/features/<name>/settings.py`, found by folder so a feature with a setting adds no
    line here (those modules import pydantic only: this runs before each command)."""
    return _declared_under(host.features)


def adapter_settings() -> tuple[type[BaseSettings], ...]:
    """Every chat adapter's own settings model: those of each `bot/<platform>/settings.py`,
    found by folder so a new adapter adds no line here. Imported by name, so no module of
    `bot/` other than the adapter's own imports it (the import contracts hold)."""
    return _declared_under(bot)


def unit_settings() -> tuple[type[BaseSettings], ...]:
    """The settings models of every feature and adapter, besides `Settings` itself."""
    return (*feature_settings(), *adapter_settings())


def read_feature_settings() -> tuple[BaseSettings, ...]:
    """Each feature's own settings as read now (`load_settings` checked them first)."""
    return tuple(model() for model in feature_settings())


def read_unit_settings() -> tuple[BaseSettings, ...]:
    """Each feature's and adapter's own settings as read now (`load_settings` checked them)."""
    return tuple(model() for model in unit_settings())


def _declared_under(parent: ModuleType) -> tuple[type[BaseSettings], ...]:
    """The `BaseSettings` classes of `<parent>/<package>/settings.py`. The file is looked for
    before anything is imported, so a package without settings is not imported at all."""
    models: list[type[BaseSettings]] = []
    for package in pkgutil.iter_modules(parent.__path__, f"{parent.__name__}."):
        folder = getattr(package.module_finder, "path", None)
        short = package.name.rpartition(".")[2]
        if not package.ispkg or folder is None:
            continue
        if not (Path(folder) / short / "settings.py").is_file():
            continue
        module = importlib.import_module(f"{package.name}.settings")
        models += [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, BaseSettings)
            and value.__module__ == module.__name__
        ]
    return tuple(models)


def _own_settings(f: dataclasses.Field[Any]) -> bool:
    """Is this section field a feature's own settings, built by its model from .env?"""
    factory = f.default_factory
    return isinstance(factory, type) and issubclass(factory, BaseSettings)


def unknown_variables(
    environ: Mapping[str, str], env_file: Path | None = Path(".env")
) -> list[str]:
    """One warning per variable that looks meant for raven-bot but no setting reads.

    `RAVEN_*` names in the environment or `.env` count, and in `.env` also near misses of
    a real name (`SLACK_BOT_TOKN`); each warning names the closest real setting.
    """
    known = known_variables()
    known_upper = {k.upper() for k in known}
    found: dict[str, str] = {}
    for name in environ:
        if name.upper().startswith("RAVEN_") and name.upper() not in known_upper:
            found.setdefault(name, "the environment")
    if env_file is not None and env_file.is_file():
        try:
            keys = list(dotenv_values(env_file, encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            keys = []
        for name in keys:
            upper = name.upper()
            if upper in known_upper:
                continue
            near = difflib.get_close_matches(upper, known, n=1, cutoff=0.85)
            if upper.startswith("RAVEN_") or near:
                found[name] = str(env_file)
    warnings = []
    for name, where in found.items():
        near = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}?" if near else "`.env.example` lists every setting."
        warnings.append(f"{name} (in {where}) is not a setting and is ignored; {hint}")
    return warnings


def mask_secret(secret: str) -> str:
    """Show only enough of a secret to recognise it."""
    if not secret:
        return "(unset)"
    return f"{secret[:4]}…({len(secret)} chars)" if len(secret) > 8 else "****"


def _secret(value: SecretStr | None) -> str | None:
    """A secret's text, None when unset or empty."""
    return value.get_secret_value() or None if value is not None else None


def load_settings(**overrides: Any) -> Settings:
    """Read settings, turning validation errors into one message naming each variable."""
    try:
        settings = Settings(**overrides)
        # Each feature's and adapter's own settings are checked now too.
        read_unit_settings()
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc)) from None
    except UnicodeDecodeError as exc:
        # Only `.env` is decoded here (the environment is already text).
        raise SettingsError(
            f"Invalid configuration: .env is not UTF-8 text (byte {exc.start}); save it as UTF-8."
        ) from None
    return settings


def describe_errors(exc: ValidationError) -> str:
    """Render pydantic errors as `VARIABLE: problem (got 'value')` lines."""
    lines = describe_validation_error(exc, label=_env_name, show_input=True)
    head = "Invalid configuration (fix these in .env or the environment):"
    return "\n".join([head, *(f"  {line}" for line in lines)])


def _env_name(err: FieldError) -> str:
    """The environment variable a settings field is read from."""
    name = str(err.loc[0]) if err.loc else "?"
    field = Settings.model_fields.get(name)
    if field is None or field.validation_alias is None:
        return name
    alias = field.validation_alias
    return str(alias.choices[0] if isinstance(alias, AliasChoices) else alias)
