"""Assembly root: build the runtime once from Settings (collect, validate, bind, start, freeze)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from agents.models.offline import OfflineProvider
from agents.models.provider import ModelProvider
from agents.tools import ToolRegistry
from bot.channel import ChannelAdapter
from bot.settings import Settings
from host.conversations import ConversationService
from host.host_agent import HostAgent
from host.lanes import LaneManager
from host.outbox import Outbox
from host.ports import Channel
from host.turn import TurnContext
from memory.conversation_log import ConversationLog
from memory.store import Store

log = logging.getLogger(__name__)

AdapterFactory = Callable[[], ChannelAdapter]


@dataclass(frozen=True)
class Runtime:
    """One frozen generation of the bot: every part built once from one Settings."""

    settings: Settings
    store: Store
    conversation_log: ConversationLog
    lanes: LaneManager
    provider: ModelProvider
    host: HostAgent
    service: ConversationService
    adapters: tuple[ChannelAdapter, ...]


def build_provider(settings: Settings) -> ModelProvider:
    """The Anthropic provider when a key is set, else the honest offline provider."""
    if settings.offline or settings.anthropic_api_key is None:
        return OfflineProvider()
    from agents.models.anthropic_provider import AnthropicProvider

    return AnthropicProvider(
        api_key=settings.anthropic_api_key.get_secret_value(),
        model=settings.model,
        base_url=settings.anthropic_base_url,
        timeout=settings.model_timeout,
        max_retries=settings.model_max_retries,
    )


def validate_environment(settings: Settings) -> None:
    """Fail early, with the variable named, when the data directory is unusable."""
    home = settings.home
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise RuntimeError(
            f"RAVEN_HOME={home} is not a writable directory ({exc.strerror}); "
            "point RAVEN_HOME at a directory you can write to."
        ) from None


async def build_runtime(settings: Settings, adapter_factories: Sequence[AdapterFactory]) -> Runtime:
    """Collect → validate → bind → start → freeze."""
    # Collect and validate.
    validate_environment(settings)
    provider = build_provider(settings)
    adapters = tuple(factory() for factory in adapter_factories)
    platforms = [a.platform for a in adapters]
    if len(set(platforms)) != len(platforms):
        raise RuntimeError(f"two adapters for one platform: {platforms}")
    # Bind.
    store = Store(settings.home / "raven.db")
    conversation_log = ConversationLog(store)
    channels: MappingProxyType[str, Channel] = MappingProxyType({a.platform: a for a in adapters})
    outbox = Outbox(conversation_log, channels)
    lanes = LaneManager(
        user_pool=settings.user_pool,
        system_pool=settings.system_pool,
        idle_seconds=settings.lane_idle_seconds,
        queue_cap=settings.lane_queue_cap,
    )
    host = HostAgent(
        provider,
        ToolRegistry[TurnContext](),
        max_iterations=settings.max_iterations,
        max_tokens=settings.max_tokens,
    )
    service = ConversationService(
        conversation_log=conversation_log,
        lanes=lanes,
        host=host,
        outbox=outbox,
        dedup_ttl_seconds=settings.dedup_ttl_seconds,
        history_messages=settings.history_messages,
    )
    for adapter in adapters:
        bind = getattr(adapter, "bind", None)
        if callable(bind):
            bind(service)
    # Start: the store first, so a crash's leftovers are marked before anything new runs.
    await store.open()
    interrupted = await conversation_log.interrupt_running()
    if interrupted:
        log.warning("%d turn(s) were interrupted by the last shutdown", len(interrupted))
    return Runtime(
        settings=settings,
        store=store,
        conversation_log=conversation_log,
        lanes=lanes,
        provider=provider,
        host=host,
        service=service,
        adapters=adapters,
    )


async def serve(runtime: Runtime) -> int:
    """Recover, serve every adapter until they end or a signal arrives, then shut down.

    Returns the process exit code: 0 after a clean stop, 1 when an adapter crashed.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    exit_code = 0
    serving: set[asyncio.Task[None]] = set()
    stopper = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        for adapter in runtime.adapters:
            await runtime.service.recover(adapter.platform)
        serving = {
            asyncio.create_task(a.serve(), name=f"serve-{a.platform}") for a in runtime.adapters
        }
        pending = set(serving)
        while pending:
            done, _ = await asyncio.wait(pending | {stopper}, return_when=asyncio.FIRST_COMPLETED)
            if stopper in done:
                log.info("shutdown requested")
                break
            for task in done:
                pending.discard(task)
                if not task.cancelled() and task.exception() is not None:
                    log.error("adapter %s crashed", task.get_name(), exc_info=task.exception())
                    exit_code = 1
                    stop.set()
    finally:
        stopper.cancel()
        await asyncio.shield(shutdown(runtime, serving))
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    return exit_code


async def shutdown(runtime: Runtime, serving: set[asyncio.Task[None]] = frozenset()) -> None:  # type: ignore[assignment]
    """Drain lanes within the grace period, then close adapters, the provider and the store."""
    await runtime.lanes.drain(runtime.settings.shutdown_grace)
    for adapter in runtime.adapters:
        try:
            await adapter.close()
        except Exception:
            log.exception("closing the %s adapter failed", adapter.platform)
    if serving:
        _, still = await asyncio.wait(serving, timeout=5.0)
        for task in still:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
    aclose = getattr(runtime.provider, "aclose", None)
    if callable(aclose):
        await aclose()
    await runtime.store.close()
