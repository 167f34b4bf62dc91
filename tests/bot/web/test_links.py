"""Where posted links point: the public URL, else the address the viewer listens on."""

from __future__ import annotations

import socket

from bot.web.links import base_url as base_of
from bot.web.settings import WebSettings


def base_url(settings: WebSettings) -> str:
    """The links' base as the bot computes it from these settings."""
    return base_of(settings.web_public_url, settings.web_host, settings.web_port)


def test_links_use_the_public_url_when_set() -> None:
    settings = WebSettings(web_port=8787, web_public_url="https://raven.example.com/team/")
    assert base_url(settings) == "https://raven.example.com/team"


def test_links_name_the_listening_address() -> None:
    assert base_url(WebSettings(web_port=8787)) == "http://127.0.0.1:8787"
    assert base_url(WebSettings(web_port=8787, web_host="::1")) == "http://[::1]:8787"


def test_listening_everywhere_links_name_this_machine_not_every_address() -> None:
    for everywhere in ("0.0.0.0", "::"):
        url = base_url(WebSettings(web_port=8787, web_host=everywhere))
        assert url == f"http://{socket.getfqdn()}:8787"
