"""A transport's read stream that reports its own end: the only sign, while no call is in
flight, that a stdio server exited or a connection dropped (the SDK's session ends its read
loop quietly and fails only the requests waiting at that moment)."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

import anyio

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_ENDED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


class ReadStream(Protocol[T_co]):
    """What this wrapper needs of a transport's read stream (the SDK's own protocol is private)."""

    async def receive(self) -> T_co: ...
    async def aclose(self) -> None: ...
    async def __aenter__(self) -> Any: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None: ...


class WatchedReadStream(Generic[T]):
    """Wraps a `ReadStream`, calling `on_end` when a receive finds the stream ended or closed."""

    def __init__(self, stream: ReadStream[T], on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        # The session reads the sender's context this way (HTTP transports carry one).
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> T:
        try:
            return await self._stream.receive()
        except _ENDED:
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._stream.__aexit__(exc_type, exc_val, exc_tb)
