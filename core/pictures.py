"""Pictures as bytes: a matplotlib figure made and saved without pyplot, a GUI or global
state, so identical input gives identical bytes (charts can be compared, cached, uploaded once).

matplotlib is imported by the functions, never at module level: a chat start pays nothing
for it, only the first picture does (about half a second)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from core.files import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PictureFormat = Literal["png", "svg"]
FORMATS: tuple[PictureFormat, ...] = get_args(PictureFormat)
DPI = 100  # pixels per inch: a figure of 12 x 6 inches is 1200 x 600 px

# What a saved file records of when and by what it was made (the SVG's date): nothing.
_METADATA: dict[PictureFormat, dict[str, str | None]] = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
}


class PictureError(ValueError):
    """A picture cannot be made as asked (an unknown format); the message says what works."""


def format_for(path: Path) -> PictureFormat:
    """The format a file name asks for, by its suffix (`.png`, `.svg`, any case)."""
    suffix = path.suffix.lower().lstrip(".")
    for known in FORMATS:
        if suffix == known:
            return known
    shown = f"`{path.suffix}`" if path.suffix else "no suffix"
    raise PictureError(
        f"{path.name}: {shown} is not a picture format; "
        f"name the file .{' or .'.join(FORMATS)} (e.g. chart.png)"
    )


def new_figure(width_px: int, height_px: int) -> Figure:
    """A blank white figure of exactly `width_px` x `height_px` pixels (when saved as PNG)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, facecolor="white")


def figure_bytes(figure: Figure, fmt: PictureFormat) -> bytes:
    """`figure` saved as PNG or SVG: the same figure gives the same bytes every time."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if fmt not in FORMATS:
        raise PictureError(f"{fmt!r} is not a picture format; use one of {', '.join(FORMATS)}")
    FigureCanvasAgg(figure)  # Agg: renders in memory, never opens a window
    buffer = io.BytesIO()
    # SVG element ids are random unless salted; its text stays text (searchable, smaller).
    with matplotlib.rc_context({"svg.hashsalt": "raven-bot", "svg.fonttype": "none"}):
        figure.savefig(buffer, format=fmt, dpi=DPI, metadata=_METADATA[fmt])
    return buffer.getvalue()


def check_destination(path: Path) -> PictureFormat:
    """The format `path` asks for, once it is a place a picture can be written: its
    directory exists and it is not itself a directory (checked before any drawing)."""
    if path.is_dir():
        raise PictureError(f"cannot write {path}: it is a directory; give a file name")
    fmt = format_for(path)
    if not path.parent.is_dir():
        raise PictureError(
            f"cannot write {path}: the directory {path.parent} does not exist; create it first"
        )
    return fmt


def save_picture(path: Path, data: bytes) -> None:
    """Write a picture whole or not at all (a crash never leaves half a PNG)."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise PictureError(f"cannot write {path}: {exc.strerror or exc}") from None
