"""The `raven-bot` command line: run, chat, doctor, version, graph, runs, campaigns, memory,
skills, mcp, usage, web."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from bot.cli.parsers import parser

# Imported by the commands that need them: `version` and `--help` load no settings, no
# pydantic, no runtime.
if TYPE_CHECKING:
    from bot.channels import AdapterFactory
    from bot.console.terminal import Terminal
    from bot.settings import Settings


def _version() -> str:
    try:
        return version("raven-bot")
    except PackageNotFoundError:
        return "0+unknown"


def _console(settings: Settings, terminal: Terminal | None) -> AdapterFactory:
    from bot.console.adapter import ConsoleAdapter
    from bot.console.thread import CONSOLE_STATE_FILE

    # The active console conversation survives restarts until the user types `new`.
    return functools.partial(
        ConsoleAdapter, state_file=settings.home / CONSOLE_STATE_FILE, terminal=terminal
    )


def _console_only(settings: Settings, command: str) -> bool:
    from bot.channels import configured_channels

    return command == "chat" or not configured_channels(settings)


def _adapters(settings: Settings, command: str, terminal: Terminal | None) -> list[AdapterFactory]:
    from bot.channels import configured_channels

    if _console_only(settings, command):
        return [_console(settings, terminal)]
    return [spec.factory(settings) for spec in configured_channels(settings)]


def _early_terminal(settings: Settings, command: str) -> Terminal | None:
    """For a person chatting at a terminal: the console's terminal, greeted (prompt shown,
    typing kept) before the runtime loads, which takes most of a second."""
    if not (_console_only(settings, command) and sys.stdin.isatty() and sys.stdout.isatty()):
        return None
    from bot.console.terminal import Terminal
    from bot.console.thread import CONSOLE_STATE_FILE
    from bot.logging_setup import show_beside

    terminal = Terminal(state_file=settings.home / CONSOLE_STATE_FILE)
    terminal.greet()
    show_beside(terminal.screen.aside)
    return terminal


async def _serve(settings: Settings, command: str) -> int:
    terminal = _early_terminal(settings, command)
    try:
        # The runtime is imported only by the commands that run it (`version` and `--help`
        # stay light).
        from bot.app import build_runtime, serve

        runtime = await build_runtime(settings, _adapters(settings, command, terminal))
    except BaseException:
        if terminal is not None:
            terminal.abandon()
        raise
    return await serve(runtime)


def _graph(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.records import validate_graph

    return validate_graph(args.file, args.agents, settings, sys.stdout)


def _runs(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.records import runs_command

    return runs_command(
        settings, args.runs_command, getattr(args, "run", None), out=getattr(args, "out", None)
    )


def _skills(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.skills import skills_command

    return skills_command(args, settings)


def _mcp(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.mcp import mcp_command

    return mcp_command(args, settings)


def _memory(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.memory import memory_command

    return memory_command(args, settings)


def _campaigns(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.campaigns import campaigns_command

    return campaigns_command(args, settings)


def _schedules(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.schedules import schedules_command

    return schedules_command(args, settings)


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.evaluate import eval_command

    return eval_command(args, settings)


def _evolve(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.evolve import evolve_command

    return evolve_command(args, settings)


def _harness(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.evolve import harness_command

    return harness_command(args, settings)


def _usage(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.usage import usage_command

    return usage_command(args, settings)


def _web(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.web import web_command

    return web_command(args, settings)


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli.doctor import doctor

    return doctor(settings, sys.stdout)


# Commands that run once and exit, without serving a chat.
_TOOLS: Mapping[str, Callable[[argparse.Namespace, Settings], int]] = MappingProxyType(
    {
        "graph": _graph,
        "runs": _runs,
        "campaigns": _campaigns,
        "schedules": _schedules,
        "memory": _memory,
        "skills": _skills,
        "mcp": _mcp,
        "doctor": _doctor,
        "eval": _eval,
        "evolve": _evolve,
        "harness": _harness,
        "usage": _usage,
        "web": _web,
    }
)


def _at_a_terminal(settings: Settings, command: str) -> bool:
    """Every command but a deployed `run` is read by a person at a terminal: the console,
    and the one-shot tools (`doctor`, `memory`, `campaigns run` in the foreground ...)."""
    from bot.channels import configured_channels

    return command != "run" or not configured_channels(settings)


def _configure_logging(settings: Settings, command: str) -> None:
    """Everything logs to RAVEN_HOME/logs/raven.log. A person at a terminal (the console,
    whose terminal is the chat, and every one-shot command) only gets warnings and errors on
    stderr, one brief line each; a deployed `run` logs to stderr at the configured level for
    its service manager."""
    from bot.logging_setup import configure_logging, log_file
    from host.features.mcp.environ import declared_secrets

    configure_logging(
        settings.log_level,
        [*settings.secret_values(), *declared_secrets(settings.home, Path.cwd())],
        file=log_file(settings.home),
        console=_at_a_terminal(settings, command),
    )


def _run_bot(settings: Settings, command: str) -> int:
    from bot.home import HomeError, check_home
    from core.errors import ConfigError
    from core.serving_lock import LockError, ServingLock

    try:
        check_home(settings.home)
        # Before anything is recovered: a second bot's recovery would call the first one's
        # running work interrupted (`core.serving_lock`).
        with ServingLock(settings.home) as lock:
            lock.acquire(f"raven-bot {command}")
            return asyncio.run(_serve(settings, command))
    except KeyboardInterrupt:
        return 130
    except (HomeError, ConfigError, LockError) as exc:
        # A configuration problem, like an invalid setting, or another bot serving here.
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `raven-bot` console script."""
    args = parser().parse_args(argv)
    command = args.command or "run"
    if command == "version":
        print(f"raven-bot {_version()}")
        return 0
    from bot.settings import SettingsError, load_settings, unknown_variables

    try:
        settings = load_settings()
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return 2
    _configure_logging(settings, command)
    if command != "doctor":  # doctor lists them among its checks
        for warning in unknown_variables(os.environ):
            logging.getLogger(__name__).warning("%s", warning)
    tool = _TOOLS.get(command)
    return tool(args, settings) if tool is not None else _run_bot(settings, command)


if __name__ == "__main__":
    sys.exit(main())
