"""Sentence embedders for memory recall: the protocol and the local MiniLM model.

The MiniLM embedder runs all-MiniLM-L6-v2 as an int8 ONNX graph (`memory.minilm`: no torch),
offline and on CPU, from the model folder `make install` builds. It loads on first use, in a
fraction of a second; loading and encoding run in a worker thread, so the event loop never
waits on them. Without the model, `select_embedder` returns None and recall is keyword-only
(§5.4).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from memory.minilm import MiniLMEncoder, default_model_dir, model_name

log = logging.getLogger(__name__)

EmbedderMode = Literal["auto", "semantic", "keyword"]
Vectors = NDArray[np.float32]

MINILM_DIMENSION = 384


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors of a fixed dimension."""

    @property
    def name(self) -> str:
        """Model id and dimension, e.g. `minilm-l6-v2-int8/384`; index files record it."""
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector `embed` returns."""
        ...

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Return an (n, dimension) float32 array, one L2-normalized row per text."""
        ...


class EmbedderUnavailable(RuntimeError):
    """Semantic mode was required but the MiniLM model cannot be used."""


def normalize_rows(vectors: NDArray[Any]) -> Vectors:
    """L2-normalize each row (zero rows stay zero) as contiguous float32."""
    arr = np.ascontiguousarray(vectors, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {arr.shape}")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


def semantic_unavailable_reason() -> str | None:
    """Why the MiniLM embedder cannot be used, or None when it can (for `doctor`)."""
    for module in ("onnxruntime", "tokenizers"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"{module} is not installed (`make install` installs it)"
    # find_spec imports nothing heavy and the model is checked by path, so `doctor` stays fast.
    model_dir = default_model_dir()
    for name in ("model.onnx", "tokenizer.json", "settings.json"):
        if not (model_dir / name).is_file():
            return f"the MiniLM model is missing: no {model_dir / name} (`make install` builds it)"
    return None


@functools.cache
def _shared_encoder(model_dir: Path) -> MiniLMEncoder:
    """One encoder per model directory and process. Its weights are read-only after loading
    and encoding keeps no state, so every embedder in the process (several runtimes in one
    test process, the CLI's and the bot's) can share it instead of each loading its own."""
    return MiniLMEncoder(model_dir)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) on CPU, loaded once on first use, offline."""

    def __init__(self, *, model: MiniLMEncoder | None = None) -> None:
        """`model`: an already-loaded encoder to share (else loaded on first use)."""
        self._model = model
        self._model_dir = default_model_dir()
        self._name: str | None = None
        self._load_lock = asyncio.Lock()
        # One encode at a time: the model is shared, and one encode keeps one core busy.
        self._encode_lock = asyncio.Lock()
        self.load_seconds: float | None = None

    @property
    def name(self) -> str:
        """`minilm-l6-v2-int8-<build>/384`: an index built with another model (or build)
        is rebuilt."""
        if self._name is None:
            self._name = model_name(self._model_dir)
        return f"{self._name}/{MINILM_DIMENSION}"

    @property
    def dimension(self) -> int:
        """384."""
        return MINILM_DIMENSION

    @property
    def model(self) -> MiniLMEncoder | None:
        """The loaded encoder, or None before the first `load`/`embed`."""
        return self._model

    @property
    def loaded(self) -> bool:
        """True once the model is in memory."""
        return self._model is not None

    def _load_sync(self) -> MiniLMEncoder:
        started = time.perf_counter()
        model = _shared_encoder(self._model_dir)
        self.load_seconds = time.perf_counter() - started
        log.info("memory: loaded MiniLM embedder in %.2fs", self.load_seconds)
        return model

    async def load(self) -> None:
        """Load the model (once; concurrent callers wait for the same load)."""
        async with self._load_lock:
            if self._model is None:
                self._model = await asyncio.to_thread(self._load_sync)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Encode `texts` in a worker thread."""
        if not texts:
            return np.zeros((0, MINILM_DIMENSION), dtype=np.float32)
        await self.load()
        model = self._model
        assert model is not None
        async with self._encode_lock:
            vectors = await asyncio.to_thread(model.encode, list(texts))
        return normalize_rows(vectors)


def select_embedder(mode: EmbedderMode) -> Embedder | None:
    """The embedder for `mode`: None means keyword-only recall.

    `auto` uses MiniLM when the extra is importable, `keyword` never does, `semantic` raises
    EmbedderUnavailable (with `semantic_unavailable_reason()`) when it cannot.
    """
    if mode == "keyword":
        return None
    reason = semantic_unavailable_reason()
    if reason is None:
        return MiniLMEmbedder()
    if mode == "semantic":
        raise EmbedderUnavailable(reason)
    log.info("memory: keyword-only recall (%s)", reason)
    return None
