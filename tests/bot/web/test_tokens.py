"""The viewer's link tokens: a signed grant opens one conversation until it expires, and
anything altered, expired, foreign or oversized opens nothing; the key is made once,
readable by the bot's user only, and never read through a link."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from bot.web.tokens import KEY_FILE, MAX_TOKEN_CHARS, Grant, LinkKey, TokenRefused

NOW = 1_800_000_000.0


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def _flip(text: str, index: int) -> str:
    """`text` with the character at `index` replaced by another base64url character."""
    swapped = "B" if text[index] != "B" else "C"
    return text[:index] + swapped + text[index + 1 :]


def _refusal(key: LinkKey, token: str, *, now: float = NOW) -> str:
    with pytest.raises(TokenRefused) as refused:
        key.verify(token, now=now)
    return refused.value.reason


def test_a_signed_grant_verifies_to_the_same_grant(home: Path) -> None:
    key = LinkKey.load(home)
    grant = Grant("slack:T1:C1:1700000000.000100", NOW + 60)
    assert key.verify(key.sign(grant), now=NOW) == grant


def test_an_expired_token_is_refused_as_expired(home: Path) -> None:
    key = LinkKey.load(home)
    token = key.sign(Grant("c", NOW + 60))
    assert key.verify(token, now=NOW + 59).conversation_id == "c"
    assert _refusal(key, token, now=NOW + 60) == "expired"


def test_one_changed_character_of_the_payload_or_signature_is_refused(home: Path) -> None:
    key = LinkKey.load(home)
    token = key.sign(Grant("slack:T1:C1:1", NOW + 60))
    version, payload, signature = token.split(".")
    for index in (0, len(payload) // 2, len(payload) - 1):
        assert _refusal(key, f"{version}.{_flip(payload, index)}.{signature}") == "tampered"
    for index in (0, len(signature) // 2):
        assert _refusal(key, f"{version}.{payload}.{_flip(signature, index)}") == "tampered"


def test_a_payload_rewritten_for_another_conversation_is_refused(home: Path) -> None:
    key = LinkKey.load(home)
    version, _, signature = key.sign(Grant("slack:T1:C1:1", NOW + 60)).split(".")
    forged = base64.urlsafe_b64encode(
        json.dumps({"c": "slack:T1:D1:D1", "e": int(NOW + 60)}).encode()
    ).decode()
    assert _refusal(key, f"{version}.{forged.rstrip('=')}.{signature}") == "tampered"


def test_a_token_signed_with_another_key_is_refused(home: Path, tmp_path: Path) -> None:
    other_home = tmp_path / "other"
    other_home.mkdir()
    token = LinkKey.load(other_home).sign(Grant("c", NOW + 60))
    assert _refusal(LinkKey.load(home), token) == "tampered"


def test_another_version_is_refused(home: Path) -> None:
    key = LinkKey.load(home)
    token = key.sign(Grant("c", NOW + 60))
    assert _refusal(key, "v2" + token[2:]) == "malformed"


def test_an_oversized_token_is_refused_before_decoding(home: Path) -> None:
    key = LinkKey.load(home)
    token = key.sign(Grant("c" * MAX_TOKEN_CHARS, NOW + 60))
    assert len(token) > MAX_TOKEN_CHARS
    assert _refusal(key, token) == "malformed"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "v1",
        "v1..",
        "v1.a.b.c",
        "v1.eyJj!.AAAA",
        "v1.eyJj.AA+A",
        "v1.eyJj.AA/A",
        "v1.eyJj.A",  # not a whole base64 quantum
        "v1.eyJj.ÅÅÅÅ",
    ],
)
def test_a_token_that_is_not_base64url_is_refused(home: Path, token: str) -> None:
    assert _refusal(LinkKey.load(home), token) in ("malformed", "tampered")


def test_a_signed_payload_that_is_not_a_grant_is_refused_as_malformed(home: Path) -> None:
    key = LinkKey.load(home)
    payload = base64.urlsafe_b64encode(b'{"c": "x"}').decode().rstrip("=")
    signature = base64.urlsafe_b64encode(key._mac(payload)).decode().rstrip("=")
    assert _refusal(key, f"v1.{payload}.{signature}") == "malformed"


def test_the_key_file_is_made_once_readable_by_the_owner_only(home: Path) -> None:
    first = LinkKey.load(home)
    path = home / KEY_FILE
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o600
    made = path.read_bytes()
    assert len(made) >= 32
    token = first.sign(Grant("c", NOW + 60))
    again = LinkKey.load(home)
    assert path.read_bytes() == made
    assert again.verify(token, now=NOW).conversation_id == "c"
    # No temporary file is left behind.
    assert sorted(p.name for p in home.iterdir()) == [KEY_FILE]


def test_two_loads_on_a_fresh_home_agree(home: Path) -> None:
    one, two = LinkKey.load(home), LinkKey.load(home)
    token = one.sign(Grant("c", NOW + 60))
    assert two.verify(token, now=NOW).conversation_id == "c"


def test_a_key_made_by_a_racing_process_wins(home: Path) -> None:
    """The first key on disk is the one every process signs with (os.link, not rename)."""
    (home / KEY_FILE).write_bytes(b"k" * 32)
    os.chmod(home / KEY_FILE, 0o600)
    token = LinkKey(b"k" * 32).sign(Grant("c", NOW + 60))
    assert LinkKey.load(home).verify(token, now=NOW).conversation_id == "c"


def test_a_symlinked_key_file_is_refused(home: Path, tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    planted.write_bytes(b"p" * 32)
    (home / KEY_FILE).symlink_to(planted)
    with pytest.raises(OSError):
        LinkKey.load(home)


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        LinkKey(b"short")


def test_a_key_others_can_read_is_made_owner_only(home: Path) -> None:
    path = home / KEY_FILE
    path.write_bytes(b"k" * 32)
    os.chmod(path, 0o644)
    token = LinkKey.load(home).sign(Grant("c", NOW + 60))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert LinkKey(b"k" * 32).verify(token, now=NOW).conversation_id == "c"
