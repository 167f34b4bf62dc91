"""The explicit campaign syntax, so campaigns start without a model:

    campaign: <goal> | machine: local | run: <command> | metric: <name> <min|max> | budget: 2h

Optional fields: `pattern: REGEX` (one group around the value), `json_key: KEY` (read the
metric from JSON lines), `wake: 5m`, `baseline: 1.2`, `rounds: 3`, `stall: 10m`,
`margin: 0.5`, `poll: 5s`, and for Slurm `partition: NAME`, `cpus: 4`, `time: 30m` (a
round's time limit). Fields go in any order; the goal comes first, or anywhere as
`| goal: …` (then the line may start with a field: `campaign: machine: local | goal: …`).
The command may itself contain `|` (a pipe), but not `| word:`, which starts a field: an
unknown field name (`| colour: red`) is kept as a field, so the tool refuses it by name and
lists the valid ones instead of reading it as part of the previous value. Values are
validated by the tool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

REQUIRED_FIELDS = ("machine", "run", "metric", "budget")
# The optional fields with the example value `help` shows for each.
OPTIONAL_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "pattern": "REGEX",
        "json_key": "KEY",
        "wake": "5m",
        "baseline": "1.2",
        "rounds": "3",
        "stall": "10m",
        "margin": "0.5",
        "poll": "5s",
        "partition": "NAME",
        "cpus": "4",
        "time": "30m",
    }
)
FIELDS = (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)
EXAMPLE = (
    "campaign: lower the loss | machine: local | run: python train.py | metric: loss min "
    "| budget: 2h"
)
# For `help`, from the fields above so it lists every field the parser splits on.
HELP = (
    f"`{EXAMPLE}` runs a job round by round on its metric (`min`/`max`) within the budget "
    "after you approve it; `campaign: resume ID` resumes a paused one. Options "
    "(`| name: value`): "
    + ", ".join(f"`{name}`" for name in OPTIONAL_FIELDS)
    + " (last three: Slurm only)."
)
_START = re.compile(r"^\s*campaign\s*:\s*(?P<rest>.+)$", re.IGNORECASE)
# A field starts at `| name:` for any name (known or not: an unknown one is refused by name).
_SPLIT = re.compile(r"\s+\|\s*(?=[A-Za-z_][A-Za-z0-9_]*\s*:)")
_FIELD = re.compile(
    r"^(?P<key>[a-z_][a-z0-9_]*)\s*:\s*(?P<value>.*?)\s*$", re.IGNORECASE | re.DOTALL
)


def parse_campaign(text: str) -> dict[str, str] | None:
    """The fields of the first `campaign:` line of `text` (goal included), else None."""
    for line in text.splitlines():
        match = _START.match(line)
        if match is None:
            continue
        first, *parts = _SPLIT.split(match["rest"])
        fields: dict[str, str] = {}
        leading = _FIELD.match(first.strip())
        if leading is not None and leading["key"].lower() in (*FIELDS, "goal"):
            parts.insert(0, first)  # a field first: the goal is given as `goal:` (or missing)
        else:
            fields["goal"] = first.strip()
        for part in parts:
            field = _FIELD.match(part.strip())
            if field is not None:
                fields[field["key"].lower()] = field["value"]
        fields.setdefault("goal", "")
        return fields
    return None
