"""The fake Discord's application commands, interaction token lifetimes, attachments and
typing indicator, driven by the real (unmodified) discord.py client and its CommandTree.

Uses the client harness of test_fake_discord.py: waits race the client task and any ERROR
logged by discord.py (an exception in a command is only logged) fails the test.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator

import aiohttp
import discord
import pytest
from discord import app_commands

from tests.bot.discord.test_fake_discord import ALICE, GENERAL, Bot, running
from tests.fakes.discord import INTERACTION_TTL_S, FakeDiscord, payloads

EPHEMERAL = 1 << 6
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8


class CommandBot(Bot):
    """A client with `/raven status|stop|later`, synced to the fake's guild at start-up."""

    def __init__(self, guild_id: str) -> None:
        super().__init__()
        self.guild = discord.Object(id=int(guild_id))
        self.tree = app_commands.CommandTree(self)
        self.synced: list[app_commands.AppCommand] = []
        self.release = asyncio.Event()
        self.errors: list[discord.HTTPException] = []
        self.invoked: list[tuple[str, int]] = []
        self.tree.add_command(self._raven_group(), guild=self.guild)

    def _raven_group(self) -> app_commands.Group:
        raven = app_commands.Group(name="raven", description="Talk to Raven")

        @raven.command(name="status", description="What is running now")
        async def status(interaction: discord.Interaction) -> None:
            self.invoked.append(("status", interaction.user.id))
            await interaction.response.send_message("Nothing is running.", ephemeral=True)

        @raven.command(name="stop", description="Stop the run")
        @app_commands.describe(run="The run to stop")
        async def stop(interaction: discord.Interaction, run: str) -> None:
            self.invoked.append((f"stop {run}", interaction.user.id))
            await interaction.response.defer(ephemeral=True, thinking=True)
            await interaction.followup.send(f"Stopped {run}.")
            await interaction.edit_original_response(content=f"Stopped {run} (edited).")

        @raven.command(name="later", description="Answers after the test says so")
        async def later(interaction: discord.Interaction) -> None:
            self.invoked.append(("later", interaction.user.id))
            try:
                if interaction.response.is_done():
                    return
                await self.release.wait()
                await interaction.response.send_message("late", ephemeral=True)
            except discord.HTTPException as exc:
                self.errors.append(exc)

        @raven.command(name="slow", description="Defers, then follows up when told")
        async def slow(interaction: discord.Interaction) -> None:
            self.invoked.append(("slow", interaction.user.id))
            await interaction.response.defer(ephemeral=True)
            await self.release.wait()
            try:
                await interaction.followup.send("finally")
            except discord.HTTPException as exc:
                self.errors.append(exc)

        schedule = app_commands.Group(name="schedule", description="Schedules", parent=raven)

        @schedule.command(name="list", description="List the schedules")
        async def schedule_list(interaction: discord.Interaction) -> None:
            self.invoked.append(("schedule list", interaction.user.id))
            await interaction.response.send_message("No schedules.", ephemeral=True)

        return raven

    async def setup_hook(self) -> None:
        await super().setup_hook()
        self.synced = await self.tree.sync(guild=self.guild)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.patch(monkeypatch)
        server.add_user(ALICE, "alice", global_name="Alice", nick="Ali")
        yield server


def _channel(bot: Bot) -> discord.TextChannel:
    channel = bot.get_channel(int(GENERAL))
    assert isinstance(channel, discord.TextChannel)
    return channel


# -- application commands ---------------------------------------------------------------------


async def test_tree_sync_registers_guild_commands(fake: FakeDiscord) -> None:
    bot = CommandBot(fake.guild_id)
    async with running(fake, bot):
        (sync,) = fake.commands.syncs
        assert sync.guild_id == fake.guild_id
        (raven,) = fake.commands.commands(fake.guild_id)
        assert (raven["name"], raven["guild_id"], raven["application_id"]) == (
            "raven",
            fake.guild_id,
            fake.app_id,
        )
        names = [o["name"] for o in raven["options"]]
        assert names == ["status", "stop", "later", "slow", "schedule"]
        assert fake.commands.global_commands == []
        # discord.py parsed the answer into AppCommands with Discord's ids.
        assert [(c.name, str(c.id)) for c in bot.synced] == [("raven", raven["id"])]
        (put,) = fake.requests_to("PUT", "/applications/{a}/guilds/{g}/commands")
        assert put.status == 200

        # A second sync keeps the command's id, as Discord does for the same name.
        again = await bot.tree.sync(guild=bot.guild)
        assert str(again[0].id) == raven["id"] and len(fake.commands.syncs) == 2


async def test_status_is_answered_ephemerally(fake: FakeDiscord) -> None:
    bot = CommandBot(fake.guild_id)
    async with running(fake, bot) as h:
        payload = await fake.invoke_command(
            "raven", GENERAL, ALICE, options=[payloads.subcommand("status")]
        )
        assert payload["type"] == 2 and payload["data"]["guild_id"] == fake.guild_id
        await h.until(lambda: len(fake.interaction_callbacks) == 1)

        (callback,) = fake.interaction_callbacks
        assert (callback["id"], callback["type"]) == (payload["id"], 4)
        assert callback["data"]["content"] == "Nothing is running."
        assert callback["data"]["flags"] & EPHEMERAL
        assert bot.invoked == [("status", int(ALICE))]
        # Ephemeral: only the caller sees it, nothing lands in the channel.
        assert fake.bot_messages(GENERAL) == []


async def test_a_subcommand_of_a_group_is_routed(fake: FakeDiscord) -> None:
    bot = CommandBot(fake.guild_id)
    async with running(fake, bot) as h:
        options = [payloads.subcommand_group("schedule", [payloads.subcommand("list")])]
        await fake.invoke_command("raven", GENERAL, ALICE, options=options)
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        assert bot.invoked == [("schedule list", int(ALICE))]
        assert fake.interaction_callbacks[0]["data"]["content"] == "No schedules."


async def test_deferred_command_follows_up_and_edits_the_original(fake: FakeDiscord) -> None:
    bot = CommandBot(fake.guild_id)
    async with running(fake, bot) as h:
        options = [payloads.subcommand("stop", [payloads.string_option("run", "r-42")])]
        await fake.invoke_command("raven", GENERAL, ALICE, options=options)
        await h.until(lambda: len(fake.followups) == 2)

        assert [c["type"] for c in fake.interaction_callbacks] == [5]
        assert fake.interaction_callbacks[0]["data"]["flags"] & EPHEMERAL
        send, edit = fake.followups
        assert (send["action"], send["payload"]["content"]) == ("send", "Stopped r-42.")
        assert (edit["action"], edit["original"]) == ("edit", True)
        assert edit["message"]["content"] == "Stopped r-42 (edited)."
        assert edit["message"]["flags"] & EPHEMERAL
        assert bot.invoked == [("stop r-42", int(ALICE))]


async def test_global_commands_sync_and_answer_with_a_file(fake: FakeDiscord) -> None:
    bot = Bot()
    tree = app_commands.CommandTree(bot)

    @tree.command(name="chart", description="The campaign chart")
    async def chart(interaction: discord.Interaction) -> None:
        await interaction.response.send_message(
            "chart", file=discord.File(io.BytesIO(PNG), filename="chart.png"), ephemeral=True
        )

    async with running(fake, bot) as h:
        synced = await h.run(tree.sync())
        (sync,) = fake.commands.syncs
        assert sync.guild_id is None and [c["name"] for c in sync.commands] == ["chart"]
        (stored,) = fake.commands.global_commands
        assert "guild_id" not in stored and str(synced[0].id) == stored["id"]

        payload = await fake.invoke_command("chart", GENERAL, ALICE)
        assert "guild_id" not in payload["data"]
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        (callback,) = fake.requests_to("POST", "/interactions/{i}/*/callback")
        assert [(f.filename, f.data) for f in callback.files] == [("chart.png", PNG)]


async def test_unregistered_command_cannot_be_invoked(fake: FakeDiscord) -> None:
    bot = CommandBot(fake.guild_id)
    async with running(fake, bot):
        with pytest.raises(LookupError, match="/deploy is not registered"):
            await fake.invoke_command("deploy", GENERAL, ALICE)


async def test_a_response_after_the_callback_window_is_unknown_interaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeDiscord(callback_window_s=3.0) as fake:
        fake.patch(monkeypatch)
        fake.add_user(ALICE, "alice")
        bot = CommandBot(fake.guild_id)
        async with running(fake, bot) as h:
            await fake.invoke_command(
                "raven", GENERAL, ALICE, options=[payloads.subcommand("later")]
            )
            await h.until(lambda: bool(bot.invoked))
            fake.advance(3.5)
            bot.release.set()
            await h.until(lambda: bool(bot.errors))

            (error,) = bot.errors
            assert isinstance(error, discord.NotFound)
            assert (error.status, error.code) == (404, 10062)
            assert fake.interaction_callbacks == []


async def test_follow_up_after_fifteen_minutes_is_an_invalid_webhook_token(
    fake: FakeDiscord,
) -> None:
    bot = CommandBot(fake.guild_id)
    async with running(fake, bot) as h:
        await fake.invoke_command("raven", GENERAL, ALICE, options=[payloads.subcommand("slow")])
        await h.until(lambda: len(fake.interaction_callbacks) == 1)
        fake.advance(INTERACTION_TTL_S)
        bot.release.set()
        await h.until(lambda: bool(bot.errors))

        (error,) = bot.errors
        assert (error.status, error.code) == (401, 50027)
        assert fake.followups == []


# -- attachments and typing ------------------------------------------------------------------


async def test_send_with_a_file_stores_and_dispatches_the_attachment(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        own = asyncio.ensure_future(
            bot.wait_for("message", check=lambda m: bot.user is not None and m.author == bot.user)
        )
        sent = await h.run(
            _channel(bot).send(
                "the chart", file=discord.File(io.BytesIO(PNG), filename="chart.png")
            )
        )
        (upload,) = fake.requests_to("POST", "/channels/{c}/messages")[-1].files
        assert (upload.field, upload.filename, upload.data) == ("files[0]", "chart.png", PNG)

        (attachment,) = sent.attachments
        assert (attachment.filename, attachment.size) == ("chart.png", len(PNG))
        assert attachment.content_type == "image/png"
        (stored,) = fake.attachments_in(GENERAL)
        assert (stored.message_id, stored.filename) == (str(sent.id), "chart.png")
        assert (stored.content_type, stored.data) == ("image/png", PNG)

        # The gateway echo carries the attachment, and discord.py parses it.
        echoed = await h.run(own)
        assert [a.filename for a in echoed.attachments] == ["chart.png"]
        (event,) = fake.dispatched("MESSAGE_CREATE")
        assert event["attachments"][0]["size"] == len(PNG)

        # Channel history shows it too, and the bytes download.
        history = [m async for m in _channel(bot).history(limit=5)]
        assert [a.filename for a in history[0].attachments] == ["chart.png"]
        async with aiohttp.ClientSession() as session, session.get(attachment.url) as resp:
            assert await resp.read() == PNG


async def test_too_large_an_upload_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeDiscord(max_upload_bytes=100) as fake:
        fake.patch(monkeypatch)
        bot = Bot()
        async with running(fake, bot) as h:
            with pytest.raises(discord.HTTPException) as info:
                await h.run(
                    _channel(bot).send(file=discord.File(io.BytesIO(b"x" * 101), filename="a.bin"))
                )
            assert (info.value.status, info.value.code) == (413, 40005)
            assert fake.bot_messages(GENERAL) == []


async def test_typing_is_recorded_per_channel(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(fake, bot) as h:
        channel = _channel(bot)

        async def type_then_send() -> None:
            async with channel.typing():
                await channel.send("done")

        await h.run(type_then_send())
        await h.run(channel.typing())

        assert len(fake.typing_in(GENERAL)) == 2
        assert fake.typing_in("700000000000000002") == []
        first_typing = fake.requests.index(fake.requests_to("POST", "/channels/{c}/typing")[0])
        first_send = fake.requests.index(fake.requests_to("POST", "/channels/{c}/messages")[0])
        assert first_typing < first_send
