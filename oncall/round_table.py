"""A campaign's rounds and measurements as a table, from the record: one row per round (how
it ended, how many values of the metric it measured, its best and its last), posted with
the final report under the reporter's words, which the report gate checked.

Chat draws it natively (Slack's table block, Discord's embed fields; the console aligns it).
Only the last rounds are rows, so a long campaign's table stays within what chat draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.pipe_table import pipe_table
from oncall.model import Direction, Measurement, RoundSummary
from oncall.report_gate import _ENDED as ENDED
from oncall.report_gate import _fmt as shown_value

# Rows at most (Slack draws 100 rows with the header; Discord 250 fields).
MAX_ROWS = 50


def rounds_table(
    metric: str,
    direction: Direction,
    rounds: Sequence[RoundSummary],
    measurements: Sequence[Measurement],
    *,
    tolerance: float = 1e-3,
) -> str:
    """`Rounds:` and the table (the last MAX_ROWS rounds, saying so), or "" with no round."""
    if not rounds:
        return ""
    ordered = sorted(rounds, key=lambda r: r.round)
    kept = ordered[-MAX_ROWS:]
    pick = min if direction == "min" else max
    rows = []
    for r in kept:
        values = [m for m in measurements if m.name == metric and m.round == r.round]
        finite = [m.value for m in values if math.isfinite(m.value)]
        key = r.wake_reason or (r.state or "running")
        code = f" (exit code {r.exit_code})" if r.exit_code is not None else ""
        rows.append(
            [
                str(r.round),
                f"{ENDED.get(key, key)}{code}",
                str(len(values)),
                shown_value(pick(finite), tolerance) if finite else "—",
                shown_value(values[-1].value, tolerance) if values else "—",
            ]
        )
    head = (
        "Rounds" if len(kept) == len(ordered) else f"The last {len(kept)} of {len(ordered)} rounds"
    )
    header = ("Round", "Ended", f"{metric} values", f"Best {metric}", f"Last {metric}")
    return f"{head}:\n\n{pipe_table(header, rows)}"
