"""A loopback fake of the Anthropic Messages API, for driving the real SDK in tests; a request
with `"stream": true` gets its reply as server-sent events (`tests/fakes/sse.py`)."""

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

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

MODELS = [
    {
        "type": "model",
        "id": "claude-sonnet-5",
        "display_name": "Claude Sonnet 4.5",
        "created_at": "2025-09-29T00:00:00Z",
        "lifecycle": "active",
    },
    {
        "type": "model",
        "id": "claude-haiku-4-5",
        "display_name": "Claude Haiku 4.5",
        "created_at": "2025-10-01T00:00:00Z",
        "lifecycle": "active",
    },
]


@dataclass
class _Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    # A streamed answer stops here (a non-streamed one is sent whole) ...
    cut: Cut | None = None
    # ... and sends this error event there, when set: (error type, message).
    stream_error: tuple[str, str] | None = None


@dataclass
class _Delay:
    seconds: float


@dataclass(frozen=True)
class SideCall:
    """A call the bot makes besides the Host's own (the skill gate, memory's episode
    former). With the default settings every turn makes them; the fake answers them here,
    so a test's script holds only the answers it means for the Host and its agents."""

    name: str
    matches: Callable[[dict[str, Any]], bool]
    answer: Callable[[dict[str, Any]], dict[str, Any]]


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system", "")
    if isinstance(system, list):
        return "".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return str(system)


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict)}


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    return ""


def _gate_answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"content": json.dumps({"plan": "", "selected": []})}


def _episode_answer(body: dict[str, Any]) -> dict[str, Any]:
    """What the person wrote, as the episode's narrative (fence markers removed)."""
    said = " ".join(unfence(_last_user_text(body)).split())[:300] or "The person wrote."
    episode = {"same_topic": False, "narrative": said, "facts": []}
    return {
        "content": [
            {"type": "tool_use", "id": _new_id("toolu"), "name": "record_episode", "input": episode}
        ]
    }


SKILL_GATE = SideCall(
    "skill gate", lambda body: _system_text(body).startswith(GATE_SYSTEM[:80]), _gate_answer
)
EPISODE_FORMER = SideCall(
    "episode former", lambda body: "record_episode" in _tool_names(body), _episode_answer
)
DEFAULT_SIDE_CALLS = (SKILL_GATE, EPISODE_FORMER)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """The API's error JSON shape."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


class FakeAnthropic:
    """`POST /v1/messages` and `GET /v1/models` on 127.0.0.1, answering from a script."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        model: str | None = None,
        side_calls: tuple[SideCall, ...] = DEFAULT_SIDE_CALLS,
    ) -> None:
        # api_key set: other keys get a 401; unset: any key is fine, but one must be sent.
        self.api_key = api_key
        # model set: replies name it and GET /v1/models/{id} knows it, besides MODELS.
        self.model = model
        # Answered without the script (a test that scripts one of them passes side_calls=()
        # or leaves it out), and not counted in `requests`.
        self.side_calls = side_calls
        self.requests: list[dict[str, Any]] = []
        self.responder: Responder | None = None
        # Seconds between streamed events, as a model generates tokens; a non-streamed answer
        # waits as long as its events would have taken (the same generation, sent at the end).
        self.event_pace = 0.0
        self._script: deque[_Answer | _Delay] = deque()
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._arrived = asyncio.Condition()
        self.base_url = ""

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> str:
        """Bind 127.0.0.1 on a free port and return the base URL."""
        self._closing.clear()
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{model_id}", self._model_info)
        # A short shutdown timeout: a delayed answer must not hold up stop().
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        return self.base_url

    async def stop(self) -> None:
        """Stop serving; pending delays end at once."""
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropic:
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

    def queue_text(self, text: str, *, stop_reason: str = "end_turn") -> None:
        """Answer the next request with a text message."""
        self._script.append(
            _Answer(200, {"content": [{"type": "text", "text": text}], "stop_reason": stop_reason})
        )

    def queue_tool_use(
        self,
        name: str,
        input: dict[str, Any],
        id: str | None = None,
        text: str | None = None,
    ) -> str:
        """Answer the next request with a tool_use (after optional text); returns its id."""
        tool_id = id or _new_id("toolu")
        content: list[dict[str, Any]] = []
        if text:
            content.append({"type": "text", "text": text})
        content.append({"type": "tool_use", "id": tool_id, "name": name, "input": input})
        self._script.append(_Answer(200, {"content": content, "stop_reason": "tool_use"}))
        return tool_id

    def queue_message(self, message: dict[str, Any]) -> None:
        """Answer the next request with this (partial) message JSON; gaps get defaults."""
        self._script.append(_Answer(200, dict(message)))

    def queue_error(
        self,
        status: int,
        message: str,
        retry_after: float | None = None,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next request with an API error, optionally with a retry-after header."""
        kind = error_type or ERROR_TYPES.get(status, "api_error" if status >= 500 else "error")
        extra = dict(headers or {})
        if retry_after is not None:
            extra["retry-after"] = f"{retry_after:g}"
        self._script.append(_Answer(status, error_body(kind, message), extra))

    def queue_cut_stream(self, message: dict[str, Any], *, after: int, drop: bool = True) -> None:
        """Answer the next request with this (partial) message, streamed, but stop after
        `after` events: the connection dropped, or (`drop=False`) the body ended early."""
        self._script.append(_Answer(200, dict(message), cut=Cut(after, drop)))

    def queue_stream_error(
        self, message: dict[str, Any], *, after: int, error_type: str, text: str
    ) -> None:
        """Stream the next answer for `after` events, then an `error` event of this type (as
        the API reports an overload mid-reply) and the end of the stream."""
        self._script.append(
            _Answer(200, dict(message), cut=Cut(after, drop=False), stream_error=(error_type, text))
        )

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

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    async def _record(self, request: web.Request, body: Any = None) -> dict[str, Any]:
        if body is None:
            body = await self._body(request)
        entry = {
            "method": request.method,
            "path": request.path,
            "headers": dict(request.headers),
            "json": body,
        }
        async with self._arrived:
            self.requests.append(entry)
            self._arrived.notify_all()
        return entry

    def _auth_error(self, headers: dict[str, str]) -> web.Response | None:
        lowered = {k.lower(): v for k, v in headers.items()}
        key = lowered.get("x-api-key")
        auth = lowered.get("authorization", "")
        if key is None and auth.lower().startswith("bearer "):
            key = auth[7:]
        if not key:
            return self._error_response(401, "authentication_error", "x-api-key header is required")
        if self.api_key is not None and key != self.api_key:
            return self._error_response(401, "authentication_error", "invalid x-api-key")
        return None

    def _error_response(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        return web.json_response(
            error_body(kind, message),
            status=status,
            headers={"request-id": _new_id("req"), **(headers or {})},
        )

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        side = (
            next((c for c in self.side_calls if c.matches(body)), None)
            if isinstance(body, dict)
            else None
        )
        if side is not None:
            denied = self._auth_error(dict(request.headers))
            if denied is not None:
                return denied
            return await self._answer(
                request, self._complete_message(side.answer(body), body), body, _Answer(200, {})
            )
        entry = await self._record(request, body)
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
        body = entry["json"] if isinstance(entry["json"], dict) else {}
        if not isinstance(answer, _Answer):
            dynamic = self.responder(body) if self.responder is not None else None
            answer = _Answer(200, dynamic if dynamic is not None else {})
        if answer.status != 200:
            return web.json_response(
                answer.body,
                status=answer.status,
                headers={"request-id": _new_id("req"), **answer.headers},
            )
        return await self._answer(request, self._complete_message(answer.body, body), body, answer)

    async def _answer(
        self, request: web.Request, message: dict[str, Any], body: dict[str, Any], answer: _Answer
    ) -> web.StreamResponse:
        """The message as JSON, or as events when the request asked for a stream."""
        headers = {"request-id": _new_id("req"), **answer.headers}
        events = message_events(message)
        if body.get("stream"):
            cut = answer.cut
            if answer.stream_error is not None and cut is not None:
                error_type, text = answer.stream_error
                events = [*events[: cut.after], ("error", error_body(error_type, text))]
                cut = None
            return await send_events(
                request,
                events,
                pace=self.event_pace,
                closing=self._closing,
                cut=cut,
                headers=headers,
            )
        if self.event_pace > 0:
            with contextlib.suppress(TimeoutError):
                pace = self.event_pace * (len(events) - 1)
                await asyncio.wait_for(self._closing.wait(), timeout=pace)
        return web.json_response(message, headers=headers)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        denied = self._auth_error(entry["headers"])
        if denied is not None:
            return denied
        return web.json_response(
            {
                "data": MODELS,
                "has_more": False,
                "first_id": MODELS[0]["id"],
                "last_id": MODELS[-1]["id"],
            }
        )

    async def _model_info(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        denied = self._auth_error(entry["headers"])
        if denied is not None:
            return denied
        model_id = request.match_info["model_id"]
        known = {m["id"]: m for m in MODELS}
        if self.model is not None:
            known.setdefault(
                self.model,
                {
                    "type": "model",
                    "id": self.model,
                    "display_name": self.model,
                    "created_at": "2025-01-01T00:00:00Z",
                    "lifecycle": "active",
                },
            )
        if model_id not in known:
            return self._error_response(404, "not_found_error", f"model: {model_id}")
        return web.json_response(known[model_id])

    def _complete_message(self, partial: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """Fill a partial answer out into a full Messages API response."""
        content = partial.get("content")
        if content is None:
            content = [{"type": "text", "text": DEFAULT_TEXT}]
        elif isinstance(content, str):
            content = [{"type": "text", "text": content}]
        has_tool = any(block.get("type") == "tool_use" for block in content)
        output_chars = sum(len(json.dumps(block)) for block in content)
        input_chars = len(json.dumps(request.get("messages", []))) + len(
            json.dumps(request.get("system", ""))
        )
        usage = {
            "input_tokens": max(1, input_chars // 4),
            "output_tokens": max(1, output_chars // 4),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        usage.update(partial.get("usage", {}))
        return {
            "id": partial.get("id", _new_id("msg")),
            "type": "message",
            "role": "assistant",
            "model": partial.get("model", self.model or request.get("model", "claude-fake")),
            "content": content,
            "stop_reason": partial.get("stop_reason", "tool_use" if has_tool else "end_turn"),
            "stop_sequence": partial.get("stop_sequence"),
            "usage": usage,
        }


def message_events(message: dict[str, Any]) -> list[Event]:
    """A Messages API response as the events the API streams: `message_start` (its usage so
    far), each block's start, its text or input JSON in pieces and its stop, `message_delta`
    (stop reason, output tokens) and `message_stop`."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[Event] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        if block.get("type") == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in pieces(block["text"])]
        elif block.get("type") == "tool_use":
            opening = {**block, "input": {}}
            raw = json.dumps(block.get("input", {}))
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces(raw)]
        else:
            opening, deltas = block, []
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        events += [
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            for delta in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": delta,
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def echo_last_user_text(body: dict[str, Any]) -> dict[str, Any] | None:
    """A responder that answers `echo: <last user text>`."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return {"content": f"echo: {content}"}
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        if texts:
            return {"content": f"echo: {' '.join(texts)}"}
    return None
