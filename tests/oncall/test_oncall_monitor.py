"""oncall.metrics and oncall.monitor: parsing output chunk by chunk, and the round watcher."""

from __future__ import annotations

import json
import math
import random

import pytest

from oncall.metrics import (
    MAX_SOURCE_CHARS,
    TRUNCATED_MARKER,
    MetricReader,
    ParsedValue,
    clip_line,
    parse_number,
)
from oncall.model import Budget, CampaignSpec, JobStatus, MetricSpec
from oncall.monitor import RoundWatch

LOSS = MetricSpec(name="loss")
RUNNING = JobStatus(state="running")


def _values(parsed: list[ParsedValue]) -> list[float]:
    return [p.value for p in parsed]


def _feed_split(spec: MetricSpec, data: bytes, cuts: list[int]) -> list[ParsedValue]:
    reader = MetricReader(spec)
    out: list[ParsedValue] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        out += reader.feed(data[start:cut])
        start = cut
    return out + reader.flush()


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True)
    )


# --- parse_number ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.42", 0.42),
        ("4.2e-1", 0.42),
        ("-3", -3.0),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("0.42,", 0.42),
        ("1.5)", 1.5),
        (" 7 ", 7.0),
    ],
)
def test_parse_number_accepts_numbers_and_specials(text: str, expected: float) -> None:
    assert parse_number(text) == expected


def test_parse_number_nan_and_garbage() -> None:
    value = parse_number("nan")
    assert value is not None and math.isnan(value)
    assert parse_number("abc") is None
    assert parse_number("") is None
    assert parse_number("1.2.3") is None


# --- MetricReader: regex ---------------------------------------------------------------


def test_default_pattern_reads_each_line() -> None:
    reader = MetricReader(LOSS)
    got = reader.feed(b"step 1 loss=0.9\nstep 2 loss: 0.8\nstep 3 loss 0.7\nno metric here\n")
    assert _values(got) == [0.9, 0.8, 0.7]
    assert got[0] == ParsedValue("loss", 0.9, "step 1 loss=0.9")


def test_default_pattern_ignores_other_metrics_with_the_name_inside() -> None:
    reader = MetricReader(LOSS)
    assert _values(reader.feed(b"val_loss=0.5\nloss_scale 128\nloss 0.3 val_loss 0.5\n")) == [0.3]


def test_nan_and_inf_are_values_not_errors() -> None:
    got = _values(MetricReader(LOSS).feed(b"loss nan\nloss inf\nloss -inf\n"))
    assert math.isnan(got[0]) and got[1] == math.inf and got[2] == -math.inf


def test_unparsable_numbers_are_skipped() -> None:
    spec = MetricSpec(name="loss", pattern=r"loss=(\S+)")
    assert _values(MetricReader(spec).feed(b"loss=abc\nloss=0.5,\nloss=--\nloss=1e-3\n")) == [
        0.5,
        0.001,
    ]


def test_line_split_between_chunks_is_parsed_once_whole() -> None:
    reader = MetricReader(LOSS)
    assert reader.feed(b"loss 0.1") == []  # might continue: 0.1234
    assert reader.pending == b"loss 0.1"
    assert _values(reader.feed(b"234\n")) == [0.1234]
    assert reader.pending == b""


def test_utf8_sequence_split_between_chunks_decodes_whole() -> None:
    data = "époque ✓ loss 0.5\n".encode()
    for cut in range(len(data) + 1):
        got = _feed_split(LOSS, data, [cut])
        assert [p.line for p in got] == ["époque ✓ loss 0.5"], cut


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    got = MetricReader(LOSS).feed(b"\xff\xfe loss 0.25\n")
    assert _values(got) == [0.25] and "\ufffd" in got[0].line


def test_carriage_return_progress_bar_counts_last_segment() -> None:
    data = b"10%|#  | loss=0.9\r50%|## | loss=0.5\r100%|###| loss=0.2\n"
    assert _values(MetricReader(LOSS).feed(data)) == [0.2]


def test_crlf_line_endings() -> None:
    assert _values(MetricReader(LOSS).feed(b"loss 0.5\r\nloss 0.4\r\n")) == [0.5, 0.4]


def test_carriage_return_without_newline_keeps_buffer_small() -> None:
    reader = MetricReader(LOSS)
    for step in range(10_000):
        reader.feed(f"\r{step} it loss={1 / (step + 1):.4f}".encode())
    assert len(reader.pending) < 100
    assert _values(reader.flush()) == [0.0001]


def test_flush_parses_last_unterminated_line_once() -> None:
    reader = MetricReader(LOSS)
    reader.feed(b"loss 0.5\nloss 0.4")
    assert _values(reader.flush()) == [0.4]
    assert reader.flush() == []


def test_any_split_point_gives_the_same_values() -> None:
    text = (
        "start\nloss 0.9\r\nstep 2 loss=0.8 ✓\n"
        '{"loss": 0.7}\n10%| loss=0.65\r90%| loss=0.6\nloss nan\nlöss 1\nloss 0.55'
    )
    data = text.encode()
    whole = _values(_feed_split(LOSS, data, []))
    assert _same(whole, [0.9, 0.8, 0.6, math.nan, 0.55])
    for cut in range(len(data) + 1):
        assert _same(_values(_feed_split(LOSS, data, [cut])), whole), cut
    rng = random.Random(7)
    for _ in range(300):
        cuts = [rng.randrange(len(data) + 1) for _ in range(rng.randrange(1, 8))]
        assert _same(_values(_feed_split(LOSS, data, cuts)), whole), cuts


def test_byte_by_byte_feed_matches_whole_feed() -> None:
    data = b"".join(f"\rit {i} loss={i / 10}\n".encode() for i in range(50))
    assert _values(_feed_split(LOSS, data, list(range(len(data))))) == [i / 10 for i in range(50)]


# --- MetricReader: JSON lines ------------------------------------------------------------


JSON_LOSS = MetricSpec(name="loss", json_key="loss")


def test_json_lines_with_numbers_and_special_strings() -> None:
    lines = [
        {"step": 1, "loss": 0.9},
        {"step": 2, "loss": 1},
        {"step": 3, "loss": "nan"},
        {"step": 4, "loss": "inf"},
        {"step": 5, "loss": "-inf"},
        {"step": 6, "loss": "0.3"},  # a numeric string is not a number in JSON
        {"step": 7, "loss": True},
        {"step": 8, "acc": 0.5},
        {"step": 9, "loss": None},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    got = _values(MetricReader(JSON_LOSS).feed(data + b"not json\n[1, 2]\n{broken\n"))
    assert got[:2] == [0.9, 1.0] and math.isnan(got[2]) and got[3:] == [math.inf, -math.inf]


def test_json_bare_nan_literal_and_dotted_key() -> None:
    nested = MetricSpec(name="loss", json_key="metrics.loss")
    assert _values(MetricReader(nested).feed(b'{"metrics": {"loss": 0.25}}\n')) == [0.25]
    assert math.isnan(MetricReader(JSON_LOSS).feed(b'{"loss": NaN}\n')[0].value)


def test_json_key_with_explicit_pattern_tries_both() -> None:
    both = MetricSpec(name="loss", json_key="loss", pattern=r"loss=(\S+)")
    assert _values(MetricReader(both).feed(b'{"loss": 0.5}\nloss=0.4\n')) == [0.5, 0.4]
    assert MetricReader(JSON_LOSS).feed(b"loss=0.4\n") == []


# --- MetricReader: bounds ----------------------------------------------------------------


def test_ten_megabyte_line_without_newline_is_capped() -> None:
    reader = MetricReader(LOSS, max_line_bytes=64 * 1024)
    reader.feed(b"loss 0.5 " + b"x" * 100)
    chunk = b"y" * 65536
    for _ in range(160):  # 10 MiB
        assert reader.feed(chunk) == []
        assert len(reader.pending) <= 64 * 1024
    assert reader.truncated and reader.dropping
    assert reader.dropped_bytes > 10 * 1024 * 1024 - 64 * 1024
    got = reader.feed(b"zzz\nloss 0.4\n")
    assert _values(got) == [0.5, 0.4]
    assert got[0].line.endswith(TRUNCATED_MARKER) or got[0].line.endswith("…")
    assert len(got[0].line) <= MAX_SOURCE_CHARS
    assert not reader.truncated and reader.pending == b""


def test_capped_line_marker_is_kept_in_the_line() -> None:
    reader = MetricReader(LOSS, max_line_bytes=50)
    assert reader.feed(b"loss 0.5 " + b"x" * 100) == []
    got = reader.feed(b"x" * 100 + b"\n")
    assert got[0].line == "loss 0.5 " + "x" * 41 + TRUNCATED_MARKER


def test_a_complete_long_line_in_one_chunk_is_parsed_whole() -> None:
    # The cap bounds what is *kept* between chunks; a line already in memory is just clipped.
    got = MetricReader(LOSS, max_line_bytes=50).feed(b"x" * 100 + b" loss 0.5\n")
    assert got[0].value == 0.5


def test_over_long_segment_rewritten_by_carriage_return_is_not_marked() -> None:
    reader = MetricReader(LOSS, max_line_bytes=50)
    reader.feed(b"x" * 200)
    got = reader.feed(b"\rloss 0.3\n")
    assert got == [ParsedValue("loss", 0.3, "loss 0.3")]


def test_clip_line_keeps_the_value_in_view() -> None:
    long_line = "x" * 2000 + " loss=0.123 " + "y" * 2000
    start = long_line.index("0.123")
    clipped = clip_line(long_line, start, start + 5)
    assert len(clipped) <= MAX_SOURCE_CHARS and "loss=0.123" in clipped
    assert clip_line("short") == "short"
    head = clip_line("loss 1 " + "z" * 1000, 5, 6)
    assert head.startswith("loss 1") and len(head) <= MAX_SOURCE_CHARS
    got = MetricReader(LOSS).feed(long_line.encode() + b"\n")
    assert got[0].value == 0.123 and "loss=0.123" in got[0].line


# --- RoundWatch ----------------------------------------------------------------------------


def _spec(**overrides: object) -> CampaignSpec:
    fields: dict[str, object] = {
        "goal": "train",
        "command": "python train.py",
        "metric": LOSS,
        "budget": Budget(wall_seconds=3600),
        "stall_seconds": 60.0,
    }
    fields.update(overrides)
    return CampaignSpec.model_validate(fields)


def test_watch_returns_values_and_tracks_offset() -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=100.0)
    obs = watch.observe(105.0, b"loss 0.9\nloss 0.8\nlo", RUNNING)
    assert _values(list(obs.values)) == [0.9, 0.8] and obs.wake is None
    assert watch.offset == len(b"loss 0.9\nloss 0.8\nlo")
    obs = watch.observe(110.0, b"ss 0.7\n", RUNNING)
    assert _values(list(obs.values)) == [0.7]
    assert watch.offset == len(b"loss 0.9\nloss 0.8\nloss 0.7\n")


def test_finished_on_exit_zero_flushes_last_line() -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=0.0)
    watch.observe(1.0, b"loss 0.5\nloss 0.4", RUNNING)
    obs = watch.observe(2.0, b"", JobStatus(state="exited", exit_code=0))
    assert obs.wake == "finished" and _values(list(obs.values)) == [0.4]
    again = watch.observe(3.0, b"", JobStatus(state="exited", exit_code=0))
    assert again.wake == "finished" and again.values == ()


@pytest.mark.parametrize("code", [1, 137, -9, None])
def test_died_on_nonzero_or_missing_exit_code(code: int | None) -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=0.0)
    obs = watch.observe(1.0, b"", JobStatus(state="exited", exit_code=code))
    assert obs.wake == "died"
    assert ("no exit code" if code is None else f"exit code {code}") in obs.detail


def test_vanished() -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=0.0)
    obs = watch.observe(1.0, b"", JobStatus(state="vanished", detail="pid 42 gone"))
    assert obs.wake == "vanished" and "pid 42 gone" in obs.detail


def test_nan_diverges_once_per_round() -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=0.0)
    obs = watch.observe(1.0, b"loss 0.5\nloss nan\n", RUNNING)
    assert obs.wake == "diverged" and obs.detail == "loss became nan"
    assert watch.observe(2.0, b"loss nan\n", RUNNING).wake is None


def test_inf_diverges_even_as_first_value() -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=0.0)
    obs = watch.observe(1.0, b"loss inf\n", RUNNING)
    assert obs.wake == "diverged" and watch.reference is None


def test_finish_outranks_divergence() -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=0.0)
    obs = watch.observe(1.0, b"loss nan\n", JobStatus(state="exited", exit_code=0))
    assert obs.wake == "finished"


def test_died_outranks_divergence_and_stall() -> None:
    watch = RoundWatch(_spec(), baseline=None, started_at=0.0)
    obs = watch.observe(1000.0, b"loss nan\n", JobStatus(state="exited", exit_code=1))
    assert obs.wake == "died"


def test_baseline_margin_divergence_when_minimising() -> None:
    watch = RoundWatch(_spec(divergence_margin=0.5), baseline=1.0, started_at=0.0)
    assert watch.observe(1.0, b"loss 1.5\n", RUNNING).wake is None  # exactly the margin
    obs = watch.observe(2.0, b"loss 1.51\n", RUNNING)
    assert obs.wake == "diverged"
    assert obs.detail == "loss=1.51 is worse than the baseline 1 by more than the margin 0.5"


def test_lower_values_never_diverge_when_minimising() -> None:
    watch = RoundWatch(_spec(divergence_margin=0.1), baseline=1.0, started_at=0.0)
    assert watch.observe(1.0, b"loss -100\nloss 0.01\n", RUNNING).wake is None


def test_baseline_margin_divergence_when_maximising() -> None:
    acc = MetricSpec(name="acc")
    watch = RoundWatch(
        _spec(metric=acc, direction="max", divergence_margin=5.0), baseline=80.0, started_at=0.0
    )
    assert watch.observe(1.0, b"acc 99\nacc 75\n", RUNNING).wake is None
    obs = watch.observe(2.0, b"acc 74.9\n", RUNNING)
    assert obs.wake == "diverged" and "worse than the baseline 80" in obs.detail


def test_without_baseline_the_first_value_is_the_reference() -> None:
    watch = RoundWatch(_spec(divergence_margin=0.2), baseline=None, started_at=0.0)
    assert watch.observe(1.0, b"loss 2.0\nloss 2.1\n", RUNNING).wake is None
    assert watch.reference == 2.0
    obs = watch.observe(2.0, b"loss 2.3\n", RUNNING)
    assert obs.wake == "diverged" and "the round's first value 2" in obs.detail


def test_without_margin_only_non_finite_values_diverge() -> None:
    watch = RoundWatch(_spec(), baseline=1.0, started_at=0.0)
    assert watch.observe(1.0, b"loss 1000\n", RUNNING).wake is None


def test_stall_timing_with_a_fake_clock() -> None:
    watch = RoundWatch(_spec(stall_seconds=60.0), baseline=None, started_at=1000.0)
    assert watch.observe(1059.9, b"", RUNNING).wake is None
    obs = watch.observe(1060.0, b"", RUNNING)
    assert obs.wake == "stalled" and "no new output for 60 s" in obs.detail
    assert watch.observe(1100.0, b"", RUNNING).wake is None  # reported once per silence
    assert watch.observe(1101.0, b"loss 0.5\n", RUNNING).wake is None  # output re-arms
    assert watch.last_output_at == 1101.0
    assert watch.observe(1160.0, b"", RUNNING).wake is None
    assert watch.observe(1161.0, b"", RUNNING).wake == "stalled"


def test_any_output_counts_against_a_stall_even_without_a_metric() -> None:
    watch = RoundWatch(_spec(stall_seconds=10.0), baseline=None, started_at=0.0)
    for t in range(5, 100, 5):
        assert watch.observe(float(t), b"still working...\n", RUNNING).wake is None


def test_unknown_status_counts_as_running() -> None:
    watch = RoundWatch(_spec(stall_seconds=10.0), baseline=None, started_at=0.0)
    assert watch.observe(5.0, b"loss 1\n", JobStatus(state="unknown")).wake is None
    assert watch.observe(15.0, b"", JobStatus(state="unknown")).wake == "stalled"


def test_state_is_json_and_restore_resumes_mid_line() -> None:
    spec = _spec(divergence_margin=0.5, stall_seconds=30.0)
    watch = RoundWatch(spec, baseline=None, started_at=0.0)
    watch.observe(10.0, b"loss 1.0\nloss 0.9\nloss 0.8", RUNNING)
    state = json.loads(json.dumps(watch.state()))
    resumed = RoundWatch.restore(spec, state)
    assert resumed.offset == watch.offset and resumed.reference == 1.0
    assert resumed.last_output_at == 10.0
    obs = resumed.observe(20.0, b"5\nloss 1.6\n", RUNNING)
    assert _values(list(obs.values)) == [0.85, 1.6] and obs.wake == "diverged"
    assert RoundWatch.restore(spec, resumed.state()).observe(50.0, b"", RUNNING).wake == "stalled"


def test_restore_keeps_reported_flags_and_partial_utf8() -> None:
    spec = _spec(stall_seconds=30.0)
    watch = RoundWatch(spec, baseline=0.5, started_at=0.0)
    data = "ü loss 0.25\n".encode()
    watch.observe(1.0, b"loss nan\n" + data[:1], RUNNING)
    assert watch.observe(40.0, b"", RUNNING).wake == "stalled"
    resumed = RoundWatch.restore(spec, json.loads(json.dumps(watch.state())))
    assert resumed.observe(41.0, b"", RUNNING).wake is None  # stall already reported
    obs = resumed.observe(42.0, data[1:] + b"loss nan\n", RUNNING)
    assert next(p.line for p in obs.values) == "ü loss 0.25"
    assert obs.wake is None  # divergence already reported this round


def test_restore_equals_uninterrupted_at_every_split() -> None:
    spec = _spec(divergence_margin=0.3)
    data = b"loss 1.0\n\r10% loss=0.9\r20% loss=0.8\nloss 1.2\nloss 1.31\nloss 0.7"
    straight = RoundWatch(spec, baseline=None, started_at=0.0)
    want = _values(list(straight.observe(1.0, data, RUNNING).values))
    want += _values(list(straight.observe(2.0, b"", JobStatus(state="exited", exit_code=0)).values))
    for cut in range(len(data) + 1):
        watch = RoundWatch(spec, baseline=None, started_at=0.0)
        got = _values(list(watch.observe(1.0, data[:cut], RUNNING).values))
        resumed = RoundWatch.restore(spec, json.loads(json.dumps(watch.state())))
        got += _values(list(resumed.observe(1.5, data[cut:], RUNNING).values))
        end = resumed.observe(2.0, b"", JobStatus(state="exited", exit_code=0))
        got += _values(list(end.values))
        assert got == want, cut
        assert resumed.offset == len(data)


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"version": 2},
        {"version": 1, "offset": 0},
        {"version": 1, "offset": "x", "started_at": 0},
    ],
)
def test_restore_refuses_malformed_state(state: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RoundWatch.restore(_spec(), state)


def test_restore_refuses_bad_pending_encoding() -> None:
    state = RoundWatch(_spec(), baseline=None, started_at=0.0).state()
    state["pending"] = "not base64!!"
    with pytest.raises(ValueError, match="malformed"):
        RoundWatch.restore(_spec(), state)
