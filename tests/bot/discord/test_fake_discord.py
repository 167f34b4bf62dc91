"""The loopback fake Discord, driven by the real (unmodified) discord.py client.

Each test starts a minimal `discord.Client` against `FakeDiscord` on 127.0.0.1. The harness
follows `/work/shared/notes/testing-discord-offline.md`: waits race the client task (a parser
KeyError kills the client, which would otherwise look like a timeout), any ERROR record on the
`discord` logger fails the test (exceptions in callbacks are only logged), and the client is
closed only after it became ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import discord
import pytest

from tests.fakes.discord import FakeDiscord

T = TypeVar("T")

TOKEN = "fake.discord.bot-token"
GENERAL = "700000000000000001"
RANDOM = "700000000000000002"
ALICE = "600000000000000001"
DM_CHANNEL = "710000000000000001"
LOADING = 1 << 7
EPHEMERAL = 1 << 6

OnMessage = Callable[[discord.Message], Awaitable[None]]


class Bot(discord.Client):
    """A minimal client: records messages from others, optionally reacts to them."""

    def __init__(self, *, message_content: bool = True) -> None:
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = message_content
        # guild_ready_timeout: on_ready 50 ms after GUILD_CREATE instead of 2 s.
        super().__init__(intents=intents, guild_ready_timeout=0.05)
        self.received: list[discord.Message] = []
        self.persistent: list[discord.ui.View] = []
        self.handler: OnMessage | None = None
        self.resumed = 0
        self.votes: list[tuple[int, int]] = []  # (choice, user id) of dynamic-button clicks

    async def setup_hook(self) -> None:
        for view in self.persistent:
            self.add_view(view)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        # discord.py sleeps 5 s before every non-initial IDENTIFY; the fake has no limit.
        return None

    async def on_message(self, message: discord.Message) -> None:
        if self.user is not None and message.author.id == self.user.id:
            return  # the fake echoes the bot's own messages, as Discord does
        self.received.append(message)
        if self.handler is not None:
            await self.handler(message)

    async def on_resumed(self) -> None:
        self.resumed += 1


class _ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Harness:
    """Waits that fail fast when the client task ends or discord.py logs an ERROR."""

    def __init__(
        self, fake: FakeDiscord, bot: Bot, task: asyncio.Task[None], errors: _ErrorRecords
    ) -> None:
        self.fake = fake
        self.bot = bot
        self.task = task
        self.errors = errors

    def check(self) -> None:
        """Fail on logged errors (with their tracebacks) or a dead client."""
        if self.errors.records:
            formatter = logging.Formatter()
            raise AssertionError(
                "discord.py logged errors:\n"
                + "\n".join(formatter.format(r) for r in self.errors.records)
            )
        if self.task.done():
            exc = None if self.task.cancelled() else self.task.exception()
            raise AssertionError(f"the client stopped: {exc!r}; {self.fake.describe()}")

    async def run(self, awaitable: Awaitable[T], within: float = 5.0) -> T:
        """Await `awaitable` (e.g. a client call), racing the client task."""
        job = asyncio.ensure_future(awaitable)
        done, _ = await asyncio.wait(
            {job, self.task}, timeout=within, return_when="FIRST_COMPLETED"
        )
        if job not in done:
            job.cancel()
            self.check()
            raise TimeoutError(f"no result within {within}s; {self.fake.describe()}")
        self.check()
        return job.result()

    async def until(self, predicate: Callable[[], bool], within: float = 5.0) -> None:
        """Wait for a condition; an error logged meanwhile ends the wait at once."""
        await self.run(
            self.fake.wait_for(lambda: bool(self.errors.records) or predicate(), within),
            within + 1,
        )
        self.check()


@contextlib.asynccontextmanager
async def running(fake: FakeDiscord, bot: Bot) -> AsyncIterator[Harness]:
    """Start `bot` against `fake`, wait until ready, and close it afterwards."""
    errors = _ErrorRecords()
    logger = logging.getLogger("discord")
    logger.addHandler(errors)
    task = asyncio.create_task(bot.start(TOKEN))
    harness = Harness(fake, bot, task, errors)
    try:
        await harness.until(bot.is_ready)
        yield harness
        harness.check()
        assert fake.unknown == [], f"routes the fake does not implement: {fake.unknown}"
    finally:
        await bot.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        logger.removeHandler(errors)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """A started fake with one human member, discord.py pointed at it."""
    async with FakeDiscord() as server:
        server.patch(monkeypatch)
        server.add_user(ALICE, "alice", global_name="Alice", nick="Ali")
        yield server


def _text_channel(bot: Bot, channel_id: str) -> discord.TextChannel:
    channel = bot.get_channel(int(channel_id))
    assert isinstance(channel, discord.TextChannel)
    return channel


class ApproveView(discord.ui.View):
    """A persistent view: one button with a stable custom_id."""

    def __init__(self, clicks: list[int], respond: str = "ephemeral") -> None:
        super().__init__(timeout=None)
        self.clicks = clicks
        self.respond = respond

    @discord.ui.button(
        label="Approve", style=discord.ButtonStyle.primary, custom_id="raven:approve"
    )
    async def approve(
        self, interaction: discord.Interaction, button: discord.ui.Button[ApproveView]
    ) -> None:
        self.clicks.append(interaction.user.id)
        if self.respond == "ephemeral":
            await interaction.response.send_message("approved", ephemeral=True)
        else:
            await interaction.response.edit_message(content="approved by Ali", view=None)


async def test_login_and_ready(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot):
        await fake.wait_ready()
        assert bot.user is not None and bot.user.id == int(fake.bot_id)
        assert bot.application_id == int(fake.app_id)
        guild = bot.get_guild(int(fake.guild_id))
        assert guild is not None
        assert sorted(c.name for c in guild.text_channels) == ["general", "random"]
        assert guild.default_role.id == guild.id
        # Client.login makes exactly these two calls; a plain Client never calls /gateway.
        assert [(r.method, r.path) for r in fake.requests] == [
            ("GET", "/users/@me"),
            ("GET", "/oauth2/applications/@me"),
        ]
        assert fake.requests[0].headers["Authorization"] == f"Bot {TOKEN}"
        identify = next(f for f in fake.gateway_received if f["op"] == 2)
        assert identify["d"]["intents"] == bot.intents.value
        assert (fake.identifies, fake.resumes, fake.connections) == (1, 0, 1)


async def test_mention_arrives_with_mentions_filled(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        payload = await fake.send_message(GENERAL, ALICE, "hello there", mention_bot=True)
        await h.until(lambda: len(bot.received) == 1)
        message = bot.received[0]
        assert message.id == int(payload["id"])
        assert message.content == f"<@{fake.bot_id}> hello there"
        assert bot.user is not None and bot.user.mentioned_in(message)
        assert [u.id for u in message.mentions] == [int(fake.bot_id)]
        assert isinstance(message.author, discord.Member)
        assert message.author.display_name == "Ali"
        assert fake.messages[GENERAL][payload["id"]]["content"] == message.content


async def test_thread_reply_with_persistent_button_and_ephemeral_click(fake: FakeDiscord) -> None:
    clicks: list[int] = []
    bot = Bot()
    bot.persistent.append(ApproveView(clicks))

    async def reply_in_thread(message: discord.Message) -> None:
        thread = await message.create_thread(name="raven task")
        await thread.send("Approve?", view=ApproveView(clicks))

    bot.handler = reply_in_thread
    async with running(fake, bot) as h:
        mention = await fake.send_message(GENERAL, ALICE, "do it", mention_bot=True)
        thread_id = mention["id"]  # a thread started from a message has the message's id
        await h.until(lambda: len(fake.bot_messages(thread_id)) == 1)
        thread = fake.threads[thread_id]
        assert (thread["type"], thread["parent_id"], thread["owner_id"]) == (
            11,
            GENERAL,
            fake.bot_id,
        )
        # THREAD_CREATE reached the client's cache.
        await h.until(lambda: isinstance(bot.get_channel(int(thread_id)), discord.Thread))
        prompt = fake.bot_messages(thread_id)[0]
        assert prompt["components"][0]["components"][0]["custom_id"] == "raven:approve"
        post = fake.requests_to("POST", f"/channels/{thread_id}/messages")[0]
        assert post.json["enforce_nonce"] is True

        await fake.click(thread_id, prompt["id"], "raven:approve", ALICE)
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        callback = fake.interaction_callbacks[0]
        assert callback["type"] == 4
        assert callback["data"]["content"] == "approved"
        assert callback["data"]["flags"] == EPHEMERAL
        assert clicks == [int(ALICE)]
        # Ephemeral replies are not part of the channel.
        assert [m["id"] for m in fake.messages[thread_id].values()] == [prompt["id"]]

        # A click on a message this process never sent (as after a restart) is routed to the
        # view registered in setup_hook, by custom_id.
        await fake.click(GENERAL, "123456789012345678", "raven:approve", ALICE)
        await h.until(lambda: len(fake.interaction_callbacks) == 2)
        assert clicks == [int(ALICE), int(ALICE)]


class VoteButton(
    discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=r"vote:(?P<n>\d+)"
):
    """A dynamic button: its custom id carries the state, and no view is registered."""

    def __init__(self, n: int) -> None:
        super().__init__(discord.ui.Button(label=f"Vote {n}", custom_id=f"vote:{n}"))
        self.n = n

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: Any, /
    ) -> VoteButton:
        return cls(int(match["n"]))

    async def callback(self, interaction: discord.Interaction) -> None:
        bot = interaction.client  # a fresh item per click: state lives on the client
        assert isinstance(bot, Bot)
        bot.votes.append((self.n, interaction.user.id))
        await interaction.response.defer()


async def test_dynamic_items_route_clicks_by_custom_id_template(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        bot.add_dynamic_items(VoteButton)
        view = discord.ui.View(timeout=None)
        view.add_item(VoteButton(7))
        sent = await h.run(_text_channel(bot, GENERAL).send("Vote?", view=view))
        row = fake.messages[GENERAL][str(sent.id)]["components"][0]
        assert row["components"][0]["custom_id"] == "vote:7"
        await fake.click(GENERAL, str(sent.id), "vote:7", ALICE)
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        assert fake.interaction_callbacks[0]["type"] == 6
        # A message this process never sent (as after a restart): the stand-in message shows
        # the clicked button, which discord.py rebuilds as the dynamic item.
        await fake.click(GENERAL, "123456789012345678", "vote:3", ALICE)
        await h.until(lambda: len(fake.interaction_callbacks) == 2)
        assert bot.votes == [(7, int(ALICE)), (3, int(ALICE))]


async def test_answering_an_interaction_twice_is_rejected(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        sent = await h.run(_text_channel(bot, GENERAL).send("Approve?", view=ApproveView([])))
        click = await fake.click(GENERAL, str(sent.id), "raven:approve", ALICE)
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        # discord.py refuses a second response locally, so answer again over plain HTTP.
        url = f"{fake.base_url}/interactions/{click['id']}/{click['token']}/callback"
        async with aiohttp.ClientSession() as session, session.post(url, json={"type": 6}) as resp:
            assert resp.status == 400
            assert (await resp.json())["code"] == 40060
        assert len(fake.interaction_callbacks) == 1


async def test_update_message_callback_edits_the_component_message(fake: FakeDiscord) -> None:
    clicks: list[int] = []
    bot = Bot()
    async with running(fake, bot) as h:
        sent = await h.run(
            _text_channel(bot, GENERAL).send("Approve?", view=ApproveView(clicks, "edit"))
        )
        await fake.click(GENERAL, str(sent.id), "raven:approve", ALICE)
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        assert fake.interaction_callbacks[0]["type"] == 7
        stored = fake.messages[GENERAL][str(sent.id)]
        assert stored["content"] == "approved by Ali"
        assert stored["components"] == []
        assert stored["edited_timestamp"] is not None


class NoteModal(discord.ui.Modal, title="Add a note"):
    """A modal with one text input."""

    note: discord.ui.TextInput[NoteModal] = discord.ui.TextInput(label="Note", custom_id="note")

    def __init__(self, sink: list[str]) -> None:
        super().__init__(custom_id="raven:note")
        self.sink = sink

    async def on_submit(self, interaction: discord.Interaction) -> None:
        self.sink.append(self.note.value)
        await interaction.response.send_message(f"noted: {self.note.value}")


async def test_modal_then_submit_runs_on_submit(fake: FakeDiscord) -> None:
    notes: list[str] = []

    class NoteButton(discord.ui.View):
        def __init__(self) -> None:
            super().__init__(timeout=None)

        @discord.ui.button(label="Note", custom_id="raven:open-note")
        async def open_note(
            self, interaction: discord.Interaction, button: discord.ui.Button[NoteButton]
        ) -> None:
            await interaction.response.send_modal(NoteModal(notes))

    bot = Bot()
    async with running(fake, bot) as h:
        sent = await h.run(_text_channel(bot, GENERAL).send("Notes?", view=NoteButton()))
        await fake.click(GENERAL, str(sent.id), "raven:open-note", ALICE)
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        modal = fake.interaction_callbacks[0]
        assert modal["type"] == 9
        assert modal["data"]["custom_id"] == "raven:note"

        await fake.submit_modal(GENERAL, "raven:note", ALICE, {"note": "ship it"}, str(sent.id))
        await h.until(lambda: len(fake.interaction_callbacks) == 2)
        assert notes == ["ship it"]
        reply = fake.interaction_callbacks[1]
        assert (reply["type"], reply["data"]["content"]) == (4, "noted: ship it")
        # A non-ephemeral response is a message of the channel.
        assert any(m["content"] == "noted: ship it" for m in fake.bot_messages(GENERAL))


async def test_defer_then_followups_and_edit_original(fake: FakeDiscord) -> None:
    results: dict[str, Any] = {}

    class SlowView(discord.ui.View):
        def __init__(self) -> None:
            super().__init__(timeout=None)

        @discord.ui.button(label="Go", custom_id="raven:slow")
        async def go(
            self, interaction: discord.Interaction, button: discord.ui.Button[SlowView]
        ) -> None:
            await interaction.response.defer(thinking=True)
            results["first"] = await interaction.followup.send("working on it", wait=True)
            results["second"] = await interaction.followup.send(
                "just you", ephemeral=True, wait=True
            )
            results["original"] = await interaction.edit_original_response(content="done")

    bot = Bot()
    async with running(fake, bot) as h:
        sent = await h.run(_text_channel(bot, GENERAL).send("Run?", view=SlowView()))
        await fake.click(GENERAL, str(sent.id), "raven:slow", ALICE)
        await h.until(lambda: "original" in results)
        assert [c["type"] for c in fake.interaction_callbacks] == [5]
        assert [f["action"] for f in fake.followups] == ["send", "send", "edit"]
        placeholder = fake.followups[0]["message"]
        # The first follow-up after a thinking defer completes the placeholder message.
        assert results["first"].id == int(placeholder["id"])
        assert fake.followups[2]["original"] is True
        stored = fake.messages[GENERAL][placeholder["id"]]
        assert stored["content"] == "done"
        assert not stored["flags"] & LOADING
        assert fake.followups[1]["message"]["flags"] & EPHEMERAL
        assert str(results["second"].id) not in fake.messages[GENERAL]


async def test_resume_replays_missed_event(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        # Queued before the close, so it is certainly missed (the client resumes within ms).
        missed = fake.build_message(GENERAL, ALICE, "while you were away", mention_bot=True)
        fake.queue_missed("MESSAGE_CREATE", missed)
        await fake.close_gateway(4000)
        await h.until(lambda: bot.resumed == 1 and len(bot.received) == 1)
        assert bot.received[0].id == int(missed["id"])
        assert (fake.identifies, fake.resumes, fake.connections) == (1, 1, 2)
        assert fake.gateway_paths == ["/gateway", "/gateway-resume"]
        resume = next(f for f in fake.gateway_received if f["op"] == 6)
        assert resume["d"]["session_id"] == bot.ws.session_id

        await fake.send_message(GENERAL, ALICE, "live again", mention_bot=True)
        await h.until(lambda: len(bot.received) == 2)


async def test_unknown_session_makes_the_client_identify_again(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        fake.forget_sessions()
        await fake.close_gateway(4000)
        await h.until(lambda: fake.identifies == 2 and fake.open_connections == 1)
        await fake.wait_ready()
        await fake.send_message(GENERAL, ALICE, "new session", mention_bot=True)
        await h.until(lambda: len(bot.received) == 1)
        assert fake.resumes == 0


async def test_rate_limit_is_retried_then_given_up(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        channel = _text_channel(bot, GENERAL)
        fake.rate_limit("POST", "/channels/{channel_id}/messages", retry_after=0.05, times=2)
        sent = await h.run(channel.send("after the limit"))
        posts = fake.requests_to("POST", "/channels/*/messages")
        assert [r.status for r in posts] == [429, 429, 200]
        assert len({r.json["nonce"] for r in posts}) == 1  # the same request, retried
        assert [m["id"] for m in fake.bot_messages(GENERAL)] == [str(sent.id)]

        # discord.py tries 5 times in all.
        fake.rate_limit("POST", "/channels/{channel_id}/messages", retry_after=0.01, times=5)
        with pytest.raises(discord.HTTPException) as info:
            await h.run(channel.send("never"))
        assert info.value.status == 429


async def test_fail_raises_forbidden_with_code(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        fake.fail("POST", "/channels/*/messages", status=403, code=50001, message="Missing Access")
        with pytest.raises(discord.Forbidden) as info:
            await h.run(_text_channel(bot, RANDOM).send("nope"))
        assert (info.value.code, info.value.text) == (50001, "Missing Access")
        assert fake.bot_messages() == []


async def test_history_is_newest_first(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        sent = [await fake.send_message(RANDOM, ALICE, f"m{i}") for i in range(7)]
        channel = _text_channel(bot, RANDOM)

        async def collect(**kwargs: Any) -> list[str]:
            return [m.content async for m in channel.history(**kwargs)]

        assert await h.run(collect(limit=5)) == ["m6", "m5", "m4", "m3", "m2"]
        after = discord.Object(int(sent[1]["id"]))
        assert await h.run(collect(limit=3, after=after)) == ["m2", "m3", "m4"]
        assert fake.requests_to("GET", "/channels/{id}/messages")[0].query["limit"] == "5"


async def test_attachment_download_and_upload(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        attachment = fake.add_attachment("report.txt", b"line one\n", content_type="text/plain")
        await fake.send_message(GENERAL, ALICE, "see attached", attachments=[attachment])
        await h.until(lambda: len(bot.received) == 1)
        received = bot.received[0].attachments[0]
        assert (received.filename, received.size) == ("report.txt", 9)
        assert await h.run(received.read()) == b"line one\n"
        assert fake.downloads == ["report.txt"]

        upload = discord.File(io.BytesIO(b"pong"), filename="pong.bin")
        sent = await h.run(_text_channel(bot, GENERAL).send("here", file=upload))
        assert fake.requests[-1].files[0].data == b"pong"
        assert await h.run(sent.attachments[0].read()) == b"pong"


async def test_an_attachment_of_several_mib_is_taken_whole(fake: FakeDiscord) -> None:
    # Discord takes bot uploads up to 10 MiB, far above an aiohttp server's default 1 MiB
    # body: so must the fake, or an ordinary file looks refused as too large.
    bot = Bot()
    async with running(fake, bot) as h:
        data = bytes(range(256)) * (4 * 2**20 // 256)
        upload = discord.File(io.BytesIO(data), filename="design.png")
        await h.run(_text_channel(bot, GENERAL).send(file=upload))
        (stored,) = fake.attachments_in(GENERAL)
        assert (stored.filename, stored.data) == ("design.png", data)


async def test_a_served_hold_stores_the_message_and_withholds_the_answer(
    fake: FakeDiscord,
) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        hold = fake.hold("POST", "/channels/{id}/messages")
        sending = asyncio.ensure_future(_text_channel(bot, GENERAL).send("held answer"))
        (held,) = await hold.wait_held()
        assert held.json["content"] == "held answer"
        # Discord has it (stored, in the history) while the client is still waiting.
        assert [m["content"] for m in fake.bot_messages(GENERAL)] == ["held answer"]
        assert not sending.done()
        hold.release()
        sent = await h.run(sending)
        assert [m["id"] for m in fake.bot_messages(GENERAL)] == [str(sent.id)]
        # Released holds hold nothing more.
        await h.run(_text_channel(bot, GENERAL).send("after"))


async def test_an_unserved_hold_drops_the_request_on_release(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        hold = fake.hold(
            "POST", "/channels/{id}/messages", served=False, when=lambda r: bool(r.files)
        )
        await h.run(_text_channel(bot, GENERAL).send("no file: not held"))
        upload = discord.File(io.BytesIO(b"pong"), filename="pong.bin")
        sending = asyncio.ensure_future(_text_channel(bot, GENERAL).send(file=upload))
        await hold.wait_held()
        assert [m["content"] for m in fake.bot_messages(GENERAL)] == ["no file: not held"]
        assert fake.attachments_in(GENERAL) == []
        hold.release()
        with pytest.raises(aiohttp.ClientError):
            await h.run(sending)
        assert fake.attachments_in(GENERAL) == []


async def test_enforced_nonce_returns_the_first_message(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        channel = _text_channel(bot, GENERAL)
        first = await h.run(channel.send("only once", nonce=4242))
        again = await h.run(channel.send("only once", nonce=4242))
        other = await h.run(channel.send("only once"))  # discord.py picks a random nonce
        assert first.id == again.id != other.id
        assert [m["id"] for m in fake.bot_messages(GENERAL)] == [str(first.id), str(other.id)]


async def test_without_message_content_intent_only_mentions_carry_content(
    fake: FakeDiscord,
) -> None:
    bot = Bot(message_content=False)
    async with running(fake, bot) as h:
        await fake.send_message(GENERAL, ALICE, "just chatting")
        await fake.send_message(GENERAL, ALICE, "hey bot", mention_bot=True)
        await h.until(lambda: len(bot.received) == 2)
        assert [m.content for m in bot.received] == ["", f"<@{fake.bot_id}> hey bot"]


async def test_direct_message_round_trip(fake: FakeDiscord) -> None:
    bot = Bot()

    async def answer(message: discord.Message) -> None:
        await message.channel.send("hi back")

    bot.handler = answer
    async with running(fake, bot) as h:
        await fake.send_message(DM_CHANNEL, ALICE, "psst", dm=True)
        await h.until(lambda: len(fake.bot_messages(DM_CHANNEL)) == 1)
        message = bot.received[0]
        assert isinstance(message.channel, discord.DMChannel)
        assert message.guild is None
        assert "guild_id" not in fake.bot_messages(DM_CHANNEL)[0]
        user = await h.run(bot.fetch_user(int(ALICE)))
        dm = await h.run(user.create_dm())
        assert dm.id == int(DM_CHANNEL)


async def test_unimplemented_route_is_recorded(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        channel = _text_channel(bot, GENERAL)

        async def pins() -> list[discord.Message]:
            return [m async for m in channel.pins()]

        with pytest.raises(discord.NotFound):
            await h.run(pins())
        assert fake.unknown == [f"GET /channels/{GENERAL}/messages/pins"]
        fake.unknown.clear()  # seen; the harness asserts it is empty on exit


async def test_rest_round_trip(fake: FakeDiscord) -> None:
    fake.add_role("500000000000000001", "devs")
    bot = Bot()
    async with running(fake, bot) as h:
        channel = _text_channel(bot, GENERAL)
        quiet = await h.run(
            channel.send(f"hi <@{ALICE}>", allowed_mentions=discord.AllowedMentions.none())
        )
        loud = await h.run(channel.send(f"hi <@{ALICE}>"))
        assert (quiet.mentions, [u.id for u in loud.mentions]) == ([], [int(ALICE)])

        edited = await h.run(quiet.edit(content="edited", embed=discord.Embed(title="t")))
        assert edited.edited_at is not None and edited.embeds[0].title == "t"
        reply = await h.run(edited.reply("a reply"))
        assert reply.reference is not None and reply.reference.message_id == quiet.id
        await h.run(loud.delete())
        assert str(loud.id) not in fake.messages[GENERAL]
        fetched = await h.run(channel.fetch_message(quiet.id))
        assert fetched.content == "edited"

        thread = await h.run(
            channel.create_thread(name="no starter", type=discord.ChannelType.public_thread)
        )
        await h.run(thread.join())
        await h.run(thread.send("in the thread"))
        again = await h.run(bot.fetch_channel(thread.id))
        assert isinstance(again, discord.Thread) and again.message_count == 1

        with pytest.raises(discord.HTTPException) as info:
            await h.run(channel.send("x" * 2001))
        assert info.value.code == 50035
        guild = await h.run(bot.fetch_guild(int(fake.guild_id)))
        member = await h.run(guild.fetch_member(int(ALICE)))
        assert member.nick == "Ali"
