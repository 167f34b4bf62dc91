"""`/raven` slash commands: each subcommand is a typed control word or chat command, so a
slash command gets exactly the answer (and the permission rules) the typed words get.

Platforms declare the same subcommands from `SUBCOMMANDS` (Slack parses the text after
`/raven`, Discord offers them as application subcommands) and turn an invocation into the
typed text with `typed_text`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Subcommand:
    """One `/raven` subcommand: the words typed after `/raven`, what they stand for when
    typed in a thread, what it does (Discord shows it), and its argument, if any."""

    typed: str
    description: str
    argument: str = ""  # what the argument is, for Discord's option ("" when none)
    option: str = ""  # the argument's name as Discord shows it
    argument_required: bool = False


# Subcommand words (one or two) → what they mean typed. Discord turns a two-word one into a
# subcommand group (`/raven schedule list`).
SUBCOMMANDS: Mapping[str, Subcommand] = MappingProxyType(
    {
        "status": Subcommand("status", "What is running or waiting here"),
        "stop": Subcommand("stop", "Stop what you asked for here"),
        "help": Subcommand("help", "What raven understands"),
        "schedule list": Subcommand(
            "schedule: list", "The scheduled tasks here", "all (admins): every task", "scope"
        ),
        "memory show": Subcommand("what do you remember about me", "What I remember about you"),
        "mute": Subcommand(
            "mute", "Silence scheduled tasks here", "a task id (t_…): only that one", "task"
        ),
        "unmute": Subcommand("unmute", "Let muted tasks speak again", "a task id (t_…)", "task"),
        "snooze": Subcommand(
            "snooze",
            "Silence scheduled tasks for a while",
            "how long, e.g. 2h (optionally a task id: 2h t_…)",
            "duration",
            argument_required=True,
        ),
    }
)

# An argument is a duration, a task id or `all`: at most two plain words (`2h t_…`).
_PLAIN_ARGUMENT = re.compile(r"[\w.-]{1,64}")
_MOST_ARGUMENT_WORDS = 2

# Usage hint for Slack's command box.
USAGE_HINT = "status | stop | help | schedule list | memory show | mute | snooze 2h"


def typed_text(words: str, argument: str = "") -> str:
    """What `/raven WORDS ARGUMENT` means typed: the subcommand's typed words followed by its
    argument; `help` for anything that is not a subcommand with a plain argument (a duration,
    a task id, `all`), so that a slash command never becomes a request, a proposal or a Host
    turn."""
    split = words.split()
    for size in (2, 1):
        name = " ".join(split[:size]).lower()
        command = SUBCOMMANDS.get(name)
        if command is None or len(split) < size:
            continue
        rest = [*split[size:], *argument.split()]
        plain = all(_PLAIN_ARGUMENT.fullmatch(word) for word in rest)
        if (rest and not command.argument) or len(rest) > _MOST_ARGUMENT_WORDS or not plain:
            return "help"
        return " ".join([command.typed, *rest])
    return "help"
