"""What a standing check line says: its command, machine and condition, each wrong part
refused with what is wrong and the syntax."""

from __future__ import annotations

import pytest

from host.features.schedules.line import ScheduleError
from host.features.schedules.work import parse_check
from oncall.probe import ProbeResult


def test_fields_come_in_any_order_after_a_command_that_may_hold_pipes() -> None:
    check = parse_check("check: df -h | grep /data | when: disk >= 90 | machine: gpu-1")
    assert check is not None
    assert check.command == "df -h | grep /data" and check.machine == "gpu-1"
    assert str(check.threshold) == "disk >= 90"


def test_a_named_metric_with_its_own_pattern() -> None:
    check = parse_check(r"check: nvidia-smi | metric: gpu /GPU (\d+)C/ | when: gpu > 80")
    assert check is not None and check.threshold is not None
    assert check.verdict(ProbeResult(0, "GPU 79C\nGPU 83C\n")) == (
        "tripped",
        "gpu is 83 (gpu > 80)",
    )
    assert check.verdict(ProbeResult(0, "GPU 70C\n")) == ("passing", "")
    assert check.verdict(ProbeResult(0, "no gpu\n"))[1] == "it printed no `gpu` value"
    # A failing command trips it whatever it printed.
    assert check.verdict(ProbeResult(3, "GPU 70C\n")) == ("tripped", "its command exited with 3")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("check: true | when: x > 1 | when: x > 2", "`when:` is given twice"),
        ("check: true | metric: temp | when: load > 1", "`when:` compares `load` but `metric:`"),
        ("check: true | metric: temp", "`when: fails` is not a condition on a metric"),
        ("check: true | when: temp > hot", "`when: temp > hot` is not a condition"),
        ("check: true | metric: t /no group/ | when: t > 1", "one capture group"),
        ("check: true | machine: a b", "`machine: a b` is not a machine name"),
    ],
)
def test_a_wrong_check_says_what_is_wrong_and_the_syntax(line: str, said: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_check(line)
    assert said in str(caught.value) and "watch: every 30m | check: COMMAND" in str(caught.value)
