"""Headless Chromium (Debian's `chromium` package) driven from the command line over pages
served on 127.0.0.1: screenshots, the DOM after scripts ran, and what the browser logged.

Each call is one short-lived browser with its own profile directory, no proxy and no name
resolution except 127.0.0.1 (nothing can leave the machine), and a timeout. Nothing is
installed here: where Chromium is absent the tests skip and say how to install it.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
from PIL import Image

INSTALL: Final = "apt-get install chromium"
TIMEOUT_SECONDS: Final = 30.0
MAX_HEIGHT: Final = 16_000  # px: a whole-page screenshot taller than this is a page too long
# Our pages' background colours: the page itself, and the header and footer bars (with their
# one-pixel border lines), which span the whole width on purpose.
BACKGROUNDS: Final = frozenset({(255, 255, 255), (246, 247, 249), (221, 221, 221)})


def chromium() -> str | None:
    """The Chromium binary on PATH, if any."""
    return shutil.which("chromium")


@dataclass(frozen=True)
class Visit:
    """What one browser run left: its output (the DOM when asked for) and its log."""

    stdout: str
    log: str

    def csp_violations(self) -> list[str]:
        """Log lines where the page broke its own Content-Security-Policy."""
        return [line for line in self.log.splitlines() if "Content Security Policy" in line]

    def script_errors(self) -> list[str]:
        """Console lines of scripts that threw (the page's own script must not)."""
        return [line for line in self.log.splitlines() if "Uncaught" in line]


async def visit(url: str, *, width: int, height: int, action: Iterable[str]) -> Visit:
    """Load `url` in a fresh headless Chromium with a `width` × `height` window and do
    `action` (`--screenshot=FILE` or `--dump-dom`); the browser's console goes to its log."""
    binary = chromium()
    if binary is None:
        raise RuntimeError(f"Chromium is not installed: {INSTALL}")
    with tempfile.TemporaryDirectory(prefix="raven-chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--force-device-scale-factor=1",
            "--proxy-server=direct://",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            *action,
            url,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"Chromium did not finish {url} in {TIMEOUT_SECONDS} s") from None
    log = err.decode(errors="replace")
    if process.returncode != 0:
        raise AssertionError(f"Chromium exited with {process.returncode} on {url}:\n{log[-2000:]}")
    return Visit(out.decode(errors="replace"), log)


async def screenshot(url: str, path: Path, *, width: int, height: int) -> Visit:
    """A `width` × `height` screenshot of `url` saved as PNG at `path`, and the page's DOM
    after its scripts ran (serialised, in `stdout`)."""
    action = [f"--screenshot={path}", "--dump-dom"]
    shown = await visit(url, width=width, height=height, action=action)
    if not await asyncio.to_thread(path.is_file):
        raise AssertionError(f"Chromium wrote no screenshot of {url}:\n{shown.log[-2000:]}")
    return shown


async def whole_page(url: str, path: Path, *, width: int, height: int) -> Visit:
    """A screenshot of all of `url` at `width`: the window is made taller (twice, up to
    `MAX_HEIGHT`) until the page ends above its bottom, which is then blank."""
    while True:
        shown = await screenshot(url, path, width=width, height=height)
        if await asyncio.to_thread(_ends_blank, path):
            return shown
        if height >= MAX_HEIGHT:
            raise AssertionError(f"{url} is taller than {MAX_HEIGHT} px at {width} px wide")
        height = min(2 * height, MAX_HEIGHT)


def ends_blank(image: Image.Image, rows: int = 20) -> bool:
    """Whether the last `rows` rows are all white: the page ended above them."""
    width, height = image.size
    bottom = image.crop((0, height - rows, width, height))
    return colours(bottom) == {(255, 255, 255)}


def _ends_blank(path: Path) -> bool:
    with Image.open(path) as image:
        return ends_blank(image)


def rgb(colour: str) -> tuple[int, int, int]:
    """`#2ca02c` as (44, 160, 44)."""
    value = colour.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def has_run(image: Image.Image, colour: tuple[int, int, int], length: int) -> bool:
    """Whether some row has `length` pixels of exactly `colour` side by side: a filled shape
    that wide (a badge or a legend swatch in the same colour is far narrower)."""
    same = (np.asarray(image.convert("RGB")) == np.array(colour, dtype=np.uint8)).all(axis=2)
    if same.shape[1] < length:
        return False
    ends = np.pad(same.cumsum(axis=1, dtype=np.int32), ((0, 0), (1, 0)))
    return bool(((ends[:, length:] - ends[:, :-length]) == length).any())


def count(image: Image.Image, colour: tuple[int, int, int]) -> int:
    """How many pixels are exactly `colour`."""
    same = (np.asarray(image.convert("RGB")) == np.array(colour, dtype=np.uint8)).all(axis=2)
    return int(same.sum())


def colours(image: Image.Image) -> set[tuple[int, int, int]]:
    """The colours in `image`."""
    flat = np.asarray(image.convert("RGB")).reshape(-1, 3)
    return {(int(r), int(g), int(b)) for r, g, b in np.unique(flat, axis=0).tolist()}


def foreign_in_right_edge(image: Image.Image, columns: int) -> set[tuple[int, int, int]]:
    """Colours other than the page's backgrounds in the rightmost `columns` columns: the page
    has padding there, so anything else is content running past the window's edge."""
    width, height = image.size
    strip = image.crop((width - columns, 0, width, height))
    return colours(strip) - BACKGROUNDS
