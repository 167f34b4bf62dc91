"""`/raven WORDS` → the typed words it stands for: every subcommand maps to its typed word,
and nothing else can become a request, a task proposal or a Host turn (it gets `help`)."""

from __future__ import annotations

import pytest

from host.conversation.service import control_word
from host.conversation.slash import SUBCOMMANDS, typed_text


@pytest.mark.parametrize(
    ("words", "argument", "typed"),
    [
        ("status", "", "status"),
        ("Stop", "", "stop"),
        ("schedule list", "", "schedule: list"),
        ("schedule list all", "", "schedule: list all"),
        ("schedule list", "all", "schedule: list all"),
        ("memory show", "", "what do you remember about me"),
        ("mute t_0123abcd", "", "mute t_0123abcd"),
        ("snooze", "2h t_0123abcd", "snooze 2h t_0123abcd"),
        ("snooze 30m", "", "snooze 30m"),
    ],
)
def test_each_subcommand_is_its_typed_word(words: str, argument: str, typed: str) -> None:
    assert typed_text(words, argument) == typed


@pytest.mark.parametrize(
    "words",
    [
        "",
        "deploy the docs",
        "schedule",
        "status please now",  # the bare words take no argument
        "stop s2",
        "schedule list every 2h | s1: shell: rm -rf x",  # no task proposal through /raven
        "snooze <!here>",
        "remember that I like tea",
    ],
)
def test_anything_else_is_help(words: str) -> None:
    assert typed_text(words) == "help"


def test_the_bare_words_are_control_words() -> None:
    for words, sub in SUBCOMMANDS.items():
        if words in ("status", "stop", "help"):
            assert control_word(sub.typed) == words
