"""A campaign's metric `pattern` runs on RE2: a catastrophic one meets a long output line and
the reader goes on; one RE2 refuses is refused when the campaign is proposed (chat, the Host's
tool, `campaigns run --pattern`), naming what is unsupported and how to write it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agents.campaign_syntax import parse_campaign
from bot.cli.campaign_run import run_spec
from bot.cli.parsers import parser
from host.features.oncall.tools import StartCampaignInput, campaign_spec
from oncall.metrics import MetricReader
from oncall.model import MetricSpec
from oncall.monitor import Observation, RoundWatch
from tests.liveness import returns_within
from tests.oncall_kit import CONV, oncall_kit, spec

LINE = (
    "campaign: tune | machine: local | run: python train.py | metric: loss min | budget: 2h"
    " | pattern: "
)


def test_a_catastrophic_campaign_pattern_meets_a_long_line_and_reads_on() -> None:
    reader = MetricReader(MetricSpec(name="loss", pattern=r"^(?:a+)+loss=(\S+)$"))
    with returns_within():
        assert reader.feed(b"a" * 16_000 + b"!\n") == []
        (value,) = reader.feed(b"aaaloss=0.25\n")
    assert value.value == 0.25 and value.line == "aaaloss=0.25"


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (r"(?<=loss=)(\S+)", "a lookbehind `(?<=…)`"),
        (r"(loss)=\1(\S+)", "a backreference `\\1`"),
        (r"loss=(\S++)", "a possessive quantifier `++`"),
    ],
)
def test_a_campaign_line_with_what_re2_cannot_do_is_refused_naming_it(
    pattern: str, named: str
) -> None:
    fields = parse_campaign(LINE + pattern)
    assert fields is not None
    with pytest.raises(ValueError) as refused:
        campaign_spec(StartCampaignInput(**fields))
    said = str(refused.value)
    assert f"`pattern`: the pattern `{pattern}`: {named} is not supported by RE2" in said, said
    assert "The syntax is:" in said


def test_campaigns_run_refuses_the_pattern_by_its_flag() -> None:
    args = parser().parse_args(
        [
            *("campaigns", "run", "--goal", "g", "--run", "python train.py"),
            *("--metric", "loss:min", "--budget", "2h", "--pattern", r"loss(?=:)=(\S+)"),
        ]
    )
    with pytest.raises(ValueError) as refused:
        run_spec(args)
    said = str(refused.value)
    assert said.startswith("--pattern: the pattern `loss(?=:)=(\\S+)`: a lookahead"), said
    assert "is not supported by RE2" in said


async def test_a_round_is_read_with_its_pattern_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Witness only: the real observe runs, and notes the thread it runs in.
    readers: set[int] = set()
    observe = RoundWatch.observe

    def witnessed(watch: RoundWatch, *args: object, **kwargs: object) -> Observation:
        readers.add(threading.get_ident())
        return observe(watch, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(RoundWatch, "observe", witnessed)
    command = "printf 'a%.0s' $(seq 16000); echo '!'; echo aaaloss=0.25"
    metric = MetricSpec(name="loss", pattern=r"^(?:a+)+loss=(\S+)$")
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start("U1", CONV, spec(command, metric=metric))
        final = await kit.until_final(record.id)
        values = [m.value for m in await kit.campaigns.measurements(record.id)]
    assert final.state == "closed" and values == [0.25]
    assert readers and threading.get_ident() not in readers
