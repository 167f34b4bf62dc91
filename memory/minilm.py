"""all-MiniLM-L6-v2 without torch: its BERT encoder evaluated with numpy.

The model is small (6 layers, 384 wide, 12 heads) and only ever encodes sentences on a CPU,
so the whole forward pass is a dozen matrix products per layer. numpy's BLAS releases the
interpreter lock while it multiplies, the weights load from the package's safetensors file
in a fraction of a second, and nothing of torch (a 750 MB install, seconds to import) is
needed. The vectors are the ones sentence-transformers computes (mean pooling over the
attention mask, then L2 normalization), to float32 rounding: a test compares them with
vectors recorded from sentence-transformers.

Written by hand rather than through a library because every library that runs this model
pulls torch or fetches an ONNX export from a hub at run time, which this bot cannot do.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float32]

_SQRT_HALF = np.float32(1 / math.sqrt(2))


@dataclass(frozen=True)
class _Layer:
    qkv: Array  # (384, 3·384): query, key and value projections side by side
    qkv_bias: Array
    attention_out: Array
    attention_out_bias: Array
    attention_norm: tuple[Array, Array]
    up: Array
    up_bias: Array
    down: Array
    down_bias: Array
    output_norm: tuple[Array, Array]


class MiniLMEncoder:
    """Sentences → L2-normalized 384-d float32 vectors, from a sentence-transformers
    model directory (`config.json`, `model.safetensors`, `tokenizer.json`)."""

    def __init__(self, model_dir: Path) -> None:
        from safetensors.numpy import load_file
        from threadpoolctl import ThreadpoolController
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        st_config = json.loads(
            (model_dir / "sentence_bert_config.json").read_text(encoding="utf-8")
        )
        self.dimension: int = int(config["hidden_size"])
        self._heads: int = int(config["num_attention_heads"])
        self._eps = np.float32(config["layer_norm_eps"])
        self.max_tokens: int = int(st_config["max_seq_length"])
        weights = load_file(str(model_dir / "model.safetensors"))
        self._word = weights["embeddings.word_embeddings.weight"]
        self._position = weights["embeddings.position_embeddings.weight"]
        self._token_type = weights["embeddings.token_type_embeddings.weight"][0]
        self._embedding_norm = _norm(weights, "embeddings.LayerNorm")
        self._layers = [
            _layer(weights, f"encoder.layer.{i}") for i in range(int(config["num_hidden_layers"]))
        ]
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(self.max_tokens)
        tokenizer.no_padding()  # batches are padded here, to their own longest text
        self._tokenizer = tokenizer
        self._threads = ThreadpoolController()  # finds the BLAS libraries once

    def encode(self, texts: list[str], batch_size: int = 16) -> Array:
        """One normalized row per text. Texts of similar length are batched together, so
        little work is spent on padding. BLAS runs on one thread: measured faster here for
        these small products (its idle threads spin against the element-wise work), and it
        leaves the other cores to the bot."""
        encodings = self._tokenizer.encode_batch(texts)
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with self._threads.limit(limits=1, user_api="blas"):
            for start in range(0, len(order), batch_size):
                chosen = order[start : start + batch_size]
                out[chosen] = self._encode_batch([ids[i] for i in chosen])
        return out

    def _encode_batch(self, ids: list[NDArray[np.int64]]) -> Array:
        width = max(len(i) for i in ids)
        tokens = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.float32)
        for row, sequence in enumerate(ids):
            tokens[row, : len(sequence)] = sequence
            mask[row, : len(sequence)] = 1.0
        hidden = self._word[tokens] + self._position[:width] + self._token_type
        hidden = _layer_norm(hidden, self._embedding_norm, self._eps)
        # Padding is never attended to: a large negative score before the softmax.
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in self._layers:
            hidden = self._block(hidden, layer, blocked)
        summed = (hidden * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        normalized: Array = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return normalized

    def _block(self, hidden: Array, layer: _Layer, blocked: Array) -> Array:
        batch, width, size = hidden.shape
        head = size // self._heads
        # Linear layers as one 2-D product over every token of the batch (a stacked 3-D
        # product would call BLAS once per text).
        flat = hidden.reshape(batch * width, size)
        qkv = (flat @ layer.qkv + layer.qkv_bias).reshape(batch, width, 3 * size)
        q, k, v = (
            qkv[..., i * size : (i + 1) * size]
            .reshape(batch, width, self._heads, head)
            .transpose(0, 2, 1, 3)
            for i in range(3)
        )
        scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(1 / math.sqrt(head)) + blocked
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores, out=scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        context = (
            (weights @ np.ascontiguousarray(v)).transpose(0, 2, 1, 3).reshape(batch * width, size)
        )
        attended = context @ layer.attention_out + layer.attention_out_bias
        flat = _layer_norm(attended + flat, layer.attention_norm, self._eps)
        up = _gelu(flat @ layer.up + layer.up_bias)
        down = up @ layer.down + layer.down_bias
        return _layer_norm(down + flat, layer.output_norm, self._eps).reshape(batch, width, size)


def _norm(weights: dict[str, Any], prefix: str) -> tuple[Array, Array]:
    return weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]


def _layer(weights: dict[str, Any], prefix: str) -> _Layer:
    """One encoder layer, its linear weights transposed once for `x @ W`."""

    def linear(name: str) -> tuple[Array, Array]:
        return (
            np.ascontiguousarray(weights[f"{prefix}.{name}.weight"].T),
            weights[f"{prefix}.{name}.bias"],
        )

    projections = [linear(f"attention.self.{part}") for part in ("query", "key", "value")]
    attention_out, attention_out_bias = linear("attention.output.dense")
    up, up_bias = linear("intermediate.dense")
    down, down_bias = linear("output.dense")
    return _Layer(
        qkv=np.ascontiguousarray(np.concatenate([w for w, _ in projections], axis=1)),
        qkv_bias=np.concatenate([b for _, b in projections]),
        attention_out=attention_out,
        attention_out_bias=attention_out_bias,
        attention_norm=_norm(weights, f"{prefix}.attention.output.LayerNorm"),
        up=up,
        up_bias=up_bias,
        down=down,
        down_bias=down_bias,
        output_norm=_norm(weights, f"{prefix}.output.LayerNorm"),
    )


def _layer_norm(x: Array, norm: tuple[Array, Array], eps: np.float32) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    weight, bias = norm
    result: Array = centered / np.sqrt(variance + eps) * weight + bias
    return result


def _gelu(x: Array) -> Array:
    """BERT's exact GELU, x·Φ(x), in place, with erf from Abramowitz & Stegun 7.1.26
    (absolute error under 1.5e-7, below float32 rounding of the activations); numpy has no
    erf. In place because this is the widest array of the pass (tokens × 1536)."""
    z = x * _SQRT_HALF
    negative = z < 0
    np.abs(z, out=z)
    t = z * np.float32(0.3275911)
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(coefficient)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x|/√2)
    np.negative(poly, out=poly, where=~negative)  # erf(x/√2) - 1 where x ≥ 0, else -erf(…) - 1
    poly += np.where(negative, np.float32(-1.0), np.float32(1.0))  # now erf(x/√2)
    poly += 1.0
    poly *= 0.5
    x *= poly
    return x
