"""Slack's external upload flow, as `slack_sdk`'s `files_upload_v2` drives it.

1. `files.getUploadURLExternal(filename, length)` → `{upload_url, file_id}`;
2. a POST of the bytes (raw or multipart) to `upload_url` → 200 `OK - <length>`;
3. `files.completeUploadExternal(files=[{id, title}], channel_id, thread_ts, initial_comment)`
   → `{files: [file objects]}`; the file is shared as one message in the channel or thread.

Kept apart from the Web API server: this module only holds the uploads' state and builds
Slack's reply shapes; the server routes requests here and stores the share message.
"""

from __future__ import annotations

import json
import mimetypes
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_FILE_BYTES", "PendingUpload", "SharedFile", "SlackUploads"]

# Slack's own cap on one file (the SDK refuses bigger files before asking).
MAX_FILE_BYTES = 1024 * 1024 * 1024


@dataclass
class PendingUpload:
    """A file id handed out by `files.getUploadURLExternal`, waiting for bytes and completion."""

    file_id: str
    filename: str
    length: int
    alt_txt: str | None
    snippet_type: str | None
    data: bytes | None = None  # set by the POST to the upload URL


@dataclass(frozen=True)
class SharedFile:
    """A completed upload: what the user sees in Slack."""

    file_id: str
    name: str
    title: str
    data: bytes
    declared_length: int
    channel: str | None  # None: completed without a channel (a private file)
    thread_ts: str | None
    initial_comment: str | None
    message_ts: str | None  # the share message in the channel/thread history
    mimetype: str
    at: float


@dataclass
class SlackUploads:
    """The upload state of one fake Slack workspace."""

    base_url: str
    user_id: str
    team_id: str
    max_file_bytes: int = MAX_FILE_BYTES
    pending: dict[str, PendingUpload] = field(default_factory=dict)
    shared: list[SharedFile] = field(default_factory=list)
    upload_posts: list[tuple[str, int]] = field(default_factory=list)  # (file_id, status)
    _seq: int = 0

    def new_file_id(self) -> str:
        self._seq += 1
        return f"F{self._seq:010d}"

    def upload_url(self, file_id: str) -> str:
        return f"{self.base_url}/upload/v1/{file_id}"

    def start(self, args: dict[str, Any]) -> dict[str, Any]:
        """`files.getUploadURLExternal`: a reply body (ok or Slack's error)."""
        filename = str(args.get("filename") or "")
        raw_length = args.get("length")
        if not filename or raw_length in (None, ""):
            return {"ok": False, "error": "invalid_arguments"}
        try:
            length = int(str(raw_length))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        if length < 1:
            return {"ok": False, "error": "invalid_arguments"}
        if length > self.max_file_bytes:
            return {"ok": False, "error": "file_upload_size_restricted"}
        alt_txt = args.get("alt_txt")
        if alt_txt is not None and len(str(alt_txt)) > 1000:
            return {"ok": False, "error": "alt_txt_too_large"}
        file_id = self.new_file_id()
        self.pending[file_id] = PendingUpload(
            file_id,
            filename,
            length,
            str(alt_txt) if alt_txt is not None else None,
            str(args["snippet_type"]) if args.get("snippet_type") else None,
        )
        return {"ok": True, "upload_url": self.upload_url(file_id), "file_id": file_id}

    def receive(self, file_id: str, data: bytes) -> tuple[int, str]:
        """The POST to an upload URL: (HTTP status, text body)."""
        pending = self.pending.get(file_id)
        if pending is None:
            self.upload_posts.append((file_id, 404))
            return 404, "upload url not found"
        if len(data) > self.max_file_bytes:
            self.upload_posts.append((file_id, 413))
            return 413, "file too large"
        pending.data = data
        self.upload_posts.append((file_id, 200))
        return 200, f"OK - {len(data)}"

    def parse_files(self, args: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The `files` argument of `files.completeUploadExternal` (a JSON string from the
        SDK, or a list from a JSON body); None when malformed."""
        raw = args.get("files")
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                return None
        if not isinstance(raw, list) or not raw:
            return None
        if not all(isinstance(f, dict) and f.get("id") for f in raw):
            return None
        return raw

    def missing(self, items: list[dict[str, Any]]) -> str | None:
        """The first listed file id that was not issued or never received its bytes."""
        for item in items:
            pending = self.pending.get(str(item["id"]))
            if pending is None or pending.data is None:
                return str(item["id"])
        return None

    def complete(
        self,
        items: list[dict[str, Any]],
        *,
        channel: str | None,
        thread_ts: str | None,
        comment: str | None,
        message_ts: str | None,
        at: float,
    ) -> list[SharedFile]:
        """Turn pending uploads into shared files (call after `missing` returned None)."""
        done: list[SharedFile] = []
        for item in items:
            pending = self.pending.pop(str(item["id"]))
            assert pending.data is not None
            shared = SharedFile(
                file_id=pending.file_id,
                name=pending.filename,
                title=str(item.get("title") or pending.filename),
                data=pending.data,
                declared_length=pending.length,
                channel=channel,
                thread_ts=thread_ts,
                initial_comment=comment,
                message_ts=message_ts,
                mimetype=mimetypes.guess_type(pending.filename)[0] or "application/octet-stream",
                at=at,
            )
            self.shared.append(shared)
            done.append(shared)
        return done

    def file_object(self, shared: SharedFile, *, with_shares: bool) -> dict[str, Any]:
        """Slack's file object. Right after completion Slack has not processed the shares
        yet (`shares` empty, `channels` empty); `files.info` later shows them."""
        name = shared.name
        url = f"{self.base_url}/files/{shared.file_id}/{name}"
        filetype = name.rsplit(".", 1)[-1].lower() if "." in name else "binary"
        shares: dict[str, Any] = {}
        channels: list[str] = []
        if with_shares and shared.channel and shared.message_ts:
            share: dict[str, Any] = {
                "ts": shared.message_ts,
                "channel_name": shared.channel.lower(),
                "team_id": self.team_id,
                "share_user_id": self.user_id,
                "source": "UNKNOWN",
                "reply_users": [],
                "reply_users_count": 0,
                "reply_count": 0,
            }
            if shared.thread_ts:
                share["thread_ts"] = shared.thread_ts
            kind = "public" if shared.channel.startswith("C") else "private"
            shares = {kind: {shared.channel: [share]}}
            channels = [shared.channel]
        return {
            "id": shared.file_id,
            "created": int(shared.at),
            "timestamp": int(shared.at),
            "name": name,
            "title": shared.title,
            "mimetype": shared.mimetype,
            "filetype": filetype,
            "pretty_type": filetype.upper(),
            "user": self.user_id,
            "user_team": self.team_id,
            "editable": False,
            "size": len(shared.data),
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": bool(channels),
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": url,
            "url_private_download": url,
            "permalink": f"https://fake.slack.com/files/{self.user_id}/{shared.file_id}/{name}",
            "permalink_public": f"https://slack-files.com/{self.team_id}-{shared.file_id}",
            "comments_count": 0,
            "is_starred": False,
            "shares": shares,
            "channels": channels,
            "groups": [],
            "ims": [],
            "has_more_shares": False,
            "has_rich_preview": False,
            "file_access": "visible",
        }
