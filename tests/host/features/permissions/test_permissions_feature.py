"""Permissions as a feature: its rules file checked before anything is built, its tables
made by its own migrations, and the gates every run passes provided by it alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import FEATURES, build_runtime
from bot.schema import all_migrations
from bot.settings import load_settings
from core.errors import ConfigError
from core.ids import ConversationRef
from host.features.permissions.feature import PermissionsFeature
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows

BROKEN_RULES = '[default]\nmode = "sometimes"\n'
CONV = ConversationRef("console", "local", "c1", "t1")


def files_in(home: Path) -> set[str]:
    return {p.name for p in home.iterdir()}


def write_rules(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "permissions.toml").write_text(text)


def test_a_missing_or_valid_rules_file_passes_the_preflight(tmp_path: Path) -> None:
    PermissionsFeature.preflight(tmp_path)
    (tmp_path / "permissions.toml").write_text('[default]\nmode = "full-access"\n')
    PermissionsFeature.preflight(tmp_path)


def test_a_broken_rules_file_fails_the_preflight_with_doctors_line(tmp_path: Path) -> None:
    rules = tmp_path / "permissions.toml"
    rules.write_text(BROKEN_RULES)
    with pytest.raises(ConfigError) as caught:
        PermissionsFeature.preflight(tmp_path)
    said = str(caught.value)
    assert str(rules) in said and "'sometimes' is not a mode" in said
    assert "\n" not in said


async def test_a_broken_rules_file_stops_the_start_before_anything_is_built(
    isolated_env: Path,
) -> None:
    write_rules(isolated_env, BROKEN_RULES)
    built: list[FakeChatAdapter] = []

    def adapter() -> FakeChatAdapter:
        built.append(FakeChatAdapter())
        return built[-1]

    with pytest.raises(ConfigError, match="'sometimes' is not a mode"):
        await build_runtime(load_settings(), [adapter])
    assert built == []
    assert "raven.db" not in files_in(isolated_env)


async def test_the_feature_owns_its_tables_and_gives_runs_their_gates(isolated_env: Path) -> None:
    assert PermissionsFeature in FEATURES
    packages = {m.package for m in all_migrations()}
    assert "permissions" in packages
    assert "permissions" not in {m.package for m in all_migrations(())}

    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        gates = runtime.feature(PermissionsFeature).permit_factory()
        assert gates is not None
        # A gate that cannot ask denies an "ask" call, and the decision is audited in the
        # feature's own table of the runtime's database.
        decision = await gates(CONV, "U1", None)("run_shell", "rm -rf build")
        assert not decision.allowed
    finally:
        await runtime.lifecycle.aclose()
    rows = db_rows(isolated_env, "SELECT tool, subject, allowed FROM permission_audit")
    assert rows == [("run_shell", "rm -rf build", 0)]


async def test_a_runtime_without_permission_gates_is_refused(isolated_env: Path) -> None:
    without = tuple(k for k in FEATURES if k is not PermissionsFeature)
    with pytest.raises(RuntimeError, match="no installed feature provides permission gates"):
        await build_runtime(load_settings(), [FakeChatAdapter], without)
