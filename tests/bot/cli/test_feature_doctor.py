"""doctor asks every capability for its own checks (`Feature.doctor`): a new feature's
findings appear without a line in bot/cli/, with its settings section as `run` reads it,
and one capability's broken check hides no other's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from bot.app import FEATURES
from bot.cli import doctor
from bot.settings import load_settings
from host.features.feature import BaseFeature, DoctorCheck, DoctorParts


@dataclass(frozen=True)
class PagerSection:
    """Named as in Settings: the model key's presence stands in for a real setting."""

    log_level: str


class PagerFeature(BaseFeature):
    Section: ClassVar[type[PagerSection]] = PagerSection

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: PagerSection) -> Sequence[DoctorCheck]:
        where = parts.home / "pager.toml"
        return (DoctorCheck("pager", "warn", f"{where} absent; log level {section.log_level}"),)


class BrokenFeature(BaseFeature):
    Section: ClassVar[type[PagerSection]] = PagerSection

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: PagerSection) -> Sequence[DoctorCheck]:
        raise RuntimeError("probe exploded")


async def test_a_new_feature_reports_through_its_own_check(isolated_env: Path) -> None:
    checks = await doctor._check_features(load_settings(), (*FEATURES, PagerFeature))
    names = [c.name for c in checks]
    # The bot's own capabilities first, then the new one.
    assert {"permissions", "skills", "mcp"} <= set(names[:-1])
    pager = checks[-1]
    assert (pager.name, pager.level) == ("pager", "warn")
    assert pager.detail == f"{isolated_env / 'pager.toml'} absent; log level INFO"


async def test_a_broken_check_fails_its_own_line_and_hides_no_other(isolated_env: Path) -> None:
    checks = await doctor._check_features(load_settings(), (BrokenFeature, PagerFeature))
    assert [(c.name, c.level) for c in checks] == [("broken", "fail"), ("pager", "warn")]
    assert "probe exploded" in checks[0].detail


def test_doctor_runs_the_feature_checks() -> None:
    assert doctor._check_features in doctor.CHECKS
