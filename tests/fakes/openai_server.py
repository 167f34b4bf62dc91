"""A loopback fake of an OpenAI-compatible Chat Completions API, for driving the real `openai`
SDK in tests: scripted replies, tool calls, errors with status codes, recorded requests; a
request with `"stream": true` gets its reply as server-sent chunks (`tests/fakes/sse.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from core.fence import unfence
from skills.prompts import GATE_SYSTEM
from tests.fakes.sse import Cut, Event, pieces, send_events

Responder = Callable[[dict[str, Any]], dict[str, Any] | None]

DEFAULT_TEXT = "fake reply"


@dataclass
class _Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    # A streamed answer stops here (a non-streamed one is sent whole).
    cut: Cut | None = None


@dataclass
class _Delay:
    seconds: float


@dataclass(frozen=True)
class SideCall:
    """A call the bot makes besides the Host's own (the skill gate, memory's episode
    former), answered here so a test's script holds only the answers it means."""

    name: str
    matches: Callable[[dict[str, Any]], bool]
    answer: Callable[[dict[str, Any]], dict[str, Any]]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def system_text(body: dict[str, Any]) -> str:
    """The request's system message text."""
    return "".join(
        str(m.get("content", ""))
        for m in body.get("messages", [])
        if isinstance(m, dict) and m.get("role") == "system"
    )


def tool_names(body: dict[str, Any]) -> set[str]:
    """The function tools the request offers."""
    return {
        str(t.get("function", {}).get("name"))
        for t in body.get("tools") or ()
        if isinstance(t, dict)
    }


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the request's last user message."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
    return ""


def tool_call(name: str, arguments: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """One assistant tool call in the API's shape."""
    return {
        "id": id or _new_id("call"),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _gate_answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"content": json.dumps({"plan": "", "selected": []})}


def _episode_answer(body: dict[str, Any]) -> dict[str, Any]:
    said = " ".join(unfence(last_user_text(body)).split())[:300] or "The person wrote."
    episode = {"same_topic": False, "narrative": said, "facts": []}
    return {"tool_calls": [tool_call("record_episode", episode)]}


SKILL_GATE = SideCall(
    "skill gate", lambda body: system_text(body).startswith(GATE_SYSTEM[:80]), _gate_answer
)
EPISODE_FORMER = SideCall(
    "episode former", lambda body: "record_episode" in tool_names(body), _episode_answer
)
DEFAULT_SIDE_CALLS = (SKILL_GATE, EPISODE_FORMER)


def error_body(message: str, error_type: str, code: str | None = None) -> dict[str, Any]:
    """The API's error JSON shape."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


class FakeOpenAI:
    """`POST /v1/chat/completions` and `GET /v1/models` on 127.0.0.1, answering from a script."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        models: tuple[str, ...] = ("gpt-fake",),
        side_calls: tuple[SideCall, ...] = DEFAULT_SIDE_CALLS,
        serve_models: bool = True,
    ) -> None:
        # False: no `GET /v1/models` (a 404), as some proxies.
        self.serve_models = serve_models
        # api_key set: a request without exactly it gets a 401; unset: no key is needed.
        self.api_key = api_key
        self.models = models
        # Answered without the script, and not counted in `requests`.
        self.side_calls = side_calls
        self.requests: list[dict[str, Any]] = []
        self.responder: Responder | None = None
        # Seconds between streamed chunks, as a model generates tokens; a non-streamed answer
        # waits as long as its chunks would have taken (the same generation, sent at the end).
        self.chunk_pace = 0.0
        # False: each streamed tool call comes whole in one chunk with no `index`, as some
        # local servers (older Ollama) send them.
        self.indexed_tool_calls = True
        self._script: deque[_Answer | _Delay] = deque()
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._arrived = asyncio.Condition()
        self.base_url = ""

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> str:
        """Bind 127.0.0.1 on a free port and return the base URL (ending in /v1)."""
        self._closing.clear()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        if self.serve_models:
            app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        """Stop serving; pending delays end at once."""
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- script ------------------------------------------------------------------------------

    def queue_text(self, text: str, *, finish_reason: str = "stop") -> None:
        """Answer the next request with a text message."""
        self._script.append(_Answer(200, {"content": text, "finish_reason": finish_reason}))

    def queue_tool_call(
        self,
        name: str,
        arguments: dict[str, Any],
        id: str | None = None,
        text: str | None = None,
    ) -> str:
        """Answer the next request with a tool call (after optional text); returns its id."""
        call = tool_call(name, arguments, id)
        self._script.append(_Answer(200, {"content": text, "tool_calls": [call]}))
        return str(call["id"])

    def queue_completion(self, partial: dict[str, Any]) -> None:
        """Answer the next request with this partial message (`content`, `tool_calls`,
        `refusal`, `finish_reason`, `usage`, `model`); gaps get defaults."""
        self._script.append(_Answer(200, dict(partial)))

    def queue_error(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "api_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next request with an API error."""
        self._script.append(_Answer(status, error_body(message, error_type), dict(headers or {})))

    def queue_cut_stream(self, partial: dict[str, Any], *, after: int, drop: bool = True) -> None:
        """Answer the next request with this partial message, streamed, but stop after `after`
        chunks: the connection dropped, or (`drop=False`) the body ended with no finish."""
        self._script.append(_Answer(200, dict(partial), cut=Cut(after, drop)))

    def queue_delay(self, seconds: float) -> None:
        """Hold the next answer for this long (for timeout tests)."""
        self._script.append(_Delay(seconds))

    async def wait_for_requests(
        self,
        n: int,
        timeout: float = 5.0,  # noqa: ASYNC109 - a bounded wait is the point of this helper
    ) -> list[dict[str, Any]]:
        """Wait until at least n requests have arrived; return them all."""
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= n)
        return self.requests

    # -- handlers ----------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        entry = {
            "method": request.method,
            "path": request.path,
            "headers": dict(request.headers),
            "json": body,
        }
        return entry

    async def _keep(self, entry: dict[str, Any]) -> None:
        async with self._arrived:
            self.requests.append(entry)
            self._arrived.notify_all()

    def _auth_error(self, headers: dict[str, str]) -> web.Response | None:
        if self.api_key is None:
            return None
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        if auth != f"Bearer {self.api_key}":
            return web.json_response(
                error_body(
                    "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
                ),
                status=401,
            )
        return None

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        body = entry["json"] if isinstance(entry["json"], dict) else {}
        side = next((c for c in self.side_calls if c.matches(body)), None)
        if side is not None:
            return self._auth_error(entry["headers"]) or await self._answer(
                request, self._complete(side.answer(body), body), body
            )
        await self._keep(entry)
        delay = 0.0
        while self._script and isinstance(self._script[0], _Delay):
            step = self._script.popleft()
            assert isinstance(step, _Delay)
            delay += step.seconds
        answer = self._script.popleft() if self._script else None
        if delay > 0:
            # Waiting on the stop event, so stop() cuts a long delay short.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), timeout=delay)
        denied = self._auth_error(entry["headers"])
        if denied is not None:
            return denied
        if not isinstance(answer, _Answer):
            dynamic = self.responder(body) if self.responder is not None else None
            answer = _Answer(200, dynamic if dynamic is not None else {})
        if answer.status != 200:
            return web.json_response(answer.body, status=answer.status, headers=answer.headers)
        return await self._answer(
            request, self._complete(answer.body, body), body, answer.headers, answer.cut
        )

    async def _answer(
        self,
        request: web.Request,
        completion: dict[str, Any],
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
        cut: Cut | None = None,
    ) -> web.StreamResponse:
        """The completion as JSON, or as chunks when the request asked for a stream."""
        options = body.get("stream_options") or {}
        events = chunk_events(
            completion,
            include_usage=bool(options.get("include_usage")),
            indexed=self.indexed_tool_calls,
        )
        if body.get("stream"):
            return await send_events(
                request,
                events,
                pace=self.chunk_pace,
                closing=self._closing,
                cut=cut,
                headers=headers,
            )
        if self.chunk_pace > 0:
            with contextlib.suppress(TimeoutError):
                pace = self.chunk_pace * (len(events) - 1)
                await asyncio.wait_for(self._closing.wait(), timeout=pace)
        return web.json_response(completion, headers=headers)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        await self._keep(entry)
        denied = self._auth_error(entry["headers"])
        if denied is not None:
            return denied
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    def _complete(self, partial: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """Fill a partial answer out into a full chat.completion."""
        content = partial.get("content", None if "tool_calls" in partial else DEFAULT_TEXT)
        calls = partial.get("tool_calls")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        if partial.get("refusal"):
            message["refusal"] = partial["refusal"]
        prompt = max(1, len(json.dumps(request.get("messages", []))) // 4)
        completion = max(1, len(json.dumps(message)) // 4)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        usage.update(partial.get("usage", {}))
        finish = partial.get("finish_reason", "tool_calls" if calls else "stop")
        return {
            "id": _new_id("chatcmpl"),
            "object": "chat.completion",
            "created": 0,
            "model": partial.get("model", request.get("model", "gpt-fake")),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }


def chunk_events(
    completion: dict[str, Any], *, include_usage: bool, indexed: bool = True
) -> list[Event]:
    """A chat.completion as the chunks a server streams: the role, the text in pieces, each
    tool call's id and name then its arguments in pieces (`indexed` False: each call whole in
    one chunk, with no index), the finish reason, the usage (when asked for, in a chunk with
    no choices) and `[DONE]`."""
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return None, {**base, "choices": [choice]}

    choice = completion["choices"][0]
    message = choice["message"]
    events = [chunk({"role": "assistant", "content": ""})]
    for key in ("content", "refusal"):
        if message.get(key):
            events += [chunk({key: piece}) for piece in pieces(message[key])]
    for index, call in enumerate(message.get("tool_calls") or ()):
        if not indexed:
            events.append(chunk({"tool_calls": [call]}))
            continue
        function = call["function"]
        opening = {"name": function["name"], "arguments": ""}
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call["id"], "type": "function", "function": opening}
                    ]
                }
            )
        )
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in pieces(function["arguments"])
        ]
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append((None, {**base, "choices": [], "usage": completion["usage"]}))
    events.append((None, "[DONE]"))
    return events
