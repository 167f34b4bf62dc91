"""`make bench`: every `bench/*.py` in turn (its own output as it goes), then one table of
every goal they measured: metric, value, goal, met or missed. A bench that fails stops the
run, as before; the table is printed either way.

Run: `.venv/bin/python bench/run_all.py [NAME ...]` (names without `.py`: only those)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import json
import os
import subprocess
import tempfile

from bench.lib.figures import FIGURES_ENV
from bench.lib.machine import python_speed_ms

BENCH = Path(__file__).resolve().parent


def main(names: list[str]) -> int:
    scripts = sorted(
        path
        for path in BENCH.glob("*.py")
        if path.name != Path(__file__).name and (not names or path.stem in names)
    )
    with tempfile.NamedTemporaryFile(prefix="raven-bench-", suffix=".jsonl") as figures:
        env = {**os.environ, FIGURES_ENV: figures.name}
        code = 0
        speeds: dict[str, float] = {}
        for script in scripts:
            speeds[script.stem] = speed = python_speed_ms()
            print(f"== {script.relative_to(BENCH.parent)} (machine: {speed:.0f} ms)", flush=True)
            code = subprocess.run([sys.executable, str(script)], env=env, check=False).returncode
            if code != 0:
                print(f"{script.name} failed (exit {code}); stopping", flush=True)
                break
        rows = [json.loads(line) for line in Path(figures.name).read_text().splitlines()]
    print_table(rows, speeds)
    return code


def print_table(rows: list[dict[str, object]], speeds: dict[str, float]) -> None:
    """One line per goal: bench, metric, value, goal, value ÷ baseline, verdict, and the
    machine's speed just before its bench (`bench.lib.machine`)."""
    if not rows:
        print("\nno goals were measured")
        return
    cells = [
        (
            str(row["bench"]),
            str(row["metric"]),
            f"{float(str(row['value'])):.3g} {row['unit']}".strip(),
            str(row["goal"]),
            _ratio(row.get("value"), row.get("baseline")),
            "met" if row["met"] else "MISSED",
            f"{speeds[str(row['bench'])]:.0f}" if str(row["bench"]) in speeds else "-",
        )
        for row in rows
    ]
    headers = ("bench", "metric", "value", "goal", "÷ baseline", "", "machine ms")
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    met = sum(1 for row in rows if row["met"])
    print(f"\nAll goals ({met} of {len(rows)} met; measured on this machine, never asserted;")
    print("÷ baseline: the figure before the work, from the issue that set the goal;")
    print(
        "machine ms: 10⁶ Python additions just before that bench, lower is faster: "
        f"{min(speeds.values()):.0f}-{max(speeds.values()):.0f} ms in this run)"
        if speeds
        else "machine ms: not measured)"
    )
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for cell in cells:
        print("  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip())


def _ratio(value: object, baseline: object) -> str:
    """value ÷ baseline (`x0.12`), `-` without a baseline."""
    if not isinstance(baseline, int | float) or not baseline:
        return "-"
    return f"x{float(str(value)) / baseline:.2f}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
