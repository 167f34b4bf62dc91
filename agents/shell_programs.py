"""What a shell command runs: the program of each simple command (past `NAME=x` and
wrappers such as `env`, `sudo`, `timeout`, `xargs`), and whether that program runs code it
was not shown — an interpreter, a test runner or a build tool."""

from __future__ import annotations

import posixpath
import re
from typing import Final

from agents.shell_words import NAME, Operator, Word, tokenize

# Programs that run other programs: the one they run is what counts.
_WRAPPERS: Final = frozenset(
    {
        "env", "sudo", "doas", "nice", "ionice", "timeout", "nohup", "exec", "xargs", "time",
        "command", "builtin", "stdbuf", "setsid", "chrt", "taskset", "unbuffer", "flock",
        "strace", "ltrace", "valgrind", "watch", "parallel", "catchsegv", "firejail",
    }
)  # fmt: skip
# Wrappers whose first plain argument is a setting, not the program (`timeout 5 make`).
_WRAPPER_SETTING: Final = frozenset({"timeout", "chrt", "taskset", "flock"})
# Wrapper options written apart from their value (`sudo -u alice`, `nice -n 5`).
_OPTION_VALUES: Final = {
    "sudo": "ugCDhprtUT",
    "doas": "uC",
    "env": "uCS",
    "nice": "n",
    "ionice": "cnp",
    "timeout": "sk",
    "xargs": "nLPIdaEs",
    "flock": "wE",
    "strace": "eoOpsSuP",
    "watch": "nd",
    "parallel": "jS",
    "time": "fo",
}
_INTERPRETER: Final = re.compile(
    r"(?:python|pypy|node|nodejs|ruby|irb|perl|php|lua|luajit|tclsh|wish|julia|java|jshell"
    r"|deno|bun|Rscript|R|osascript|pwsh|powershell|guile|racket|ghc|runghc|swift|kotlin|scala"
    r"|elixir|erl|escript|groovy|dotnet|awk|gawk|mawk|nawk|sed|(?:ba|z|da|k|mk|fi|c|tc|a|yash)?sh)"
    r"[\d.]*(?:-[\w.]+)?"
)
_TEST_RUNNERS_AND_BUILD_TOOLS: Final = frozenset(
    {
        "pytest", "py.test", "tox", "nox", "jest", "mocha", "vitest", "ava", "karma", "go",
        "cargo", "rustc", "npm", "yarn", "pnpm", "npx", "pnpx", "make", "gmake", "cmake",
        "ninja", "meson", "bazel", "bazelisk", "buck", "gradle", "gradlew", "mvn", "mvnw", "ant",
        "sbt", "pip", "pip3", "pipx", "uv", "uvx", "poetry", "pipenv", "pdm", "hatch", "rye",
        "conda", "mamba", "rake", "bundle", "gem", "composer", "mix", "dune", "stack", "cabal",
        "just", "task", "invoke", "scons", "gcc", "g++", "cc", "clang", "clang++", "tsc",
        "webpack", "vite", "esbuild", "rollup", "pre-commit", "nix", "docker", "podman",
    }
)  # fmt: skip


def programs(command: str) -> list[str]:
    """The program each simple command runs, as its file name (wrappers and `NAME=x` skipped;
    an expansion shows as written). `ShellParseError` when the command does not parse."""
    out: list[str] = []
    current: list[Word] = []
    for token in [*tokenize(command), Operator(";")]:
        if isinstance(token, Word):
            current.append(token)
            continue
        if current:
            name = _program_of(current)
            if name is not None:
                out.append(name)
        current = []
    return out


def _program_of(words: list[Word]) -> str | None:
    index = 0
    while index < len(words):
        text = words[index].text
        if _is_assignment(words[index]):
            index += 1
            continue
        name = posixpath.basename(text) if words[index].plain else text
        if name not in _WRAPPERS:
            return name
        index = _after_wrapper(words, index + 1, name)
    return None


def _is_assignment(word: Word) -> bool:
    first = word.pieces[0] if word.pieces else None
    if first is None or first.kind != "lit" or "=" not in first.text:
        return False
    return bool(NAME.fullmatch(first.text.split("=", 1)[0]))


def _after_wrapper(words: list[Word], index: int, wrapper: str) -> int:
    """Where the wrapped program's word is: past the wrapper's options and settings."""
    with_value = _OPTION_VALUES.get(wrapper, "")
    while index < len(words):
        text = words[index].text
        if _is_assignment(words[index]):
            index += 1
        elif text.startswith("-") and text != "-":
            takes_value = len(text) == 2 and text[1] in with_value
            index += 2 if takes_value else 1
            if text == "--":
                break
        else:
            break
    setting = wrapper in _WRAPPER_SETTING and index < len(words) - 1
    return index + 1 if setting else index


def code_runner(program: str) -> str | None:
    """Why running `program` runs code it was not shown (an interpreter, test runner or build
    tool reads scripts, tests and build files from the workspace), or None."""
    if _INTERPRETER.fullmatch(program):
        return f"`{program}` is an interpreter: it runs whatever program it is given"
    if program in _TEST_RUNNERS_AND_BUILD_TOOLS:
        return (
            f"`{program}` is a test runner or build tool: it runs code from the workspace "
            "(tests, conftest.py, build files, package scripts)"
        )
    return None
