"""The report gate of SPEC §9: a campaign closes only through a report that states the baseline
and whose numeric claims about the target metric match recorded measurements.

`check_report` reads a report sentence by sentence (a sentence ends at a newline or at
`.`, `!`, `?` or `;` followed by whitespace) and returns the claims it found and the
mismatches that reject it. `draft_report` writes the factual report the offline policy files;
it passes the gate by construction.

**The baseline rule.** Some sentence that says "baseline", "started at/from", "starting
at/from" or "starting value" must contain the baseline number (within the tolerance). The
baseline is the campaign's recorded one, else the first recorded measurement of the metric;
with neither, there is nothing to state and the rule is waived.

**What counts as a claim about the metric.** Within a sentence, a mention of the metric name
(case-insensitive, as a whole word: `loss` is not mentioned by `val_loss`) opens a window; a
number after it is a claim unless it is one of the *skipped* forms below. The window closes
at the end of the sentence, 12 words or numbers after the last mention, or at another
quantity's name: a word that is not a connector (is, was, of, to, from, reached, fell,
final, best, …, or any word ending in -ed or -ing) and is directly followed by a number
(so in "loss 0.42 and accuracy 93.1", 93.1 is not a loss claim). Numbers before the first
mention, and nan/inf (words, not numbers), are never claims.

Skipped (not claims): percentages (`12%`, `12 percent`); numbers glued to letters or
versions (`3h`, `50M`, `v1.2`, `gpt-4`, `1.2.3`); ids and money (`#42`, `$3`); dates and
clock times; counts: a number after a count word (`round 3`, `step 100`, `exit code 0`) or
before a unit word (`3 rounds`, `12 minutes`, `8 GPUs`), and `3 of 5` / `3/5`.

Kinds of claims: a *value* claim must equal a recorded value of the metric or the baseline;
a *difference* claim (after "by", "a reduction/improvement/drop/change of", or before
"lower/higher/better/worse/less/more") must equal |baseline − v| for a recorded value v; a
*bound* claim (after "below/under/less than/<" or "above/over/more than/>") must be
satisfied by some recorded value (a negated bound, "never went above 0.5", is a claim
about every value and is left unchecked). Equality is relative within `tolerance` (default
1e-3), with an absolute `abs_epsilon` so that zero can match zero. Only finite recorded
values of the metric (by exact name) are evidence; other metrics' values support nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from oncall.model import Budget, Direction, Measurement, RoundSummary

ClaimKind = Literal["value", "difference", "below", "above"]

MAX_WINDOW = 12
_SNIPPET = 160

_SENTENCE_END = re.compile(r"\n+|(?<=[.!?;])\s+")
_BASELINE_WORDS = re.compile(
    r"\bbaselines?\b|\bstart(?:ed|ing)\s+(?:at|from)\b|\bstarting\s+value\b", re.IGNORECASE
)
_TOKEN = re.compile(
    r"""
    (?P<skip>\d{4}-\d{2}-\d{2}(?:[T\s]\d{1,2}:\d{2}(?::\d{2})?)?|\d{1,2}:\d{2}(?::\d{2})?)
    |(?P<num>(?:(?<![\w.)\]])[-+\u2212])?
        (?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*(?:['./-][A-Za-z_][A-Za-z0-9_]*)*)
    |(?P<sym><=|>=|\S)
    """,
    re.VERBOSE,
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words that may stand between the metric's name and its number ("loss fell from 0.9 to").
_CONNECTORS = _words(
    """
    is was were are be been being became becomes become stays stayed stay sat sits hit hits
    got gets get gave gives reach reaches fell falls fall rose rises rise went goes go drop
    drops end ends hold holds held remain remains show shows showed shown read reads peak
    of at to from by in on near around about after before than then and or but vs versus
    with for into between within while when which that this its it a an the as so now still
    just only already also again further finally eventually ultimately overall roughly
    approximately nearly almost exactly circa ca down up final best last first lowest highest
    minimum maximum min max mean median average avg value values score new previous initial
    current record baseline nan inf infinity
    reduction reductions improvement improvements decrease decreases increase increases
    change changes gain gains delta difference
    below under above over less more lower higher better worse smaller greater larger
    exceeding exceeds beneath
    """
)
_VERB_EXCEPTIONS = frozenset({"speed", "seed", "need", "feed", "bed", "red", "embedding"})
_COUNT_WORDS = _words(
    """
    round rounds step steps epoch epochs iteration iterations iter iters measurement
    measurements id seed seeds run runs job jobs attempt attempts trial trials wake version
    batch layer layers gpu gpus node nodes rank day line item phase stage no number code pid
    top port
    """
)
_UNIT_WORDS = _words(
    """
    round rounds step steps epoch epochs iteration iterations iters s sec secs second seconds
    ms min mins minute minutes h hr hrs hour hours day days week weeks gpu gpus cpu cpus core
    cores node nodes job jobs run runs time times x tokens token samples sample examples
    params parameters measurements measurement seeds batches points updates wakes retries
    attempts trials percent pct percentage bytes kb mb gb files lines cells usd dollars
    """
)
_DELTA_BEFORE = _words(
    """by reduction reductions improvement improvements decrease increase drop gain delta
    difference change"""
)
_DELTA_AFTER = _words("lower higher better worse less more smaller larger")
_FILLER = frozenset({"a", "an", "the", "of", "=", ":", "~", "≈"})
_BEFORE_VALUE = _FILLER | {"is", "was", "at"}
_BELOW = frozenset({"below", "under", "beneath", "<", "<=", "≤"})
_ABOVE = frozenset({"above", "over", "exceeding", "exceeds", ">", ">=", "≥"})
_THAN_BELOW = frozenset({"less", "lower", "smaller"})
_THAN_ABOVE = frozenset({"more", "higher", "greater", "larger"})
_CURRENCY = frozenset("#$€£№")
_NEGATIONS = frozenset({"not", "never", "no", "without"})


@dataclass(frozen=True)
class Claim:
    """One numeric claim about the metric: its value as written, its kind, and its check."""

    value: float
    written: str  # the number as the report wrote it
    kind: ClaimKind
    sentence: str  # where it was found (clipped)
    ok: bool = False
    matched_id: int | None = None  # the measurement it matches
    matched_baseline: bool = False  # it matches the baseline (value and difference claims)


@dataclass(frozen=True)
class GateResult:
    """The gate's verdict: accepted, or the mismatches that reject the report."""

    accepted: bool
    mismatches: list[str] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    baseline: float | None = None  # the baseline the report was checked against


_TokenKind = Literal["num", "word", "sym", "skip", "mention"]
_KINDS: Mapping[str, _TokenKind] = MappingProxyType(
    {"num": "num", "word": "word", "sym": "sym", "skip": "skip"}
)


@dataclass(frozen=True)
class _Token:
    kind: _TokenKind
    text: str
    start: int
    end: int
    value: float = 0.0


def _fmt(value: float, tolerance: float = 1e-3) -> str:
    """A recorded value as people write it: 6 significant digits (`1.458`, not
    `1.4580000000000002`), more only when needed to stay well within the gate's relative
    `tolerance` of the recorded value, so a report quoting it still matches."""
    value = float(value)
    if not math.isfinite(value) or value == 0:
        return repr(value)
    for digits in range(6, 18):
        text = f"{value:.{digits}g}"
        if abs(float(text) - value) <= tolerance / 10 * abs(value):
            return text
    return repr(value)


def _close(a: float, b: float, tolerance: float, abs_epsilon: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= max(tolerance * max(abs(a), abs(b)), abs_epsilon)


def _clip(sentence: str) -> str:
    text = " ".join(sentence.split())
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"


# ------------------------------------------------------------------------------ tokens


def _tokens(sentence: str, metric: str) -> list[_Token]:
    """The sentence as numbers, words and symbols, each mention of the metric as one token."""
    mention = re.compile(rf"(?<![\w./-]){re.escape(metric)}(?![\w/-]|\.\w)", re.IGNORECASE)
    spans = [(m.start(), m.end()) for m in mention.finditer(sentence)]
    tokens: list[_Token] = [_Token("mention", sentence[a:b], a, b) for a, b in spans]
    for match in _TOKEN.finditer(sentence):
        if any(a <= match.start() < b for a, b in spans):
            continue
        kind = _KINDS[match.lastgroup or "sym"]
        text = match.group()
        value = float(text.replace(",", "").replace("\u2212", "-")) if kind == "num" else 0.0
        tokens.append(_Token(kind, text, match.start(), match.end(), value))
    tokens.sort(key=lambda t: t.start)
    return tokens


def _glued(sentence: str, token: _Token) -> bool:
    """A number that is part of an identifier, version, unit or amount (`3h`, `v1.2`, `#4`)."""
    before = sentence[token.start - 1] if token.start > 0 else " "
    before2 = sentence[token.start - 2] if token.start > 1 else " "
    after = sentence[token.end : token.end + 2]
    if before.isalnum() or before == "_" or before in _CURRENCY:
        return True
    if (before == "-" and before2.isalpha()) or (before == "." and before2.isalnum()):
        return True
    if after[:1].isalpha() or after[:1] == "_":
        return True
    if after[:1] == "." and after[1:2].isdigit():
        return True
    return after[:1] == "%" or sentence[token.end :].startswith(" %")


def _word_at(tokens: list[_Token], index: int) -> str:
    if 0 <= index < len(tokens) and tokens[index].kind in ("word", "sym", "mention"):
        return tokens[index].text.lower()
    return ""


def _previous_word(tokens: list[_Token], index: int) -> tuple[str, int]:
    """The nearest word or comparison symbol before `index`, skipping fillers (a, of, =, :)."""
    i = index - 1
    while i >= 0 and _word_at(tokens, i) in _FILLER:
        i -= 1
    return _word_at(tokens, i), i


def _is_count(tokens: list[_Token], index: int, *, mention_counts: bool = True) -> bool:
    """`round 3`, `3 rounds`, `3 of 5`, `3/5`: a number that counts things, not the metric.

    A metric named like a count word (`epoch`) counts as one unless `mention_counts` is off.
    """
    at = index - 2 if _word_at(tokens, index - 1) in ("#", "=", ":") else index - 1
    if _word_at(tokens, at) in _COUNT_WORDS and (mention_counts or tokens[at].kind != "mention"):
        return True
    after = _word_at(tokens, index + 1)
    if after.split("-")[0] in _UNIT_WORDS:
        return True
    nxt = tokens[index + 2] if index + 2 < len(tokens) else None
    if after in ("of", "/") and nxt is not None and nxt.kind == "num":
        return True
    return _word_at(tokens, index - 1) == "/" and index >= 2 and tokens[index - 2].kind == "num"


def _bound(tokens: list[_Token], index: int) -> ClaimKind | None:
    """`below 0.5`, `less than 0.5`, `> 0.5`: the bound the number at `index` sets, if any."""
    word, at = _previous_word(tokens, index)
    if word == "than":
        word, at = _word_at(tokens, at - 1), at - 1
        kind: ClaimKind | None = (
            "below" if word in _THAN_BELOW else "above" if word in _THAN_ABOVE else None
        )
    else:
        kind = "below" if word in _BELOW else "above" if word in _ABOVE else None
    return kind if kind is None or not _negated(tokens, at) else None


def _negated(tokens: list[_Token], index: int) -> bool:
    """`never went above`, `did not fall below`: a negated bound (left unchecked)."""
    before = (_word_at(tokens, index - 1), _word_at(tokens, index - 2))
    return any(w in _NEGATIONS or w.endswith("n't") for w in before)


def _kind(tokens: list[_Token], index: int) -> ClaimKind | None:
    """Whether the number at `index` states a value, a difference or a bound (None: skip)."""
    word, _ = _previous_word(tokens, index)
    if word == "than" or word in _BELOW or word in _ABOVE:
        return _bound(tokens, index)
    if word in _DELTA_BEFORE or _word_at(tokens, index + 1) in _DELTA_AFTER:
        return "difference"
    return "value"


def _ends_window(tokens: list[_Token], index: int) -> bool:
    """A word naming another quantity: not a connector, and directly followed by a number."""
    word = tokens[index].text.lower()
    if word in _CONNECTORS or word in _COUNT_WORDS:
        return False
    if word.endswith(("ed", "ing")) and word not in _VERB_EXCEPTIONS:
        return False
    i = index + 1
    while i < len(tokens) and tokens[i].text.lower() in _BEFORE_VALUE:
        i += 1
    return i < len(tokens) and tokens[i].kind == "num"


def extract_claims(text: str, metric: str) -> list[tuple[float, str, ClaimKind, str]]:
    """Every numeric claim about `metric` in `text`: (value, as written, kind, sentence)."""
    found: list[tuple[float, str, ClaimKind, str]] = []
    for sentence in _SENTENCE_END.split(text):
        tokens = _tokens(sentence, metric)
        distance = -1  # -1: no open window
        for index, token in enumerate(tokens):
            if token.kind == "mention":
                distance = 0
                continue
            if distance < 0 or token.kind in ("sym", "skip"):
                continue
            distance += 1
            if distance > MAX_WINDOW or (token.kind == "word" and _ends_window(tokens, index)):
                distance = -1
                continue
            if token.kind != "num" or _glued(sentence, token) or _is_count(tokens, index):
                continue
            kind = _kind(tokens, index)
            if kind is not None:
                found.append((token.value, token.text, kind, _clip(sentence)))
    return found


def _numbers(sentence: str, metric: str) -> list[float]:
    """The numbers of a sentence that could state a value (not counts, ids or percentages)."""
    tokens = _tokens(sentence, metric)
    return [
        t.value
        for i, t in enumerate(tokens)
        if t.kind == "num"
        and not _glued(sentence, t)
        and not _is_count(tokens, i, mention_counts=False)
    ]


# ------------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class _Evidence:
    metric: str
    baseline: float | None
    values: list[Measurement]  # finite recorded values of the metric
    tolerance: float
    abs_epsilon: float


def _check_value(ev: _Evidence, value: float) -> tuple[bool, int | None, bool]:
    for m in ev.values:
        if _close(value, m.value, ev.tolerance, ev.abs_epsilon):
            return True, m.id, False
    if ev.baseline is not None and _close(value, ev.baseline, ev.tolerance, ev.abs_epsilon):
        return True, None, True
    return False, None, False


def _check_difference(ev: _Evidence, value: float) -> tuple[bool, int | None, bool]:
    if ev.baseline is None:
        return False, None, False
    for m in ev.values:
        if _close(abs(value), abs(ev.baseline - m.value), ev.tolerance, ev.abs_epsilon):
            return True, m.id, True
    return False, None, False


def _check_bound(ev: _Evidence, value: float, kind: ClaimKind) -> tuple[bool, int | None, bool]:
    slack = max(ev.tolerance * abs(value), ev.abs_epsilon)
    for m in ev.values:
        if (kind == "below" and m.value < value + slack) or (
            kind == "above" and m.value > value - slack
        ):
            return True, m.id, False
    return False, None, False


def _closest(ev: _Evidence, value: float, kind: ClaimKind) -> str:
    """The nearest recorded evidence, named for a mismatch message."""
    if kind == "difference":
        if ev.baseline is None or not ev.values:
            return f"no baseline and {ev.metric} to take a difference of"
        base = ev.baseline
        best = min(ev.values, key=lambda m: abs(abs(base - m.value) - abs(value)))
        delta = abs(base - best.value)
        return f"the closest change from the baseline is {delta:.6g} (measurement #{best.id})"
    if not ev.values:
        if ev.baseline is not None:
            return f"no {ev.metric} is recorded; the baseline is {_fmt(ev.baseline, ev.tolerance)}"
        return f"no {ev.metric} is recorded"
    if kind == "below":
        low = min(ev.values, key=lambda m: m.value)
        return f"the lowest recorded is {_fmt(low.value, ev.tolerance)} (measurement #{low.id})"
    if kind == "above":
        high = max(ev.values, key=lambda m: m.value)
        return f"the highest recorded is {_fmt(high.value, ev.tolerance)} (measurement #{high.id})"
    near = min(ev.values, key=lambda m: abs(m.value - value))
    text = f"the closest recorded is {_fmt(near.value, ev.tolerance)} (measurement #{near.id})"
    if ev.baseline is not None and abs(ev.baseline - value) < abs(near.value - value):
        text = f"the closest recorded is the baseline {_fmt(ev.baseline, ev.tolerance)}"
    return text


def _judge(ev: _Evidence, value: float, written: str, kind: ClaimKind, sentence: str) -> Claim:
    if kind == "value":
        ok, mid, base = _check_value(ev, value)
    elif kind == "difference":
        ok, mid, base = _check_difference(ev, value)
    else:
        ok, mid, base = _check_bound(ev, value, kind)
    return Claim(value, written, kind, sentence, ok, mid, base)


def _mismatch(ev: _Evidence, claim: Claim) -> str:
    what = {
        "value": f"{ev.metric} {claim.written}",
        "difference": f"a change of {claim.written} in {ev.metric}",
        "below": f"{ev.metric} below {claim.written}",
        "above": f"{ev.metric} above {claim.written}",
    }[claim.kind]
    return (
        f"the report claims {what} (“{claim.sentence}”), which no recorded {ev.metric} "
        f"supports within the relative tolerance {ev.tolerance:g}: "
        f"{_closest(ev, claim.value, claim.kind)}"
    )


def first_value(measurements: Sequence[Measurement], metric: str) -> Measurement | None:
    """The first recorded measurement of `metric` (the baseline when none was given)."""
    own = [m for m in measurements if m.name == metric]
    return min(own, key=lambda m: m.id) if own else None


def states_baseline(
    text: str,
    baseline: float,
    *,
    metric: str = "\x00",
    tolerance: float = 1e-3,
    abs_epsilon: float = 1e-9,
) -> bool:
    """Whether a sentence that speaks of the baseline (or a start) gives its number."""
    return any(
        _close(number, baseline, tolerance, abs_epsilon)
        for sentence in _SENTENCE_END.split(text)
        if _BASELINE_WORDS.search(sentence)
        for number in _numbers(sentence, metric)
    )


def check_report(
    text: str,
    *,
    metric: str,
    baseline: float | None,
    measurements: Sequence[Measurement],
    tolerance: float = 1e-3,
    abs_epsilon: float = 1e-9,
) -> GateResult:
    """Accept the closing report, or reject it with the mismatches (see the module rules)."""
    first = first_value(measurements, metric)
    base = baseline if baseline is not None else (first.value if first is not None else None)
    if base is not None and not math.isfinite(base):
        base = None  # a NaN first value cannot be stated; the rule is waived
    ev = _Evidence(
        metric,
        base,
        [m for m in measurements if m.name == metric and math.isfinite(m.value)],
        tolerance,
        abs_epsilon,
    )
    mismatches: list[str] = []
    if base is not None and not states_baseline(
        text, base, metric=metric, tolerance=tolerance, abs_epsilon=abs_epsilon
    ):
        source = f", the first measurement #{first.id}" if baseline is None and first else ""
        mismatches.append(
            f"the report does not state the baseline ({metric} {_fmt(base, tolerance)}{source}): "
            "say it in a sentence with the word baseline, e.g. "
            f"“Baseline {metric}: {_fmt(base, tolerance)}.”"
        )
    claims = [_judge(ev, *found) for found in extract_claims(text, metric)]
    mismatches += [_mismatch(ev, c) for c in claims if not c.ok]
    return GateResult(not mismatches, mismatches, claims, base)


# ------------------------------------------------------------------------------- draft


def format_duration(seconds: float) -> str:
    """`1h12m`, `45m`, `30s`, `2d3h`: whole units, the smallest dropped above an hour."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m")]
    if total < 3600:
        parts.append((secs, "s"))
    text = "".join(f"{n}{unit}" for n, unit in parts if n)
    return text or "0s"


# How a round ended, by its wake reason (else its recorded state), as words in a sentence.
_ENDED: Mapping[str, str] = MappingProxyType(
    {
        "finished": "finished",
        "died": "died",
        "vanished": "vanished without an exit code",
        "stalled": "stalled",
        "diverged": "diverged",
        "budget": "was stopped when the budget ran out",
        "scheduled": "was running at its scheduled wake-up",
        "submitting": "was being submitted",
        "running": "was still running",
        "ended": "was stopped",
        "failed": "could not start",
    }
)


def _round_line(rounds: Sequence[RoundSummary]) -> str:
    if not rounds:
        return "Rounds: none ran."
    # Consecutive rounds that ended alike are one part (`rounds 1–14 finished (exit code 0)`):
    # a campaign of many rounds reads in one line.
    runs: list[tuple[int, int, str]] = []
    for r in sorted(rounds, key=lambda r: r.round):
        key = r.wake_reason or (r.state or "running")
        code = f" (exit code {r.exit_code})" if r.exit_code is not None else ""
        ended = f"{_ENDED.get(key, key)}{code}"
        if runs and runs[-1][2] == ended and runs[-1][1] == r.round - 1:
            runs[-1] = (runs[-1][0], r.round, ended)
        else:
            runs.append((r.round, r.round, ended))
    parts = [
        f"round {first} {ended}" if first == last else f"rounds {first}–{last} {ended}"
        for first, last, ended in runs
    ]
    return "Rounds: " + "; ".join(parts) + "."


def _budget_line(
    rounds: int, wall_used_seconds: float, compute_used_minutes: float | None, budget: Budget | None
) -> str:
    wall = format_duration(wall_used_seconds)
    if budget is not None:
        wall += f" of {format_duration(budget.wall_seconds)}"
    count = f"{rounds} of {budget.rounds} rounds" if budget is not None else f"{rounds} rounds"
    text = f"Budget used: {wall} wall clock, {count}"
    if compute_used_minutes is not None:
        text += f", {format_duration(compute_used_minutes * 60)} compute"
    return text + "."


def _value_lines(
    metric: str,
    direction: Direction,
    baseline: float | None,
    measurements: Sequence[Measurement],
    tolerance: float,
) -> list[str]:
    own = sorted((m for m in measurements if m.name == metric), key=lambda m: m.id)
    first = own[0] if own else None
    if baseline is not None:
        lines = [
            f"Baseline {metric}: {_fmt(baseline, tolerance)} (the campaign's recorded baseline)."
        ]
    elif first is not None and math.isfinite(first.value):
        lines = [
            f"Baseline {metric}: {_fmt(first.value, tolerance)} "
            f"(none was given: the first measurement, #{first.id} in round {first.round})."
        ]
    else:
        lines = [f"Baseline {metric}: none recorded."]
    finite = [m for m in own if math.isfinite(m.value)]
    if not own:
        return [*lines, f"No {metric} was measured."]
    if finite:
        pick = min if direction == "min" else max
        best = pick(finite, key=lambda m: m.value)
        better = "lower" if direction == "min" else "higher"
        lines.append(
            f"Best {metric}: {_fmt(best.value, tolerance)} (measurement #{best.id}, "
            f"round {best.round}); "
            f"{better} is better."
        )
    last = own[-1]
    lines.append(
        f"Last {metric}: {_fmt(last.value, tolerance)} (measurement #{last.id}, "
        f"round {last.round})."
    )
    return lines


def draft_report(
    *,
    metric: str,
    direction: Direction,
    baseline: float | None,
    measurements: Sequence[Measurement],
    rounds: Sequence[RoundSummary],
    wall_used_seconds: float,
    compute_used_minutes: float | None = None,
    budget: Budget | None = None,
    outcome: str = "",
    tolerance: float = 1e-3,
) -> str:
    """A factual closing report from the record; it passes `check_report` (at `tolerance`)
    by construction.

    `outcome` is one sentence on why the campaign ends; it must make no numeric claim about
    the metric (the policy's sentences name measurements by id only).
    """
    lines = [outcome.strip() or "Campaign report."]
    lines += _value_lines(metric, direction, baseline, measurements, tolerance)
    lines.append(_round_line(rounds))
    lines.append(_budget_line(len(rounds), wall_used_seconds, compute_used_minutes, budget))
    return "\n".join(lines)
