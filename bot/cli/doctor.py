"""`raven-bot doctor`: effective configuration (secrets masked) and one check per dependency."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Final, TextIO

from agents.backends import AcpProcesses
from agents.backends.acp.process import AgentStartError
from agents.models.model_spec import (
    ModelSpec,
    ProviderOptions,
    build_model_provider,
    has_credentials,
)
from agents.models.provider import ClosableProvider
from agents.registry import (
    AgentEntry,
    AgentRegistry,
    RegistryError,
    default_entries,
    load_registry,
)
from agents.sandbox import INSTALL_HINT, Sandbox, shown_by
from bot.app import FEATURES, build_sandbox
from bot.channels import CHANNELS, configured_channels
from bot.home import HomeError, check_database
from bot.logging_setup import log_file
from bot.models import AGENT_ROLE, ROLE_SETTINGS, role_specs
from bot.schema import all_migrations
from bot.settings import Settings, declared_secret_names, unknown_variables
from bot.web.serving import WebSection
from core.serving_lock import serving_holder
from core.store import Store
from core.url_secrets import url_credentials
from host.features.feature import DoctorCheck, DoctorParts, FeatureKind
from host.nudges.policy import NudgeLimits, describe_policy
from host.nudges.quiet import parse_quiet_hours
from host.runtime.job_store_health import damaged_copies, job_store_damage
from memory.embeddings import semantic_unavailable_reason

# A feature's finding and the bot's own are one kind of line.
Check = DoctorCheck


LIBRARIES = {
    "slack_bolt": "slack-bolt",
    "slack_sdk": "slack-sdk",
    "discord": "discord.py",
    "apscheduler": "APScheduler",
    "sqlalchemy": "SQLAlchemy",
    "aiosqlite": "aiosqlite",
    "anthropic": "anthropic",
    "networkx": "networkx",
    "rank_bm25": "rank-bm25",
    "faiss": "faiss-cpu",
    "numpy": "numpy",
}


async def _check_data_dir(settings: Settings) -> Check:
    home = settings.home
    if home.exists() and not home.is_dir():
        return Check("data dir", "fail", f"{home}: not a directory (a file); set RAVEN_HOME")
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / ".doctor-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return Check("data dir", "fail", f"{home}: not writable ({exc.strerror}); set RAVEN_HOME")
    return Check("data dir", "ok", f"{home} (writable); logs: {log_file(home)}")


async def _check_serving(settings: Settings) -> Check:
    """Whether a bot serves this data dir (`run` and `chat` refuse to start beside one)."""
    holder = serving_holder(settings.home)
    if holder is None:
        return Check("serving", "ok", "not running")
    return Check("serving", "ok", holder.describe())


async def _check_database(settings: Settings) -> Check:
    store = Store(settings.home / "raven.db", all_migrations())
    try:
        # Synchronous probe first: a failed async open can leave a thread that hangs the exit.
        check_database(store.path, settings.home)
    except HomeError as exc:
        return Check("database", "fail", str(exc))
    try:
        await store.open()
        versions = await store.schema_versions()
    except (OSError, sqlite3.Error) as exc:
        return Check("database", "fail", f"{store.path}: {exc}")
    finally:
        await store.close()
    schema = ", ".join(f"{package} v{version}" for package, version in versions.items())
    return Check("database", "ok", f"{store.path} (WAL, schema: {schema})")


async def _check_scheduler_store(settings: Settings) -> Check:
    """scheduler.db read (read-only) as the next start reads it: sound, damaged (the start
    rebuilds it, so a warning), or rebuilt after damage (its damaged copy still kept)."""
    path = settings.home / "scheduler.db"
    try:
        damage = await asyncio.to_thread(job_store_damage, path)
    except sqlite3.Error as exc:
        return Check("scheduler store", "warn", f"{path}: could not be read ({exc})")
    if damage is not None:
        return Check(
            "scheduler store",
            "warn",
            f"{path}: damaged ({damage}); the next start moves it aside and rebuilds it "
            "from raven.db",
        )
    copies = await asyncio.to_thread(damaged_copies, path)
    if copies:
        return Check(
            "scheduler store",
            "warn",
            f"{path}: rebuilt from raven.db after damage; the damaged file is kept as "
            f"{copies[0].name}{f' (and {len(copies) - 1} older)' if copies[1:] else ''}: "
            "delete it once looked at",
        )
    state = "sound" if path.exists() else "not made yet (the first start makes it)"
    return Check(
        "scheduler store",
        "ok",
        f"{path} {state} (prompt expiry, wake-up and scheduled-task jobs, rebuilt from "
        "raven.db if damaged)",
    )


async def _registry(settings: Settings) -> tuple[Sandbox, AgentRegistry]:
    """The sandbox and the registry as the bot builds them (`RegistryError` if invalid)."""
    sandbox = await asyncio.to_thread(build_sandbox, settings)
    path = settings.home / "agents.toml"
    extra = [entry for kind in FEATURES for entry in kind.agents(settings.home)]
    visible = shown_by(sandbox, os.environ)
    names = declared_secret_names()
    return sandbox, load_registry(path, visible=visible, extra=extra, secret_names=names)


async def _check_agents(settings: Settings) -> Check:
    """The registry as the bot builds it (the sandbox's view included): which agents are
    off, and why."""
    path = settings.home / "agents.toml"
    try:
        _, registry = await _registry(settings)
    except RegistryError as exc:
        return Check("agents", "fail", str(exc).replace("\n", "; "))
    entries = list(registry.entries())
    off = [e for e in entries if not e.enabled]
    source = str(path) if path.exists() else "defaults (no agents.toml)"
    detail = f"{len(entries) - len(off)}/{len(entries)} agents enabled, from {source}"
    if off:
        detail += "; off: " + "; ".join(f"{e.name}: {e.disabled_reason}" for e in off)
    return Check("agents", "warn" if any(map(_unexpectedly_off, off)) else "ok", detail)


def _unexpectedly_off(entry: AgentEntry) -> bool:
    """Off for a reason worth a warning: not switched off in agents.toml, and not a preset
    whose program is simply not installed."""
    if entry.disabled_reason == "disabled in config" or entry.backend == "feature":
        return False  # a capability's own agent is off exactly when it is not configured
    presets = {e.name for e in default_entries() if e.backend in ("cli", "acp")}
    missing = entry.backend in ("cli", "acp") and shutil.which(entry.command[0]) is None
    return not (entry.name in presets and missing)


async def _check_acp_agents(settings: Settings) -> Check:
    """Each coding agent over ACP: found (and the version it reports at `initialize`, in the
    sandbox), or missing and how to install it."""
    try:
        sandbox, registry = await _registry(settings)
    except RegistryError:
        return Check("acp agents", "ok", "see the agents check")
    entries = [e for e in registry.entries() if e.backend == "acp"]
    lines = []
    for entry in entries:
        if not entry.enabled:
            lines.append(f"{entry.name}: missing ({entry.disabled_reason})")
            continue
        lines.append(f"{entry.name}: {await _acp_version(entry, sandbox)}")
    return Check("acp agents", "ok", "; ".join(lines) or "none configured")


async def _acp_version(entry: AgentEntry, sandbox: Sandbox) -> str:
    """`found, NAME VERSION` as the agent says at `initialize`, or why it did not answer."""
    pool = AcpProcesses(sandbox, secret_names=declared_secret_names())
    with tempfile.TemporaryDirectory(prefix="raven-doctor-") as where:
        try:
            process = await pool.acquire(entry, Path(where) / "workspace")
        except AgentStartError as exc:
            return f"found, but it did not start: {exc}"
        finally:
            await pool.close()
    info = process.info
    return f"found, {info.name} {info.version}".rstrip()


async def _check_features(
    settings: Settings, features: Sequence[FeatureKind] = FEATURES
) -> list[Check]:
    """Each capability's own checks of its files and services (`Feature.doctor`), with its
    settings as `run` reads them."""
    sandbox = functools.cache(functools.partial(build_sandbox, settings))
    parts = DoctorParts(
        home=settings.home,
        cwd=Path.cwd(),
        environ=os.environ,
        secret_values=settings.secret_values(),
        secret_names=declared_secret_names(),
        sandbox=sandbox,
    )
    checks: list[Check] = []
    for kind in features:
        try:
            checks += await kind.doctor(parts, settings.section(kind.Section))
        except Exception as exc:  # one capability's broken check hides no other's
            name = getattr(kind, "__name__", "feature").removesuffix("Feature").lower()
            checks.append(Check(name, "fail", repr(exc)))
    return checks


async def _check_settings(settings: Settings) -> Check:
    unknown = unknown_variables(os.environ)
    if unknown:
        return Check("settings", "warn", " ".join(unknown))
    return Check("settings", "ok", "no unknown RAVEN_* variables")


async def _check_libraries(settings: Settings) -> Check:
    missing = [pkg for mod, pkg in LIBRARIES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        return Check("libraries", "fail", f"missing: {', '.join(missing)}; run `make install`")
    return Check("libraries", "ok", f"{len(LIBRARIES)} required libraries importable")


async def _check_embedder(settings: Settings) -> Check:
    """Which recall mode memory runs in (RAVEN_MEMORY_EMBEDDER), and why."""
    reason = semantic_unavailable_reason()
    mode = settings.memory_embedder
    if mode == "keyword":
        return Check("embedder", "ok", "keyword-only recall (RAVEN_MEMORY_EMBEDDER=keyword)")
    if reason is None:
        return Check("embedder", "ok", "hybrid recall: all-MiniLM-L6-v2 (local, offline) + BM25")
    if mode == "semantic":
        return Check("embedder", "fail", f"RAVEN_MEMORY_EMBEDDER=semantic, but {reason}")
    return Check("embedder", "warn", f"keyword-only recall: {reason}")


# What a role does when its model cannot be called (no credentials): `doctor` says so.
OFFLINE_ROLES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "judge": "no model checks nodes' results: a node counts as done when it finishes",
        "episodes": "memory forms episodes by rule instead",
        "proposer": "harness evolution refuses to start",
    }
)
OFFLINE_AGENT: Final = "the agent says it needs a model and does not run"
# Each distinct model's answer in one `doctor` run: (failed, what it said).
Answers = dict[ModelSpec, tuple[bool, str]]


async def _check_models(settings: Settings) -> list[Check]:
    """One line per role (the Host, the judge, the episode former, the proposer, each
    in-process agent with a model of its own): its model and whether it answers, each
    distinct model called once."""
    answers: Answers = {}
    checks = [await _check_model(settings, answers)]
    for role, spec in role_specs(settings, _agents_with_models(settings)):
        if role != "host":
            checks.append(await _check_role(settings, role, spec, answers))
    return checks


def _agents_with_models(settings: Settings) -> AgentRegistry | None:
    """The registry as configured (no sandbox needed: only in-process agents name a model);
    None when it is invalid (the agents check says why)."""
    extra = [entry for kind in FEATURES for entry in kind.agents(settings.home)]
    try:
        return load_registry(
            settings.home / "agents.toml", extra=extra, secret_names=declared_secret_names()
        )
    except RegistryError:
        return None


async def _check_role(settings: Settings, role: str, spec: ModelSpec, answers: Answers) -> Check:
    """A role's line: its model (never its URL: it may hold credentials), where it is set,
    and whether it answers (offline: what the role does without it)."""
    agent = role.removeprefix(AGENT_ROLE) if role.startswith(AGENT_ROLE) else None
    name = f"model agent {agent}" if agent else f"model {role}"
    setting = f"agents.toml [agents.{agent}] model" if agent else ROLE_SETTINGS[role]
    source = setting if agent or settings.is_set(setting) else "RAVEN_MODEL, as the Host"
    options = _check_options(settings)
    if not has_credentials(spec, options):
        does = OFFLINE_AGENT if agent else OFFLINE_ROLES[role]
        return Check(
            name,
            "warn",
            f"offline: {spec.label} (from {source}) has no {_needed(spec)}; {does}",
        )
    fresh = spec not in answers
    if fresh:
        answers[spec] = await _answers(settings, spec, options)
    failed, detail = answers[spec]
    if not failed:
        return Check(name, "ok", f"{spec.label} answers (from {source})")
    # A failure is told in full once; the next role on that model points back to it.
    said = f"{detail} (from {source})" if fresh else f"{spec.label} (from {source}): see above"
    return Check(name, "fail", said)


def _needed(spec: ModelSpec) -> str:
    """What a model without credentials lacks."""
    if spec.provider == "anthropic":
        return "ANTHROPIC_API_KEY"
    return "OPENAI_API_KEY, OPENAI_BASE_URL or a URL in its entry"


def _check_options(settings: Settings) -> ProviderOptions:
    """The provider options for a check: a short limit, one retry."""
    return dataclasses.replace(
        settings.provider_options, timeout=min(settings.model_timeout, 20.0), max_retries=1
    )


async def _check_model(settings: Settings, answers: Answers | None = None) -> Check:
    """The Host's model (RAVEN_MODEL) and each fallback; `answers` keeps what each said."""
    said: Answers = {} if answers is None else answers
    spec = settings.model_spec
    if settings.offline:
        need = (
            "ANTHROPIC_API_KEY"
            if spec.provider == "anthropic"
            else "OPENAI_API_KEY, OPENAI_BASE_URL or a URL in RAVEN_MODEL"
        )
        return Check(
            "model",
            "warn",
            f"offline mode ({spec.label} has no {need}): explicit plans, approvals and the "
            "shell agent work; free-form answers and model-backed agents need a model",
        )
    options = _check_options(settings)
    said[spec] = failed, detail = await _answers(settings, spec, options)
    if failed:
        return Check("model", "fail", detail)
    # Each fallback is checked too: a chain whose second model is broken fails when needed.
    notes, degraded = [detail], False
    for fallback in settings.fallback_specs:
        if not has_credentials(fallback, options):
            notes.append(f"fallback {fallback.label}: no key, left out")
            degraded = True
            continue
        said[fallback] = broken, text = await _answers(settings, fallback, options)
        notes.append(f"fallback {text}" if broken else f"fallback {fallback.label} answers")
        degraded = degraded or broken
    return Check("model", "warn" if degraded else "ok", "; ".join(notes))


async def _answers(
    settings: Settings, spec: ModelSpec, options: ProviderOptions
) -> tuple[bool, str]:
    """(failed, what it said): one model's own check, credentials masked."""
    provider = build_model_provider(spec, options)
    try:
        check = getattr(provider, "check", None)
        detail = await check() if check is not None else f"{provider.name} configured"
    except Exception as exc:
        # Provider errors name the URL with credentials masked; mask again in case not.
        return True, f"{spec.label}: {_masked(settings, str(exc), spec)}"
    finally:
        if isinstance(provider, ClosableProvider):
            await provider.aclose()
    return False, detail


def _masked(settings: Settings, text: str, spec: ModelSpec) -> str:
    """The text with any credentials the model's URLs embed masked."""
    for url in (spec.base_url, settings.anthropic_base_url, settings.openai_base_url):
        for secret in url_credentials(url):
            text = text.replace(secret, "****")
    return text


async def _check_platforms(settings: Settings) -> list[Check]:
    """One check per registered chat platform (its token, identity, permissions)."""
    checks = []
    for spec in CHANNELS:
        ok, detail = await spec.check(settings)
        checks.append(Check(spec.name, "ok" if ok else "fail", detail))
    return checks


async def _check_channels(settings: Settings) -> Check:
    configured = [spec.name for spec in configured_channels(settings)]
    if not configured:
        # Named from the registry, so a new platform shows here without an edit.
        tokens = " or ".join(spec.variable for spec in CHANNELS)
        return Check(
            "channels", "ok", f"none configured ({tokens}): `raven-bot run` starts the console"
        )
    return Check("channels", "ok", f"configured: {', '.join(configured)}")


async def _check_sandbox(settings: Settings) -> Check:
    sandbox = await asyncio.to_thread(build_sandbox, settings)
    if sandbox.kind == "bwrap":
        return Check("sandbox", "ok", sandbox.description)
    if sandbox.kind == "unsandboxed":
        return Check("sandbox", "warn", sandbox.description)
    # The bot still serves; only CLI agents and run_shell refuse, each with this hint.
    return Check("sandbox", "warn", f"{sandbox.description}. {INSTALL_HINT}")


THREAD_REPLIES = {
    "requester": "in a thread, only its requester's follow-ups need no mention; others' "
    "chatter gets nothing",
    "anyone": "in a thread the bot is part of, everyone's messages are answered",
    "mentions": "in a thread, only messages that mention the bot are answered",
}


async def _check_thread_replies(settings: Settings) -> Check:
    """Who the bot answers in its threads without a mention."""
    mode = settings.thread_replies
    return Check("thread replies", "ok", f"RAVEN_THREAD_REPLIES={mode}: {THREAD_REPLIES[mode]}")


async def _check_nudges(settings: Settings) -> Check:
    """The nudge policy in force over what the bot says on its own."""
    limits = NudgeLimits(settings.nudge_channel_per_hour, settings.nudge_owner_per_hour)
    quiet = parse_quiet_hours(settings.quiet_hours)
    return Check("nudges", "ok", describe_policy(limits, quiet, settings.timezone))


async def _check_web_viewer(settings: Settings) -> Check:
    """Whether the read-only viewer is served, and where its posted links point."""
    web = settings.section(WebSection)
    if not web.enabled:
        return Check("web viewer", "ok", "off (RAVEN_WEB_PORT unset): no viewer, no links")
    where = f"serves on {web.web_host}:{web.web_port}; posted links open at "
    where += f"{web.link_base} for {web.web_link_hours:g} h"
    if web.web_host not in ("127.0.0.1", "localhost", "::1") and not web.web_public_url:
        return Check(
            "web viewer",
            "warn",
            f"{where}, over plain HTTP beyond this machine: put a reverse proxy with TLS in "
            "front and set RAVEN_WEB_PUBLIC_URL",
        )
    return Check("web viewer", "ok", where)


CHECKS: tuple[Callable[[Settings], Awaitable[Check | list[Check]]], ...] = (
    _check_data_dir,
    _check_serving,
    _check_database,
    _check_scheduler_store,
    _check_agents,
    _check_acp_agents,
    _check_features,
    _check_settings,
    _check_thread_replies,
    _check_nudges,
    _check_web_viewer,
    _check_libraries,
    _check_embedder,
    _check_models,
    _check_platforms,
    _check_channels,
    _check_sandbox,
)


async def run_checks(settings: Settings) -> list[Check]:
    """Run every check in order (later ones may rely on the data dir existing)."""
    results = []
    for check in CHECKS:
        try:
            outcome = await check(settings)
            results += outcome if isinstance(outcome, list) else [outcome]
        except Exception as exc:
            results.append(Check(check.__name__.removeprefix("_check_"), "fail", repr(exc)))
    return results


def doctor(settings: Settings, out: TextIO) -> int:
    """Print configuration and checks; exit code 1 when a required check failed."""
    out.write("raven-bot doctor\n\nEffective configuration (secrets masked):\n")
    for name, value in settings.masked().items():
        out.write(f"  {name:<30} {value}\n")
    out.write("\nChecks:\n")
    checks = asyncio.run(run_checks(settings))
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    for check in checks:
        out.write(f"  [{marks[check.level]}] {check.name:<16} {check.detail}\n")
    failed = [c for c in checks if c.level == "fail"]
    summary = f"FAILED: {', '.join(c.name for c in failed)}" if failed else "All checks passed."
    out.write(f"\n{summary}\n")
    return 1 if failed else 0
