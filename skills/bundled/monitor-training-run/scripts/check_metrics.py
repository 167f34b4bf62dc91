#!/usr/bin/env python3
"""Read a training log and say whether the run is healthy, stalled or diverging (stdlib only).

Usage:
    python check_metrics.py train.log --metric loss [--direction min|max] [--patience 50]
                            [--min-delta 0.001] [--giveback 0.5] [--window 5]

Input lines may be JSON objects (`{"step": 10, "loss": 0.52}`), CSV with a header row that
names the metric, or free text such as `step 10 loss=0.52` (read with a regex). Checks, in
order: any NaN/inf value (NAN); the mean of the last --window values gave back more than
--giveback of the improvement from the first value to the best (DIVERGED); no improvement
better than --min-delta in the last --patience values (STALLED); otherwise HEALTHY.
Exit status: 0 HEALTHY, 3 STALLED, 4 DIVERGED or NAN, 5 no values found.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
from pathlib import Path

EXIT = {"HEALTHY": 0, "STALLED": 3, "DIVERGED": 4, "NAN": 4, "NO_DATA": 5}
NUMBER = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)|[-+]?(?:nan|inf(?:inity)?))"


def read_values(path: Path, metric: str) -> list[float]:
    """Every value of `metric` in the file, in order (NaN and inf included)."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if lines and metric in [c.strip() for c in next(csv.reader([lines[0]]))]:
        rows = csv.DictReader(lines)
        return [v for row in rows if (v := to_float(row.get(metric))) is not None]
    pattern = re.compile(rf"\b{re.escape(metric)}\b\s*[=:]?\s*{NUMBER}", re.IGNORECASE)
    values: list[float] = []
    for line in lines:
        value = from_json(line, metric) if line.lstrip().startswith("{") else None
        if value is None and (match := pattern.search(line)):
            value = to_float(match.group(1))
        if value is not None:
            values.append(value)
    return values


def from_json(line: str, metric: str) -> float | None:
    """The metric's value in a JSON-object line, if it has one."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return to_float(record.get(metric)) if isinstance(record, dict) else None


def to_float(raw: object) -> float | None:
    """A float (NaN/inf allowed) or None when the cell is empty or not a number."""
    if raw is None or isinstance(raw, bool):
        return None
    try:
        return float(str(raw).strip())
    except ValueError:
        return None


def verdict(values: list[float], args: argparse.Namespace) -> tuple[str, str]:
    """(verdict, reason) for the series, following the order in the module docstring."""
    if not values:
        return "NO_DATA", f"no values of {args.metric!r} found"
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        return "NAN", f"value #{bad[0] + 1} of {len(values)} is {values[bad[0]]}"
    sign = 1.0 if args.direction == "min" else -1.0  # compare as "lower is better"
    scores = [sign * v for v in values]
    best_at = min(range(len(scores)), key=scores.__getitem__)
    best, first = scores[best_at], scores[0]
    recent = statistics.fmean(scores[-args.window :])
    gained = first - best
    if gained > 0 and recent - best > args.giveback * gained:
        return "DIVERGED", (
            f"recent mean {sign * recent:.6g} gave back {(recent - best) / gained:.0%} of the "
            f"improvement from {sign * first:.6g} to the best {sign * best:.6g}"
        )
    since_best = len(values) - 1 - best_at
    if len(values) > args.patience and since_best >= args.patience:
        return "STALLED", f"no new best for {since_best} values (best {sign * best:.6g})"
    # A best that beats the value `patience` points earlier by less than min_delta is a plateau.
    if len(values) > args.patience:
        before = min(scores[: len(scores) - args.patience])
        if before - best < args.min_delta:
            return "STALLED", (
                f"improved by only {before - best:.3g} over the last {args.patience} values "
                f"(min delta {args.min_delta})"
            )
    return "HEALTHY", f"best {sign * best:.6g} at value #{best_at + 1} of {len(values)}"


def main(argv: list[str] | None = None) -> int:
    """Print a summary and the verdict; the exit status encodes the verdict."""
    parser = argparse.ArgumentParser(description="Check a training log for stall or divergence.")
    parser.add_argument("log", type=Path)
    parser.add_argument("--metric", default="loss")
    parser.add_argument("--direction", choices=("min", "max"), default="min")
    parser.add_argument("--patience", type=int, default=50, help="values without a new best")
    parser.add_argument("--min-delta", type=float, default=1e-3)
    parser.add_argument("--giveback", type=float, default=0.5, help="share of progress lost")
    parser.add_argument("--window", type=int, default=5, help="values in the recent mean")
    args = parser.parse_args(argv)
    if args.patience < 1 or args.window < 1:
        parser.error("--patience and --window must be at least 1")
    try:
        values = read_values(args.log, args.metric)
    except OSError as exc:
        print(f"check_metrics: cannot read {args.log}: {exc.strerror}", file=sys.stderr)
        return EXIT["NO_DATA"]
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        print(f"{args.metric}: {len(values)} values, first {values[0]:.6g}, last {values[-1]:.6g}")
        print(f"range: min {min(finite):.6g}, max {max(finite):.6g}")
    name, reason = verdict(values, args)
    print(f"verdict: {name} ({reason})")
    return EXIT[name]


if __name__ == "__main__":
    sys.exit(main())
